"""What real kernels include: the toolkit's and CCCL's headers for NVRTC, the standard-header shims, the nvcc
fallback (same arch, a cubin, the ptxas report, recorded as the compiler), and ptxas errors mapped to the
``asm`` statement of inline PTX, in the log and in the editor's diagnostics."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate, compile_ptx, map_ptxas_errors
from ptxfactory.harness.static_checks import check_binary
from ptxfactory.harness.cuda_paths import SHIM_DIR, cuda_include_dirs, nvrtc_include_dirs
from ptxfactory.protocol import Candidate, CompileFailed, LaunchConfig

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(), reason="no nvcc")

BODY = """
__global__ void k(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""


def cand(source: str, name: str = "k", template_args: list | None = None) -> Candidate:
    return Candidate(kernel_name=name, source=source, kernel_text=source, launch=LaunchConfig(grid=[1], block=[32]),
                     template_args=template_args or [])


def test_include_dirs_hold_the_toolkit_and_cccl():
    dirs = [Path(d) for d in cuda_include_dirs()]
    assert any((d / "cuda_bf16.h").exists() for d in dirs)
    assert any((d / "cuda" / "std" / "version").exists() for d in dirs), dirs  # include/cccl (CUDA 13) or the wheel's
    assert nvrtc_include_dirs()[-1] == str(SHIM_DIR)  # the shims last: a toolkit's own headers win


@pytest.mark.parametrize("include,use", [
    ("<cstdint>", "std::int32_t a = n; uint32_t b = (uint32_t)a; std::uint64_t c = b;"),
    ("<stdint.h>", "int32_t a = n; uint64_t c = (uint64_t)a + UINT32_MAX;"),
    ("<cuda/std/cstdint>", "cuda::std::int32_t a = n;"),
    ("<cuda/std/limits>", "float a = cuda::std::numeric_limits<float>::max();"),
    ("<cuda/std/type_traits>", "static_assert(cuda::std::is_same_v<float, float>);"),
    ("<cuda_fp16.h>", "__half a = __float2half(1.0f);"),
    ("<cuda_bf16.h>", "__nv_bfloat16 a = __float2bfloat16(1.0f);"),
    ("<cstddef>", "std::size_t a = n; ptrdiff_t b = a;"),
    ("<climits>", "int a = INT_MAX;"),
])
def test_headers_compile_with_nvrtc(include, use):
    src = f"#include {include}\n" + BODY.replace("if (i < n)", "{ " + use + " }\n    if (i < n)")
    out = compile_candidate(cand(src), "sm_90a", compiler="nvrtc")
    assert isinstance(out, Compiled), out.log
    assert out.compiler == "nvrtc" and out.resources is not None and out.resources.registers > 0


@needs_nvcc
def test_what_nvrtc_cannot_compile_goes_through_nvcc():
    """``<type_traits>`` (the host compiler's) is not NVRTC's: nvcc builds the same arch's cubin, with the ptxas report."""
    src = "#include <type_traits>\n" + BODY.replace("{\n    int i", "{\n    static_assert(std::is_same_v<decltype(n), int>);\n    int i")
    assert isinstance(compile_candidate(cand(src), "sm_90a", compiler="nvrtc"), CompileFailed)
    out = compile_candidate(cand(src), "sm_90a")
    assert isinstance(out, Compiled), out.log
    assert out.compiler == "nvcc"
    assert out.cubin[:4] == b"\x7fELF"
    assert out.lowered_name == "_Z1kPKfPfi"
    assert out.resources is not None and out.resources.registers > 0
    assert "Compiling entry function '_Z1kPKfPfi' for 'sm_90a'" in out.log


@needs_nvcc
def test_a_file_with_host_code_compiles_through_nvcc_and_passes_the_static_checks():
    """A real file: the kernel, a launcher and a main with <cstdio>/<vector>, printf and the CUDA runtime. NVRTC
    refuses host code; nvcc builds the kernel's cubin, and the static checks look at the kernel only."""
    from ptxfactory.harness.static_checks import check_binary, check_source

    src = ("#include <cstdio>\n#include <vector>\n" + BODY +
           "void launch(const float* x, float* y, int n) { k<<<(n + 255) / 256, 256>>>(x, y, n); }\n"
           "int main() { std::vector<float> h(32); float *d; cudaMalloc(&d, 256); launch(d, d + 32, 32);\n"
           "  cudaDeviceSynchronize(); printf(\"%f\\n\", h[0]); return 0; }\n")
    out = compile_candidate(cand(src), "sm_90a")
    assert isinstance(out, Compiled) and out.compiler == "nvcc", getattr(out, "log", "")
    assert check_source(cand(src)) is None and check_binary(cand(src), out.cubin, "sm_90a") is None


@needs_nvcc
def test_nvcc_instantiates_a_kernel_template_and_finds_its_name():
    src = "#include <type_traits>\ntemplate <typename T, int VEC>\n" + BODY.replace("const float*", "const T*").replace("float* y", "T* y") \
        .replace("2.0f *", "(T)VEC *").replace("{\n    int i", "{\n    static_assert(std::is_floating_point_v<T>);\n    int i")
    for targs, lowered in ((["float", 4], "_Z1kIfLi4EEvPKT_PS0_i"), (["double", 2], "_Z1kIdLi2EEvPKT_PS0_i")):
        out = compile_candidate(cand(src, template_args=targs), "sm_90a")
        assert isinstance(out, Compiled) and out.compiler == "nvcc", getattr(out, "log", "")
        assert out.lowered_name == lowered and out.resources is not None


@needs_nvcc
def test_a_source_neither_compiles_fails_with_nvccs_log_and_nvrtcs_reason():
    src = "#include <type_traits>\n" + BODY.replace("2.0f * x[i]", "2.0f * x[j]")
    out = compile_candidate(cand(src), "sm_90a")
    assert isinstance(out, CompileFailed) and out.compiler == "nvcc"
    assert 'k.cu(6): error: identifier "j" is undefined' in out.log, out.log
    assert "/tmp" not in out.log  # nvcc's temporary folder is not shown
    assert 'cannot open source file "type_traits"' in out.log  # why nvcc was asked


ASM = """extern "C" __global__ void k(float* x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    float r;
    asm("add.f32 %0, %1, %2;" : "=f"(r) : "f"(v), "l"((long long)n));
    x[i] = r;
}
"""


@pytest.mark.parametrize("compiler", ["nvrtc", pytest.param("nvcc", marks=needs_nvcc)])
def test_a_ptxas_error_is_verbatim_and_mapped_to_the_asm_line(compiler):
    """An inline-PTX operand of the wrong kind (a 64-bit register to add.f32): the front end passes, ptxas refuses.
    The log keeps ptxas's message (it used to arrive as an empty log) and names the asm statement's line."""
    out = compile_candidate(cand(ASM), "sm_90a", compiler=compiler)
    assert isinstance(out, CompileFailed)
    assert "\0" not in out.log
    first = out.log.splitlines()[0]
    assert first.startswith("k.cu(6): error: ptxas: Arguments mismatch for instruction 'add'"), out.log
    assert "add.f32" in first  # the PTX instruction ptxas refused
    assert "ptxas" in out.log and "; error   : Arguments mismatch for instruction 'add'" in out.log  # verbatim


def test_the_table_reason_carries_the_ptxas_message():
    from ptxfactory.protocol.job import CandidateRow

    c = cand(ASM)
    row = CandidateRow(candidate=c, result=compile_candidate(c, "sm_90a"))
    assert row.reason.startswith("compile failed: k.cu(6): error: ptxas: Arguments mismatch for instruction 'add'")


def test_map_ptxas_errors_follows_loc_directives():
    ptx = '\n'.join(['.entry k(', '{', '\t.loc\t1 3 5', '\tmov.u32 %r1, 0;', '\t.loc\t2 9 1', '\tfoo;', '\t.loc\t1 12 5, function_name $L1, inlined_at 1 20 3',
                     '\tadd.f32 %f1, %f2, %rd1;', '}', '\t.file\t1 "/tmp/x/k.cu"', '\t.file\t2 "/usr/include/h.h"'])
    log = ("ptxas application ptx input, line 8; error   : Arguments mismatch for instruction 'add'\n"
           "ptxas application ptx input, line 6; error   : Unknown instruction 'foo'\nptxas fatal   : Ptx assembly aborted due to errors")
    out = map_ptxas_errors(log, ptx, "k.cu").splitlines()
    assert out[0] == "k.cu(12): error: ptxas: Arguments mismatch for instruction 'add' (PTX line 8: add.f32 %f1, %f2, %rd1;)"
    assert out[1].startswith("ptxas error: Unknown instruction 'foo'") and "h.h line 9" in out[1]
    assert out[2:] == log.splitlines()


SPEC_INOUT = ('[kernel.k]\narch = "sm_90a"\nargs = [\n  { name = "x", role = "inout", dtype = "f32", shape = ["N"] },\n'
              '  { name = "n", role = "scalar", dtype = "i32", value = "N" },\n]\n'
              'launch = { grid = ["cdiv(N, 256)"], block = [256], policy = "free" }\n[kernel.k.check]\nsizes = [{ N = 1000 }]\n'
              '[kernel.k.bench]\nsizes = [{ N = 1048576 }]\n')


@needs_nvcc
async def test_the_job_records_which_compiler_built_each_candidate(tmp_path):
    from ptxfactory.search.strategy import optimise

    src = ASM.replace('asm("add.f32 %0, %1, %2;" : "=f"(r) : "f"(v), "l"((long long)n));', "r = v + (float)n;")
    cu = tmp_path / "k.cu"
    cu.write_text(src + "void launch(float* x, int n) { k<<<(n + 255) / 256, 256>>>(x, n); }\n")  # host code: nvcc
    (tmp_path / "k.cu.toml").write_text(SPEC_INOUT)
    summary = await optimise(cu, "k", backend=None, generators=("tune",))
    assert summary.state == "compile_only" and len(summary.rows) > 1
    assert all(r.result.compiler == "nvcc" and r.result.outcome == "not_run" for r in summary.rows), [r.reason for r in summary.rows]
    cu.write_text(src)
    summary = await optimise(cu, "k", backend=None, generators=("tune",))
    assert all(r.result.compiler == "nvrtc" for r in summary.rows)


def test_the_editor_shows_the_ptxas_error_at_the_asm_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXFACTORY_COMPILE_WORKERS", "0")
    from ptxfactory.daemon.analysis import analyse_now
    from ptxfactory.harness import compile_pool

    monkeypatch.setattr(compile_pool, "_SHARED", compile_pool.CompilePool(workers=0))
    cu = tmp_path / "k.cu"
    cu.write_text(ASM)
    (tmp_path / "k.cu.toml").write_text(SPEC_INOUT)
    analysis = analyse_now(cu, ASM)
    assert analysis.spec_error is None, analysis.spec_error
    k = analysis.kernels["k"]
    assert k.failed and k.mismatch is None
    (msg,) = [m for m in k.messages if m.severity == "error"]
    assert msg.line == 5  # 0-based: the asm statement
    assert msg.text.startswith("ptxas: Arguments mismatch for instruction 'add'")
    from ptxfactory.daemon.lsp.diagnostics import diagnostics

    (diag,) = [d for d in diagnostics(analysis, ASM) if d.severity == 1]
    assert diag.range.start.line == 5 and diag.range.end.character == len(ASM.splitlines()[5])
    assert diag.message.startswith("ptxas: Arguments mismatch for instruction 'add' (PTX line ")


def test_the_cstdint_and_typename_examples_compile_with_nvrtc():
    """examples/dequant_int8 includes <cstdint>; examples/scale_bias is a template on its element type. Both
    compile with NVRTC (no nvcc on the GPU machine is needed for them)."""
    from ptxfactory.harness.source import find_kernel
    from ptxfactory.protocol import load_spec, spec_path_for
    from ptxfactory.search.strategy import original_candidate

    root = Path(__file__).resolve().parents[2] / "examples"
    for name, marker in (("dequant_int8", "#include <cstdint>"), ("scale_bias", "template <typename T>")):
        cu = root / name / f"{name}.cu"
        text = cu.read_text()
        assert marker in text
        spec = load_spec(spec_path_for(cu)).kernels[name]
        out = compile_candidate(original_candidate(spec, text), spec.arch, compiler="nvrtc")
        assert isinstance(out, Compiled) and out.compiler == "nvrtc", getattr(out, "log", "")
    assert find_kernel((root / "scale_bias" / "scale_bias.cu").read_text(), "scale_bias").template_types == ("T",)


@pytest.mark.parametrize("include,expr", [
    ("", "-INFINITY"), ("", "NAN + HUGE_VALF + (float)HUGE_VAL"),  # nvcc's implicit <math.h> has them
    ("#include <cfloat>", "-FLT_MAX + FLT_MIN + FLT_EPSILON"), ("#include <float.h>", "(float)(DBL_EPSILON * DBL_MAX / DBL_MAX)"),
    ("#include <cuda/std/cmath>", "-INFINITY + NAN"),  # libcu++ redefines them under NVRTC: identically, no warning
])
def test_what_a_naive_kernel_takes_for_granted_compiles_with_nvrtc(include, expr):
    """``-INFINITY`` and ``NAN`` with no #include (nvcc's implicit headers define them; NVRTC's do not: the prelude
    does, for a source that names them), and ``FLT_MAX`` after <cfloat>/<float.h> (libcu++ leaves it undefined under
    NVRTC: the shims define it), all without falling back to nvcc and without a warning."""
    source = f"{include}\n__global__ void k(float* y) {{ y[threadIdx.x] = {expr}; }}\n"
    out = compile_candidate(cand(source), "sm_90a")
    assert isinstance(out, Compiled) and out.compiler == "nvrtc", getattr(out, "log", "")
    assert "warning" not in out.log, out.log
    # the PTX the static checks scan comes from the same translation unit: a naive softmax's -INFINITY once had
    # every candidate refused ("its compiled code could not be scanned")
    assert ".entry" in compile_ptx(cand(source), "sm_90a")
    assert check_binary(cand(source), out.cubin, "sm_90a") is None


def test_the_prelude_is_given_only_to_a_source_that_names_its_macros():
    from ptxfactory.harness.compile import _nvrtc_options
    from ptxfactory.harness.cuda_paths import PRELUDE

    with_inf = _nvrtc_options("sm_90a", cand(BODY.replace("2.0f", "INFINITY")))
    assert f"--pre-include={PRELUDE}" in with_inf and f"--pre-include={PRELUDE}" not in _nvrtc_options("sm_90a", cand(BODY))
