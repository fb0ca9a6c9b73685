"""The engine: one per daemon process, shared by every editor session.

It owns the evaluation backend (the GPU worker), the lesson store, the job store and the job
queue, and runs one job at a time on the backend. Sessions subscribe to it
(:meth:`Engine.subscribe`) and get every job event: ``queued``, ``started``, ``progress`` (after
each candidate), ``ended``. On :meth:`Engine.start` jobs a previous daemon left queued or running
are queued again; a running one resumes with its stored rows as ``known``, so no candidate
measured before a restart (or a ``kill -9``) is evaluated again.

A job is not resumed forever: one that fails at start (its stored rows unreadable, its spec or
source refused, planning over its deadline) is marked ``failed`` with the reason, and one the
daemon was started on :data:`MAX_STALLED_STARTS` times without storing a row in between (a daemon
that dies or hangs on it and is restarted) is marked ``failed`` instead of being started again.
Either way the daemon serves.
"""
from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path

from ptxfactory.harness.backend import EvaluationBackend
from ptxfactory.protocol import CandidateRow, SpecError
from ptxfactory.protocol.lsp import JobInfo
from ptxfactory.search.lessons import LessonStore

from .analysis import Analyzer
from .jobs import JobRecord, end_message, path_key
from .jobstore import JobStore, StoredJob
from .paths import default_jobs_path, lock_file

log = logging.getLogger(__name__)

Subscriber = Callable[[JobRecord, str], None]

MAX_STALLED_STARTS = 3  # starts of a job without a new stored row before it is no longer resumed


class StoreBusy(RuntimeError):
    """Another engine (a running daemon) holds the job store."""


