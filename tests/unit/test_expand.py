"""CPU tests of expand.py: the transform passes see through the file's function-like macros and one-line
``__device__`` helpers (the unit's text is the expanded kernel), and a macro that cannot be expanded leaves the
kernel to no pass that reasons about its accesses.

The kernels are the generality trial's patterns, written small: a write through ``#define OUT(r, c) y[...]`` with a
running recurrence (rowpar must not split it, restrict must not make ``y`` const), a row loop indexed through
``IDX(r, c)``, helpers ``ld(p, i)`` and ``gelu(x)``, a helper with its own loop, and a ``##`` macro. Every
candidate built from an expanded unit compiles with NVRTC in the user's file (macros and helpers still defined).
"""
from __future__ import annotations

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, refusals
from ptxfactory.search.generators.transform.base import OPAQUE_NOTE
from ptxfactory.search.generators.transform.expand import expand_kernel
from ptxfactory.search.generators.transform.fast_math import FastMathPass
from ptxfactory.search.generators.transform.restrict import RestrictPass
from ptxfactory.search.generators.transform.rowpar import RowParallelPass

from test_transform import make_ctx, spec_for, unit

ROW_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""


def row_spec(name, args=ROW_ARGS, sizes="[{ M = 7, N = 100 }]", **kw):
    return spec_for(name, args, grid='["cdiv(M, 128)"]', sizes=sizes, **kw)


def rowpar(lanes="auto"):
    return next(p for p in PASSES if isinstance(p, RowParallelPass) and p.lanes == lanes)


def candidate_compiles(source: str, spec, chain) -> str:
    """The generator's candidate for ``chain`` on ``source`` compiles in the user's file; returns its kernel text."""
    from ptxfactory.search.generators.transform import run_chain, unit_from_context

    ctx = make_ctx(source, spec)
    out = run_chain(unit_from_context(ctx), chain)
    cand = TransformGenerator().candidate(ctx, out, chain)
    assert cand is not None
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    return cand.kernel_text


def expand(source: str, name: str) -> tuple[str, list[str]]:
    from ptxfactory.harness.source import find_kernel

    k = find_kernel(source, name)
    return expand_kernel(source, k.text, k.start_byte)


# ------------------------------------------------------------------- C1: a write through a macro, with a recurrence

RECURRENCE = """
#define OUT(r, c) y[(size_t)(r) * N + (c)]
extern "C" __global__ void mac(const float* x, float* y, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    OUT(row, 0) = x[(size_t)row * N];
    for (int j = 1; j < N; ++j)
        OUT(row, j) = y[(size_t)row * N + j - 1] + x[(size_t)row * N + j];
}
"""


def test_macro_write_with_a_recurrence_is_not_split():
    spec = row_spec("mac")
    u = unit(RECURRENCE, spec)
    assert OPAQUE_NOTE not in u.notes
    assert "y[(size_t)(row) * N + (j)] = y[(size_t)row * N + j - 1]" in u.text  # what the compiler sees
    assert "OUT(" not in u.text
    for p in PASSES:
        if isinstance(p, RowParallelPass):
            why = p.why_not(u)
            assert why is not None and "pointer passed" not in why
    assert "two iterations may touch one element" in rowpar().why_not(u)  # the dependence, seen
    # restrict sees y written: __restrict__ on both, const only on x
    r = RestrictPass().apply(u)
    assert "const float* __restrict__ x" in r.text and "float* __restrict__ y" in r.text
    assert "const float* __restrict__ y" not in r.text
    candidate_compiles(RECURRENCE, spec, [RestrictPass()])


# ------------------------------------------------------------------- a macro-indexed row loop without dependence

IDX_ROWS = """
#define IDX(r, c) ((size_t)(r) * N + (c))
#define EPS 1e-6f
extern "C" __global__ void rms(const float* x, float* y, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < M) {
        float ss = 0.f;
        for (int c = 0; c < N; ++c) {
            float v = x[IDX(r, c)];
            ss += v * v;
        }
        float inv = 1.0f / sqrtf(ss / N + EPS);
        for (int c = 0; c < N; ++c)
            y[IDX(r, c)] = x[IDX(r, c)] * inv;
    }
}
"""


@pytest.mark.parametrize("lanes", ["auto", 32])
def test_macro_indexed_rows_are_split_and_compile(lanes):
    spec = row_spec("rms")
    u = unit(IDX_ROWS, spec)
    assert "y[((size_t)(r) * N + (c))] = x[((size_t)(r) * N + (c))] * inv;" in u.text
    assert "sqrtf(ss / N + EPS)" in u.text  # an object-like constant stays
    p = rowpar(lanes)
    assert p.why_not(u) is None
    text = candidate_compiles(IDX_ROWS, spec, [p])
    assert "ptxf_lane" in text and "IDX(" not in text


# ------------------------------------------------------------------- helpers: ld(p, i), gelu(x)

