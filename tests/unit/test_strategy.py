"""The main job without a GPU: compile-only resources, the simulated loop and its lesson records, cancel, job errors."""
from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from ptxfactory.harness.simulated import SimulatedDevice
from ptxfactory.protocol import CompileFailed, Measured, NotRun, SpecError
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import JobError, Progress, optimise

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rmsnorm" / "rmsnorm.cu"
REAL_GENERATORS = all(importlib.util.find_spec(f"ptxfactory.search.generators.{g}") for g in ("rowwise", "tune"))


async def test_compile_only_reports_resources_for_every_compiled_row(fake_generators):
    progress: list[Progress] = []
    summary = await optimise(EXAMPLE, "rmsnorm", backend=None, generators=("fake",), on_progress=progress.append)
    assert summary.state == "compile_only" and summary.gpu is None and summary.best_key is None
    # original + vectorised + broken; the two copies of the original share its key and are never compiled twice
    assert [r.candidate.description for r in summary.rows] == ["original kernel", "vectorised (pretend)", "missing semicolon"]
    original, vectorised, broken = summary.rows
    for row in (original, vectorised):
        assert isinstance(row.result, NotRun) and not row.verified
        assert row.resources is not None and row.resources.registers > 0 and row.resources.spill_stores == 0
    assert isinstance(broken.result, CompileFailed) and broken.reason.startswith("compile failed: ")
    assert summary.baseline_key == original.candidate.key
    assert progress[0].done == 0 and progress[-1].done == progress[-1].total == 3
    assert [p.row.candidate.key for p in progress if p.row] == [r.candidate.key for r in summary.rows]


@pytest.mark.skipif(not REAL_GENERATORS, reason="the rowwise/tune generators are not installed yet")
async def test_compile_only_with_the_real_generators_compiles_everything():
    summary = await optimise(EXAMPLE, "rmsnorm", backend=None)
    assert summary.state == "compile_only" and len(summary.rows) > 1
    assert {r.candidate.generator for r in summary.rows} >= {"original", "rowwise"}
    for row in summary.rows:
        assert isinstance(row.result, NotRun), (row.candidate.description, row.reason)
        assert row.resources is not None and row.resources.registers > 0, row.candidate.description
    assert len({r.candidate.key for r in summary.rows}) == len(summary.rows)


async def test_simulated_job_records_every_row_and_picks_the_fastest(fake_generators, tmp_path):
    device = SimulatedDevice(delay_s=0)
    store = await LessonStore.open(tmp_path / "lessons.sqlite")
    try:
        summary = await optimise(EXAMPLE, "rmsnorm", backend=device, store=store, generators=("fake",), job_id="job-1")
        experiments = await store.experiments("job-1")
    finally:
        await store.close()
    assert summary.state == "finished" and summary.job_id == "job-1" and summary.gpu.simulated
    assert [e["candidate_key"] for e in experiments] == [r.candidate.key for r in summary.rows]
    assert [e["outcome"] for e in experiments] == ["measured", "measured", "compile_failed"]
    vectorised = summary.rows[1]
    assert isinstance(vectorised.result, Measured) and vectorised.result.speedup > 1.5
    assert summary.best_key == vectorised.candidate.key and summary.faster() == [vectorised]
    assert experiments[1]["speedup"] == pytest.approx(vectorised.result.speedup)
    # what compiled was evaluated exactly once, and the best once more on a fresh plan before it is reported
    # (its quoted speedup is not the measurement that selected it); the broken one never reached the device
    assert sorted(device.evaluated) == sorted([r.candidate.key for r in summary.rows[:2]] + [vectorised.candidate.key])
    assert summary.best_retimed is not None and summary.best_retimed.candidate_key == vectorised.candidate.key
    assert "re-timed on fresh inputs" in summary.message


async def test_cancel_stops_the_job_after_the_current_candidate(fake_generators):
    cancel = asyncio.Event()
    device = SimulatedDevice(delay_s=0.01)

    def on_progress(p: Progress) -> None:
        if p.row is not None:
            cancel.set()

    summary = await optimise(EXAMPLE, "rmsnorm", backend=device, generators=("fake",), on_progress=on_progress, cancel=cancel)
    assert summary.state == "cancelled" and summary.message == "cancelled"
    assert len(summary.rows) == 1 and len(device.evaluated) == 1


async def test_missing_kernel_in_the_spec_is_a_job_error(example_copy):
    with pytest.raises(JobError, match=r"no \[kernel.layernorm\] table \(spec has: rmsnorm\)"):
        await optimise(example_copy, "layernorm", backend=None, generators=())


async def test_kernel_missing_from_the_source_is_a_job_error(example_copy):
    example_copy.write_text(example_copy.read_text().replace("void rmsnorm(", "void rms_norm("))
    with pytest.raises(JobError, match="no __global__ kernel named 'rmsnorm'.*found: rms_norm"):
        await optimise(example_copy, "rmsnorm", backend=None, generators=())


