"""``textDocument/hover`` on a spec'd kernel's signature: resources, occupancy, the best result so far.

Resources (registers, static shared memory, stack, spills) come from the last compile of the
kernel's current text (:class:`~ptxfactory.daemon.analysis.Analyzer`, run on open and save); a
hover never compiles on the spot: without a compile of this text it says so and starts one.
Occupancy is the theoretical one for the spec's block size. The best result is the latest job's
best candidate so far (verified on the GPU, or "simulated" under the tests' backend).
"""
from __future__ import annotations

import asyncio

from lsprotocol import types

from ptxfactory.harness.source import KernelDef, find_kernels
from ptxfactory.protocol import Measured, spec_path_for
from ptxfactory.search.strategy import kernel_fingerprint

from ..analysis import KernelAnalysis
from ..jobs import JobRecord, path_key
from ptxfactory.harness.occupancy import occupancy
from .code_lens import described_kernels_off_loop
from .session import PtxServer
from .text import cuda_path, position_at


def register(server: PtxServer) -> None:
    server.feature(types.TEXT_DOCUMENT_HOVER)(hover)


def header_lines(kernel: KernelDef) -> tuple[int, int]:
    """First and last line of the kernel's signature (up to its opening brace)."""
    brace = kernel.text.find("{")
    return kernel.start_line, kernel.start_line + kernel.text.count("\n", 0, brace if brace >= 0 else len(kernel.text))


async def hover(ls: PtxServer, params: types.HoverParams) -> types.Hover | None:
    uri = params.text_document.uri
    path = cuda_path(uri)
    if path is None:
        return None
    text = ls.workspace.get_text_document(uri).source
    line = params.position.line
    kernel = next((k for k in find_kernels(text) if header_lines(k)[0] <= line <= header_lines(k)[1]), None)
    if kernel is None or kernel.name not in await described_kernels_off_loop(spec_path_for(path)):
        return None
    analysis = ls.engine.analysis
    fingerprint = kernel_fingerprint(kernel.text)
    cached = analysis.cached(path, text)
    found = cached.kernels.get(kernel.name) if cached else analysis.kernel(path, kernel.name, fingerprint)
    if cached is None and found is None:
        asyncio.ensure_future(analysis.analyse(path, text))  # ready for the next hover
    job = await ls.engine.latest(path_key(uri), kernel.name)
    value = render(kernel.name, found, job, compiling=cached is None and found is None)
    start = position_at(text, kernel.start_byte, ls.position_encoding)
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=value),
        range=types.Range(start=start, end=types.Position(line=start.line, character=start.character)),
    )


def render(name: str, found: KernelAnalysis | None, job: JobRecord | None, compiling: bool = False) -> str:
    lines = [f"**{name}** (ptxfactory)", ""]
    lines += resource_lines(found, compiling)
    lines += best_lines(job)
    return "\n".join(lines)


def resource_lines(k: KernelAnalysis | None, compiling: bool) -> list[str]:
    if k is None:
        return ["- resources: compiling… (hover again in a moment)" if compiling else "- resources: not compiled yet (save the file)"]
    if k.mismatch:
        return [f"- {k.mismatch}"]
    if k.failed:
        first = k.messages[0] if k.messages else None
        return [f"- does not compile ({k.arch}" + (f", {k.instance}" if k.instance else "") + ")"
                + (f": line {first.line + 1}: {first.text}" if first else "")]
    r = k.resources
    instance = [f"- instantiation: `{k.instance}` (the first value of each `tune.template` knob)"] if k.instance else []
    if r is None:
        return instance + [f"- compiled for {k.arch}; no ptxas report (resources unknown)"]
    spills = (f"**{r.spill_stores} B spill stores, {r.spill_loads} B spill loads** per thread"
              if r.spill_stores or r.spill_loads else "no spills")
    out = [
        f"- registers: {r.registers} per thread",
        f"- shared memory: {r.shared_bytes} B static" + (f" + {k.dynamic_smem} B dynamic" if k.dynamic_smem else "") + " per block",
        f"- local memory: {r.local_bytes} B stack per thread; {spills}",
    ]
    if k.threads_per_block:
        occ = occupancy(k.arch, k.threads_per_block, r.registers, r.shared_bytes + k.dynamic_smem)
        out.append(f"- occupancy ({k.arch}, theoretical): {occ.describe(k.threads_per_block)}")
    return instance + out


def best_lines(job: JobRecord | None) -> list[str]:
    if job is None:
        return ["- best so far: no job yet (\"Optimise kernel\")"]
    where = f"job {job.job_id}, {job.state}" + (f" {job.done}/{job.total}" if job.active else "")
    faster = job.faster()
    if not faster:
        return [f"- best so far: nothing faster than the original ({where})"]
    best = faster[0]
    r = best.result
    assert isinstance(r, Measured)
    how = "simulated, NOT verified" if r.simulated else "verified"
    number = job.numbers().get(best.key, "?")
    return [
        f"- best so far: **{r.speedup:.2f}x** faster, {r.geomean_us:.1f} µs geomean over {len(r.timings)} size(s) ({how})",
        f"  candidate {number}: {best.candidate.description} ({where})",
    ]
