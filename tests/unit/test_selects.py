"""CPU tests of :mod:`.selects`: an if/else whose branches assign one place, written as one conditional assignment
before the passes read the kernel; what is rewritten, what is left alone, what the passes then take (vectorize on a
leaky ReLU written with if/else), and a g++ run of kernels before and after on the same inputs, bit for bit."""
from __future__ import annotations

import pytest

from ptxfactory.search.generators.transform import PASSES, unit_from_context
from ptxfactory.search.generators.transform import syntax as sx
from ptxfactory.search.generators.transform.selects import if_selects

from _host_cuda import SERIAL_PRELUDE, run_host
from test_transform import make_ctx, spec_for


def _parse(d: bytes):
    f = sx.kernel_function(sx.parse(d).root_node)
    return f.child_by_field_name("body") if f is not None else None


def rewrite(src: str) -> str:
    return if_selects(src.encode(), _parse).decode()


KERNEL = """extern "C" __global__ void k(const float* x, float* y, float* z, float alpha, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        if (v > 0.0f) y[i] = v; else y[i] = alpha * v;
        float r;
        if (v > 1.0f) { r = v * v; } else if (v == 0.0f) r = 0.5f; else r = -1.0f;
        if (v > 2.0f) z[i] += r; else z[i] -= r;
    }
}
"""


def test_each_form_becomes_one_assignment():
    out = rewrite(KERNEL)
    assert "y[i] = (v > 0.0f) ? (float)(v) : (float)(alpha * v);" in out
    # the else-if chain nests
    assert "r = (v > 1.0f) ? (float)(v * v) : (float)((v == 0.0f) ? (float)(0.5f) : (float)(-1.0f));" in out
    assert "if (v > 2.0f) z[i] += r; else z[i] -= r;" in out  # (compound assignments are left alone)
    assert "if (i < n) {" in out  # the guard: several statements


@pytest.mark.parametrize("stmt", [
    "if (v > 3.0f) z[i] = 1.0f; else y[i] = 2.0f;",                 # two places
    "if (v > 3.0f) z[i] = 1.0f;",                                     # no else
    "if (v > 3.0f) { z[i] = 1.0f; y[i] = 0.0f; } else z[i] = 2.0f;",  # two statements
    "if (v > 3.0f) z[n++ % 4] = 1.0f; else z[n++ % 4] = 2.0f;",       # a place with a side effect
    "if constexpr (true) v = 1.0f; else v = 2.0f;",
    "if (v > 3.0f) z[i] += 1.0f; else z[i] += 2;",                    # compound: float += int against float += float
    # found by a red team (2026-12-05): an init statement in the condition, braced values
    "if (r = x[i] * 2.0f; r > 0.0f) y[i] = r; else y[i] = -r;",
    "if (v > 3.0f) w2 = {x[i], 1.0f}; else w2 = {0.0f, 0.0f};",
])
def test_other_branches_are_left_as_written(stmt):
    src = KERNEL.replace("        float r;", f"        float2 w2; float r;\n        {stmt}")
    assert stmt in rewrite(src)


def test_vectorize_takes_a_leaky_relu_written_with_if_else():
    src = """extern "C" __global__ void leaky(const float* x, float* y, float alpha, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        if (x[i] > 0.0f) y[i] = x[i];
        else y[i] = alpha * x[i];
    }
}
"""
    args = """
  { name = "x", role = "in", dtype = "f32", shape = ["N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N"] },
  { name = "alpha", role = "scalar", dtype = "f32", value = 0.1 },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
"""
    u = unit_from_context(make_ctx(src, spec_for("leaky", args)))
    assert "y[i] = (x[i] > 0.0f) ? (float)(x[i]) : (float)(alpha * x[i]);" in u.text
    assert next(p for p in PASSES if p.name == "vectorize").why_not(u) is None


