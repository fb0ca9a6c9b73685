"""The lesson store: every experiment of every job, in SQLite (WAL) through aiosqlite.

The store records and answers queries; it holds no selection policy. ``lessons`` distils the
experiments per knob for people (``ptxfactory lessons``); ``search_priors`` turns them into what the
next job's search starts from (:mod:`ptxfactory.search.priors`).
"""
from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections import Counter
from pathlib import Path

import aiosqlite

from ptxfactory.protocol import Candidate, EvalResult, GpuFacts, Measured
from ptxfactory.protocol.lesson import Lesson

from .priors import FAILED, FUNCTION_KNOBS, ArmPrior, PastConfig, Priors

SCHEMA = """
CREATE TABLE IF NOT EXISTS experiments (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    created REAL NOT NULL,
    kernel TEXT NOT NULL,
    kernel_fingerprint TEXT NOT NULL,
    kernel_class TEXT NOT NULL,
    candidate_key TEXT NOT NULL,
    generator TEXT NOT NULL,
    description TEXT NOT NULL,
    params TEXT NOT NULL,
    arch TEXT NOT NULL,
    gpu TEXT NOT NULL,
    outcome TEXT NOT NULL,
    check_failed TEXT,
    reason TEXT,
    speedup REAL,
    geomean_us REAL,
    result TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS experiments_class ON experiments (kernel_class, arch);
CREATE INDEX IF NOT EXISTS experiments_job ON experiments (job_id);
CREATE TABLE IF NOT EXISTS agent_lessons (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    created REAL NOT NULL,
    kernel_class TEXT NOT NULL,
    arch TEXT NOT NULL,
    idea TEXT NOT NULL,
    outcome TEXT NOT NULL,
    effect REAL,
    lesson TEXT,
    candidate_key TEXT
);
CREATE INDEX IF NOT EXISTS agent_lessons_class ON agent_lessons (kernel_class, arch);
CREATE TABLE IF NOT EXISTS agent_calls (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    created REAL NOT NULL,
    role TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    latency_s REAL NOT NULL,
    cost_usd REAL NOT NULL,
    ok INTEGER NOT NULL,
    error TEXT
);
CREATE INDEX IF NOT EXISTS agent_calls_job ON agent_calls (job_id);
"""


def default_path() -> Path:
    """``$PTXFACTORY_HOME/lessons.sqlite``, else ``$XDG_DATA_HOME/ptxfactory/...``, else ``~/.local/share/ptxfactory/...``."""
    home = os.environ.get("PTXFACTORY_HOME")
    if home:
        return Path(home) / "lessons.sqlite"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "ptxfactory" / "lessons.sqlite"


