"""The lesson store: experiments round-trip through SQLite (WAL), lessons score knobs from outcomes."""
from __future__ import annotations

import math
import sqlite3

from pydantic import TypeAdapter

from ptxfactory.protocol import (
    Candidate, CompileFailed, EvalResult, GpuFacts, LaunchConfig, Measured, NotRun, Rejected, Resources, SizeTiming,
)
from ptxfactory.search.lessons import LessonStore, default_path

GPU = GpuFacts(name="NVIDIA H200", arch="sm_90a", sm_count=132, l2_bytes=60 << 20, copy_gbps=4000.0, peak_gbps=4800.0)
RES = Resources(registers=32, shared_bytes=128)


def cand(generator: str = "rowwise", description: str = "tpr=128", **params) -> Candidate:
    return Candidate(kernel_name="rmsnorm", source=f"// {generator} {description} {params}\n__global__ void rmsnorm() {{}}",
                     kernel_text="", launch=LaunchConfig(grid=["M"], block=[256]), generator=generator,
                     description=description, params=params)


def measured(c: Candidate, speedup: float) -> Measured:
    t = SizeTiming(size={"M": 4096, "N": 4096}, median_us=10.0, p20_us=9.9, p80_us=10.1, baseline_median_us=10.0 * speedup,
                   bytes_moved=1 << 26, gbps=6710.9, pct_of_copy=90.0, floor_us=7.0)
    return Measured(candidate_key=c.key, resources=RES, timings=[t], speedup=speedup, verified_sizes=[{"M": 7, "N": 1000}])


async def record(store: LessonStore, c: Candidate, result, job_id: str = "job1", kernel_class: str = "rowwise_norm",
                 arch: str = "sm_90a") -> None:
    await store.record(job_id=job_id, kernel_fingerprint="f" * 16, kernel_class=kernel_class, arch=arch,
                       candidate=c, result=result, gpu=GPU)


async def test_store_is_in_wal_mode_and_persists(tmp_path):
    path = tmp_path / "deep" / "lessons.sqlite"
    store = await LessonStore.open(path)
    try:
        await record(store, cand(), NotRun(candidate_key="k", reason="no GPU"))
    finally:
        await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store = await LessonStore.open(path)
    try:
        assert len(await store.experiments()) == 1
    finally:
        await store.close()


async def test_record_and_experiments_round_trip(tmp_path):
    store = await LessonStore.open(tmp_path / "lessons.sqlite")
    try:
        good, bad, broken = cand(tpr=128), cand(description="tpr=64", tpr=64), cand(description="broken", tpr=32)
        await record(store, good, measured(good, 2.0))
        await record(store, bad, Rejected(candidate_key=bad.key, check="correctness", reason="max error 0.5 at [3, 7]"))
        await record(store, broken, CompileFailed(candidate_key=broken.key, log="k.cu(3): error: expected a ;"))
        await record(store, cand("original", "original kernel"), NotRun(candidate_key="o", reason="no GPU"), job_id="job2")

        rows = await store.experiments("job1")
        assert [r["outcome"] for r in rows] == ["measured", "rejected", "compile_failed"]
        assert [r["candidate_key"] for r in rows] == [good.key, bad.key, broken.key]
        first = rows[0]
        assert first["generator"] == "rowwise" and first["kernel"] == "rmsnorm" and first["gpu"] == "NVIDIA H200"
        assert first["speedup"] == 2.0 and math.isclose(first["geomean_us"], 10.0)
        assert first["params"] == '{"tpr": 128}'
        assert rows[1]["check_failed"] == "correctness" and rows[1]["reason"] == "max error 0.5 at [3, 7]"
        assert "expected a ;" in rows[2]["reason"] and rows[2]["speedup"] is None
        # the full result is kept and parses back into the same model
        assert TypeAdapter(EvalResult).validate_json(first["result"]) == measured(good, 2.0)
        assert len(await store.experiments()) == 4
        assert [r["job_id"] for r in await store.experiments("job2")] == ["job2"]
    finally:
        await store.close()


