"""CPU tests of the ``vectorize_x`` transform pass (search/generators/transform/vectorize_x.py): each thread takes VEC
consecutive x coordinates, and the accesses at ``base + x`` move 16 bytes at a time.

Kernels as first versions are written: a SwiGLU whose gate and up halves are two ranges of one [M, 2H] row (the
layout plain ``vectorize`` cannot read: ``x[r * 2H + c]`` is no ``p[i]``), taken to a 2-D launch by ``unflatten``
first; a flat bias add reading ``b[i % C]``; a 2-D row scaling written ``if (col < N && row < M) { ... }`` that updates
its buffer in place. What the pass writes, where it refuses and why, NVRTC compiles, the generator's chains, and g++
host runs whose outputs equal the original's bits at sizes whose rows are not multiples of VEC (the scalar path
at the edges and on misaligned rows).
"""
from __future__ import annotations

import shutil

import pytest

from ptxfactory.search.generators.transform import PASSES, plan_chains, refusals, run_chain
from ptxfactory.search.generators.transform.unflatten import UnflattenPass
from ptxfactory.search.generators.transform.vectorize import VectorizePass
from ptxfactory.search.generators.transform.vectorize_x import VectorizeXPass

from test_smem_tile import host_agree
from test_transform import compiles, example_ctx, spec_for, unit
from test_transform_coarsen import SWIGLU, SWIGLU_ARGS

