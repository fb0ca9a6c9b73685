"""The daemon's pure parts: the committed JSON Schema, occupancy, the job store, document keys, progress figures."""
from __future__ import annotations

import json
import sqlite3

import pytest

from ptxfactory.daemon.jobs import JobRecord, path_key
from ptxfactory.daemon.jobstore import JobStore
from ptxfactory.harness.occupancy import occupancy
from ptxfactory.protocol import Candidate, CandidateRow, JobSummary, LaunchConfig, Measured, SizeTiming
from ptxfactory.protocol.lsp import COMMANDS, SCHEMA_PATH, schema_document, schema_text


def test_committed_schema_matches_the_models():
    """protocol/schema/lsp.schema.json is generated: regenerate it with `python -m ptxfactory.protocol.lsp`."""
    assert SCHEMA_PATH.read_text() == schema_text()
    doc = json.loads(SCHEMA_PATH.read_text())
    assert set(doc["x-commands"]) == set(COMMANDS)
    for name, shapes in schema_document()["x-commands"].items():
        for ref in shapes.values():
            assert ref["$ref"].split("/")[-1] in doc["$defs"], name
    assert doc["$defs"]["OptimiseArgs"]["required"] == ["uri", "kernel"]


@pytest.mark.parametrize("arch, threads, regs, smem, pct, blocks, limit", [
    ("sm_90a", 256, 16, 1024, 1.0, 8, "warps per SM"),
    ("sm_90a", 1024, 64, 0, 0.5, 1, "registers"),
    ("sm_90a", 1024, 32, 0, 1.0, 2, "warps per SM"),
    ("sm_86", 256, 32, 0, 1.0, 6, "warps per SM"),
    ("sm_90a", 128, 32, 100 * 1024, 8 / 64, 2, "shared memory"),
    ("sm_90a", 128, 32, 300 * 1024, 0.0, 0, "shared memory"),
])
def test_occupancy(arch, threads, regs, smem, pct, blocks, limit):
    occ = occupancy(arch, threads, regs, smem)
    assert (occ.blocks_per_sm, occ.limited_by) == (blocks, limit)
    assert occ.fraction == pytest.approx(pct)


def test_path_key_is_the_same_for_every_spelling_of_a_file_uri(tmp_path):
    path = tmp_path / "a b" / "k.cu"
    assert path_key(path.as_uri()) == path_key(str(path)) == path_key(f"file://{tmp_path}/a%20b/./k.cu") == str(path)


def test_progress_never_goes_down():
    job = JobRecord(job_id="j", path="/x.cu", uri="file:///x.cu", kernel="k")
    job.progress(5, 10, "a")
    job.progress(5, 20, "b")  # a tuning round added candidates
    assert job.percentage == 50 and job.total == 20
    job.progress(20, 20, "c")
    assert job.percentage == 99  # 100 only once it has ended
    job.state = "finished"
    assert job.info().percentage == 100


def _row(i: int, speedup: float | None) -> CandidateRow:
    cand = Candidate(kernel_name="k", source=f"int v{i};", kernel_text="", launch=LaunchConfig(grid=[1], block=[32]),
                     generator="original" if i == 0 else "tune", description=f"cand {i}")
    x = speedup or 1.0
    timing = SizeTiming(size={"N": 1}, median_us=10 / x, p20_us=10 / x, p80_us=10 / x, baseline_median_us=10, bytes_moved=8,
                        gbps=1.0, pct_of_copy=1.0, floor_us=0.1)
    return CandidateRow(candidate=cand, result=Measured(candidate_key=cand.key, timings=[timing], speedup=x, simulated=True,
                                                        speedup_lo=x * 0.99, speedup_hi=x * 1.01))


