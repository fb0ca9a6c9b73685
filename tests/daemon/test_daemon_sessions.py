"""Several editors on one daemon: a job started in one shows its progress and code actions in the others;
one editor leaving ends only its session. Clients: pytest-lsp with the VS Code and Neovim capability
presets, on the unix socket and on the loopback TCP port. Simulated backend (nothing runs on a GPU)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from lsprotocol import types

from _daemon_support import (
    close, code_actions, copy_example, execute, hover, line_of, open_document, progress_ended, reports, tcp_client,
    unix_client, until,
)

pytestmark = pytest.mark.timeout(180)  # ~40 s each alone on a 2-core machine; 90 s timed one out under load


async def test_two_editors_share_jobs_and_one_leaving_ends_only_its_session(start_daemon, tmp_path: Path):
    daemon = start_daemon(tcp=True, delay=0.1, max_candidates=8)
    source = copy_example(tmp_path / "src")
    text = source.read_text()
    line = line_of(text, "float sum = 0.0f;")
    vscode = await unix_client(daemon.socket, "visual-studio-code", tmp_path)
    neovim = await tcp_client(daemon.port, "neovim", tmp_path, token=daemon.token)  # Neovim's vim.lsp.rpc.connect(host, port)
    try:
        uri_a, uri_b = open_document(vscode, source), open_document(neovim, source)

        # Job 1, started in VS Code: both editors see begin ... end on their own server-created token.
        first = await execute(vscode, "ptxfactory.optimise", {"uri": uri_a, "kernel": "rmsnorm"})
        token = first["token"]
        for client in (vscode, neovim):
            begin, *steps, end = await until(lambda c=client: progress_ended(c, token), what="the end of job 1's progress")
            assert isinstance(begin, types.WorkDoneProgressBegin) and begin.title == "Optimising rmsnorm"
            assert steps and [s.percentage for s in steps] == sorted(s.percentage for s in steps)
            assert re.search(r"best: \d+\.\d\dx faster \(simulated\)", end.message), end.message

        # ... and the same code actions, the best one preferred.
        actions_a, actions_b = await code_actions(vscode, uri_a, line), await code_actions(neovim, uri_b, line)
        enabled = [a for a in actions_b if not a.disabled]
        assert enabled and enabled[0].is_preferred and "x faster" in enabled[0].title
        assert [a.title for a in actions_a if not a.disabled] == [a.title for a in enabled]

        # Hover in the other editor shows the job's best result (simulated: not verified).
        shown = await hover(neovim, uri_b, line_of(text, "__global__ void rmsnorm"))
        assert "best so far" in shown.contents.value and "simulated, NOT verified" in shown.contents.value

        # The report, opened in Neovim with window/showDocument.
        report = await execute(neovim, "ptxfactory.report", {"job_id": first["job_id"]})
        assert report["shown"] and report["path"].endswith("report.md") and "rmsnorm" in report["markdown"]
        assert [d.uri for d in neovim.shown_documents] == [report["uri"]]

        # Job 2, started in Neovim; VS Code leaves (shutdown + exit) midway.
        second = await execute(neovim, "ptxfactory.optimise", {"uri": uri_b, "kernel": "rmsnorm"})
        assert second["job_id"] != first["job_id"]
        await until(lambda: len(reports(vscode, second["token"])) >= 2, what="job 2's progress in VS Code")
        await close(vscode)

        *_, end = await until(lambda: progress_ended(neovim, second["token"]), what="the end of job 2 in Neovim")
        assert "best" in end.message
        assert await code_actions(neovim, uri_b, line)
        assert daemon.running

        # A third editor on the same daemon sees both jobs, finished, and their results.
        third = await unix_client(daemon.socket, "visual-studio-code", tmp_path)
        try:
            uri_c = open_document(third, source)
            listed = await execute(third, "ptxfactory.jobs", {})
            assert [j["job_id"] for j in listed["jobs"]] == [second["job_id"], first["job_id"]]
            assert all(j["state"] == "finished" and j["best_speedup"] > 1 and j["simulated"] for j in listed["jobs"])
            assert [a.title for a in await code_actions(third, uri_c, line) if not a.disabled]
        finally:
            await close(third)
    finally:
        await close(vscode)
        await close(neovim)
    assert daemon.stop() == 0, daemon.log()


async def test_a_session_opening_the_file_midway_sees_the_running_job(start_daemon, tmp_path: Path):
    """Progress reaches a session that opens the document after the job started: begin (current state), reports, end."""
    daemon = start_daemon(delay=0.2, max_candidates=8)
    source = copy_example(tmp_path / "src")
    starter = await unix_client(daemon.socket, "visual-studio-code", tmp_path)
    late = await unix_client(daemon.socket, "neovim", tmp_path)
    try:
        started = await execute(starter, "ptxfactory.optimise", {"uri": open_document(starter, source), "kernel": "rmsnorm"})
        # midway: a candidate's row is in (the reports before it, "evaluating #0 ...", are all at 0%)
        await until(lambda: any((r.percentage or 0) > 0 for r in reports(starter, started["token"])), what="the job to be midway")
        assert started["token"] not in late.progress_reports  # the file is not open there yet
        open_document(late, source)
        begin, *_, end = await until(lambda: progress_ended(late, started["token"]), what="the progress in the late session")
        assert begin.percentage > 0 and "best" in end.message
    finally:
        await close(starter)
        await close(late)


async def test_client_without_work_done_progress_gets_notifications(start_daemon, tmp_path: Path):
    """A client that declares no window.workDoneProgress (like the CLI) follows jobs with ptxfactory/progress."""
    daemon = start_daemon(delay=0.02, max_candidates=4)
    source = copy_example(tmp_path / "src")
    plain = await unix_client(daemon.socket, types.ClientCapabilities(), tmp_path)
    try:
        started = await execute(plain, "ptxfactory.optimise", {"uri": open_document(plain, source), "kernel": "rmsnorm"})
        await until(lambda: plain.ptx_progress and plain.ptx_progress[-1]["kind"] == "end", what="the end notification")
        kinds = [n["kind"] for n in plain.ptx_progress]
        assert kinds[0] == "begin" and kinds.count("end") == 1 and plain.progress_reports == {}
        assert all(n["job_id"] == started["job_id"] for n in plain.ptx_progress)
        assert plain.ptx_progress[-1]["state"] == "finished" and plain.ptx_progress[-1]["done"] == 4
    finally:
        await close(plain)
