"""A gate that holds the GPU while the host queues one timed launch, so that CUDA events time the GPU only.

Timing one launch between two events (``start.record(); kernel(); end.record()``) measures the host too whenever
the GPU runs out of queued work before the launch arrives: the start event completes at once, and the time the host
then spends preparing the launch (evaluating its grid expressions, packing arguments, a garbage collection) lands
between the events. On an 8 µs kernel that inflated a candidate with long launch expressions 2 to 20 times.

The gate is a one-thread kernel queued just before the start event. It spins until a counter in mapped (pinned,
device-visible) host memory reaches the gate's ticket, which the host writes once the start event, the launch and
the end event are queued; the GPU then runs the three back to back. The technique of nvbench's blocking kernel. A
gate whose ticket does not come within :attr:`LaunchGate.TIMEOUT_NS` opens by itself (a stalled host never hangs the
GPU) and counts a timeout: that launch's time may include host time.
"""
from __future__ import annotations

import ctypes

import cupy as cp
import numpy as np

GATE_SOURCE = r"""
extern "C" __global__ void ptxf_gate(const volatile unsigned int* ticket, unsigned int want, unsigned long long timeout_ns,
                                     unsigned int* timeouts)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while ((int)(*ticket - want) < 0) {  // (wrap-safe: tickets only grow)
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > timeout_ns) { atomicAdd(timeouts, 1u); return; }
        __nanosleep(64);
    }
}
"""


class LaunchGate:
    """Hold the GPU (:meth:`hold`) while the host queues a timed launch, then let it go (:meth:`release`).

    ``hold()`` queues the gate on the current stream with the next ticket; ``release()`` writes that ticket to the
    mapped counter. Between the two the host may take as long as it needs (up to :attr:`TIMEOUT_NS`) without the GPU
    idling inside the events. :meth:`timeouts` says how many gates opened by themselves so far. Raises ``cupy.cuda.runtime.CUDARuntimeError`` / ``cupy.cuda.compiler.CompileException`` at
    construction when the mapped memory or the kernel cannot be had (the caller then times without a gate)."""

    TIMEOUT_NS = 500_000_000  # 0.5 s: far above any launch's host cost, short enough not to look like a hang

    def __init__(self):
        rt = cp.cuda.runtime
        self._ptr = rt.hostAlloc(8, rt.hostAllocMapped | rt.hostAllocPortable)
        self._ticket = np.ctypeslib.as_array((ctypes.c_uint32 * 2).from_address(self._ptr))
        self._ticket[:] = 0
        # with unified addressing (every 64-bit platform CUDA supports) the device sees mapped memory at its host address
        self._kernel = cp.RawKernel(GATE_SOURCE, "ptxf_gate")
        self._timeouts = cp.zeros(1, dtype=cp.uint32)
        self._next = 0

    def hold(self) -> None:
        """Queue a gate on the current stream: the work queued after it waits for :meth:`release`."""
        self._next = (self._next + 1) & 0xFFFFFFFF
        self._kernel((1,), (1,), (np.uint64(self._ptr), np.uint32(self._next), np.uint64(self.TIMEOUT_NS), self._timeouts))

    def release(self) -> None:
        """Open the last gate queued: write its ticket where the GPU reads it."""
        self._ticket[0] = self._next

    def timeouts(self) -> int:
        """Gates that opened by themselves since the gate was made (synchronises the device)."""
        return int(self._timeouts.get()[0])

    def close(self) -> None:
        """Free the mapped memory (the device must be idle: no gate queued)."""
        if self._ptr:
            self._ticket = None
            cp.cuda.runtime.freeHost(self._ptr)
            self._ptr = 0
