"""A PTX kernel where no ptxas is found (issue 14): the driver's JIT route, on the CPU.

ptxas is hidden by monkeypatching the finder (``harness.cuda_paths.tool_path``); the compile pool runs on a thread of
this process (``CompilePool(workers=0)``) so that the patch reaches it. Asserted: the route says why; the "compiled"
original is the PTX image (the module's text, NUL-terminated), without resources, built by ``"driver"``, with a
warning at the entry's line that the editor shows as a diagnostic; what the CPU can still refuse is refused with a
reason at its line; the static checks still scan the PTX; a compile-only job runs and records ``compiler = "driver"``.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ptxfactory.daemon.analysis import compile_messages
from ptxfactory.harness import cuda_paths
from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.compile_pool import CompilePool, prepare
from ptxfactory.harness.ptx import DRIVER_JIT, parse_entries, ptx_route, run_ptxas
from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import CompileFailed, NotRun
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators.ptx_transform import PtxTransformGenerator
from ptxfactory.search.strategy import load_job, optimise, original_candidate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rowsum_ptx" / "rowsum_ptx.ptx"
REAL_TOOL_PATH = cuda_paths.tool_path


@pytest.fixture
def no_ptxas(monkeypatch: pytest.MonkeyPatch) -> None:
    """ptxas cannot be found; every other tool is found as before."""
    monkeypatch.setattr(cuda_paths, "tool_path", lambda name: None if name == "ptxas" else REAL_TOOL_PATH(name))


def entry_line(source: str) -> int:
    """1-based line of the example's ``.entry`` name."""
    return parse_entries(source)[0].name_line + 1


def test_the_route_is_the_driver_and_says_why(no_ptxas):
    route = ptx_route()
    assert route.compiler == DRIVER_JIT and route.ptxas is None
    assert "no ptxas" in route.why and "driver JIT-compiles" in route.why
    assert run_ptxas(EXAMPLE.read_text(), "sm_90a").returncode == -1


def test_the_route_is_ptxas_when_it_is_found(monkeypatch):
    monkeypatch.setattr(cuda_paths, "tool_path", lambda name: "/opt/somewhere/ptxas" if name == "ptxas" else None)
    route = ptx_route()
    assert (route.compiler, route.ptxas, route.why) == ("ptxas", "/opt/somewhere/ptxas", None)


def test_the_original_becomes_a_ptx_image_with_a_warning_at_the_entry(no_ptxas):
    spec, source = load_job(EXAMPLE, "rowsum_ptx")
    out = compile_candidate(original_candidate(spec, source), spec.arch)
    assert isinstance(out, Compiled), out
    assert out.compiler == DRIVER_JIT and out.resources is None and out.lowered_name == "rowsum_ptx"
    assert out.cubin == source.encode() + b"\0" and out.cubin[:4] != b"\x7fELF"
    line = entry_line(source)
    assert out.log.startswith(f"rowsum_ptx.ptx({line}): warning: ptxas not run: no ptxas found")
    # what the editor shows: one warning on the .entry line (daemon/analysis.py keeps warnings of a compiled kernel)
    messages = compile_messages(out.log, "rowsum_ptx.ptx", 0)
    assert [(m.line, m.severity) for m in messages] == [(line - 1, "warning")] and "driver" in messages[0].text


def test_the_editor_analysis_shows_the_warning_and_no_resources(no_ptxas, monkeypatch, tmp_path):
    """daemon/analysis.py on the example's text: the kernel compiles (the driver's route), with no resources and one
    warning on the entry's line, which diagnostics.py publishes and hover explains ("no ptxas report")."""
    from ptxfactory.daemon.analysis import analyse_now
    from ptxfactory.harness import compile_pool

    monkeypatch.setattr(compile_pool, "_SHARED", CompilePool(workers=0))  # the patched finder must reach the compiler
    for name in ("rowsum_ptx.ptx", "rowsum_ptx.ptx.toml", "ref.py"):
        (tmp_path / name).write_text((EXAMPLE.parent / name).read_text())
    text = EXAMPLE.read_text()
    kernel = analyse_now(tmp_path / "rowsum_ptx.ptx", text).kernels["rowsum_ptx"]
    assert not kernel.failed and kernel.mismatch is None and kernel.resources is None
    assert [(m.line, m.severity) for m in kernel.messages] == [(entry_line(text) - 1, "warning")]
    assert "ptxas not run" in kernel.messages[0].text and "driver" in kernel.messages[0].text


