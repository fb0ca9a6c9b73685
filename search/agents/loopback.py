"""A scripted language-model server on loopback, speaking OpenAI chat completions (``POST /v1/chat/completions``)
and Anthropic messages (``POST /v1/messages``), for tests and demos. A thread, not a process.

Each :class:`Rule` matches requests whose last user message contains ``match`` (and, optionally, whose
system prompt or role text contains ``also``); its :class:`Step` s are served in order, the last one
repeating. A step answers a text with token counts, or an HTTP error status, after an optional delay::

    with ScriptedServer([Rule("Propose", [Step("IDEA: use a warp per row")])]) as server:
        base_url = server.openai_url   # or server.anthropic_url
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Step:
    """One scripted answer: ``text`` (with its token counts), or an error ``status``; after ``delay_s`` seconds."""

    text: str = ""
    status: int = 200
    delay_s: float = 0.0
    input_tokens: int = 100
    output_tokens: int = 50


@dataclass
class Rule:
    """Requests whose user message contains ``match`` (every one of them, for a tuple) get ``steps`` in order
    (the last repeats)."""

    match: str | tuple[str, ...]
    steps: list[Step]
    served: int = field(default=0, compare=False)

    def next_step(self) -> Step:
        step = self.steps[min(self.served, len(self.steps) - 1)]
        self.served += 1
        return step


class ScriptedServer:
    """The server: start with ``with`` (or :meth:`start`), stop with :meth:`close`; ``requests`` records
    (path, user message) of every request, ``headers`` every request's header names, ``credentials`` the SHA-256
    of each credential header's value (never the value: :meth:`saw_credential` checks one)."""

    def __init__(self, rules: list[Rule], fallback: Step | None = None):
        self.rules = rules
        self.fallback = fallback or Step("I have no answer for that.")
        self.requests: list[tuple[str, str]] = []
        self.headers: list[list[str]] = []
        self.credentials: set[str] = set()  # sha256 of each credential header value seen (never the value)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def saw_credential(self, value: str) -> bool:
        """Whether a request carried ``value`` as ``Authorization: Bearer ...`` or ``x-api-key``."""
        return any(hashlib.sha256(v.encode()).hexdigest() in self.credentials for v in (value, f"Bearer {value}"))

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "ScriptedServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet: tests read server.requests instead
                return

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                server._answer(self, body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-llm", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, wake any delayed answer, close the socket and join the thread."""
        self._closing.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _step(self, path: str, user: str) -> Step:
        with self._lock:
            self.requests.append((path, user))
            for rule in self.rules:
                wanted = (rule.match,) if isinstance(rule.match, str) else rule.match
                if all(w in user for w in wanted):
                    return rule.next_step()
        return self.fallback

    def _answer(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        path = handler.path
        anthropic = path.rstrip("/").endswith("/messages")
        with self._lock:
            self.headers.append(sorted(k.lower() for k in handler.headers.keys()))
            for name in ("authorization", "x-api-key"):
                if handler.headers.get(name):
                    self.credentials.add(hashlib.sha256(handler.headers[name].encode()).hexdigest())
        messages = body.get("messages") or []
        user = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "") or ""
        if isinstance(user, list):
            user = "".join(part.get("text", "") for part in user if isinstance(part, dict))
        step = self._step(path, user)
        if step.delay_s and self._closing.wait(step.delay_s):
            return
        model = body.get("model", "scripted")
        if step.status != 200:
            payload = {"error": {"message": f"scripted status {step.status}", "type": "scripted_error"}}
            if anthropic:
                payload = {"type": "error", "error": {"type": "api_error", "message": f"scripted status {step.status}"}}
            self._send(handler, step.status, payload, {"retry-after-ms": "10"})
            return
        if anthropic:
            payload = {"id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
                       "content": [{"type": "text", "text": step.text}], "stop_reason": "end_turn", "stop_sequence": None,
                       "usage": {"input_tokens": step.input_tokens, "output_tokens": step.output_tokens}}
        else:
            payload = {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": model,
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": step.text}}],
                       "usage": {"prompt_tokens": step.input_tokens, "completion_tokens": step.output_tokens,
                                 "total_tokens": step.input_tokens + step.output_tokens}}
        self._send(handler, 200, payload)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: dict, extra: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            handler.send_response(status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            for k, v in (extra or {}).items():
                handler.send_header(k, v)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): nothing to answer
