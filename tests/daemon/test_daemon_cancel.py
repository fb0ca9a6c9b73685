"""Every way to cancel a job stops it promptly, ends its progress "cancelled", keeps what was measured,
and leaves the worker serving the next job. One daemon for the module (simulated backend, 0.25 s per
evaluation, so a job is midway when it is cancelled)."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from lsprotocol import types

from _daemon_support import (
    close, copy_example, execute, open_document, progress_ended, reports, run_cli, stored_rows, unix_client, until,
)

pytestmark = pytest.mark.timeout(60)

PROMPT_S = 6.0
"""Cancel to progress end: at most the candidate in flight (compile + 0.25 s simulated evaluation)."""


async def _start_midway(client, source: Path) -> dict:
    started = await execute(client, "ptxfactory.optimise", {"uri": open_document(client, source), "kernel": "rmsnorm"})
    await until(lambda: len(reports(client, started["token"])) >= 3, what="the job to be midway")
    return started


async def _cancelled_promptly(client, started: dict, t0: float, daemon) -> None:
    *_, last, end = await until(lambda: progress_ended(client, started["token"]), timeout=15, what="the progress end")
    assert time.monotonic() - t0 < PROMPT_S, f"took {time.monotonic() - t0:.1f} s to stop"
    assert "cancelled" in end.message and last.percentage < 90
    listed = await execute(client, "ptxfactory.jobs", {"limit": 5})
    job = next(j for j in listed["jobs"] if j["job_id"] == started["job_id"])
    assert job["state"] == "cancelled"
    rows = stored_rows(daemon.workdir / "home" / "jobs.sqlite", started["job_id"])
    assert 1 <= len(rows) < 10 and len({key for _, key, _ in rows}) == len(rows)  # measured rows kept, each once


async def _worker_still_serves(client, source: Path) -> None:
    """A new job runs candidates after the cancellation (then it is cancelled too, to free the queue)."""
    again = await execute(client, "ptxfactory.optimise", {"uri": source.as_uri(), "kernel": "rmsnorm"})
    await until(lambda: any("x" in (r.message or "") and r.message.startswith("2/") for r in reports(client, again["token"])),
                what="the next job's evaluated candidates")
    await execute(client, "ptxfactory.cancel", {"job_id": again["job_id"]})
    await until(lambda: progress_ended(client, again["token"]), what="the next job's end")


@pytest.mark.parametrize("route", ["command", "progress", "cli", "cancelRequest"])
async def test_cancel_route(route: str, shared_daemon, tmp_path: Path):
    source = copy_example(tmp_path / "src")
    editor = await unix_client(shared_daemon.socket, "visual-studio-code", tmp_path)
    other = await unix_client(shared_daemon.socket, "neovim", tmp_path)
    try:
        if route == "cancelRequest":  # ptxfactory.optimise with wait: the request stays open until the job ends
            uri = open_document(editor, source)
            params = types.ExecuteCommandParams(command="ptxfactory.optimise", arguments=[{"uri": uri, "kernel": "rmsnorm", "wait": True}])
            pending = asyncio.wrap_future(editor.protocol.send_request(types.WORKSPACE_EXECUTE_COMMAND, params, msg_id="long-1"))
            token = await until(lambda: next(iter(editor.progress_reports), None), what="the job's token")
            started = {"token": token, "job_id": token.rsplit("/", 1)[1]}
            await until(lambda: len(reports(editor, token)) >= 3, what="the job to be midway")
            t0 = time.monotonic()
            editor.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="long-1"))
            with pytest.raises(Exception, match="cancel"):
                await asyncio.wait_for(pending, 10)
        else:
            started = await _start_midway(editor, source)
            t0 = time.monotonic()
            if route == "command":  # from another editor's session
                answer = await execute(other, "ptxfactory.cancel", {"job_id": started["job_id"]})
                assert answer == {"job_id": started["job_id"], "cancelled": True, "state": "running"}
            elif route == "progress":  # the editor's progress UI
                editor.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=started["token"]))
            else:
                proc = await asyncio.to_thread(run_cli, "cancel", started["job_id"], "--socket", shared_daemon.socket, "--json")
                assert proc.returncode == 0, proc.stderr
                answer = json.loads(proc.stdout)
                assert answer["cancel"]["cancelled"] is True and answer["job"]["state"] == "cancelled"
        await _cancelled_promptly(editor, started, t0, shared_daemon)
        again = await execute(editor, "ptxfactory.cancel", {"job_id": started["job_id"]})
        assert again == {"job_id": started["job_id"], "cancelled": False, "state": "cancelled"}
        await _worker_still_serves(editor, source)
    finally:
        await close(editor)
        await close(other)
    assert shared_daemon.running


async def test_cancel_a_queued_job(shared_daemon, tmp_path: Path):
    """A job waiting behind another ends at once when cancelled; the running one is untouched."""
    first, second = copy_example(tmp_path / "a"), copy_example(tmp_path / "b")
    editor = await unix_client(shared_daemon.socket, "visual-studio-code", tmp_path)
    try:
        running = await _start_midway(editor, first)
        queued = await execute(editor, "ptxfactory.optimise", {"uri": open_document(editor, second), "kernel": "rmsnorm"})
        answer = await execute(editor, "ptxfactory.cancel", {"job_id": queued["job_id"]})
        assert answer == {"job_id": queued["job_id"], "cancelled": True, "state": "cancelled"}
        *_, end = await until(lambda: progress_ended(editor, queued["token"]), what="the queued job's end")
        assert "cancelled before it started" in end.message
        assert not progress_ended(editor, running["token"])
        await execute(editor, "ptxfactory.cancel", {"job_id": running["job_id"]})
        await until(lambda: progress_ended(editor, running["token"]), what="the running job's end")
    finally:
        await close(editor)
