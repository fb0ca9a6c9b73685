"""What one evaluation does: the sizes to verify (spec + held-out) and to time, seeds, tolerances, timing budget."""
from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field

from ptxfactory.protocol import KernelSpec


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


def heldout_sizes(spec: KernelSpec, secret: int) -> list[dict[str, int]]:
    """Sizes no generator is shown: odd values, not multiples of the 16-byte vector width, one single-row size,
    and (for 2+ symbols) 3 rows of a very long odd last dimension (8x the largest checked) and 1031 rows
    (several blocks per SM, so that races between blocks and warps have contention).

    Each symbol takes an odd value between 1 and 1.5x the largest value it has in ``check.sizes``
    (drawn from ``secret``). Shapes whose element count exceeds ``check.max_heldout_elements`` are shrunk.
    """
    rng = random.Random(secret)
    largest = {s: max(size[s] for size in spec.check.sizes) for s in spec.symbols}
    out = []
    symbols = spec.symbols
    if len(symbols) > 1:  # few rows, one very long odd row length
        long = {s: 3 for s in symbols[:-1]}
        long[symbols[-1]] = (largest[symbols[-1]] * 8) | 1
        out.append(long)
    if len(symbols) > 1:  # enough rows to fill every SM several times: races need contention to show
        many = {s: 1031 for s in symbols[:1]}
        many.update({s: (largest[s] // 2) | 1 for s in symbols[1:]})
        out.append(many)
    for variant in range(2):
        size = {}
        for i, s in enumerate(spec.symbols):
            hi = max(3, int(largest[s] * 1.5))
            v = rng.randrange(1, hi) | 1
            if variant == 1 and i == 0 and len(spec.symbols) > 1:
                v = 1  # a single row
            size[s] = v
        out.append(size)
    for size in out:
        while _elements(spec, size) > spec.check.max_heldout_elements:
            biggest = max(size, key=size.get)
            size[biggest] = max(1, size[biggest] // 2) | 1
    return out


def _elements(spec: KernelSpec, size: dict[str, int]) -> int:
    return max((a.numel(size) for a in spec.args if a.is_buffer), default=0)


def make_plan(spec: KernelSpec, secret: int | None = None) -> EvalPlan:
    """The plan for every candidate of a job: the spec's check and bench sizes plus held-out sizes and fresh seeds."""
    secret = secret if secret is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(secret ^ 0x5EED)
    return EvalPlan(
        verify_sizes=list(spec.check.sizes),
        heldout_sizes=heldout_sizes(spec, secret),
        bench_sizes=list(spec.bench.sizes),
        seeds=[rng.randrange(1 << 31) for _ in range(max(spec.check.seeds, 4))],  # >= one per stress variant
        rtol=spec.check.rtol,
        atol=spec.check.atol,
    )
