"""The daemon's children die with it: after ``kill -9`` of the daemon its compile workers (and the resource
tracker that multiprocessing starts) are gone within seconds, not re-parented to init."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from _daemon_support import close, copy_example, execute, open_document, stored_rows, unix_client, until

pytestmark = pytest.mark.timeout(90)


def children(pid: int) -> dict[int, str]:
    """The live processes whose parent is ``pid``, with their command lines."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid, state = int(stat.rsplit(")", 1)[1].split()[1]), stat.rsplit(")", 1)[1].split()[0]
            if ppid == pid and state != "Z":
                found[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
async def test_kill9_of_the_daemon_takes_its_compile_workers_along(start_daemon, tmp_path: Path, ptxfactory_home: Path):
    daemon = start_daemon(delay=0.3, max_candidates=10, env={"PTXFACTORY_COMPILE_WORKERS": "2"})
    source = copy_example(tmp_path / "src")
    editor = await unix_client(daemon.socket, "neovim", tmp_path)
    try:
        job_id = (await execute(editor, "ptxfactory.optimise", {"uri": open_document(editor, source), "kernel": "rmsnorm"}))["job_id"]
        await until(lambda: len(stored_rows(ptxfactory_home / "jobs.sqlite", job_id)) >= 2, what="two stored rows")
        workers = await until(lambda: {p: c for p, c in children(daemon.proc.pid).items() if "multiprocessing" in c},
                              what="the daemon's compile workers")
        daemon.kill9()
    finally:
        await close(editor, polite=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in workers):
        time.sleep(0.05)
    left = {p: c for p, c in workers.items() if alive(p)}
    assert not left, f"outlived the daemon: {left}"