async def test_lessons_score_knobs_by_outcome(tmp_path):
    store = await LessonStore.open(tmp_path / "lessons.sqlite")
    try:
        a, b, c, d = cand(tpr=128), cand(description="b", tpr=128, vec=8), cand(description="c", tpr=64), cand(description="d", tpr=32)
        await record(store, a, measured(a, 4.0))
        await record(store, b, Rejected(candidate_key=b.key, check="race", reason="second run differs"))
        await record(store, c, measured(c, 2.0))
        await record(store, d, NotRun(candidate_key=d.key, reason="no GPU"))  # not evidence either way
        await record(store, cand("original", "original kernel"), measured(cand("original"), 1.0))  # the baseline is no knob
        other = cand(description="elsewhere", tpr=256)
        await record(store, other, measured(other, 3.0), kernel_class="generic")
        await record(store, other, measured(other, 3.0), arch="sm_100a")

        priors = await scores(store, "rowwise_norm", "sm_90a")
        assert set(priors) == {"rowwise:tpr=128", "rowwise:vec=8", "rowwise:tpr=64"}
        assert math.isclose(priors["rowwise:tpr=128"], (math.log(4.0) + math.log(0.5)) / 2)
        assert math.isclose(priors["rowwise:vec=8"], math.log(0.5))
        assert math.isclose(priors["rowwise:tpr=64"], math.log(2.0))
        assert await scores(store, "rowwise_norm", "sm_80") == {}
    finally:
        await store.close()


async def scores(store: LessonStore, kernel_class: str, arch: str) -> dict[str, float]:
    """Each lesson's score by its knob (``"generator:param=value"``) on one kernel class and arch."""
    return {lesson.knob: lesson.score for lesson in await store.lessons(kernel_class, arch)}


def test_default_path_follows_ptxfactory_home(ptxfactory_home, monkeypatch):
    assert default_path() == ptxfactory_home / "lessons.sqlite"
    monkeypatch.delenv("PTXFACTORY_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(ptxfactory_home / "xdg"))
    assert default_path() == ptxfactory_home / "xdg" / "ptxfactory" / "lessons.sqlite"


async def test_open_without_path_uses_the_default(ptxfactory_home):
    store = await LessonStore.open()
    try:
        assert store.path == ptxfactory_home / "lessons.sqlite" and store.path.exists()
    finally:
        await store.close()


async def test_lessons_ignore_the_simulated_device(tmp_path):
    store = await LessonStore.open(tmp_path / "lessons.sqlite")
    sim = GPU.model_copy(update={"name": "SimulatedDevice (no GPU; tests only)", "simulated": True})
    try:
        c = cand(tpr=128)
        await store.record(job_id="j", kernel_fingerprint="f" * 16, kernel_class="rowwise_norm", arch="sm_90a",
                           candidate=c, result=measured(c, 3.0), gpu=sim)
        assert len(await store.experiments()) == 1  # recorded, but no evidence
        assert await scores(store, "rowwise_norm", "sm_90a") == {}
    finally:
        await store.close()


async def test_lessons_distil_evidence_per_knob(tmp_path):
    """Lessons count tries, kernels, verified, faster and broken experiments per knob, with the commonest failure."""
    store = await LessonStore.open(tmp_path / "l.sqlite")
    try:
        a, b, c = cand(vecs=4, tpr=128), cand(description="other", vecs=4, tpr=256), cand(description="bad", vecs=8)
        await record(store, a, measured(a, 2.5))
        await store.record(job_id="j2", kernel_fingerprint="e" * 16, kernel_class="rowwise_norm", arch="sm_90a",
                           candidate=b, result=measured(b, 3.0), gpu=GPU)
        await record(store, c, Rejected(candidate_key=c.key, check="correctness", reason="x"))
        typo = cand(description="typo", vecs=16)
        await record(store, typo, CompileFailed(candidate_key=typo.key, log="k.cu(3): error: expected a ;"))
        await record(store, cand(description="other arch", vecs=4), measured(a, 9.0), arch="sm_80")
        lessons = {lesson.knob: lesson for lesson in await store.lessons("rowwise_norm", "sm_90a")}
    finally:
        await store.close()
    v4 = lessons["rowwise:vecs=4"]
    assert (v4.tried, v4.kernels, v4.verified, v4.faster, v4.broke) == (2, 2, 2, 2, 0)
    assert math.isclose(v4.median_speedup, 2.75) and "median 2.75x over 2 kernel(s)" in v4.summary()
    v8 = lessons["rowwise:vecs=8"]
    assert (v8.verified, v8.broke, v8.top_failure, v8.median_speedup) == (0, 1, "correctness", None)
    assert v8.score < 0 < v4.score
    v16 = lessons["rowwise:vecs=16"]  # a candidate that does not compile broke too
    assert (v16.tried, v16.verified, v16.broke, v16.top_failure) == (1, 0, 1, "compile_failed")
