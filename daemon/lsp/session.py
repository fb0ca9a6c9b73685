"""One editor session: a pygls ``LanguageServer`` per connection, over the process-wide engine.

A session holds editor state only (its open documents, the progress it shows, the jobs it
watches); jobs, stores and the backend belong to the :class:`~ptxfactory.daemon.engine.Engine`.
:class:`SessionProtocol` (pygls's ``protocol_cls`` hook) changes four things of pygls's protocol,
through its public methods only (``lsp_initialize``, ``lsp_exit``, ``handle_message``):

- ``initialize`` also advertises what pygls 2.1's capability builder leaves out: ``workspace.textDocumentContent``
  (LSP 3.18), with the options its handler was registered with (``feature(WORKSPACE_TEXT_DOCUMENT_CONTENT, ...)``);
- ``exit`` ends this session only (pygls's calls ``sys.exit()``, which would end every session);
- nothing but ``initialize``/``exit`` is served before a successful ``initialize``
  (``ServerNotInitialized``), and a daemon that requires a token refuses an ``initialize``
  without it (``initializationOptions.token``) and closes the connection;
- ``$/cancelRequest`` also runs the hook a handler registered for its request (pygls can only
  cancel a request that has not started; ``ptxfactory.optimise`` with ``wait`` cancels its job).

:class:`PtxServer` overrides pygls's public ``feature``/``command`` (a coroutine handler runs as one
of the session's tasks, cancelled when the session ends) and ``thread_pool`` (the session's own,
shut without waiting when it ends).
"""
from __future__ import annotations

import asyncio
import functools
import hmac
import inspect
import logging
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidRequest, JsonRpcServerNotInitialized
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method

from ..jobs import JobRecord, path_key
from .progress import ProgressRelay
from .transport import reply_error

if TYPE_CHECKING:
    from ..engine import Engine

log = logging.getLogger(__name__)

try:
    __version__ = version("ptxfactory")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0"


class SessionProtocol(LanguageServerProtocol):
    """pygls's LSP protocol, for one session among many (see the module's docstring)."""

    def __init__(self, server: "PtxServer", converter):
        super().__init__(server, converter)
        self.session = server

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Generator[Any, Any, types.InitializeResult]:
        """pygls's ``initialize``; then the server's ``workspace.textDocumentContent`` capability (LSP 3.18), which
        pygls 2.1 does not build, from the options of the registered ``workspace/textDocumentContent`` feature."""
        result = yield from super().lsp_initialize(params)
        options = self.fm.feature_options.get(types.WORKSPACE_TEXT_DOCUMENT_CONTENT)
        if options is not None:
            workspace = result.capabilities.workspace or types.WorkspaceOptions()
            if workspace.text_document_content is None:
                workspace.text_document_content = options
            result.capabilities.workspace = workspace
        return result

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args) -> Any:
        """End this session: stop reading, close this connection. The daemon and other sessions carry on."""
        if (user_handler := self.fm.features.get(types.EXIT)) is not None:
            yield user_handler, args, None
        self.session.end("exit")

    def handle_message(self, message) -> None:
        """pygls's dispatch, after the session's gate (nothing before ``initialize``) and ``$/cancelRequest`` hooks."""
        method = getattr(message, "method", None)
        if method is not None and not self.session.initialized and method not in (types.INITIALIZE, types.EXIT):
            if getattr(message, "id", None) is not None:
                reply_error(self, message.id, JsonRpcServerNotInitialized(f"{method}: the session is not initialized"))
            return
        if method == types.CANCEL_REQUEST:
            self.session.run_cancel_hook(message.params.id)
        super().handle_message(message)


