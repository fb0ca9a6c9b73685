"""Moving LSP messages between one session and its byte stream (a socket, or stdin/stdout).

The framing is :mod:`ptxfactory.daemon.framing`'s, shared with the CLI's client. pygls's own read
loop (``pygls.io_.run_async``) logs and drops a message it cannot parse and has no limit on a
message's size, so the daemon does not use it: :func:`read_messages` reads frames and hands each
message to the protocol's public ``structure_message`` and ``handle_message``, answering what it can,
as JSON-RPC requires (``ParseError`` for bad JSON, ``InvalidRequest`` for a non-request,
``InvalidParams`` for params of the wrong shape, each with the request's id when there is one), and
keeps serving; it closes the connection only when the framing itself is lost (a bad
``Content-Length``, a message over 64 MiB, a header line over 64 KiB) or the client stops reading
(more than 32 MiB waiting to be sent). pygls writes through :func:`attach_writer`'s framed writer.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, BinaryIO

from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidRequest, JsonRpcParseError
from pygls.protocol import JsonRPCProtocol

from ..framing import HEADER_LIMIT, MAX_BODY, FramedWriter, Sink, read_frame

if TYPE_CHECKING:
    from .session import PtxServer

log = logging.getLogger(__name__)

MAX_BUFFERED = 32 << 20


class StreamWriterAdapter:
    """A :class:`~ptxfactory.daemon.framing.Sink` over an asyncio ``StreamWriter``; gives up on a client that does not read."""

    def __init__(self, writer: asyncio.StreamWriter, on_overflow):
        self.writer, self.on_overflow = writer, on_overflow

    def write(self, data: bytes) -> None:
        """Queue ``data`` on the socket, or end the session when the client has left too much unread."""
        if self.writer.is_closing():
            return
        if self.writer.transport.get_write_buffer_size() > MAX_BUFFERED:
            log.warning("the client has not read %d bytes: closing its session", self.writer.transport.get_write_buffer_size())
            self.on_overflow()
            return
        self.writer.write(data)

    def close(self) -> None:
        """Close the socket (once)."""
        if not self.writer.is_closing():
            self.writer.close()


def attach_writer(protocol: JsonRPCProtocol, sink: Sink) -> None:
    """Have ``protocol`` write to ``sink`` through the one framing implementation (pygls's ``set_writer`` hook,
    without its own headers)."""
    protocol.set_writer(FramedWriter(sink), include_headers=False)


def reply_error(protocol: JsonRPCProtocol, msg_id: Any, exc: JsonRpcException) -> None:
    """Answer request ``msg_id`` (None: a message whose id is unknown) with ``exc`` as a JSON-RPC error object.

    pygls has no public way to send a response; the protocol's writer (set by :func:`attach_writer`) is
    its public transport hook, so the error is written there, framed like everything pygls sends."""
    error: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.data is not None:
        error["data"] = exc.data
    writer = protocol.writer
    if writer is None:
        return
    try:
        writer.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": error}, default=str).encode())
    except Exception:
        log.debug("cannot answer a malformed message", exc_info=True)


def stdin_reader(stream: BinaryIO, limit: int = HEADER_LIMIT) -> asyncio.StreamReader:
    """An asyncio ``StreamReader`` fed from ``stream`` by a daemon thread (so a blocked read never holds up exit)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    try:  # the raw descriptor: a daemon thread blocked in a buffered read would abort interpreter shutdown
        fd = stream.fileno()
        read = lambda n: os.read(fd, n)  # noqa: E731
    except (AttributeError, OSError, ValueError):
        read = getattr(stream, "read1", stream.read)

    def pump() -> None:
        while True:
            try:
                data = read(65536)
            except (OSError, ValueError):
                data = b""
            try:
                loop.call_soon_threadsafe(reader.feed_data if data else reader.feed_eof, *((data,) if data else ()))
            except RuntimeError:  # the loop has closed
                return
            if not data:
                return

    threading.Thread(target=pump, name="ptxfactory-stdin", daemon=True).start()
    return reader


async def read_messages(session: "PtxServer", reader: asyncio.StreamReader) -> None:
    """Feed every message on ``reader`` to the session until EOF or the session ends. Raises
    :class:`~ptxfactory.daemon.framing.FramingError` when the framing is lost."""
    while not session.ended.is_set():
        body = await read_frame(reader, MAX_BODY)
        if body is None:
            return
        dispatch(session, body)


def dispatch(session: "PtxServer", body: bytes) -> None:
    """Hand one message to the session's protocol, answering malformed requests with a JSON-RPC error."""
    protocol = session.protocol
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        log.warning("unparsable message (%s): %r", exc, body[:200])
        reply_error(protocol, None, JsonRpcParseError(f"not JSON: {exc}"))
        return
    if not isinstance(raw, dict) or raw.get("jsonrpc") != "2.0":
        reply_error(protocol, raw.get("id") if isinstance(raw, dict) else None,
                    JsonRpcInvalidRequest("not a JSON-RPC 2.0 message object"))
        return
    if "method" in raw:
        raw.setdefault("params", None)  # JSON-RPC lets a request or notification omit params
    try:
        message = protocol.structure_message(raw)
    except JsonRpcException as exc:
        if "method" in raw and "id" in raw:
            reply_error(protocol, raw["id"], exc)
        return
    except Exception as exc:
        if "method" in raw and "id" in raw:
            reply_error(protocol, raw["id"], JsonRpcInternalError(str(exc)))
        return
    try:
        protocol.handle_message(message)
    except Exception:
        log.exception("handling %s failed", raw.get("method", "a response"))


async def run_session(session: "PtxServer", reader: asyncio.StreamReader) -> str:
    """Serve ``session`` until the client exits or disconnects (or the session is ended); returns why."""
    reading = asyncio.ensure_future(read_messages(session, reader))
    ended = asyncio.ensure_future(session.ended.wait())
    try:
        await asyncio.wait({reading, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (reading, ended):
            task.cancel()
        await asyncio.gather(reading, ended, return_exceptions=True)
    if session.ended.is_set():
        reason = session.end_reason or "ended"
    elif reading.cancelled() or reading.exception() is None:
        reason = "connection closed"
    else:
        exc = reading.exception()
        reason = f"connection lost: {type(exc).__name__}: {exc}"
    session.end(reason)
    return reason