async def test_signature_mismatch_is_a_job_error_naming_the_argument(example_copy):
    example_copy.write_text(example_copy.read_text().replace("float eps)", "double eps)"))
    with pytest.raises(JobError, match=r"does not match the kernel: args\[5\] \('eps'\)"):
        await optimise(example_copy, "rmsnorm", backend=None, generators=())


async def test_original_that_does_not_compile_is_a_job_error(example_copy):
    src = example_copy.rename(example_copy.with_name("my_norm.cu"))  # a file not named after its kernel
    example_copy.with_name("rmsnorm.cu.toml").rename(src.with_name("my_norm.cu.toml"))
    src.write_text(src.read_text().replace("sum += v * v;", "sum += v * v"))
    with pytest.raises(JobError, match="the original kernel does not compile") as err:
        await optimise(src, "rmsnorm", backend=None, generators=())
    # the compiler's lines name the user's file (not NVRTC's program name, KERNEL.cu) and its line numbers
    line = next(i for i, t in enumerate(src.read_text().splitlines(), 1) if "sum += v * v" in t)
    assert "rmsnorm.cu(" not in str(err.value)
    assert any(f"my_norm.cu({n})" in str(err.value) for n in (line, line + 1)), str(err.value)


async def test_unreadable_source_is_a_job_error(tmp_path):
    with pytest.raises(JobError, match="cannot read source"):
        await optimise(tmp_path / "missing.cu", "rmsnorm", backend=None, generators=())


async def test_broken_spec_is_a_spec_error(example_copy):
    spec = example_copy.with_name("rmsnorm.cu.toml")
    spec.write_text(spec.read_text().replace('arch = "sm_90a"', 'arch = "sm_9"'))
    with pytest.raises(SpecError) as info:
        await optimise(example_copy, "rmsnorm", backend=None, generators=())
    assert info.value.key == "kernel.rmsnorm.arch" and info.value.line == 4


async def test_editor_buffer_text_is_used_instead_of_the_file(example_copy):
    """``source_text`` (an unsaved editor buffer) wins over the file on disk."""
    text = example_copy.read_text()
    example_copy.write_text("this is not CUDA")
    summary = await optimise(example_copy, "rmsnorm", backend=None, generators=(), source_text=text)
    assert summary.state == "compile_only" and summary.rows[0].candidate.source == text


async def test_a_result_over_10x_the_best_so_far_is_reverified_on_new_seeds(example_copy):
    """A candidate claiming > 10x is evaluated again with a fresh plan; failing there rejects it as reverify_*."""
    from ptxfactory.harness.simulated import SimulatedDevice
    from ptxfactory.protocol import Rejected

    class TooGoodThenWrong(SimulatedDevice):
        def __init__(self):
            super().__init__(delay_s=0)
            self.plans = []

        async def evaluate(self, spec, baseline, candidate, plan):
            self.plans.append(plan)
            result = await super().evaluate(spec, baseline, candidate, plan)
            if candidate.candidate.key == baseline.candidate.key:
                return result
            if len(self.plans) == 2:  # the candidate's first evaluation: an implausible 50x
                return result.model_copy(update={"speedup": 50.0})
            return Rejected(candidate_key=candidate.candidate.key, check="correctness", reason="wrong on new seeds")

    backend = TooGoodThenWrong()
    summary = await optimise(example_copy, "rmsnorm", backend=backend, generators=("tune",), max_candidates=2)
    row = summary.rows[1]
    assert isinstance(row.result, Rejected) and row.result.check == "reverify_correctness", row.result
    assert "50.0x claimed" in row.result.reason
    assert backend.plans[1].seeds != backend.plans[2].seeds  # re-verified on new seeds


async def test_resume_skips_candidates_already_measured(fake_generators):
    """A job resumed with ``known`` results keeps them and evaluates only the rest; on_row sees only new rows."""
    from ptxfactory.harness.simulated import SimulatedDevice

    first = await optimise(EXAMPLE, "rmsnorm", backend=SimulatedDevice(0), generators=("fake",))
    known = {r.candidate.key: r.result for r in first.rows[:2]}
    device, fresh = SimulatedDevice(0), []

    async def on_row(row):
        fresh.append(row.candidate.key)

    again = await optimise(EXAMPLE, "rmsnorm", backend=device, generators=("fake",), known=known, on_row=on_row)
    assert [r.candidate.key for r in again.rows] == [r.candidate.key for r in first.rows]
    assert fresh == [r.candidate.key for r in first.rows[2:]]  # only the rows not known before
    # the known rows are never evaluated again, except the best, re-timed on a fresh plan before it is reported
    retimed = {again.best_key} if again.best_retimed is not None else set()
    assert not set(device.evaluated) & (set(known) - retimed) and set(device.evaluated) <= set(fresh) | retimed


