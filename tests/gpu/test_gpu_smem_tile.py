"""GPU tier: the ``smem_tile`` pass (a thread-per-output inner-product loop -> shared-memory tiles) verified for real.

A job of the ``transform`` generator alone on examples/matmul_naive (judged by its ref.py: bench sizes that are
not multiples of any tile, and a skinny one), and on three hand-written variants judged against the original
kernel (the pass keeps every output's order of operations): B transposed with leading dimensions, an early
return and an alpha/beta/bias epilogue on an ``inout`` C; a batched GEMM on ``blockIdx.z`` with a guard on the
batch, and one through pointers to the batch's matrices and the row; a 1x1 convolution as a GEMM with a bias-initialised accumulator. Every ``smem_tile`` candidate the job
evaluates must pass the verifier (spec and held-out sizes, stress inputs, poisoned outputs, canaries).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxfactory.protocol import Measured

from _transform_job import describe_rows, transform_job

pytestmark = pytest.mark.gpu

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "matmul_naive"


def _tile_rows(summary):
    return [r for r in summary.rows if any(k.startswith("pass:smem_tile_") for k in r.candidate.params)]


def test_matmul_example_gets_verified_faster_smem_tile_candidates(tmp_path):
    (tmp_path / "ref.py").write_text((EXAMPLE / "ref.py").read_text())
    summary = transform_job(tmp_path, "matmul_naive", (EXAMPLE / "matmul_naive.cu").read_text(),
                            (EXAMPLE / "matmul_naive.cu.toml").read_text(), max_candidates=24, patience=None)
    rows = _tile_rows(summary)
    report = describe_rows(summary)
    assert len(rows) >= 4, report
    assert all(isinstance(r.result, Measured) for r in rows), report
    names = {n for r in rows for n in r.candidate.params if n.startswith("pass:smem_tile_")}
    assert {"pass:smem_tile_1x1", "pass:smem_tile_4x4", "pass:smem_tile_8x8"} <= names, report
    # register tiles of 4x4 or 8x8 outputs make the naive kernel's compute-bound sizes several times faster
    assert max(r.result.speedup for r in rows) > 2.0, report


NT = """
extern "C" __global__ void gemm_nt(const float* A, const float* B, const float* bias, float* C, int M, int N, int K,
                                   int lda, int ldb, float alpha, float beta)
{
    const int col = threadIdx.x + blockIdx.x * blockDim.x;
    const int row = threadIdx.y + blockDim.y * blockIdx.y;
    if (row >= M || col >= N) return;
    const size_t arow = (size_t)row * lda;
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) {
        float a = A[arow + k];
        float b = B[(size_t)col * ldb + k];
        sum += a * b;
    }
    float out = alpha * sum + beta * C[(size_t)row * N + col];
    C[(size_t)row * N + col] = out + bias[col];
}
"""
NT_SPEC = """[kernel.gemm_nt]
arch = "sm_90a"
args = [
  { name = "A", role = "in", dtype = "f32", shape = ["M", "K"] },
  { name = "B", role = "in", dtype = "f32", shape = ["N", "K"] },
  { name = "bias", role = "in", dtype = "f32", shape = ["N"] },
  { name = "C", role = "inout", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "K", role = "scalar", dtype = "i32", value = "K" },
  { name = "lda", role = "scalar", dtype = "i32", value = "K" },
  { name = "ldb", role = "scalar", dtype = "i32", value = "K" },
  { name = "alpha", role = "scalar", dtype = "f32", value = 1.5 },
  { name = "beta", role = "scalar", dtype = "f32", value = 0.5 },
]
launch = { grid = ["cdiv(N, 16)", "cdiv(M, 16)"], block = [16, 16], shared_mem = 0, policy = "free" }
[kernel.gemm_nt.check]
rtol = 1e-4
atol = 0.5
seeds = 2
sizes = [{ M = 7, N = 9, K = 5 }, { M = 1, N = 1, K = 1 }, { M = 130, N = 70, K = 257 }, { M = 3, N = 1000, K = 17 }]
[kernel.gemm_nt.bench]
sizes = [{ M = 1024, N = 1000, K = 512 }, { M = 2048, N = 2048, K = 256 }]
"""

BATCHED = """
extern "C" __global__ void bmm(const float* A, const float* B, float* C, int batch, int M, int N, int K)
{
    int b = blockIdx.z;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < batch && row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++)
            acc += A[(b * M + row) * K + k] * B[(b * K + k) * N + col];
        C[(b * M + row) * N + col] = acc;
    }
}
"""
BATCHED_SPEC = """[kernel.bmm]
arch = "sm_90a"
args = [
  { name = "A", role = "in", dtype = "f32", shape = ["Bt", "M", "K"] },
  { name = "B", role = "in", dtype = "f32", shape = ["Bt", "K", "N"] },
  { name = "C", role = "out", dtype = "f32", shape = ["Bt", "M", "N"] },
  { name = "batch", role = "scalar", dtype = "i32", value = "Bt" },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "K", role = "scalar", dtype = "i32", value = "K" },
]
launch = { grid = ["cdiv(N, 16)", "cdiv(M, 16)", "Bt"], block = [16, 16], shared_mem = 0, policy = "free" }
[kernel.bmm.check]
rtol = 1e-4
atol = 0.5
seeds = 2
sizes = [{ Bt = 3, M = 7, N = 9, K = 5 }, { Bt = 1, M = 1, N = 1, K = 1 }, { Bt = 5, M = 65, N = 33, K = 100 }]
[kernel.bmm.bench]
sizes = [{ Bt = 16, M = 512, N = 512, K = 256 }, { Bt = 64, M = 129, N = 200, K = 64 }]
"""

BATCHED_POINTERS = """
extern "C" __global__ void bmm_ptr(const float* A, const float* B, float* C, int batch, int M, int N, int K)
{
    const int b = blockIdx.z;
    const float* Ab = A + (size_t)b * M * K;
    const float* Bb = B + (size_t)b * K * N;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        const float* arow = Ab + row * K;
        float acc = 0.0f;
        for (int k = 0; k < K; k++)
            acc += arow[k] * Bb[k * N + col];
        C[((size_t)b * M + row) * N + col] = acc;
    }
}
"""
BATCHED_POINTERS_SPEC = BATCHED_SPEC.replace("kernel.bmm", "kernel.bmm_ptr")

CONV = """
extern "C" __global__ void conv1x1(const float* w, const float* x, float* y, const float* bias, int Co, int Ci, int P)
{
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    int co = blockIdx.y * blockDim.y + threadIdx.y;
    const int n = blockIdx.z;
    if (co < Co && p < P) {
        float acc = bias[co];
        for (int ci = 0; ci < Ci; ci++) {
            int xi = (n * Ci + ci) * P + p;
            acc = acc + w[co * Ci + ci] * x[xi];
        }
        y[(n * Co + co) * P + p] = fmaxf(acc, 0.0f);
    }
}
"""
CONV_SPEC = """[kernel.conv1x1]
arch = "sm_90a"
args = [
  { name = "w", role = "in", dtype = "f32", shape = ["Co", "Ci"] },
  { name = "x", role = "in", dtype = "f32", shape = ["Nb", "Ci", "P"] },
  { name = "y", role = "out", dtype = "f32", shape = ["Nb", "Co", "P"] },
  { name = "bias", role = "in", dtype = "f32", shape = ["Co"] },
  { name = "Co", role = "scalar", dtype = "i32", value = "Co" },
  { name = "Ci", role = "scalar", dtype = "i32", value = "Ci" },
  { name = "P", role = "scalar", dtype = "i32", value = "P" },
]
launch = { grid = ["cdiv(P, 16)", "cdiv(Co, 16)", "Nb"], block = [16, 16], shared_mem = 0, policy = "free" }
[kernel.conv1x1.check]
rtol = 1e-4
atol = 0.5
seeds = 2
sizes = [{ Nb = 2, Co = 40, Ci = 19, P = 300 }, { Nb = 1, Co = 1, Ci = 1, P = 1 }, { Nb = 3, Co = 17, Ci = 64, P = 49 }]
[kernel.conv1x1.bench]
sizes = [{ Nb = 16, Co = 256, Ci = 128, P = 3136 }, { Nb = 8, Co = 512, Ci = 512, P = 784 }]
"""


@pytest.mark.parametrize("name,source,spec", [("gemm_nt", NT, NT_SPEC), ("bmm", BATCHED, BATCHED_SPEC),
                                              ("bmm_ptr", BATCHED_POINTERS, BATCHED_POINTERS_SPEC),
                                              ("conv1x1", CONV, CONV_SPEC)])
def test_smem_tile_variants_verify_against_the_original(tmp_path, name, source, spec):
    summary = transform_job(tmp_path, name, source, spec, max_candidates=24, patience=None)
    rows = _tile_rows(summary)
    report = describe_rows(summary)
    assert len(rows) >= 3, report
    assert all(isinstance(r.result, Measured) for r in rows), report
