"""Where the CUDA headers are: NVRTC needs ``-I`` for ``cuda_bf16.h`` and friends."""
from __future__ import annotations

import os
import shutil
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[str, ...]:
    """Include directories holding ``cuda_bf16.h``, most specific first.

    Looks at ``$CUDA_PATH``/``$CUDA_HOME``, the directory of ``nvcc`` on ``PATH``, ``/usr/local/cuda``
    and the ``nvidia`` wheels' include folders. Empty when none is found (NVRTC then fails on the include).
    """
    roots = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    roots += ["/usr/local/cuda"]
    dirs = [str(Path(r) / "include") for r in roots if r]
    try:
        import nvidia  # namespace package of the CUDA wheels

        for base in nvidia.__path__:
            dirs += [str(p) for p in Path(base).glob("*/include")]
            dirs += [str(p) for p in Path(base).glob("cu*/include")]
    except ImportError:
        pass
    seen, out = set(), []
    for d in dirs:
        if d not in seen and (Path(d) / "cuda_bf16.h").exists():
            seen.add(d)
            out.append(d)
    return tuple(out)
