"""What one evaluation does: the sizes to verify (spec + held-out) and to time, seeds, tolerances, timing budget."""
from __future__ import annotations

import random
import re

from pydantic import BaseModel, ConfigDict, Field

from ptxfactory.protocol import KernelSpec
from ptxfactory.protocol.expr import ExprError, symbols_in

from .reference import PythonReference


class EvalPlan(BaseModel):
    """The evaluation of a candidate against the baseline; built by :func:`make_plan`, sent to the worker."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    verify_sizes: list[dict[str, int]]
    heldout_sizes: list[dict[str, int]]
    bench_sizes: list[dict[str, int]]
    seeds: list[int]
    rtol: float
    atol: float
    timing_reps: int = Field(default=40, ge=3)
    warmup: int = Field(default=3, ge=1)
    timeout_s: float = 120.0
    reference: PythonReference | None = None  # the spec's Python reference, resolved (None: the original is the oracle)


MAX_TRIES = 64  # random draws per held-out size when a constraint rejects the first one: bounded, never a loop


def heldout_sizes(spec: KernelSpec, secret: int) -> list[dict[str, int]]:
    """Sizes no generator is shown, drawn from ``secret``: odd values, not multiples of the 16-byte vector
    width, one single-row size, and (for 2+ dimensions) 3 rows of a long odd last dimension and 1031 rows
    (several blocks per SM, so that races between blocks and warps have contention).

    Where the original kernel is the oracle (``check.reference = "kernel"``), every dimension stays inside
    the envelope of the sizes the user listed (check and bench: between the smallest and the largest value
    of that symbol), so numerics are never judged at a scale nobody asked about; the long row is the
    longest listed. With a Python reference, a dimension may go to 1.5x the largest checked value and the
    long row to 8x.

    Value symbols (``values``) are copied from a listed size. Every returned size satisfies the spec's
    ``constraints`` (a draw that breaks one is redrawn, at most :data:`MAX_TRIES` times, then dropped) and
    has at most ``check.max_heldout_elements`` elements in its largest buffer (shrunk by halving, bounded).
    The work is bounded by the number of symbols, whatever the spec says.
    """
    rng = random.Random(secret)
    listed = list(spec.check.sizes) + list(spec.bench.sizes)
    dims = spec.dims
    envelope = not str(spec.check.reference).startswith("python:")
    if envelope:
        lo = {s: max(1, min(size[s] for size in listed)) for s in dims}
        hi = {s: max(size[s] for size in listed) for s in dims}
    else:
        checked = {s: max(size[s] for size in spec.check.sizes) for s in dims}
        lo = {s: 1 for s in dims}
        hi = {s: max(3, int(checked[s] * 1.5)) for s in dims}

    def odd_within(s: str, v: int) -> int:
        v = min(max(v | 1, lo[s]), hi[s])
        return v if v & 1 or v - 1 < lo[s] else v - 1

    targets: list[dict[str, int]] = []
    if len(dims) > 1:  # few rows, one very long odd row length
        long = {s: odd_within(s, 3) for s in dims[:-1]}
        last = dims[-1]
        long[last] = odd_within(last, hi[last]) if envelope else (checked[last] * 8) | 1
        targets.append(long)
        many = {dims[0]: odd_within(dims[0], 1031)}  # enough rows to fill every SM several times
        many.update({s: odd_within(s, (hi[s] if envelope else checked[s]) // 2) for s in dims[1:]})
        targets.append(many)
    for variant in range(2):
        size = {s: odd_within(s, rng.randrange(lo[s], hi[s] + 1)) for s in dims}
        if variant == 1 and len(dims) > 1:
            size[dims[0]] = lo[dims[0]] if envelope else 1  # a single row (or the fewest listed)
        targets.append(size)
    out: list[dict[str, int]] = []
    for target in targets:
        base = rng.choice(listed)
        size = {s: target.get(s, base[s]) for s in spec.symbols}
        size = _fit(spec, size, lo, hi, rng)
        if size is not None and size not in out:
            out.append(size)
    return out


def _fit(spec: KernelSpec, size: dict[str, int], lo: dict[str, int], hi: dict[str, int],
         rng: random.Random) -> dict[str, int] | None:
    """``size`` shrunk under the element cap and redrawn until it meets the constraints; None when it cannot be."""
    cap = spec.check.max_heldout_elements
    for attempt in range(MAX_TRIES + 1):
        for _ in range(64 * max(1, len(lo))):  # each halving shrinks one dimension: bounded by its bit length
            n = _elements(spec, size)
            if n is None:
                return None
            if n <= cap:
                break
            shrinkable = [s for s in lo if size[s] > 1]
            if not shrinkable:
                return None
            biggest = max(shrinkable, key=size.get)
            size[biggest] = max(1, size[biggest] // 2) | 1
        else:
            return None
        if _elements(spec, size) <= cap and spec.satisfies(size):
            return size
        if attempt == 0:  # first, move each dimension to the nearest multiple the constraints ask of it
            size = _aligned(spec, size)
            if _elements(spec, size) is not None and _elements(spec, size) <= cap and spec.satisfies(size):
                return size
        size = {**size, **{s: rng.randrange(lo[s], hi[s] + 1) for s in lo}}
    return None


def _aligned(spec: KernelSpec, size: dict[str, int]) -> dict[str, int]:
    """``size`` with each symbol rounded down (at least one multiple up) to the multiples that
    ``SYM % k == 0`` constraints ask of it."""
    out = dict(size)
    for c in spec.constraints:
        m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*%\s*(\d+)\s*==\s*0\s*", c)
        if m and m.group(1) in out and int(m.group(2)) > 0:
            k = int(m.group(2))
            out[m.group(1)] = max(k, out[m.group(1)] // k * k)
    return out


def _elements(spec: KernelSpec, size: dict[str, int]) -> int | None:
    """Elements of the largest buffer at ``size`` whose shape depends on a dimension (a buffer of constant
    shape is the same at every size, and no held-out size could shrink it); None when a shape cannot be
    evaluated there."""
    dims = set(spec.dims)
    try:
        return max((a.numel(size) for a in spec.args if a.is_buffer
                    and any(symbols_in(d) & dims for d in a.shape or [])), default=0)
    except ExprError:
        return None


def make_plan(spec: KernelSpec, secret: int | None = None, reference: PythonReference | None = None) -> EvalPlan:
    """The plan for every candidate of a job: the spec's check and bench sizes plus held-out sizes and fresh seeds;
    ``reference``: the spec's Python reference resolved at job start (:func:`.reference.python_reference`)."""
    secret = secret if secret is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(secret ^ 0x5EED)
    return EvalPlan(
        verify_sizes=list(spec.check.sizes),
        heldout_sizes=heldout_sizes(spec, secret),
        bench_sizes=list(spec.bench.sizes),
        seeds=[rng.randrange(1 << 31) for _ in range(max(spec.check.seeds, 4))],  # >= one per stress variant
        rtol=spec.check.rtol,
        atol=spec.check.atol,
        reference=reference,
    )
