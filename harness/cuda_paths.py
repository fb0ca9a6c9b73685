"""Where the CUDA headers and ``nvcc`` are.

NVRTC ships no headers of its own: it needs ``-I`` for the toolkit's (``cuda_bf16.h``, ``cuda_fp16.h``)
and for CCCL's (``cuda/std/...``, ``cub``; ``include/cccl`` in CUDA 13, ``include`` itself in CUDA 12,
``nvidia/cu13/include/cccl`` or ``nvidia/cuda_cccl/include`` in the pip wheels). The C standard headers
it lacks (``<cstdint>``, ``<stdint.h>``, ``<cstddef>``, ``<climits>``, ...) come from small shims in
``harness/include/`` that forward to libcu++ (``<cuda/std/cstdint>``); they are given to NVRTC only,
never to ``nvcc``, which has the host compiler's.
"""
from __future__ import annotations

import os
import shutil
from functools import lru_cache
from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent / "include"
PRELUDE = SHIM_DIR / "ptxf_prelude.h"  # NVRTC's --pre-include: the macros nvcc's implicit headers define


def _roots() -> list[Path]:
    """Toolkit roots, most specific first: ``$CUDA_PATH``, ``$CUDA_HOME``, ``nvcc``'s toolkit, ``/usr/local/cuda``."""
    roots = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    roots.append("/usr/local/cuda")
    return [Path(r) for r in roots if r]


def _wheel_includes() -> list[Path]:
    """``include`` folders of the ``nvidia`` pip wheels (``nvidia/cu13/include``, ``nvidia/cuda_runtime/include``...)."""
    try:
        import nvidia  # namespace package of the CUDA wheels
    except ImportError:
        return []
    out = []
    for base in nvidia.__path__:
        out += sorted(Path(base).glob("*/include"))
    return out


def _pathfinder(name: str) -> list[Path]:
    """cuda-pathfinder's answer for a header set (``cccl``, ``cudart``), when it is installed (CuPy depends on it)."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory(name)
    except Exception:  # not installed, an older version, or nothing found
        return []
    return [Path(found)] if found else []


@lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[str, ...]:
    """The toolkit's include directories for NVRTC, most specific first: for each place (``$CUDA_PATH``,
    ``$CUDA_HOME``, ``nvcc``'s toolkit, ``/usr/local/cuda``, the pip wheels, cuda-pathfinder's answer), the
    folder holding ``cuda_bf16.h`` and the one holding CCCL (``cuda/std/version``), so that the headers of
    one toolkit come before another's. Empty when none is found (NVRTC then fails on the include).
    """
    places: list[Path] = []
    for root in _roots():
        places += [root / "include", *sorted(root.glob("targets/*/include"))]
    places += _wheel_includes()
    places += _pathfinder("cudart") + _pathfinder("cccl")
    out: list[str] = []
    for inc in places:
        for d in (inc, inc / "cccl"):
            if (d / "cuda_bf16.h").exists() or (d / "cuda" / "std" / "version").exists():
                key = str(d.resolve())
                if key not in out:
                    out.append(key)
    return tuple(out)


def nvrtc_include_dirs() -> tuple[str, ...]:
    """What NVRTC gets as ``-I``: :func:`cuda_include_dirs`, then the standard-header shims (last, so that a
    toolkit that has its own wins)."""
    return (*cuda_include_dirs(), str(SHIM_DIR))


@lru_cache(maxsize=1)
def nvcc_path() -> str | None:
    """The ``nvcc`` to fall back on: ``$CUDA_PATH/bin``, ``$CUDA_HOME/bin``, ``PATH``, ``/usr/local/cuda/bin``; None without one."""
    for env in ("CUDA_PATH", "CUDA_HOME"):
        root = os.environ.get(env)
        if root and os.access(Path(root) / "bin" / "nvcc", os.X_OK):
            return str(Path(root) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if os.access(default, os.X_OK) else None


def _tool_dirs() -> list[Path]:
    """Folders that may hold the CUDA binary tools, most specific first: ``$CUDA_PATH/bin``, ``$CUDA_HOME/bin``, then
    (after ``PATH``) ``/usr/local/cuda/bin``, the ``nvidia`` pip wheels' ``bin`` folders (``nvidia-cuda-nvdisasm``,
    ``nvidia-cuda-nvcc``) and the copies Triton ships (``triton/backends/nvidia/bin``)."""
    dirs = [Path(os.environ[e]) / "bin" for e in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(e)]
    dirs.append(Path("/usr/local/cuda/bin"))
    try:
        import nvidia  # namespace package of the CUDA wheels
        for base in nvidia.__path__:
            dirs += sorted(Path(base).glob("*/bin"))
    except ImportError:
        pass
    try:
        import importlib.util
        spec = importlib.util.find_spec("triton")
        if spec is not None and spec.submodule_search_locations:
            dirs += [Path(p) / "backends" / "nvidia" / "bin" for p in spec.submodule_search_locations]
    except (ImportError, ValueError):
        pass
    return dirs


@lru_cache(maxsize=8)
def tool_path(name: str) -> str | None:
    """An executable CUDA tool (``ptxas``, ``nvdisasm``, ``cuobjdump``): ``$CUDA_PATH/bin``, ``$CUDA_HOME/bin``,
    ``PATH``, ``/usr/local/cuda/bin``, the pip wheels, Triton's copies; None when there is none."""
    dirs = _tool_dirs()
    first = sum(1 for e in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(e))
    for d in dirs[:first]:
        if os.access(d / name, os.X_OK):
            return str(d / name)
    found = shutil.which(name)
    if found:
        return found
    for d in dirs[first:]:
        if os.access(d / name, os.X_OK):
            return str(d / name)
    return None