LD_ARGS = """
  { name = "x", role = "in", dtype = "f16", shape = ["M", "N"] },
  { name = "g", role = "in", dtype = "f16", shape = ["N"] },
  { name = "y", role = "out", dtype = "f16", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
LD = """
#include <cuda_fp16.h>
__device__ float ld(const __half* p, size_t i) { return __half2float(p[i]); }

extern "C" __global__ void scale_h(const __half* x, const __half* g, __half* y, int M, int N)
{
    size_t row = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M) {
        float ss = 0.0f;
        for (size_t i = 0; i < N; i++)
            ss += ld(x, row * N + i) * ld(x, row * N + i);
        float inv = rsqrtf(ss / N + 1e-5f);
        for (size_t i = 0; i < N; i++)
            y[row * N + i] = __float2half(ld(x, row * N + i) * inv * ld(g, i));
    }
}
"""


def test_ld_helper_inlined_and_rowpar_applies():
    spec = row_spec("scale_h", LD_ARGS)
    u = unit(LD, spec)
    assert "ld(" not in u.text.replace("__ldg(", "")
    assert "(__half2float(x[((size_t)(row * N + i))]))" in u.text  # the index converted to the parameter's type once
    assert "(__half2float(g[i]))" in u.text  # same type (size_t i): no cast; float helper of a float: no return cast
    assert rowpar().why_not(u) is None
    r = RestrictPass().apply(u)
    assert "const __half* __restrict__ x" in r.text and "__half* __restrict__ y" in r.text
    candidate_compiles(LD, spec, [RestrictPass(), rowpar()])
    candidate_compiles(LD, spec, [rowpar(32)])


GELU_ARGS = """
  { name = "x", role = "in", dtype = "f16", shape = ["N"] },
  { name = "y", role = "out", dtype = "f16", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
"""
GELU = """
#include <cuda_fp16.h>
#define SQRT_2_OVER_PI 0.7978845608f
#define COEF 0.044715f
__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + tanhf(SQRT_2_OVER_PI * (v + COEF * v * v * v)));
}
extern "C" __global__ void gelu_h(const __half* x, __half* y, int n)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        float v = __half2float(x[idx]);
        y[idx] = __float2half(gelu(v));
    }
}
"""


def test_gelu_helper_inlined_and_fast_math_applies():
    spec = spec_for("gelu_h", GELU_ARGS, fast_math=True)
    u = unit(GELU, spec)
    assert "gelu(" not in u.text
    assert "y[idx] = __float2half((0.5f * v * (1.0f + tanhf(SQRT_2_OVER_PI * (v + COEF * v * v * v)))));" in u.text
    assert FastMathPass().applies(u)
    text = candidate_compiles(GELU, spec, [FastMathPass()])
    assert "ptxf_tanh_approx(" in text


def test_argument_casts_follow_the_parameter_types():
    src = """
__device__ float half_of(float a) { return a * 0.5f; }
__device__ int   idx2(int r, int c, int w) { return r * w + c; }
static __device__ inline float twice(int k) { return 2 * k; }
extern "C" __global__ void k(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[idx2(i, 0, 1)] = half_of(i) + half_of(x[i]) + half_of(2) + half_of(x[i] + 0.5f * twice(i & 1));
}
"""
    text, opaque = expand(src, "k")
    assert not opaque
    assert "((int)(i * 1 + 0))" in text  # an int helper: the return cast (no float arithmetic to prove the type)
    assert "(((float)(i)) * 0.5f)" in text  # int -> float, converted as at the call
    assert "(x[i] * 0.5f)" in text  # x[i] is a float: no cast
    assert "(((float)(2)) * 0.5f)" in text
    # nested: the float argument needs no cast, the int expression i & 1 one to int (its exact type unknown here)
    assert "((x[i] + 0.5f * ((float)(2 * ((int)(i & 1))))) * 0.5f)" in text


# ------------------------------------------------------------------- what stays a call

LOOP_HELPER = """
__device__ float dot_row(const float* a, const float* b, int n) {
    float s = 0.0f;
    for (int d = 0; d < n; ++d) s += a[d] * b[d];
    return s;
}
extern "C" __global__ void dots(const float* x, float* y, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    for (int j = 0; j < N; ++j)
        y[(size_t)row * N + j] = dot_row(x + (size_t)row * N, x + (size_t)j * N, N);
}
"""


def test_a_helper_with_a_loop_stays_a_call():
    spec = row_spec("dots")
    u = unit(LOOP_HELPER, spec)
    assert "dot_row(x + (size_t)row * N, x + (size_t)j * N, N)" in u.text
    assert "pointer passed to 'dot_row'" in rowpar().why_not(u)


def test_reference_parameters_side_effects_and_shadowing_stay_calls():
    src = """
__device__ float get(const float& r) { return r; }
__device__ float sq(float a) { return a * a; }
__device__ float add_g(float a) { return a + g_bias; }
extern "C" __global__ void k(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float g_bias = 1.0f;
    if (i >= n) return;
    int j = i;
    y[i] = get(x[i]) + sq(x[j++]) + sq(foo(i)) + add_g(x[i]);
}
"""
    text, opaque = expand(src, "k")
    assert not opaque
    assert "get(x[i]) + sq(x[j++]) + sq(foo(i)) + add_g(x[i])" in text


# ------------------------------------------------------------------- cpp semantics, kept exactly

def test_expansion_is_the_preprocessors():
    src = """
