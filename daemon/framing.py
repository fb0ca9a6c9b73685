"""LSP's base protocol: JSON-RPC messages framed by a ``Content-Length`` header, the one implementation.

Both ends use it: the daemon's sessions read with :func:`read_frame` (``lsp/transport.py``) and
write through :class:`FramedWriter` (pygls hands it bare JSON bodies), and the CLI's client
(``client.py``) reads with :func:`read_frame` and writes :func:`frame`. No pygls here: the CLI
imports this and must start fast.
"""
from __future__ import annotations

import asyncio
import re
from typing import Protocol

MAX_BODY = 64 << 20
"""The largest message body read; a longer ``Content-Length`` loses the framing."""
HEADER_LIMIT = 64 << 10
"""The longest header line: the ``limit`` of the ``asyncio.StreamReader`` that :func:`read_frame` reads."""

_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""A header's name (RFC 9110's token)."""


class FramingError(ConnectionError):
    """The byte stream no longer splits into messages: the connection must close."""


class Sink(Protocol):
    """Where framed bytes go: pygls's writer interface (``write``, ``close``)."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


def frame(body: bytes) -> bytes:
    """One message on the wire: its ``Content-Length`` header (bytes, not characters), a blank line, the body."""
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def read_frame(reader: asyncio.StreamReader, max_body: int = MAX_BODY) -> bytes | None:
    """The next message body on ``reader``; None at end of stream (also in the middle of a header).

    Headers other than ``Content-Length`` are skipped, as are blank lines between messages. Raises
    FramingError for a line that is no header, a bad or missing ``Content-Length``, a body over
    ``max_body`` bytes or a header line over the reader's limit, and ``asyncio.IncompleteReadError``
    when the stream ends inside a body.
    """
    length: int | None = None
    headers = 0
    while True:
        try:
            line = await reader.readline()
        except ValueError:  # asyncio's readline: the line is longer than the reader's limit
            raise FramingError("header line over the limit") from None
        if not line.endswith(b"\n"):
            return None  # end of stream, between messages or inside a header
        header = line.strip()
        if not header:
            if not headers:
                continue  # a stray blank line between messages
            if length is None:
                raise FramingError("a message without Content-Length")
            break
        name, sep, value = header.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            raise FramingError(f"not a header line: {header[:80]!r}")
        headers += 1
        if name.lower() == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise FramingError(f"bad Content-Length header: {header[:80]!r}") from None
    if length < 0 or length > max_body:
        raise FramingError(f"message of {length} bytes refused (limit {max_body})")
    return await reader.readexactly(length)


class FramedWriter:
    """pygls's writer interface: frames each body pygls writes (``set_writer(..., include_headers=False)``)
    and hands it to ``sink``; the JSON-RPC errors the transport answers itself go the same way."""

    def __init__(self, sink: Sink):
        self.sink = sink

    def write(self, data: bytes) -> None:
        """Send one message body."""
        self.sink.write(frame(data))

    def close(self) -> None:
        """Close the sink."""
        self.sink.close()
