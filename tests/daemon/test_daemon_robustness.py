"""Garbage on the wire and connections that drop leave the daemon serving. Simulated backend."""
from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest

from _daemon_support import close, copy_example, execute, open_document, progress_ended, reports, unix_client, until

pytestmark = pytest.mark.timeout(60)


def frame(body: bytes | str) -> bytes:
    body = body.encode() if isinstance(body, str) else body
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def read_message(reader: asyncio.StreamReader) -> dict:
    length = None
    while (line := await asyncio.wait_for(reader.readline(), 10)).strip():
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return json.loads(await reader.readexactly(length))


async def answer_to(reader: asyncio.StreamReader, msg_id) -> dict:
    while "method" in (msg := await read_message(reader)) or msg.get("id") != msg_id:
        pass
    return msg


async def test_malformed_messages_get_errors_and_the_session_carries_on(start_daemon, tmp_path: Path):
    daemon = start_daemon()
    reader, writer = await asyncio.open_unix_connection(str(daemon.socket))
    try:
        writer.write(frame("{not json"))
        assert (await read_message(reader))["error"]["code"] == -32700  # ParseError, id null
        writer.write(frame("[1, 2, 3]"))
        assert (await read_message(reader))["error"]["code"] == -32600  # InvalidRequest
        writer.write(frame(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "textDocument/hover", "params": {"bogus": 1}})))
        assert (await answer_to(reader, 1))["error"]["code"] == -32602  # InvalidParams, with its id
        writer.write(frame(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "workspace/executeCommand",
                                       "params": {"command": "ptxfactory.jobs", "arguments": [{}]}})))
        assert (await answer_to(reader, 2))["error"]["code"] == -32002  # ServerNotInitialized
        writer.write(frame(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"capabilities": {}}})))
        assert "capabilities" in (await answer_to(reader, 3))["result"]
        writer.write(frame(json.dumps({"jsonrpc": "2.0", "id": 4, "method": "workspace/executeCommand",
                                       "params": {"command": "ptxfactory.cancel", "arguments": [{"job_id": 7}]}})))
        assert (await answer_to(reader, 4))["error"]["code"] == -32602
        writer.write(frame(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "no/such/method"})))
        assert (await answer_to(reader, 5))["error"]["code"] == -32601
        writer.write(frame(json.dumps({"jsonrpc": "2.0", "id": 6, "method": "workspace/executeCommand",
                                       "params": {"command": "ptxfactory.jobs", "arguments": [{}]}})))
        assert (await answer_to(reader, 6))["result"] == {"jobs": []}
        # Framing lost: the daemon closes this connection only.
        writer.write(b"Content-Length: lots\r\n\r\n{}")
        assert await asyncio.wait_for(reader.read(), 10) == b""
    finally:
        writer.close()
    client = await unix_client(daemon.socket, "neovim", tmp_path)
    assert (await execute(client, "ptxfactory.jobs", {}))["jobs"] == []
    await close(client)
    assert daemon.running


async def test_dropped_connections_leave_the_daemon_and_the_job_running(start_daemon, tmp_path: Path):
    daemon = start_daemon(delay=0.15, max_candidates=8)
    source = copy_example(tmp_path / "src")
    # Half a message, then gone; a connection that never says anything, then gone.
    for payload in (b"Content-Length: 500\r\n\r\n{\"jsonrpc\": \"2.0\", \"id\": 1, \"meth", b""):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(daemon.socket))
        s.sendall(payload)
        s.close()
    watcher = await unix_client(daemon.socket, "visual-studio-code", tmp_path)
    starter = await unix_client(daemon.socket, "neovim", tmp_path)
    try:
        open_document(watcher, source)
        started = await execute(starter, "ptxfactory.optimise", {"uri": open_document(starter, source), "kernel": "rmsnorm"})
        await until(lambda: len(reports(starter, started["token"])) >= 2, what="the job to be midway")
        await close(starter, polite=False)  # the editor that started the job vanishes: no shutdown, no exit
        *_, end = await until(lambda: progress_ended(watcher, started["token"]), what="the job's end")
        assert "best" in end.message
        listed = await execute(watcher, "ptxfactory.jobs", {})
        assert listed["jobs"][0]["state"] == "finished"
    finally:
        await close(watcher)
        await close(starter, polite=False)
    assert daemon.running
    assert "session closed: connection" in daemon.log()
