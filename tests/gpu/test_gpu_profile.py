"""GPU tier: ``ptxfactory profile`` on examples/rmsnorm, and the GPU backend's profile of a compiled candidate (what
the agents' planner is given). Nsight Compute's counters may be refused on the host (ERR_NVGPUCTRPERM) or ncu may be
missing: then a one-line reason is the right answer; otherwise the key counters must be there, with sane values."""
from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxfactory.daemon.cli import build_app
from ptxfactory.harness.compile import compile_candidate
from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.harness.ncu import find_ncu
from ptxfactory.protocol import load_spec, spec_path_for
from ptxfactory.search.strategy import original_candidate

pytestmark = pytest.mark.gpu

EXAMPLE = Path(__file__).parents[2] / "examples" / "rmsnorm" / "rmsnorm.cu"


def _percent(out: str, label: str) -> float:
    m = re.search(rf"- {label}: ([\d.]+)%", out)
    assert m, f"no {label} in:\n{out}"
    return float(m.group(1))


def test_profile_prints_registers_and_counters_or_a_reason():
    res = CliRunner().invoke(build_app(), ["profile", str(EXAMPLE), "-k", "rmsnorm"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    print(out)  # the lead reads it in the GPU tier's log
    assert re.search(r"registers/thread\s*│\s*\d+", out)
    assert "theoretical occupancy" in out
    assert "whole kernel: " in out or "SASS unavailable: " in out
    if "counters unavailable: " in out:
        reason = out.split("counters unavailable: ", 1)[1].splitlines()[0].strip()
        assert len(reason) > 10, reason  # says why: no ncu, counters refused (ERR_NVGPUCTRPERM), a failure
        assert find_ncu() is not None or "not installed" in reason
    else:
        for label in ("DRAM throughput", "memory throughput", "SM throughput", "achieved occupancy"):
            assert 0.0 <= _percent(out, label) <= 100.0
        assert _percent(out, "DRAM throughput") > 5.0  # a bandwidth-bound kernel at 1 GB moves memory
        assert "- top warp stalls (cycles per issued instruction): " in out


def test_the_gpu_backend_profiles_a_compiled_candidate():
    spec = load_spec(spec_path_for(EXAMPLE)).kernels["rmsnorm"]
    compiled = compile_candidate(original_candidate(spec, EXAMPLE.read_text()), spec.arch)

    async def go():
        backend = GpuBackend()
        try:
            await backend.facts()  # the worker is up and holds the GPU, as in a job
            return await backend.profile(spec, compiled, 170.0)
        finally:
            await backend.close()

    counters = asyncio.run(go())
    print(counters.lines())
    if counters.ok:
        assert counters.get("achieved occupancy") is not None and len(counters.stalls()) == 3
    else:
        assert counters.problem and len(counters.lines()) == 1, counters.problem
