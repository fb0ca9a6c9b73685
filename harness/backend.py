"""The one door to a GPU: an :class:`EvaluationBackend` evaluates a compiled candidate against the baseline."""
from __future__ import annotations

from typing import Protocol

from ptxfactory.protocol import EvalResult, GpuFacts, KernelSpec

from .compile import Compiled
from .plan import EvalPlan


class EvaluationBackend(Protocol):
    """Verifies and times candidates. Implementations: :class:`~.gpu_backend.GpuBackend` (a worker
    process on a real GPU) and, for tests only, :class:`~.simulated.SimulatedDevice`."""

    async def facts(self) -> GpuFacts:
        """The device's name, arch, L2 size and measured copy bandwidth."""
        ...

    async def evaluate(self, spec: KernelSpec, baseline: Compiled, candidate: Compiled, plan: EvalPlan) -> EvalResult:
        """Verify ``candidate`` against ``baseline`` (the oracle) and time both, interleaved.

        Returns a result; a crash or hang of the candidate becomes ``Crashed``/``TimedOut``, never an exception.
        """
        ...

    async def close(self) -> None:
        """Stop worker processes."""
        ...


class NoGpu(RuntimeError):
    """No NVIDIA GPU (or driver) is available on this machine."""


def gpu_available() -> str | None:
    """The first GPU's name, or None when NVML finds no driver or no device."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() < 1:
                return None
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            return name.decode() if isinstance(name, bytes) else name
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None
