"""compute-sanitizer on the best, on the CPU: the command line, parsing recorded output, the verdict rules, the
subprocess (a stand-in executable printing recorded output), and vet_best dropping a best with errors for the next.
On the GPU machine the real tool runs at the end of every job (when it is installed)."""
from __future__ import annotations

import asyncio
import os
import stat
import sys

import pytest

from ptxfactory.harness import sanitize as S
from ptxfactory.protocol import Candidate, CandidateRow, LaunchConfig, Measured, Rejected, SizeTiming, load_spec

# Recorded on this (GPU-less) machine with compute-sanitizer 2025.3.1 from the nvidia-cuda-sanitizer-api 13.0 wheel.
NO_GPU = """========= COMPUTE-SANITIZER
========= Error: Target application terminated before first instrumented API call
========= Error: couldn't find exit code.
"""
# The formats of compute-sanitizer 2025.x (user guide, "Understanding Memcheck Errors" / "Racecheck Analysis mode").
CLEAN = """========= COMPUTE-SANITIZER
========= ERROR SUMMARY: 0 errors
"""
OUT_OF_BOUNDS = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 2 bytes
=========     at rmsnorm+0x4a0
=========     by thread (0,0,0) in block (2,0,0)
=========     Address 0x7f3a2e0036b0 is out of bounds
=========     and is 4097 bytes after the nearest allocation at 0x7f3a2e000000 of size 48 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f0d5f] in libcuda.so.1
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaDeviceSynchronize.
=========
========= ERROR SUMMARY: 2 errors
sanitize_run: CUDARuntimeError: cudaErrorLaunchFailure: unspecified launch failure
"""
RACE = """========= COMPUTE-SANITIZER
========= Warning: Race reported between Read access at rmsnorm+0x120
=========     and Write access at rmsnorm+0x140 [4 hazards]
=========
========= Error: Race reported between Write access at rmsnorm+0x2c0
=========     and Read access at rmsnorm+0x300 [248 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
"""
# synccheck's format (user guide, "Synccheck Tool": a divergent __syncthreads).
BARRIER = """========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in warp
=========     at rmsnorm+0x1f0
=========     by thread (32,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 1 error
"""
RACE_WARNINGS_ONLY = """========= COMPUTE-SANITIZER
========= Warning: Race reported between Read access at rmsnorm+0x120
=========     and Write access at rmsnorm+0x140 [4 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)
"""


def test_command_is_an_argument_list_with_the_tool_and_the_runner():
    cmd = S.sanitizer_command("/opt/cs", "racecheck", "/tmp/j.json", python="/usr/bin/python3")
    assert cmd[:3] == ["/opt/cs", "--tool", "racecheck"] and "--racecheck-report" in cmd
    assert cmd[-4:] == ["/usr/bin/python3", "-m", "ptxfactory.harness.sanitize_run", "/tmp/j.json"]
    assert cmd[cmd.index("--error-exitcode") + 1] == str(S.EXIT_ON_ERROR)
    assert "--racecheck-report" not in S.sanitizer_command("cs", "memcheck", "j")
    with pytest.raises(ValueError):
        S.sanitizer_command("cs", "initcheck; rm -rf /", "j")


def test_parsing_recorded_output():
    assert S.parse_output(CLEAN) == S.ToolRun(ran=True, errors=0)
    oob = S.parse_output(OUT_OF_BOUNDS)
    assert oob.ran and oob.errors == 2
    assert oob.first_error.startswith("Invalid __global__ write of size 2 bytes; at rmsnorm+0x4a0; by thread (0,0,0) in block (2,0,0); "
                                      "Address 0x7f3a2e0036b0 is out of bounds")
    race = S.parse_output(RACE, "racecheck")
    assert race.ran and race.errors == 1 and race.first_error.startswith("Error: Race reported between Write access at rmsnorm+0x2c0")
    assert S.parse_output(RACE_WARNINGS_ONLY, "racecheck") == S.ToolRun(ran=True, errors=0)
    none = S.parse_output(NO_GPU)
    assert not none.ran and none.problem == "Error: Target application terminated before first instrumented API call"
    assert S.parse_output("").problem == "no output from compute-sanitizer"


def test_verdict_rules():
    ok, bad, broken = S.ToolRun(ran=True), S.parse_output(OUT_OF_BOUNDS), S.parse_output(NO_GPU)
    drop, note, go_on = S.judge_runs("memcheck", ok, bad)
    assert drop.startswith("compute-sanitizer memcheck: 2 error(s); first: Invalid __global__ write") and not go_on
    assert S.judge_runs("memcheck", ok, ok) == (None, "compute-sanitizer memcheck: no errors", True)
    drop, note, go_on = S.judge_runs("memcheck", broken, None)
    assert drop is None and note == "sanitizer unavailable: Error: Target application terminated before first instrumented API call"
    drop, note, _ = S.judge_runs("memcheck", bad, None)  # the original's own errors: this tool says nothing about the best
    assert drop is None and note.startswith("compute-sanitizer memcheck skipped: the original kernel itself has 2 error(s)")
    drop, note, _ = S.judge_runs("memcheck", ok, S.ToolRun(ran=False, problem="memcheck took more than 300 s", timed_out=True))
    assert drop is None and "inconclusive" in note


def _fake_tool(tmp_path, outputs: dict[str, str], sleep: float = 0.0):
    """An executable standing in for compute-sanitizer: prints the recorded output for its --tool and the job file's
    cubin name, and records its argv."""
    script = tmp_path / "compute-sanitizer"
    script.write_text(
        f"#!{sys.executable}\nimport json, sys, time, pathlib\n"
        f"pathlib.Path({str(tmp_path / 'argv.log')!r}).open('a').write(json.dumps(sys.argv) + '\\n')\n"
        f"time.sleep({sleep})\n"
        f"outputs = {outputs!r}\n"
        "tool = sys.argv[sys.argv.index('--tool') + 1]\n"
        "job = json.loads(pathlib.Path(sys.argv[-1]).read_text())\n"
        "who = pathlib.Path(job['cubin']).read_bytes().decode()\n"
        "print(outputs.get(who + ':' + tool, outputs.get(tool, '')), end='')\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def _compiled(who: str, shared: int = 0, body: str = ""):
    from ptxfactory.harness.compile import Compiled
    from ptxfactory.protocol import Resources

    cand = Candidate(kernel_name="rmsnorm", source=f"int {who};{body}", kernel_text="", launch=LaunchConfig(grid=["M"], block=[256]),
                     generator="test", description=who)
    return Compiled(candidate=cand, cubin=who.encode(), lowered_name="rmsnorm",
                    resources=Resources(registers=32, shared_bytes=shared), log="")


SPEC = load_spec(__import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "rmsnorm" / "rmsnorm.cu.toml").kernels["rmsnorm"]
SIZE = {"M": 3, "N": 8}


def test_sanitize_pair_runs_the_tools_through_a_subprocess(tmp_path):
    exe = _fake_tool(tmp_path, {"memcheck": CLEAN, "best:memcheck": OUT_OF_BOUNDS, "racecheck": CLEAN})
    verdict = S.sanitize_pair(SPEC, _compiled("orig", shared=1024), _compiled("best", shared=1024), SIZE, exe)
    assert verdict.dropped.startswith("compute-sanitizer memcheck: 2 error(s)")
    good = S.sanitize_pair(SPEC, _compiled("orig", shared=1024), _compiled("good", shared=1024), SIZE, exe)
    assert good.dropped is None and good.notes == ["compute-sanitizer memcheck: no errors", "compute-sanitizer racecheck: no errors"]
    runs = (tmp_path / "argv.log").read_text().splitlines()
    assert len(runs) == 4 + 4 and all('"-m", "ptxfactory.harness.sanitize_run"' in r for r in runs)
    no_smem = S.sanitize_pair(SPEC, _compiled("orig"), _compiled("good"), SIZE, exe)
    assert no_smem.notes == ["compute-sanitizer memcheck: no errors"]  # racecheck only where shared memory is used
    racy = _fake_tool(tmp_path, {"memcheck": CLEAN, "racecheck": CLEAN, "best:racecheck": RACE})
    assert S.sanitize_pair(SPEC, _compiled("orig", 1024), _compiled("best", 1024), SIZE, racy).dropped.startswith(
        "compute-sanitizer racecheck: 1 error(s); first: Error: Race reported")


def test_unavailable_tool_is_a_note_never_a_failure(tmp_path):
    broken = _fake_tool(tmp_path, {"memcheck": NO_GPU})
    verdict = S.sanitize_pair(SPEC, _compiled("orig"), _compiled("best"), SIZE, broken)
    assert verdict.dropped is None and verdict.notes[0].startswith("sanitizer unavailable: Error: Target application terminated")
    assert len((tmp_path / "argv.log").read_text().splitlines()) == 1  # the best is not run when the tool does not work
    missing = S.sanitize_pair(SPEC, _compiled("orig"), _compiled("best"), SIZE, None)
    assert missing.dropped is None and missing.notes[0].startswith("sanitizer unavailable: compute-sanitizer not found")
    slow = _fake_tool(tmp_path, {"memcheck": CLEAN}, sleep=5)
    timed = S.sanitize_pair(SPEC, _compiled("orig"), _compiled("best"), SIZE, slow, timeout_s=0.5)
    assert timed.dropped is None and timed.notes == ["sanitizer unavailable: memcheck took more than 0 s"]


def test_find_sanitizer(tmp_path):
    exe = _fake_tool(tmp_path, {})
    assert S.find_sanitizer({"PTXFACTORY_SANITIZER": "off", "PATH": str(tmp_path)}) is None
    assert S.find_sanitizer({"PTXFACTORY_SANITIZER": exe}) == exe
    assert S.find_sanitizer({"PATH": str(tmp_path)}) == exe
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    os.symlink(exe, tmp_path / "cuda" / "bin" / "compute-sanitizer")
    assert S.find_sanitizer({"CUDA_HOME": str(tmp_path / "cuda"), "PATH": str(tmp_path)}) == str(tmp_path / "cuda" / "bin" / "compute-sanitizer")


def _row(key: str, speedup: float) -> CandidateRow:
    cand = Candidate(kernel_name="rmsnorm", source=f"int {key};", kernel_text="", launch=LaunchConfig(grid=["M"], block=[256]),
                     generator="test", description=key)
    t = SizeTiming(size=SIZE, median_us=1.0 / speedup, p20_us=1.0, p80_us=1.0, baseline_median_us=1.0, bytes_moved=1, gbps=1.0,
                   pct_of_copy=1.0, floor_us=0.0)
    return CandidateRow(candidate=cand, result=Measured(candidate_key=cand.key, timings=[t], speedup=speedup,
                                                        speedup_lo=speedup * 0.98, speedup_hi=speedup * 1.02))


class _Backend:
    def __init__(self, verdicts: dict[str, S.Verdict]):
        self.verdicts, self.asked = verdicts, []

    async def sanitize(self, spec, baseline, candidate):
        self.asked.append(candidate.candidate.description)
        return self.verdicts.get(candidate.candidate.description, S.Verdict(notes=["compute-sanitizer memcheck: no errors"]))


def test_vet_best_drops_a_best_with_errors_for_the_next():
    rows = [_row("fast", 2.0), _row("faster", 3.0), _row("fastest", 4.0)]
    compiled = {r.candidate.key: _compiled(r.candidate.description) for r in rows}
    best_of = lambda rs: max((r for r in rs if isinstance(r.result, Measured)), key=lambda r: r.result.speedup, default=None)  # noqa: E731
    backend = _Backend({"fastest": S.Verdict(dropped="compute-sanitizer memcheck: 1 error(s); first: Invalid __global__ read")})
    best = asyncio.run(S.vet_best(rows, best_of, compiled, SPEC, _compiled("orig"), backend))
    assert best.candidate.description == "faster" and backend.asked == ["fastest", "faster"]
    assert isinstance(rows[2].result, Rejected) and rows[2].result.check == "sanitizer" and "Invalid __global__ read" in rows[2].result.reason
    assert rows[1].result.notes == ["compute-sanitizer memcheck: no errors"] and rows[1] is best
    # a backend without a sanitizer (simulated, test fakes) or a best without its artifact: kept unchecked
    rows = [_row("fast", 2.0)]
    assert asyncio.run(S.vet_best(rows, best_of, {}, SPEC, None, backend)) is rows[0]
    assert asyncio.run(S.vet_best(rows, best_of, compiled, SPEC, None, object())) is rows[0]


def test_synccheck_command_and_recorded_output():
    cmd = S.sanitizer_command("/opt/cs", "synccheck", "/tmp/j.json", python="/usr/bin/python3")
    assert cmd[:3] == ["/opt/cs", "--tool", "synccheck"] and "--racecheck-report" not in cmd
    sync = S.parse_output(BARRIER, "synccheck")
    assert sync.ran and sync.errors == 1
    assert sync.first_error == "Barrier error detected. Divergent thread(s) in warp; at rmsnorm+0x1f0; by thread (32,0,0) in block (0,0,0)"


@pytest.mark.parametrize("source,uses", [
    ("__syncthreads();", True), ("if (__syncthreads_or(p)) {}", True), ("__syncwarp(0xffffffffu);", True),
    ('asm volatile("bar.sync 1, 64;");', True), ('asm("barrier.sync.aligned 0;");', True),
    ("cg::this_thread_block().sync();", True), ("#include <cub/block/block_reduce.cuh>", True),
    ("cuda::barrier<cuda::thread_scope_block> b;", True),
    ("float barrier = 1.0f; int bar = 2; y[i] = x[i] * barrier;", False), ("stream.synchronize();", False),
])
def test_which_sources_use_barriers(source, uses):
    assert S.uses_barriers(source) is uses


def test_synccheck_runs_only_where_barriers_are_used_and_drops_a_divergent_barrier(tmp_path):
    exe = _fake_tool(tmp_path, {"memcheck": CLEAN, "synccheck": CLEAN, "best:synccheck": BARRIER})
    no_barrier = S.sanitize_pair(SPEC, _compiled("orig"), _compiled("best"), SIZE, exe)
    assert no_barrier.dropped is None and no_barrier.notes == ["compute-sanitizer memcheck: no errors"]
    syncs = " __syncthreads();"
    bad = S.sanitize_pair(SPEC, _compiled("orig", body=syncs), _compiled("best", body=syncs), SIZE, exe)
    assert bad.dropped == ("compute-sanitizer synccheck: 1 error(s); first: Barrier error detected. Divergent thread(s) "
                           "in warp; at rmsnorm+0x1f0; by thread (32,0,0) in block (0,0,0)")
    good = S.sanitize_pair(SPEC, _compiled("orig", body=syncs), _compiled("good"), SIZE, exe)  # the original's barriers count
    assert good.dropped is None and good.notes == ["compute-sanitizer memcheck: no errors", "compute-sanitizer synccheck: no errors"]
    tools = [__import__("json").loads(r)[2] for r in (tmp_path / "argv.log").read_text().splitlines()]
    assert tools[:2] == ["memcheck"] * 2  # no barriers: memcheck only
    for first, rest in ((2, slice(3, 6)), (6, slice(7, 10))):  # the original's memcheck, then the other three at once
        assert tools[first] == "memcheck" and sorted(tools[rest]) == ["memcheck", "synccheck", "synccheck"]
