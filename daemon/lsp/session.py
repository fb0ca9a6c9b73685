"""The server class of one editor session: a pygls ``LanguageServer`` holding the session's jobs.

The evaluation backend and the lesson store are shared services passed in by whoever builds the
server (see :func:`ptxfactory.daemon.lsp.server.build_server`); they are not closed here.
"""
from __future__ import annotations

import asyncio
import logging
from importlib.metadata import PackageNotFoundError, version

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from ptxfactory.harness.backend import EvaluationBackend
from ptxfactory.search.lessons import LessonStore

from .jobs import JobTable

log = logging.getLogger(__name__)

try:
    __version__ = version("ptxfactory")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0"


class PtxServer(LanguageServer):
    """One session: the open documents (pygls workspace) and the jobs started from them."""

    def __init__(self, backend: EvaluationBackend | None, store: LessonStore | None, **kwargs):
        super().__init__("ptxfactory", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental, **kwargs)
        self.backend = backend
        self.store = store
        self.jobs = JobTable()

    @property
    def supports_work_done_progress(self) -> bool:
        caps = getattr(self.protocol, "client_capabilities", None)  # set by initialize
        return bool(caps and caps.window and caps.window.work_done_progress)

    @property
    def position_encoding(self) -> str:
        """The negotiated position encoding (UTF-16 unless the client offered another)."""
        return self.workspace.position_encoding or types.PositionEncodingKind.Utf16

    async def stop_jobs(self, timeout: float = 10.0) -> None:
        """Ask every running job to stop, and wait (up to ``timeout``) for their progress to end."""
        tasks = []
        for job in self.jobs.running():
            job.cancel.set()
            if job.task is not None:
                tasks.append(job.task)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                log.warning("job task %s did not stop within %.0f s; cancelling it", task.get_name(), timeout)
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