BIAS = """
extern "C" __global__ void k(const float* x, const float* b, float* y, int N, int C)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * C) return;
    y[i] = x[i] + b[i % C];
}
"""
BIAS_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N", "C"] },
  { name = "b", role = "in", dtype = "f32", shape = ["C"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N", "C"] },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "C", role = "scalar", dtype = "i32", value = "C" },
"""
SCALE = """
extern "C" __global__ void k(float* a, const float* s, const float* g, int M, int N)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col < N && row < M) {
        float v = a[row * N + col];
        a[row * N + col] = v * s[row] + (col > 0 ? g[row * N + col - 1] : 0.0f);
    }
}
"""
SCALE_ARGS = """
  { name = "a", role = "inout", dtype = "f32", shape = ["M", "N"] },
  { name = "s", role = "in", dtype = "f32", shape = ["M"] },
  { name = "g", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""


def swiglu_spec():
    return spec_for("swiglu", SWIGLU_ARGS, grid='["cdiv(M * H, 256)"]', block="[256]", sizes="[{ M = 5, H = 37 }]")


def bias_spec():
    return spec_for("k", BIAS_ARGS, grid='["cdiv(N * C, 256)"]', block="[256]", sizes="[{ N = 7, C = 37 }]")


def scale_spec():
    return spec_for("k", SCALE_ARGS, grid='["cdiv(N, 32)", "cdiv(M, 8)"]', block="[32, 8]", sizes="[{ M = 9, N = 45 }]")


class Chain:
    def __init__(self, *passes):
        self.passes = passes

    def apply(self, u):
        return run_chain(u, list(self.passes))


def test_registered_after_unflatten():
    names = [p.name for p in PASSES]
    assert names.index("vectorize_x") == names.index("unflatten") + 1
    assert VectorizeXPass.group == "vecx" and VectorizeXPass.exact


def test_the_split_swiglu_after_unflatten_loads_both_halves_as_vectors():
    """After unflatten the column c is the x index: x's two halves at ``r * 2H + c`` and ``r * 2H + H + c`` and the
    store at ``idx = c + r * H`` are three 16-byte vectors, the row's index inlined where the vectors are formed;
    the grid's x is divided by 4 (float); NVRTC compiles it."""
    s = swiglu_spec()
    flat = UnflattenPass().apply(unit(SWIGLU, s))
    out = VectorizeXPass().apply(flat)
    assert out.launch.grid[0] == f"cdiv({flat.launch.grid[0]}, 4)" and out.launch.grid[1:] == flat.launch.grid[1:]
    t = out.text
    assert t.count("reinterpret_cast<const uint4*>") == 2 and t.count("*reinterpret_cast<uint4*>(out") == 1
    assert t.count("// element") == 4 and "for (int c = ptxf_x0; c < ptxf_x0 + 4 && (long long)c < ptxf_xn; ++c)" in t
    compiles(out.text, s, "swiglu")


def test_the_flat_bias_add_vectorises_x_and_y_and_keeps_the_bias_scalar():
    """``b[i % C]`` is no ``p[base + i]`` (plain vectorize refuses the kernel): it stays a scalar load of each element
    while x and y move 16 bytes."""
    s = bias_spec()
    u = unit(BIAS, s)
    assert not VectorizePass().applies(u)
    t = VectorizeXPass().apply(u).text
    assert t.count("reinterpret_cast<const uint4*>(x") == 1 and t.count("*reinterpret_cast<uint4*>(y") == 1
    assert t.count("b[i % C]") == 5  # four elements and the scalar loop
    compiles(t, s, "k")


def test_an_in_place_update_behind_a_keep_guard():
    """``if (col < N && row < M) { ... }``: the guard passes for all VEC when it passes for the last; ``a`` read then
    written at one base is one vector load and one vector store; the read under ``col > 0 ? ... :`` stays scalar
    (it would load only when its condition holds)."""
    s = scale_spec()
    out = VectorizeXPass().apply(unit(SCALE, s))
    t = out.text
    assert "((ptxf_x0 + 3)) < N" in t and t.count("reinterpret_cast<const uint4*>(a") == 1
    # s[row], the same for the four elements of a row, loaded once before them
    assert t.count("const float ptxf_u0 = s[") == 1 and t.count("* ptxf_u0") == 4
    assert t.count("g[row * N + col - 1]") == 5
    assert out.launch.grid == ["cdiv(cdiv(N, 32), 4)", "cdiv(M, 8)"]
    compiles(t, s, "k")


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_the_originals_bits_on_the_host(tmp_path):
    """Rows of 37 and 45 elements (not multiples of 4: the scalar loop at each row's end, and rows whose base is not
    16-byte aligned), a flat index whose last block is partial: every output the original's bytes."""
    r = host_agree(SWIGLU, swiglu_spec(), {"M": 5, "H": 37}, [Chain(UnflattenPass(), VectorizeXPass()), VectorizeXPass()], tmp_path)
    assert r.split() == ["1", "out", "same", "2", "out", "same"], r
    r = host_agree(BIAS, bias_spec(), {"N": 7, "C": 37}, [VectorizeXPass()], tmp_path)
    assert r.split() == ["1", "y", "same"], r
    r = host_agree(SCALE, scale_spec(), {"M": 9, "N": 45}, [VectorizeXPass()], tmp_path)
    assert r.split() == ["1", "a", "same"], r


@pytest.mark.parametrize("change, reason", [
    (lambda t: t.replace("if (col < N && row < M) {", "if (col > 0 && row < M) {"), "is not an upper bound on the x index"),
    (lambda t: t.replace("float v = a[row * N + col];", "float v = 0.0f; for (int q = 0; q < N; ++q) v += a[row * N + q];"),
     "a branch, loop or return"),
    (lambda t: t.replace("a[row * N + col] = v", "a[2 * (row * N + col)] = v"), "no access p[base + x]"),
    (lambda t: t.replace("float v = a[row * N + col];", "float v = a[row * N + col] + threadIdx.x;"), "threadIdx.x is read past"),
])
def test_refusals_say_why(change, reason):
    u = unit(change(SCALE), scale_spec())
    why = VectorizeXPass().why_not(u)
    assert why is not None and reason in why, why
    assert any(n == "vectorize_x" and reason in r for n, r in refusals(u))


def test_a_guard_after_a_store_and_plain_vectorize_kernels_are_refused():
    s = bias_spec()
    late = BIAS.replace("y[i] = x[i] + b[i % C];", "y[i] = x[i] + b[i % C]; if (C > 100) return; y[i] = 0.0f;")
    why = VectorizeXPass().why_not(unit(late, s))
    assert why is not None and ("a guard after a store" in why or "no access" in why), why
    plain = BIAS.replace("b[i % C]", "b[i]").replace('shape = ["C"]', 'shape = ["N", "C"]')
    spec = spec_for("k", BIAS_ARGS.replace('shape = ["C"]', 'shape = ["N", "C"]'), grid='["cdiv(N, 256)"]', block="[256]",
                    sizes="[{ N = 7, C = 37 }]")
    why = VectorizeXPass().why_not(unit(plain.replace("i >= N * C", "i >= N"), spec))
    assert why is not None and "vectorize takes it" in why, why


def test_swiglu_example_chains_hold_unflatten_then_vectorize_x():
    chains = [[p.name for p in c] for c in plan_chains(unit_of_example("swiglu"))]
    assert any(c[-3:] == ["unflatten", "vectorize_x", "launch_bounds"] for c in chains), chains


def unit_of_example(name):
    from ptxfactory.search.generators.transform import unit_from_context
    return unit_from_context(example_ctx(name))


GATHER = """
extern "C" __global__ void k(const int* ids, const float* table, float* out, int T, int D)
{
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    int t = blockIdx.y;
    if (d >= D || t >= T) return;
    int tok = ids[t];
    int src = tok * D;
    out[t * D + d] = table[src + d];
}
"""
GATHER_ARGS = """
  { name = "ids", role = "in", dtype = "i32", shape = ["T"], init = "randint(0, V)" },
  { name = "table", role = "in", dtype = "f32", shape = ["V", "D"] },
  { name = "out", role = "out", dtype = "f32", shape = ["T", "D"] },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
"""
PADDED = """
extern "C" __global__ void k(const float* x, const float* s, float* y, int H, int W, int LD)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    y[row * LD + col] = x[row * LD + col] * s[row];
}
"""
PADDED_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["H", "LD"] },
  { name = "s", role = "in", dtype = "f32", shape = ["H"] },
  { name = "y", role = "out", dtype = "f32", shape = ["H", "LD"] },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "W", role = "scalar", dtype = "i32", value = "W" },
  { name = "LD", role = "scalar", dtype = "i32", value = "LD" },
