"""Helpers for the daemon tests: a daemon subprocess, pytest-lsp clients on its unix socket or TCP port.

Every daemon here runs ``--backend simulated``: the SimulatedDevice runs nothing on a GPU and
verifies nothing; its per-candidate delay (``PTXFACTORY_SIMULATED_DELAY_S``) keeps a job mid-way
long enough to disconnect, cancel or ``kill -9`` it.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.io_ import run_async
from pytest_lsp import LanguageClient, client_capabilities, make_test_lsp_client

from ptxfactory.protocol.lsp import PROGRESS_NOTIFICATION
from ptxfactory.daemon.listener import socket_answers
from ptxfactory.daemon.paths import read_token, token_path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "rmsnorm"
CLI = [sys.executable, "-m", "ptxfactory.daemon"]
TIMEOUT = 30.0


class Daemon:
    """``ptxfactory serve`` as a subprocess; :meth:`stop` (SIGTERM, then SIGKILL) or :meth:`kill9`."""

    def __init__(self, workdir: Path, socket_path: Path, *, delay: float = 0.05, max_candidates: int = 8,
                 tcp: bool = False, extra: tuple[str, ...] = (), env: dict[str, str] | None = None,
                 pass_socket: bool = True):
        """``pass_socket=False``: no ``--socket`` (the daemon uses its default, which must be ``socket_path``)."""
        self.workdir, self.socket, self.pass_socket = workdir, socket_path, pass_socket
        self.delay, self.max_candidates, self.tcp, self.extra = delay, max_candidates, tcp, extra
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.token: str | None = None  # the TCP token the daemon wrote beside its socket (tcp=True)
        self.log_path: Path | None = None
        self.starts = 0

    def command(self) -> list[str]:
        cmd = [*CLI, "serve", *(["--socket", str(self.socket)] if self.pass_socket else []), "--backend", "simulated",
               "--max-candidates", str(self.max_candidates)]
        return cmd + (["--tcp", "0"] if self.tcp else []) + list(self.extra)

    def start(self, timeout: float = TIMEOUT) -> "Daemon":
        self.starts += 1
        self.log_path = self.workdir / f"daemon-{self.starts}.log"
        env = {**os.environ, "PTXFACTORY_SIMULATED_DELAY_S": str(self.delay), "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
            if socket_answers(self.socket) and (not self.tcp or self.find_port()):
                if self.tcp:
                    self.token = read_token(token_path(self.socket))
                return self
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"daemon did not start within {timeout:.0f} s:\n{self.log()}")

    def find_port(self) -> int | None:
        m = re.search(r"tcp 127\.0\.0\.1:(\d+)", self.log())
        self.port = int(m.group(1)) if m else None
        return self.port

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode



def make_client() -> LanguageClient:
    """pytest-lsp's client, plus ``ptxfactory/progress`` notifications collected in ``client.ptx_progress``."""
    client = make_test_lsp_client()
    client.ptx_progress = []

    @client.feature(PROGRESS_NOTIFICATION)
    def on_progress(ls: LanguageClient, params: Any) -> None:
        ls.ptx_progress.append(params._asdict() if hasattr(params, "_asdict") else params)

    return client


async def _attach(client: LanguageClient, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """pygls's public transport hooks: ``set_writer`` and a ``run_async`` read loop of our own, in ``client.ptx_reading``
    (it ends when the connection closes; :func:`close` waits for it)."""
    client.protocol.set_writer(writer)
    client.ptx_writer = writer
    client.ptx_stop = threading.Event()
    client.ptx_reading = asyncio.create_task(run_async(
        stop_event=client.ptx_stop, reader=reader, protocol=client.protocol, error_handler=client.report_server_error,
    ))


async def initialize(client: LanguageClient, caps: str | types.ClientCapabilities, root: Path, token: str | None = None):
    capabilities = client_capabilities(caps) if isinstance(caps, str) else caps
    return await asyncio.wait_for(client.initialize_session(types.InitializeParams(
        capabilities=capabilities, root_uri=root.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
        initialization_options={"token": token} if token else None,
    )), TIMEOUT)


async def unix_client(path: Path, caps: str | types.ClientCapabilities, root: Path, token: str | None = None,
                      init: bool = True) -> LanguageClient:
    """A client on the daemon's unix socket (pytest-lsp has no unix-socket mode: set_writer + run_async)."""
    client = make_client()
    await _attach(client, *await asyncio.open_unix_connection(str(path)))
    if init:
        client.initialize_result = await initialize(client, caps, root, token)
    return client


async def tcp_client(port: int, caps: str | types.ClientCapabilities, root: Path, token: str | None = None,
                     init: bool = True) -> LanguageClient:
    client = make_client()
    await _attach(client, *await asyncio.open_connection("127.0.0.1", port))
    if init:
        client.initialize_result = await initialize(client, caps, root, token)
    return client


async def close(client: LanguageClient, polite: bool = True) -> None:
    """``shutdown`` + ``exit`` (polite), or just drop the connection; then stop the client's read loop and tasks."""
    if polite:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.shutdown_session(), 10)
    writer = getattr(client, "ptx_writer", None)
    if writer is not None and not polite:
        writer.transport.abort()
    reading = getattr(client, "ptx_reading", None)
    if reading is not None:
        client.ptx_stop.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(reading, 10)  # the daemon hangs up after exit; an aborted connection reads EOF
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.stop(), 10)
    if writer is not None:
        writer.close()


async def until(predicate, timeout: float = TIMEOUT, what: str = "condition"):
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
    values = client.progress_reports.get(token, [])
    return values if values and isinstance(values[-1], types.WorkDoneProgressEnd) else []


def reports(client: LanguageClient, token: str) -> list:
    return [v for v in client.progress_reports.get(token, []) if isinstance(v, types.WorkDoneProgressReport)]


def open_document(client: LanguageClient, path: Path, text: str | None = None, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="cuda", version=version, text=path.read_text() if text is None else text),
    ))
    return uri


async def execute(client: LanguageClient, command: str, *arguments) -> Any:
    return await asyncio.wait_for(client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=command, arguments=list(arguments))), TIMEOUT)


async def code_actions(client: LanguageClient, uri: str, line: int) -> list[types.CodeAction]:
    position = types.Position(line=line, character=4)
    return await asyncio.wait_for(client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=types.Range(start=position, end=position),
        context=types.CodeActionContext(diagnostics=[]),
    )), TIMEOUT) or []


async def hover(client: LanguageClient, uri: str, line: int, character: int = 20) -> types.Hover | None:
    return await asyncio.wait_for(client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character))), TIMEOUT)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n")) if needle in line)


def copy_example(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("rmsnorm.cu", "rmsnorm.cu.toml"):
        shutil.copy(EXAMPLE / name, folder / name)
    return folder / "rmsnorm.cu"


def stored_rows(jobs_db: Path, job_id: str) -> list[tuple[int, str, float]]:
    """(seq, candidate_key, created) of a job's stored rows, read-only (the daemon may be writing)."""
    con = sqlite3.connect(f"file:{jobs_db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute("SELECT seq, candidate_key, created FROM job_rows WHERE job_id = ? ORDER BY seq", (job_id,)).fetchall()
    finally:
        con.close()


def stored_state(jobs_db: Path, job_id: str) -> str | None:
    con = sqlite3.connect(f"file:{jobs_db}?mode=ro", uri=True, timeout=5)
    try:
        row = con.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return row[0] if row else None
    finally:
        con.close()


def run_cli(*args: str, timeout: float = TIMEOUT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
