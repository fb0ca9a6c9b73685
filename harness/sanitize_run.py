"""One launch of a compiled kernel, for compute-sanitizer (and Nsight Compute, :mod:`.ncu`) to watch:
``python -m ptxfactory.harness.sanitize_run JOB.json``.

``JOB.json`` (written by :func:`write_job`): ``{"cubin": path of the cubin file,
"lowered_name": str, "launch": LaunchConfig dict, "spec": KernelSpec dict, "size": {symbol: int}, "seed": int}``.

Every buffer is its own ``cudaMalloc`` of exactly its size (CuPy's memory pool is switched off, so that memcheck
sees each buffer's real bounds; no canary bands), inputs from the verifier's generator (:func:`.buffers.make_inputs`),
outputs NaN-poisoned. One launch, then a device synchronise. Exit status 0 when the launch returned without a CUDA
error, 3 (with the error on stderr) otherwise. Runs on the GPU machine only (CuPy).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def write_job(folder: Path, spec, cubin: bytes, lowered_name: str, launch: dict, size: dict[str, int], seed: int = 0) -> Path:
    """Write ``kernel.cubin`` and ``job.json`` (the format above) into ``folder``; the path of ``job.json``. ``spec``: a
    :class:`~ptxfactory.protocol.KernelSpec`. Used by compute-sanitizer's runs and Nsight Compute's (:mod:`.ncu`)."""
    cubin_path = folder / "kernel.cubin"
    cubin_path.write_bytes(cubin)
    job = folder / "job.json"
    job.write_text(json.dumps({"cubin": str(cubin_path), "lowered_name": lowered_name, "launch": launch,
                               "spec": spec.model_dump(mode="json"), "size": size, "seed": seed}))
    return job


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m ptxfactory.harness.sanitize_run JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text())
    import cupy as cp

    cp.cuda.set_allocator(None)  # exact allocations: memcheck knows where each buffer ends
    from ptxfactory.protocol import KernelSpec, LaunchConfig

    from . import buffers as B
    from .gpu_eval import LoadedKernel

    spec = KernelSpec.model_validate(job["spec"])
    size = {k: int(v) for k, v in job["size"].items()}
    try:
        kernel = LoadedKernel(Path(job["cubin"]).read_bytes(), job["lowered_name"], LaunchConfig.model_validate(job["launch"]))
        inputs = B.make_inputs(spec, size, int(job.get("seed", 0)), 0)
        bufs = {}
        for arg in spec.args:
            if arg.role in ("in", "inout"):
                bufs[arg.name] = inputs[arg.name]
            elif arg.role == "out":
                bufs[arg.name] = cp.empty(arg.numel(size), dtype=B.STORAGE[arg.dtype.value])
                B.fill_nan(bufs[arg.name], arg.dtype.value)
        cp.cuda.Device().synchronize()
        args = tuple(bufs[a.name] if a.is_buffer else B.scalar_value(a, size) for a in spec.args)
        kernel(args, size)
        cp.cuda.Device().synchronize()
    except Exception as exc:  # noqa: BLE001: the launch's error is the answer
        print(f"sanitize_run: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
