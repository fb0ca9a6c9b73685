"""GPU tier: the ``scan`` pass (a running accumulation stored per element, one thread per row -> a warp or a block
per row, scanned in chunks) verified for real.

Naive kernels written one thread per row, each through a job of the ``transform`` generator only: an inclusive fp32
cumsum that also writes the row's total (judged with a tolerance: the sums are re-associated), an exclusive int32
cumsum and a running max (both judged exactly: integer sums and max are exact in any order). Row lengths include 1,
lengths that are not multiples of a chunk (8 elements a lane: 256 a warp, 2048 a block) and rows spanning several
chunks. Every ``scan`` candidate the job evaluates must pass the verifier (spec and held-out sizes, poisoned
outputs, canaries, reruns).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxfactory.protocol import Measured

from _transform_job import describe_rows, transform_job

pytestmark = pytest.mark.gpu

CUMSUM_TOTAL = """
extern "C" __global__ void cumsum_total(const float* x, float* y, float* total, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float acc = 0.0f;
    for (int j = 0; j < N; j++) {
        acc += x[(size_t)r * N + j];
        y[(size_t)r * N + j] = acc;
    }
    total[r] = acc;
}
"""
CUMSUM_TOTAL_SPEC = """[kernel.cumsum_total]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"], init = "uniform" },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "total", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(M, 128)"], block = [128], shared_mem = 0, policy = "free" }
[kernel.cumsum_total.check]
# no Python reference: the sequential original is the oracle, and re-associated fp32 partial sums differ from it by
# ~6e-8 x sqrt(j) x |running sum|, up to 0.02 under the x64 stress variant at N = 5003 (measured on the H200)
rtol = 1e-4
atol = 0.1
seeds = 2
sizes = [{ M = 7, N = 100 }, { M = 1, N = 1 }, { M = 33, N = 5003 }, { M = 300, N = 257 }]
[kernel.cumsum_total.bench]
sizes = [{ M = 4096, N = 8191 }, { M = 65536, N = 255 }]
"""

EXCLUSIVE_INT = """
extern "C" __global__ void excl_cumsum(const int* x, int* y, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < M) {
        int acc = 0;
        for (int j = 0; j < N; ++j) {
            y[r * N + j] = acc;
            acc += x[r * N + j];
        }
    }
}
"""
EXCLUSIVE_INT_SPEC = """[kernel.excl_cumsum]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "i32", shape = ["M", "N"], init = "randint(0, 100)" },
  { name = "y", role = "out", dtype = "i32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(M, 128)"], block = [128], shared_mem = 0, policy = "free" }
[kernel.excl_cumsum.check]
rtol = 0
atol = 0
seeds = 2
sizes = [{ M = 7, N = 100 }, { M = 1, N = 1 }, { M = 33, N = 5003 }, { M = 300, N = 257 }]
[kernel.excl_cumsum.bench]
sizes = [{ M = 4096, N = 8191 }, { M = 65536, N = 255 }]
"""

RUNNING_MAX = """
extern "C" __global__ void running_max(const float* x, float* y, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float* row = x + (size_t)r * N;
    float* out = y + (size_t)r * N;
    float m = row[0];
    for (int j = 0; j < N; j++) {
        m = fmaxf(m, row[j]);
        out[j] = m;
    }
}
"""
RUNNING_MAX_SPEC = """[kernel.running_max]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"], init = "normal" },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(M, 128)"], block = [128], shared_mem = 0, policy = "free" }
[kernel.running_max.check]
rtol = 0
atol = 0
seeds = 2
sizes = [{ M = 7, N = 100 }, { M = 1, N = 1 }, { M = 33, N = 5003 }, { M = 300, N = 257 }]
[kernel.running_max.bench]
sizes = [{ M = 4096, N = 8191 }, { M = 65536, N = 255 }]
"""


# a reverse cumulative sum (KernelBench's "reverse cumsum"), written as a descending loop: ascending.py makes it the
# same iterations over an ascending counter, which the scan pass reads
REVERSE = """
extern "C" __global__ void rcumsum(const float* x, float* y, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float acc = 0.0f;
    for (int j = N - 1; j >= 0; --j) {
        acc += x[(size_t)r * N + j];
        y[(size_t)r * N + j] = acc;
    }
}
"""
# cumsum_total's tolerance: re-associated fp32 partial sums are off by up to 0.02 under the x64 stress variant at
# N = 5003 (0.0195 measured on the H200 for the reverse scan, 2026-12-05, which atol 1e-3 refused)
REVERSE_SPEC = RUNNING_MAX_SPEC.replace("running_max", "rcumsum").replace("rtol = 0\natol = 0", "rtol = 1e-4\natol = 0.1")


@pytest.mark.parametrize("name,source,spec", [("cumsum_total", CUMSUM_TOTAL, CUMSUM_TOTAL_SPEC),
                                              ("rcumsum", REVERSE, REVERSE_SPEC),
                                              ("excl_cumsum", EXCLUSIVE_INT, EXCLUSIVE_INT_SPEC),
                                              ("running_max", RUNNING_MAX, RUNNING_MAX_SPEC)])
def test_scan_candidates_verify(tmp_path: Path, name, source, spec):
    summary = transform_job(tmp_path, name, source, spec, max_candidates=20)
    rows = [r for r in summary.rows if any(k.startswith("pass:scan_") for k in r.candidate.params)]
    assert len(rows) >= 3, describe_rows(summary)
    assert all(isinstance(r.result, Measured) for r in rows), describe_rows(summary)
    lanes = {r.candidate.params["lanes"] for r in rows}
    assert "auto" in lanes and lanes & {32, 256}, describe_rows(summary)