class PtxServer(LanguageServer):
    """One session. ``engine`` is shared; ``required_token`` is set on listeners that demand one."""

    def __init__(self, engine: "Engine", required_token: str | None = None, **kwargs):
        super().__init__("ptxfactory", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
                         protocol_cls=SessionProtocol, **kwargs)
        self.engine = engine
        self.required_token = required_token
        self.initialized = False
        self.relays: dict[str, ProgressRelay] = {}
        self.watching: set[str] = set()
        self.cancel_hooks: dict[Any, Callable[[], None]] = {}
        self.ended = asyncio.Event()
        self.end_reason: str | None = None
        self.closers: list[Callable[[], None]] = []
        self.handler_tasks: set[asyncio.Task] = set()  # see scoped()
        self.handler_threads: ThreadPoolExecutor | None = None  # see thread_pool
        engine.subscribe(self.on_job_event)

    # --- pygls's registration and thread pool, scoped to this session ---------------------------

    def feature(self, feature_name: str, options: Any | None = None) -> Callable:
        """pygls's ``feature`` decorator; a coroutine handler runs as one of this session's tasks."""
        return _registering(super().feature(feature_name, options), self.scoped)

    def command(self, command_name: str) -> Callable:
        """pygls's ``command`` decorator; a coroutine handler runs as one of this session's tasks."""
        return _registering(super().command(command_name), self.scoped)

    def scoped(self, f: Callable) -> Callable:
        """``f`` (a coroutine function) running in a task that :meth:`end` cancels; other callables unchanged.

        pygls runs each coroutine handler in a task of its own, so the task it runs in is the handler's.
        Once the session has ended, the cancelled handler answers None: there is nobody left to answer.
        """
        if not inspect.iscoroutinefunction(f):
            return f

        @functools.wraps(f)
        async def run(*args, **kwargs):
            task = asyncio.current_task()
            self.handler_tasks.add(task)
            try:
                return await f(*args, **kwargs)
            except asyncio.CancelledError:
                if not self.ended.is_set():
                    raise
                return None
            finally:
                self.handler_tasks.discard(task)

        return run

    @property
    def thread_pool(self) -> ThreadPoolExecutor:
        """Where pygls runs ``@server.thread()`` handlers: this session's own pool, shut without waiting when it ends."""
        if self.handler_threads is None:
            self.handler_threads = ThreadPoolExecutor(thread_name_prefix="ptxfactory-session")
        return self.handler_threads

    # --- capabilities -------------------------------------------------------------------------

    @property
    def supports_work_done_progress(self) -> bool:
        caps = getattr(self.protocol, "client_capabilities", None)  # set by initialize
        return bool(caps and caps.window and caps.window.work_done_progress)

    @property
    def supports_show_document(self) -> bool:
        caps = getattr(self.protocol, "client_capabilities", None)
        return bool(caps and caps.window and caps.window.show_document and caps.window.show_document.support)

    @property
    def position_encoding(self) -> str:
        """The negotiated position encoding (UTF-16 unless the client offered another)."""
        return self.workspace.position_encoding or types.PositionEncodingKind.Utf16

    # --- initialize / cancel / end ------------------------------------------------------------

    def check_initialize(self, params: types.InitializeParams) -> None:
        """Accept the session, or refuse it (wrong or missing token) and close the connection shortly after the answer."""
        if self.required_token is not None:
            raw = params.initialization_options  # InitializationOptions in protocol/lsp.py
            given = raw.get("token") if isinstance(raw, dict) else getattr(raw, "token", None)
            if not isinstance(given, str) or not hmac.compare_digest(given.encode(), self.required_token.encode()):
                log.warning("refused a session: wrong or missing initializationOptions.token")
                asyncio.get_running_loop().call_later(0.2, self.end, "refused: bad token")
                raise JsonRpcInvalidRequest("ptxfactory: this daemon requires initializationOptions.token (ptxfactory serve --token)")
        self.initialized = True

    def run_cancel_hook(self, msg_id: Any) -> None:
        """``$/cancelRequest`` of request ``msg_id``: run the hook its handler registered, if any (once)."""
        hook = self.cancel_hooks.pop(msg_id, None)
        if hook is not None:
            try:
                hook()
            except Exception:
                log.exception("cancel hook of request %s failed", msg_id)

    def on_end(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the session ends (the transport closes its connection there)."""
        self.closers.append(fn)

    def end(self, reason: str = "closed") -> None:
        """End this session only: stop following jobs, stop the read loop, close the connection. Idempotent."""
        if self.ended.is_set():
            return
        self.end_reason = reason
        self.ended.set()  # the read loop (transport.read_messages) stops on it
        self.engine.unsubscribe(self.on_job_event)
        self.relays.clear()
        self.cancel_hooks.clear()
        for task in list(self.handler_tasks):  # async handlers still waiting (never the jobs)
            task.cancel()
        for fn in self.closers:
            try:
                fn()
            except Exception:
                log.debug("closing session transport failed", exc_info=True)
        if self.handler_threads is not None:
            self.handler_threads.shutdown(wait=False)
        log.info("session ended: %s", reason)

    # --- jobs ---------------------------------------------------------------------------------

    def has_open(self, path: str) -> bool:
        if not self.initialized:
            return False
        return any(path_key(uri) == path for uri in self.workspace.text_documents)

    def follows(self, job: JobRecord) -> bool:
        return job.job_id in self.watching or self.has_open(job.path)

    def follow(self, job: JobRecord) -> ProgressRelay | None:
        """Show ``job``'s progress in this session (once per job); None for a job that has already ended."""
        relay = self.relays.get(job.job_id)
        if relay is None and not job.final and not self.ended.is_set():
            relay = self.relays[job.job_id] = ProgressRelay(self, job)
        return relay

    def on_job_event(self, job: JobRecord, event: str) -> None:
        """Engine subscriber: relay the job's progress when this session has its document open or watches it."""
        if self.ended.is_set() or not self.initialized:
            return
        relay = self.relays.get(job.job_id)
        if event == "ended":
            if relay is not None:
                relay.end()
                del self.relays[job.job_id]
                if job.state == "failed" and job.error:
                    self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=_clip(job.error)))
            self.watching.discard(job.job_id)
            return
        if relay is None and self.follows(job):
            relay = self.follow(job)
        if relay is not None:
            relay.update()

    def job_by_token(self, token: str | int) -> str | None:
        return next((job_id for job_id, r in self.relays.items() if r.token == token), None)


def _registering(register: Callable, wrap: Callable) -> Callable:
    """A decorator that registers ``wrap(f)`` with pygls's ``register`` and returns ``f`` itself."""
    def decorator(f: Callable) -> Callable:
        register(wrap(f))
        return f

    return decorator


def _clip(message: str, limit: int = 4000) -> str:
    return message if len(message) <= limit else message[:limit] + "\n…"
