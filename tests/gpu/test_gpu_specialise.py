"""GPU tier: the ``specialise`` pass (the body versioned on the bench sizes' values of a small loop-bounding scalar)
verified for real.

A K x K max pooling written one thread per flat output with K a runtime scalar, through a job of the ``transform``
generator only, judged against the original (exact: a max is one of its inputs). The bench sizes take K = 3 and K = 2,
the check sizes K = 3, 2 (the specialised versions) and 5, 1 (the code as written), so both paths of every
specialised candidate pass through the verifier (spec and held-out sizes, poisoned outputs, canaries, reruns).
"""
from __future__ import annotations

import pytest

from ptxfactory.protocol import Measured

from _transform_job import describe_rows, transform_job

pytestmark = pytest.mark.gpu

POOL = """
__global__ void pool(const float* x, float* y, int C, int H, int W, int K, int S)
{
    int OH = (H - K) / S + 1;
    int OW = (W - K) / S + 1;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= C * OH * OW) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int c = idx / (OW * OH);
    float m = -INFINITY;
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++) {
            float v = x[(c * H + oh * S + kh) * W + ow * S + kw];
            if (v > m) m = v;
        }
    y[idx] = m;
}
"""
POOL_SPEC = """[kernel.pool]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["C", "H", "W"], init = "normal" },
  { name = "y", role = "out", dtype = "f32", shape = ["C", "(H - K) // S + 1", "(W - K) // S + 1"] },
  { name = "C", role = "scalar", dtype = "i32", value = "C" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "W", role = "scalar", dtype = "i32", value = "W" },
  { name = "K", role = "scalar", dtype = "i32", value = "K" },
  { name = "S", role = "scalar", dtype = "i32", value = "S" },
]
values = ["K", "S"]
constraints = ["K <= H", "K <= W"]
launch = { grid = ["cdiv(C * ((H - K) // S + 1) * ((W - K) // S + 1), 256)"], block = [256], shared_mem = 0, policy = "free" }
[kernel.pool.check]
rtol = 0
atol = 0
seeds = 2
sizes = [{ C = 3, H = 9, W = 11, K = 3, S = 2 }, { C = 5, H = 8, W = 33, K = 2, S = 2 }, { C = 2, H = 12, W = 7, K = 5, S = 1 },
         { C = 1, H = 1, W = 1, K = 1, S = 1 }, { C = 7, H = 65, W = 130, K = 3, S = 2 }]
[kernel.pool.bench]
sizes = [{ C = 256, H = 224, W = 224, K = 3, S = 2 }, { C = 256, H = 224, W = 224, K = 2, S = 2 }]
"""


def test_specialised_pooling_candidates_verify(tmp_path):
    summary = transform_job(tmp_path, "pool", POOL, POOL_SPEC, max_candidates=10, patience=None)
    rows = [r for r in summary.rows if "pass:specialise" in r.candidate.params]
    assert rows, describe_rows(summary)
    assert all(isinstance(r.result, Measured) for r in rows), describe_rows(summary)
    print(describe_rows(summary))  # for the closing note (pytest -s): the speedups of the specialised candidates
