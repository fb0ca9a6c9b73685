"""Where the daemon keeps its socket, lock, log and job store, and the owner-only checks on them.

- socket: ``$XDG_RUNTIME_DIR/ptxfactory/daemon.sock``, else ``/tmp/ptxfactory-$UID/daemon.sock``;
  that folder is created 0700 (and refused when another user owns it); the socket is made 0600.
- lock: ``<socket>.lock`` beside it (``flock``): one daemon per socket.
- log: ``<socket folder>/daemon.log`` when ``ptxfactory lsp`` starts the daemon itself.
- job store: ``jobs.sqlite`` beside the lesson store (``$PTXFACTORY_HOME``, else the XDG data folder).
"""
from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

SOCKET_NAME = "daemon.sock"


def runtime_dir() -> Path:
    """``$XDG_RUNTIME_DIR/ptxfactory`` when that variable names a folder, else ``/tmp/ptxfactory-$UID``."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "ptxfactory"
    return Path("/tmp") / f"ptxfactory-{os.getuid()}"


def default_socket() -> Path:
    return runtime_dir() / SOCKET_NAME


def default_jobs_path(lesson_store: str | Path | None = None) -> Path:
    """``jobs.sqlite`` in the lesson store's folder (default :func:`ptxfactory.search.lessons.default_path`)."""
    from ptxfactory.search.lessons import default_path

    return Path(lesson_store or default_path()).parent / "jobs.sqlite"


class UnsafePath(RuntimeError):
    """A runtime folder that another user owns, or that others may write to."""


def private_dir(path: Path) -> Path:
    """The socket's folder: created 0700 when missing. The default runtime folder is also checked (ours, no
    access for others); a folder the user named (``--socket /some/dir/x.sock``) is left as it is: the
    socket's own mode (0600) is what keeps other users out."""
    if not path.exists():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path, 0o700)
    if path.resolve() == runtime_dir().resolve():
        st = path.stat()
        if st.st_uid != os.getuid():
            raise UnsafePath(f"{path} belongs to uid {st.st_uid}, not to you (uid {os.getuid()})")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(path, 0o700)
    return path


def lock_file(path: Path) -> int | None:
    """An exclusive ``flock`` on ``path`` (created 0600): the open descriptor, or None when another process holds it.

    The lock lasts as long as the descriptor (and so the process): a ``kill -9`` releases it.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def lock_holder(path: Path) -> int | None:
    """The pid written in a lock file (the process that holds or held it), or None."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