"""


def test_red_team_findings_are_refused_or_exact(tmp_path):
    """Found by a red team (2026-12-05), each once a wrong rewrite: a row pointer bumped in the elements' code (moved
    once per element), a local shadowed inside the keep guard (read by name), a local inlined into a vector's address
    that reads a loaded index (undeclared where the vector is formed), a kernel with no guard on x whose grid covers
    only W of its LD columns (the padding was written), and ``+=`` on a 16-bit buffer (ambiguous once written out)."""
    s = scale_spec()
    bumped = SCALE.replace("float v = a[row * N + col];", "s += row; float v = a[row * N + col];").replace("s[row]", "s[0]")
    assert "the code after the x index writes s, declared before it" in VectorizeXPass().why_not(unit(bumped, s))
    shadow = SCALE.replace("float v = a[row * N + col];", "int off = row * N; float v = a[off + col];").replace(
        "int col =", "int off = 0; int col =")
    assert "declared more than once" in VectorizeXPass().why_not(unit(shadow, s))
    g = spec_for("k", GATHER_ARGS, grid='["cdiv(D, 32)", "T"]', block="[32]", sizes="[{ T = 5, V = 7, D = 45 }]")
    out = VectorizeXPass().apply(unit(GATHER, g))
    assert "table[src + d]" in out.text and "tok" not in out.text.split("// element 0")[0]
    compiles(out.text, g, "k")
    p = spec_for("k", PADDED_ARGS, grid='["W // 8", "H"]', block="[8]", sizes="[{ H = 3, W = 40, LD = 48 }]")
    r = host_agree(PADDED, p, {"H": 3, "W": 40, "LD": 48}, [VectorizeXPass()], tmp_path)
    assert r.split() == ["1", "y", "same"], r
    half = BIAS.replace("const float* x, const float* b, float* y", "const __half* x, const float* b, __half* y").replace(
        "y[i] = x[i] + b[i % C];", "y[i] += x[i];").replace('extern "C"', '#include <cuda_fp16.h>\nextern "C"')
    hs = spec_for("k", BIAS_ARGS.replace('"x", role = "in", dtype = "f32"', '"x", role = "in", dtype = "f16"').replace(
        '"y", role = "out", dtype = "f32"', '"y", role = "inout", dtype = "f16"'), grid='["cdiv(N * C, 256)"]', block="[256]",
        sizes="[{ N = 7, C = 37 }]")
    # (a flat grid over N * C: plain vectorize takes it since it reads the product, and vectorize_x defers to it; both
    # write the compound 16-bit store through vectorize.plain_stores)
    assert "vectorize takes it" in VectorizeXPass().why_not(unit(half, hs))
    out = VectorizePass().apply(unit(half, hs))
    assert "(__half)(x[i])" in out.text  # the scalar path's compound store, the cast written out
    compiles("#include <cuda_fp16.h>\n" + out.text, hs, "k")


ROPE = """
extern "C" __global__ void k(float* x, const float* cos_t, const float* sin_t, int B, int T, int H, int D)
{
    int half = D / 2;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = B * T * H * half;
    if (idx >= total) return;
    int i = idx % half;
    int h = (idx / half) % H;
    int t = (idx / (half * H)) % T;
    int b = idx / (half * H * T);
    int base = ((b * T + t) * H + h) * D;
    float x0 = x[base + 2 * i];
    float x1 = x[base + 2 * i + 1];
    float c = cos_t[t * half + i];
    float s = sin_t[t * half + i];
    x[base + 2 * i]     = x0 * c - x1 * s;
    x[base + 2 * i + 1] = x0 * s + x1 * c;
}
"""
ROPE_ARGS = """
  { name = "x", role = "inout", dtype = "f32", shape = ["B", "T", "H", "D"] },
  { name = "cos_t", role = "in", dtype = "f32", shape = ["T", "D // 2"] },
  { name = "sin_t", role = "in", dtype = "f32", shape = ["T", "D // 2"] },
  { name = "B", role = "scalar", dtype = "i32", value = "B" },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
