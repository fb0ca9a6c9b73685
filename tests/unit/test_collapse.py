"""CPU tests of the ``collapse`` pass (two nested map loops of a one-thread-per-row kernel -> one loop over both).

On the RoPE example and hand-written variants: what it rewrites (the text), what it refuses and why, that its output
and the collapse + rowpar_auto chain compile with NVRTC, and, compiled for the host with g++, that the collapsed loop
visits the same (h, i) pairs as the nest (lower bounds, ``<=``, digits in the right order).
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, unit_from_context
from ptxfactory.search.generators.transform.affine import Nest
from ptxfactory.search.generators.transform.collapse import CollapsePass
from ptxfactory.search.generators.transform.rowpar import RowParallelPass

from test_transform import example_ctx, make_ctx, unit

COLLAPSE = next(p for p in PASSES if isinstance(p, CollapsePass))
AUTO = next(p for p in PASSES if isinstance(p, RowParallelPass) and p.lanes == "auto")

ROPE_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["T", "H", "D"] },
  { name = "cs", role = "in", dtype = "f32", shape = ["T", "D"] },
  { name = "y", role = "out", dtype = "f32", shape = ["T", "H", "D"] },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
"""
# RoPE in f32, one thread per token, the shape of examples/rope/rope.cu: the variants below edit it
ROPE = """
extern "C" __global__ void rope(const float* x, const float* cs, float* y, int T, int H, int D)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int half = D / 2;
    for (int h = 0; h < H; ++h) {
        const float* xv = x + ((size_t)t * H + h) * D;
        float* ov = y + ((size_t)t * H + h) * D;
        for (int i = 0; i < half; ++i) {
            float c = cs[(size_t)t * D + i], s = cs[(size_t)t * D + i + half];
            ov[i] = xv[i] * c - xv[i + half] * s;
            ov[i + half] = xv[i + half] * c + xv[i] * s;
        }
    }
}
"""


def small_spec(name: str, args: str, bench: str = "{ T = 4096, H = 64, D = 256 }"):
    """A spec for a hand-written kernel with explicit bench sizes (spec_for's sets every size to 4096: too large here)."""
    text = f"""
[kernel.{name}]
args = [{args}]
launch = {{ grid = ["cdiv(T, 128)"], block = [128], policy = "free" }}
[kernel.{name}.check]
rtol = 1e-2
atol = 1e-2
sizes = [{{ T = 9, H = 3, D = 64 }}]
[kernel.{name}.bench]
sizes = [{bench}]
"""
    return parse_spec(text).kernels[name]


def rope_spec():
    return small_spec("rope", ROPE_ARGS)


def compiles(ctx, out, chain) -> str:
    """The transform generator's candidate for ``out`` (``chain`` applied to ``ctx``'s kernel) compiles with NVRTC."""
    cand = TransformGenerator().candidate(ctx, out, chain)
    assert cand is not None and all(cand.params[f"pass:{p.name}"] == 1 for p in chain)
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    return cand.kernel_text


def test_rope_example_heads_and_half_dims_become_one_loop():
    ctx = example_ctx("rope")
    u = unit_from_context(ctx)
    assert COLLAPSE.why_not(u) is None
    out = COLLAPSE.apply(u)
    text = compiles(ctx, out, [COLLAPSE])
    assert "if (0 < H && 0 < half) {  // the nest over h, i as one loop (transform collapse)" in text
    assert "for (long long ptxf_f = 0; ptxf_f < (long long)(H) * (half); ++ptxf_f) {" in text
    assert "int h = (int)(ptxf_f / (half));" in text and "int i = (int)(ptxf_f % (half));" in text
    assert "for (int h" not in text and "for (int i" not in text
    # the outer body's declarations follow the digits, the inner body stays a block
    assert text.index("int i = (int)") < text.index("const __nv_bfloat16* xv") < text.index("float c = cos_t")
    assert out.launch == u.launch  # the launch is kept
    assert COLLAPSE.why_not(out) is not None  # nothing left to collapse


