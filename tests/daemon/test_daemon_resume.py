"""``kill -9`` of the daemon in the middle of a job, then a restart: the job resumes, no candidate measured
before the kill is evaluated again, nothing measured is lost, and the editor that reconnects sees the job.

Proof of "not evaluated again": the simulated backend appends each evaluated candidate's key to the
file named by ``PTXFACTORY_SIMULATED_LOG`` (tests only) as soon as its evaluation returns; every key
stored before the kill must appear there exactly once after the resumed job has finished."""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from _daemon_support import (
    close, code_actions, copy_example, execute, line_of, open_document, progress_ended, run_cli, stored_rows,
    stored_state, unix_client, until,
)

pytestmark = pytest.mark.timeout(90)

CANDIDATES = 10


async def test_kill9_mid_job_then_restart_resumes_without_re_evaluating(start_daemon, tmp_path: Path, ptxfactory_home: Path):
    evaluated = tmp_path / "evaluated.log"
    daemon = start_daemon(delay=0.3, max_candidates=CANDIDATES, env={"PTXFACTORY_SIMULATED_LOG": str(evaluated)})
    jobs_db = ptxfactory_home / "jobs.sqlite"
    source = copy_example(tmp_path / "src")
    text = source.read_text()

    editor = await unix_client(daemon.socket, "visual-studio-code", tmp_path)
    try:
        started = await execute(editor, "ptxfactory.optimise", {"uri": open_document(editor, source), "kernel": "rmsnorm"})
        job_id = started["job_id"]
        await until(lambda: len(stored_rows(jobs_db, job_id)) >= 4, what="four stored rows")
        daemon.kill9()
    finally:
        await close(editor, polite=False)

    before = stored_rows(jobs_db, job_id)
    assert 4 <= len(before) < CANDIDATES, "the job should be midway when killed"
    assert stored_state(jobs_db, job_id) == "running"
    evaluated_before = evaluated.read_text().split()

    restarted = time.time()
    daemon.start()  # same socket (the stale file is replaced), same stores
    editor = await unix_client(daemon.socket, "neovim", tmp_path)
    try:
        uri = open_document(editor, source)  # the reconnecting editor sees the resumed job's progress
        token = f"ptxfactory/job/{job_id}"
        begin, *_, end = await until(lambda: progress_ended(editor, token), what="the resumed job's end")
        assert begin.title == "Optimising rmsnorm" and "best" in end.message
        assert f"resuming job {job_id}" in daemon.log() and f"{len(before)} rows kept" in daemon.log()
        listed = await execute(editor, "ptxfactory.jobs", {})
        assert [(j["job_id"], j["state"], j["done"]) for j in listed["jobs"]] == [(job_id, "finished", CANDIDATES)]
        assert await code_actions(editor, uri, line_of(text, "float sum = 0.0f;"))
    finally:
        await close(editor)

    after = stored_rows(jobs_db, job_id)
    keys = [key for _, key, _ in after]
    assert len(after) == CANDIDATES and len(set(keys)) == CANDIDATES  # every candidate once
    assert after[: len(before)] == before  # the rows measured before the kill are untouched
    assert all(created >= restarted for _, _, created in after[len(before):])
    counts = Counter(evaluated.read_text().split())
    # every candidate measured before the kill is evaluated once, except the job's best: the job re-times it once on
    # fresh inputs before reporting it (strategy._confirm), wherever it was measured
    again = {key: counts[key] for _, key, _ in before if counts[key] != 1}
    reported = run_cli("report", job_id, "--socket", daemon.socket, "--json")
    assert reported.returncode == 0, reported.stderr
    best_key = json.loads(reported.stdout)["best_key"]
    assert set(again) <= {best_key} and set(again.values()) <= {2}, ("a candidate measured before the kill was evaluated again", again)
    assert set(counts) <= set(keys)  # nothing evaluated outside the job
    assert sum(counts.values()) <= CANDIDATES + 2  # at most the evaluation in flight at the kill repeated, and the re-timing
    assert len(evaluated_before) >= len(before)
    assert stored_state(jobs_db, job_id) == "finished"

    cli = run_cli("jobs", "--socket", daemon.socket, "--json")
    assert cli.returncode == 0 and job_id in cli.stdout


def _set_stalled(jobs_db: Path, job_id: str, n: int) -> None:
    import sqlite3

    con = sqlite3.connect(jobs_db, timeout=5)
    try:
        con.execute("UPDATE jobs SET stalled_starts = ? WHERE id = ?", (n, job_id))
        con.commit()
    finally:
        con.close()


