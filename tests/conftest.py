"""Shared test setup: a private ``PTXFACTORY_HOME`` for every test, the GPU tier's skip, the example, a fake generator,
and a check that no process started by the suite outlives it.

Tests never touch ``~/.local``: the lesson store's default path follows ``PTXFACTORY_HOME``.
Tests marked ``gpu`` are deselected by default (``addopts`` in pyproject.toml); when selected
(``pytest -m gpu``) on a machine where NVML finds no GPU they are skipped, not failed.
"""
from __future__ import annotations

import os
import shutil
import signal
import time
import uuid
from pathlib import Path

import pytest

from ptxfactory.protocol import Candidate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rmsnorm" / "rmsnorm.cu"


# Every process the suite starts inherits this mark (daemons in their own sessions, their compile workers, editors),
# so the session's leftovers are found even when re-parented to init, and other runs' processes are never touched.
SESSION_MARK = "PTXFACTORY_TEST_SESSION"
os.environ[SESSION_MARK] = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
LEFTOVER_GRACE_S = 20.0


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process from /proc, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def suite_processes() -> dict[int, str]:
    """Live processes (zombies excluded) that this test session started: those carrying its mark in their
    environment, and any descendant of this process; this process's own multiprocessing resource tracker (it
    ends with this process) left out. Pid -> command line."""
    me, mark = os.getpid(), f"{SESSION_MARK}={os.environ[SESSION_MARK]}".encode()
    parents: dict[int, int] = {}
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        stat = _proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        parents[pid] = stat[1]
        try:
            if mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.add(pid)
        except OSError:  # another user's process, or gone
            pass
    for pid in parents:  # descendants, even with a cleared environment
        seen, p = set(), parents[pid]
        while p in parents and p not in seen and p != me:
            seen.add(p)
            p = parents[p]
        if p == me:
            found.add(pid)
    out = {}
    for pid in found:
        cmd = _cmdline(pid)
        if not (parents.get(pid) == me and "multiprocessing.resource_tracker" in cmd):
            out[pid] = cmd
    return out


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_suite():
    """After the last test: close this process's compile pool, give the suite's processes a grace period to end,
    then fail (and kill what is left) when any is still alive."""
    yield
    if not Path("/proc/self/stat").exists():
        return
    from ptxfactory.harness import compile_pool

    if compile_pool._SHARED is not None:
        compile_pool._SHARED.close()
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while (left := suite_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, "processes started by the test suite outlived it (killed now):\n" + "\n".join(
        f"  {pid}: {cmd}" for pid, cmd in sorted(left.items()))


@pytest.fixture(autouse=True)
def ptxfactory_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``PTXFACTORY_HOME`` (lesson store, caches) per test."""
    home = tmp_path_factory.mktemp("ptxfactory-home")
    monkeypatch.setenv("PTXFACTORY_HOME", str(home))
    return home


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    from ptxfactory.harness.backend import gpu_available

    if gpu_available() is None:
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (NVML finds no driver or device)")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    """``rmsnorm.cu`` and its spec copied into ``tmp_path``; returns the ``.cu`` path (edit freely)."""
    dst = tmp_path / "rmsnorm.cu"
    shutil.copy(EXAMPLE, dst)
    shutil.copy(EXAMPLE.with_name("rmsnorm.cu.toml"), tmp_path / "rmsnorm.cu.toml")
    return dst


class FakeGenerator:
    """Four proposals from the original: a "vectorised" one (it names ``uint4``, which SimulatedDevice rates
    faster), one that does not compile, and two that are the original again (equal key: never evaluated)."""

    name = "fake"

    def propose(self, ctx) -> list[Candidate]:
        src = ctx.original.source

        def variant(source: str, description: str) -> Candidate:
            return ctx.original.model_copy(update={
                "source": source, "generator": self.name, "description": description, "parent": ctx.original.key,
            })

        return [
            # another kernel in the file: other machine code, so not a duplicate of the original's binary
            variant("typedef uint4 vec16_t;  // 16-byte vectors\n" + src + '\nextern "C" __global__ void ptxf_fake_vec() {}\n',
                    "vectorised (pretend)"),
            variant(src.replace("sum += v * v;", "sum += v * v"), "missing semicolon"),
            variant(src, "the original again"),
            variant(src.replace("float eps)", "float eps) /* same key */"), "the original with a comment"),
        ]


class EmptyGenerator:
    name = "empty"

    def propose(self, ctx) -> list[Candidate]:
        return []


@pytest.fixture
def fake_generators(monkeypatch: pytest.MonkeyPatch) -> type[FakeGenerator]:
    """Every generator name loads :class:`FakeGenerator`, except ``tune`` and ``transform`` (nothing to propose).

    Keeps strategy and CLI tests independent of the real generators' output.
    """
    import ptxfactory.search.strategy as strategy

    monkeypatch.setattr(strategy, "load_generator", lambda name: EmptyGenerator() if name in ("tune", "transform") else FakeGenerator())
    return FakeGenerator


from _failure_log import pytest_runtest_logreport  # noqa: E402,F401 - the failure log's hook (tests/_failure_log.py)