async def test_a_candidate_compiling_to_an_evaluated_binary_is_not_evaluated_again(example_copy):
    """``--extra-device-vectorization`` changes nothing in the naive rmsnorm's machine code: dropped after compiling."""
    from ptxfactory.harness.compile import compile_candidate
    from ptxfactory.harness.elf import code_digest
    from ptxfactory.harness.simulated import SimulatedDevice

    device = SimulatedDevice(0)
    summary = await optimise(example_copy, "rmsnorm", backend=device, generators=("tune",), patience=None)
    described = [r.candidate.description for r in summary.rows]
    assert "tune --extra-device-vectorization" not in described and summary.duplicates >= 1
    digests = [code_digest(compile_candidate(r.candidate, "sm_90a").cubin) + str(r.candidate.launch) for r in summary.rows]
    assert len(set(digests)) == len(digests)  # every evaluated row ran its own binary
    assert len(device.evaluated) == len(summary.rows) + (summary.best_retimed is not None)  # + the best, re-timed


def test_the_best_within_noise_is_the_first_evaluated():
    """A child that measured under 1% faster than its parent does not displace it; a real gain does."""
    from ptxfactory.protocol import Candidate, CandidateRow, LaunchConfig
    from ptxfactory.search.strategy import _best

    def row(name: str, speedup: float) -> CandidateRow:
        cand = Candidate(kernel_name="k", source=name, kernel_text=name, launch=LaunchConfig(grid=[1], block=[1]))
        return CandidateRow(candidate=cand, result=Measured(candidate_key=cand.key, timings=[], speedup=speedup, verified_sizes=[],
                                                            speedup_lo=speedup * 0.99, speedup_hi=speedup * 1.01))

    family, child, other = row("family", 2.79), row("child", 2.80), row("other", 1.5)
    assert _best([family, other, child], "none") is family
    better = row("better", 2.9)
    assert _best([family, child, better], "none") is better
    assert _best([row("slower", 0.9)], "none") is None
    assert _best([row("noise", 1.005)], "none") is None  # under the 1% margin: not a win
    original = row("original", 1.0).model_copy(update={"result": Measured(candidate_key="o", timings=[], speedup=1.0,
                                                                           speedup_lo=0.95, speedup_hi=1.06)})
    assert _best([original, row("inside the A/A spread", 1.05)], original.candidate.key) is None


@pytest.mark.parametrize("original_wall_s,expected", [(0.0, 120.0), (1.0, 20.0), (10.0, 50.0), (60.0, 120.0)])
async def test_a_candidate_may_take_a_few_times_the_original_before_it_counts_as_hung(example_copy, original_wall_s, expected):
    """After the original's evaluation, each candidate's time limit is 5x its wall time (at least 20 s, at most the
    plan's 120 s), so a hanging candidate costs a few originals' time, not two minutes of a one-minute job; the
    session (what the worker keeps) does not change with it."""
    from ptxfactory.harness.session import session_id
    backend = _PlanRecorder(original_wall_s)
    await optimise(example_copy, "rmsnorm", backend=backend, generators=("tune",), max_candidates=3)
    assert backend.plans[0].timeout_s == 120.0 and {p.timeout_s for p in backend.plans[1:-1]} == {expected}
    first, later = (p.model_dump(mode="json") for p in (backend.plans[0], backend.plans[1]))
    assert session_id({}, first, {"key": "k"}) == session_id({}, later, {"key": "k"})