def test_collapse_then_rowpar_auto_splits_the_collapsed_trip_count():
    """The chain on the example: rowpar_auto splits the one loop over H * D/2 and sizes its lanes from that."""
    ctx = example_ctx("rope")
    u = COLLAPSE.apply(unit_from_context(ctx))
    assert AUTO.why_not(u) is None
    out = AUTO.apply(u)
    text = compiles(ctx, out, [COLLAPSE, AUTO])
    assert "for (long long ptxf_f = (0) + ptxf_lane; ptxf_f < (long long)(H) * (half); ptxf_f += blockDim.x)" in text
    assert "(H) * ((D) // 2)" in out.launch.block[0]  # lanes chosen from the collapsed length
    # and the greedy chains take it: collapse right before the rowpar variants
    descs = [c.description for c in TransformGenerator().propose(ctx)]
    assert any("collapse+rowpar_auto" in d for d in descs)


def test_hand_written_rope_and_the_split_it_enables():
    spec = rope_spec()
    ctx = make_ctx(ROPE, spec)
    u = COLLAPSE.apply(unit(ROPE, spec))
    compiles(ctx, u, [COLLAPSE])
    out = AUTO.apply(u)
    assert "ptxf_f += blockDim.x" in out.text
    compiles(ctx, out, [COLLAPSE, AUTO])
    # a fixed lane count splits it too
    lanes8 = next(p for p in PASSES if isinstance(p, RowParallelPass) and p.lanes == 8)
    assert "ptxf_f += 8" in lanes8.apply(u).text


@pytest.mark.parametrize("edit, reason", [
    (("i < half", "i < half - h"), "uses h"),
    (("float* ov = y + ((size_t)t * H + h) * D;", "float* ov = y + ((size_t)t * H + h) * D; int n = half;"), None),
    (("        for (int i = 0; i < half; ++i) {", "        y[t] = 0.0f;\n        for (int i = 0; i < half; ++i) {"),
     "no loop whose body is declarations followed by one for loop"),
    (("float* ov = y", "float z = atomicAdd(y, 0.0f); float* ov = y"), "calls 'atomicAdd'"),
    (("float* ov = y", "float z = (y[t] = 0.0f); float* ov = y"), "side effect"),
    (("float* ov = y", "int k = h++; float* ov = y"), "h is written"),
    (("float* ov = y", "float z = y[t]; float* ov = y"), "which the kernel may write"),
    (("float* ov = y", "float z; float* ov = y"), "not a plain initialised declaration"),
    (("ov[i] = xv[i]", "if (c > 9.0f) break; ov[i] = xv[i]"), "break"),
    (("ov[i] = xv[i]", "i += 0; ov[i] = xv[i]"), "i is written"),
    (("ov[i] = xv[i]", "if (c > 9.0f) return; ov[i] = xv[i]"), "return"),
    (("float* ov = y + ((size_t)t * H + h) * D;", "float* ov = y + ((size_t)t * H + h) * half;"), "rowpar would not split"),
])
def test_refusals(edit, reason):
    src = ROPE.replace(*edit)
    if reason is None:  # an inner bound the outer body declares
        src = src.replace("i < half; ++i", "i < n; ++i")
        reason = "uses n"
    assert src != ROPE
    why = COLLAPSE.why_not(unit(src, rope_spec()))
    assert why is not None and reason in why, why


CHANNEL_SUM = """
extern "C" __global__ void chan_sum(const float* x, float* out, int N, int C, int HW)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sum = 0.0f;
    for (int n = 0; n < N; n++) {
        const float* p = x + ((size_t)n * C + c) * HW;
        for (int i = 0; i < HW; i++) sum += p[i];
    }
    out[c] = sum;
}
"""
CHANNEL_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N", "C", "HW"] },
  { name = "out", role = "out", dtype = "f32", shape = ["C"] },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "C", role = "scalar", dtype = "i32", value = "C" },
  { name = "HW", role = "scalar", dtype = "i32", value = "HW" },
"""


def channel_spec():
    return parse_spec(f"""
