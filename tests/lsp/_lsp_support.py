"""Helpers for the LSP tests: the test client, waiting for progress, applying edits like an editor does."""
from __future__ import annotations

import asyncio
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities, make_test_lsp_client

from ptxfactory.protocol.lsp import PROGRESS_NOTIFICATION
from ptxfactory.search.generators import REGISTRY
from ptxfactory.search.strategy import DEFAULT_GENERATORS

SERVER = [sys.executable, "-m", "ptxfactory.daemon.lsp", "--backend", "simulated"]
"""The server under test: the SimulatedDevice backend (no GPU; it never verifies, its timings are a model)."""

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rmsnorm"
JOB_TIMEOUT = 180.0  # a liveness bound on a whole simulated job: up to 64 candidates compiled, ~35 s alone on 2 cores, more under load

MISSING_GENERATORS = [g for g in DEFAULT_GENERATORS if importlib.util.find_spec(REGISTRY[g].split(":")[0]) is None]
"""Default generators whose modules do not exist yet: without them the job cannot produce candidates."""

NO_PROGRESS_CAPS = types.ClientCapabilities(
    text_document=types.TextDocumentClientCapabilities(code_action=types.CodeActionClientCapabilities()),
)
"""A client that declares neither ``window.workDoneProgress`` nor ``workspaceEdit.documentChanges``."""


def make_client() -> LanguageClient:
    """pytest-lsp's client, plus a handler collecting ``ptxfactory/progress`` notifications in ``client.ptx_progress``."""
    client = make_test_lsp_client()
    client.ptx_progress = []

    @client.feature(PROGRESS_NOTIFICATION)
    def on_progress(ls: LanguageClient, params: Any) -> None:
        ls.ptx_progress.append(_plain(params))

    return client


def capabilities(name: str) -> types.ClientCapabilities:
    return NO_PROGRESS_CAPS if name == "no-progress" else client_capabilities(name)


def _plain(obj: Any) -> Any:
    """pygls hands custom notifications over as namedtuple-like objects; turn them back into dicts."""
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


async def until(predicate, timeout: float = JOB_TIMEOUT, what: str = "condition"):
    """Poll ``predicate()`` every 20 ms until it returns something truthy; fail after ``timeout`` s."""
    async def poll():
        while not (value := predicate()):
            await asyncio.sleep(0.02)
        return value

    try:
        return await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}") from None


def progress_ended(client: LanguageClient, token: str) -> list:
    """The values reported on ``token`` once the last one is an end, else [] (work-done progress)."""
    values = client.progress_reports.get(token, [])
    return values if values and isinstance(values[-1], types.WorkDoneProgressEnd) else []


def open_document(client: LanguageClient, path: Path, text: str | None = None, version: int = 1) -> str:
    uri = path.as_uri()
    text = path.read_text() if text is None else text
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="cuda", version=version, text=text),
    ))
    return uri


def replace_document(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
    ))


def line_of(text: str, needle: str) -> int:
    """0-based line of the first line containing ``needle``."""
    return next(i for i, line in enumerate(text.split("\n")) if needle in line)


def text_edits(edit: types.WorkspaceEdit, uri: str) -> list[types.TextEdit]:
    """The edits of ``uri`` in either form a server may use (``documentChanges`` or ``changes``)."""
    if edit.document_changes:
        return [e for dc in edit.document_changes if dc.text_document.uri == uri for e in dc.edits]
    return list((edit.changes or {}).get(uri, []))


def offset_of(text: str, pos: types.Position) -> int:
    """Index into ``text`` of an LSP position (UTF-16 code units; lines end at \\n, \\r\\n or \\r)."""
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    start = starts[pos.line]
    units, i = 0, start
    while units < pos.character:
        units += 2 if ord(text[i]) > 0xFFFF else 1
        i += 1
    return i


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Apply non-overlapping text edits, last first, as an editor does."""
    spans = sorted(((offset_of(text, e.range.start), offset_of(text, e.range.end), e.new_text) for e in edits), reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text