async def test_the_report_says_why_each_restructuring_pass_left_the_original_alone():
    """A column sum: rowpar refuses it for colpar's case, smem_tile for want of a 2-D output, the atomic passes for
    want of an atomic, vectorize for the loop in its element's code; each reason once, its variants together;
    report.md and the CLI's last lines say so."""
    from ptxfactory.daemon.cli import _final_lines
    from ptxfactory.daemon.report import render_markdown

    colsum = Path(__file__).resolve().parents[2] / "examples" / "colsum" / "colsum.cu"
    summary = await optimise(colsum, "colsum", backend=None, generators=("transform",), use_lessons=False)
    refused = dict(summary.passes_refused)
    rowpar = next(p for p in refused if p.startswith("rowpar_auto"))
    assert "rowpar_lanes32" in rowpar and "colpar's case" in refused[rowpar]
    loop_line = next(i for i, line in enumerate(colsum.read_text().splitlines(), 1) if line.lstrip().startswith("for ("))
    assert f"the loop at line {loop_line} " in refused[rowpar]  # the file's line, not the kernel text's
    assert any(p.startswith("smem_tile") for p in refused) and refused.get("atomic_agg") == "no atomic in the kernel"
    assert not any(p.startswith("colpar") for p in refused)  # it applies
    applied = {k[5:] for r in summary.rows for k in r.candidate.params if k.startswith("pass:")}
    assert applied and not applied & {n for names in refused for n in names.split(", ")}  # a pass some candidate carries
    assert len(set(refused.values())) == len(refused)
    md = render_markdown(summary)
    assert "## Passes this job never applied" in md and "colpar's case" in md
    assert f"line {loop_line}: a loop in the element's code" in refused["vectorize"] and "- vectorize: line" in md  # its reason
    assert "record no reason" in md  # the local rewrites that did not apply, named in one line
    assert not {"vectorize", "ldg", "ldg_na", "stream"} & set(next(p for p, why in refused.items() if "record no reason" in why).split(", "))
    dropped = render_markdown(summary.model_copy(update={"duplicates": 5}))
    assert "- 5 candidates dropped after compiling: the same machine code and launch as one evaluated" in dropped
    assert "dropped after compiling" not in md or summary.duplicates
    assert any("transform passes never applied" in str(t) for t in _final_lines(summary, colsum.parent))
    from ptxfactory.daemon.cli import _pass_kind
    assert [_pass_kind(n) for n in ("rowpar_lanes32", "rowpar_auto", "rowpar_auto_e128", "hold_row8", "scan_block256",
                                    "smem_tile_4x4", "smem_tile_8x4_k16", "colpar_rows8", "coarsen_4", "unflatten",
                                    "mma_tile_64x128", "mma_tile_64x64_tf32")] == [
        "rowpar", "rowpar", "rowpar", "hold_row", "scan", "smem_tile", "smem_tile", "colpar", "coarsen", "unflatten",
        "mma_tile", "mma_tile"]


async def test_under_a_python_reference_the_hang_limit_stays_the_plans():
    """With a Python reference, the first candidate whose outputs differ computes the reference at the bench sizes
    inside its evaluation, which the original never did: the limit is not cut to a few originals' time."""
    from ptxfactory.harness.simulated import SimulatedDevice

    backend = _PlanRecorder(1.0)
    rowsum_seq = Path(__file__).resolve().parents[2] / "examples" / "rowsum_seq" / "rowsum_seq.cu"
    await optimise(rowsum_seq, "rowsum_seq", backend=backend, generators=("tune",), max_candidates=3, use_lessons=False)
    assert backend.plans[0].reference is not None and {p.timeout_s for p in backend.plans} == {120.0}


def _PlanRecorder(original_wall_s: float):
    """A simulated device that records each evaluation's plan and reports the original's wall time as given."""
    from ptxfactory.harness.simulated import SimulatedDevice

    class PlanRecorder(SimulatedDevice):
        def __init__(self):
            super().__init__(delay_s=0)
            self.plans = []

        async def evaluate(self, spec, baseline, candidate, plan):
            self.plans.append(plan)
            result = await super().evaluate(spec, baseline, candidate, plan)
            if candidate.candidate.key == baseline.candidate.key:
                return result.model_copy(update={"wall_s": original_wall_s})
            return result

    return PlanRecorder()


async def test_a_child_candidate_names_its_lineage():
    """Proposals made from a verified candidate (not the original) carry the parent's description before their own,
    so a row reads "transform rowpar_auto → transform vector_loops", not only the last pass."""
    from ptxfactory.harness.simulated import SimulatedDevice

    l2norm = Path(__file__).resolve().parents[2] / "examples" / "l2norm_rows" / "l2norm_rows.cu"
    summary = await optimise(l2norm, "l2norm_rows", backend=SimulatedDevice(delay_s=0), generators=("transform", "tune"),
                             max_candidates=40, use_lessons=False)
    by_key = {r.candidate.key: r.candidate for r in summary.rows}
    original = summary.rows[0].candidate.key
    children = [r.candidate for r in summary.rows if r.candidate.parent not in (None, original) and r.candidate.parent in by_key]
    assert children, [r.candidate.description for r in summary.rows]
    for c in children:
        assert c.description.startswith(by_key[c.parent].description + " → "), (c.description, by_key[c.parent].description)
    first_gen = [r.candidate for r in summary.rows if r.candidate.parent == original]
    assert first_gen and all(" → " not in c.description for c in first_gen)


