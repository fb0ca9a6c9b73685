"""``ptxfactory.show``: a job's candidate's PTX or SASS beside the original's, as read-only ``ptxfactory:`` documents.

The command (``ShowArgs``: job, candidate number, ``ptx`` or ``sass``) makes both listings on a thread
(:func:`ptxfactory.daemon.show.listing`: compiles on the CPU, runs the disassembler), keeps them in this
session under ``ptxfactory://show/JOB/NUMBER/KERNEL.VIEW`` URIs, answers with their texts, and, for a client
that declares ``window.showDocument``, opens the original's and then the candidate's. The documents are
served by ``workspace/textDocumentContent`` (LSP 3.18) to a client that asks; clients without it use the
texts in the result.
"""
from __future__ import annotations

import asyncio
import logging
import weakref
from collections import OrderedDict
from typing import Any
from urllib.parse import urlsplit

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from ptxfactory.protocol.lsp import SHOW, SHOW_SCHEME, ShowArgs, ShowResult

from ..show import ShowError, candidate_row, listing
from .optimise import parse
from .session import PtxServer

log = logging.getLogger(__name__)
MAX_DOCUMENTS = 64  # listings kept per session (each up to a few MB of SASS)


def register(server: PtxServer) -> None:
    server.command(SHOW)(show)
    server.feature(types.WORKSPACE_TEXT_DOCUMENT_CONTENT, types.TextDocumentContentOptions(schemes=[SHOW_SCHEME]))(content)


_VIEWS: "weakref.WeakKeyDictionary[PtxServer, OrderedDict[str, str]]" = weakref.WeakKeyDictionary()  # per session


def _documents(ls: PtxServer) -> OrderedDict[str, str]:
    """The session's listings by URI (gone with the session)."""
    return _VIEWS.setdefault(ls, OrderedDict())


def view_uri(job_id: str, number: int, kernel: str, view: str) -> str:
    """``ptxfactory://show/JOB/NUMBER/KERNEL.VIEW`` (``.ptx`` or ``.sass``)."""
    return f"{SHOW_SCHEME}://show/{job_id}/{number}/{kernel}.{view}"


def _keep(ls: PtxServer, uri: str, text: str) -> None:
    docs = _documents(ls)
    docs[uri] = text
    docs.move_to_end(uri)
    while len(docs) > MAX_DOCUMENTS:
        docs.popitem(last=False)


async def show(ls: PtxServer, *args: Any) -> dict:
    """``ptxfactory.show``: see the module's docstring. InvalidParams for an unknown job, one without a summary,
    a candidate number out of range, or a listing that cannot be made (no disassembler, no longer compiles)."""
    a = parse(SHOW, ShowArgs, args)
    job = ls.engine.get(a.job_id) or await ls.engine.find(a.job_id)
    if job is None:
        raise JsonRpcInvalidParams(f"{SHOW}: no job {a.job_id!r}")
    if job.summary is None:
        raise JsonRpcInvalidParams(f"{SHOW}: job {a.job_id} has not ended ({job.state}): its candidates are shown once it has")
    summary = job.summary
    try:
        number, _row = candidate_row(summary, a.candidate)
        base = next((i for i, r in enumerate(summary.rows) if r.key == summary.baseline_key), 0)
        original, shown_one = await asyncio.gather(asyncio.to_thread(listing, summary, base, a.view),
                                                   asyncio.to_thread(listing, summary, number, a.view))
    except ShowError as exc:
        raise JsonRpcInvalidParams(f"{SHOW}: {exc}") from None
    original_uri = view_uri(summary.job_id, base, summary.kernel, a.view)
    uri = view_uri(summary.job_id, number, summary.kernel, a.view)
    _keep(ls, original_uri, original.text)
    _keep(ls, uri, shown_one.text)
    shown = False
    if a.show and ls.supports_show_document:
        try:
            shown = True
            for target in dict.fromkeys((original_uri, uri)):
                answer = await ls.window_show_document_async(types.ShowDocumentParams(uri=target, take_focus=target == uri))
                shown = shown and bool(answer and answer.success)
        except Exception as exc:  # noqa: BLE001: a client that fails to show still gets the texts
            log.warning("window/showDocument failed: %s", exc)
            shown = False
    return ShowResult(job_id=summary.job_id, candidate=number, view=a.view, original_uri=original_uri,
                      original_text=original.text, uri=uri, text=shown_one.text, shown=shown).model_dump()


async def content(ls: PtxServer, params: types.TextDocumentContentParams) -> types.TextDocumentContentResult:
    """``workspace/textDocumentContent`` for a ``ptxfactory:`` URI this session made (InvalidParams otherwise)."""
    if urlsplit(params.uri).scheme != SHOW_SCHEME:
        raise JsonRpcInvalidParams(f"not a {SHOW_SCHEME}: URI: {params.uri}")
    text = _documents(ls).get(params.uri)
    if text is None:
        raise JsonRpcInvalidParams(f"{params.uri}: unknown here; run {SHOW} again")
    return types.TextDocumentContentResult(text=text)
