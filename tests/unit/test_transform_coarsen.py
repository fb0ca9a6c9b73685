"""CPU tests of the ``coarsen_K`` transform pass (search/generators/transform/coarsen.py): a one-thread-per-element
kernel gives each thread K elements, blockDim.x apart, and the grid shrinks by K.

Where it applies and why it refuses (the reason's text), the rewrite's shape and launch, NVRTC compiles for sm_90a,
the generator's chains, and the semantics: the original and the coarsened kernels run on the host (g++, thread blocks
emulated by tests/unit/_host_cuda.py) over sizes that end inside a block, on a block's edge and in a partial block,
and write the same bytes, the elements past ``n`` untouched.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from ptxfactory.protocol import evaluate
from ptxfactory.search.generators.transform import COARSEN, PASSES, plan_chains, refusals, run_chain, unit_from_context
from ptxfactory.search.generators.transform.coarsen import CoarsenPass

from _host_cuda import HOST_BLOCKS
from test_transform import compiles, example_ctx, spec_for, unit

SWIGLU = """
extern "C" __global__ void swiglu(const float* x, float* out, int M, int H)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= M * H) return;
    int r = idx / H;
    int c = idx % H;
    float a = x[(size_t)r * 2 * H + c];
    float b = x[(size_t)r * 2 * H + H + c];
    out[idx] = a / (1.0f + expf(-a)) * b;
}
"""
SWIGLU_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "2 * H"] },
  { name = "out", role = "out", dtype = "f32", shape = ["M", "H"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
"""


def swiglu_spec(**kw):
    kw.setdefault("grid", '["cdiv(M * H, 256)"]')
    kw.setdefault("block", "[256]")
    kw.setdefault("sizes", "[{ M = 7, H = 1000 }, { M = 1, H = 1 }]")
    return spec_for("swiglu", SWIGLU_ARGS, **kw)


def swiglu_unit(src: str = SWIGLU, **kw):
    return unit(src, swiglu_spec(**kw))


# ---------------------------------------------------------------- applies / refuses


def test_registered_after_grid_stride():
    names = [p.name for p in PASSES]
    assert COARSEN == (4, 8)
    at = names.index("grid_stride")
    assert names[at + 1:at + 3] == ["coarsen_4", "coarsen_8"]
    assert all(p.group == "grid" and p.exact for p in PASSES if p.name in ("coarsen_4", "coarsen_8"))
    with pytest.raises(ValueError):
        CoarsenPass(3)


@pytest.mark.parametrize("k", COARSEN)
def test_applies_and_rewrites_the_swiglu_kernel(k):
    u = swiglu_unit()
    p = CoarsenPass(k)
    assert p.name == f"coarsen_{k}" and p.why_not(u) is None and p.applies(u)
    v = p.apply(u)
    t = v.text
    assert f"const int ptxf_c0 = (int)blockIdx.x * ((int)blockDim.x * {k}) + (int)threadIdx.x;" in t
    assert f"{{ const int idx = (int)blockIdx.x * ((int)blockDim.x * {k}) + (((int)blockDim.x * {k}) - 1); ptxf_full = idx < (M * H); }}" in t
    assert t.count(f"for (int ptxf_k = 0; ptxf_k < {k}; ++ptxf_k) {{") == 2
    assert t.count("const int idx = ptxf_c0 + (int)ptxf_k * (int)blockDim.x;") == 2
    assert t.count("#pragma unroll") == 1 and t.count("if (!(idx < (M * H))) break;") == 1
    assert t.count("out[idx] = a / (1.0f + expf(-a)) * b;") == 2 and "if (idx >= M * H) return;" not in t
    assert v.launch.grid == [f"cdiv(cdiv(M * H, 256), {k})"] and v.launch.block == [256]
    assert not p.applies(v)  # the opening is gone: not coarsened twice
    compiles(t, swiglu_spec(), "swiglu")


def test_if_block_opening_extra_guard_and_wide_index():
    src = SWIGLU.replace("int idx = blockIdx.x * blockDim.x + threadIdx.x;\n    if (idx >= M * H) return;\n",
                         "size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n    if (idx < (size_t)M * H && H > 0) {\n")
    src = src.replace("* b;\n}", "* b;\n    }\n}")
    v = CoarsenPass(8).apply(swiglu_unit(src))
    assert "const size_t ptxf_c0 = (size_t)blockIdx.x * ((size_t)blockDim.x * 8) + (size_t)threadIdx.x;" in v.text
    assert "if (!(idx < ((size_t)M * H) && (H > 0))) break;" in v.text
    compiles(v.text, swiglu_spec(), "swiglu")


