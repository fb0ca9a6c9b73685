"""The "tune" generator: compile-option and block-size variants of the parent candidate.

Macros: every value of every ``[kernel.NAME.tune] defines`` knob of the spec, one knob changed at a
time from the parent (``-DTILE=64`` replacing the parent's ``-DTILE=...``; params ``TILE = 64``).
Template parameters: likewise every value of every ``tune.template`` knob, one at a time, in the
instantiation compiled and launched (``k<64, 4>`` from a parent ``k<32, 4>``; params ``TILE = 64``).
Options: ``--extra-device-vectorization``, ``-maxrregcount=64``/``128`` and, only when the spec allows
it (``check.fast_math``), ``--use_fast_math``; each added to the parent's options (replacing a
previous register cap). Block size: when ``launch.policy = "free"`` and the parent's block is a single
integer literal, the same kernel with 128, 256, 512 or 1024 threads, none above the kernel's
``__launch_bounds__`` (grid and shared memory kept: right only for kernels that loop over
``blockDim.x``, which the verifier decides; never for a parent whose ``params`` already hold a ``block``
knob, since such a family's kernel is written for that block). Every variant passes :func:`ptxfactory.harness.compile.check_options`; none repeats the parent's key.
"""
from __future__ import annotations

import re

from ptxfactory.harness.compile import check_options
from ptxfactory.protocol import Candidate, LaunchConfig

from ..base import GenContext

_REGCAP = re.compile(r"^--?maxrregcount=\d+$")
BLOCK_SIZES = (128, 256, 512, 1024)


class TuneGenerator:
    """Compile options and launch block size around the parent candidate (``ctx.original``)."""

    name = "tune"

    def propose(self, ctx: GenContext) -> list[Candidate]:
        parent = ctx.original
        fast_ok = ctx.spec.check.fast_math
        variants: list[tuple[list[str], LaunchConfig, str, dict]] = []
        out, keys = [], {parent.key}
        for cand in self._template_variants(parent, ctx.spec):
            if cand.key not in keys:
                keys.add(cand.key)
                out.append(cand)
        for name, values in ctx.spec.tune.defines.items():
            flag = f"-D{name}="
            current = next((o[len(flag):] for o in parent.options if o.startswith(flag)), None)
            for value in values:
                if str(value) != current:
                    options = [o for o in parent.options if not o.startswith(flag)] + [f"{flag}{value}"]
                    params = {**_knob_state(parent, ctx.spec), name: value}
                    variants.append((options, parent.launch, f"tune {flag}{value}", params))
        for opt in ("--extra-device-vectorization", "-maxrregcount=64", "-maxrregcount=128") + (("--use_fast_math",) if fast_ok else ()):
            base = [o for o in parent.options if not (_REGCAP.match(opt) and _REGCAP.match(o))]
            if opt in base:
                continue
            variants.append((base + [opt], parent.launch, f"tune {opt}", {"option": opt}))
        block = parent.launch.block
        owned = "block" in parent.params  # a family chose this block as one of its knobs: its kernel depends on it
        if ctx.spec.launch.policy == "free" and not owned and len(block) == 1 and _int_literal(block[0]) is not None:
            current = _int_literal(block[0])
            bound = re.search(r"__launch_bounds__\s*\(\s*(\d+)", parent.kernel_text)
            limit = int(bound.group(1)) if bound else 1024
            for b in BLOCK_SIZES:
                if b != current and b <= limit:
                    launch = LaunchConfig(grid=list(parent.launch.grid), block=[b], shared_mem=parent.launch.shared_mem)
                    variants.append((list(parent.options), launch, f"tune block={b}", {"block": b}))
        for options, launch, desc, params in variants:
            if check_options(options, fast_ok) is not None:
                continue
            cand = parent.model_copy(
                update={
                    "options": options,
                    "launch": launch,
                    "generator": self.name,
                    "description": desc,
                    "params": params,
                    "parent": parent.key,
                }
            )
            if cand.key not in keys:
                keys.add(cand.key)
                out.append(cand)
        return out

    def _template_variants(self, parent: Candidate, spec) -> list[Candidate]:
        """The parent's instantiation with one template parameter changed to each of its other values."""
        knobs = spec.tune.template
        if not knobs or len(parent.template_args) != len(knobs):
            return []
        current = dict(zip(knobs, parent.template_args))
        out = []
        for i, (name, values) in enumerate(knobs.items()):
            for value in values:
                if str(value) == str(current[name]):
                    continue
                args = [*parent.template_args[:i], value, *parent.template_args[i + 1:]]
                out.append(parent.model_copy(update={
                    "template_args": args, "generator": self.name, "parent": parent.key,
                    "description": f"tune {name}={value} (template: {parent.kernel_name}<{', '.join(map(str, args))}>)",
                    "params": {**_knob_state(parent, spec), name: value},
                }))
        return out


def _knob_state(parent: Candidate, spec) -> dict:
    """The parent's values of the spec's own knobs: the macros it sets and every template argument, so that a
    child records the whole setting it was compiled with (two children differing in a knob never look alike)."""
    state = {k: v for k, v in parent.params.items() if k in spec.tune.defines}
    if len(parent.template_args) == len(spec.tune.template):
        state.update(zip(spec.tune.template, parent.template_args))
    return state


def _int_literal(v) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None
