"""What the planner is shown, as text: the spec, resources, the roofline position of the best so far,
the rejected candidates with their reasons, past lessons, the parent's SASS summary (:mod:`ptxfactory.harness.sass`)
and its Nsight Compute counters (:mod:`ptxfactory.harness.ncu`), or why either is unavailable. Each part is bounded.

Nothing here assumes CUDA C++: a kernel written in PTX (``KernelDef.language == "ptx"``) is shown as its ``.entry``
with its innermost loops marked (:func:`kernel_listing`), its ``.param`` list (:func:`ptx_params`) and its module's
header (:func:`ptx_header`); its resources are ptxas's report and its SASS the cubin's, as for CUDA."""
from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

from ptxfactory.protocol import Candidate, CandidateRow, CompileFailed, GpuFacts, KernelSpec, Measured

MAX_REJECTED = 8
MAX_LESSONS = 10
SASS_TIMEOUT_S = 120.0  # compiling and disassembling the parent for the planner, seconds
COUNTERS_TIMEOUT_S = 90.0  # one ncu run for the planner, seconds


def signature(kernel_text: str, name: str) -> str:
    """The parameter list of ``name`` as written in ``kernel_text`` (between its parentheses), spaces collapsed."""
    m = re.search(r"\b" + re.escape(name) + r"\s*\(", kernel_text)
    if not m:
        return "(unknown)"
    depth, i = 1, m.end()
    while i < len(kernel_text) and depth:
        depth += {"(": 1, ")": -1}.get(kernel_text[i], 0)
        i += 1
    return " ".join(kernel_text[m.end(): i - 1].split())


def ptx_params(kernel_text: str) -> str:
    """The ``.param`` list of the (first) ``.entry`` in ``kernel_text``, one declaration a line (``- .param .u64 .ptr
    .global .align 4 x``), read by :func:`ptxfactory.harness.ptx.parse_entries`; ``(unknown)`` when none can be read."""
    from ptxfactory.harness.ptx import PtxSyntaxError, parse_entries

    try:
        entries = parse_entries(kernel_text)
    except PtxSyntaxError:
        entries = []
    if not entries:
        return "(unknown)"
    lines = []
    for p in entries[0].params:
        attrs = "".join([" .ptr" if p.ptr else "", f" .{p.space}" if p.space else "", f" .align {p.align}" if p.align else ""])
        lines.append(f"- .param .{p.type}{attrs} {p.name}" + (f"[{p.array}]" if p.array is not None else ""))
    return "\n".join(lines) or "(none)"


def ptx_header(source: str) -> str:
    """The module header a PTX candidate keeps (``.version 8.0; .target sm_90a; .address_size 64``): the module's
    ``.version``, ``.target`` and ``.address_size`` directives, comments left out."""
    from ptxfactory.harness.ptx import blank_comments

    found = re.findall(r"^[ \t]*(\.(?:version|target|address_size)\b[^\n;]*)", blank_comments(source), re.M)
    return "; ".join(" ".join(d.split()) for d in found) or "no header directives found"


def kernel_listing(kernel) -> str:
    """The kernel's text as the planner sees it: a CUDA kernel's definition as written; a PTX entry with its innermost
    loops marked (:func:`ptxfactory.harness.ptx_ir.mark_ptx_hot_loops`)."""
    if getattr(kernel, "language", "cuda") != "ptx":
        return kernel.text
    from ptxfactory.harness.ptx_ir import mark_ptx_hot_loops

    return mark_ptx_hot_loops(kernel.text)


def spec_text(spec: KernelSpec) -> str:
    """The spec as the roles see it: arguments, launch and its policy, the sizes checked and timed, tolerances.
    (Never the held-out sizes: the job draws them itself.)"""
    lines = []
    for a in spec.args:
        if a.is_buffer:
            lines.append(f"- {a.name}: {a.role} {a.dtype.value}[{', '.join(map(str, a.shape or []))}]")
        else:
            lines.append(f"- {a.name}: scalar {a.dtype.value} = {a.value}")
    lines.append(f"- launch: grid={spec.launch.grid} block={spec.launch.block} shared_mem={spec.launch.shared_mem} "
                 f"policy={spec.launch.policy}")
    lines.append(f"- checked at sizes {spec.check.sizes} against {spec.check.reference} "
                 f"(rtol {spec.check.rtol:g}, atol {spec.check.atol:g}, fast math {'allowed' if spec.check.fast_math else 'not allowed'})")
    lines.append(f"- timed at sizes {spec.bench.sizes} (geometric mean of the times)")
    return "\n".join(lines)


def resources_text(row: CandidateRow | None) -> str:
    """ptxas's report (registers, shared, local memory, spills) of a row, or why there is none."""
    if row is None or row.resources is None:
        return "not available (not compiled yet)"
    r = row.resources
    return (f"{r.registers} registers/thread, {r.shared_bytes} B static shared/block, {r.local_bytes} B local/thread, "
            f"{r.spill_stores} B spill stores, {r.spill_loads} B spill loads")


def bound(pct_of_copy: float, spills: int) -> str:
    """What most likely bounds a kernel at ``pct_of_copy`` percent of the copy bandwidth."""
    if pct_of_copy >= 70:
        return "memory bandwidth (near the copy rate: only fewer bytes can help)"
    if spills:
        return "register spills and latency (local memory traffic)"
    if pct_of_copy >= 30:
        return "partly bandwidth, partly latency (too few bytes in flight: wider or more loads per thread)"
    return "latency or parallelism, not bandwidth (uncoalesced access, too few threads or blocks, serial dependence)"