[kernel.chan_sum]
args = [{CHANNEL_ARGS}]
launch = {{ grid = ["cdiv(C, 128)"], block = [128], policy = "free" }}
[kernel.chan_sum.check]
rtol = 1e-4
atol = 1e-4
sizes = [{{ N = 3, C = 5, HW = 77 }}]
[kernel.chan_sum.bench]
sizes = [{{ N = 16, C = 64, HW = 65536 }}]
""").kernels["chan_sum"]


def test_an_accumulation_over_the_nest_becomes_one_loop_rowpar_splits():
    """A channel's sum over its images' planes (BatchNorm's statistics): the nest carries sum, updated in the inner
    loop alone, so the collapsed loop makes the same updates in the same order (exact), and rowpar then splits the
    whole N * HW reduction where it split only the loop over N."""
    u = unit(CHANNEL_SUM, channel_spec())
    assert COLLAPSE.why_not(u) is None
    out = COLLAPSE.apply(u)
    flat = out.text[out.text.index("for (long long ptxf_f"):]
    assert "int n = (int)(ptxf_f / (HW));" in flat and "sum += p[i];" in flat
    split = RowParallelPass(1024).apply(out)
    assert "ptxf_f = (0) + ptxf_lane; ptxf_f < (long long)(N) * (HW); ptxf_f += 1024" in split.text
    assert "sum = ptxf_block_reduce(sum," in split.text


def test_a_declaration_reading_what_the_nest_accumulates_is_refused():
    """A declaration of the outer body evaluated once per outer iteration would be evaluated once per inner one."""
    src = CHANNEL_SUM.replace("const float* p = x", "float before = sum; const float* p = x").replace(
        "sum += p[i];", "sum += p[i] - before;")
    why = COLLAPSE.why_not(unit(src, channel_spec()))
    assert why is not None and "reads sum, which the nest updates" in why, why
    # found by a red team (2026-12-05): the declaration reads the sum through another name, a reference to it
    alias = CHANNEL_SUM.replace("    float sum = 0.0f;\n", "    float total = 0.0f; float& sum = total;\n").replace(
        "const float* p = x", "const float scale = 1.0f / (1.0f + fabsf(total)); const float* p = x").replace(
        "sum += p[i];", "sum += p[i] * scale;").replace("out[c] = sum;", "out[c] = total;")
    why = COLLAPSE.why_not(unit(alias, channel_spec()))
    assert why is not None and "a reference declared in the kernel" in why, why


def test_a_running_value_declared_in_the_outer_body_is_refused():
    src = ROPE.replace("float* ov = y", "float run = 0.0f; float* ov = y").replace("ov[i] = xv[i] * c", "run += c; ov[i] = run * c")
    why = COLLAPSE.why_not(unit(src, rope_spec()))
    assert why is not None and "run: declared in the outer body and written in the nest" in why, why


def test_a_three_deep_nest_gets_its_inner_two_loops_collapsed():
    """A loop over a pair of heads around the head loop: rowpar would not split a loop over the outer two with a serial
    loop inside (its index moves within an iteration), so the head and half-dimension loops are collapsed."""
    src = ROPE.replace("for (int h = 0; h < H; ++h) {", "for (int g = 0; g < 2; ++g) {\n    for (int h = 0; h < H; ++h) {").replace(
        "(size_t)t * H + h", "((size_t)t * 2 + g) * H + h").replace("    }\n}\n", "    }\n    }\n}\n")
    args = ROPE_ARGS.replace('["T", "H", "D"]', '["T", 2, "H", "D"]')
    spec = small_spec("rope", args)
    u = unit(src, spec)
    out = COLLAPSE.apply(u)
    assert "for (int g = 0; g < 2; ++g)" in out.text and "int h = (int)(ptxf_f / (half));" in out.text
    compiles(make_ctx(src, spec), out, [COLLAPSE])
    assert "ptxf_f += blockDim.x" in AUTO.apply(out).text


def test_the_nest_dependence_test():
    """ov[i] and ov[i + half] of ov = y + h * D are disjoint across heads because D >= 2 * half (half = D / 2 >= 1);
    with heads half apart they overlap; a write that does not move with h is shared by every head."""
    nest = Nest("h", "i", {("H",): 1}, {("half",): 1}, (("H", 1), ("half", 1)), (("half", "D", 2),))
    f, g = {("D", "h"): 1, ("i",): 1}, {("D", "h"): 1, ("i",): 1, ("half",): 1}
    assert nest.independent(f, g) and nest.independent(g, f) and nest.independent(f, f)
    f2, g2 = {("h", "half"): 1, ("i",): 1}, {("h", "half"): 1, ("i",): 1, ("half",): 1}
    assert not nest.independent(f2, g2)
    assert not nest.independent({("i",): 1}, {("i",): 1})
    assert not Nest("h", "i", {("H",): 1}, {("half",): 1}, (("H", 1), ("half", 1)), ()).independent(f, g)  # D unknown


# -- host emulation: the collapsed loop visits the same (h, i) pairs -------------------------------------------------

EMU = """
extern "C" __global__ void k(const float* x, float* y, int T, int H, int D)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    for (int h = LOH; h OPH H; ++h) {
        float* o = y + ((size_t)t * (H + 2) + h + 1) * (D + 2);
        for (int i = LOI; i OPI D; i++) {
            o[i] = x[t] + 1000.0f * h + i;
        }
    }
}
"""
EMU_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["T"] },
  { name = "y", role = "out", dtype = "f32", shape = ["T", "H + 2", "D + 2"] },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
"""
HOST = r"""
#include <cstdio>
#include <cstring>
#include <cstddef>
struct Dim { unsigned x, y, z; };
static Dim blockIdx, threadIdx, blockDim;
#define __global__
namespace a {
ORIGINAL
}
namespace b {
COLLAPSED
}
int main()
{
    static float x[4] = {0.5f, 1.5f, 2.5f, 3.5f}, y1[4 * 9 * 12], y2[4 * 9 * 12];
    const int shapes[][2] = {{7, 10}, {1, 1}, {3, 2}, {0, 5}, {5, 0}, {-2, -3}, {4, 3}};
    for (auto& s : shapes) {
        std::memset(y1, 0, sizeof y1);
        std::memset(y2, 0, sizeof y2);
        blockDim = {4, 1, 1};
        for (unsigned t = 0; t < 4; ++t) {
            threadIdx = {t, 0, 0};
            a::k(x, y1, 4, s[0], s[1]);
            b::k(x, y2, 4, s[0], s[1]);
        }
        if (std::memcmp(y1, y2, sizeof y1) != 0) { std::printf("differ at H=%d D=%d\n", s[0], s[1]); return 1; }
    }
    std::printf("same\n");
    return 0;
}
"""