REFUSALS = {  # what changes in SWIGLU -> a piece of the reason
    "row loop": (("out[idx] = a / (1.0f + expf(-a)) * b;",
                  "float s = 0.0f; for (int j = 0; j < H; ++j) s += x[j]; out[idx] = s * a * b;"),
                 "a for loop in the element's code: a row loop is rowpar's"),
    "barrier": (("out[idx] = a / (1.0f + expf(-a)) * b;", "__syncthreads(); out[idx] = a * b;"),
                "a barrier (__syncthreads) in the element's code"),
    "return in rest": (("float a = x", "if (c == 0) return; float a = x"), "return in the element's code ('return;')"),
    "blockIdx in rest": (("out[idx] = a / (1.0f + expf(-a)) * b;", "out[idx] = a * b + blockIdx.x;"),
                         "the element's code reads blockIdx (its position in the grid changes)"),
    "bound written": (("out[idx] = a / (1.0f + expf(-a)) * b;", "out[idx] = a * b; H = 0;"),
                      "the element's code writes H (the index or a name in the bound)"),
    "shared data": (("int r = idx / H;", "__shared__ float s[4]; int r = idx / H;"), "__shared__ data in the element's code"),
    "no opening": (("int idx = blockIdx.x * blockDim.x + threadIdx.x;", "int idx = threadIdx.x;"),
                   "no one-thread-per-element opening"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refuses_unsafe_element_code(case):
    change, reason = REFUSALS[case]
    src = SWIGLU.replace(*change)
    assert src != SWIGLU
    for k in COARSEN:
        why = CoarsenPass(k).why_not(swiglu_unit(src))
        assert why is not None and reason in why, why
        assert not CoarsenPass(k).applies(swiglu_unit(src))


def test_refuses_a_fixed_or_2d_launch():
    why = CoarsenPass(4).why_not(swiglu_unit(policy="fixed"))
    assert why == 'the launch policy is "fixed", not "free": the grid may not change'
    why = CoarsenPass(4).why_not(swiglu_unit(grid='["cdiv(M * H, 256)", 2]'))
    assert why == "the grid ['cdiv(M * H, 256)', 2] is not 1-D"
    why = CoarsenPass(4).why_not(swiglu_unit(grid='["cdiv(M * H, 256)"]', block="[64, 4]"))
    assert why == "the block [64, 4] is not 1-D"


def test_refuses_a_32_bit_index_that_could_overflow():
    # 2^31 - 1000 elements (an int index holds them): the grid of cdiv(G, 8) blocks of 2048 spans 2^31 indices
    big = "[{ M = 7, H = 1000 }, { M = 1, H = 2147482648 }]"
    why = CoarsenPass(8).why_not(swiglu_unit(sizes=big))
    assert why is not None and why.startswith("a 32-bit index (int) could overflow at the size"), why
    wide = SWIGLU.replace("int idx = blockIdx.x", "long long idx = (long long)blockIdx.x")
    assert CoarsenPass(8).applies(swiglu_unit(wide, sizes=big))


def test_refusal_listed_by_the_generator():
    u = swiglu_unit(SWIGLU.replace(*REFUSALS["barrier"][0]))
    got = dict(refusals(u))  # line 9 of the kernel's text (SWIGLU starts with an empty line)
    entry = next(reason for names, reason in got.items() if "coarsen_4, coarsen_8" in names)  # (vectorize's reason too)
    assert "line 9: a barrier (__syncthreads) in the element's code" in entry


# ---------------------------------------------------------------- chains and examples


def test_plan_chains_hold_coarsen_and_compile():
    u = swiglu_unit()
    chains = [[p.name for p in c] for c in plan_chains(u)]
    assert ["coarsen_4"] in chains
    with_coarsen = [c for c in chains if "coarsen_4" in c and len(c) > 1]
    assert with_coarsen and any("restrict" in c for c in with_coarsen)
    for chain in with_coarsen[:3]:
        v = run_chain(u, [p for p in PASSES if p.name in chain])
        helpers = 'extern "C++" {\n' + "\n".join(h for _, h in v.helpers) + "\n}\n" if v.helpers else ""
        compiles(helpers + v.text, swiglu_spec(), "swiglu")


def test_row_loop_example_refused():
    u = unit_from_context(example_ctx("l2norm_rows"))
    for k in COARSEN:
        why = CoarsenPass(k).why_not(u)
        assert why is not None and "a for loop in the element's code" in why, why


def test_swiglu_example_applies_and_compiles():
    ctx = example_ctx("swiglu")
    u = unit_from_context(ctx)
    for k in COARSEN:
        v = CoarsenPass(k).apply(u)
        assert v.launch.grid == [f"cdiv(cdiv(M * H, 256), {k})"]
        compiles(ctx.source.replace(ctx.kernel.text, v.text), ctx.spec, "swiglu")


# ---------------------------------------------------------------- semantics on the host

SIZES = ((1, 1), (3, 85), (8, 256), (7, 293), (4, 2500))  # n = M * H: 1, 255, 256 * 8, 256 * 8 + 3, 10000
SLACK = 4096  # elements of out past n, filled with a pattern that no kernel may change

HOST_MAIN = r"""
int main(int argc, char** argv) {
    int M = atoi(argv[1]), H = atoi(argv[2]), grids[3] = {atoi(argv[3]), atoi(argv[4]), atoi(argv[5])};
    long n = (long)M * H;
    std::vector<float> x(2 * n);
    for (long j = 0; j < 2 * n; ++j) x[j] = (float)((j * 7919) % 2003) / 250.0f - 4.0f;
    std::vector<std::vector<float>> outs;
    for (int v = 0; v < 3; ++v) {
        std::vector<float> out(n + SLACK);
        for (size_t j = 0; j < out.size(); ++j) { unsigned u = 0x7fc00000u + (unsigned)j; std::memcpy(&out[j], &u, 4); }
        blockDim.x = 256;
        launch(grids[v], 256, [&] { if (v == 0) k_orig(x.data(), out.data(), M, H);
                                    else if (v == 1) k_c4(x.data(), out.data(), M, H);
                                    else k_c8(x.data(), out.data(), M, H); });
        outs.push_back(out);
    }
    for (int v = 1; v < 3; ++v)
        if (std::memcmp(outs[0].data(), outs[v].data(), outs[0].size() * 4) != 0) { printf("variant %d differs\n", v); return 1; }
    for (long j = 0; j < n; ++j) if (outs[0][j] != outs[0][j]) { printf("element %ld not written\n", j); return 1; }
    printf("same\n");
    return 0;
}
""".replace("SLACK", str(SLACK))


def _host_kernel(text: str, name: str) -> str:
    return text.replace('extern "C" __global__ void swiglu(', f"static void {name}(")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) for the host emulation")
def test_coarsened_kernel_writes_the_same_bytes_on_the_host(tmp_path):
    u = swiglu_unit()
    variants = [u] + [CoarsenPass(k).apply(u) for k in COARSEN]
    prelude = r"""#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
struct Dim { unsigned x = 0, y = 0, z = 0; };
thread_local Dim threadIdx, blockIdx;
Dim blockDim;
""" + HOST_BLOCKS
    kernels = "".join(_host_kernel(v.text, n) for v, n in zip(variants, ("k_orig", "k_c4", "k_c8")))
    src = tmp_path / "coarsen_host.cpp"
    src.write_text(prelude + kernels + HOST_MAIN)
    exe = tmp_path / "coarsen_host"
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", str(src), "-o", str(exe), "-pthread"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    for m, h in SIZES:
        size = {"M": m, "H": h}
        grids = [int(evaluate(v.launch.grid[0], size)) for v in variants]
        assert grids[1] == -(-grids[0] // 4) and grids[2] == -(-grids[0] // 8)
        run = subprocess.run([str(exe), str(m), str(h), *map(str, grids)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and run.stdout.strip() == "same", (m * h, run.stdout, run.stderr)


CONV1D = """#define K 7
extern "C" __global__ void conv1d(const float* x, const float* w, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) acc += w[k] * x[i + k];
        y[i] = acc;
    }
}
"""
CONV1D_ARGS = """  { name = "x", role = "in", dtype = "f32", shape = ["n + 6"] },
  { name = "w", role = "in", dtype = "f32", shape = [7] },
  { name = "y", role = "out", dtype = "f32", shape = ["n"] },
  { name = "n", role = "scalar", dtype = "i32", value = "n" },"""


def test_a_short_loop_between_constant_bounds_is_the_element_s_work():
    """A 7-tap filter (K a #define of the file): coarsen takes it (the taps are the element's work, not a row), and
    rowpar refuses to split 7 iterations over 8 or more lanes."""
    from ptxfactory.search.generators.transform.rowpar import RowParallelPass

    spec = spec_for("conv1d", CONV1D_ARGS, grid='["cdiv(n, 128)"]', sizes="[{ n = 1000 }]")
    u = unit(CONV1D, spec)
    assert u.notes["constants"] == {"K": 7}
    assert CoarsenPass(4).why_not(u) is None
    compiles(CoarsenPass(4).apply(u).text.replace("k < K", "k < 7"), spec, "conv1d")
    assert "7 iteration(s), fewer than the 32 lanes" in RowParallelPass(32).why_not(u)
    long = unit(CONV1D.replace("#define K 7", "#define K 100"), spec)
    assert "a for loop in the element's code" in CoarsenPass(4).why_not(long)


def test_a_uniform_declaration_before_the_index_stays_and_coarsen_applies():
    """int total = ...; declared before (or between) the index and its guard, read by the guard: the opening takes it."""
    src = SWIGLU.replace("int idx = blockIdx.x * blockDim.x + threadIdx.x;\n    if (idx >= M * H) return;\n",
                         "int idx = blockIdx.x * blockDim.x + threadIdx.x;\n    int total = M * H;\n    if (idx >= total) return;\n")
    u = swiglu_unit(src)
    assert u.text.index("int total = M * H;") < u.text.index("int idx =")  # sink.py put it before the index
    assert CoarsenPass(4).why_not(u) is None
    compiles(CoarsenPass(4).apply(u).text, swiglu_spec(), "swiglu")


def test_an_opening_it_cannot_read_says_which_statement():
    """A statement where the guard was expected: the refusal names its line and text, not only the pattern."""
    src = SWIGLU.replace("    if (idx >= M * H) return;\n", "    out[0] = 0;\n    if (idx >= M * H) return;\n")
    why = CoarsenPass(4).why_not(swiglu_unit(src))
    assert "no one-thread-per-element opening" in why and "'out[0] = 0;' where the guard (if without else) was expected" in why
