"""GPU tier: the ``colpar`` pass (one thread per column -> columns on x, rows split over y) verified for real.

Two naive column reductions, each through a job of the ``transform`` generator only: ``examples/colsum`` (judged
against its ``ref.py``, with column counts of 1, 5, 7, 33 and 1031 checked, so blocks hold threads past the last
column, which must go through the combines' barriers without hanging) and a column max/argmax judged exactly (integer
inputs make ties common: the first row must win them, as in the serial loop). Every ``colpar`` candidate the job
evaluates must pass the verifier (spec and held-out sizes, poisoned outputs, canaries, reruns); on colsum, whose
bench sizes include a tall and skinny matrix the naive kernel runs as one block, colpar must be faster.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptxfactory.protocol import Measured

from _transform_job import describe_rows, transform_job

pytestmark = pytest.mark.gpu

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "colsum"


def _colpar_rows(summary):
    return [r for r in summary.rows if any(k.startswith("pass:colpar_") for k in r.candidate.params)]


def test_colpar_candidates_verify_on_the_colsum_example(tmp_path):
    shutil.copy(EXAMPLE / "ref.py", tmp_path / "ref.py")  # the spec's reference, beside the copied spec
    source = (EXAMPLE / "colsum.cu").read_text()
    spec = (EXAMPLE / "colsum.cu.toml").read_text()
    summary = transform_job(tmp_path, "colsum", source, spec, max_candidates=20)
    rows = _colpar_rows(summary)
    assert len(rows) >= 3, describe_rows(summary)
    assert all(isinstance(r.result, Measured) for r in rows), describe_rows(summary)
    assert "auto" in {r.candidate.params["lanes"] for r in rows}, describe_rows(summary)
    assert not any(k.startswith("pass:rowpar_") for r in summary.rows for k in r.candidate.params), describe_rows(summary)
    assert max(r.result.speedup for r in rows) > 2, describe_rows(summary)


COLARGMAX = """
extern "C" __global__ void col_argmax(const float* x, float* best, int* where, int M, int N)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < N) {
        float b = x[c];
        int w = 0;
        for (int r = 1; r < M; r++) {
            float v = x[(size_t)r * N + c];
            if (v > b) { b = v; w = r; }
        }
        best[c] = b;
        where[c] = w;
    }
}
"""
COLARGMAX_SPEC = """[kernel.col_argmax]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"], init = "randint(0, 8)" },
  { name = "best", role = "out", dtype = "f32", shape = ["N"] },
  { name = "where", role = "out", dtype = "i32", shape = ["N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(N, 128)"], block = [128], shared_mem = 0, policy = "free" }
[kernel.col_argmax.check]
rtol = 0
atol = 0
seeds = 2
sizes = [{ M = 100, N = 7 }, { M = 1, N = 1 }, { M = 5003, N = 33 }, { M = 37, N = 3001 }]
[kernel.col_argmax.bench]
sizes = [{ M = 1048576, N = 64 }, { M = 8192, N = 8192 }]
"""


def test_colpar_column_argmax_is_exact(tmp_path):
    summary = transform_job(tmp_path, "col_argmax", COLARGMAX, COLARGMAX_SPEC, max_candidates=20)
    rows = _colpar_rows(summary)
    assert len(rows) >= 3, describe_rows(summary)
    assert all(isinstance(r.result, Measured) for r in rows), describe_rows(summary)
