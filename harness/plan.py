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
    """Sizes no generator is shown: odd values, not multiples of the 16-byte vector width, plus one single-row size.

    Each symbol takes an odd value between 1 and 1.5x the largest value it has in ``check.sizes``
    (drawn from ``secret``). Shapes whose element count exceeds ``check.max_heldout_elements`` are shrunk.
    """
    rng = random.Random(secret)
    largest = {s: max(size[s] for size in spec.check.sizes) for s in spec.symbols}
    out = []
    for variant in range(2):
        size = {}
        for i, s in enumerate(spec.symbols):
            hi = max(3, int(largest[s] * 1.5))
            v = rng.randrange(1, hi) | 1
            if variant == 1 and i == 0 and len(spec.symbols) > 1:
                v = 1  # a single row
            size[s] = v
        while _elements(spec, size) > spec.check.max_heldout_elements:
            biggest = max(size, key=size.get)
            size[biggest] = max(1, size[biggest] // 2) | 1
        out.append(size)
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
        seeds=[rng.randrange(1 << 31) for _ in range(spec.check.seeds)],
        rtol=spec.check.rtol,
        atol=spec.check.atol,
    )
