"""Builds the LSP server and serves it on stdio (``ptxfactory serve --stdio``) on a uvloop event loop.

:func:`build_server` wires one session: the features of this package around a shared evaluation
backend and lesson store. :func:`serve_stdio` opens those, serves one client on stdin/stdout and
closes them when the client exits (pygls ``start_io`` would run its own plain asyncio loop, so the
read loop it uses, ``pygls.io_.run_async``, is driven here under ``uvloop.run``).
"""
from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import BinaryIO

import uvloop
from pygls.io_ import StdinAsyncReader, StdoutWriter, run_async

from ptxfactory.daemon.backends import BackendName, make_backend
from ptxfactory.harness.backend import EvaluationBackend
from ptxfactory.search.lessons import LessonStore

from . import code_actions, code_lens, optimise
from .session import PtxServer

log = logging.getLogger(__name__)

FEATURES = (code_lens, optimise, code_actions)


def build_server(backend: EvaluationBackend | None, store: LessonStore | None) -> PtxServer:
    """A server for one client, with every feature registered; ``backend`` and ``store`` stay the caller's."""
    server = PtxServer(backend, store)
    for feature in FEATURES:
        feature.register(server)
    return server


async def serve_stdio_async(
    backend_name: BackendName = "auto", store_path: str | Path | None = None,
    stdin: BinaryIO | None = None, stdout: BinaryIO | None = None,
) -> None:
    """Serve one client on ``stdin``/``stdout`` until it exits or closes the stream."""
    backend = make_backend(backend_name)
    store = await LessonStore.open(store_path)
    server = build_server(backend, store)
    log.info("ptxfactory LSP on stdio: backend %s, lessons %s", type(backend).__name__ if backend else "none", store.path)
    server._stop_event = stop = threading.Event()  # pygls-private: what its own start_io sets to stop the read loop
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
    try:
        await run_async(
            stop_event=stop, reader=StdinAsyncReader(stdin or sys.stdin.buffer, server.thread_pool),
            protocol=server.protocol, logger=log, error_handler=server.report_server_error,
        )
    finally:
        await server.stop_jobs()
        if backend is not None:
            await backend.close()
        await store.close()
        server.shutdown()


def serve_stdio(backend_name: BackendName = "auto", store_path: str | None = None) -> None:
    """Run the server on stdio with the uvloop event loop; returns (or raises ``SystemExit``) when the client exits."""
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
