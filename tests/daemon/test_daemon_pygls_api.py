"""The daemon uses pygls through its public API only (ARCHITECTURE.md, "Where the daemon extends pygls").

A scan of ``daemon/`` fails on any access to a private pygls attribute, and the session's public
extension points are exercised in-process: the gate before ``initialize``, ``$/cancelRequest``
hooks, handlers cancelled at the session's end, ``exit`` ending that session only.
"""
from __future__ import annotations

import ast
import asyncio
import inspect
import json
import re
from pathlib import Path

import pygls
import pytest
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCProtocol, LanguageServerProtocol

from ptxfactory.daemon.lsp import session as session_module
from ptxfactory.daemon.lsp.server import build_server
from ptxfactory.daemon.lsp.session import PtxServer, SessionProtocol
from ptxfactory.daemon.lsp.transport import attach_writer, dispatch, read_messages

DAEMON = Path(session_module.__file__).resolve().parents[1]
PYGLS = Path(pygls.__file__).resolve().parent
ALLOWED = {"_asdict", "_exit"}
"""Underscore names that are public APIs elsewhere (namedtuple's ``_asdict``, ``os._exit``)."""


def pygls_private_names() -> set[str]:
    """Every single-underscore name pygls defines or uses as an attribute (2.1.x: _send_response, _stop_event, ...)."""
    names: set[str] = set()
    for path in PYGLS.rglob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r"\.(_[A-Za-z]\w*)", text)) | set(re.findall(r"def (_[A-Za-z]\w*)", text))
    return {n for n in names if not n.startswith("__")}


def imported_from_pygls(tree: ast.AST) -> set[str]:
    return {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == "pygls" for alias in node.names} | {"pygls"}


def base_names(cls: ast.ClassDef) -> set[str]:
    """The names a class's bases start from (``LanguageServer``, ``pygls`` of ``pygls.server.JsonRPCServer``)."""
    names = set()
    for base in cls.bases:
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name):
            names.add(base.id)
    return names


def pygls_subclasses(trees: list[ast.AST]) -> set[str]:
    """The names of the classes in ``trees`` derived, directly or through one another, from pygls's classes."""
    roots = set().union(*(imported_from_pygls(t) for t in trees))
    classes = [c for t in trees for c in ast.walk(t) if isinstance(c, ast.ClassDef)]
    derived: set[str] = set()
    while True:
        more = {c.name for c in classes if base_names(c) & (roots | derived)} - derived
        if not more:
            return derived
        derived |= more


def private_pygls_accesses(tree: ast.AST, private: set[str], derived: set[str], filename: str = "<src>") -> list[str]:
    """Where ``tree`` reaches into pygls: a pygls private name on any object, or any ``self._x``, ``super()._x``
    or ``def _x`` inside a class derived from pygls's (``derived``: our names there must never shadow pygls's)."""
    found = []
    inside = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name in derived for n in ast.walk(c)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            where = f"{filename}:{node.lineno}: .{node.attr}"
            if node.attr in private and node.attr not in ALLOWED:
                found.append(where)
            elif id(node) in inside and (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                                         or isinstance(node.value, ast.Call)):
                found.append(where)
        elif id(node) in inside and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.name.startswith("_") and not node.name.startswith("__"):
            found.append(f"{filename}:{node.lineno}: def {node.name}")
    return found


def test_the_scan_finds_what_the_daemon_used_to_do():
    private = pygls_private_names()
    assert {"_send_response", "_stop_event", "_thread_pool", "_request_futures", "_serialize_message",
            "_handle_cancel_notification", "_server"} <= private
    old = '''
from pygls.protocol import LanguageServerProtocol
from pygls.lsp.server import LanguageServer

class P(LanguageServerProtocol):
    def _handle_cancel_notification(self, msg_id):
        super()._handle_cancel_notification(msg_id)
        self._server.end()

class S(LanguageServer):
    pass

class T(S):
    def end(self):
        self._stop_event.set()
        self._own_helper()
        for fut in self.protocol._request_futures.values():
            fut.cancel()

def warm(protocol, response):
    return json.dumps(response, default=protocol._serialize_message), namedtuple_row._asdict()
'''
    tree = ast.parse(old)
    assert pygls_subclasses([tree]) == {"P", "S", "T"}
    found = private_pygls_accesses(tree, private, {"P", "S", "T"})
    # def _handle..., super()._handle..., ._server, ._stop_event, ._own_helper (T derives from pygls through S),
    # ._request_futures, ._serialize_message; not namedtuple's _asdict
    assert len(found) == 7, found
    assert not any("_asdict" in f for f in found)


