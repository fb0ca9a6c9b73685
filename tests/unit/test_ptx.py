"""PTX as a source (harness/ptx.py, ptx_ir.py, ptx_scaffold.py), its passes (search/generators/ptx_*.py) and the
views (daemon/show.py), on the CPU: every pass's output must be PTX that ptxas accepts for sm_90a."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.cuda_paths import tool_path
from ptxfactory.harness.ptx import PtxSyntaxError, is_ptx, parse_entries, run_ptxas
from ptxfactory.harness.ptx_ir import alignments, alignments_at, mark_ptx_hot_loops, param_origins, statements
from ptxfactory.harness.scaffold import ScaffoldError, plan_spec
from ptxfactory.harness.source import SignatureMismatch, check_signature, find_kernel, find_kernels
from ptxfactory.protocol import CompileFailed, parse_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators.ptx_transform import PtxTransformGenerator, transform_entry
from ptxfactory.search.generators.ptx_tune import PtxTuneGenerator
from ptxfactory.search.strategy import load_job, original_candidate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rowsum_ptx" / "rowsum_ptx.ptx"
needs_ptxas = pytest.mark.skipif(tool_path("ptxas") is None, reason="no ptxas")

# y[i..i+3] = 2 * x[i..i+3], four scalar loads and stores per thread (N % 4 == 0; x and y 16-byte aligned)
SCALE4 = """\
.version 8.0
.target sm_90a
.address_size 64

// a helper entry first: the parser must keep both
.visible .entry other(.param .u32 n) { ret; }

