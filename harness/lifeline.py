"""Child processes that die with their parent: the compile pool's workers and the GPU worker.

``kill -9`` of the daemon runs none of its clean-up, so its children must notice by themselves.
:func:`die_with_parent`, called first thing in a child, does it twice over: on Linux
``prctl(PR_SET_PDEATHSIG, SIGKILL)`` has the kernel kill the child when its parent goes (strictly:
when the parent's thread that started it ends; the daemon starts them from long-lived threads),
and everywhere a daemon thread polls the parent's pid and exits the child when it has changed
(re-parented to init or a subreaper). A parent that died before the call is caught by the first check.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
POLL_S = 0.5


def set_pdeathsig(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent ends; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int, poll_s: float = POLL_S) -> None:
    """Make this (child) process end when ``parent_pid``, its parent, ends: PDEATHSIG where the kernel has it, and
    a daemon thread that exits the process (status 0, no clean-up: the parent is gone) once ``os.getppid()``
    is no longer ``parent_pid``. Exits at once when the parent is already gone. Never raises."""
    set_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(0)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent_pid:
                os._exit(0)

    threading.Thread(target=watch, name="ptxfactory-lifeline", daemon=True).start()