def test_the_daemon_reaches_no_private_pygls_attribute():
    private = pygls_private_names()
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(DAEMON.rglob("*.py"))}
    derived = pygls_subclasses(list(trees.values()))
    assert {"PtxServer", "SessionProtocol"} <= derived
    found = [hit for path, tree in trees.items()
             for hit in private_pygls_accesses(tree, private, derived, str(path.relative_to(DAEMON)))]
    assert found == []


@pytest.mark.parametrize("ours, base", [(SessionProtocol, LanguageServerProtocol), (PtxServer, LanguageServer)])
def test_every_override_is_of_a_public_pygls_member(ours, base):
    """What the session overrides exists, public, in pygls (a rename in pygls fails here, not silently)."""
    overrides = [name for name in vars(ours) if hasattr(base, name) and not name.startswith("__")]
    assert overrides, "nothing overridden?"
    assert all(not name.startswith("_") for name in overrides), overrides
    assert set(overrides) == {"SessionProtocol": {"lsp_initialize", "lsp_exit", "handle_message"},
                              "PtxServer": {"feature", "command", "thread_pool"}}[ours.__name__]


def test_the_transport_hooks_are_public():
    assert "include_headers" in inspect.signature(JsonRPCProtocol.set_writer).parameters
    for name in ("structure_message", "handle_message", "msg_id"):
        assert not name.startswith("_") and hasattr(JsonRPCProtocol, name)


class StubEngine:
    """The engine's subscription API; nothing else is reached by these messages."""

    def __init__(self):
        self.subscribers = []

    def subscribe(self, fn):
        self.subscribers.append(fn)

    def unsubscribe(self, fn):
        if fn in self.subscribers:
            self.subscribers.remove(fn)


class Sink:
    def __init__(self):
        self.data, self.closed = bytearray(), False

    def write(self, data: bytes) -> None:
        self.data += data

    def close(self) -> None:
        self.closed = True

    def messages(self) -> list[dict]:
        out, rest = [], bytes(self.data)
        while rest:
            head, _, rest = rest.partition(b"\r\n\r\n")
            length = int(head.split(b":")[1])
            out.append(json.loads(rest[:length]))
            rest = rest[length:]
        return out

    def answer(self, msg_id) -> dict:
        return next(m for m in self.messages() if m.get("id") == msg_id and "method" not in m)


def send(session: PtxServer, **message) -> None:
    dispatch(session, json.dumps({"jsonrpc": "2.0", **message}).encode())


async def settle(predicate, what: str) -> None:
    for _ in range(250):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_session_on_public_extension_points():
    engine = StubEngine()
    session = build_server(engine)
    sink = Sink()
    attach_writer(session.protocol, sink)
    session.on_end(sink.close)
    started, stopped, hooked = asyncio.Event(), [], []

    async def wait_forever(ls: PtxServer, *args) -> dict:
        ls.cancel_hooks[ls.protocol.msg_id] = lambda: hooked.append(True)
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.append(True)
        return {}

    session.command("test.wait")(wait_forever)
    execute = {"command": "test.wait", "arguments": [{}]}

    send(session, id=1, method="workspace/executeCommand", params=execute)
    assert sink.answer(1)["error"]["code"] == -32002  # nothing before initialize
    assert not started.is_set()
    send(session, id=2, method="initialize", params={"capabilities": {}})
    await settle(lambda: any(m.get("id") == 2 for m in sink.messages()), "the initialize answer")
    assert "capabilities" in sink.answer(2)["result"]

    send(session, id=3, method="workspace/executeCommand", params=execute)
    await asyncio.wait_for(started.wait(), 5)
    assert len(session.handler_tasks) == 1
    send(session, method="$/cancelRequest", params={"id": 3})
    assert hooked == [True]  # the handler's hook ran; the handler itself still waits (it has started)
    await settle(lambda: any(m.get("id") == 3 for m in sink.messages()), "the cancelled request's answer")
    assert sink.answer(3)["error"]["code"] == -32800  # pygls answers the cancelled request
    await asyncio.sleep(0.05)
    assert not stopped

    send(session, id=4, method="workspace/executeCommand", params=execute)
    await settle(lambda: len(session.handler_tasks) == 2, "the second handler")
    reader = asyncio.StreamReader()
    reading = asyncio.ensure_future(read_messages(session, reader))
    send(session, method="exit")  # this session only: no SystemExit
    await settle(lambda: len(stopped) == 2, "the handlers to be cancelled")
    assert session.ended.is_set() and session.end_reason == "exit" and sink.closed
    assert session.handler_tasks == set() and engine.subscribers == []
    reader.feed_data(b"Content-Length: 2\r\n\r\n{}")  # the read loop stops on the session's end
    await asyncio.wait_for(reading, 5)
