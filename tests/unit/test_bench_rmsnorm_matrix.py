"""bench/rmsnorm_matrix.py (issue 13's benchmark) on the CPU: the matrix spec it gives the main job, and its table,
geomeans and report from recorded timings (the GPU part runs on the GPU machine only)."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from ptxfactory.protocol import load_spec

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("rmsnorm_matrix", ROOT / "bench" / "rmsnorm_matrix.py")
rm = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("rmsnorm_matrix", rm)  # (its dataclass reads its module)
_spec.loader.exec_module(rm)


def test_the_matrix_spec_benches_every_shape_and_checks_every_row_length(tmp_path):
    original = (ROOT / "examples" / "rmsnorm" / "rmsnorm.cu.toml").read_text()
    path = tmp_path / "rmsnorm.cu.toml"
    path.write_text(rm.matrix_spec(original))
    spec = load_spec(path).kernels["rmsnorm"]
    assert [(s["M"], s["N"]) for s in spec.bench.sizes] == list(rm.MATRIX)
    before = load_spec(ROOT / "examples" / "rmsnorm" / "rmsnorm.cu.toml").kernels["rmsnorm"].check.sizes
    assert spec.check.sizes[:len(before)] == before  # the example's own check sizes stay, first
    assert {s["N"] for s in spec.check.sizes[len(before):]} == {n for _, n in rm.MATRIX}
    assert all(s["M"] == 3 for s in spec.check.sizes[len(before):])
    with pytest.raises(ValueError, match="no \\[kernel.other.bench\\] section"):
        rm.matrix_spec(original, kernel="other")
    with pytest.raises(ValueError, match="no one-line sizes"):
        rm.matrix_spec(original.replace("sizes = [{ M = 32768", "sizes = [\n{ M = 32768"))


def test_bytes_and_percentiles():
    assert rm.bytes_moved(32768, 256) == 2 * 32768 * 256 * 2 + 2 * 256
    t = rm.Timing.of([float(v) for v in range(1, 11)])  # 1..10 µs
    assert (t.median_us, t.p10_us, t.p90_us) == (6.0, 2.0, 10.0)
    with pytest.raises(ValueError):
        rm.Timing.of([])


def test_table_ratios_failures_and_geomeans():
    matrix = ((1000, 1000), (1000, 2000), (1000, 4000))
    us = lambda v: rm.Timing(median_us=v, p10_us=v, p90_us=v)  # noqa: E731
    times = {
        "factory": {"1000x1000": us(10.0), "1000x2000": us(20.0), "1000x4000": us(40.0)},
        "torch": {"1000x1000": us(20.0), "1000x2000": us(40.0), "1000x4000": us(80.0)},
        "quack": {"1000x1000": us(9.0), "1000x2000": us(22.0), "1000x4000": us(40.0)},
        "quack_tuned": {"1000x1000": us(11.0), "1000x2000": us(19.0), "1000x4000": rm.Timing(error="out of shared memory")},
    }
    rows = rm.table(times, copy_gbps=4000.0, matrix=matrix)
    first, second, third, mean = rows
    assert first["factory_gbps"] == pytest.approx(rm.bytes_moved(1000, 1000) / 10e3)
    assert first["factory_pct_copy"] == pytest.approx(100 * first["factory_gbps"] / 4000.0)
    assert first["vs_torch"] == pytest.approx(2.0) and first["vs_quack"] == pytest.approx(0.9)
    assert first["vs_best_quack"] == pytest.approx(0.9)  # the faster QuACK entry point decides
    assert second["vs_best_quack"] == pytest.approx(19.0 / 20.0)
    assert third["quack_tuned_gbps"] is None and third["vs_quack_tuned"] is None and third["vs_best_quack"] == pytest.approx(1.0)
    assert mean["shape"] == "geomean" and mean["vs_torch"] == pytest.approx(2.0)
    assert mean["vs_quack_tuned_n"] == 2 and mean["vs_quack_tuned"] == pytest.approx(math.sqrt(1.1 * 0.95))
    assert mean["vs_best_quack"] == pytest.approx((0.9 * 0.95 * 1.0) ** (1 / 3))
    doc = {"date": "2026-12-03", "gpu": {"name": "test GPU"}, "copy_gbps": 4000.0, "versions": {"torch": "x"},
           "times": {k: {s: vars(t) for s, t in v.items()} for k, v in times.items()}, "table": rows}
    md = rm.render_markdown(doc)
    assert "| geomean |" in md and "quack_tuned at 1000x4000: out of shared memory" in md
    assert md.count("\n| 1000x") == 3


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    us = rm.Timing(median_us=10.0, p10_us=10.0, p90_us=10.0)
    times = {k: {"1000x1000": us} for k in ("factory", *rm.BASELINES)}
    doc = {"copy_gbps": 4000.0, "gpu": {"name": "test GPU"}, "table": rm.table(times, 4000.0, matrix=((1000, 1000),))}
    rm.plot(doc, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_per_shape_best_takes_the_fastest_verified_row_at_each_shape_and_the_table_rates_it():
    from ptxfactory.protocol import CandidateRow, Candidate, JobSummary, LaunchConfig, Measured, Rejected, SizeTiming

    def row(name, times, ok=True):  # times: {(M, N): median µs}
        c = Candidate(kernel_name="k", source=f"// {name}", kernel_text="", generator="rowwise", description=name,
                      launch=LaunchConfig(grid=["M"], block=[256]))
        if not ok:
            return CandidateRow(candidate=c, result=Rejected(candidate_key=c.key, check="correctness", reason="wrong"))
        timings = [SizeTiming(size={"M": m, "N": n}, median_us=us, p20_us=us, p80_us=us, baseline_median_us=10.0,
                              bytes_moved=1, gbps=1.0, pct_of_copy=1.0, floor_us=0.1) for (m, n), us in times.items()]
        return CandidateRow(candidate=c, result=Measured(candidate_key=c.key, timings=timings, speedup=1.0))

    rows = [row("original", {(10, 100): 9.0, (10, 200): 10.0, (10, 400): 10.0}), row("a", {(10, 100): 5.0, (10, 200): 9.0, (10, 400): 11.0}),
            row("b", {(10, 100): 6.0, (10, 200): 8.0, (10, 400): 12.0}), row("wrong", {}, ok=False)]
    summary = JobSummary(job_id="j", source_path="k.cu", kernel="k", state="finished", rows=rows, baseline_key=rows[0].key,
                         best_key=rows[1].key)
    picks = rm.per_shape_best(summary)
    assert {k: r.candidate.description for k, r in picks.items()} == {"10x100": "a", "10x200": "b", "10x400": "original"}
    us = lambda v: rm.Timing(median_us=v, p10_us=v, p90_us=v)  # noqa: E731
    times = {"factory": {"10x100": us(10.0)}, "factory_per_shape": {"10x100": us(8.0)}, "torch": {"10x100": us(16.0)},
             "quack": {"10x100": us(9.0)}, "quack_tuned": {"10x100": rm.Timing(error="x")}}
    first, mean = rm.table(times, 4000.0, matrix=((10, 100),))
    assert first["vs_best_quack"] == pytest.approx(0.9) and first["per_shape_vs_best_quack"] == pytest.approx(9 / 8)
    assert first["per_shape_vs_torch"] == pytest.approx(2.0) and mean["per_shape_vs_best_quack"] == pytest.approx(9 / 8)
    doc = {"copy_gbps": 4000.0, "gpu": {"name": "g"}, "times": {k: {s: vars(t) for s, t in v.items()} for k, v in times.items()},
           "table": [first, mean], "factory_per_shape": {"10x100": "a"}}
    md = rm.render_markdown(doc)
    assert "factory_per_shape GB/s" in md and "per shape vs best quack" in md and "10x100: a" in md


def test_a_saved_job_summary_is_read_back_and_its_best_and_per_shape_picks_compile(tmp_path):
    """--job-only saves the JobSummary (JSON), --from-job reads it back: the rows keep their candidates' sources and
    timings, and factory_best compiles the best and the per-shape picks here (NVRTC) for the matrix's spec."""
    from ptxfactory.protocol import CandidateRow, JobSummary, Measured, Resources, SizeTiming
    from ptxfactory.search.strategy import original_candidate

    spec = rm.matrix_example(tmp_path)
    orig = original_candidate(spec, (tmp_path / "rmsnorm.cu").read_text())
    timings = [SizeTiming(size={"M": m, "N": n}, median_us=10.0, p20_us=9.0, p80_us=11.0, baseline_median_us=10.0,
                          bytes_moved=rm.bytes_moved(m, n), gbps=1.0, pct_of_copy=1.0, floor_us=1.0) for m, n in rm.MATRIX]
    row = CandidateRow(candidate=orig, result=Measured(candidate_key=orig.key, resources=Resources(registers=32, shared_bytes=0),
                                                        timings=timings, speedup=1.0))
    saved = tmp_path / "summary.json"
    saved.write_text(JobSummary(job_id="j", source_path="rmsnorm.cu", kernel="rmsnorm", state="finished", rows=[row],
                                baseline_key=orig.key, best_key=orig.key).model_dump_json())
    summary = JobSummary.model_validate_json(saved.read_text())
    compiled, spec2, per_shape = rm.factory_best(summary, tmp_path / "work" if (tmp_path / "work").mkdir() is None else None)
    assert compiled.candidate.key == orig.key and spec2.name == "rmsnorm"
    assert sorted(per_shape) == sorted(n for _, n in rm.MATRIX) and all(c is compiled for c in per_shape.values())
