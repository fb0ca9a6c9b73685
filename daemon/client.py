"""A minimal LSP client for the command line (``ptxfactory jobs/watch/cancel/report/submit``): JSON-RPC over the daemon's socket.

It declares no client capabilities, so the daemon reports progress to it as ``ptxfactory/progress``
notifications (queued on :attr:`DaemonClient.notifications`). Messages are framed by :mod:`.framing`, as the
daemon frames them. No pygls: the CLI starts fast.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from pathlib import Path
from typing import Any

from .framing import HEADER_LIMIT, frame, read_frame


class DaemonError(RuntimeError):
    """The daemon answered a request with an error."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class NoDaemon(ConnectionError):
    """Nothing answers on the socket (or the TCP port)."""


class DaemonClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader, self._writer = reader, writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self.notifications: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._task = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, socket_path: Path | None = None, *, host: str | None = None, port: int | None = None,
                      token: str | None = None, timeout: float = 10.0, capabilities: dict | None = None) -> "DaemonClient":
        """Connect to the daemon's unix socket, or to ``host:port`` over TCP, and ``initialize``.

        Over TCP without ``token`` the token is read from ``$PTXFACTORY_TOKEN`` or ``<socket_path>.token``
        (default socket), as the daemon wrote it. Raises NoDaemon (nothing answers within ``timeout`` s),
        DaemonError (refused, e.g. a wrong token), ConnectionError.
        """
        try:
            if port is not None:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host or "127.0.0.1", port, limit=HEADER_LIMIT), timeout)
            else:
                reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(socket_path), limit=HEADER_LIMIT), timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            where = f"{host or '127.0.0.1'}:{port}" if port is not None else str(socket_path)
            raise NoDaemon(f"no ptxfactory daemon answers on {where} ({exc}); start one with `ptxfactory serve`") from None
        if port is not None and token is None:  # TCP needs the daemon's token: this user's copy beside the socket
            from .paths import client_token

            token = client_token(socket_path)
        client = cls(reader, writer)
        try:
            await asyncio.wait_for(client.request("initialize", {
                "processId": os.getpid(), "rootUri": None, "capabilities": capabilities or {},
                "clientInfo": {"name": "ptxfactory-cli"}, "initializationOptions": {"token": token} if token else {},
            }), timeout)
        except BaseException:
            await client.close(polite=False)
            raise
        client.notify("initialized", {})
        return client

    def _send(self, message: dict) -> None:
        self._writer.write(frame(json.dumps(message).encode()))

    async def request(self, method: str, params: Any = None) -> Any:
        msg_id = next(self._ids)
        fut = self._pending[msg_id] = asyncio.get_running_loop().create_future()
        self._send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return await fut

    def notify(self, method: str, params: Any = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def command(self, name: str, args: dict | None = None) -> Any:
        return await self.request("workspace/executeCommand", {"command": name, "arguments": [args or {}]})

    async def _read(self) -> None:
        try:
            while True:
                body = await read_frame(self._reader)
                if body is None:
                    raise ConnectionError("the daemon closed the connection")
                msg = json.loads(body)
                if "method" in msg and "id" in msg:  # a request from the daemon: we declared no capability for any
                    self._send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "not supported"}})
                elif "method" in msg:
                    self.notifications.put_nowait((msg["method"], msg.get("params")))
                else:
                    fut = self._pending.pop(msg.get("id"), None)
                    if fut is not None and not fut.done():
                        if "error" in msg:
                            err = msg["error"] or {}
                            fut.set_exception(DaemonError(err.get("code", 0), err.get("message", "error")))
                        else:
                            fut.set_result(msg.get("result"))
        except (ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(str(exc)))
            self._pending.clear()
            self.notifications.put_nowait(("$/disconnected", None))

    async def close(self, polite: bool = True) -> None:
        if polite and not self._writer.is_closing():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.request("shutdown"), 5.0)
                self.notify("exit")
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task
        self._writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.wait_closed(), 2.0)
