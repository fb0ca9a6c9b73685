"""Compilation and static checks in a pool of CPU processes, ahead of the GPU.

A job asks for the next candidates' compilation while the current one is on the GPU, so the GPU
never waits for NVRTC. Processes rather than threads: several NVRTC compilations run truly in
parallel, and the memory NVRTC allocates (tens of MB per compilation, kept by glibc's per-thread
arenas) stays out of the long-running daemon's resident set.

One pool per process, shared by every job (:func:`shared_pool`); its workers are started with
``spawn`` (never ``fork``: the daemon runs an event loop and threads). ``PTXFACTORY_COMPILE_WORKERS``
sets the number of workers (default ``min(4, CPUs)``); ``0`` compiles on a thread of this process
instead (no new processes: what the tests of the daemon use on small machines). Workers die with
the process that started them, ``kill -9`` included (:mod:`.lifeline`).
"""
from __future__ import annotations

import asyncio
import atexit
import logging
import multiprocessing as mp
import os
import threading
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Callable, TypeVar

from ptxfactory.protocol import Candidate, CompileFailed, KernelSpec

from .compile import Compiled, compile_candidate
from .elf import code_digest
from .lifeline import die_with_parent

log = logging.getLogger(__name__)
T = TypeVar("T")
from .static_checks import StaticFinding, static_check


@dataclass(frozen=True)
class Prepared:
    """A candidate ready for the GPU, or the reason it never will be.

    ``compiled`` is :class:`Compiled` or :class:`CompileFailed`; ``finding`` is the static check that
    refused it (None when it passed or was not checked); ``binary`` identifies what would run on the
    GPU: the machine code (:func:`~ptxfactory.harness.elf.code_digest`), the kernel's lowered name and
    the launch (None when it did not compile). Equal ``binary``: the same experiment.
    """

    compiled: Compiled | CompileFailed
    finding: StaticFinding | None
    binary: str | None = None


def prepare(candidate: Candidate, spec: KernelSpec, static: bool = True) -> Prepared:
    """Compile ``candidate`` for ``spec.arch`` and, when ``static``, run the static checks on it.

    Runs in a pool worker (or any thread). Never raises for bad candidate code: a compile error is a
    :class:`CompileFailed`, a refused candidate a :class:`StaticFinding`.
    """
    compiled = compile_candidate(candidate, spec.arch, spec.check.fast_math)
    if isinstance(compiled, CompileFailed):
        return Prepared(compiled, None)
    binary = f"{code_digest(compiled.cubin)}:{compiled.lowered_name}:{candidate.launch.model_dump_json()}"
    finding = static_check(candidate, spec, compiled.resources, compiled.cubin) if static else None
    return Prepared(compiled, finding, binary)


class CompilePool:
    """Runs :func:`prepare` on ``workers`` processes (threads when ``workers == 0``).

    A worker that dies (out of memory, a crash inside NVRTC) breaks the pool; the pool is then
    rebuilt and the candidate compiled once more, so one bad compilation never stops a job.
    """

    def __init__(self, workers: int | None = None):
        env = os.environ.get("PTXFACTORY_COMPILE_WORKERS")
        if workers is None:
            workers = int(env) if env not in (None, "") else min(4, os.cpu_count() or 1)
        self.workers = max(0, workers)
        self._executor: Executor | None = None
        self._lock = threading.Lock()  # the daemon's analysis thread and the event loop both submit

    @property
    def parallel(self) -> int:
        """How many compilations run at once (1 for the thread fallback)."""
        return max(1, self.workers)

    def _pool(self) -> Executor:
        with self._lock:
            if self._executor is None:
                if self.workers == 0:
                    self._executor = ThreadPoolExecutor(1, thread_name_prefix="ptxfactory-compile")
                else:
                    # each worker dies with this process, even after a kill -9 (harness/lifeline.py)
                    self._executor = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"),
                                                         initializer=die_with_parent, initargs=(os.getpid(),))
            return self._executor

    async def prepare(self, candidate: Candidate, spec: KernelSpec, static: bool = True) -> Prepared:
        """Compile and check ``candidate`` off the event loop (see :func:`prepare`)."""
        return await self.run(prepare, candidate, spec, static)

    def prepare_blocking(self, candidate: Candidate, spec: KernelSpec, static: bool = True) -> Prepared:
        """:meth:`prepare` for a caller on a plain thread (blocks that thread until the pool answers)."""
        return self.run_blocking(prepare, candidate, spec, static)

    async def run(self, fn: Callable[..., T], *args) -> T:
        """``fn(*args)`` in a worker, off the event loop: other CPU work that compiles (``fn`` a module-level function,
        its arguments and result picklable; its exceptions are raised here)."""
        loop = asyncio.get_running_loop()
        for attempt in range(3):
            try:
                return await loop.run_in_executor(self._pool(), fn, *args)
            except BrokenProcessPool:
                self._broken(attempt)
        raise AssertionError("unreachable: the third attempt runs on a thread")

    def run_blocking(self, fn: Callable[..., T], *args) -> T:
        """:meth:`run` for a caller on a plain thread (blocks that thread until the pool answers)."""
        for attempt in range(3):
            try:
                return self._pool().submit(fn, *args).result()
            except BrokenProcessPool:
                self._broken(attempt)
        raise AssertionError("unreachable: the third attempt runs on a thread")

    def _broken(self, attempt: int) -> None:
        """A worker died: start a new pool; after a second failure in a row compile on a thread instead
        (workers that cannot start at all, e.g. a ``__main__`` read from stdin that ``spawn`` cannot re-import)."""
        self.close()
        if attempt >= 1:
            log.warning("the compile pool's processes keep failing; compiling on a thread of this process instead")
            self.workers = 0

    def close(self) -> None:
        """Stop the workers (pending compilations are cancelled)."""
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = None


_SHARED: CompilePool | None = None


def shared_pool() -> CompilePool:
    """This process's pool, created on first use and closed at exit."""
    global _SHARED
    if _SHARED is None:
        _SHARED = CompilePool()
        atexit.register(_SHARED.close)
    return _SHARED