async def test_job_store_round_trip(tmp_path):
    db = tmp_path / "jobs.sqlite"
    store = await JobStore.open(db)
    try:
        await store.create(job_id="j1", path="/x.cu", uri="file:///x.cu", kernel="k", source_text="src")
        rows = [_row(0, None), _row(1, 2.0), _row(2, 1.5)]
        for seq, row in enumerate(rows[:2]):
            await store.add_row("j1", seq, row)
        with pytest.raises(sqlite3.IntegrityError):  # a candidate is stored once per job
            await store.add_row("j1", 5, rows[1])
        await store._db.rollback()
        await store.set_state("j1", "running")
        [unfinished] = await store.unfinished()
        assert (unfinished.id, unfinished.state, unfinished.source_text, unfinished.done) == ("j1", "running", "src", 2)
        assert [r.candidate.key for r in await store.rows("j1")] == [r.candidate.key for r in rows[:2]]
        await store.add_row("j1", 2, rows[2])
        summary = JobSummary(job_id="j1", source_path="/x.cu", kernel="k", state="finished", rows=rows,
                             baseline_key=rows[0].candidate.key, best_key=rows[1].key)
        await store.set_state("j1", "finished", summary=summary, done=3, total=3, message="best")
        assert await store.unfinished() == []
    finally:
        await store.close()
    ro = await JobStore.open(db, read_only=True)
    try:
        job = await ro.get("j1", full=True)
        assert (job.state, job.best_speedup, job.best_candidate, job.simulated) == ("finished", 2.0, "cand 1", True)
        assert job.summary.faster()[0].candidate.description == "cand 1"
        assert (await ro.latest_with_summary("/x.cu", "k")).id == "j1"
        assert [j.id for j in await ro.list(active=True)] == []
    finally:
        await ro.close()


async def test_spec_work_runs_off_the_loop_and_has_a_deadline(tmp_path, monkeypatch, example_copy):
    """A plan that never finishes fails the job (JobError, stored as failed) while the event loop keeps running."""
    import asyncio
    import time

    import ptxfactory.search.strategy as strategy
    from ptxfactory.daemon.engine import Engine

    def stuck_plan(*args, **kwargs):
        time.sleep(1.5)
        raise AssertionError("should have been abandoned")

    monkeypatch.setattr(strategy, "make_plan", stuck_plan)
    monkeypatch.setattr(strategy, "OFF_LOOP_TIMEOUT_S", 0.3)
    monkeypatch.setenv("PTXFACTORY_COMPILE_WORKERS", "0")
    engine = await Engine.open("simulated", tmp_path / "lessons.sqlite", tmp_path / "jobs.sqlite")
    try:
        await engine.start()
        job, _ = await engine.submit(example_copy, example_copy.as_uri(), "rmsnorm", None)
        ticks = 0
        while not job.ended.is_set():
            await asyncio.sleep(0.01)
            ticks += 1
        assert job.state == "failed" and "planning the sizes to verify took more than" in job.error
        assert ticks > 10  # the loop ran meanwhile
        assert (await engine.jobs.get(job.job_id)).state == "failed"
    finally:
        await engine.close()


def test_the_best_is_one_notion_everywhere():
    """Candidates within 1% of the fastest are tied and the first evaluated wins: the running job, the summary, the
    stored best, the end message, the hover, the code actions' order and the report all name the same one."""
    from ptxfactory.daemon import report
    from ptxfactory.daemon.jobs import end_message
    from ptxfactory.daemon.lsp.hover import best_lines
    from ptxfactory.protocol.job import best_row

    rows = [_row(0, None), _row(1, 1.30), _row(2, 2.00), _row(3, 1.00 * 1.7), _row(4, 2.015)]
    base = rows[0].key
    assert best_row(rows, base) is rows[2]  # 2.015x is within 1% of 2.00x: the first evaluated of the two
    running = JobRecord(job_id="j", path="/x.cu", uri="file:///x.cu", kernel="k", rows=rows, state="running")
    assert running.best() is rows[2] and running.faster()[0] is rows[2]
    assert [r.key for r in running.faster()] == [rows[2].key, rows[4].key, rows[3].key, rows[1].key]
    assert "candidate 2:" in "\n".join(best_lines(running))
    summary = JobSummary(job_id="j", source_path="/x.cu", kernel="k", state="finished", rows=rows, baseline_key=base,
                         best_key=rows[2].key)
    ended = JobRecord(job_id="j", path="/x.cu", uri="file:///x.cu", kernel="k", rows=rows, state="finished", summary=summary)
    assert ended.best() is rows[2] and ended.info().best_candidate == "cand 2"
    assert "cand 2" in end_message(summary) and "best: #2 " in report.result_line(summary)
    assert "candidate 2:" in "\n".join(best_lines(ended))
    # a best that did not hold up when re-timed: nothing is offered, nothing named
    nothing = summary.model_copy(update={"best_key": None})
    assert nothing.faster() == [] and "cand" not in end_message(nothing)
