"""``ptxfactory serve``: the long-running daemon on uvloop.

One engine (backend, lesson store, job store, job queue), a unix-socket listener (owner-only) and,
when asked, a TCP listener, which serves only clients that send the daemon's token (loopback
included): ``--token-file``, ``$PTXFACTORY_TOKEN`` or a new random one, written 0600 to
``<socket>.token`` for this user's clients and removed when the daemon stops. It holds ``<socket>.lock`` so that one daemon serves a socket, and the
job store's lock so that one engine runs its jobs. SIGTERM/SIGINT stop it cleanly; a job that was
running stays ``running`` in the store and resumes on the next start (so does one after ``kill -9``).
"""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from pathlib import Path

from .paths import choose_token, lock_file, lock_holder, private_dir, token_path, write_private

log = logging.getLogger(__name__)


class AlreadyRunning(RuntimeError):
    """Another daemon holds the socket's lock."""


async def run_daemon(
    socket_path: Path, *, tcp_port: int | None = None, host: str = "127.0.0.1", token: str | None = None,
    token_file: Path | None = None, backend_name: str = "auto", store_path: str | Path | None = None, jobs_path: str | Path | None = None,
    max_candidates: int = 64, stop: asyncio.Event | None = None, exit_grace_s: float | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT). With ``tcp_port``, TCP clients must present the token
    (:func:`~ptxfactory.daemon.paths.choose_token`: ``token_file``, ``token``, ``$PTXFACTORY_TOKEN`` or a new one),
    which is written to ``<socket>.token`` (0600) while the daemon runs. ``exit_grace_s``: once stopping, the
    process ends that many seconds later at the latest (``serve_daemon``: 10 s). Raises AlreadyRunning, StoreBusy,
    TokenError, UnsafePath, OSError."""
    from .engine import Engine
    from .listener import Listener
    from .lsp.server import warm_up

    tcp_token = token_source = None
    if tcp_port is not None:
        tcp_token, token_source = choose_token(token_file, token)
    private_dir(socket_path.parent)
    lock_path = socket_path.with_name(socket_path.name + ".lock")
    lock_fd = lock_file(lock_path)
    if lock_fd is None:
        raise AlreadyRunning(f"a ptxfactory daemon (pid {lock_holder(lock_path)}) already serves {socket_path}")
    engine = listener = token_written = None
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    try:
        engine = await Engine.open(backend_name, store_path, jobs_path, max_candidates=max_candidates)
        await engine.start(resume=True)
        warm_up()
        gc.freeze()  # what startup loaded (libraries, converters) leaves the collector's scans: shorter pauses
        listener = Listener(engine)
        await listener.start_unix(socket_path)
        where = [f"unix {socket_path}"]
        if tcp_port is not None:
            token_written = write_private(token_path(socket_path), tcp_token + "\n")
            port = await listener.start_tcp(host, tcp_port, tcp_token)
            where.append(f"tcp {host}:{port} (token required: {token_source}, in {token_written})")
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        backend = type(engine.backend).__name__ if engine.backend else "none (compile only)"
        log.info("ptxfactory daemon pid %d listening on %s; backend %s; jobs %s; lessons %s",
                    os.getpid(), ", ".join(where), backend, engine.jobs.path, engine.lessons.path)
        await stop.wait()
        log.info("ptxfactory daemon pid %d stopping", os.getpid())
        if exit_grace_s is not None:  # the process ends by then, whatever thread or executor still holds it
            from .lsp.server import _exit_soon

            _exit_soon(exit_grace_s)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if listener is not None:
            await listener.close()
        if engine is not None:
            await engine.close()
        if token_written is not None:
            token_written.unlink(missing_ok=True)
        os.close(lock_fd)


def serve_daemon(socket_path: Path, **kwargs) -> None:
    """Run the daemon until SIGTERM/SIGINT, on uvloop. Raises AlreadyRunning, StoreBusy, TokenError, ValueError, UnsafePath."""
    import uvloop

    from .lsp.server import configure_logging

    configure_logging()
    kwargs.setdefault("exit_grace_s", 10.0)
    uvloop.run(run_daemon(socket_path, **kwargs))


def log_path(socket_path: Path) -> Path:
    """Where ``ptxfactory lsp`` sends a daemon's output when it starts one."""
    return private_dir(socket_path.parent) / "daemon.log"