async def test_a_reference_mostly_nan_on_the_spec_inputs_is_a_warning_in_the_report(tmp_path):
    """The job checks the Python reference's outputs on the spec's own inputs before any GPU work: an output that is
    mostly NaN (a log of negative sums) lets the check compare little, and the summary and report.md say so."""
    import shutil

    from ptxfactory.daemon.report import render_markdown

    folder = tmp_path / "colsum"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "colsum", folder)
    (folder / "ref.py").write_text("import numpy as np\n\ndef colsum(x, out, *, M, N):\n"
                                   "    with np.errstate(invalid='ignore'):\n        return np.log(x.sum(axis=0) - 1e9)\n")
    summary = await optimise(folder / "colsum.cu", "colsum", backend=None, generators=("transform",), max_candidates=1,
                             use_lessons=False)
    assert len(summary.warnings) == 1 and "output 'out' is 100% NaN or inf" in summary.warnings[0]
    assert "## Warnings" in render_markdown(summary)
    (folder / "ref.py").write_text((Path(__file__).resolve().parents[2] / "examples" / "colsum" / "ref.py").read_text())
    clean = await optimise(folder / "colsum.cu", "colsum", backend=None, generators=("transform",), max_candidates=1,
                           use_lessons=False)
    assert clean.warnings == [] and "## Warnings" not in render_markdown(clean)


async def test_constant_memory_the_kernel_reads_is_a_job_warning(tmp_path):
    """A kernel reading ``__constant__`` memory runs with zeros there under the tool (the spec cannot set it): the
    job's warnings and report.md say so, with the file, the line and the symbol."""
    import shutil

    from ptxfactory.daemon.report import render_markdown

    folder = tmp_path / "stencil5"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "stencil5", folder)
    source = folder / "stencil5.cu"
    text = source.read_text().replace('extern "C" __global__', '__constant__ float c_scale[1];\nextern "C" __global__', 1)
    source.write_text(text.replace("u_new[i * W + j] = 0.25f *", "u_new[i * W + j] = c_scale[0] *"))
    line = next(i for i, t in enumerate(source.read_text().splitlines(), 1) if "c_scale[0] *" in t)
    summary = await optimise(source, "stencil5", backend=None, generators=("transform",), max_candidates=1, use_lessons=False)
    assert summary.warnings == [f"stencil5.cu:{line}: constant memory 'c_scale' is read by the kernel and not set by the "
                                "spec: it is zero when the tool runs the kernel; pass it as an argument"]
    assert "## Warnings" in render_markdown(summary) and "c_scale" in render_markdown(summary)


async def test_a_floor_the_original_beats_is_a_job_warning():
    """Where the backend reports that the original kernel itself ran under the impossible-time floor (the spec's
    bytes_moved overstate), the job's warnings and report.md carry that note once, from the original's row."""
    from ptxfactory.daemon.report import render_markdown
    from ptxfactory.harness.simulated import SimulatedDevice
    from ptxfactory.protocol.result import floor_not_applied

    class Overstated(SimulatedDevice):
        async def evaluate(self, spec, baseline, candidate, plan):
            result = await super().evaluate(spec, baseline, candidate, plan)
            return result.model_copy(update={"notes": [floor_not_applied(plan.bench_sizes[0], 8.0, 10.0)]})

    rowsum = Path(__file__).resolve().parents[2] / "examples" / "rowsum" / "rowsum.cu"
    summary = await optimise(rowsum, "rowsum", backend=Overstated(delay_s=0), generators=("tune",), max_candidates=3,
                             use_lessons=False)
    assert len(summary.rows) >= 2  # every row carries the note; the job warns once, from the original's
    assert len(summary.warnings) == 1 and "the original kernel ran in 8.00 µs" in summary.warnings[0]
    assert "## Warnings" in render_markdown(summary)
    plain = await optimise(rowsum, "rowsum", backend=SimulatedDevice(delay_s=0), generators=("tune",), max_candidates=2,
                           use_lessons=False)
    assert plain.warnings == []


async def test_a_best_that_fails_its_re_timing_is_dropped_for_the_next_best(monkeypatch):
    """The best fails on the fresh plan of its re-timing (a fragile candidate the job's plan did not catch): its row
    becomes a ``retime`` Rejected, the job warns naming it, and the next best is re-timed and reported. Before, the
    job reported no best at all (seen on the H200: quantize_rows, 26 verified candidates at 5-26x, none reported)."""
    from collections import Counter

    from ptxfactory.daemon.report import render_markdown
    from ptxfactory.protocol import Rejected
    from ptxfactory.search.strategy import RETIME_CHECK

    class FragileBest(SimulatedDevice):
        def __init__(self):
            super().__init__(delay_s=0)
            self.runs, self.dropped = Counter(), []

        async def evaluate(self, spec, baseline, candidate, plan):
            key = candidate.candidate.key
            self.runs[key] += 1
            result = await super().evaluate(spec, baseline, candidate, plan)
            if key != baseline.candidate.key and self.runs[key] == 2 and not self.dropped:  # the first re-timing
                self.dropped.append(key)
                return Rejected(candidate_key=key, check="correctness", reason="max |err| 3.0 at M=4096 N=14336")
            return result

    class TwoFaster:  # two candidates SimulatedDevice rates faster (they name uint4), with different machine code
        name = "fake"

        def propose(self, ctx):
            return [ctx.original.model_copy(update={
                "source": f"typedef uint4 vec16_t;\n{ctx.original.source}\nextern \"C\" __global__ void ptxf_{n}() {{}}\n",
                "generator": self.name, "description": f"vectorised {n}", "parent": ctx.original.key}) for n in ("a", "b")]

    import ptxfactory.search.strategy as strategy

    monkeypatch.setattr(strategy, "load_generator", lambda name: TwoFaster())
    backend = FragileBest()
    summary = await optimise(EXAMPLE, "rmsnorm", backend=backend, generators=("fake",), use_lessons=False)
    assert backend.dropped, "the fake never re-timed a best"
    [bad] = [r for r in summary.rows if r.candidate.key == backend.dropped[0]]
    assert isinstance(bad.result, Rejected) and bad.result.check == RETIME_CHECK and "max |err| 3.0" in bad.result.reason
    assert summary.best_key is not None and summary.best_key != bad.key and summary.best_retimed is not None
    assert backend.runs[summary.row(summary.best_key).candidate.key] == 2  # the next best, re-timed in its turn
    assert len(summary.warnings) == 1 and "failed when re-timed on fresh inputs" in summary.warnings[0]
    assert "## Warnings" in render_markdown(summary)


