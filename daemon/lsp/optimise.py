"""``ptxfactory.optimise`` and ``ptxfactory.cancel`` (``workspace/executeCommand``), and the job's progress.

``ptxfactory.optimise [{"uri", "kernel"}]`` checks its argument, starts the search as an asyncio
task and answers ``{"job_id", "token"}`` at once. The job reports on a server-created work-done
token when the client declares ``window.workDoneProgress`` (else with ``ptxfactory/progress``
notifications carrying the same token): begin, one report per candidate, end with the best
speedup or the reason there is none. A bad spec or kernel ends the progress and shows the error.
``window/workDoneProgress/cancel`` on the token, ``ptxfactory.cancel [{"job_id"}]`` and
``shutdown`` stop the job between candidates; its progress still ends ("cancelled").
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any

from lsprotocol import types
from pydantic import BaseModel, ValidationError
from pygls.exceptions import JsonRpcInvalidParams

from ptxfactory.protocol import JobSummary, SpecError
from ptxfactory.protocol.lsp import (
    CANCEL, OPTIMISE, PROGRESS_NOTIFICATION, CancelArgs, CancelResult, OptimiseArgs, OptimiseResult, ProgressNotification,
)
from ptxfactory.search.strategy import JobError, Progress
from ptxfactory.search.strategy import optimise as run_search

from .jobs import Job
from .session import PtxServer
from .text import cuda_path

log = logging.getLogger(__name__)


def register(server: PtxServer) -> None:
    server.command(OPTIMISE)(optimise)
    server.command(CANCEL)(cancel)
    server.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)(work_done_progress_cancel)
    server.feature(types.SHUTDOWN)(shutdown)


async def optimise(ls: PtxServer, *args: Any) -> dict:
    a = _parse(OPTIMISE, OptimiseArgs, args)
    path = cuda_path(a.uri)
    if path is None:
        raise JsonRpcInvalidParams(f"{OPTIMISE}: {a.uri} is not a file: URI of a .cu or .cuh file")
    previous = ls.jobs.latest(a.uri, a.kernel)
    if previous is not None and previous.running:
        return OptimiseResult(job_id=previous.job_id, token=previous.token, already_running=True).model_dump()
    job_id = uuid.uuid4().hex[:12]
    job = Job(job_id=job_id, uri=a.uri, kernel=a.kernel, token=f"ptxfactory/job/{job_id}")
    ls.jobs.add(job)
    job.task = asyncio.create_task(run_job(ls, job, path), name=f"ptxfactory job {job_id}")
    job.task.add_done_callback(_log_failure)
    return OptimiseResult(job_id=job_id, token=job.token).model_dump()


async def cancel(ls: PtxServer, *args: Any) -> dict:
    a = _parse(CANCEL, CancelArgs, args)
    job = ls.jobs.get(a.job_id)
    if job is None:
        raise JsonRpcInvalidParams(f"{CANCEL}: no job {a.job_id!r} in this session")
    if job.running:
        job.cancel.set()
    return CancelResult(job_id=job.job_id, cancelled=job.running, state=job.state).model_dump()


def work_done_progress_cancel(ls: PtxServer, params: types.WorkDoneProgressCancelParams) -> None:
    job = ls.jobs.by_token(params.token)
    if job is not None and job.running:
        job.cancel.set()


async def shutdown(ls: PtxServer, *args: Any) -> None:
    await ls.stop_jobs()


async def run_job(ls: PtxServer, job: Job, path: Path) -> None:
    """Run the search for ``job``, reporting progress; always ends the progress and leaves ``job.state`` final."""
    progress: JobProgress | None = None
    end = "failed"
    try:
        progress = await open_progress(ls, job)
        progress.begin(f"Optimising {job.kernel}")
        summary = await run_search(
            path, job.kernel, backend=ls.backend, store=ls.store, on_progress=progress.report,
            job_id=job.job_id, cancel=job.cancel, source_text=_open_text(ls, job.uri),
        )
        job.summary, job.state = summary, summary.state
        end = end_message(summary)
    except (SpecError, JobError) as exc:
        job.state, job.error = "failed", str(exc)
        end = job.error.splitlines()[0]
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=_clip(job.error)))
    except asyncio.CancelledError:
        job.state, end = "cancelled", "cancelled"
        raise
    except Exception as exc:
        log.exception("job %s (%s in %s) failed", job.job_id, job.kernel, path)
        job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
        end = f"failed: {job.error}"
        ls.window_show_message(types.ShowMessageParams(
            type=types.MessageType.Error, message=_clip(f"ptxfactory: optimising {job.kernel} failed: {job.error}"),
        ))
    finally:
        if job.running:  # only a BaseException other than CancelledError gets here
            job.state = "failed"
        if progress is not None:
            progress.end(end)


def end_message(summary: JobSummary) -> str:
    """The progress end message: the best verified speedup, or the reason there is none."""
    faster = summary.faster()
    if not faster:
        return summary.message
    best = faster[0]
    simulated = " (simulated)" if best.result.simulated else ""
    head = "cancelled; best so far" if summary.state == "cancelled" else "best"
    return (f"{head}: {best.result.speedup:.2f}x faster{simulated}, {best.candidate.description}; "
            f"{len(faster)} faster candidate(s), offered as code actions on the kernel")


class JobProgress:
    """One begin, reports with a never-decreasing percentage, one end. Sends through :meth:`_send`."""

    def __init__(self, ls: PtxServer, job: Job):
        self.ls, self.job = ls, job
        self.percentage = 0
        self.ended = False

    def begin(self, title: str) -> None:
        self._send("begin", title=title, message="starting", percentage=0)

    def report(self, p: Progress) -> None:
        """``on_progress`` of the search (called on the loop thread)."""
        if self.ended:
            return
        self.percentage = min(99, max(self.percentage, 100 * p.done // max(p.total, 1)))
        message = f"{p.done}/{p.total} {p.message}" if p.row is not None else p.message
        self._send("report", message=message, percentage=self.percentage)

    def end(self, message: str) -> None:
        if not self.ended:
            self.ended = True
            self._send("end", message=message)

    def _send(self, kind: str, *, title: str | None = None, message: str | None = None, percentage: int | None = None) -> None:
        raise NotImplementedError


class WorkDoneProgress(JobProgress):
    """``$/progress`` on a token the server created with ``window/workDoneProgress/create``."""

    def _send(self, kind, *, title=None, message=None, percentage=None):
        wdp, token = self.ls.work_done_progress, self.job.token
        try:
            if kind == "begin":
                wdp.begin(token, types.WorkDoneProgressBegin(title=title, cancellable=True, message=message, percentage=percentage))
            elif kind == "report":
                wdp.report(token, types.WorkDoneProgressReport(message=message, percentage=percentage))
            else:
                wdp.end(token, types.WorkDoneProgressEnd(message=message))
        except Exception:
            log.exception("job %s: cannot send progress %s", self.job.job_id, kind)


class NotificationProgress(JobProgress):
    """``ptxfactory/progress`` for clients without work-done progress support."""

    def _send(self, kind, *, title=None, message=None, percentage=None):
        j = self.job
        params = ProgressNotification(
            token=j.token, job_id=j.job_id, uri=j.uri, kernel=j.kernel, kind=kind, title=title, message=message, percentage=percentage,
        )
        try:
            self.ls.protocol.notify(PROGRESS_NOTIFICATION, params.model_dump(exclude_none=True))
        except Exception:
            log.exception("job %s: cannot send progress %s", j.job_id, kind)


async def open_progress(ls: PtxServer, job: Job) -> JobProgress:
    """Work-done progress on a new server-created token when the client supports it, else the notification."""
    if ls.supports_work_done_progress:
        try:
            await ls.work_done_progress.create_async(job.token)
            return WorkDoneProgress(ls, job)
        except Exception as exc:
            log.warning("window/workDoneProgress/create failed (%s); using %s", exc, PROGRESS_NOTIFICATION)
    return NotificationProgress(ls, job)


def _parse(command: str, model: type[BaseModel], args: tuple[Any, ...]):
    if len(args) != 1:
        raise JsonRpcInvalidParams(f"{command} takes one argument object, got {len(args)} arguments")
    try:
        return model.model_validate(args[0])
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"])) or "argument"
        raise JsonRpcInvalidParams(f"{command}: {where}: {err['msg']}") from None


def _open_text(ls: PtxServer, uri: str) -> str | None:
    """The editor's text of ``uri`` (unsaved edits included); None lets the search read the file."""
    try:
        return ls.workspace.get_text_document(uri).source
    except OSError:
        return None


def _clip(message: str, limit: int = 4000) -> str:
    return message if len(message) <= limit else message[:limit] + "\n…"


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s crashed", task.get_name(), exc_info=task.exception())
