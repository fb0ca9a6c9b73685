"""GPU tier: the rowwise family's cluster tier (a long row split over the blocks of a thread block cluster, the sums
combined through distributed shared memory) and its staged caches (dynamic shared memory filled by cp.async, with
and without a cluster) verified and timed for real.

For examples/rmsnorm (the original kernel is the oracle) and examples/standardize_rows (its Python reference, with
mean and rstd written per row), with check sizes that take the cluster tier on the vector path (rows of 70000 and
262144 bf16), on the scalar path (a row of 100003: not a multiple of 8) and the single-block tiers (the spec's own
sizes), every cluster candidate the family proposes must pass the verifier (spec and held-out sizes, stress
variants, poisoned outputs, reruns) and be timed. The message of each assertion carries the per-size % of copy.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.reference import python_reference
from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import Measured, load_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators.rowwise import RowwiseNormFamily
from ptxfactory.search.strategy import original_candidate

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).parents[2] / "examples"
LONG_CHECK = [{"M": 3, "N": 262144}, {"M": 2, "N": 100003}, {"M": 5, "N": 70000}]
BENCH = [{"M": 256, "N": 262144}, {"M": 8192, "N": 65536}]


def _job(name: str, norm: str, pick=lambda c: "cluster" in c.params, bench=BENCH, facts: bool = False):
    """The family's candidates for ``name`` that ``pick`` takes and compute ``norm``, and their evaluations (verified,
    timed) on this GPU; ``facts``: proposed with the GPU's facts, as a job on it would (the pipelined configurations)."""
    spec_path = EXAMPLES / name / f"{name}.cu.toml"
    spec = load_spec(spec_path).kernels[name]
    spec = spec.model_copy(update={
        "check": spec.check.model_copy(update={"sizes": list(spec.check.sizes) + LONG_CHECK}),
        "bench": spec.bench.model_copy(update={"sizes": bench}),
    })
    source = (EXAMPLES / name / f"{name}.cu").read_text()
    original = original_candidate(spec, source)
    plan = make_plan(spec, secret=5, reference=python_reference(spec, spec_path))
    plan = plan.model_copy(update={"timing_reps": 10, "timeout_s": 300.0})

    async def go():
        backend = GpuBackend()
        try:
            gpu = await backend.facts() if facts else None
            ctx = GenContext(spec=spec, source=source, kernel=find_kernel(source, name), original=original, facts=gpu)
            cands = [c for c in RowwiseNormFamily().propose(ctx) if pick(c) and c.params["norm"] == norm]
            compiled = [compile_candidate(c, spec.arch, spec.check.fast_math) for c in [original, *cands]]
            assert all(isinstance(c, Compiled) for c in compiled), [getattr(c, "log", "")[:500] for c in compiled]
            return cands, [await backend.evaluate(spec, compiled[0], c, plan) for c in compiled[1:]]
        finally:
            await backend.close()

    return asyncio.run(go())


def _all_measured(cands, results) -> None:
    """At least two candidates, every one verified and timed; each one's outcome and % of copy per size printed."""
    assert len(cands) >= 2, [c.description for c in cands]
    lines = []
    for c, r in zip(cands, results):
        pct = [f"{t.pct_of_copy:.0f}%" for t in r.timings] if isinstance(r, Measured) else []
        lines.append(f"{c.description}: {r.outcome} {getattr(r, 'speedup', '')} {pct} {getattr(r, 'reason', '')}")
    print("\n".join(lines))
    assert all(isinstance(r, Measured) for r in results), "\n".join(lines)


@pytest.mark.parametrize("name, norm", [("rmsnorm", "rms"), ("standardize_rows", "layer")])
def test_cluster_candidates_verify_at_long_rows(name, norm):
    """Every cluster candidate computing the example's norm (the LayerNorm probes on RMSNorm are meant to fail)."""
    cands, results = _job(name, norm)
    _all_measured(cands, results)


@pytest.mark.parametrize("name, norm", [("rmsnorm", "rms"), ("standardize_rows", "layer")])
def test_staged_candidates_verify_at_every_row_length(name, norm):
    """Every staged candidate without a cluster (the cache in dynamic shared memory, cp.async), at the spec's sizes and
    the long rows above (past the cache: the rest re-read), on the vector and scalar paths."""
    cands, results = _job(name, norm, pick=lambda c: c.params.get("stage") == "smem" and "cluster" not in c.params)
    _all_measured(cands, results)


def test_pipelined_candidates_verify_at_every_row_length():
    """Every pipelined candidate (persistent grid sized from this GPU's SM count, the next group's row loaded before
    this one's reduction), proposed for short bench rows: at the spec's sizes and the long rows above (past its small
    cache: the rest re-read, and one block's groups of a row each), on the vector and scalar paths."""
    cands, results = _job("rmsnorm", "rms", pick=lambda c: "persist" in c.params,
                          bench=[{"M": 32768, "N": 256}, {"M": 32768, "N": 1024}], facts=True)
    _all_measured(cands, results)
