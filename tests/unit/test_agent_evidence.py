"""The planner's SASS and Nsight Compute evidence (search/agents/evidence.py), on the CPU: the parent's SASS summary
made in the compile pool, bounded; the counters from a backend that profiles (a stand-in returning a recorded raw
page's counters), a lasting refusal remembered, and a backend that cannot profile; then a whole job against a
loopback endpoint whose planner request carries both sections."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

import ptxfactory.harness.cuda_paths as cuda_paths
from ptxfactory.harness import ncu, sass
from ptxfactory.harness.compile_pool import CompilePool
from ptxfactory.harness.simulated import SimulatedDevice
from ptxfactory.protocol import load_spec, spec_path_for
from ptxfactory.search.agents import evidence
from ptxfactory.search.agents.loopback import ScriptedServer
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import optimise, original_candidate

from _agent_support import KEY, PLANNER, ROWSUM, script, write_config

RAW = (Path(__file__).resolve().parent / "fixtures" / "ncu_raw_rmsnorm.csv").read_text()
HAS_DISASSEMBLER = cuda_paths.tool_path("nvdisasm") is not None or cuda_paths.tool_path("cuobjdump") is not None


def _original():
    spec = load_spec(spec_path_for(ROWSUM)).kernels["rowsum_seq"]
    return spec, original_candidate(spec, ROWSUM.read_text())


class Profiling:
    """A backend stand-in that profiles: ``answer`` each time, counting its calls."""

    def __init__(self, answer: ncu.Counters):
        self.answer, self.calls = answer, 0

    async def profile(self, spec, compiled, timeout_s=None):
        assert compiled.cubin[:4] == b"\x7fELF" and compiled.lowered_name == "rowsum_seq"
        self.calls += 1
        return self.answer


@pytest.mark.skipif(not HAS_DISASSEMBLER, reason="no nvdisasm or cuobjdump here")
async def test_the_parents_sass_summary_is_made_in_the_pool():
    spec, cand = _original()
    pool = CompilePool(0)
    try:
        text = await evidence.sass_text(cand, spec.arch, pool)
    finally:
        pool.close()
    assert text.startswith("- whole kernel: ") and "innermost loop" in text and "global loads (32-bit" in text
    assert len(text) <= sass.MAX_TEXT


async def test_no_sass_is_one_line_with_the_reason(monkeypatch):
    spec, cand = _original()
    monkeypatch.setattr(cuda_paths, "tool_path", lambda name: None)
    pool = CompilePool(0)  # a thread: the stand-in lookup holds there
    try:
        text = await evidence.sass_text(cand, spec.arch, pool)
        broken = await evidence.sass_text(cand.model_copy(update={"source": "not C++"}), spec.arch, pool)
    finally:
        pool.close()
    assert text.startswith("SASS unavailable: no nvdisasm or cuobjdump found") and "\n" not in text
    assert broken.startswith("SASS unavailable: ") and "does not compile" in broken


async def test_counters_from_a_backend_that_profiles():
    spec, cand = _original()
    backend = Profiling(ncu.read_output(RAW, "rowsum_seq"))
    pool = CompilePool(0)
    try:
        profile = evidence.profiler(backend, pool, spec)
        text = await evidence.counters_text(profile, cand)
    finally:
        pool.close()
    assert backend.calls == 1
    lines = text.splitlines()
    assert "- DRAM throughput: 61.8% of peak" in lines and "- achieved occupancy: 86.7% of peak" in lines
    assert lines[-1].startswith("- top warp stalls") and len(lines) == len(ncu.METRICS) + 1


async def test_a_lasting_refusal_is_not_tried_again():
    spec, cand = _original()
    refused = ncu.read_output("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n", "rowsum_seq")
    backend = Profiling(refused)
    pool = CompilePool(0)
    try:
        profile = evidence.profiler(backend, pool, spec)
        first = await evidence.counters_text(profile, cand)
        second = await evidence.counters_text(profile, cand)
    finally:
        pool.close()
    assert first == second and first.startswith("- counters unavailable: the driver refuses") and backend.calls == 1


async def test_no_profiler_without_a_backend_that_profiles():
    spec, cand = _original()
    assert evidence.profiler(SimulatedDevice(delay_s=0), CompilePool(0), spec) is None
    assert evidence.profiler(None, CompilePool(0), spec) is None
    assert (await evidence.counters_text(None, cand)).startswith("counters unavailable: no GPU in this job")


async def test_the_planner_is_shown_the_sass_and_the_counters_reason(monkeypatch, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("PTXF_TEST_KEY", KEY)
    srv = ScriptedServer(script()).start()
    store = await LessonStore.open(tmp_path / "lessons.sqlite")
    try:
        monkeypatch.setenv("PTXFACTORY_CONFIG", str(write_config(tmp_path / "openai.toml", "openai", srv.openai_url)))
        await optimise(ROWSUM, "rowsum_seq", backend=SimulatedDevice(delay_s=0), store=store, generators=("agent",),
                       job_id="job-e", max_candidates=10)
    finally:
        await store.close()
        srv.close()
    [planner] = [user for _path, user in srv.requests if PLANNER in user][:1]
    sass_part = planner.split("## Hot loop SASS\n", 1)[1].split("\n## ", 1)[0]
    counters_part = planner.split("## Nsight Compute counters\n", 1)[1].split("\n## ", 1)[0]
    if HAS_DISASSEMBLER:
        assert sass_part.startswith("- whole kernel: ") and "innermost loop" in sass_part
    else:
        assert sass_part.startswith("SASS unavailable: ")
    assert counters_part.strip() == "counters unavailable: no GPU in this job (Nsight Compute needs one)"
