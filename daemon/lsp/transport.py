"""Moving LSP messages between one session and its byte stream (a socket, or stdin/stdout).

pygls's read loop (``pygls.io_.run_async``) logs and drops a message it cannot parse and has no
limit on a message's size. This one answers what it can, as JSON-RPC requires (``ParseError``
for bad JSON, ``InvalidRequest`` for a non-request, ``InvalidParams`` for params of the wrong
shape, each with the request's id when there is one) and keeps serving; it closes the connection
only when the framing itself is lost (a bad ``Content-Length``, a message over 64 MiB, a header
line over 64 KiB) or the client stops reading (more than 32 MiB waiting to be sent).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from typing import TYPE_CHECKING, BinaryIO

from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidRequest, JsonRpcParseError

if TYPE_CHECKING:
    from .session import PtxServer

log = logging.getLogger(__name__)

MAX_BODY = 64 << 20
MAX_BUFFERED = 32 << 20
HEADER_LIMIT = 64 << 10


class FramingError(ConnectionError):
    """The byte stream no longer splits into messages: the connection must close."""


class StreamWriterAdapter:
    """pygls's writer interface over an asyncio ``StreamWriter``; gives up on a client that does not read."""

    def __init__(self, writer: asyncio.StreamWriter, on_overflow):
        self._writer, self._on_overflow = writer, on_overflow

    def write(self, data: bytes) -> None:
        if self._writer.is_closing():
            return
        if self._writer.transport.get_write_buffer_size() > MAX_BUFFERED:
            log.warning("the client has not read %d bytes: closing its session", self._writer.transport.get_write_buffer_size())
            self._on_overflow()
            return
        self._writer.write(data)

    def close(self) -> None:
        if not self._writer.is_closing():
            self._writer.close()


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
    """Feed every message on ``reader`` to the session until EOF or the session ends. Raises FramingError."""
    while not session.ended.is_set():
        length: int | None = None
        while True:
            line = await reader.readline()
            if not line:
                return
            if not line.endswith(b"\n"):
                return  # EOF in the middle of a header
            header = line.strip()
            if not header:
                if length is None:
                    continue  # stray blank line between messages
                break
            name, _, value = header.partition(b":")
            if name.strip().lower() == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise FramingError(f"bad Content-Length header: {header[:80]!r}") from None
        if length < 0 or length > MAX_BODY:
            raise FramingError(f"message of {length} bytes refused (limit {MAX_BODY})")
        body = await reader.readexactly(length)
        dispatch(session, body)


def dispatch(session: "PtxServer", body: bytes) -> None:
    """Hand one message to the session's protocol, answering malformed requests with a JSON-RPC error."""
    protocol = session.protocol
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        log.warning("unparsable message (%s): %r", exc, body[:200])
        _reply_error(session, None, JsonRpcParseError(f"not JSON: {exc}"))
        return
    if not isinstance(raw, dict) or raw.get("jsonrpc") != "2.0":
        _reply_error(session, raw.get("id") if isinstance(raw, dict) else None,
                     JsonRpcInvalidRequest("not a JSON-RPC 2.0 message object"))
        return
    if "method" in raw:
        raw.setdefault("params", None)  # JSON-RPC lets a request or notification omit params
    try:
        message = protocol.structure_message(raw)
    except JsonRpcException as exc:
        if "method" in raw and "id" in raw:
            _reply_error(session, raw["id"], exc)
        return
    except Exception as exc:
        if "method" in raw and "id" in raw:
            _reply_error(session, raw["id"], JsonRpcInternalError(str(exc)))
        return
    try:
        protocol.handle_message(message)
    except Exception:
        log.exception("handling %s failed", raw.get("method", "a response"))


def _reply_error(session: "PtxServer", msg_id, exc: JsonRpcException) -> None:
    try:
        session.protocol._send_response(msg_id, None, exc.to_response_error())
    except Exception:
        log.debug("cannot answer a malformed message", exc_info=True)


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
