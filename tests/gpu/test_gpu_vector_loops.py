"""GPU tier: the ``vector_loops`` pass (16-byte loads and stores in lane-strided row loops) verified for real.

Three naive kernels, each through a job of the ``transform`` generator only: an fp32 L2 row
normalisation written one thread per row (rowpar splits its loops, vector_loops widens them), a
bf16 RMSNorm-like kernel written one block per row (vector_loops applies to its loops directly, 8
elements per lane), and the RoPE example (bf16 activations beside f32 tables: 8-byte and 16-byte
accesses in one loop; the two halves of each head, ``x[i]`` and ``x[i + D/2]``, two ranges of one buffer;
head dimensions 6, 18 and 130 leave the halves on different chunk offsets: the original loop). The check sizes mix row lengths that keep rows 16-byte aligned (vector path),
odd ones (the runtime check fails on most rows: the original loop) and ones shorter than a vector;
the verifier's misaligned views move every buffer by one element (the scalar head). Every candidate
carrying the pass must pass the verifier (spec and held-out sizes, poisoned outputs, canaries, reruns).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxfactory.protocol import Measured

from _transform_job import describe_rows, transform_job

pytestmark = pytest.mark.gpu

L2NORM = """
extern "C" __global__ void l2rows(const float* x, float* y, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float ss = 0.0f;
    for (int j = 0; j < N; j++) {
        float v = x[(size_t)r * N + j];
        ss += v * v;
    }
    float inv = rsqrtf(ss + 1e-6f);
    for (int j = 0; j < N; j++)
        y[(size_t)r * N + j] = x[(size_t)r * N + j] * inv;
}
"""
L2NORM_SPEC = """[kernel.l2rows]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(M, 128)"], block = [128], shared_mem = 0, policy = "free" }
[kernel.l2rows.check]
rtol = 1e-4
atol = 1e-5
seeds = 2
sizes = [{ M = 7, N = 1000 }, { M = 1, N = 1 }, { M = 33, N = 4099 }, { M = 300, N = 36 }, { M = 5, N = 3 }]
[kernel.l2rows.bench]
sizes = [{ M = 4096, N = 4096 }]
"""

RMS = """#include <cuda_bf16.h>
extern "C" __global__ void rms(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int M, int N)
{
    __shared__ float part[256];
    int row = blockIdx.x;
    if (row >= M) return;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        sum += v * v;
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    float inv = rsqrtf(part[0] / N + 1e-6f);
    for (int i = threadIdx.x; i < N; i += blockDim.x)
        y[(size_t)row * N + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * N + i]) * inv * __bfloat162float(w[i]));
}
"""
RMS_SPEC = """[kernel.rms]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "bf16", shape = ["M", "N"] },
  { name = "w", role = "in", dtype = "bf16", shape = ["N"], init = "normal(1.0, 0.1)" },
  { name = "y", role = "out", dtype = "bf16", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["M"], block = [256], shared_mem = 0, policy = "free" }
[kernel.rms.check]
rtol = 1e-2
atol = 1e-2
seeds = 2
sizes = [{ M = 7, N = 1000 }, { M = 1, N = 1 }, { M = 33, N = 4100 }, { M = 64, N = 4096 }, { M = 5, N = 7 }]
[kernel.rms.bench]
sizes = [{ M = 4096, N = 4096 }]
"""


ROPE_DIR = Path(__file__).resolve().parents[2] / "examples" / "rope"
ROPE = (ROPE_DIR / "rope.cu").read_text()
# the example's spec and check sizes; a bench size small enough for a test
ROPE_SPEC = "\n".join("sizes = [{ T = 4096, H = 8, D = 128 }]" if line.startswith("sizes = [{ T = 32768")
                       else line for line in (ROPE_DIR / "rope.cu.toml").read_text().splitlines())


def _job(tmp_path: Path, name: str, source: str, spec: str):
    return transform_job(tmp_path, name, source, spec, max_candidates=40, patience=None)


def _report(summary) -> str:
    return describe_rows(summary)


@pytest.mark.parametrize("name,source,spec", [("l2rows", L2NORM, L2NORM_SPEC), ("rms", RMS, RMS_SPEC), ("rope", ROPE, ROPE_SPEC)])
def test_vector_loops_candidates_verify(tmp_path, name, source, spec):
    if name == "rope":  # its reference is the example's ref.py, beside the spec
        (tmp_path / "ref.py").write_text((ROPE_DIR / "ref.py").read_text())
    summary = _job(tmp_path, name, source, spec)
    rows = [r for r in summary.rows if "pass:vector_loops" in r.candidate.params]
    assert rows, _report(summary)
    assert all(isinstance(r.result, Measured) for r in rows), _report(summary)
    assert all(r.candidate.params["vec"] == 16 for r in rows)
