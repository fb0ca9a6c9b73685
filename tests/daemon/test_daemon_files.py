"""Files the daemon and the CLI write: stores owner-only (0600 files, 0700 folders), report folders only in real
folders (a symbolic link in the output path is refused, a link planted at a file's name is replaced, never followed)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ptxfactory.daemon.jobstore import JobStore
from ptxfactory.daemon.report import UnsafeOutput, write_outputs
from ptxfactory.protocol import JobSummary
from ptxfactory.search.lessons import LessonStore


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def summary() -> JobSummary:
    return JobSummary(job_id="j", source_path="/x/k.cu", kernel="k", state="finished", rows=[], baseline_key="b")


async def test_stores_are_created_owner_only(tmp_path: Path):
    old = os.umask(0o022)
    try:
        lessons = await LessonStore.open(tmp_path / "new" / "lessons.sqlite")
        jobs = await JobStore.open(tmp_path / "new" / "jobs.sqlite")
        await jobs.create(job_id="a", path="/x", uri="file:///x", kernel="k", source_text="secret")
    finally:
        os.umask(old)
    try:
        assert mode(tmp_path / "new") == 0o700
        for name in ("lessons.sqlite", "jobs.sqlite"):
            assert mode(tmp_path / "new" / name) == 0o600, name
            for extra in ("-wal", "-shm"):
                side = tmp_path / "new" / (name + extra)
                if side.exists():
                    assert mode(side) == 0o600, side
    finally:
        await lessons.close()
        await jobs.close()


async def test_existing_loose_stores_are_tightened(tmp_path: Path):
    for name in ("jobs.sqlite", "jobs.sqlite-wal"):
        (tmp_path / name).write_bytes(b"")
        os.chmod(tmp_path / name, 0o644)
    jobs = await JobStore.open(tmp_path / "jobs.sqlite")
    await jobs.close()
    assert mode(tmp_path / "jobs.sqlite") == 0o600


async def test_a_store_path_that_is_a_symlink_is_refused(tmp_path: Path):
    (tmp_path / "elsewhere.sqlite").write_bytes(b"")
    (tmp_path / "jobs.sqlite").symlink_to(tmp_path / "elsewhere.sqlite")
    with pytest.raises(OSError):
        await JobStore.open(tmp_path / "jobs.sqlite")


async def test_engine_creates_the_store_folder_0700(tmp_path: Path):
    from ptxfactory.daemon.engine import Engine

    engine = await Engine.open("none", tmp_path / "h" / "lessons.sqlite", tmp_path / "j" / "jobs.sqlite")
    await engine.close()
    assert mode(tmp_path / "h") == 0o700 and mode(tmp_path / "j") == 0o700
    assert mode(tmp_path / "j" / "jobs.sqlite") == 0o600 and mode(tmp_path / "j" / "jobs.sqlite.lock") == 0o600


def test_report_folder_is_created_0700_files_0600(tmp_path: Path):
    written = write_outputs(summary(), tmp_path / "ptxfactory-out" / "k", tmp_path)
    assert mode(tmp_path / "ptxfactory-out") == 0o700 and mode(tmp_path / "ptxfactory-out" / "k") == 0o700
    assert all(mode(p) == 0o600 for p in written)
    assert not list((tmp_path / "ptxfactory-out" / "k").glob(".*.tmp"))


@pytest.mark.parametrize("linked", ["ptxfactory-out", "ptxfactory-out/k"])
def test_a_symlinked_output_folder_is_refused(tmp_path: Path, linked: str):
    victim = tmp_path / "victim"
    victim.mkdir()
    src = tmp_path / "src"
    (src / "ptxfactory-out").mkdir(parents=True)
    if linked == "ptxfactory-out":
        (src / "ptxfactory-out").rmdir()
    (src / linked).symlink_to(victim, target_is_directory=True)
    with pytest.raises(UnsafeOutput, match="symbolic link"):
        write_outputs(summary(), src / "ptxfactory-out" / "k", src)
    assert list(victim.iterdir()) == []


def test_a_symlink_planted_at_a_report_file_is_replaced_not_followed(tmp_path: Path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "ptxfactory-out" / "k"
    out.mkdir(parents=True)
    (out / "report.md").symlink_to(victim)
    write_outputs(summary(), out, tmp_path)
    assert victim.read_text() == "precious"
    assert not (out / "report.md").is_symlink() and "ptxfactory" in (out / "report.md").read_text()


def test_cli_refuses_a_symlinked_output_folder(tmp_path: Path, example_copy: Path, fake_generators):
    from ptxfactory.daemon.cli import EXIT_BAD_INPUT, main

    victim = tmp_path / "victim"
    victim.mkdir()
    (example_copy.parent / "ptxfactory-out").symlink_to(victim, target_is_directory=True)
    code = main(["optimise", str(example_copy), "-k", "rmsnorm", "--backend", "simulated", "--max-candidates", "2"])
    assert code == EXIT_BAD_INPUT
    assert list(victim.iterdir()) == []