def private_db_file(path: Path) -> Path:
    """Make ``path`` (an SQLite store holding people's sources) owner-only before SQLite opens it.

    A missing folder is created 0700 (with its missing parents); the default data folder
    (``.../ptxfactory``) is tightened to 0700 when it exists; the store file is created 0600 (exclusive,
    never through a symbolic link), and an existing store and its ``-wal``/``-shm`` files are made 0600
    (SQLite creates ``-wal``/``-shm`` with the store file's mode). Other existing folders (a
    ``PTXFACTORY_HOME`` you chose) are left as they are. ``:memory:`` is left alone.

    Raises OSError (e.g. ``ELOOP``: the store path is a symbolic link).
    """
    if str(path) == ":memory:":
        return path
    folder = path.parent
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
    elif folder.name == "ptxfactory" and folder.resolve() == default_path().parent.resolve() and folder.stat().st_uid == os.getuid():
        os.chmod(folder, 0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for extra in ("-wal", "-shm"):
        side = path.with_name(path.name + extra)
        try:
            fd = os.open(side, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            if os.fstat(fd).st_mode & 0o077:
                os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
    return path


class LessonStore:
    """Experiments in SQLite. Open with ``await LessonStore.open(path)``; close with ``await store.close()``."""

    def __init__(self, db: aiosqlite.Connection, path: Path):
        self._db, self.path = db, path

    @classmethod
    async def open(cls, path: str | Path | None = None) -> "LessonStore":
        """Open (creating) the store at ``path`` (default :func:`default_path`), in WAL mode."""
        path = Path(path) if path else default_path()
        private_db_file(path)
        db = await aiosqlite.connect(path)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.executescript(SCHEMA)
        await db.commit()
        return cls(db, path)

    async def close(self) -> None:
        await self._db.close()

    async def record(
        self, *, job_id: str, kernel_fingerprint: str, kernel_class: str, arch: str,
        candidate: Candidate, result: EvalResult, gpu: GpuFacts | None,
    ) -> None:
        """Append one experiment: the candidate, its generator and knobs, the outcome and metrics."""
        check = getattr(result, "check", None)
        reason = getattr(result, "reason", None) or getattr(result, "log", None)
        speedup = result.speedup if isinstance(result, Measured) else None
        geo = result.geomean_us if isinstance(result, Measured) else None
        await self._db.execute(
            "INSERT INTO experiments (job_id, created, kernel, kernel_fingerprint, kernel_class, candidate_key,"
            " generator, description, params, arch, gpu, outcome, check_failed, reason, speedup, geomean_us, result)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                job_id, time.time(), candidate.kernel_name, kernel_fingerprint, kernel_class, candidate.key,
                candidate.generator, candidate.description, json.dumps(candidate.params, sort_keys=True), arch,
                gpu.name if gpu else "none", result.outcome, check, (reason or "")[:2000], speedup, geo,
                result.model_dump_json(),
            ),
        )
        await self._db.commit()

    async def record_agent_lesson(self, *, job_id: str, kernel_class: str, arch: str, idea: str, outcome: str,
                                  effect: float | None, lesson: str | None, candidate_key: str | None) -> None:
        """Store what an agent's idea did: ``outcome`` (``faster``, ``slower``, ``compile_failed``, ``rejected`` ...),
        the measured speedup (None when it failed) and the one-line lesson the reviewer wrote (if any)."""
        await self._db.execute(
            "INSERT INTO agent_lessons (job_id, created, kernel_class, arch, idea, outcome, effect, lesson, candidate_key)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            (job_id, time.time(), kernel_class, arch, idea[:500], outcome, effect, (lesson or None) and lesson[:300], candidate_key))
        await self._db.commit()

    async def agent_lessons(self, kernel_class: str | None = None, arch: str | None = None, limit: int = 50) -> list[dict]:
        """Agent lessons, the most relevant first: on ``arch`` only (when given), ``kernel_class`` first, then by
        measured effect (largest speedup first, failures last), newest first among equals. Each dict has
        ``same_class``."""
        query = "SELECT * FROM agent_lessons" + (" WHERE arch = ?" if arch else "")
        query += " ORDER BY (kernel_class = ?) DESC, effect IS NULL, effect DESC, id DESC LIMIT ?"
        self._db.row_factory = aiosqlite.Row
        async with self._db.execute(query, ((arch,) if arch else ()) + (kernel_class or "", limit)) as cur:
            rows = [dict(r) for r in await cur.fetchall()]
        for r in rows:
            r["same_class"] = kernel_class is None or r["kernel_class"] == kernel_class
        return rows

    async def record_agent_call(self, job_id: str, call) -> None:
        """Store one language-model call of a job (:class:`~ptxfactory.protocol.agent.AgentCall`: tokens, latency, cost)."""
        await self._db.execute(
            "INSERT INTO agent_calls (job_id, created, role, provider, model, input_tokens, output_tokens, latency_s,"
            " cost_usd, ok, error) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (job_id, time.time(), call.role, call.provider, call.model, call.input_tokens, call.output_tokens,
             call.latency_s, call.cost_usd, int(call.ok), call.error))
        await self._db.commit()

    async def agent_calls(self, job_id: str | None = None) -> list[dict]:
        """Stored language-model calls as dicts (oldest first), optionally of one job."""
        query = "SELECT * FROM agent_calls" + (" WHERE job_id = ?" if job_id else "") + " ORDER BY id"
        self._db.row_factory = aiosqlite.Row
        async with self._db.execute(query, (job_id,) if job_id else ()) as cur:
            return [dict(r) for r in await cur.fetchall()]

    async def experiments(self, job_id: str | None = None) -> list[dict]:
        """Experiments as dicts (newest last), optionally of one job."""
        query = "SELECT * FROM experiments" + (" WHERE job_id = ?" if job_id else "") + " ORDER BY id"
        self._db.row_factory = aiosqlite.Row
        async with self._db.execute(query, (job_id,) if job_id else ()) as cur:
            return [dict(r) for r in await cur.fetchall()]

    async def lessons(self, kernel_class: str | None = None, arch: str | None = None) -> list[Lesson]:
        """Distil the experiments into one :class:`Lesson` per (kernel class, arch, knob), most evidence first.

        Experiments of the original kernel, never-run ones and those from the tests' SimulatedDevice
        do not count.
        """
        query = ("SELECT kernel_class, arch, kernel_fingerprint, generator, params, outcome, check_failed, speedup"
                 " FROM experiments WHERE generator != 'original' AND outcome != 'not_run' AND gpu NOT LIKE 'SimulatedDevice%'")
        args: list = []
        if kernel_class is not None:
            query += " AND kernel_class = ?"
            args.append(kernel_class)
        if arch is not None:
            query += " AND arch = ?"
            args.append(arch)
        groups: dict[tuple[str, str, str], list[tuple]] = {}
        async with self._db.execute(query, args) as cur:
            async for kclass, march, fingerprint, generator, params, outcome, check, speedup in cur:
                for k, v in json.loads(params).items():
                    groups.setdefault((kclass, march, f"{generator}:{k}={v}"), []).append((fingerprint, outcome, check, speedup))
        out = []
        for (kclass, march, knob), rows in groups.items():
            speedups = sorted(sp for _, outcome, _, sp in rows if outcome == "measured" and sp)
            failures = [(check or outcome) for _, outcome, check, _ in rows
                        if outcome in ("rejected", "crashed", "timed_out", "compile_failed")]
            logs = [math.log(sp) for sp in speedups] + [math.log(0.5)] * len(failures)
            out.append(Lesson(
                kernel_class=kclass, arch=march, knob=knob, tried=len(rows), kernels=len({r[0] for r in rows}),
                verified=len(speedups), faster=sum(sp > 1.0 for sp in speedups), broke=len(failures),
                median_speedup=statistics.median(speedups) if speedups else None,
                top_failure=Counter(failures).most_common(1)[0][0] if failures else None,
                score=sum(logs) / len(logs) if logs else 0.0,
            ))
        return sorted(out, key=lambda lesson: (-lesson.tried, -lesson.score, lesson.knob))

    async def search_priors(self, kernel_class: str, arch: str, exclude_job: str | None = None) -> Priors:
        """Everything a new job on ``kernel_class`` and ``arch`` starts from (:class:`~ptxfactory.search.priors.Priors`).

        Scores are relative to each past job's best (``log(speedup / best)``, a failure
        :data:`~ptxfactory.search.priors.FAILED`): per generator its past configurations (function knobs
        kept on this class only), and per knob value its main effect across generators. A failure
        counts on this class only. Per generator, the rewards its candidates earned in their jobs, in
        order (``log(speedup / best so far)``, clipped to [log 0.5, 3]; a failure log 0.5): over every
        class, and on this class only. The original kernels (they set each job's starting best of
        1.0), never-run candidates, the SimulatedDevice's experiments and those of ``exclude_job`` (a
        resumed job must not learn from its own first half) do not count.
        """
        query = ("SELECT job_id, kernel_class, generator, params, outcome, speedup FROM experiments"
                 " WHERE outcome != 'not_run' AND gpu NOT LIKE 'SimulatedDevice%' AND arch = ? AND job_id != ?"
                 " ORDER BY id")
        async with self._db.execute(query, (arch, exclude_job or "")) as cur:
            rows = await cur.fetchall()
        job_best: dict[str, float] = {}
        for job, _, _, _, outcome, speedup in rows:
            if outcome == "measured" and speedup:
                job_best[job] = max(job_best.get(job, 1.0), speedup)
        configs: dict[tuple[str, bool, str], list[float]] = {}  # (generator, same class, params JSON) -> scores
        groups: dict[tuple[str, str], list[tuple[dict, float]]] = {}  # (job, generator) -> (params, score)
        gens: dict[str, list[float]] = {}
        class_gens: dict[str, list[float]] = {}
        running: dict[str, float] = {}
        for job, kclass, generator, params, outcome, speedup in rows:
            ok = outcome == "measured" and bool(speedup)
            if generator == "original":
                continue
            before = running.get(job, 1.0)
            reward = max(math.log(0.5), min(math.log(speedup / before), 3.0)) if ok else math.log(0.5)
            running[job] = max(before, speedup) if ok else before
            gens.setdefault(generator, []).append(reward)
            same = kclass == kernel_class
            if same:
                class_gens.setdefault(generator, []).append(reward)
            if not (ok or same):
                continue  # on another class a failure may be another function, not a slow configuration
            rel = max(FAILED, math.log(speedup / job_best.get(job, 1.0))) if ok else FAILED
            knobs = json.loads(params)
            kept = knobs if same else {k: v for k, v in knobs.items() if k not in FUNCTION_KNOBS}
            configs.setdefault((generator, same, json.dumps(kept, sort_keys=True)), []).append(rel)
            groups.setdefault((job, generator), []).append((knobs, rel))
        past: dict[str, list[PastConfig]] = {}
        for (generator, same, kept), scores in configs.items():
            past.setdefault(generator, []).append(
                PastConfig(params=json.loads(kept), same_class=same, rel=sum(scores) / len(scores), n=len(scores)))

        def arms(d: dict[str, list[float]]) -> dict[str, ArmPrior]:
            return {g: ArmPrior(len(v), sum(v) / len(v)) for g, v in d.items()}

        return Priors(configs={g: tuple(c) for g, c in past.items()}, knob=main_effects(groups.values()),
                      generators=arms(gens), class_generators=arms(class_gens))


def main_effects(groups) -> dict[str, float]:
    """``"knob=value"`` -> the mean over groups (one job's candidates of one generator, each
    ``(params, relative score)``) of the value's main effect: the mean score of the group's candidates
    with that value minus the mean over all of its candidates with that knob. A knob that did not
    vary in a group says nothing about its values there and is skipped; function knobs are skipped."""
    effects: dict[str, list[float]] = {}
    for group in groups:
        by_knob: dict[str, dict[object, list[float]]] = {}
        for params, rel in group:
            for k, v in params.items():
                if k not in FUNCTION_KNOBS:
                    by_knob.setdefault(k, {}).setdefault(json.dumps(v), []).append(rel)
        for k, values in by_knob.items():
            if len(values) < 2:
                continue
            everything = [r for scores in values.values() for r in scores]
            mean = sum(everything) / len(everything)
            for v, scores in values.items():
                effects.setdefault(f"{k}={json.loads(v)}", []).append(sum(scores) / len(scores) - mean)
    return {name: sum(v) / len(v) for name, v in effects.items()}
