"""What the generator tests share: a generator's context for an example (or any spec and source), and spec edits."""
from __future__ import annotations

from pathlib import Path

from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import Candidate, LaunchConfig, load_spec
from ptxfactory.search.base import GenContext

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_ctx(example: str | Path, kernel: str | None = None, spec=None, source: str | None = None,
                options=()) -> GenContext:
    """The context a generator sees for the original kernel: ``example`` is an example folder's name or a
    ``.cu`` path (its spec beside it); ``spec`` and ``source`` replace the example's."""
    path = Path(example) if str(example).endswith(".cu") else EXAMPLES / str(example) / f"{example}.cu"
    source = source if source is not None else path.read_text()
    spec = spec or load_spec(str(path) + ".toml").kernels[kernel or path.stem]
    kdef = find_kernel(source, spec.name)
    original = Candidate(
        kernel_name=spec.name, source=source, kernel_text=kdef.text, options=list(options),
        launch=LaunchConfig(grid=spec.launch.grid, block=spec.launch.block, shared_mem=spec.launch.shared_mem),
    )
    return GenContext(spec=spec, source=source, kernel=kdef, original=original)


def with_args(spec, **changes):
    """A copy of ``spec`` with some arguments' fields changed: ``with_args(spec, y={"shape": ["M"]})``."""
    data = spec.model_dump(mode="json")
    data["args"] = [{**a, **changes.get(a["name"], {})} for a in data["args"]]
    return type(spec).model_validate(data)


def with_launch(spec, **changes):
    """A copy of ``spec`` with launch fields changed: ``with_launch(spec, policy="fixed")``."""
    data = spec.model_dump(mode="json")
    data["launch"].update(changes)
    return type(spec).model_validate(data)