#define SQ(a) a * a
#define NEG(a) -a
#define TWICE(a) SQ(a) + SQ(a)
#define ROW x[r * n]
extern "C" __global__ void k(const float* x, float* y, int n)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    y[r] = SQ(x[r] + 1.0f) + NEG(-x[r]) + TWICE(2.0f) + ROW;
}
"""
    text, opaque = expand(src, "k")
    assert not opaque
    assert "y[r] = x[r] + 1.0f * x[r] + 1.0f + - -x[r] + 2.0f * 2.0f + 2.0f * 2.0f + x[r * n];" in text


# ------------------------------------------------------------------- a macro that cannot be expanded

PASTE = """
#define AT(p, r, c) p##_buf[(size_t)(r) * N + (c)]
#define OUT(r, c) y[(size_t)(r) * N + (c)]
extern "C" __global__ void mac(const float* x, float* y, int M, int N)
{
    float* y_buf = y;
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    OUT(row, 0) = x[(size_t)row * N];
    for (int j = 1; j < N; ++j)
        AT(y, row, j) = y[(size_t)row * N + j - 1] + x[(size_t)row * N + j];
}
"""


def test_a_pasting_macro_leaves_the_kernel_to_no_pass_that_reads_accesses():
    spec = row_spec("mac")
    u = unit(PASTE, spec)
    assert "OUT(row, 0)" in u.text  # no partial expansion
    assert "'AT'" in u.notes[OPAQUE_NOTE] and "#" in u.notes[OPAQUE_NOTE]
    assert not RestrictPass().applies(u)  # in particular y is never made const
    applied = {p.name for p in PASSES if p.applies(u)}
    assert applied <= {"unroll", "launch_bounds"}
    assert all(not p.applies(u) for p in PASSES if isinstance(p, RowParallelPass))
    assert refusals(u)  # the restructuring passes say why
    gen = TransformGenerator()
    for cand in gen.propose(make_ctx(PASTE, spec)):
        assert "const float* __restrict__ y" not in cand.kernel_text and "ptxf_lane" not in cand.kernel_text


@pytest.mark.parametrize("define", [
    "#define OUT(r, ...) y[(size_t)(r) * N + (__VA_ARGS__)]",
    "#define OUT(r, c) y[(size_t)(r) * N + (c)",
    "#define OUT(r, c) y[(size_t)(r) * N + #c]",
])
def test_unexpandable_macros(define):
    src = RECURRENCE.replace("#define OUT(r, c) y[(size_t)(r) * N + (c)]", define)
    text, opaque = expand(src, "mac")
    assert opaque and "OUT(row, j)" in text


def test_kernels_without_macros_or_helpers_are_unchanged():
    src = RECURRENCE.replace("#define OUT(r, c) y[(size_t)(r) * N + (c)]\n", "").replace("OUT(row, 0)", "y[row * N]") \
        .replace("OUT(row, j)", "y[(size_t)row * N + j]")
    text, opaque = expand(src, "mac")
    assert not opaque
    from ptxfactory.harness.source import find_kernel
    assert text == find_kernel(src, "mac").text


def test_line_numbers_and_guards_and_namespaces():
    src = """
#ifndef KERNELS_CU
#define KERNELS_CU
#ifndef SCALE
#define SCALE 2.0f
#endif
#define OUT(r, c) y[(size_t)(r) * N + (c)]
namespace other { __device__ float twice(float a) { return a * SCALE; } }
__device__ float twice(float a) { return a * SCALE; }
extern "C" __global__ void mac(const float* x, float* y, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    for (int j = 1; j < N; ++j)
        OUT(row,   // the row
            j) = other::twice(x[j]) + twice(x[(size_t)row * N + j - 1]);
    y[row] = 0.0f;
}
#endif
"""
    text, opaque = expand(src, "mac")
    assert not opaque
    assert "y[(size_t)(row) * N + (j)]\n = other::twice(x[j]) + ((float)(x[(size_t)row * N + j - 1] * SCALE));" in text  # SCALE: a macro, of no known type
    from ptxfactory.harness.source import find_kernel
    assert text.count("\n") == find_kernel(src, "mac").text.count("\n")  # the reasons' line numbers hold


def test_integer_constant_macros_read_as_literals_and_others_stay():
    src = """#define KS 3
#define TWO_KS (2 * KS)
#define EPS 1e-5f
#define NAME other_name
extern "C" __global__ void k(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.0f;
    for (int j = 0; j < TWO_KS; ++j) s += x[i * KS + j % KS];
    y[i] = s + EPS;
}
"""
    text, opaque = expand(src, "k")
    assert not opaque
    assert "j < (2 * 3)" in text and "x[i * 3 + j % 3]" in text and "s + EPS" in text
