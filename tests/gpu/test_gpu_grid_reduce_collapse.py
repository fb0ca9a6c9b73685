"""GPU tier: two transform passes verified for real, each through a job of the ``transform`` generator only.

- ``grid_reduce``: the classic block-sum kernel (one element per thread into shared memory, a tree, one atomic per
  block) folds many elements per thread over a grid capped at one wave. Every grid_reduce candidate must verify
  (float atomics: ``deterministic = false``, judged within tolerance) and the best of them be faster than the
  original at 2^24 elements, where the original issues 65536 atomics and the capped grid a few hundred.
- ``collapse`` and ``fold``: RoPE written one thread per token, a loop over heads around a loop over half the head
  dimension; collapse makes the nest one loop that rowpar splits over the token's lanes (divmod then carries its
  digits), fold puts the heads on the grid's y and rowpar splits each head's loop (raster then makes the grid 1-D,
  a row block's heads in consecutive blocks). Every candidate whose chain has
  collapse or fold must verify at sizes with odd head counts and head dimensions.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptxfactory.protocol import Measured

from _transform_job import describe_rows, transform_job

pytestmark = pytest.mark.gpu

TRIAL = Path(__file__).parents[2] / "bench" / "trials" / "block_sum"  # the block-sum trial: its kernel and spec


ROPE = """
extern "C" __global__ void rope(const float* x, const float* cos_t, const float* sin_t, float* out, int T, int H, int D)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int half = D / 2;
    for (int h = 0; h < H; ++h) {
        const float* xv = x + ((size_t)t * H + h) * D;
        float* ov = out + ((size_t)t * H + h) * D;
        for (int i = 0; i < half; ++i) {
            float c = cos_t[(size_t)t * half + i], s = sin_t[(size_t)t * half + i];
            float x1 = xv[i], x2 = xv[i + half];
            ov[i] = x1 * c - x2 * s;
            ov[i + half] = x2 * c + x1 * s;
        }
    }
}
"""
ROPE_SPEC = """[kernel.rope]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["T", "H", "D"] },
  { name = "cos_t", role = "in", dtype = "f32", shape = ["T", "D // 2"], init = "uniform(-1, 1)" },
  { name = "sin_t", role = "in", dtype = "f32", shape = ["T", "D // 2"], init = "uniform(-1, 1)" },
  { name = "out", role = "out", dtype = "f32", shape = ["T", "H", "D"] },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
]
constraints = ["D % 2 == 0"]
launch = { grid = ["cdiv(T, 128)"], block = [128], shared_mem = 0, policy = "free" }
[kernel.rope.check]
rtol = 1e-5
atol = 1e-5
seeds = 2
sizes = [{ T = 37, H = 4, D = 64 }, { T = 5, H = 3, D = 6 }, { T = 1, H = 1, D = 2 }, { T = 33, H = 7, D = 130 }]
[kernel.rope.bench]
sizes = [{ T = 4096, H = 64, D = 256 }, { T = 65536, H = 8, D = 128 }]
"""


def test_grid_reduce_candidates_verify_and_the_best_beats_the_block_atomics(tmp_path):
    # the trial's float64 reference judges (with the original kernel as the oracle, its own run-to-run spread at the
    # x64 stress variant and a held-out n of up to 10^8 exceeded atol: the original itself was rejected, 2026-12-03)
    source, spec = (TRIAL / "block_sum.cu").read_text(), (TRIAL / "block_sum.cu.toml").read_text()
    shutil.copy(TRIAL / "ref.py", tmp_path / "ref.py")
    summary = transform_job(tmp_path, "block_sum", source, spec, max_candidates=12)
    rows = [r for r in summary.rows if "pass:grid_reduce" in r.candidate.params]
    assert rows, describe_rows(summary)
    assert all(isinstance(r.result, Measured) for r in rows), describe_rows(summary)
    assert max(r.result.speedup for r in rows) > 1.1, describe_rows(summary)


def test_collapsed_rope_candidates_verify(tmp_path):
    # (the chains come fold first (each ending in raster), then collapse, then the split inner loop alone)
    summary = transform_job(tmp_path, "rope", ROPE, ROPE_SPEC, max_candidates=40, patience=None)
    rows = [r for r in summary.rows if "pass:collapse" in r.candidate.params]
    assert rows, describe_rows(summary)
    assert all(isinstance(r.result, Measured) for r in rows), describe_rows(summary)
    # fold: the heads on the grid's y (odd head counts: 3, 7), then rowpar over each head's half; raster then puts a
    # row block's heads in consecutive blocks of a 1-D grid
    folded = [r for r in summary.rows if "pass:fold" in r.candidate.params]
    assert folded and all(isinstance(r.result, Measured) for r in folded), describe_rows(summary)
    assert any("pass:raster" in r.candidate.params for r in folded), describe_rows(summary)
    print(describe_rows(summary))


def test_divmod_candidates_verify(tmp_path):
    # divmod carries the collapsed index's digits (h, i) instead of dividing: those candidates verify too. A store
    # after the head loop (never taken) makes fold refuse, so the collapse chains, then divmod's, come first
    source = ROPE.replace("        }\n    }\n}", "        }\n    }\n    if (t < 0) out[0] = 0.0f;\n}")
    summary = transform_job(tmp_path, "rope", source, ROPE_SPEC, max_candidates=24, patience=None)
    rows = [r for r in summary.rows if "pass:divmod" in r.candidate.params]
    assert rows and all(isinstance(r.result, Measured) for r in rows), describe_rows(summary)