async def test_fast_math_follows_a_new_best_within_a_small_budget():
    """fast_math is proposed alone, and again as a child of each new best; its knobs are unknown to an empty store,
    so the child scores its parent's (the best's) 0 and is tried soon after (with the generator's average it was not
    tried within 12 candidates: H200, bias_gelu, 2026-12-04). SimulatedDevice's times are a fixed function of the
    source, so the job is the same every run."""
    from ptxfactory.harness.simulated import SimulatedDevice

    bias_gelu = Path(__file__).resolve().parents[2] / "examples" / "bias_gelu" / "bias_gelu.cu"
    summary = await optimise(bias_gelu, "bias_gelu", backend=SimulatedDevice(delay_s=0), generators=("transform",),
                             max_candidates=12, use_lessons=False)
    original = summary.rows[0].candidate.key
    at = {r.candidate.key: i for i, r in enumerate(summary.rows)}
    follow = [i for i, r in enumerate(summary.rows) if "pass:fast_math" in r.candidate.params and r.candidate.parent != original]
    # (the candidate after the best was picked while the best was on the GPU; the best's siblings that share its knobs,
    # unflatten chains with coarsen_outer or vectorize_x since 2026-12-05, score alike and were proposed first)
    assert follow and follow[0] - at[summary.rows[follow[0]].candidate.parent] <= 5, [r.candidate.description for r in summary.rows]


def test_the_fastest_at_one_bench_size_is_progress_and_promising():
    """Two bench sizes, a short and a long row: after a candidate best overall, one slower overall but the fastest at
    the short size by 20% resets the plateau count and lends its knobs the best's score plus that lead (at the slow
    end of its spread); one faster nowhere, by 2% only, or ahead of the other candidates at a size where the original
    is faster still, counts towards the plateau and lends its own speedup only."""
    import math

    from ptxfactory.protocol import Candidate, CandidateRow, LaunchConfig, SizeTiming
    from ptxfactory.search.strategy import _Search

    sizes = [{"M": 32768, "N": 256}, {"M": 8192, "N": 262144}]

    def row(name: str, params: dict, speedups: list[float]) -> CandidateRow:
        cand = Candidate(kernel_name="k", source=name, kernel_text=name, launch=LaunchConfig(grid=[1], block=[1]),
                         generator="rowwise", params=params)
        timings = [SizeTiming(size=s, median_us=100.0 / x, p20_us=99.0 / x, p80_us=101.0 / x, baseline_median_us=100.0,
                              bytes_moved=1, gbps=1, pct_of_copy=1, floor_us=1) for s, x in zip(sizes, speedups)]
        g = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
        return CandidateRow(candidate=cand, result=Measured(candidate_key=cand.key, timings=timings, speedup=g, verified_sizes=[]))

    original = Candidate(kernel_name="k", source="o", kernel_text="o", launch=LaunchConfig(grid=[1], block=[1]))
    search = _Search(spec=None, original=original, gens={"rowwise": None}, chooser=None, max_candidates=10)
    assert search.observe(row("cluster", {"vecs": 8}, [2.0, 4.0])) is True  # the first: a new best
    assert search.since_best == 0 and search.frontier == {tuple(sorted(s.items())): x for s, x in zip(sizes, [2.0, 4.0])}
    assert search.observe(row("short", {"vecs": 2}, [2.4, 2.0])) is False  # slower overall (2.19x), fastest at N = 256
    assert search.since_best == 0
    assert search.job_knobs["rowwise:vecs=2"] == [pytest.approx(math.log(8 ** 0.5) + math.log(1.2 / 1.01))]  # (at its p80)
    assert search.observe(row("nowhere", {"vecs": 4}, [2.3, 3.4])) is False
    assert search.since_best == 1 and search.job_knobs["rowwise:vecs=4"] == [pytest.approx(math.log((2.3 * 3.4) ** 0.5))]
    # 2% ahead at N = 256 (at its median; 1% at its p80): within the noise of many sizes, no progress
    assert search.observe(row("noise", {"vecs": 1}, [2.45, 2.0])) is False
    assert search.since_best == 2 and search.job_knobs["rowwise:vecs=1"] == [pytest.approx(math.log((2.45 * 2.0) ** 0.5))]
    assert search.best_seen == pytest.approx(8 ** 0.5) and search.frontier[(("M", 32768), ("N", 256))] == pytest.approx(2.45)
    # ahead of every earlier candidate at N = 256 but slower than the original there: no progress
    slow = _Search(spec=None, original=original, gens={"rowwise": None}, chooser=None, max_candidates=10)
    assert slow.observe(row("first", {"vecs": 8}, [0.5, 3.0])) is True
    for k, x in enumerate((0.6, 0.8, 0.97)):
        assert slow.observe(row(f"slower than the original {k}", {"vecs": 2}, [x, 1.0])) is False
        assert slow.since_best == k + 1