"""


def rope_spec():
    from test_transform_coarsen_outer import spec
    return spec(ROPE_ARGS, '["cdiv(B * T * H * (D // 2), 256)"]', "[256]", "[{ B = 2, T = 3, H = 5, D = 10 }]",
                "{ B = 4, T = 1024, H = 32, D = 128 }")


def test_rope_pairs_move_as_two_vectors_a_thread(tmp_path):
    """The pair ``x[base + 2i]``, ``x[base + 2i + 1]`` (stride 2, both offsets read, then both stored) is a span of
    2 * VEC elements: two 16-byte loads and two 16-byte stores a thread, element k's pair the span's 2k and 2k + 1;
    cos_t and sin_t at ``t * half + i`` one vector each. Host runs at D = 10 (half = 5: edges and misaligned rows)
    and D = 16 give the original's bits."""
    s = rope_spec()
    flat = UnflattenPass().apply(unit(ROPE, s))
    t = VectorizeXPass().apply(flat).text
    assert t.count("reinterpret_cast<const uint4*>(x") == 2 and t.count("*reinterpret_cast<uint4*>(x") == 2
    assert t.count("reinterpret_cast<const uint4*>(cos_t") == 1 and "ptxf_vx0_s7" in t
    compiles(t, s, "k")
    for size in ({"B": 2, "T": 3, "H": 5, "D": 10}, {"B": 1, "T": 3, "H": 2, "D": 16}):
        r = host_agree(ROPE, s, size, [Chain(UnflattenPass(), VectorizeXPass())], tmp_path)
        assert r.split() == ["1", "x", "same"], (size, r)


