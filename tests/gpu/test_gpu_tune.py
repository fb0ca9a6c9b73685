"""GPU tier: the ``tune`` generator's template knobs, for real: each instantiation is verified on its own."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.protocol import Measured
from ptxfactory.search.strategy import optimise

pytestmark = pytest.mark.gpu

KERNEL = (Path(__file__).resolve().parents[1] / "kernels" / "scale_template.cu").read_text()
SPEC = """[kernel.scale]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(N, 4096)"], block = [256] }
check = { sizes = [{ N = 1000 }, { N = 100003 }] }
bench = { sizes = [{ N = 16777216 }] }
tune = { template = { UNROLL = [1, 2, 4, 8], SCALE = [2, 3] } }
"""


def test_template_instantiations_are_verified_one_by_one(tmp_path):
    """UNROLL changes how the loop runs (every value verified); SCALE = 3 computes another function and is
    rejected by the correctness check, although it compiles and runs. The transform passes keep the
    instantiation and verify too."""
    src = tmp_path / "scale.cu"
    src.write_text(KERNEL)
    (tmp_path / "scale.cu.toml").write_text(SPEC)

    async def go():
        backend = GpuBackend()
        try:
            return await optimise(src, "scale", backend=backend, generators=("tune", "transform"), patience=None, max_candidates=32)
        finally:
            await backend.close()

    summary = asyncio.run(go())
    rows = {tuple(r.candidate.template_args): r for r in summary.rows if r.candidate.generator in ("tune", "original")}
    passes = [r for r in summary.rows if r.candidate.generator == "transform"]
    assert passes and all(isinstance(r.result, Measured) for r in passes), [(r.candidate.description, r.result) for r in passes]
    for unroll in (1, 2, 4, 8):
        assert isinstance(rows[(unroll, 2)].result, Measured), (unroll, rows[(unroll, 2)].result)
    wrong = rows[(1, 3)].result
    assert wrong.outcome == "rejected" and wrong.check == "correctness", wrong
