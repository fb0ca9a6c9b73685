"""Fixtures of the daemon tests: daemons as subprocesses (always stopped), sockets under a short temporary folder.

A unix socket's path must fit in 108 bytes, which pytest's tmp_path may not: sockets live in a
fresh ``/tmp/ptx-*`` folder instead, removed afterwards. Every daemon runs ``--backend simulated``.
"""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from _daemon_support import Daemon


@pytest.fixture
def sockdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ptx-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_daemon(tmp_path: Path, sockdir: Path) -> Iterator[Callable[..., Daemon]]:
    """``start_daemon(**options)``: a started daemon on ``<sockdir>/d.sock``; every one is stopped at teardown."""
    started: list[Daemon] = []

    def start(**options) -> Daemon:
        daemon = Daemon(tmp_path, options.pop("socket", sockdir / "d.sock"), **options)
        started.append(daemon)
        return daemon.start()

    yield start
    for daemon in started:
        daemon.stop()


@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon for a module's tests (its own PTXFACTORY_HOME); 0.25 s per simulated evaluation."""
    work = tmp_path_factory.mktemp("shared-daemon")
    sock = Path(tempfile.mkdtemp(prefix="ptx-", dir="/tmp"))
    daemon = Daemon(work, sock / "d.sock", delay=0.25, max_candidates=10, tcp=True, env={"PTXFACTORY_HOME": str(work / "home")})
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()
        shutil.rmtree(sock, ignore_errors=True)
