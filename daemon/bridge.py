"""``ptxfactory lsp``: what an editor runs. Relays stdin/stdout to the daemon's unix socket, starting the daemon if none answers.

So ``ssh gpu-host ptxfactory lsp`` is a complete remote setup: the editor speaks LSP on the SSH
channel's stdio, the bridge forwards the bytes untouched, and the daemon (with its GPU worker,
job queue and stores) outlives the editor. The bridge is two blocking copy loops and imports
nothing heavy; it exits when the daemon closes the connection (after ``exit``) or stdin closes.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path


class BridgeError(RuntimeError):
    pass


def connect(path: Path) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
        return s
    except OSError:
        s.close()
        return None


def start_daemon(path: Path, backend: str, store: str | None, log: Path) -> subprocess.Popen:
    """Start ``ptxfactory serve --socket PATH`` detached (own session, output to ``log``)."""
    cmd = [sys.executable, "-m", "ptxfactory.daemon", "serve", "--socket", str(path), "--backend", backend]
    if store:
        cmd += ["--store", str(store)]
    with open(log, "ab") as out:
        os.chmod(log, 0o600)
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, close_fds=True)


def ensure_daemon(path: Path, backend: str = "auto", store: str | None = None, timeout_s: float = 60.0) -> socket.socket:
    """A connection to the daemon on ``path``, starting one when nothing answers. Raises BridgeError."""
    sock = connect(path)
    if sock is not None:
        return sock
    from .serve import log_path

    log = log_path(path)
    proc = start_daemon(path, backend, store, log)
    deadline, died_at = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        time.sleep(0.05)
        sock = connect(path)
        if sock is not None:
            return sock
        if proc.poll() is not None:  # it may have lost a start race to another daemon: give that one a moment
            died_at = died_at or time.monotonic()
            if time.monotonic() - died_at > 5.0:
                break
    tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
    raise BridgeError(f"ptxfactory lsp: no daemon answers on {path} and starting one failed (log: {log})\n" + "\n".join(tail))


def relay(sock: socket.socket, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    """Copy stdin to the socket and the socket to stdout until the daemon closes the connection."""
    def upstream() -> None:
        try:
            while data := os.read(stdin_fd, 65536):
                sock.sendall(data)
        except OSError:
            pass
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=upstream, name="stdin->daemon", daemon=True).start()
    try:
        while data := sock.recv(65536):
            view = memoryview(data)
            while view:
                view = view[os.write(stdout_fd, view):]
    except OSError:
        return 1
    finally:
        sock.close()
    return 0


def run_bridge(path: Path, backend: str = "auto", store: str | None = None) -> int:
    try:
        sock = ensure_daemon(path, backend, store)
    except BridgeError as exc:
        print(exc, file=sys.stderr)
        return 1
    return relay(sock)
