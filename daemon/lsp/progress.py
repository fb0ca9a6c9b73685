"""A job's progress in one session: one begin, reports with a never-decreasing percentage, one end.

On a server-created work-done token when the client declares ``window.workDoneProgress`` (the
``window/workDoneProgress/create`` request goes out at once, so it precedes the answer of the
command that started the job; begin waits for the client's answer); otherwise, or when the
client refuses the token, as ``ptxfactory/progress`` notifications carrying the same token. A
session that starts following a job midway (it opens the file, reconnects after a restart, or
watches the job) gets a begin with the job's current state, then the rest.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lsprotocol import types

from ptxfactory.protocol.lsp import PROGRESS_NOTIFICATION, ProgressNotification

if TYPE_CHECKING:
    from ..jobs import JobRecord
    from .session import PtxServer

log = logging.getLogger(__name__)

CREATE_TIMEOUT_S = 10.0


class ProgressRelay:
    """States: ``creating`` (waiting for the client to accept the token), ``live``, ``ended``."""

    def __init__(self, ls: "PtxServer", job: "JobRecord"):
        self.ls, self.job, self.token = ls, job, job.token
        self.work_done = ls.supports_work_done_progress
        self.state = "creating"
        self.percentage = 0
        self._last: tuple | None = None
        if self.work_done:
            try:
                fut = ls.work_done_progress.create(self.token)  # sent now
            except Exception as exc:  # e.g. the token is already registered
                log.warning("job %s: cannot create progress token (%s); using %s", job.job_id, exc, PROGRESS_NOTIFICATION)
                self.work_done = False
                self._begin()
            else:
                self._task = asyncio.ensure_future(self._created(asyncio.wrap_future(fut)))
        else:
            self._begin()

    async def _created(self, fut: asyncio.Future) -> None:
        try:
            await asyncio.wait_for(fut, CREATE_TIMEOUT_S)
        except asyncio.CancelledError:
            return
        except Exception as exc:
            log.warning("window/workDoneProgress/create failed (%s); using %s", exc, PROGRESS_NOTIFICATION)
            self.work_done = False
        if self.ls.ended.is_set():
            return
        self._begin()
        if self.job.final:
            self.end()

    def _begin(self) -> None:
        self.state = "live"
        self.percentage = self.job.percentage
        self._send("begin", title=f"Optimising {self.job.kernel}", message=self.job.message, percentage=self.percentage)

    def update(self) -> None:
        """Report the job's current step (nothing while the token is being created: begin carries it)."""
        if self.state != "live":
            return
        self.percentage = max(self.percentage, self.job.percentage)
        now = (self.job.message, self.percentage)
        if now != self._last:
            self._send("report", message=self.job.message, percentage=self.percentage)

    def end(self) -> None:
        """End the progress with the job's final message (after begin, whenever the token is ready)."""
        if self.state == "live":
            self.state = "ended"
            self._send("end", message=self.job.message)

    def _send(self, kind: str, *, title: str | None = None, message: str | None = None, percentage: int | None = None) -> None:
        self._last = (message, percentage)
        if self.ls.ended.is_set():
            return
        try:
            if self.work_done:
                wdp = self.ls.work_done_progress
                if kind == "begin":
                    wdp.begin(self.token, types.WorkDoneProgressBegin(title=title, cancellable=True, message=message, percentage=percentage))
                elif kind == "report":
                    wdp.report(self.token, types.WorkDoneProgressReport(message=message, percentage=percentage))
                else:
                    wdp.end(self.token, types.WorkDoneProgressEnd(message=message))
            else:
                j = self.job
                params = ProgressNotification(
                    token=self.token, job_id=j.job_id, uri=j.uri, kernel=j.kernel, kind=kind, title=title, message=message,
                    percentage=percentage, done=j.done, total=j.total, state=j.state,
                )
                self.ls.protocol.notify(PROGRESS_NOTIFICATION, params.model_dump(exclude_none=True))
        except Exception:
            log.exception("job %s: cannot send progress %s", self.job.job_id, kind)
