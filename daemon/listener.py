"""The daemon's listeners: a unix socket (owner-only) and, when asked, a TCP port; one LSP session per connection.

Each accepted connection gets a fresh session from the factory (field notes §1: a pygls server
serves one client), fed by :func:`~ptxfactory.daemon.lsp.transport.run_session`. A session that
ends (``exit``, a dropped connection, garbage on the wire) is detached from the engine and its
connection closed; the listener, the engine and the other sessions carry on.

TCP binds to loopback unless told otherwise and always needs a token (loopback too: every local
user can reach a loopback port), which every TCP client must present in ``initializationOptions.token``.
The unix socket needs none: its folder (0700) and mode (0600) keep other users out.
"""
from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

from .engine import Engine
from .lsp.session import PtxServer
from .framing import HEADER_LIMIT
from .lsp.transport import StreamWriterAdapter, attach_writer, run_session
from .paths import private_dir

log = logging.getLogger(__name__)

SessionFactory = Callable[..., PtxServer]


class DaemonRunning(RuntimeError):
    """Another daemon answers on the socket."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def socket_answers(path: Path, timeout: float = 1.0) -> bool:
    """Whether something accepts connections on the unix socket ``path``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


class Listener:
    """Accepts connections for one engine; :meth:`close` stops accepting and ends every session."""

    def __init__(self, engine: Engine, factory: SessionFactory | None = None):
        if factory is None:
            from .lsp.server import build_server as factory
        self.engine, self.factory = engine, factory
        self.sessions: set[PtxServer] = set()
        self._servers: list[asyncio.AbstractServer] = []
        self._unix_path: Path | None = None

    async def start_unix(self, path: Path) -> Path:
        """Listen on ``path`` (folder 0700, socket 0600). A stale socket file is replaced; a live one raises DaemonRunning."""
        private_dir(path.parent)
        if path.exists() or path.is_symlink():
            if socket_answers(path):
                raise DaemonRunning(f"a daemon already answers on {path}")
            path.unlink()
        old = os.umask(0o177)
        try:
            server = await asyncio.start_unix_server(lambda r, w: self._serve(r, w, None), path=str(path), limit=HEADER_LIMIT)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self._servers.append(server)
        self._unix_path = path
        return path

    async def start_tcp(self, host: str, port: int, token: str | None) -> int:
        """Listen on ``host:port`` (port 0: any free one); returns the port. Every TCP client must send ``token``
        (``initializationOptions.token``); raises ValueError without one, loopback included."""
        if not token:
            raise ValueError("a TCP listener needs a token (clients send it in initializationOptions.token)")
        server = await asyncio.start_server(lambda r, w: self._serve(r, w, token), host=host, port=port, limit=HEADER_LIMIT)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: str | None) -> None:
        session = None
        try:
            session = self.factory(self.engine, required_token=token)
            adapter = StreamWriterAdapter(writer, on_overflow=lambda: session.end("client stopped reading"))
            attach_writer(session.protocol, adapter)
            session.on_end(adapter.close)
            self.sessions.add(session)
            log.info("session opened (%d now)", len(self.sessions))
            reason = await run_session(session, reader)
            log.info("session closed: %s (%d left)", reason, len(self.sessions) - 1)
        except Exception:
            log.exception("session failed")
        finally:
            if session is not None:
                session.end("connection closed")
                self.sessions.discard(session)
            with contextlib.suppress(Exception):
                writer.close()
                await asyncio.wait_for(writer.wait_closed(), 2.0)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for session in list(self.sessions):
            session.end("daemon stopping")
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5.0)
        if self._unix_path is not None:
            with contextlib.suppress(OSError):
                self._unix_path.unlink()