def test_a_read_after_its_offsets_store_keeps_the_buffer_scalar():
    """``x[base + 2i + 1]`` computed from ``x[base + 2i]`` after that was stored reads the new value: a vector loaded
    before the elements would give the old one, so x stays scalar (cos_t and sin_t still vectorise)."""
    stale = ROPE.replace("x[base + 2 * i + 1] = x0 * s + x1 * c;", "x[base + 2 * i + 1] = x[base + 2 * i] * s + x1 * c;")
    t = VectorizeXPass().apply(UnflattenPass().apply(unit(stale, rope_spec()))).text
    assert "reinterpret_cast<const uint4*>(x" not in t and "reinterpret_cast<const uint4*>(cos_t" in t


PAIR = """
extern "C" __global__ void k(float* x, const float* c, int H, int W)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (i >= W || row >= H) return;
    int base = row * 2 * W;
    float a = x[base + 2 * i];
    float b = x[base + 2 * i + 1];
    x[base + 2 * i] = a * c[row * W + i];
    x[base + 2 * i + 1] = b + a;
}
"""
PAIR_ARGS = """
  { name = "x", role = "inout", dtype = "f32", shape = ["H", "2 * W"] },
  { name = "c", role = "in", dtype = "f32", shape = ["H", "W"] },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "W", role = "scalar", dtype = "i32", value = "W" },
"""


@pytest.mark.parametrize("change, x_vector", [
    (lambda t: t, True),
    # found by a second red team (2026-12-05): one offset never stored (the vector store wrote garbage there)
    (lambda t: t.replace("    x[base + 2 * i + 1] = b + a;\n", ""), False),
    # a spelling the pass cannot read (why_not raised a TypeError)
    (lambda t: t.replace("x[base + 2 * i + 1] = b + a;", "x[base + (i << 1) + 1] = b + a;"), False),
    # a read through *x after the stores would miss the deferred vector store
    (lambda t: t.replace("x[base + 2 * i + 1] = b + a;", "x[base + 2 * i + 1] = b + a + (i == 0 ? *x : 0.0f);"), False),
    # an update in place (x[e]++ on an element of the vector did not compile)
    (lambda t: t.replace("x[base + 2 * i + 1] = b + a;", "x[base + 2 * i + 1]++;"), False),
    # a narrowing cast wraps: not the polynomial its text reads as
    (lambda t: t.replace("float b = x[base + 2 * i + 1];", "float b = x[base + (unsigned char)(2 * i + 1)];"), False),
    # sizeof's operand is never evaluated: it neither completes a group nor counts as a read
    (lambda t: t.replace("float b = x[base + 2 * i + 1];", "float b = (float)sizeof(x[base + 2 * i + 1]);").replace(
        "    x[base + 2 * i + 1] = b + a;\n", ""), False),
])
def test_second_red_team_findings(change, x_vector, tmp_path):
    from test_transform_coarsen_outer import spec
    s = spec(PAIR_ARGS, '["cdiv(W, 8)", "H"]', "[8]", "[{ H = 3, W = 13 }]", "{ H = 1024, W = 4096 }")
    src = change(PAIR)
    u = unit(src, s)
    why = VectorizeXPass().why_not(u)
    assert why is None, why  # c is still a vector
    t = VectorizeXPass().apply(u).text
    assert ("reinterpret_cast<const uint4*>(x" in t) == x_vector and "reinterpret_cast<const uint4*>(c" in t
    compiles(t, s, "k")
    if "sizeof" not in src and "unsigned char" not in src:
        r = host_agree(src, s, {"H": 3, "W": 13}, [VectorizeXPass()], tmp_path)
        assert r.split() == ["1", "x", "same"], r