def _host_same(original: str, collapsed: str, tmp_path) -> str:
    src = HOST.replace("ORIGINAL", original.replace('extern "C"', "")).replace("COLLAPSED", collapsed.replace('extern "C"', ""))
    (tmp_path / "emu.cpp").write_text(src)
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(tmp_path / "emu"), str(tmp_path / "emu.cpp")], check=True)
    return subprocess.run([str(tmp_path / "emu")], capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
@pytest.mark.parametrize("loh, oph, loi, opi", [("0", "<", "0", "<"), ("1", "<", "2", "<"), ("2", "<=", "1", "<="),
                                                ("-1", "<", "0", "<=")])
def test_host_emulation_visits_the_same_pairs(loh, oph, loi, opi, tmp_path):
    src = EMU.replace("LOH", loh).replace("OPH", oph).replace("LOI", loi).replace("OPI", opi)
    spec = small_spec("k", EMU_ARGS)
    u = unit(src, spec)
    assert COLLAPSE.why_not(u) is None, COLLAPSE.why_not(u)
    out = COLLAPSE.apply(u)
    compiles(make_ctx(src, spec), out, [COLLAPSE])
    assert _host_same(src, out.text, tmp_path) == "same"
    # the emulation catches the mistakes it is there for: the digits swapped, a lower bound forgotten
    swapped = out.text.replace("ptxf_f / (", "ptxf_f @ (").replace("ptxf_f % (", "ptxf_f / (").replace("ptxf_f @ (", "ptxf_f % (")
    assert swapped != out.text and _host_same(src, swapped, tmp_path) != "same"
    if loi != "0":
        forgot = out.text.replace(f"(int)({loi} + ptxf_f %", "(int)(ptxf_f %")
        assert forgot != out.text and _host_same(src, forgot, tmp_path) != "same"


def test_indices_declared_before_the_nest_are_assigned_and_must_be_dead_after_it():
    src = ROPE.replace("    int half = D / 2;\n", "    int half = D / 2;\n    int h, i;\n").replace(
        "for (int h = 0;", "for (h = 0;").replace("for (int i = 0;", "for (i = 0;")
    spec = rope_spec()
    out = COLLAPSE.apply(unit(src, spec))
    assert "h = (int)(ptxf_f / (half));" in out.text and "i = (int)(ptxf_f % (half));" in out.text
    assert "ptxf_f += blockDim.x" in AUTO.apply(out).text
    compiles(make_ctx(src, spec), out, [COLLAPSE])
    read = src.replace("    }\n}\n", "    }\n    y[t] = h;\n}\n")
    why = COLLAPSE.why_not(unit(read, spec))
    assert why is not None and "h (declared before the loop) is read after it" in why, why


def test_wide_indices_take_an_unsigned_flat_index():
    src = ROPE.replace("for (int h = 0;", "for (size_t h = 0;")
    out = COLLAPSE.apply(unit(src, rope_spec()))
    assert "for (unsigned long long ptxf_f = 0; ptxf_f < (unsigned long long)(H) * (half); ++ptxf_f)" in out.text
    assert "size_t h = (size_t)(ptxf_f / (half));" in out.text


def test_chains_are_proposed_with_and_without_collapse():
    """collapse is an optional group: on the RoPE example the generator proposes rowpar chains over the collapsed nest
    and over the inner loop alone (measured on an H200, neither kind wins at every size)."""
    from ptxfactory.search.generators.transform import OPTIONAL_GROUPS, TransformGenerator
    from _generator_support import example_ctx

    assert "nest" in OPTIONAL_GROUPS
    chains = [c.description for c in TransformGenerator().propose(example_ctx("rope"))]
    with_it = [d for d in chains if "collapse+rowpar_" in d]
    without = [d for d in chains if "+rowpar_" in d and "collapse" not in d]
    assert with_it and without, chains
    assert {d.split("rowpar_")[1].split("+")[0] for d in with_it} & {d.split("rowpar_")[1].split("+")[0] for d in without}


SUM2 = """
extern "C" __global__ void k(const float* x, float* y, int T, int H, int D)
{
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < T) {
        float s = 0.0f;
        for (int h = 0; h < H; h++) {
            for (int w = 0; w < D; w++) {
                s += x[b * H * D + h * D + w];
            }
        }
        y[b] = s;
    }
}
"""
SUM2_HOST = r"""
#include <cstdio>
#include <cstring>
struct Dim { unsigned x, y, z; };
static Dim blockIdx, threadIdx, blockDim;
#define __global__
namespace a {
ORIGINAL
}
namespace b {
COLLAPSED
}
int main()
{
    static float x[3 * 7 * 9], y1[3], y2[3];
    for (int e = 0; e < 3 * 7 * 9; ++e) x[e] = (float)((e * 37) % 101 - 50);
    const int shapes[][2] = {{7, 9}, {1, 1}, {3, 2}, {0, 5}, {5, 0}, {2, 9}};
    for (auto& s : shapes) {
        std::memset(y1, 0, sizeof y1); std::memset(y2, 0, sizeof y2);
        blockDim = {4, 1, 1};
        for (unsigned t = 0; t < 4; ++t) {
            threadIdx = {t, 0, 0};
            a::k(x, y1, 3, s[0], s[1]);
            b::k(x, y2, 3, s[0], s[1]);
        }
        if (std::memcmp(y1, y2, sizeof y1) != 0) { std::printf("differ at H=%d W=%d\n", s[0], s[1]); return 1; }
    }
    std::printf("same\n");
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_a_contiguous_nest_is_read_at_the_flat_index_without_divisions(tmp_path):
    """sum over the last two dims (a new user's trial, 2026-12-05): `x[b * H * D + h * D + w]` is the flat index
    `b * H * W + f`, so the collapsed loop keeps no digit (no 64-bit division an element) and vector_loops can widen
    it after rowpar; the host emulation gives the same sums. An index whose row stride is not the inner bound keeps
    the digits."""
    spec = small_spec("k", """
  { name = "x", role = "in", dtype = "f32", shape = ["T", "H", "D"] },
  { name = "y", role = "out", dtype = "f32", shape = ["T"] },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
""")
    out = COLLAPSE.apply(unit(SUM2, spec))
    assert "s += x[(b * H * D + 0 * D + 0) + ptxf_f];" in out.text
    assert "/ (D)" not in out.text and "% (D)" not in out.text
    src = SUM2_HOST.replace("ORIGINAL", SUM2.replace('extern "C"', "")).replace("COLLAPSED", out.text.replace('extern "C"', ""))
    (tmp_path / "emu.cpp").write_text(src)
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(tmp_path / "emu"), str(tmp_path / "emu.cpp")], check=True)
    assert subprocess.run([str(tmp_path / "emu")], capture_output=True, text=True).stdout.strip() == "same"
    other = unit(SUM2.replace("h * D + w", "h * (D + 1) + w"), spec)
    strided = COLLAPSE.apply(other) if COLLAPSE.why_not(other) is None else None
    assert strided is None or "int w = (int)(ptxf_f % (D));" in strided.text