def test_the_rewrite_gives_the_same_bits_on_the_host(tmp_path):
    """Both kernels, compiled as C++ (no fp contraction), over inputs with every branch taken: the same outputs."""
    before = KERNEL.replace('extern "C" ', "").replace("void k(", "void k_before(")
    after = rewrite(KERNEL).replace('extern "C" ', "").replace("void k(", "void k_after(")
    assert before.replace("k_before", "k_after") != after
    main = r"""
int main() {
    const int n = 64;
    float x[n], y1[n], y2[n], z1[n], z2[n];
    for (int i = 0; i < n; ++i) { x[i] = (i % 9) * 0.5f - 1.0f; y1[i] = y2[i] = -7.0f; z1[i] = z2[i] = i * 0.25f; }
    blockDim = {32, 1, 1};
    for (unsigned b = 0; b < 3; ++b) for (unsigned t = 0; t < 32; ++t) {
        blockIdx.x = b; threadIdx.x = t;
        k_before(x, y1, z1, 0.1f, n); k_after(x, y2, z2, 0.1f, n);
    }
    printf("%s\n", memcmp(y1, y2, sizeof y1) == 0 && memcmp(z1, z2, sizeof z1) == 0 ? "same" : "differ");
    return 0;
}
"""
    assert run_host(SERIAL_PRELUDE + before + after + main, tmp_path) == "same"


def test_each_value_is_converted_to_the_places_type_as_its_assignment_did(tmp_path):
    """Found by a red team (2026-12-05): ``d = i`` (unsigned) and ``d = -1`` into a float met in the conditional's
    common type, unsigned, so -1 became 4294967295; ``__half`` against ``float`` did not compile. Each value is now
    cast to the place's type: the host run gives the original's bits, and an f16 ReLU compiles."""
    src = """extern "C" __global__ void k(const float* x, float* y, int n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float d; if (x[i] > 0.0f) d = i; else d = -1; y[i] = d; }
}
"""
    out = rewrite(src)
    assert "d = (x[i] > 0.0f) ? (float)(i) : (float)(-1);" in out
    before = src.replace('extern "C" ', "").replace("void k(", "void k_before(")
    after = out.replace('extern "C" ', "").replace("void k(", "void k_after(")
    main = r"""
int main() {
    const int n = 64;
    float x[n], y1[n], y2[n];
    for (int i = 0; i < n; ++i) { x[i] = (i % 3) - 1.0f; y1[i] = y2[i] = 0.0f; }
    blockDim = {64, 1, 1};
    for (unsigned t = 0; t < 64; ++t) { threadIdx.x = t; k_before(x, y1, n); k_after(x, y2, n); }
    printf("%s %g\n", memcmp(y1, y2, sizeof y1) == 0 ? "same" : "differ", y1[0]);
    return 0;
}
"""
    assert run_host(SERIAL_PRELUDE + before + after + main, tmp_path) == "same -1"
    half = """#include <cuda_fp16.h>
extern "C" __global__ void relu_h(const __half* x, __half* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { if (__half2float(x[i]) > 0.0f) y[i] = x[i]; else y[i] = 0.0f; }
}
"""
    out = rewrite(half)
    assert "y[i] = (__half2float(x[i]) > 0.0f) ? (__half)(x[i]) : (__half)(0.0f);" in out
    from ptxfactory.harness.compile import CompileFailed, compile_candidate
    from ptxfactory.protocol import Candidate, LaunchConfig
    cand = Candidate(kernel_name="relu_h", source=out, kernel_text=out, launch=LaunchConfig(grid=[1], block=[128]))
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log


def test_a_place_of_a_class_type_is_left_as_written():
    """A struct's assignment may be its own operator=: a cast and a copy would not call it; only scalar places."""
    src = KERNEL.replace("        float r;", "        float2 w2; float r;\n        if (v > 3.0f) w2 = make_float2(v, v); else w2 = make_float2(0.0f, v);")
    assert "if (v > 3.0f) w2 = make_float2(v, v); else w2 = make_float2(0.0f, v);" in rewrite(src)
