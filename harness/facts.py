"""GPU facts for the worker: NVML (name, bus width, memory clock, driver, temperature) and a measured copy."""
from __future__ import annotations

import cupy as cp
import numpy as np

from ptxfactory.protocol import GpuFacts

COPY_BYTES = 1 << 30  # 1 GiB source, far larger than any L2


def measure_copy_gbps(nbytes: int = COPY_BYTES, reps: int = 10) -> float:
    """Device-to-device copy bandwidth, (bytes read + bytes written) / median time, in GB/s."""
    src = cp.ones(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    dst[...] = src
    times = []
    for _ in range(reps):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, cp.cuda.runtime.memcpyDeviceToDevice, 0)
        e.record()
        e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e))
    return 2 * nbytes / (float(np.median(times)) * 1e6)


# fp32 lanes (FMA units) per SM by compute capability (CUDA C++ Programming Guide, "Arithmetic Instructions").
FP32_LANES = {(7, 0): 64, (7, 5): 64, (8, 0): 64}
FP32_LANES_DEFAULT = 128  # sm_86, sm_89, sm_90, sm_100, sm_120


def peak_fp32_tflops(cc: str, sm_count: int, max_sm_khz: int) -> float:
    """The fp32 FMA peak in 1e12 FLOP/s: SMs x fp32 lanes per SM x 2 FLOP x the max SM clock (``max_sm_khz``, kHz).

    ``cc`` is the compute capability as CuPy spells it (``"90"``)."""
    major, minor = int(cc[:-1]), int(cc[-1])
    lanes = FP32_LANES.get((major, minor), FP32_LANES_DEFAULT)
    return sm_count * lanes * 2 * max_sm_khz * 1e3 / 1e12


def read_facts() -> GpuFacts:
    """Facts of the current device. Peak bandwidth = bus width (bits) / 8 x max memory clock x 2 (DDR)."""
    dev = cp.cuda.Device()
    attrs = dev.attributes
    cc = dev.compute_capability
    name, peak, driver, clocks, temp = f"CUDA device {dev.id}", 0.0, "", {}, None
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(dev.id)
        raw = pynvml.nvmlDeviceGetName(h)
        name = raw.decode() if isinstance(raw, bytes) else raw
        bus_bits = pynvml.nvmlDeviceGetMemoryBusWidth(h)
        mem_mhz = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
        peak = bus_bits / 8 * mem_mhz * 1e6 * 2 / 1e9
        d = pynvml.nvmlSystemGetDriverVersion()
        driver = d.decode() if isinstance(d, bytes) else d
        clocks = {"sm": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM), "mem": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)}
        temp = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    except Exception:
        pass
    copy = measure_copy_gbps()
    return GpuFacts(
        name=name, arch=f"sm_{cc}", sm_count=attrs["MultiProcessorCount"], l2_bytes=attrs["L2CacheSize"],
        copy_gbps=copy, peak_gbps=max(peak, copy * 1.05), driver=driver,
        peak_tflops=peak_fp32_tflops(cc, attrs["MultiProcessorCount"], attrs["ClockRate"]), clocks_mhz=clocks, temperature_c=temp,
    )