class Engine:
    """Process-wide state. Build with :meth:`open`, then :meth:`start`; :meth:`close` when done."""

    def __init__(self, backend: EvaluationBackend | None, lessons: LessonStore, jobs: JobStore, *,
                 max_candidates: int = 64, lock_fd: int | None = None):
        self.backend, self.lessons, self.jobs = backend, lessons, jobs
        self.max_candidates = max_candidates
        self.analysis = Analyzer()
        self._lock_fd = lock_fd
        self._subscribers: list[Subscriber] = []
        self._records: dict[str, JobRecord] = {}
        self._latest: dict[tuple[str, str], JobRecord | None] = {}
        self._queue: asyncio.Queue[JobRecord] = asyncio.Queue()
        self._runner: asyncio.Task | None = None
        self.current: JobRecord | None = None

    @classmethod
    async def open(cls, backend_name: str = "auto", store_path: str | Path | None = None, jobs_path: str | Path | None = None,
                   *, private_fallback: bool = False, max_candidates: int = 64) -> "Engine":
        """Open the backend and both stores, holding the job store's lock.

        Raises ``StoreBusy`` when another engine holds it, unless ``private_fallback`` (``serve --stdio``):
        then the jobs live in memory only, and a warning says so.
        """
        from ptxfactory.harness.backend import NoGpu

        from .backends import make_backend

        jobs_path = Path(jobs_path) if jobs_path else default_jobs_path(store_path)
        if not jobs_path.parent.exists():
            jobs_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(jobs_path.parent, 0o700)
        lock_fd = lock_file(jobs_path.with_name(jobs_path.name + ".lock"))
        if lock_fd is None:
            if not private_fallback:
                raise StoreBusy(f"{jobs_path} is in use by another ptxfactory daemon")
            log.warning("%s is in use by a ptxfactory daemon: this session's jobs are kept in memory only", jobs_path)
            jobs_path = Path(":memory:")
        lessons = None
        try:
            try:
                backend = make_backend(backend_name)  # type: ignore[arg-type]
            except NoGpu:
                backend = None
            lessons = await LessonStore.open(store_path)
            jobs = await JobStore.open(jobs_path)
        except BaseException:
            if lessons is not None:
                await lessons.close()
            if lock_fd is not None:
                os.close(lock_fd)
            raise
        return cls(backend, lessons, jobs, max_candidates=max_candidates, lock_fd=lock_fd)

    # --- life cycle ---------------------------------------------------------------------------

    async def start(self, resume: bool = True) -> None:
        """Queue the jobs a previous engine left unfinished (when ``resume``), then start the runner."""
        if resume:
            for stored in await self.jobs.unfinished():
                job = self._record(stored)
                try:
                    stalled = await self.jobs.stalled_starts(job.job_id)
                    if stalled >= MAX_STALLED_STARTS:
                        await self._fail_at_start(job, f"the daemon was started on this job {stalled} times without it "
                                                       "evaluating a candidate (it stopped or hung each time): not resumed again")
                        continue
                    job.rows = await self.jobs.rows(job.job_id)
                except Exception as exc:  # rows this version cannot read, a store error: fail this job, serve the rest
                    log.exception("cannot resume job %s", job.job_id)
                    await self._fail_at_start(job, f"cannot resume after a restart: {type(exc).__name__}: {exc}")
                    continue
                job.resumed = True
                job.done = len(job.rows)
                job.state, job.message = "queued", f"resuming after a restart ({len(job.rows)} candidates kept)"
                log.info("resuming job %s (%s in %s): %d rows kept", job.job_id, job.kernel, job.path, len(job.rows))
                self._remember(job)
                self._queue.put_nowait(job)
        self._runner = asyncio.create_task(self._run_queue(), name="ptxfactory job runner")

    async def _fail_at_start(self, job: JobRecord, reason: str) -> None:
        """Mark a job that cannot start ``failed`` with ``reason`` (stored; best effort when the store fails too)."""
        log.warning("job %s (%s in %s) failed at start: %s", job.job_id, job.kernel, job.path, reason)
        job.state, job.error, job.message = "failed", reason, f"failed: {reason}"
        self._remember(job)
        try:
            await self.jobs.set_state(job.job_id, "failed", error=reason, message=job.message)
        except Exception:
            log.exception("cannot store the failure of job %s", job.job_id)
        self._end(job)

    async def close(self) -> None:
        """Stop the runner (a running job stays ``running`` in the store, to resume next time) and close everything."""
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
        if self.backend is not None:
            await self.backend.close()
        await self.lessons.close()
        await self.jobs.close()
        self.analysis.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- subscribers --------------------------------------------------------------------------

    def subscribe(self, fn: Subscriber) -> None:
        self._subscribers.append(fn)

    def unsubscribe(self, fn: Subscriber) -> None:
        if fn in self._subscribers:
            self._subscribers.remove(fn)

    def _emit(self, job: JobRecord, event: str) -> None:
        for fn in list(self._subscribers):
            try:
                fn(job, event)
            except Exception:  # one broken session must not stop the others or the job
                log.exception("subscriber %r failed on %s of job %s", fn, event, job.job_id)

    # --- jobs ---------------------------------------------------------------------------------

    async def submit(self, path: str | Path, uri: str, kernel: str, source_text: str | None) -> tuple[JobRecord, bool]:
        """Queue a job on ``kernel`` of the document; returns it and False, or the kernel's active job and True."""
        key = path_key(path)
        for job in self._records.values():
            if job.active and job.path == key and job.kernel == kernel:
                return job, True
        job = JobRecord(job_id=uuid.uuid4().hex[:12], path=key, uri=uri, kernel=kernel, source_text=source_text)
        job.created = job.updated = await self.jobs.create(
            job_id=job.job_id, path=key, uri=uri, kernel=kernel, source_text=source_text)
        ahead = self._queue.qsize() + (self.current is not None)
        job.message = f"queued behind {ahead} job(s)" if ahead else "queued"
        self._remember(job)
        self._queue.put_nowait(job)
        self._emit(job, "queued")
        return job, False

    async def cancel(self, job_id: str) -> tuple[JobRecord | None, bool]:
        """Stop a job: a queued one ends now, a running one after the candidate in flight.

        Returns the job (None when unknown to this engine) and whether this call stopped it.
        """
        job = self._records.get(job_id)
        if job is None:
            return None, False
        if job.state == "queued":
            job.state, job.message = "cancelled", "cancelled before it started"
            await self.jobs.set_state(job.job_id, "cancelled", message=job.message)
            self._end(job)
            return job, True
        if job.state == "running" and not job.cancel.is_set():
            job.cancel.set()
            return job, True
        return job, False

    def get(self, job_id: str) -> JobRecord | None:
        return self._records.get(job_id)

    def active_on(self, path: str) -> list[JobRecord]:
        """Queued and running jobs on a document (by :func:`path_key`)."""
        return [j for j in self._records.values() if j.active and j.path == path]

    async def latest(self, path: str, kernel: str) -> JobRecord | None:
        """The newest job on (document, kernel) that has rows or a summary: in memory, else from the job store."""
        key = (path, kernel)
        if key not in self._latest:
            stored = await self.jobs.latest_with_summary(path, kernel)
            if key not in self._latest:  # a job may have started meanwhile
                self._latest[key] = self._from_store(stored) if stored else None
        return self._latest[key]

    async def find(self, job_id: str) -> JobRecord | None:
        """A job by id, from memory or the job store (with its summary, or its rows when it has none)."""
        if job_id in self._records:
            return self._records[job_id]
        stored = await self.jobs.get(job_id, full=True)
        if stored is None:
            return None
        job = self._from_store(stored)
        if job.summary is None:
            job.rows = await self.jobs.rows(job_id)
        return job

    async def list_jobs(self, *, uri: str | None = None, active: bool = False, limit: int = 50) -> list[JobInfo]:
        """Jobs, newest first; live figures for the jobs this engine runs."""
        stored = await self.jobs.list(path=path_key(uri) if uri else None, active=active, limit=limit)
        return [self._records[s.id].info() if s.id in self._records else _stored_info(s) for s in stored]

    # --- the runner ---------------------------------------------------------------------------

    async def _run_queue(self) -> None:
        while True:
            job = await self._queue.get()
            if job.state != "queued":  # cancelled while it waited
                continue
            self.current = job
            try:
                await self.run_job(job)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store failed under the job: end it, keep the runner (and the daemon) going
                log.exception("job %s broke the runner", job.job_id)
                if not job.final:
                    await self._fail_at_start(job, f"{type(exc).__name__}: {exc}")
            finally:
                self.current = None

    async def run_job(self, job: JobRecord) -> None:
        """Run the search for ``job``; persist every row as it comes and the end state. Cancelling the task
        (engine closing) leaves the job ``running`` in the store, to be resumed."""
        from ptxfactory.search.strategy import JobError, Progress
        from ptxfactory.search.strategy import optimise as run_search

        job.state, job.message = "running", ("resuming" if job.resumed else "starting")
        await self.jobs.set_state(job.job_id, "running", message=job.message)
        await self.jobs.count_start(job.job_id)  # reset by the next stored row
        self._emit(job, "started")
        known = {row.key: row.result for row in job.rows}
        seq = len(job.rows)

        async def on_row(row: CandidateRow) -> None:
            nonlocal seq
            await self.jobs.add_row(job.job_id, seq, row)
            seq += 1
            job.rows.append(row)

        def on_progress(p: Progress) -> None:
            message = f"{p.done}/{p.total} {p.message}" if p.row is not None else p.message
            job.progress(p.done, p.total, message)
            self._emit(job, "progress")

        try:
            summary = await run_search(
                job.path, job.kernel, backend=self.backend, store=self.lessons, on_progress=on_progress,
                max_candidates=self.max_candidates, job_id=job.job_id, cancel=job.cancel, source_text=job.source_text,
                known=known, on_row=on_row,
            )
        except asyncio.CancelledError:
            log.info("job %s interrupted (engine closing); it resumes on the next start", job.job_id)
            raise
        except (SpecError, JobError) as exc:
            job.state, job.error = "failed", clip_error(str(exc))
            job.message = job.error.splitlines()[0]
        except Exception as exc:
            log.exception("job %s (%s in %s) failed", job.job_id, job.kernel, job.path)
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
            job.message = f"failed: {job.error}"
        else:
            job.summary, job.rows, job.state = summary, summary.rows, summary.state
            job.done, job.message = len(summary.rows), end_message(summary)
        await self.jobs.set_state(job.job_id, job.state, summary=job.summary, error=job.error, done=job.done,
                                  total=job.total, message=job.message)
        self._end(job)

    def _end(self, job: JobRecord) -> None:
        job.ended.set()
        if not job.rows and job.summary is None and self._latest.get((job.path, job.kernel)) is job:
            del self._latest[(job.path, job.kernel)]  # nothing to offer: the previous results (from the store) stand
        self._emit(job, "ended")
        self._prune(job)

    # --- records ------------------------------------------------------------------------------

    def _remember(self, job: JobRecord) -> None:
        self._records[job.job_id] = job
        self._latest[(job.path, job.kernel)] = job

    def _prune(self, ended: JobRecord) -> None:
        """Keep in memory only the active jobs and the latest job of each (document, kernel)."""
        latest = {id(j) for j in self._latest.values() if j is not None}
        for job_id, job in list(self._records.items()):
            if not job.active and id(job) not in latest:
                del self._records[job_id]

    def _record(self, stored: StoredJob) -> JobRecord:
        return JobRecord(
            job_id=stored.id, path=stored.path, uri=stored.uri, kernel=stored.kernel, source_text=stored.source_text,
            state=stored.state, created=stored.created, updated=stored.updated, done=stored.done, total=stored.total,
            message=stored.message, error=stored.error,
        )

    def _from_store(self, stored: StoredJob) -> JobRecord:
        job = self._record(stored)
        job.summary = stored.summary
        if job.summary is not None:
            job.rows = job.summary.rows
        if job.final:
            job.ended.set()
        return job


ERROR_LINES = 40


def clip_error(text: str, lines: int = ERROR_LINES, chars: int = 8000) -> str:
    """A job's error as stored and shown: its first ``lines`` lines and at most ``chars`` characters (a compiler log
    can quote whatever a document made it read; the start says what went wrong)."""
    kept = text.splitlines()
    out = "\n".join(kept[:lines])[:chars]
    return out + ("\n…" if len(kept) > lines or len(out) < len("\n".join(kept[:lines])) else "")


def _stored_info(s: StoredJob) -> JobInfo:
    final = s.state in ("finished", "compile_only", "cancelled", "failed")
    return JobInfo(
        job_id=s.id, uri=s.uri, path=s.path, kernel=s.kernel, state=s.state, created=s.created, updated=s.updated,
        done=s.done, total=s.total, percentage=100 if final else (100 * s.done // s.total if s.total else 0),
        message=s.message, error=s.error, best_speedup=s.best_speedup, best_candidate=s.best_candidate, simulated=s.simulated,
    )
