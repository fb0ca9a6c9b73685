"""Where the daemon keeps its socket, lock, log and job store, and the owner-only checks on them.

- socket: ``$XDG_RUNTIME_DIR/ptxfactory/daemon.sock``, else ``/tmp/ptxfactory-$UID/daemon.sock``;
  that folder is created 0700 (and refused when another user owns it); the socket is made 0600.
- lock: ``<socket>.lock`` beside it (``flock``): one daemon per socket.
- log: ``<socket folder>/daemon.log`` when ``ptxfactory lsp`` starts the daemon itself.
- TCP token: ``<socket>.token`` beside it (0600), written by a daemon that listens on TCP and read by
  that user's clients (:func:`read_token`); a TCP client without it is refused at ``initialize``.
- job store: ``jobs.sqlite`` beside the lesson store (``$PTXFACTORY_HOME``, else the XDG data folder).
"""
from __future__ import annotations

import fcntl
import os
import secrets
import stat
from pathlib import Path

SOCKET_NAME = "daemon.sock"
TOKEN_ENV = "PTXFACTORY_TOKEN"


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


class TokenError(RuntimeError):
    """A token file that cannot be used: missing, empty, not yours, or readable by others."""


def token_path(socket_path: Path | None = None) -> Path:
    """Where the daemon on ``socket_path`` (default :func:`default_socket`) keeps its TCP token: ``<socket>.token``."""
    socket_path = socket_path or default_socket()
    return socket_path.with_name(socket_path.name + ".token")


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to a new 0600 file at ``path``: an old file (or a symbolic link) there is removed first, and
    the new one is created exclusively (``O_EXCL|O_NOFOLLOW``), so nothing else can be written through it. Raises OSError."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def read_token(path: Path) -> str:
    """The token in ``path`` (its first line, stripped). The file must be yours and unreadable by others (0600).

    Raises TokenError (missing, empty, someone else's, group/other-readable, a symbolic link).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise TokenError(f"no token file at {path}") from None
    except OSError as exc:
        raise TokenError(f"cannot read the token file {path}: {exc}") from None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.getuid():
            raise TokenError(f"{path} belongs to uid {st.st_uid}, not to you (uid {os.getuid()})")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise TokenError(f"{path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}): chmod 600 {path}")
        token = (f.read(4096).splitlines() or [""])[0].strip()
    if not token:
        raise TokenError(f"{path} holds no token")
    return token


def choose_token(token_file: Path | None = None, given: str | None = None) -> tuple[str, str]:
    """The daemon's TCP token and where it came from: ``--token-file`` (see :func:`read_token`), else ``given``
    (the deprecated ``--token``), else ``$PTXFACTORY_TOKEN``, else a new random one (256 bits). Raises TokenError."""
    if token_file is not None:
        return read_token(token_file), f"--token-file {token_file}"
    if given:
        return given, "--token"
    if os.environ.get(TOKEN_ENV, "").strip():
        return os.environ[TOKEN_ENV].strip(), f"${TOKEN_ENV}"
    return secrets.token_urlsafe(32), "generated"


def client_token(socket_path: Path | None = None) -> str | None:
    """The token a client of this user sends over TCP: ``$PTXFACTORY_TOKEN``, else the daemon's token file
    beside ``socket_path`` (default socket), else None."""
    if os.environ.get(TOKEN_ENV, "").strip():
        return os.environ[TOKEN_ENV].strip()
    try:
        return read_token(token_path(socket_path))
    except TokenError:
        return None
