"""The job store: every daemon job and every candidate row it measured, in SQLite (WAL) through aiosqlite.

``jobs`` holds one row per job (its document, kernel, state, the source text it started from, the
final summary or error); ``job_rows`` one row per evaluated candidate, written (and committed)
before the candidate counts as done, so a ``kill -9`` loses at most the evaluation in flight.
A job left ``queued`` or ``running`` is resumed by the next engine that opens the store.
"""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import aiosqlite

from ptxfactory.protocol import CandidateRow, JobSummary
from ptxfactory.search.lessons import private_db_file

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    uri TEXT NOT NULL,
    kernel TEXT NOT NULL,
    state TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    source_text TEXT,
    summary_json TEXT,
    error TEXT,
    done INTEGER NOT NULL DEFAULT 0,
    total INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '',
    best_speedup REAL,
    best_candidate TEXT,
    simulated INTEGER NOT NULL DEFAULT 0,
    stalled_starts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_doc ON jobs (path, kernel, created);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS job_rows (
    job_id TEXT NOT NULL REFERENCES jobs (id),
    seq INTEGER NOT NULL,
    candidate_key TEXT NOT NULL,
    candidate_json TEXT NOT NULL,
    result_json TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (job_id, seq),
    UNIQUE (job_id, candidate_key)
);
"""

_COLUMNS = "id, path, uri, kernel, state, created, updated, done, total, message, error, best_speedup, best_candidate, simulated"
_N = 14


@dataclass
class StoredJob:
    """A ``jobs`` row without its rows; ``summary`` and ``source_text`` only when asked for."""

    id: str
    path: str
    uri: str
    kernel: str
    state: str
    created: float
    updated: float
    done: int = 0
    total: int = 0
    message: str = ""
    error: str | None = None
    best_speedup: float | None = None
    best_candidate: str | None = None
    simulated: bool = False
    source_text: str | None = None
    summary: JobSummary | None = None


class JobStore:
    """Open with ``await JobStore.open(path)`` (``read_only`` for the CLI); close with ``await store.close()``."""

    def __init__(self, db: aiosqlite.Connection, path: Path):
        self._db, self.path = db, path

    @classmethod
    async def open(cls, path: str | Path, read_only: bool = False) -> "JobStore":
        path = Path(path)
        if read_only:
            db = await aiosqlite.connect(f"file:{path}?mode=ro", uri=True)
            return cls(db, path)
        private_db_file(path)  # 0600 (and its -wal/-shm), a new folder 0700: it holds people's sources
        db = await aiosqlite.connect(path)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")  # WAL: a killed process loses nothing committed
        await db.executescript(SCHEMA)
        async with db.execute("PRAGMA table_info(jobs)") as cur:
            columns = {row[1] for row in await cur.fetchall()}
        if "stalled_starts" not in columns:  # stores made before it
            await db.execute("ALTER TABLE jobs ADD COLUMN stalled_starts INTEGER NOT NULL DEFAULT 0")
        await db.commit()
        return cls(db, path)

    async def close(self) -> None:
        await self._db.close()

    async def create(self, *, job_id: str, path: str, uri: str, kernel: str, source_text: str | None, state: str = "queued") -> float:
        now = time.time()
        await self._db.execute(
            "INSERT INTO jobs (id, path, uri, kernel, state, created, updated, source_text) VALUES (?,?,?,?,?,?,?,?)",
            (job_id, path, uri, kernel, state, now, now, source_text),
        )
        await self._db.commit()
        return now

    async def set_state(
        self, job_id: str, state: str, *, summary: JobSummary | None = None, error: str | None = None,
        done: int | None = None, total: int | None = None, message: str | None = None,
    ) -> None:
        sets, args = ["state = ?", "updated = ?"], [state, time.time()]
        for column, value in (("done", done), ("total", total), ("message", message), ("error", error)):
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(value)
        if summary is not None:
            best = next(iter(summary.faster()), None)
            sets += ["summary_json = ?", "best_speedup = ?", "best_candidate = ?", "simulated = ?"]
            args += [summary.model_dump_json(), best.result.speedup if best else None, best.candidate.description if best else None,
                     int(bool(best and best.result.simulated))]
        await self._db.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE id = ?", (*args, job_id))
        await self._db.commit()

    async def add_row(self, job_id: str, seq: int, row: CandidateRow) -> None:
        """Append one measured row (committed before this returns)."""
        now = time.time()
        await self._db.execute(
            "INSERT INTO job_rows (job_id, seq, candidate_key, candidate_json, result_json, created) VALUES (?,?,?,?,?,?)",
            (job_id, seq, row.key, row.candidate.model_dump_json(), row.result.model_dump_json(), now),
        )
        await self._db.execute("UPDATE jobs SET updated = ?, done = done + 1, stalled_starts = 0 WHERE id = ?", (now, job_id))
        await self._db.commit()

    async def count_start(self, job_id: str) -> int:
        """Count one more start of a job since its last stored row; returns the count (1 on a first start).
        A daemon that keeps dying while it starts a job sees the count grow (see ``Engine.start``)."""
        await self._db.execute("UPDATE jobs SET stalled_starts = stalled_starts + 1 WHERE id = ?", (job_id,))
        await self._db.commit()
        return await self.stalled_starts(job_id)

    async def stalled_starts(self, job_id: str) -> int:
        """How many times the job was started since its last stored row (0 for a job never started)."""
        async with self._db.execute("SELECT stalled_starts FROM jobs WHERE id = ?", (job_id,)) as cur:
            found = await cur.fetchone()
        return int(found[0]) if found else 0

    async def rows(self, job_id: str) -> list[CandidateRow]:
        async with self._db.execute(
            "SELECT candidate_json, result_json FROM job_rows WHERE job_id = ? ORDER BY seq", (job_id,),
        ) as cur:
            return [CandidateRow.model_validate({"candidate": json.loads(c), "result": json.loads(r)}) for c, r in await cur.fetchall()]

    async def get(self, job_id: str, *, full: bool = False) -> StoredJob | None:
        """One job; ``full`` adds its source text and summary."""
        extra = ", source_text, summary_json" if full else ""
        async with self._db.execute(f"SELECT {_COLUMNS}{extra} FROM jobs WHERE id = ?", (job_id,)) as cur:
            found = await cur.fetchone()
        return _stored(found, full) if found else None

    async def list(self, *, path: str | None = None, kernel: str | None = None, active: bool = False, limit: int = 50) -> list[StoredJob]:
        """Jobs, newest first."""
        where, args = [], []
        if path is not None:
            where.append("path = ?")
            args.append(path)
        if kernel is not None:
            where.append("kernel = ?")
            args.append(kernel)
        if active:
            where.append("state IN ('queued', 'running')")
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        async with self._db.execute(
            f"SELECT {_COLUMNS} FROM jobs{clause} ORDER BY created DESC, rowid DESC LIMIT ?", (*args, limit),
        ) as cur:
            return [_stored(r, False) for r in await cur.fetchall()]

    async def unfinished(self) -> list[StoredJob]:
        """Jobs left queued or running (by a daemon that stopped or was killed), oldest first, with source and rows' count."""
        async with self._db.execute(
            f"SELECT {_COLUMNS}, source_text, summary_json FROM jobs WHERE state IN ('queued', 'running') ORDER BY created, rowid",
        ) as cur:
            return [_stored(r, True) for r in await cur.fetchall()]

    async def latest_with_summary(self, path: str, kernel: str) -> StoredJob | None:
        """The newest job on (path, kernel) that ended with a summary, summary included."""
        async with self._db.execute(
            f"SELECT {_COLUMNS}, source_text, summary_json FROM jobs WHERE path = ? AND kernel = ? AND summary_json IS NOT NULL"
            " ORDER BY created DESC, rowid DESC LIMIT 1", (path, kernel),
        ) as cur:
            found = await cur.fetchone()
        return _stored(found, True) if found else None


def _stored(r: sqlite3.Row | tuple, full: bool) -> StoredJob:
    job = StoredJob(*r[:_N])
    job.simulated = bool(job.simulated)
    if full:
        job.source_text = r[_N]
        job.summary = JobSummary.model_validate_json(r[_N + 1]) if r[_N + 1] else None
    return job