def test_a_leader_at_one_size_has_its_neighbours_tried_next():
    """A row-wise configuration slow overall but the fastest at the short bench size: the family's next picks are its
    proposals at most two knob values away (a block size and the rows a block holds, an occupancy and a preload), best
    estimate first, for NEIGHBOUR_TRIES picks; then the kernel regression's order again. Without the step the first
    pick is the far configuration next to the best overall (H200, 2026-12-04: the job tried only the leader's own
    block size, its knob evidence favouring the best's, and missed a smaller block 3 points faster at N = 1024)."""
    import math

    from ptxfactory.protocol import Candidate, CandidateRow, LaunchConfig, SizeTiming
    from ptxfactory.search.strategy import NEIGHBOUR_TRIES, _Search

    sizes = [{"M": 32768, "N": 256}, {"M": 8192, "N": 262144}]

    def cand(params: dict) -> Candidate:
        name = repr(sorted(params.items()))
        return Candidate(kernel_name="k", source=name, kernel_text=name, launch=LaunchConfig(grid=[1], block=[1]),
                         generator="rowwise", params=params)

    def row(c: Candidate, speedups: list[float]) -> CandidateRow:
        timings = [SizeTiming(size=s, median_us=100.0 / x, p20_us=99.0 / x, p80_us=101.0 / x, baseline_median_us=100.0,
                              bytes_moved=1, gbps=1, pct_of_copy=1, floor_us=1) for s, x in zip(sizes, speedups)]
        g = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
        return CandidateRow(candidate=c, result=Measured(candidate_key=c.key, timings=timings, speedup=g, verified_sizes=[]))

    class First:
        def choose(self, live):
            return live[0].name

    original = Candidate(kernel_name="k", source="o", kernel_text="o", launch=LaunchConfig(grid=[1], block=[1]))
    best = {"block": 512, "rows": 16, "vecs": 8, "cluster": 8}
    short = {"block": 512, "rows": 32, "vecs": 2, "occupancy": "full"}
    near = [{"block": 128, "rows": 8, "vecs": 2, "occupancy": "full"}, {"block": 256, "rows": 16, "vecs": 2, "occupancy": "full"},
            {"block": 512, "rows": 32, "vecs": 2, "wpre": True}, {"block": 512, "rows": 32, "vecs": 2, "persist": 264}]
    far = [{"block": 512, "rows": 16, "vecs": 8, "cluster": 4}, {"block": 512, "rows": 16, "vecs": 4, "cluster": 16}]

    # evaluated before the leader: one near the best about as fast, two with the leader's neighbours' block sizes slow
    others = [({"block": 512, "rows": 16, "vecs": 8, "cluster": 2}, [1.9, 3.9]), ({"block": 128, "rows": 4, "vecs": 8}, [1.3, 1.2]),
              ({"block": 256, "rows": 8, "vecs": 8}, [1.3, 1.2])]

    def search(leader: bool) -> _Search:
        s = _Search(spec=None, original=original, gens={"rowwise": None}, chooser=First(), max_candidates=20)
        s.observe(row(cand(best), [2.0, 4.0]))
        for params, speedups in others:
            s.observe(row(cand(params), speedups))
        s.observe(row(cand(short), [2.5 if leader else 1.9, 1.5]))
        s.extend("rowwise", [cand(p) for p in far + near])
        return s

    led = search(leader=True)
    assert led._score(led.queues["rowwise"][0], math.log(led.best_seen)) > max(  # the regression alone: far[0] first
        led._score(c, math.log(led.best_seen)) for c in led.queues["rowwise"][len(far):])
    picks = [led.next().params for _ in range(NEIGHBOUR_TRIES)]
    assert all(p in near for p in picks) and len({repr(p) for p in picks}) == NEIGHBOUR_TRIES
    assert "rowwise" not in led.leaders  # the step is over: the rest in the estimate's order
    assert led.next().params in far + near
    plain = search(leader=False)  # no lead at any size: the step is the best's (a new best leads), its neighbour first
    assert plain.next().params == far[0] and plain.leaders["rowwise"] == (best, NEIGHBOUR_TRIES - 1)


