"""The headless commands' work against a running daemon: list, watch, cancel, report, submit.

Each talks to the daemon through its custom LSP commands (:mod:`ptxfactory.daemon.client`);
``jobs`` and ``report`` fall back to reading the job store (read-only) when no daemon answers.
The command line (:mod:`ptxfactory.daemon.cli`) only formats what these return.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from ptxfactory.protocol.lsp import (
    CANCEL, JOBS, OPTIMISE, PROGRESS_NOTIFICATION, REPORT, WATCH, CancelResult, JobInfo, OptimiseResult, ProgressNotification,
    ReportResult, WatchResult,
)

from .client import DaemonClient, NoDaemon

EXIT_FASTER, EXIT_BAD_INPUT, EXIT_NOT_FASTER, EXIT_NO_GPU, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_DAEMON_STOPPED = 75  # EX_TEMPFAIL: the daemon went away mid-watch; the job resumes when it restarts


class NoSuchJob(LookupError):
    pass


class DaemonStopped(ConnectionError):
    """The daemon closed the connection (it stopped or died) while a job was followed: the job is not over, it
    resumes when the daemon restarts."""

    def __init__(self, job_id: str):
        super().__init__(f"the daemon stopped; the job will resume when it restarts (job {job_id})")
        self.job_id = job_id


def job_exit_code(info: JobInfo) -> int:
    """The exit codes of ``ptxfactory optimise``, for a job that ended (1 when it failed or is still running)."""
    if info.state == "compile_only":
        return EXIT_NO_GPU
    if info.state == "cancelled":
        return EXIT_INTERRUPTED
    if info.state == "finished":
        return EXIT_FASTER if info.best_speedup and info.best_speedup > 1.0 else EXIT_NOT_FASTER
    return EXIT_BAD_INPUT


async def _client(socket: Path, token: str | None = None) -> DaemonClient:
    return await DaemonClient.connect(socket, token=token)


async def list_jobs(socket: Path, jobs_path: Path, *, active: bool = False, limit: int = 50) -> tuple[list[JobInfo], str]:
    """Jobs, newest first, and where they came from (``daemon`` or the store's path)."""
    try:
        client = await _client(socket)
    except NoDaemon:
        from .engine import _stored_info
        from .jobstore import JobStore

        if not jobs_path.exists():
            return [], str(jobs_path)
        store = await JobStore.open(jobs_path, read_only=True)
        try:
            return [_stored_info(s) for s in await store.list(active=active, limit=limit)], str(jobs_path)
        finally:
            await store.close()
    try:
        result = await client.command(JOBS, {"active": active, "limit": limit})
        return [JobInfo.model_validate(j) for j in result["jobs"]], "daemon"
    finally:
        await client.close()


async def follow(client: DaemonClient, job_id: str, on_event: Callable[[ProgressNotification], None] | None = None) -> JobInfo:
    """Watch ``job_id`` until it ends, calling ``on_event`` with each progress notification; returns the final JobInfo.

    Raises DaemonStopped when the daemon goes away before the job has ended, DaemonError, ConnectionError.
    """
    try:
        watched = WatchResult.model_validate(await client.command(WATCH, {"job_id": job_id}))
    except ConnectionError:
        raise DaemonStopped(job_id) from None
    if watched.token is None:
        return watched.job
    while True:
        method, params = await client.notifications.get()
        if method == "$/disconnected":
            raise DaemonStopped(job_id)
        if method != PROGRESS_NOTIFICATION or not params or params.get("job_id") != job_id:
            continue
        note = ProgressNotification.model_validate(params)
        if on_event is not None:
            on_event(note)
        if note.kind == "end":
            break
    try:
        return WatchResult.model_validate(await client.command(WATCH, {"job_id": job_id})).job
    except ConnectionError:
        raise DaemonStopped(job_id) from None


async def watch_job(socket: Path, job_id: str, on_event=None) -> JobInfo:
    client = await _client(socket)
    try:
        return await follow(client, job_id, on_event)
    finally:
        await client.close()


async def cancel_job(socket: Path, job_id: str, *, wait: bool = True, timeout: float = 120.0) -> tuple[CancelResult, JobInfo | None]:
    """Cancel; with ``wait``, also wait (up to ``timeout``) until the job has stopped and return its final state."""
    client = await _client(socket)
    try:
        result = CancelResult.model_validate(await client.command(CANCEL, {"job_id": job_id}))
        if not wait:
            return result, None
        final = await asyncio.wait_for(follow(client, job_id), timeout)
        return result, final
    finally:
        await client.close()


async def report_job(socket: Path, jobs_path: Path, job_id: str) -> tuple[str, str | None, str]:
    """The job's ``report.md`` text, its summary as JSON (None without a daemon's files), and where it came from."""
    try:
        client = await _client(socket)
    except NoDaemon:
        from .jobstore import JobStore
        from .report import render_markdown

        if not jobs_path.exists():
            raise NoSuchJob(f"no job {job_id} (no daemon, no job store at {jobs_path})") from None
        store = await JobStore.open(jobs_path, read_only=True)
        try:
            job = await store.get(job_id, full=True)
        finally:
            await store.close()
        if job is None:
            raise NoSuchJob(f"no job {job_id} in {jobs_path}")
        if job.summary is None:
            raise NoSuchJob(f"job {job_id} has no report: it is {job.state}" + (f" ({job.error})" if job.error else ""))
        return render_markdown(job.summary), job.summary.model_dump_json(indent=2), str(jobs_path)
    try:
        result = ReportResult.model_validate(await client.command(REPORT, {"job_id": job_id, "show": False}))
    finally:
        await client.close()
    summary = Path(result.path).with_name("report.json")
    return result.markdown, summary.read_text() if summary.exists() else None, result.path


async def submit_job(socket: Path, path: Path, kernel: str, *, watch: bool = False, on_event=None) -> tuple[OptimiseResult, JobInfo | None]:
    """Queue a job on the daemon (it reads the file from disk); with ``watch``, follow it to the end."""
    client = await _client(socket)
    try:
        started = OptimiseResult.model_validate(await client.command(OPTIMISE, {"uri": path.resolve().as_uri(), "kernel": kernel}))
        final = await follow(client, started.job_id, on_event) if watch else None
        return started, final
    finally:
        await client.close()
