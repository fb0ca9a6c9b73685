"""GPU tier: the ``atomic_agg`` pass (an atomic per element -> a register per thread, one atomic per warp) and the
``smem_hist`` pass (a histogram's atomics -> a shared-memory copy per block) verified for real.

Two naive kernels through a job of the ``transform`` generator only:

- ``examples/dot_atomic`` (an fp32 dot product, one ``atomicAdd`` per element into a zeroed ``inout`` scalar;
  ``deterministic = false``, judged against ref.py): every candidate carrying ``atomic_agg`` must pass the
  verifier (check and held-out sizes, reruns, misaligned views, the timed launches' outputs), among them the
  chain ``grid_stride`` + ``atomic_agg`` (one atomic per warp for the whole kernel), which must be faster than
  the original's 10^7 atomics to one address;
- an exact integer count and max (``rtol = atol = 0``, ``deterministic = true``) in blocks of 100 threads, so a
  block's last warp is partial (4 lanes): the ballot, ``__reduce_*_sync`` and lane 0's atomic on the lanes
  that exist;
- ``examples/histogram`` (``B`` int32 bins, exact): the ``smem_hist`` candidates (a shared-memory copy per block).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptxfactory.protocol import Measured

from _transform_job import describe_rows, transform_job

pytestmark = pytest.mark.gpu

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dot_atomic"

COUNT = """
extern "C" __global__ void count_max(const int* v, int* cnt, int* best, int N, int t)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    int x = v[i];
    if (x > t) atomicAdd(cnt, 1);
    atomicMax(best, x);
}
"""
COUNT_SPEC = """[kernel.count_max]
arch = "sm_90a"
args = [
  { name = "v", role = "in", dtype = "i32", shape = ["N"], init = "randint(-1000000, 1000000)" },
  { name = "cnt", role = "inout", dtype = "i32", shape = [1], init = "zeros" },
  { name = "best", role = "inout", dtype = "i32", shape = [1], init = "randint(-2000000, -1000000)" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "t", role = "scalar", dtype = "i32", value = 250000 },
]
launch = { grid = ["cdiv(N, 100)"], block = [100], shared_mem = 0, policy = "free" }
[kernel.count_max.check]
rtol = 0
atol = 0
seeds = 2
sizes = [{ N = 1000 }, { N = 1 }, { N = 7 }, { N = 4099 }, { N = 1000003 }]
[kernel.count_max.bench]
sizes = [{ N = 16777216 }, { N = 33554467 }]
"""


def _agg_rows(summary):
    return [r for r in summary.rows if "pass:atomic_agg" in r.candidate.params]


def test_dot_atomic_example_aggregated_candidates_verify_and_the_chain_is_faster(tmp_path):
    shutil.copy(EXAMPLE / "ref.py", tmp_path / "ref.py")  # the spec's python:ref.py, beside the copied kernel
    summary = transform_job(tmp_path, "dot_atomic", (EXAMPLE / "dot_atomic.cu").read_text(),
                            (EXAMPLE / "dot_atomic.cu.toml").read_text())
    rows = _agg_rows(summary)
    assert rows, describe_rows(summary)
    assert all(isinstance(r.result, Measured) for r in rows), describe_rows(summary)
    chained = [r for r in rows if "pass:grid_stride" in r.candidate.params]
    assert chained, describe_rows(summary)
    assert max(r.result.speedup for r in chained) > 2.0, describe_rows(summary)


def test_exact_integer_count_and_max_with_partial_warps_verify(tmp_path):
    summary = transform_job(tmp_path, "count_max", COUNT, COUNT_SPEC)
    rows = _agg_rows(summary)
    assert rows, describe_rows(summary)
    assert all(isinstance(r.result, Measured) for r in rows), describe_rows(summary)
    assert any("pass:grid_stride" in r.candidate.params for r in rows), describe_rows(summary)


HIST_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "histogram"


def test_histogram_example_smem_hist_candidates_verify_exactly_and_are_faster(tmp_path):
    """examples/histogram (B int32 bins from the spec, exact): every ``smem_hist`` candidate (after grid_stride: one
    shared-memory copy per block of a capped grid, merged once per bin) passes the verifier; the best is faster."""
    shutil.copy(HIST_EXAMPLE / "ref.py", tmp_path / "ref.py")
    summary = transform_job(tmp_path, "histogram", (HIST_EXAMPLE / "histogram.cu").read_text(),
                            (HIST_EXAMPLE / "histogram.cu.toml").read_text())
    rows = [r for r in summary.rows if "pass:smem_hist" in r.candidate.params]
    assert rows, describe_rows(summary)
    assert all(isinstance(r.result, Measured) for r in rows), describe_rows(summary)
    assert max(r.result.speedup for r in rows) > 1.2, describe_rows(summary)
