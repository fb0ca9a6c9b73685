"""``ptxfactory lsp`` (the stdio bridge that starts the daemon) and the headless commands against the daemon:
``submit``, ``jobs``, ``watch``, ``report``, ``cancel``, with ``--json``. Simulated backend."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types

from ptxfactory.daemon.listener import socket_answers
from _daemon_support import copy_example, execute, initialize, make_client, open_document, run_cli

pytestmark = pytest.mark.timeout(60)


async def _bridge_session(runtime: Path, root: Path, source: Path) -> list:
    """An editor on ``ptxfactory lsp`` over stdio: initialize, a code lens, the job list; shutdown and exit."""
    client = make_client()
    exited = asyncio.get_running_loop().create_future()
    on_exit = client.server_exit

    async def server_exit(server: asyncio.subprocess.Process) -> None:  # pygls's public hook: the process has ended
        if not exited.done():
            exited.set_result(server.returncode)
        await on_exit(server)

    client.server_exit = server_exit
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "PTXFACTORY_SIMULATED_DELAY_S": "0.01"}
    await client.start_io(sys.executable, "-m", "ptxfactory.daemon", "lsp", "--backend", "simulated", env=env)
    try:
        await initialize(client, "visual-studio-code", root)
        uri = open_document(client, source)
        lenses = await client.text_document_code_lens_async(types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri)))
        assert [lens.command.command for lens in lenses] == ["ptxfactory.optimise"]
        jobs = (await execute(client, "ptxfactory.jobs", {}))["jobs"]
        await asyncio.wait_for(client.shutdown_session(), 20)  # exit: the bridge ends when the daemon hangs up
        assert await asyncio.wait_for(exited, 20) == 0
        return jobs
    finally:
        await asyncio.wait_for(client.stop(), 20)


async def test_lsp_bridge_starts_the_daemon_once_and_leaves_it_running(sockdir: Path, tmp_path: Path):
    runtime = sockdir / "run"
    runtime.mkdir()
    sock = runtime / "ptxfactory" / "daemon.sock"
    lock = sock.with_name("daemon.sock.lock")
    source = copy_example(tmp_path / "src")
    try:
        assert await _bridge_session(runtime, tmp_path, source) == []
        assert socket_answers(sock), "the daemon should outlive the editor"
        pid = int(lock.read_text())
        assert "listening on unix" in (runtime / "ptxfactory" / "daemon.log").read_text()
        await _bridge_session(runtime, tmp_path, source)  # the same daemon serves the next editor
        assert int(lock.read_text()) == pid
    finally:
        if lock.exists() and socket_answers(sock):
            pid = int(lock.read_text())
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while socket_answers(sock) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if socket_answers(sock):
                os.kill(pid, signal.SIGKILL)


def test_headless_commands(start_daemon, tmp_path: Path):
    daemon = start_daemon(delay=0.02, max_candidates=4)
    source = copy_example(tmp_path / "src")
    sock = str(daemon.socket)

    submitted = run_cli("submit", source, "-k", "rmsnorm", "--socket", sock, "--watch", "--json")
    assert submitted.returncode == 0, submitted.stderr  # a faster (simulated) candidate: exit 0 as for optimise
    *progress, final = [json.loads(line) for line in submitted.stdout.splitlines()]  # JSON lines
    assert progress[0]["kind"] == "begin" and progress[-1]["kind"] == "end" and progress[-1]["state"] == "finished"
    job_id = final["job_id"]
    assert final["state"] == "finished" and final["done"] == 4 and final["simulated"]

    listed = json.loads(run_cli("jobs", "--socket", sock, "--json").stdout)
    assert [(j["job_id"], j["state"]) for j in listed] == [(job_id, "finished")]
    table = run_cli("jobs", "--socket", sock)
    assert job_id in table.stdout and "(simulated)" in table.stdout

    watched = run_cli("watch", job_id, "--socket", sock)
    assert watched.returncode == 0 and f"job {job_id} (rmsnorm): finished" in watched.stdout

    md = run_cli("report", job_id, "--socket", sock)
    assert md.returncode == 0 and md.stdout.startswith("# ptxfactory: `rmsnorm`")
    assert (source.parent / "ptxfactory-out" / "rmsnorm" / "report.md").exists()
    summary = json.loads(run_cli("report", job_id, "--socket", sock, "--json").stdout)
    assert summary["job_id"] == job_id and len(summary["rows"]) == 4

    already = run_cli("cancel", job_id, "--socket", sock)
    assert already.returncode == 0 and "not running (it is finished)" in already.stdout

    assert daemon.stop() == 0
    # No daemon: jobs and report read the job store; cancel and watch need the daemon.
    offline = json.loads(run_cli("jobs", "--socket", sock, "--json").stdout)
    assert [(j["job_id"], j["state"], j["best_speedup"] is not None) for j in offline] == [(job_id, "finished", True)]
    assert run_cli("report", job_id, "--socket", sock).stdout.startswith("# ptxfactory: `rmsnorm`")
    refused = run_cli("cancel", job_id, "--socket", sock)
    assert refused.returncode == 1 and "no ptxfactory daemon answers" in refused.stderr
    unknown = run_cli("report", "nosuchjob", "--socket", sock)
    assert unknown.returncode == 1 and "no job nosuchjob" in unknown.stderr


def test_serve_exits_1_when_the_store_is_taken(start_daemon, sockdir: Path):
    """A second daemon on another socket but the same job store refuses to start (one engine per store)."""
    start_daemon()
    proc = subprocess.run([sys.executable, "-m", "ptxfactory.daemon", "serve", "--socket", str(sockdir / "e.sock"),
                           "--backend", "simulated"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "in use by another ptxfactory daemon" in proc.stderr
