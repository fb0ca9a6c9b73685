"""Choosing the evaluation backend: the GPU worker, none (compile only), or the tests' SimulatedDevice.

Two environment variables tune the simulated backend, for tests and the CPU benchmark only:
``PTXFACTORY_SIMULATED_DELAY_S`` (seconds per evaluation, default 0.05) and
``PTXFACTORY_SIMULATED_LOG`` (a file to which each evaluated candidate key is appended, one per
line, as soon as its evaluation returns: how the tests prove that a resumed job does not
evaluate a candidate twice).
"""
from __future__ import annotations

import os
from typing import Literal

from ptxfactory.harness.backend import EvaluationBackend, gpu_available

BackendName = Literal["auto", "gpu", "simulated", "none"]


def make_backend(name: BackendName = "auto") -> EvaluationBackend | None:
    """``auto``: the GPU backend when NVML sees a GPU, else None (compile only). ``gpu``: the GPU backend or
    :class:`~ptxfactory.harness.backend.NoGpu`. ``simulated``: :class:`SimulatedDevice` (tests only; never
    verifies). ``none``: compile only."""
    if name == "simulated":
        return simulated_backend()
    if name == "none":
        return None
    if gpu_available() is None:
        if name == "gpu":
            from ptxfactory.harness.backend import NoGpu

            raise NoGpu("no NVIDIA GPU found (NVML sees no driver or device)")
        return None
    from ptxfactory.harness.gpu_backend import GpuBackend

    return GpuBackend()


def simulated_backend() -> EvaluationBackend:
    """A :class:`SimulatedDevice` with the delay of ``PTXFACTORY_SIMULATED_DELAY_S``, logging keys to ``PTXFACTORY_SIMULATED_LOG``."""
    from ptxfactory.harness.simulated import SimulatedDevice

    delay = float(os.environ.get("PTXFACTORY_SIMULATED_DELAY_S") or 0.05)
    log = os.environ.get("PTXFACTORY_SIMULATED_LOG")
    if not log:
        return SimulatedDevice(delay_s=delay)

    class LoggingSimulatedDevice(SimulatedDevice):
        async def evaluate(self, spec, baseline, candidate, plan):
            result = await super().evaluate(spec, baseline, candidate, plan)
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, f"{candidate.candidate.key}\n".encode())
            finally:
                os.close(fd)
            return result

    return LoggingSimulatedDevice(delay_s=delay)
