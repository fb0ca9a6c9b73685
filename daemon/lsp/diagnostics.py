"""Diagnostics on open and save: compile errors and spills of the spec'd kernels, spec errors on the spec file.

The kernels are compiled as the document's text stands (NVRTC, off the event loop, see
:class:`~ptxfactory.daemon.analysis.Analyzer`). Published to the session that opened or saved the
document: errors at the compiler's lines, a warning on the kernel's name for ptxas spills or a
signature that does not match the spec; a malformed spec as an error on ``<file>.toml``.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from lsprotocol import types

from ptxfactory.protocol.lsp import DIAGNOSTIC_SOURCE

from ..analysis import FileAnalysis
from ..jobs import path_key
from .session import PtxServer
from .text import EOL, cuda_path, units

log = logging.getLogger(__name__)


def register(server: PtxServer) -> None:
    server.feature(types.TEXT_DOCUMENT_DID_OPEN)(did_open)
    server.feature(types.TEXT_DOCUMENT_DID_SAVE)(did_save)
    server.feature(types.TEXT_DOCUMENT_DID_CLOSE)(did_close)


def did_open(ls: PtxServer, params: types.DidOpenTextDocumentParams) -> None:
    uri = params.text_document.uri
    for job in ls.engine.active_on(path_key(uri)):  # a job already running on this file: show its progress here too
        ls.follow(job)
    schedule(ls, uri)


def did_save(ls: PtxServer, params: types.DidSaveTextDocumentParams) -> None:
    schedule(ls, params.text_document.uri)


def did_close(ls: PtxServer, params: types.DidCloseTextDocumentParams) -> None:
    if cuda_path(params.text_document.uri) is not None:
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))


def schedule(ls: PtxServer, uri: str) -> asyncio.Task | None:
    path = cuda_path(uri)
    if path is None:
        return None
    doc = ls.workspace.text_documents.get(uri)
    if doc is None:
        return None
    return asyncio.ensure_future(publish(ls, uri, path, doc.source, doc.version))


async def publish(ls: PtxServer, uri: str, path: Path, text: str, version: int | None) -> None:
    try:
        analysis = await ls.engine.analysis.analyse(path, text)
    except Exception:
        log.exception("analysing %s failed", path)
        return
    if ls.ended.is_set() or uri not in ls.workspace.text_documents:
        return
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=diagnostics(analysis, text, ls.position_encoding)))
    spec_diags = []
    if analysis.spec_error is not None:
        line = max((analysis.spec_error.line or 1) - 1, 0)
        spec_diags.append(_diag(line, 0, line + 1, 0, types.DiagnosticSeverity.Error, str(analysis.spec_error)))
    if analysis.spec_path.exists():
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=analysis.spec_path.resolve().as_uri(), diagnostics=spec_diags))


def diagnostics(analysis: FileAnalysis, text: str, encoding: str = types.PositionEncodingKind.Utf16) -> list[types.Diagnostic]:
    lines = EOL.split(text)

    def whole(line: int) -> tuple[int, int, int, int]:
        line = min(line, len(lines) - 1)
        return line, 0, line, units(lines[line], encoding)

    def name_span(line: int, name: str) -> tuple[int, int, int, int]:
        line = min(line, len(lines) - 1)
        col = lines[line].find(name)
        if col < 0:
            return whole(line)
        start = units(lines[line][:col], encoding)
        return line, start, line, start + units(name, encoding)

    out = []
    for k in analysis.kernels.values():
        if k.mismatch:
            out.append(_diag(*name_span(k.name_line, k.kernel), types.DiagnosticSeverity.Error, k.mismatch))
        for m in k.messages:
            severity = types.DiagnosticSeverity.Error if m.severity == "error" else types.DiagnosticSeverity.Warning
            out.append(_diag(*whole(m.line), severity, m.text, code="nvrtc"))
        r = k.resources
        if r is not None and (r.spill_stores or r.spill_loads):
            out.append(_diag(*name_span(k.name_line, k.kernel), types.DiagnosticSeverity.Warning,
                             f"{k.kernel}: {r.spill_stores} bytes spill stores, {r.spill_loads} bytes spill loads per thread "
                             f"({r.registers} registers, {r.local_bytes} bytes stack; ptxas, {k.arch})", code="spills"))
    unique = {(d.range.start.line, d.message): d for d in out}
    return list(unique.values())


def _diag(l0: int, c0: int, l1: int, c1: int, severity: types.DiagnosticSeverity, message: str, code: str | None = None) -> types.Diagnostic:
    return types.Diagnostic(
        range=types.Range(start=types.Position(line=l0, character=c0), end=types.Position(line=l1, character=c1)),
        severity=severity, message=message, source=DIAGNOSTIC_SOURCE, code=code,
    )
