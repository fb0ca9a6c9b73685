"""The "tune" generator: compile-option and block-size variants of the parent candidate.

Macros: every value of every ``[kernel.NAME.tune] defines`` knob of the spec, one knob changed at a
time from the parent (``-DTILE=64`` replacing the parent's ``-DTILE=...``; params ``TILE = 64``).
Template parameters: likewise every value of every ``tune.template`` knob, one at a time, in the
instantiation compiled and launched (``k<64, 4>`` from a parent ``k<32, 4>``; params ``TILE = 64``).
Options: ``--extra-device-vectorization``, ``-maxrregcount=64``/``128`` and, only when the spec allows
it (``check.fast_math``), ``--use_fast_math``; each added to the parent's options (replacing a
previous register cap). Block size: when ``launch.policy = "free"`` and the parent's block is a single
integer literal, the same kernel with 128, 256, 512 or 1024 threads where its code allows that block,
with the grid recomputed to cover the same work (:func:`ptxfactory.search.generators.block_size.block_choices`:
a ``__shared__ float partial[256]`` indexed by ``threadIdx.x`` allows at most 256 threads, a kernel that never
reads ``blockDim`` or halves a constant stride over shared data none but its own, ``__launch_bounds__(N)``
at most N; ``cdiv(X, 256)`` becomes ``cdiv(X, 512)`` for a kernel indexed by ``blockIdx * blockDim``, and a
grid that does not show how it depends on the block refuses the change). A 2-D block of literals gets the
shapes of ``BLOCK_SHAPES`` (rows of whole warps: 32x8, 64x4, ...; knob ``block = "32x8"``) where its threads are
independent (no shared memory, barrier or warp collective) and each grid dimension divides by its block dimension
(:func:`ptxfactory.search.generators.block_size.block_shapes`). Each refusal and its reason
(one of that module's constants) is logged at debug level. Never for a parent whose ``params`` already hold
a ``block`` knob, since such a family's kernel is written for that block. Every variant passes
:func:`ptxfactory.harness.compile.check_options`; none repeats the parent's key.
"""
from __future__ import annotations

import logging
import re

from ptxfactory.harness.compile import check_options
from ptxfactory.protocol import Candidate, LaunchConfig

from ..base import GenContext
from .block_size import BLOCK_SIZES, block_choices, block_shapes

__all__ = ["BLOCK_SIZES", "TuneGenerator"]

log = logging.getLogger(__name__)
_REGCAP = re.compile(r"^--?maxrregcount=\d+$")


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
        sms = getattr(ctx.facts, "sm_count", None)  # (the GPU's, when the job has one: larger blocks that idle SMs refused)
        for blocks in (block_choices(parent, ctx.spec, sm_count=sms), block_shapes(parent, ctx.spec)):  # 1-D sizes, 2-D shapes
            for b, launch in blocks.launches.items():
                variants.append((list(parent.options), launch, f"tune block={b}", {"block": b}))
            for b, why in blocks.refused.items():
                log.debug("tune: no block=%s for %s: %s", b, parent.kernel_name, why)
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