async def test_restart_on_a_job_that_fails_at_start_marks_it_failed_and_serves(start_daemon, tmp_path: Path, ptxfactory_home: Path):
    """The job's spec became unusable while the daemon was down: the restarted daemon marks the job failed with the
    reason (once), answers its clients, and the next restart does not try it again."""
    daemon = start_daemon(delay=0.3, max_candidates=CANDIDATES)
    jobs_db = ptxfactory_home / "jobs.sqlite"
    source = copy_example(tmp_path / "src")
    editor = await unix_client(daemon.socket, "visual-studio-code", tmp_path)
    try:
        job_id = (await execute(editor, "ptxfactory.optimise", {"uri": open_document(editor, source), "kernel": "rmsnorm"}))["job_id"]
        await until(lambda: len(stored_rows(jobs_db, job_id)) >= 2, what="two stored rows")
        daemon.kill9()
    finally:
        await close(editor, polite=False)
    source.with_name("rmsnorm.cu.toml").write_text("[kernel.rmsnorm\nthis is not toml\n")

    daemon.start()
    await until(lambda: stored_state(jobs_db, job_id) == "failed", what="the job to be marked failed")
    editor = await unix_client(daemon.socket, "neovim", tmp_path)
    try:
        listed = (await execute(editor, "ptxfactory.jobs", {}))["jobs"]
        assert [(j["job_id"], j["state"]) for j in listed] == [(job_id, "failed")]
        assert "rmsnorm.cu.toml" in listed[0]["error"]
    finally:
        await close(editor)
    daemon.stop()
    daemon.start()
    assert f"resuming job {job_id}" not in daemon.log()
    assert stored_state(jobs_db, job_id) == "failed"


async def test_a_job_the_daemon_keeps_dying_on_is_not_resumed_forever(start_daemon, tmp_path: Path, ptxfactory_home: Path):
    """A job started MAX_STALLED_STARTS times without a new row in between (the daemon died each time) is failed."""
    from ptxfactory.daemon.engine import MAX_STALLED_STARTS

    daemon = start_daemon(delay=0.3, max_candidates=CANDIDATES)
    jobs_db = ptxfactory_home / "jobs.sqlite"
    source = copy_example(tmp_path / "src")
    editor = await unix_client(daemon.socket, "visual-studio-code", tmp_path)
    try:
        job_id = (await execute(editor, "ptxfactory.optimise", {"uri": open_document(editor, source), "kernel": "rmsnorm"}))["job_id"]
        await until(lambda: len(stored_rows(jobs_db, job_id)) >= 1, what="a stored row")
        daemon.kill9()
    finally:
        await close(editor, polite=False)
    _set_stalled(jobs_db, job_id, MAX_STALLED_STARTS)  # as after that many starts that each died before a row
    daemon.start()
    await until(lambda: stored_state(jobs_db, job_id) == "failed", what="the job to be marked failed")
    assert "not resumed again" in run_cli("jobs", "--socket", daemon.socket, "--json").stdout


async def test_watch_says_the_daemon_stopped_and_exits_75(start_daemon, tmp_path: Path, ptxfactory_home: Path):
    """`ptxfactory watch` on a running job whose daemon is killed: not "failed" (1) but its own exit code and words."""
    import subprocess

    from _daemon_support import CLI

    daemon = start_daemon(delay=0.3, max_candidates=CANDIDATES)
    source = copy_example(tmp_path / "src")
    submitted = run_cli("submit", source, "-k", "rmsnorm", "--socket", daemon.socket, "--json")
    assert submitted.returncode == 0, submitted.stderr
    import json

    job_id = json.loads(submitted.stdout)["job_id"]
    watch = subprocess.Popen([*CLI, "watch", job_id, "--socket", str(daemon.socket)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        await until(lambda: len(stored_rows(ptxfactory_home / "jobs.sqlite", job_id)) >= 2, what="two stored rows")
        await until(lambda: daemon.log().count("session opened") >= 2, what="watch to connect")  # submit's, then watch's
        await until(lambda: len(stored_rows(ptxfactory_home / "jobs.sqlite", job_id)) >= 3, what="a row while watched")
        daemon.kill9()
        out, err = watch.communicate(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 75, (out, err)
    assert "the daemon stopped; the job will resume when it restarts" in err
