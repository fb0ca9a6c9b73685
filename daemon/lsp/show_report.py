"""``ptxfactory.report [{"job_id", "show"?}]``: write an ended job's report and open it with ``window/showDocument``.

The report folder is the one ``ptxfactory optimise`` uses, ``<source folder>/ptxfactory-out/<kernel>/``
(``report.md``, ``report.json``, ``best.cu`` when a verified faster candidate exists), or, when
that folder cannot be written, ``reports/<job id>/`` beside the lesson store. The client shows
``report.md`` when it declares ``window.showDocument`` and ``show`` is true (the default).
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from ptxfactory.protocol import JobSummary
from ptxfactory.protocol.lsp import REPORT, ReportArgs, ReportResult

from ..report import write_outputs
from .optimise import parse
from .session import PtxServer

log = logging.getLogger(__name__)


def register(server: PtxServer) -> None:
    server.command(REPORT)(report)


def write_report(summary: JobSummary, source: Path, fallback: Path) -> Path:
    """Write the report folder; returns the path of ``report.md``. Only into real folders: ``ptxfactory-out``
    and ``<kernel>`` beside the source must not be symbolic links (``fallback``'s folders below the lesson
    store's neither). Raises OSError when neither folder can be written."""
    for folder, base in ((source.parent / "ptxfactory-out" / summary.kernel, source.parent), (fallback, fallback.parent.parent)):
        try:
            write_outputs(summary, folder, base)
            return folder / "report.md"
        except OSError as exc:
            log.warning("cannot write the report to %s (%s)", folder, exc)
    raise OSError(f"cannot write the report of job {summary.job_id}")


async def report(ls: PtxServer, *args: Any) -> dict:
    a = parse(REPORT, ReportArgs, args)
    job = ls.engine.get(a.job_id) or await ls.engine.find(a.job_id)
    if job is None:
        raise JsonRpcInvalidParams(f"{REPORT}: no job {a.job_id!r}")
    if job.summary is None:
        why = f"it is {job.state} ({job.done}/{job.total})" if job.active else f"it ended {job.state}: {job.error or job.message}"
        raise JsonRpcInvalidParams(f"{REPORT}: job {a.job_id} has no report: {why}")
    fallback = ls.engine.lessons.path.parent / "reports" / job.job_id
    try:
        md_path = await asyncio.to_thread(write_report, job.summary, Path(job.path), fallback)
    except OSError as exc:
        raise JsonRpcInvalidParams(f"{REPORT}: {exc}") from None
    uri = md_path.resolve().as_uri()
    shown = False
    if a.show and ls.supports_show_document:
        try:
            answer = await ls.window_show_document_async(types.ShowDocumentParams(uri=uri, take_focus=True))
            shown = bool(answer and answer.success)
        except Exception as exc:
            log.warning("window/showDocument failed: %s", exc)
    return ReportResult(job_id=job.job_id, path=str(md_path), uri=uri, markdown=md_path.read_text(), shown=shown).model_dump()
