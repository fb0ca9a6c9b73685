"""The GPU worker process outlives a SIGINT or SIGTERM sent to its process group (a terminal's Ctrl-C, `timeout`):
the job cancels after the candidate in hand instead of recording it as crashed; the parent's kill still ends it.
CPU only: the worker starts and waits on its pipe, no request is sent (no GPU is touched)."""
from __future__ import annotations

import os
import signal
import time

from ptxfactory.harness.gpu_backend import GpuWorker


def test_the_worker_ignores_sigint_and_sigterm_and_dies_when_killed():
    worker = GpuWorker()
    worker._ensure()
    try:
        pid = worker._proc.pid
        deadline = time.monotonic() + 60
        # the signals are ignored once worker_main has run its first lines: wait until a SIGINT no longer kills it
        while time.monotonic() < deadline:
            time.sleep(0.5)
            os.kill(pid, signal.SIGINT)
            time.sleep(0.3)
            if worker.alive():
                break
            worker._ensure()  # it died before it could ignore the signal: start again
            pid = worker._proc.pid
        os.kill(pid, signal.SIGTERM)
        time.sleep(0.5)
        assert worker.alive(), "SIGTERM ended the worker"
    finally:
        worker.kill()
    assert not worker.alive()
