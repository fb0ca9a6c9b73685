"""Choosing the evaluation backend: the GPU worker, none (compile only), or the tests' SimulatedDevice."""
from __future__ import annotations

from typing import Literal

from ptxfactory.harness.backend import EvaluationBackend, gpu_available

BackendName = Literal["auto", "gpu", "simulated", "none"]


def make_backend(name: BackendName = "auto") -> EvaluationBackend | None:
    """``auto``: the GPU backend when NVML sees a GPU, else None (compile only). ``gpu``: the GPU backend or
    :class:`~ptxfactory.harness.backend.NoGpu`. ``simulated``: :class:`SimulatedDevice` (tests only; never
    verifies). ``none``: compile only."""
    if name == "simulated":
        from ptxfactory.harness.simulated import SimulatedDevice

        return SimulatedDevice()
    if name == "none":
        return None
    if gpu_available() is None:
        if name == "gpu":
            from ptxfactory.harness.backend import NoGpu

            raise NoGpu("no NVIDIA GPU found (NVML sees no driver or device)")
        return None
    from ptxfactory.harness.gpu_backend import GpuBackend

    return GpuBackend()
