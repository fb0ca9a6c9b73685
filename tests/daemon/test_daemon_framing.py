"""The one JSON-RPC framing (``daemon/framing.py``), shared by the daemon's sessions and the CLI's client."""
from __future__ import annotations

import asyncio
import json

import pytest

from ptxfactory.daemon import client, framing
from ptxfactory.daemon.framing import FramedWriter, FramingError, frame, read_frame


def reader_of(data: bytes, limit: int = framing.HEADER_LIMIT) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=limit)
    reader.feed_data(data)
    reader.feed_eof()
    return reader


class ListSink:
    def __init__(self):
        self.data, self.closed = [], False

    def write(self, data: bytes) -> None:
        self.data.append(data)

    def close(self) -> None:
        self.closed = True


async def test_frames_round_trip_with_other_headers_and_stray_blank_lines():
    body = json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"text": "naïve ∑"}}, ensure_ascii=False).encode()
    assert frame(body).startswith(b"Content-Length: %d\r\n\r\n" % len(body))  # bytes, not characters
    wire = (frame(b"{}") + b"\r\n"
            + b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n" + frame(body)
            + b"content-length: 2\n\n[]")  # any case, bare newlines
    reader = reader_of(wire)
    assert [await read_frame(reader) for _ in range(4)] == [b"{}", body, b"[]", None]


@pytest.mark.parametrize("wire", [b"", b"Content-Length: 5\r\n", b"Content-Len"])
async def test_the_stream_ending_between_messages_or_in_a_header_is_the_end(wire):
    assert await read_frame(reader_of(wire)) is None


@pytest.mark.parametrize("wire, why", [
    (b"Content-Length: lots\r\n\r\n{}", "bad Content-Length"),
    (b"Content-Type: text\r\n\r\n{}", "without Content-Length"),
    (b'{"jsonrpc": "2.0"}\r\n\r\n', "not a header line"),
    (b"Content-Length 2\r\n\r\n{}", "not a header line"),
    (b"Content-Length: -1\r\n\r\n", "refused"),
    (b"Content-Length: %d\r\n\r\n" % (framing.MAX_BODY + 1), "refused"),
    (b"X-Padding: " + b"a" * 200 + b"\r\n", "over the limit"),
])
async def test_lost_framing_raises(wire, why):
    with pytest.raises(FramingError, match=why):
        await read_frame(reader_of(wire, limit=128))


async def test_a_body_cut_short_raises():
    with pytest.raises(asyncio.IncompleteReadError):
        await read_frame(reader_of(b"Content-Length: 10\r\n\r\n{}"))


async def test_a_smaller_limit_refuses_a_larger_body():
    with pytest.raises(FramingError):
        await read_frame(reader_of(frame(b"[1, 2, 3]")), max_body=4)


def test_the_framed_writer_frames_what_pygls_writes_and_closes_its_sink():
    sink = ListSink()
    writer = FramedWriter(sink)
    writer.write(b'{"id": 1}')
    writer.close()
    assert sink.data == [b'Content-Length: 9\r\n\r\n{"id": 1}'] and sink.closed


async def test_the_cli_client_reads_and_writes_the_same_framing():
    """The CLI's DaemonClient over a pipe pair: what it sends parses with read_frame; what it reads is frame()'d."""
    server_side: asyncio.Queue[bytes] = asyncio.Queue()

    class Transport(asyncio.Transport):
        def write(self, data):
            server_side.put_nowait(data)

        def is_closing(self):
            return False

        def close(self):
            pass

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=framing.HEADER_LIMIT)
    protocol = asyncio.StreamReaderProtocol(reader)
    writer = asyncio.StreamWriter(Transport(), protocol, reader, loop)
    daemon_client = client.DaemonClient(reader, writer)
    try:
        pending = asyncio.ensure_future(daemon_client.request("ptxfactory/ping", {"x": "é"}))
        sent = await read_frame(reader_of(await asyncio.wait_for(server_side.get(), 5)))
        request = json.loads(sent)
        assert request["method"] == "ptxfactory/ping" and request["params"] == {"x": "é"}
        reader.feed_data(frame(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": "pong ∑"}).encode()))
        assert await asyncio.wait_for(pending, 5) == "pong ∑"
        reader.feed_data(b"Content-Length: lots\r\n\r\n")  # lost framing: the client reports the disconnection
        assert await asyncio.wait_for(daemon_client.notifications.get(), 5) == ("$/disconnected", None)
    finally:
        await daemon_client.close(polite=False)
