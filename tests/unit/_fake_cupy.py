"""A NumPy stand-in for the few CuPy calls ``harness/buffers.py`` and ``harness/gpu_eval.py`` make, so the
worker's verification logic runs on the CPU with kernels written in NumPy (tests only; nothing is fast).

Arrays are :class:`HostArray`, an ``ndarray`` with CuPy's ``.get()``; ``cuda.Device().synchronize()`` and
events do nothing, and every event pair reads :data:`ELAPSED_MS`.
"""
from __future__ import annotations

import types

import numpy as np

ELAPSED_MS = 1.0


class HostArray(np.ndarray):
    """An ndarray with CuPy's ``get()`` (a plain host copy)."""

    def get(self) -> np.ndarray:
        return np.array(self, copy=True).view(np.ndarray)


def _wrap(value):
    return value.view(HostArray) if isinstance(value, np.ndarray) and not isinstance(value, HostArray) else value


def _fn(f):
    def call(*args, **kwargs):
        return _wrap(f(*args, **kwargs))
    return call


class _Generator:
    def __init__(self, seed):
        self._rng = np.random.default_rng(seed)

    def __getattr__(self, name):
        return _fn(getattr(self._rng, name))


class _Device:
    attributes = {"MaxSharedMemoryPerBlockOptin": 227 * 1024}

    def synchronize(self):
        return None


class _Event:
    def record(self):
        return None

    def synchronize(self):
        return None


class _CudaError(RuntimeError):
    pass


def make_module() -> types.ModuleType:
    """A fresh ``cupy`` stand-in module (register it as ``cupy`` and its ``cuda`` as ``cupy.cuda``)."""
    mod = types.ModuleType("cupy")
    for name in ("full", "all", "ascontiguousarray", "ones", "zeros", "empty", "rint", "clip", "floor", "asarray", "isnan",
                 "abs", "isfinite", "max", "where", "argmax", "array_equal", "array", "empty_like", "copyto", "cumsum",
                 "concatenate", "minimum"):
        setattr(mod, name, _fn(getattr(np, name)))
    for name in ("uint8", "uint16", "uint32", "uint64", "int8", "int32", "int64", "float16", "float32", "float64"):
        setattr(mod, name, getattr(np, name))
    mod.ndarray = HostArray
    mod.random = types.SimpleNamespace(default_rng=_Generator, Generator=_Generator)
    driver = types.SimpleNamespace(CUDADriverError=_CudaError, funcGetAttribute=lambda *a: 0, funcSetAttribute=lambda *a: None)
    runtime = types.SimpleNamespace(CUDARuntimeError=_CudaError)
    mod.cuda = types.SimpleNamespace(Device=_Device, Event=_Event, get_elapsed_time=lambda start, end: ELAPSED_MS,
                                     driver=driver, runtime=runtime, function=types.SimpleNamespace(Module=object))
    return mod