def test_what_the_cpu_can_still_refuse_is_refused_with_its_reason(no_ptxas):
    spec, source = load_job(EXAMPLE, "rowsum_ptx")
    cand = original_candidate(spec, source)

    unclosed = source.rstrip().removesuffix("}")  # the entry's body is not closed
    out = compile_candidate(cand.model_copy(update={"source": unclosed}), spec.arch)
    assert isinstance(out, CompileFailed) and out.compiler == DRIVER_JIT
    assert out.log.startswith("rowsum_ptx.ptx(") and "the body is not closed" in out.log and "no ptxas" in out.log

    renamed = source.replace(".entry rowsum_ptx(", ".entry other_name(")
    out = compile_candidate(cand.model_copy(update={"source": renamed}), spec.arch)
    assert isinstance(out, CompileFailed) and "no .entry rowsum_ptx" in out.log and "other_name" in out.log

    out = compile_candidate(cand.model_copy(update={"options": ["-O1"]}), spec.arch)
    assert isinstance(out, CompileFailed) and out.log.startswith("ptxas options -O1 need ptxas")

    out = compile_candidate(cand.model_copy(update={"options": ["--use_fast_math"]}), spec.arch)
    assert isinstance(out, CompileFailed) and "not allowed" in out.log  # the option check comes first, as with ptxas


def test_static_checks_still_scan_the_ptx_and_digests_tell_candidates_apart(no_ptxas):
    spec, source = load_job(EXAMPLE, "rowsum_ptx")
    original = original_candidate(spec, source)
    ctx = GenContext(spec=spec, source=source, kernel=find_kernel(source, "rowsum_ptx"), original=original)
    cands = PtxTransformGenerator().propose(ctx)[:3]
    assert len(cands) == 3
    prepared = [prepare(c, spec) for c in cands]
    for c, p in zip(cands, prepared):
        assert isinstance(p.compiled, Compiled) and p.compiled.compiler == DRIVER_JIT, c.description
        assert p.finding is None, (c.description, p.finding)
    assert len({p.binary for p in prepared}) == 3

    trap = source.replace("mov.u32             %r5, %tid.x;", "mov.u32             %r5, %tid.x;\n    trap;")
    assert trap != source
    refused = prepare(original.model_copy(update={"source": trap}), spec)
    assert refused.finding is not None and refused.finding.check == "static_binary" and "trap" in refused.finding.reason

    written = source.replace(".visible .entry", ".global .u32 ptxf_state;\n.visible .entry", 1).replace(
        "mov.u32             %r5, %tid.x;", "mov.u32             %r5, %tid.x;\n    st.global.u32       [ptxf_state], %r5;")
    refused = prepare(original.model_copy(update={"source": written}), spec)
    assert refused.finding is not None and "ptxf_state" in refused.finding.reason


@pytest.mark.skipif(REAL_TOOL_PATH("ptxas") is None, reason="no ptxas to cross-check the image")
def test_the_image_is_the_ptx_that_ptxas_would_have_assembled(monkeypatch):
    """The image carries the module unchanged: with the real ptxas it still assembles for the spec's arch."""
    spec, source = load_job(EXAMPLE, "rowsum_ptx")
    monkeypatch.setattr(cuda_paths, "tool_path", lambda name: None if name == "ptxas" else REAL_TOOL_PATH(name))
    out = compile_candidate(original_candidate(spec, source), spec.arch)
    monkeypatch.undo()
    ptx = out.cubin.rstrip(b"\0").decode()
    assert out.compiler == DRIVER_JIT and ptx == source
    run = run_ptxas(ptx, spec.arch)
    assert run.cubin is not None, run.log


def test_a_compile_only_job_runs_without_ptxas(no_ptxas):
    """No GPU and no ptxas: the job still runs; every row is the driver's; ptx_tune proposes no ptxas options (the
    driver takes none), so no candidate fails to compile."""
    async def go():
        return await optimise(EXAMPLE, "rowsum_ptx", backend=None, use_lessons=False, max_candidates=40,
                              pool=CompilePool(workers=0))

    summary = asyncio.run(go())
    assert summary.state == "compile_only", summary.message
    assert all(r.result.compiler == DRIVER_JIT for r in summary.rows), [(r.candidate.description, r.result.compiler) for r in summary.rows]
    ran = [r for r in summary.rows if isinstance(r.result, NotRun)]
    assert summary.row(summary.baseline_key) in ran and any(r.candidate.generator == "ptx_transform" for r in ran)
    assert all(r.result.resources is None for r in ran)
    assert not any(r.candidate.options for r in summary.rows), [r.candidate.description for r in summary.rows if r.candidate.options]
    assert not [r for r in summary.rows if isinstance(r.result, CompileFailed)]  # (an option that came anyway: refused above)


def test_no_sass_without_ptxas_says_why(no_ptxas):
    """``show --sass`` and the planner's SASS evidence ask ``compiled_for``: without ptxas there is no cubin, and the
    reason says so instead of a disassembler's complaint about a file that is not ELF."""
    from ptxfactory.harness.sass import SassError, compiled_for

    spec, source = load_job(EXAMPLE, "rowsum_ptx")
    with pytest.raises(SassError, match="no SASS here: no ptxas was found"):
        compiled_for(original_candidate(spec, source), spec.arch)
