"""The ``ptxfactory`` command line and the report it writes: exit codes, the no-GPU line, report files, lessons, serve."""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import types
from datetime import datetime, timezone

import pytest
from typer.testing import CliRunner

from ptxfactory.daemon import report
from ptxfactory.daemon.cli import EXIT_BAD_INPUT, EXIT_FASTER, EXIT_NO_GPU, EXIT_NOT_FASTER, build_app, exit_code, main
from ptxfactory.harness.simulated import SimulatedDevice
from ptxfactory.protocol import (
    Candidate, CandidateRow, CompileFailed, JobSummary, LaunchConfig, Measured, NotRun, Rejected, Resources, SizeTiming,
)

REAL_GENERATORS = all(importlib.util.find_spec(f"ptxfactory.search.generators.{g}") for g in ("rowwise", "tune"))


def run(*args: str):
    return CliRunner().invoke(build_app(), [str(a) for a in args])


def lines_with(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


# --- optimise: exit codes ---------------------------------------------------------------------------

def test_no_gpu_exits_3_with_one_line_and_writes_the_report(example_copy, fake_generators, tmp_path):
    out = tmp_path / "out"
    res = run("optimise", example_copy, "--kernel", "rmsnorm", "--backend", "none", "--out", out)
    assert res.exit_code == EXIT_NO_GPU, res.output
    assert lines_with(res.output, "no NVIDIA GPU") == ["no NVIDIA GPU found: compiled 3 candidates (1 failed to compile), nothing was run"]
    assert "regs" in res.stdout and "vectorised (pretend)" in res.stdout  # resources of every compiled candidate
    summary = JobSummary.model_validate_json((out / "report.json").read_text())
    assert summary.state == "compile_only" and len(summary.rows) == 3
    md = (out / "report.md").read_text()
    assert "No NVIDIA GPU" in md and "| 1 | fake | vectorised (pretend) | compiled, not run |" in md
    assert not (out / "best.cu").exists()


def test_default_out_dir_is_beside_the_source(example_copy, fake_generators):
    res = run("optimise", example_copy, "-k", "rmsnorm", "--backend", "none")
    assert res.exit_code == EXIT_NO_GPU, res.output
    assert (example_copy.parent / "ptxfactory-out" / "rmsnorm" / "report.md").exists()


def test_gpu_backend_without_a_gpu_falls_back_to_compile_only(example_copy, fake_generators, monkeypatch):
    import ptxfactory.daemon.backends as backends

    monkeypatch.setattr(backends, "gpu_available", lambda: None)
    res = run("optimise", example_copy, "-k", "rmsnorm", "--backend", "gpu")
    assert res.exit_code == EXIT_NO_GPU, res.output
    assert len(lines_with(res.output, "no NVIDIA GPU")) == 1


def test_broken_spec_exits_1_with_file_line_key(example_copy, fake_generators):
    spec = example_copy.with_name("rmsnorm.cu.toml")
    spec.write_text(spec.read_text().replace('{ name = "y",   role = "out", dtype = "bf16"', '{ name = "y",   role = "out", dtype = "bf17"'))
    res = run("optimise", example_copy, "--kernel", "rmsnorm", "--backend", "none")
    assert res.exit_code == EXIT_BAD_INPUT, res.output
    assert res.stderr.splitlines()[0].startswith(f"{spec}:8: kernel.rmsnorm.args[2].dtype: Input should be 'bf16'")
    assert len(res.stderr.strip().splitlines()) == 1 and res.stdout == ""
    assert not (example_copy.parent / "ptxfactory-out").exists()


def test_signature_mismatch_exits_1_naming_the_argument(example_copy, fake_generators):
    example_copy.write_text(example_copy.read_text().replace("int M, int N", "int rows, int N"))
    res = run("optimise", example_copy, "--kernel", "rmsnorm", "--backend", "none")
    assert res.exit_code == EXIT_BAD_INPUT
    assert "args[3] ('M'): the kernel's parameter 3 is named 'rows'" in res.stderr


def test_unknown_kernel_exits_1(example_copy, fake_generators):
    res = run("optimise", example_copy, "--kernel", "softmax", "--backend", "none")
    assert res.exit_code == EXIT_BAD_INPUT and "no [kernel.softmax] table" in res.stderr


def test_without_kernel_the_specs_one_kernel_is_optimised(example_copy, fake_generators, tmp_path):
    res = run("optimise", example_copy, "--backend", "none", "--out", tmp_path / "out")
    assert res.exit_code == EXIT_NO_GPU, res.output
    assert (tmp_path / "out" / "report.json").exists()
    assert json.loads((tmp_path / "out" / "report.json").read_text())["kernel"] == "rmsnorm"


def test_without_kernel_a_spec_of_two_kernels_is_refused_naming_them(example_copy, fake_generators):
    spec = example_copy.with_name(example_copy.name + ".toml")
    text = spec.read_text()
    spec.write_text(text + "\n" + text.replace("[kernel.rmsnorm", "[kernel.rmsnorm2"))
    res = run("optimise", example_copy, "--backend", "none")
    assert res.exit_code == EXIT_BAD_INPUT
    assert "describes 2 kernels (rmsnorm, rmsnorm2): name one with --kernel" in res.stderr


def test_without_kernel_or_spec_the_error_points_at_init(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(float* x) {}\n")
    res = run("optimise", source, "--backend", "none")
    assert res.exit_code == EXIT_BAD_INPUT and "ptxfactory init" in res.stderr and "k.cu.toml" in res.stderr


@pytest.mark.parametrize("args", [["optimise"], ["optimise", "x.cu"], ["optimise", "x.cu", "-k"], ["optimise", "x.cu", "-k", "r", "--backend", "cpu"],
                                  ["optimise", "x.cu", "-k", "r", "--max-candidates", "0"], ["frobnicate"]])
def test_usage_errors_exit_1_not_2(args):
    assert run(*args).exit_code == EXIT_BAD_INPUT


def test_simulated_faster_candidate_exits_2_and_writes_no_best_cu(example_copy, fake_generators, tmp_path):
    """A simulated backend verifies nothing: its best is shown (and reported) but never exits 0 or becomes best.cu."""
    out = tmp_path / "out"
    res = run("optimise", example_copy, "--kernel", "rmsnorm", "--backend", "simulated", "--out", out)
    assert res.exit_code == EXIT_NOT_FASTER, res.output
    assert "best: #1 fake: vectorised (pretend)" in res.stdout and "simulated" in res.stdout
    assert not (out / "best.cu").exists()
    md = (out / "report.md").read_text()
    assert "## Best: #1" in md and "Simulated device (tests only)" in md
    assert "`best.cu` (the whole translation unit)" not in md and "full source: not written" in md
    assert "Same grid and block as the original" in md and "(drop-in replacement)" in md
    assert "M=32768 N=1024" in md and "% of copy" in md


def test_nothing_faster_exits_2_and_lists_rejections(example_copy, fake_generators, tmp_path, monkeypatch):
    class RejectingDevice(SimulatedDevice):
        """Measures the original against itself; rejects every other candidate."""

        async def evaluate(self, spec, baseline, candidate, plan):
            if candidate.candidate.key == baseline.candidate.key:
                return await super().evaluate(spec, baseline, candidate, plan)
            return Rejected(candidate_key=candidate.candidate.key, check="correctness", reason="max abs error 0.5 at y[3, 17]")

    import ptxfactory.daemon.backends as backends

    monkeypatch.setattr(backends, "make_backend", lambda name: RejectingDevice(delay_s=0))
    out = tmp_path / "out"
    (out).mkdir()
    (out / "best.cu").write_text("stale")
    res = run("optimise", example_copy, "--kernel", "rmsnorm", "--out", out)
    assert res.exit_code == EXIT_NOT_FASTER, res.output
    assert "no verified candidate was faster than the original" in res.stdout
    assert not (out / "best.cu").exists()
    md = (out / "report.md").read_text()
    assert "## Rejected" in md
    assert "#1 fake: vectorised (pretend): correctness: max abs error 0.5 at y[3, 17]" in md
    assert "#2 fake: missing semicolon: compile failed" in md and "error" in md


def test_json_prints_the_summary_on_stdout(example_copy, fake_generators, tmp_path):
    res = run("optimise", example_copy, "-k", "rmsnorm", "--backend", "none", "--out", tmp_path / "o", "--json")
    assert res.exit_code == EXIT_NO_GPU
    summary = JobSummary.model_validate_json(res.stdout)
    assert summary.state == "compile_only" and summary.kernel == "rmsnorm"
    assert len(lines_with(res.stderr, "no NVIDIA GPU")) == 1


def test_store_option_records_there(example_copy, fake_generators, tmp_path, ptxfactory_home):
    store = tmp_path / "my.sqlite"
    assert run("optimise", example_copy, "-k", "rmsnorm", "--backend", "none", "--store", store).exit_code == EXIT_NO_GPU
    assert store.exists() and not (ptxfactory_home / "lessons.sqlite").exists()


def test_out_whose_parent_is_missing_is_created_before_the_job(example_copy, fake_generators, tmp_path):
    out = tmp_path / "nope" / "deeper"
    res = run("optimise", example_copy, "--kernel", "rmsnorm", "--backend", "none", "--out", out)
    assert res.exit_code == EXIT_NO_GPU, res.output
    assert (out / "report.md").exists() and (out / "report.json").exists()
    assert all((p.stat().st_mode & 0o777) == 0o700 for p in (tmp_path / "nope", out))


def test_out_under_a_regular_file_is_refused_before_the_job(example_copy, fake_generators, tmp_path, monkeypatch):
    import ptxfactory.daemon.cli as cli

    monkeypatch.setattr(cli, "run_job", lambda *a, **k: pytest.fail("the job ran before --out was checked"))
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "sub"
    res = run("optimise", example_copy, "--kernel", "rmsnorm", "--backend", "none", "--out", out)
    assert res.exit_code == EXIT_BAD_INPUT, res.output
    assert "--out" in res.output and str(out) in res.output.replace("\n", "")


def test_out_that_is_a_symbolic_link_is_refused_before_the_job(example_copy, fake_generators, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    res = run("optimise", example_copy, "--kernel", "rmsnorm", "--backend", "none", "--out", tmp_path / "link")
    assert res.exit_code == EXIT_BAD_INPUT, res.output
    assert "--out" in res.output and not list((tmp_path / "real").iterdir())


def test_init_help_keeps_its_square_brackets():
    res = run("init", "--help")
    assert res.exit_code == 0 and "[kernel.NAME]" in res.stdout


def test_no_help_text_has_square_brackets_eaten_as_markup():
    """Rich reads ``[word]`` in help as markup and drops it: every bracketed text in help must reach --help."""
    import typer

    def commands(c, path=()):
        yield path, c
        for name, sub in (getattr(c, "commands", None) or {}).items():
            yield from commands(sub, (*path, name))

    for path, c in commands(typer.main.get_command(build_app())):
        texts = [c.help or ""] + [getattr(p, "help", None) or "" for p in c.params]
        shown = " ".join(run(*path, "--help").stdout.split())
        for m in re.finditer(r"(?<!\\)\[[^\]\s]+\]", " ".join(texts)):
            assert m.group(0) in shown, (path, m.group(0))


def test_help_documents_the_exit_codes():
    res = run("optimise", "--help")
    assert res.exit_code == 0
    for code in ("0: a verified candidate significantly faster", "1: bad input", "2: candidates ran but none", "3: no NVIDIA GPU"):
        assert code in res.stdout


@pytest.mark.skipif(not REAL_GENERATORS, reason="the rowwise/tune generators are not installed yet")
def test_real_generators_simulated_exit_2_without_best_cu(example_copy, tmp_path):
    out = tmp_path / "out"
    res = run("optimise", example_copy, "--kernel", "rmsnorm", "--backend", "simulated", "--out", out)
    assert res.exit_code == EXIT_NOT_FASTER, res.output  # simulated: nothing verified
    assert not (out / "best.cu").exists()
    assert "## Best:" in (out / "report.md").read_text()


@pytest.mark.skipif(not REAL_GENERATORS, reason="the rowwise/tune generators are not installed yet")
def test_real_generators_no_gpu_exit_3(example_copy, tmp_path):
    res = run("optimise", example_copy, "--kernel", "rmsnorm", "--backend", "none", "--out", tmp_path / "out")
    assert res.exit_code == EXIT_NO_GPU, res.output
    [line] = lines_with(res.output, "no NVIDIA GPU")
    assert line.startswith("no NVIDIA GPU found: compiled ") and line.endswith(" candidates, nothing was run")


# --- main(), python -m, lessons, serve --------------------------------------------------------------

def test_main_returns_the_exit_code(example_copy, fake_generators, tmp_path, capsys):
    assert main(["optimise", str(example_copy), "-k", "rmsnorm", "--backend", "none", "--out", str(tmp_path / "o")]) == EXIT_NO_GPU
    assert main(["optimise", "--help"]) == 0
    assert main(["optimise"]) == EXIT_BAD_INPUT


def test_python_dash_m_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "ptxfactory.daemon", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "optimise" in proc.stdout and "serve" in proc.stdout and "lessons" in proc.stdout


def test_lessons_groups_experiments_by_generator(example_copy, fake_generators):
    empty = run("lessons")
    assert empty.exit_code == 0 and "no experiments in" in empty.stdout
    assert run("optimise", example_copy, "-k", "rmsnorm", "--backend", "simulated").exit_code == EXIT_NOT_FASTER
    res = run("lessons")
    assert res.exit_code == 0, res.output
    assert "3 experiments from 1 jobs" in res.stdout
    fake = next(line for line in res.stdout.splitlines() if " fake " in line)
    numbers = [cell.strip() for cell in fake.split("│") if cell.strip()]
    # generator, experiments, measured, rejected, compile failed, crashed, timed out, not run, kernels, best, median
    assert numbers[:9] == ["fake", "2", "1", "0", "1", "0", "0", "0", "1"]


def test_serve_stdio_calls_the_lsp_server(monkeypatch, tmp_path):
    calls = []
    fake = types.ModuleType("ptxfactory.daemon.lsp.server")
    fake.serve_stdio = lambda backend_name="auto", store_path=None: calls.append((backend_name, store_path))
    monkeypatch.setitem(sys.modules, "ptxfactory.daemon.lsp.server", fake)
    res = run("serve", "--stdio", "--backend", "none", "--store", tmp_path / "s.sqlite")
    assert res.exit_code == 0, res.output
    assert calls == [("none", str(tmp_path / "s.sqlite"))]
    assert run("serve", "--stdio").exit_code == 0 and calls[-1] == ("auto", None)
    assert res.stdout == ""  # stdout belongs to the LSP stream


def test_serve_without_stdio_runs_the_daemon_on_the_default_socket(monkeypatch, tmp_path):
    """Issue 4: `ptxfactory serve` is the daemon (it used to refuse to run without --stdio)."""
    import ptxfactory.daemon.serve as serve

    calls = []
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(serve, "serve_daemon", lambda socket, **kw: calls.append((socket, kw)))
    res = run("serve", "--backend", "none", "--tcp", "0")
    assert res.exit_code == 0, res.output
    [(socket, kw)] = calls
    assert socket == tmp_path / "ptxfactory" / "daemon.sock"
    assert kw["tcp_port"] == 0 and kw["host"] == "127.0.0.1" and kw["token"] is None and kw["backend_name"] == "none"


def test_serve_stdio_takes_no_daemon_options():
    res = run("serve", "--stdio", "--tcp", "0")
    assert res.exit_code == EXIT_BAD_INPUT and "--stdio takes no" in res.stderr


# --- report.py: pure functions --------------------------------------------------------------------

def _cand(desc: str, generator: str = "rowwise", block: int = 256, options: list[str] | None = None) -> Candidate:
    return Candidate(kernel_name="k", source=f"// {desc}\n__global__ void k() {{}}", kernel_text="", generator=generator,
                     description=desc, launch=LaunchConfig(grid=["M"], block=[block]), options=options or [])


def _measured(c: Candidate, speedup: float, simulated: bool = False) -> Measured:
    timings = [SizeTiming(size={"M": m, "N": 1024}, median_us=10.0 / speedup, p20_us=9.0, p80_us=11.0, baseline_median_us=10.0,
                          bytes_moved=1 << 23, gbps=838.9 * speedup, pct_of_copy=21.0 * speedup, floor_us=2.0) for m in (1024, 4096)]
    return Measured(candidate_key=c.key, resources=Resources(registers=40, shared_bytes=0), timings=timings, speedup=speedup,
                    simulated=simulated)


def _summary(state="finished") -> JobSummary:
    orig, fast = _cand("original kernel", "original"), _cand("vec <x>|8", block=128, options=["-maxrregcount=64"])
    bad, broken = _cand("fast-math"), _cand("typo")
    rows = [
        CandidateRow(candidate=orig, result=_measured(orig, 1.0)),
        CandidateRow(candidate=fast, result=_measured(fast, 2.5)),
        CandidateRow(candidate=bad, result=Rejected(candidate_key=bad.key, check="correctness", reason="error 0.3 > tol")),
        CandidateRow(candidate=broken, result=CompileFailed(candidate_key=broken.key, log="k.cu(2): error: oops\n  ^\n")),
    ]
    return JobSummary(job_id="j", source_path="k.cu", kernel="k", state=state, rows=rows, baseline_key=orig.key,
                      best_key=fast.key)


def test_row_views_and_verdicts():
    views = report.row_views(_summary())
    assert [v.number for v in views] == [0, 1, 2, 3]
    assert [v.status for v in views] == ["verified", "verified", "failed", "failed"]
    assert views[2].verdict == "no: correctness: error 0.3 > tol"
    assert views[3].verdict == "no: compile failed: k.cu(2): error: oops"
    assert views[1].is_best and views[0].is_baseline and views[1].speedup == 2.5
    assert report.timing_text(views[1].timings[0]) == "4.00 µs, 2097 GB/s, 52% of copy"
    assert views[2].timings == [None, None] and report.timing_text(None) == "—"


def test_resources_name_the_launchs_dynamic_shared_memory():
    rows = _summary().rows
    row = rows[1].model_copy(update={"candidate": rows[1].candidate.model_copy(update={
        "launch": rows[1].candidate.launch.model_copy(update={"shared_mem": 4096})})})
    assert report.resources_text(row) == "40 regs, 0 B smem + 4096 B dynamic"
    assert report.resources_text(rows[1]) == "40 regs, 0 B smem"


def test_markdown_report_has_gpu_best_launch_table_and_rejections():
    md = report.render_markdown(_summary(), now=datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc))
    assert "- date: 2026-01-02 03:04 UTC" in md
    assert "No NVIDIA GPU" in md  # gpu=None
    assert "## Best: #1, 2.50x faster than the original" in md
    assert "instead of `grid=(M) block=(256) smem=0`" in md and "Launch it with `grid=(M) block=(128) smem=0`" in md
    assert "Compile with `-maxrregcount=64`" in md
    assert "| **1** ★ | rowwise | vec <x>\\|8 | yes |" in md  # pipes escaped inside cells
    assert "- #2 rowwise: fast-math: correctness: error 0.3 > tol" in md
    assert "k.cu(2): error: oops" in md


def test_the_report_names_the_fastest_candidate_at_each_size_where_it_is_not_the_best():
    s = _summary()
    assert "## Fastest at each bench size" not in report.render_markdown(s)  # the best is fastest everywhere
    other = _cand("rows per warp", block=64)
    timings = [t.model_copy(update={"median_us": 2.0 if t.size["M"] == 1024 else 8.0}) for t in _measured(other, 1.0).timings]
    rows = s.rows + [CandidateRow(candidate=other, result=_measured(other, 1.0).model_copy(update={"timings": timings}))]
    s2 = s.model_copy(update={"rows": rows})
    fastest = report.fastest_at_each_size(s2)
    assert [(size["M"], row.candidate.description) for size, row, _ in fastest] == [(1024, "rows per warp"), (4096, "vec <x>|8")]
    md = report.render_markdown(s2)
    assert "## Fastest at each bench size" in md
    assert "| M=1024 N=1024 | #4 rows per warp | 2.00 | 21% | 4.00 | 2.000 |" in md  # the best takes 4 µs there
    sim = other.model_copy(update={"description": "simulated"})
    s3 = s.model_copy(update={"rows": s.rows + [CandidateRow(candidate=sim, result=_measured(sim, 9.0, simulated=True))]})
    assert all(row.candidate.description != "simulated" for _, row, _ in report.fastest_at_each_size(s3))


def test_markdown_report_names_best_cu_only_when_it_is_written(tmp_path):
    s = _summary()
    assert report.writes_best(s) and "- full source: `best.cu` (the whole translation unit)" in report.render_markdown(s)
    assert "best.cu" in [p.name for p in report.write_outputs(s, tmp_path / "real")]
    best = s.row(s.best_key)
    sim = best.result.model_copy(update={"simulated": True})
    s2 = s.model_copy(update={"rows": [r if r.candidate.key != s.best_key else r.model_copy(update={"result": sim}) for r in s.rows]})
    md = report.render_markdown(s2)
    assert not report.writes_best(s2) and "the whole translation unit" not in md and "full source: not written" in md
    written = report.write_outputs(s2, tmp_path / "sim")
    assert not (tmp_path / "sim" / "best.cu").exists() and "best.cu" not in [p.name for p in written]


def test_exit_code_mapping():
    s = _summary()
    assert exit_code(s) == EXIT_FASTER
    assert exit_code(s.model_copy(update={"best_key": None})) == EXIT_NOT_FASTER
    assert exit_code(s.model_copy(update={"state": "compile_only", "best_key": None})) == EXIT_NO_GPU
    assert exit_code(s.model_copy(update={"state": "cancelled"})) == 130


def test_no_gpu_line_counts_compile_failures():
    orig = _cand("original kernel", "original")
    rows = [CandidateRow(candidate=orig, result=NotRun(candidate_key=orig.key, reason="no NVIDIA GPU", resources=None))]
    s = JobSummary(job_id="j", source_path="k.cu", kernel="k", state="compile_only", rows=rows, baseline_key=orig.key)
    assert report.no_gpu_line(s) == "no NVIDIA GPU found: compiled 1 candidate, nothing was run"
    assert report.row_views(s)[0].verdict == "compiled, not run" and report.row_views(s)[0].resources == "—"
    assert report.bench_sizes(s) == []


def test_lesson_groups():
    rows = [
        {"generator": "tune", "outcome": "measured", "speedup": 1.2, "kernel_fingerprint": "a", "job_id": "1"},
        {"generator": "tune", "outcome": "measured", "speedup": 2.0, "kernel_fingerprint": "b", "job_id": "2"},
        {"generator": "tune", "outcome": "rejected", "speedup": None, "kernel_fingerprint": "a", "job_id": "1"},
        {"generator": "rowwise", "outcome": "crashed", "speedup": None, "kernel_fingerprint": "a", "job_id": "1"},
    ]
    tune, rowwise = report.lesson_groups(rows)
    assert (tune.generator, tune.total, tune.counts["measured"], tune.counts["rejected"], len(tune.kernels)) == ("tune", 3, 2, 1, 2)
    assert tune.best == 2.0 and tune.median == pytest.approx(1.6)
    assert rowwise.best is None and rowwise.counts["crashed"] == 1


def test_report_json_round_trips(example_copy, fake_generators, tmp_path):
    run("optimise", example_copy, "-k", "rmsnorm", "--backend", "simulated", "--out", tmp_path / "o")
    data = json.loads((tmp_path / "o" / "report.json").read_text())
    assert data["state"] == "finished" and data["rows"][1]["result"]["outcome"] == "measured"


def test_lessons_lists_distilled_lessons_with_evidence_counts(ptxfactory_home):
    """Experiments from a (recorded) GPU run show up as one lesson per knob with its counts; simulated ones never do."""
    import asyncio

    from ptxfactory.protocol import Candidate, GpuFacts, LaunchConfig, Rejected
    from ptxfactory.search.lessons import LessonStore

    gpu = GpuFacts(name="NVIDIA H200", arch="sm_90a", sm_count=132, l2_bytes=60 << 20, copy_gbps=4200.0, peak_gbps=4800.0)

    async def fill():
        store = await LessonStore.open(ptxfactory_home / "lessons.sqlite")
        try:
            for i in range(3):
                c = Candidate(kernel_name="k", source=f"int v{i};", kernel_text="", launch=LaunchConfig(grid=[1], block=[32]),
                              generator="rowwise", params={"vecs": 8})
                await store.record(job_id="j", kernel_fingerprint=f"{i}" * 16, kernel_class="rowwise_norm", arch="sm_90a",
                                   candidate=c, result=Rejected(candidate_key=c.key, check="race", reason="moves"), gpu=gpu)
        finally:
            await store.close()

    asyncio.run(fill())
    res = run("lessons")
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.stdout.splitlines() if "rowwise:vecs=8" in ln)
    cells = [c.strip() for c in line.split("│") if c.strip()]
    assert cells[2:7] == ["3", "3", "0", "0", "3"] and cells[-1] == "race", cells


def test_markdown_report_shows_the_bests_notes():
    s = _summary()
    best = s.row(s.best_key)
    noted = best.result.model_copy(update={"notes": ["sanitizer unavailable: compute-sanitizer not found"]})
    rows = [r if r.candidate.key != s.best_key else r.model_copy(update={"result": noted}) for r in s.rows]
    md = report.render_markdown(s.model_copy(update={"rows": rows}))
    assert "- note: sanitizer unavailable: compute-sanitizer not found" in md
    assert "- note:" not in report.render_markdown(s)


def test_markdown_report_names_every_step_that_made_the_best():
    s = _summary()
    best = s.row(s.best_key)
    child = _cand("restrict on top", block=128)
    child = child.model_copy(update={"parent": best.candidate.key})
    rows = [*s.rows, CandidateRow(candidate=child, result=_measured(child, 3.0))]
    s2 = s.model_copy(update={"rows": rows, "best_key": child.key})
    assert [r.candidate.key for r in report.lineage(s2, child.key)] == [best.candidate.key, child.key]
    md = report.render_markdown(s2)
    assert "- made by: #1 vec <x>|8 → #4 restrict on top" in md
    assert "- made by:" not in report.render_markdown(s)  # one step: nothing to add


def test_a_headless_run_prints_progress_lines_and_sigterm_leaves_a_partial_report(example_copy, tmp_path):
    """Not on a terminal, each progress notification is one plain line on stderr (seconds, [done/total], what), as
    it happens; SIGTERM (``timeout``, a CI runner) cancels after the current candidate and writes the partial
    report, exit code EXIT_INTERRUPTED."""
    import os
    import signal

    from ptxfactory.daemon.cli import EXIT_INTERRUPTED

    out = tmp_path / "out"
    env = {**os.environ, "PTXFACTORY_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ptxfactory.daemon", "optimise", str(example_copy), "-k", "rmsnorm", "--backend", "simulated",
         "--no-lessons", "--patience", "0", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )
    seen: list[str] = []
    try:
        for line in proc.stderr:
            seen.append(line.rstrip("\n"))
            if sum("evaluating #" in s for s in seen) >= 3:
                proc.send_signal(signal.SIGTERM)
                break
        rest_out, rest_err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seen += rest_err.splitlines()
    assert any(s.lstrip().split(" s  ")[-1].startswith("[") and "evaluating #0 original: original kernel" in s for s in seen), seen
    assert any(re.search(r" s  \[2/\d+\] #1 \S+: .+: \d+\.\d\dx( \([\d.]+ s.*\))?$", s) for s in seen), seen  # the first row, with its speedup
    assert proc.returncode == EXIT_INTERRUPTED, (proc.returncode, seen[-5:])
    assert any("cancelling after the current candidate" in s for s in seen + rest_out.splitlines())
    summary = JobSummary.model_validate_json((out / "report.json").read_text())
    assert summary.state == "cancelled" and 2 <= len(summary.rows) < 64