async def test_the_report_says_why_no_expert_family_fits():
    """A column sum (one thread per column): no family's skeleton fits, and the report names each family with what
    the spec or the source lacks for it, in the spec's terms; an RMSNorm, which rowwise takes, lists none (the other
    families' misfits are noise there)."""
    from ptxfactory.daemon.cli import _final_lines
    from ptxfactory.daemon.report import render_markdown

    families = ("rowwise", "softmax", "rowreduce", "elementwise", "transpose")
    colsum = Path(__file__).resolve().parents[2] / "examples" / "colsum" / "colsum.cu"
    summary = await optimise(colsum, "colsum", backend=None, generators=families, use_lessons=False)
    why = dict(summary.families_refused)
    assert set(why) == set(families) and summary.kernel_class.startswith("generic")
    assert "no exponential" in why["softmax"]  # the source check comes first
    assert "is not a permutation of the input x" in why["transpose"], why["transpose"]
    assert all(reason and reason != "its skeleton does not fit" for reason in why.values()), why
    md = render_markdown(summary)
    assert "## Expert families that do not fit" in md and f"- softmax: {why['softmax']}" in md
    assert any("no expert family fits" in str(line) for line in _final_lines(summary, colsum.parent))
    rmsnorm = Path(__file__).resolve().parents[2] / "examples" / "rmsnorm" / "rmsnorm.cu"
    fits = await optimise(rmsnorm, "rmsnorm", backend=None, generators=families, use_lessons=False, max_candidates=2)
    assert fits.families_refused == [] and "## Expert families" not in render_markdown(fits)


async def test_the_families_section_lists_the_expert_skeletons_only_and_each_once():
    """A row entropy (bench/trials/row_entropy: one thread per row, a per-row output that is not the row's sum), a
    kernel no family takes: the agent generator (an arm, not a skeleton) is not listed with the families; rowreduce,
    whose signature fits but whose store does not, is listed there with that reason and no longer among the passes
    (with another family fitting, it stays there). The rowwise reason names the kernel's own input."""
    from ptxfactory.daemon.report import render_markdown

    entropy = Path(__file__).resolve().parents[2] / "bench" / "trials" / "row_entropy" / "row_entropy.cu"
    gens = ("rowwise", "softmax", "rowreduce", "elementwise", "transpose", "transform", "agent")
    summary = await optimise(entropy, "row_entropy", backend=None, generators=gens, use_lessons=False, max_candidates=3)
    why = dict(summary.families_refused)
    assert set(why) == {"rowwise", "softmax", "rowreduce", "elementwise", "transpose"}
    assert "stores something other than the row's sum" in why["rowreduce"]
    assert "rowreduce" not in dict(summary.passes_refused) and summary.passes_refused  # the passes' own stay
    assert why["rowwise"].startswith("outputs of p's shape [M, N]: 0")
    assert render_markdown(summary).count("stores something other than the row's sum") == 1


class _ShadowSeeing(SimulatedDevice):
    """A simulated device that, like the GPU backend, asks for the original's float64 shadow, and records the
    baselines it is handed."""

    uses_shadow = True

    def __init__(self):
        super().__init__(0)
        self.baselines = []

    async def evaluate(self, spec, baseline, candidate, plan):
        self.baselines.append(baseline)
        return await super().evaluate(spec, baseline, candidate, plan)


async def test_a_backend_that_uses_the_shadow_gets_it_with_the_baseline():
    """The job compiles the original's float64 shadow (harness/shadow.py) once, for a backend that asks for it, and
    hands it with the baseline to every evaluation; a backend that does not ask gets none (nothing compiled)."""
    device = _ShadowSeeing()
    await optimise(EXAMPLE, "rmsnorm", backend=device, generators=("tune",), max_candidates=2)
    shadows = {id(b.shadow) for b in device.baselines}
    assert device.baselines and len(shadows) == 1 and device.baselines[0].shadow is not None
    assert "double sum" in device.baselines[0].shadow.candidate.source
    plain = _ShadowSeeing()
    plain.uses_shadow = False
    await optimise(EXAMPLE, "rmsnorm", backend=plain, generators=("tune",), max_candidates=2)
    assert plain.baselines and all(b.shadow is None for b in plain.baselines)
