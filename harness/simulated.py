"""``SimulatedDevice``: an evaluation backend with no GPU, for the CPU test tier only.

It never runs a kernel. Verification is *not* performed: every compiled candidate is reported as
measured with ``simulated=True``, and times come from a crude model (bytes moved over a fixed
copy bandwidth, scaled by whether the source uses 16-byte vector accesses). Use it to test the
job loop, the CLI and the LSP flow; never to judge a kernel. Selected only by an explicit
``--backend simulated``.
"""
from __future__ import annotations

import asyncio
import hashlib
import math

from ptxfactory.protocol import GpuFacts, KernelSpec, Measured, SizeTiming

from .compile import Compiled
from .plan import EvalPlan

_COPY_GBPS = 4000.0
_PEAK_GBPS = 4800.0


class SimulatedDevice:
    """A pretend H200-like device. ``delay_s`` per evaluation lets tests observe progress and cancel."""

    def __init__(self, delay_s: float = 0.05):
        self.delay_s = delay_s
        self.evaluated: list[str] = []

    async def facts(self) -> GpuFacts:
        return GpuFacts(
            name="SimulatedDevice (no GPU; tests only)", arch="sm_90a", sm_count=132, l2_bytes=60 << 20,
            copy_gbps=_COPY_GBPS, peak_gbps=_PEAK_GBPS, simulated=True,
        )

    def _efficiency(self, compiled: Compiled) -> float:
        src = compiled.candidate.source
        eff = 0.30
        if any(t in src for t in ("uint4", "int4", "float4", "ld.global.v4")):
            eff += 0.50
        if "__shfl" in src:
            eff += 0.05
        jitter = int(hashlib.sha256(compiled.candidate.key.encode()).hexdigest()[:4], 16) / 0xFFFF
        return min(0.97, eff + 0.08 * jitter)

    async def evaluate(self, spec: KernelSpec, baseline: Compiled, candidate: Compiled, plan: EvalPlan) -> Measured:
        await asyncio.sleep(self.delay_s)
        self.evaluated.append(candidate.candidate.key)
        timings = []
        for size in plan.bench_sizes:
            nbytes = spec.bytes_moved_at(size)
            t_base = nbytes / (_COPY_GBPS * 1e3 * self._efficiency(baseline))
            t = nbytes / (_COPY_GBPS * 1e3 * self._efficiency(candidate))
            gbps = nbytes / (t * 1e3)
            timings.append(SizeTiming(
                size=size, median_us=t, p20_us=t * 0.99, p80_us=t * 1.01, baseline_median_us=t_base,
                bytes_moved=nbytes, gbps=gbps, pct_of_copy=100 * gbps / _COPY_GBPS, floor_us=nbytes / (_PEAK_GBPS * 1e3),
            ))
        speedup = math.exp(sum(math.log(t.speedup) for t in timings) / len(timings))
        return Measured(
            candidate_key=candidate.candidate.key, resources=candidate.resources, timings=timings,
            speedup=speedup, speedup_lo=speedup * 0.99, speedup_hi=speedup * 1.01, verified_sizes=[], simulated=True,
        )

    async def close(self) -> None:
        return None
