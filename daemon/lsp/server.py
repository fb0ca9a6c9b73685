"""Builds one LSP session over the engine, and serves one on stdio (``ptxfactory serve --stdio``) on uvloop.

:func:`build_server` is the session factory: every connection of the daemon (see
:mod:`ptxfactory.daemon.listener`) gets a fresh server from it, all sharing one engine.
:func:`serve_stdio` runs an in-process engine with one session on stdin/stdout; its jobs are
stored like the daemon's (and resumed by the next engine on that store), unless a daemon holds
the store, in which case they live in memory only.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import uvloop
from lsprotocol import types
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol import default_converter

from . import code_actions, code_lens, diagnostics, hover, optimise, show_report, virtual_docs
from .session import PtxServer
from .transport import attach_writer, run_session, stdin_reader

if TYPE_CHECKING:
    from ..engine import Engine

log = logging.getLogger(__name__)

FEATURES = (code_lens, optimise, code_actions, hover, diagnostics, show_report, virtual_docs)


@functools.cache
def shared_converter():
    """One cattrs converter for every session. cattrs generates (and caches) its structure and unstructure
    code per type on first use, some milliseconds each (tens on a loaded machine): shared, and warmed by
    :func:`warm_up`, no session's first hover or code action pays for it."""
    return default_converter()


def build_server(engine: "Engine", required_token: str | None = None) -> PtxServer:
    """A session with every feature registered; ``required_token``: refuse an ``initialize`` without it."""
    server = PtxServer(engine, required_token=required_token, converter_factory=shared_converter)
    for feature in FEATURES:
        feature.register(server)
    server.feature("initialize")(_initialize)
    server.feature("shutdown")(_shutdown)
    return server


_WARM_REQUESTS = {
    types.TEXT_DOCUMENT_HOVER: {"textDocument": {"uri": "file:///w.cu"}, "position": {"line": 0, "character": 0}},
    types.TEXT_DOCUMENT_CODE_ACTION: {"textDocument": {"uri": "file:///w.cu"}, "context": {"diagnostics": []},
                                      "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}},
    types.TEXT_DOCUMENT_CODE_LENS: {"textDocument": {"uri": "file:///w.cu"}},
    types.WORKSPACE_EXECUTE_COMMAND: {"command": "ptxfactory.jobs", "arguments": [{}]},
}
_WARM_NOTIFICATIONS = {
    types.TEXT_DOCUMENT_DID_OPEN: {"textDocument": {"uri": "file:///w.cu", "languageId": "cuda", "version": 1, "text": ""}},
    types.TEXT_DOCUMENT_DID_CHANGE: {"textDocument": {"uri": "file:///w.cu", "version": 2}, "contentChanges": [{"text": ""}]},
    types.TEXT_DOCUMENT_DID_SAVE: {"textDocument": {"uri": "file:///w.cu"}},
}


def warm_up() -> None:
    """Have the shared converter generate its code for the messages every session exchanges."""
    protocol = LanguageServer("warm-up", "0", converter_factory=shared_converter).protocol  # no engine, no session
    for i, (method, params) in enumerate({**_WARM_REQUESTS, **_WARM_NOTIFICATIONS}.items()):
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if method in _WARM_REQUESTS:
            message["id"] = i
        protocol.structure_message(json.loads(json.dumps(message)))
    pos = types.Position(line=0, character=0)
    rng = types.Range(start=pos, end=pos)
    edit = types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri="file:///w.cu", version=1),
        edits=[types.TextEdit(range=rng, new_text="")])])
    samples = {
        types.TEXT_DOCUMENT_HOVER: types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=""), range=rng),
        types.TEXT_DOCUMENT_CODE_ACTION: [types.CodeAction(title="", kind="refactor", edit=edit, is_preferred=True,
                                                           disabled=types.CodeActionDisabled(reason=""))],
        types.TEXT_DOCUMENT_CODE_LENS: [types.CodeLens(range=rng, command=types.Command(title="", command="", arguments=[{}]))],
    }
    converter = shared_converter()  # what pygls unstructures every message it sends with
    for method, result in samples.items():
        json.dumps(converter.unstructure(protocol.get_result_type(method)(id=0, result=result, jsonrpc="2.0")))
    json.dumps(converter.unstructure(types.PublishDiagnosticsParams(
        uri="file:///w.cu", diagnostics=[types.Diagnostic(range=rng, message="")])))


def _initialize(ls: PtxServer, params) -> None:
    ls.check_initialize(params)


def _shutdown(ls: PtxServer, *args) -> None:
    """Stop following jobs; the jobs themselves carry on (they belong to the engine)."""
    ls.engine.unsubscribe(ls.on_job_event)
    ls.relays.clear()


async def serve_stdio_async(
    backend_name: str = "auto", store_path: str | Path | None = None,
    stdin: BinaryIO | None = None, stdout: BinaryIO | None = None, jobs_path: str | Path | None = None,
) -> str:
    """Serve one client on ``stdin``/``stdout`` until it exits or closes the stream; returns why it ended."""
    from ..engine import Engine

    engine = await Engine.open(backend_name, store_path, jobs_path, private_fallback=True)
    try:
        await engine.start()
        warm_up()
        server = build_server(engine)
        log.info("ptxfactory LSP on stdio: backend %s, lessons %s, jobs %s",
                 type(engine.backend).__name__ if engine.backend else "none", engine.lessons.path, engine.jobs.path)
        attach_writer(server.protocol, StdoutWriter(stdout or sys.stdout.buffer))
        return await run_session(server, stdin_reader(stdin or sys.stdin.buffer))
    finally:
        await engine.close()
        if stdin is None:  # a process of its own: it ends with its one client, whatever still holds it up
            _exit_soon(EXIT_GRACE_S)


EXIT_GRACE_S = 5.0


def _exit_soon(grace_s: float) -> None:
    """End this process ``grace_s`` seconds from now unless it has ended by itself: a thread still busy (a
    compilation, a spec's work abandoned after its deadline) or an executor joined at exit must not keep a
    server whose client has gone alive (it and its workers would outlive the editor). Stores are closed by then."""
    def force() -> None:
        logging.getLogger(__name__).warning("still running %.0f s after the session ended: exiting", grace_s)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(0)

    timer = threading.Timer(grace_s, force)
    timer.daemon = True
    timer.start()


def serve_stdio(backend_name: str = "auto", store_path: str | None = None) -> None:
    """Run the server on stdio with the uvloop event loop; returns when the client exits."""
    configure_logging()
    try:
        uvloop.run(serve_stdio_async(backend_name, store_path))
    except BrokenPipeError:
        log.error("the client closed the connection")
    except KeyboardInterrupt:
        pass


def configure_logging(level: int = logging.INFO) -> None:
    """Log to stderr (stdout carries the protocol); pygls's own chatter only from WARNING."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    logging.getLogger("ptxfactory").setLevel(level)