def roofline_text(best: CandidateRow | None, facts: GpuFacts | None) -> str:
    """GB/s and % of the measured copy bandwidth per timed size of the best so far, and what bounds it."""
    if best is None or not isinstance(best.result, Measured):
        return "not measured yet (no GPU, or nothing verified so far)"
    res = best.result
    lines = [f"best so far: {best.candidate.description} ({res.speedup:.2f}x the original"
             + (", SIMULATED timings: no GPU ran it" if res.simulated else "") + ")"]
    copy = f"{facts.copy_gbps:.0f} GB/s" if facts and facts.copy_gbps else "unknown"
    spills = best.resources.spill_stores if best.resources else 0
    for t in res.timings:
        size = ", ".join(f"{k}={v}" for k, v in t.size.items())
        lines.append(f"- {size}: {t.median_us:.1f} us, {t.gbps:.0f} GB/s = {t.pct_of_copy:.0f}% of copy ({copy}); "
                     f"bound by {bound(t.pct_of_copy, spills)}")
    return "\n".join(lines)


def rejected_text(rows: list[CandidateRow], baseline_key: str | None) -> str:
    """The latest candidates that failed (compile errors, static checks, verification), one line each."""
    failed = [r for r in rows if not r.verified and r.result.outcome != "not_run" and r.key != baseline_key]
    if not failed:
        return "none"
    return "\n".join(f"- [{r.candidate.generator}] {r.candidate.description}: {r.reason[:240]}" for r in failed[-MAX_REJECTED:])


def lessons_text(lessons: list[dict]) -> str:
    """Past agent lessons (most relevant first), one line each with their outcome and measured effect."""
    if not lessons:
        return "none yet"
    out = []
    for lesson in lessons[:MAX_LESSONS]:
        effect = f"{lesson['effect']:.2f}x" if lesson.get("effect") else "no speedup measured"
        text = lesson.get("lesson") or ""
        where = "" if lesson.get("same_class", True) else f" (on {lesson['kernel_class']})"
        out.append(f"- {lesson['idea']} -> {lesson['outcome']}, {effect}{where}" + (f": {text}" if text else ""))
    return "\n".join(out)


async def sass_text(candidate: Candidate, arch: str, pool=None, timeout_s: float = SASS_TIMEOUT_S) -> str:
    """The SASS summary of ``candidate`` (instruction mix of the whole kernel and of its hot loops, the hot loops'
    instructions; bounded: :func:`ptxfactory.harness.sass.candidate_summary`), compiled and disassembled in the compile
    ``pool``'s processes (default: the shared one), never on the event loop; or ``SASS unavailable: WHY``."""
    from ptxfactory.harness.compile_pool import shared_pool
    from ptxfactory.harness.sass import candidate_summary

    try:
        return await asyncio.wait_for((pool or shared_pool()).run(candidate_summary, candidate, arch), timeout_s)
    except asyncio.TimeoutError:
        return f"SASS unavailable: compiling and disassembling took more than {timeout_s:g} s"
    except Exception as exc:  # noqa: BLE001: evidence is never worth a failed plan
        return f"SASS unavailable: {type(exc).__name__}: {str(exc)[:200]}"


Profiler = Callable[[Candidate], Awaitable[Any]]


def profiler(backend, pool, spec: KernelSpec, timeout_s: float = COUNTERS_TIMEOUT_S) -> Profiler | None:
    """What the job gives the arms (:attr:`~.arm.JobView.profile`): a coroutine function that compiles a candidate in
    ``pool`` and has ``backend`` read its Nsight Compute counters (``backend.profile``: a worker-side run with a time
    limit, while no evaluation runs), returning :class:`~ptxfactory.harness.ncu.Counters`. None when the backend
    cannot profile (no GPU, a simulated device). A lasting refusal (no ncu, counters refused on this host) is
    remembered: ncu is not tried again in the job."""
    check = getattr(backend, "profile", None)
    if check is None:
        return None
    refused: list[Any] = []

    async def profile(candidate: Candidate):
        from ptxfactory.harness.ncu import Counters

        if refused:
            return refused[0]
        compiled = (await pool.prepare(candidate, spec, static=False)).compiled
        if isinstance(compiled, CompileFailed):
            return Counters(problem=f"{candidate.description} does not compile")
        counters = await check(spec, compiled, timeout_s)
        if counters.lasting:
            refused.append(counters)
        return counters

    return profile


async def counters_text(profile: Profiler | None, candidate: Candidate) -> str:
    """Nsight Compute's counters of ``candidate`` (one line each, a fixed number of lines), or one line saying why
    there are none (no GPU, no ncu, counters refused, a failure)."""
    if profile is None:
        return "counters unavailable: no GPU in this job (Nsight Compute needs one)"
    try:
        counters = await profile(candidate)
    except Exception as exc:  # noqa: BLE001: evidence is never worth a failed plan
        return f"counters unavailable: {type(exc).__name__}: {str(exc)[:200]}"
    return "\n".join(f"- {line}" for line in counters.lines())
