"""Benchmark (GPU machine): ``smem_tile`` tile shapes on GEMM-class kernels, against the original and cuBLAS.

For each target ``FILE.cu:KERNEL`` (a naive GEMM, batched GEMM or direct convolution that ``smem_tile`` takes), the
chain ``restrict + smem_tile_RMxRN(TK) + launch_bounds`` is built for each shape of ``--tiles`` (``RM,RN,TK``; a token
``mma:RM,RN`` takes ``mma_tile`` instead, the tensor cores, ``mma:RM,RN,S`` its cp.async variant with S stages,
``tf32:RM,RN`` its single-TF32 variant), also
with ``__launch_bounds__(256, 2)`` (``--min-blocks 2``: ptxas then keeps registers at or under 128 a thread so that
two blocks share an SM; skipped where two blocks fit already), each verified and timed against the original through one :class:`GpuBackend` job session,
as a job does. Prints, per candidate, registers, speedup with its 95% interval and TFLOP/s per bench size (2 * MNK
from the spec's ``flops``); with ``--torch``, cuBLAS's FP32 GEMM (TF32 off) at the same sizes for ``matmul``/``bmm``
signatures (A[.., M, K] @ B[.., K, N]).

Usage: ``python3 bench/gemm_tiles.py --out tiles.json examples/matmul_naive/matmul_naive.cu:matmul_naive ...``
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
from pathlib import Path

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import LaunchConfig, Measured, load_spec, spec_path_for
from ptxfactory.protocol.expr import evaluate
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators.transform import TransformGenerator, run_chain, unit_from_context
from ptxfactory.search.generators.transform.launch_bounds import LaunchBoundsPass
from ptxfactory.search.generators.transform.restrict import RestrictPass
from ptxfactory.search.generators.transform.mma_tile import MmaTilePass
from ptxfactory.search.generators.transform.smem_tile import SmemTilePass
from ptxfactory.search.strategy import original_candidate

TILES = "4,4,16 4,4,8 4,4,32 8,8,8 8,8,4 8,8,16 8,4,8 4,8,8 8,4,16 4,8,16 2,4,16 4,2,16 mma:4,8 mma:8,4 mma:4,4 tf32:4,4"


def tile_pass(token: str):
    """The tiling pass a ``--tiles`` token names: ``RM,RN,TK`` (smem_tile), ``mma:RM,RN`` (``mma:RM,RN,S``: its cp.async
    variant with S stages) or ``tf32:RM,RN`` (mma_tile)."""
    kind, _, dims = token.rpartition(":")
    values = [int(v) for v in dims.split(",")]
    if kind == "mma":
        return MmaTilePass(*values[:2], stages=values[2] if len(values) > 2 else 1)
    if kind == "tf32":
        return MmaTilePass(*values, single_tf32=True)
    return SmemTilePass(*values)


def _torch_tflops(spec, sizes) -> list[float | None]:
    """cuBLAS TFLOP/s per size for an A[.., M, K] @ B[.., K, N] signature in A's dtype (FP32 with TF32 off, bf16,
    f16), else Nones."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}.get(spec.args[0].dtype.value, torch.float32)
    names = [a.name for a in spec.args]
    out = []
    for s in sizes:
        if not {"M", "N", "K"} <= set(s) or len(names) < 3:
            out.append(None)
            continue
        batch = [s["Bt"]] if "Bt" in s else []
        a = torch.randn(*batch, s["M"], s["K"], device="cuda", dtype=dtype)
        b = torch.randn(*batch, s["K"], s["N"], device="cuda", dtype=dtype)
        for _ in range(5):
            a @ b
        times = []
        for _ in range(50):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            a @ b
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1) * 1e-3)
        times.sort()
        out.append(2 * s["M"] * s["N"] * s["K"] * (batch[0] if batch else 1) / times[len(times) // 2] / 1e12)
    return out


async def run_target(backend: GpuBackend, cu: Path, kernel: str, tiles: list[str], min_blocks: list[int],
                     with_torch: bool) -> dict:
    spec = load_spec(spec_path_for(cu)).kernels[kernel]
    source = cu.read_text()
    orig = original_candidate(spec, source)
    k = find_kernel(source, kernel)
    ctx = GenContext(spec=spec, source=source, kernel=k, original=orig)
    gen = TransformGenerator()
    base = compile_candidate(orig, spec.arch, spec.check.fast_math)
    assert isinstance(base, Compiled), getattr(base, "log", base)
    sizes = [dict(s) for s in spec.bench.sizes]
    flops = [float(evaluate(spec.flops, s)) if spec.flops else None for s in sizes]
    rows = []
    unit = unit_from_context(ctx)
    for token in tiles:
        chain = [RestrictPass(), tile_pass(token), LaunchBoundsPass()]
        tiled = chain[1]
        why = tiled.why_not(unit)
        if why:
            rows.append({"tile": tiled.name, "refused": why})
            continue
        out = run_chain(unit, chain)
        regs = None
        for mb in min_blocks:
            if mb > 1 and regs is not None and regs * out.block_threads() * mb <= 65536:
                continue  # the bound would not bind: as many blocks fit already
            u = out
            if mb > 1:
                threads = u.block_threads()
                u = u.with_text(u.data.replace(f"__launch_bounds__({threads})".encode(), f"__launch_bounds__({threads}, {mb})".encode()))
            cand = gen.candidate(ctx, u, chain)
            comp = compile_candidate(cand, spec.arch, spec.check.fast_math)
            row = {"tile": tiled.name, "min_blocks": mb}
            if not isinstance(comp, Compiled):
                row["compile_failed"] = comp.log[-500:]
                rows.append(row)
                continue
            row["regs"], row["spill_stores"] = comp.resources.registers, comp.resources.spill_stores
            regs = regs if mb > 1 else comp.resources.registers
            r = await backend.evaluate(spec, base, comp, make_plan(spec))
            if isinstance(r, Measured):
                row["speedup"] = [round(r.speedup, 3), round(r.speedup_lo or 0, 3), round(r.speedup_hi or 0, 3)]
                row["us"] = [round(t.median_us, 1) for t in r.timings]
                row["tflops"] = [round(f / (t.median_us * 1e-6) / 1e12, 2) if f else None for f, t in zip(flops, r.timings)]
            else:
                row["outcome"] = r.outcome
                row["reason"] = str(getattr(r, "reason", ""))[:300]
            print(json.dumps(row), flush=True)
            rows.append(row)
    doc = {"target": f"{cu}:{kernel}", "sizes": sizes, "rows": rows}
    if with_torch:
        doc["cublas_tflops"] = [round(x, 2) if x else None for x in _torch_tflops(spec, sizes)]
        print(f"cuBLAS TFLOP/s ({spec.args[0].dtype.value}; TF32 off):", doc["cublas_tflops"], flush=True)
    return doc


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("targets", nargs="+", help="FILE.cu:KERNEL")
    ap.add_argument("--tiles", default=TILES, help="space-separated RM,RN,TK (smem_tile), mma:RM,RN or tf32:RM,RN (mma_tile)")
    ap.add_argument("--min-blocks", default="1,2", help="__launch_bounds__ minimum blocks per SM to try (1: none)")
    ap.add_argument("--torch", action="store_true", help="also time cuBLAS (torch, TF32 off) at the GEMM sizes")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    tiles = a.tiles.split()
    min_blocks = [int(v) for v in a.min_blocks.split(",")]
    backend = GpuBackend()
    try:
        facts = await backend.facts()
        docs = []
        for t in a.targets:
            cu, kernel = t.rsplit(":", 1)
            print("==", t, flush=True)
            docs.append(await run_target(backend, Path(cu), kernel, tiles, min_blocks, a.torch))
    finally:
        await backend.close()
    if a.out:
        a.out.write_text(json.dumps({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                     "gpu": facts.model_dump(), "results": docs}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