.visible .entry scale4(
    .param .u64 .ptr .global .align 16 y,
    .param .u64 x,
    .param .s32 N
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<9>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [y];
    ld.param.u64 %rd2, [x];
    ld.param.s32 %r1, [N];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    shl.b32 %r5, %r5, 2;
    setp.ge.s32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd3, %rd2;
    cvta.to.global.u64 %rd4, %rd1;
    mul.wide.s32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f1, [%rd6];
    ld.global.f32 %f2, [%rd6+4];
    ld.global.f32 %f3, [%rd6+8];
    ld.global.f32 %f4, [%rd6+12];
    add.f32 %f5, %f1, %f1;
    add.f32 %f6, %f2, %f2;
    add.f32 %f7, %f3, %f3;
    add.f32 %f8, %f4, %f4;
    st.global.f32 [%rd7], %f5;
    st.global.f32 [%rd7+4], %f6;
    st.global.f32 [%rd7+8], %f7;
    st.global.f32 [%rd7+12], %f8;
DONE:
    ret;
}
"""

SCALE4_SPEC = """
[kernel.scale4]
args = [
  { name = "y", role = "out", dtype = "f32", shape = ["N"], align = 16 },
  { name = "x", role = "in", dtype = "f32", shape = ["N"], init = "normal", align = ALIGN_X },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
constraints = ["N % 4 == 0"]
launch = { grid = ["cdiv(N, 512)"], block = [128], policy = "free" }
[kernel.scale4.check]
sizes = [{ N = 1024 }]
[kernel.scale4.bench]
sizes = [{ N = 1048576 }]
"""


def scale4_spec(align_x: int = 16):
    return parse_spec(SCALE4_SPEC.replace("ALIGN_X", str(align_x)), "scale4.ptx.toml").kernels["scale4"]


def test_is_ptx_and_entries_with_params_types_alignment():
    """A module is PTX by its .version (comments first are fine); entries in order, prototypes and .func left out;
    params with type, .ptr, state space, .align, line."""
    assert is_ptx("// header\n/* c */\n  .version 8.0\n") and not is_ptx('extern "C" __global__ void k() {}')
    entries = parse_entries(SCALE4 + "\n.visible .entry proto(.param .u32 a);\n.func f() { ret; }\n")
    assert [e.name for e in entries] == ["other", "scale4"]
    y, x, n = entries[1].params
    assert (y.name, y.type, y.ptr, y.space, y.align, y.line) == ("y", "u64", True, "global", 16, 9)
    assert (x.ptr, x.align, x.may_be_pointer) == (False, None, True)
    assert (n.type, n.may_be_pointer, n.bits) == ("s32", False, 32)
    kdef = find_kernel(SCALE4, "scale4")
    assert kdef.language == "ptx" and SCALE4.encode()[kdef.start_byte:kdef.end_byte].decode() == kdef.text
    assert kdef.text.startswith(".visible .entry scale4(") and kdef.text.endswith("}")
    assert [p.type for p in kdef.params] == [".u64", ".u64", ".s32"] and kdef.name_line == 7


def test_unclosed_entry_is_a_syntax_error_with_its_line():
    with pytest.raises(PtxSyntaxError, match="line 3: .entry k: the body is not closed"):
        parse_entries(".version 8.0\n.target sm_90a\n.visible .entry k() {\n ret;\n")
    assert find_kernels(".version 8.0\n.visible .entry k() {\n") == []  # the editor sees no kernel, nothing raises


def test_signature_check_names_the_key():
    """Names, buffer vs 64-bit address, scalar dtypes, and .ptr .align above the spec's align."""
    kdef = find_kernel(SCALE4, "scale4")
    check_signature(scale4_spec(), kdef)
    with pytest.raises(SignatureMismatch) as exc:
        check_signature(parse_spec(SCALE4_SPEC.replace("ALIGN_X", "4").replace(", align = 16 }", " }"), "s.toml").kernels["scale4"], kdef)
    assert exc.value.key == "args[0].align" and ".align 16" in str(exc.value)
    with pytest.raises(SignatureMismatch) as exc:
        check_signature(parse_spec(SCALE4_SPEC.replace("ALIGN_X", "4").replace('dtype = "i32"', 'dtype = "f32"'), "s.toml").kernels["scale4"], kdef)
    assert exc.value.key == "args[2].dtype"
    with pytest.raises(SignatureMismatch) as exc:
        check_signature(parse_spec(SCALE4_SPEC.replace("ALIGN_X", "4").replace('name = "N", role', 'name = "n", role')
                                   .replace('value = "N"', 'value = "N"'), "s.toml").kernels["scale4"], kdef)
    assert exc.value.key == "args[2].name"


def test_scaffold_from_an_entry_validates_and_marks_todos():
    """Roles from the accesses (y stored: out; x loaded: in), dtypes from their types, align from .ptr .align,
    N a size symbol; the result loads, its header naming the guessed keys; an aggregate parameter is refused with
    FILE:LINE."""
    added = plan_spec(SCALE4, "/tmp/scale4.ptx", ["scale4"])
    spec = parse_spec(added.text, "scale4.ptx.toml").kernels["scale4"]
    assert [(a.name, a.role, a.dtype.value, a.align) for a in spec.args] == [
        ("y", "out", "f32", 16), ("x", "in", "f32", None), ("N", "scalar", "i32", None)]
    assert any("launch" in m for _line, m in added.todos)
    head = " ".join(added.text.split("\n[kernel.")[0].replace("#", " ").split())  # every shape and the launch guessed
    assert "runs as written" not in head and "[kernel.scale4] args.y.shape, args.x.shape, launch." in head
    check_signature(spec, find_kernel(SCALE4, "scale4"))
    bad = SCALE4.replace(".param .s32 N", ".param .align 8 .b8 N[16]")
    with pytest.raises(ScaffoldError, match=r"scale4.ptx:11: .param N is an aggregate"):
        plan_spec(bad, "/tmp/scale4.ptx", ["scale4"])


def test_alignment_analysis_uses_spec_align_and_constraints():
    """x + 4 * (4 * tid) is 16-byte aligned given align = 16; with align = 4 only 4."""
    e = parse_entries(SCALE4)[1]
    stmts = statements(e.text, e.text.index("{") + 1, len(e.text) - 1)
    assert param_origins(stmts)["%rd6"] == frozenset({"x", "N"}) or "x" in param_origins(stmts)["%rd6"]
    load = next(i for i, s in enumerate(stmts) if s.opcode == "ld.global.f32")
    assert alignments_at(stmts, {"y": 16, "x": 16, "N": 4})[load]["%rd6"] == 16  # %r5 = 4 * (...) just above
    assert alignments_at(stmts, {"y": 16, "x": 4, "N": 4})[load]["%rd6"] == 4
    assert alignments(stmts, {"y": 16, "x": 16, "N": 4})["%r5"] == 1  # defined twice: the whole body knows less


@needs_ptxas
def test_ptxas_errors_are_mapped_to_their_lines():
    """A bad instruction: CompileFailed whose log starts with KERNEL.ptx(LINE): error: ptxas: ..."""
    spec, source = load_job(EXAMPLE, "rowsum_ptx")
    bad = source.replace("add.f32             %f1, %f1, %f2;", "add.f32             %f1, %f1, %nope;")
    line = next(i for i, ln in enumerate(bad.splitlines(), 1) if "%nope" in ln)
    out = compile_candidate(original_candidate(spec, bad), spec.arch)
    assert isinstance(out, CompileFailed) and out.compiler == "ptxas"
    assert out.log.splitlines()[0].startswith(f"rowsum_ptx.ptx({line}): error: ptxas: ")
    garbage = run_ptxas(".version 8.0\n.target sm_90a\n.address_size 64\nthis is not ptx\n", "sm_90a")
    assert garbage.cubin is None and garbage.returncode not in (0, None) and "line 4" in garbage.log


@needs_ptxas
def test_the_original_compiles_with_ptxas_and_bad_options_are_refused():
    spec, source = load_job(EXAMPLE, "rowsum_ptx")
    cand = original_candidate(spec, source)
    out = compile_candidate(cand, spec.arch)
    assert isinstance(out, Compiled) and out.compiler == "ptxas" and out.lowered_name == "rowsum_ptx"
    assert out.resources is not None and out.resources.registers > 0 and out.cubin[:4] == b"\x7fELF"
    refused = compile_candidate(cand.model_copy(update={"options": ["--use_fast_math"]}), spec.arch)
    assert isinstance(refused, CompileFailed) and "not allowed" in refused.log


@needs_ptxas
@pytest.mark.parametrize("pass_name,setting,expect", [
    ("ld_cop", "ca", "ld.global.ca.f32"), ("ld_cop", "cg", "ld.global.cg.f32"), ("ld_cop", "cs", "ld.global.cs.f32"),
    ("ld_cop", "lu", "ld.global.lu.f32"), ("st_cop", "cg", "st.global.cg.f32"), ("st_cop", "cs", "st.global.cs.f32"),
    ("st_cop", "wt", "st.global.wt.f32"), ("nc", "", "ld.global.nc.f32"),
    ("vectorize", 4, "ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd6]"), ("vectorize", 2, "st.global.v2.f32 [%rd7+8], {%f7, %f8}"),
])
def test_each_pass_gives_ptx_that_ptxas_accepts(pass_name, setting, expect):
    kdef = find_kernel(SCALE4, "scale4")
    new = transform_entry(kdef, scale4_spec(), pass_name, setting)
    assert new is not None and expect in new
    module = SCALE4.replace(kdef.text, new)
    run = run_ptxas(module, "sm_90a")
    assert run.cubin is not None, run.log


def test_vectorize_needs_the_proof_and_nc_needs_an_input():
    """x only 4-byte aligned: its loads stay scalar (the stores to y, 16-byte aligned, still merge); .nc only on x."""
    kdef = find_kernel(SCALE4, "scale4")
    weak = transform_entry(kdef, scale4_spec(align_x=4), "vectorize", 4)
    assert "ld.global.v4" not in weak and "st.global.v4.f32 [%rd7], {%f5, %f6, %f7, %f8}" in weak
    nc = transform_entry(kdef, scale4_spec(), "nc", "")
    assert nc.count("ld.global.nc.f32") == 4 and "st.global.nc" not in nc


@needs_ptxas
def test_generators_on_the_example_compile_and_cuda_gets_none():
    """ptx_transform and ptx_tune on rowsum_ptx: every candidate assembles; nothing for a CUDA kernel."""
    spec, source = load_job(EXAMPLE, "rowsum_ptx")
    original = original_candidate(spec, source)
    ctx = GenContext(spec=spec, source=source, kernel=find_kernel(source, "rowsum_ptx"), original=original)
    cands = PtxTransformGenerator().propose(ctx) + PtxTuneGenerator().propose(ctx)
    assert {c.params.get("pass") for c in cands} >= {"nc", "ld_cop", "st_cop"} and any("block" in c.params for c in cands)
    assert len({c.key for c in cands}) == len(cands)
    for c in cands:
        assert isinstance(compile_candidate(c, spec.arch), Compiled), c.description
    cuda = Path(__file__).resolve().parents[2] / "examples" / "rowsum" / "rowsum.cu"
    cspec, csrc = load_job(cuda, "rowsum")
    cctx = GenContext(spec=cspec, source=csrc, kernel=find_kernel(csrc, "rowsum"), original=original_candidate(cspec, csrc))
    assert PtxTransformGenerator().propose(cctx) == [] and PtxTuneGenerator().propose(cctx) == []


def test_hot_loop_marks_the_innermost_loop_only():
    text = "OUTER:\n  a;\nINNER:\n  b;\n  @%p bra INNER;\n  @%q bra OUTER;\nSPIN:\n  bra SPIN;\n"
    marked = mark_ptx_hot_loops(text)
    lines = marked.splitlines()
    assert lines[2].startswith("// ptxfactory: hot loop begins (innermost loop: INNER") and lines[3] == "INNER:"
    assert lines[6] == "// ptxfactory: hot loop ends (INNER)" and marked.count("hot loop begins") == 1
