"""The roles' prompts, rendered from the template files in ``prompts/`` (``string.Template``, ``$name`` fields).

A kernel written in PTX has its own templates, ``<role>_ptx.md`` (:func:`named`): they say that the kernel is PTX,
show its ``.entry`` and ask for a replacement entry; a CUDA kernel's are the plain ``<role>.md``."""
from __future__ import annotations

import string
from functools import cache
from importlib import resources


@cache
def template(name: str) -> string.Template:
    """The template ``prompts/<name>.md`` of this package."""
    return string.Template(resources.files(__package__).joinpath("prompts", f"{name}.md").read_text())


def render(name: str, **fields) -> str:
    """``prompts/<name>.md`` with every ``$field`` filled in (a missing field raises KeyError: a bug here, not a model's)."""
    return template(name).substitute({k: str(v) for k, v in fields.items()}).strip() + "\n"


def named(role: str, language: str = "cuda") -> str:
    """The template name of ``role`` for a kernel in ``language`` (``"cuda"`` or ``"ptx"``, :attr:`KernelDef.language`)."""
    return f"{role}_ptx" if language == "ptx" else role


def system(language: str = "cuda") -> str:
    """The system prompt every role shares (for a kernel in ``language``)."""
    return render(named("system", language))
