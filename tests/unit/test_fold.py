"""CPU tests of the ``fold`` pass (the row's last loop, a map over h, onto the grid's y: a thread per (row, h)).

On the RoPE example and hand-written variants: what it rewrites (the text and the launch), what it refuses and why,
that its output and the fold + rowpar + vector_loops chain compile with NVRTC, and, compiled for the host with g++,
that the folded kernel run over the 2-D grid writes exactly what the original writes (bounds from 0 and from 1, ``<``
and ``<=``, an empty range).
"""
from __future__ import annotations

import shutil

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, run_chain, unit_from_context
from ptxfactory.search.generators.transform.fold import FoldPass

from _host_cuda import SERIAL_PRELUDE, run_host
from test_collapse import ROPE as COLLAPSE_ROPE, ROPE_ARGS
from test_transform import example_ctx, make_ctx

FOLD = FoldPass()

ARGS, ROPE = ROPE_ARGS, COLLAPSE_ROPE  # RoPE in f32, one thread per token: heads around half a head


def spec(bench: str = "{ T = 4096, H = 64, D = 256 }", policy: str = "free"):
    return parse_spec(f"""
[kernel.rope]
args = [{ARGS}]
launch = {{ grid = ["cdiv(T, 128)"], block = [128], policy = "{policy}" }}
[kernel.rope.check]
rtol = 1e-2
atol = 1e-2
sizes = [{{ T = 9, H = 3, D = 64 }}]
[kernel.rope.bench]
sizes = [{bench}]
""").kernels["rope"]


def unit(source: str, s=None):
    return unit_from_context(make_ctx(source, s or spec()))


def test_rope_heads_onto_the_grid_y_then_rowpar_splits_the_head():
    u = unit(ROPE)
    assert FOLD.why_not(u) is None
    out = FOLD.apply(u)
    assert out.launch.grid == ["cdiv(T, 128)", "max(1, (H))"] and out.launch.block == [128]
    assert "const int ptxf_y = blockIdx.y;" in out.text and "if ((int)(0 + ptxf_y) < H) {" in out.text
    assert "const int h = (int)(0 + ptxf_y);" in out.text and "for (int h" not in out.text
    ctx = make_ctx(ROPE, spec())
    chain = [FOLD] + [next(p for p in PASSES if p.name == n) for n in ("rowpar_lanes16", "vector_loops")]
    done = run_chain(unit_from_context(ctx), chain)
    assert done.launch.grid[1] == "max(1, (H))" and "(transform vector_loops)" in done.text
    cand = TransformGenerator().candidate(ctx, done, chain)
    assert cand is not None and cand.params["pass:fold"] == 1
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log


def test_the_rope_example_chains_fold_first():
    from ptxfactory.search.generators.transform import plan_chains
    chains = ["+".join(p.name for p in c) for c in plan_chains(unit_from_context(example_ctx("rope")))]
    first = next(i for i, c in enumerate(chains) if "fold" in c)
    assert first < next(i for i, c in enumerate(chains) if "collapse" in c)
    assert "restrict+ldg+fold+rowpar_lanes16+vector_loops+unroll+raster+launch_bounds" in chains


REFUSED = {
    "an accumulation over h": (ROPE.replace("    int half = D / 2;\n", "    int half = D / 2;\n    float acc = 0.0f;\n")
                               .replace("ov[i + half] = xv[i + half] * c + xv[i] * s;", "acc += xv[i];"),
                               "carries acc"),
    "a store before the loop": (ROPE.replace("    int half = D / 2;\n", "    int half = D / 2;\n    y[t] = 0.0f;\n"),
                                "not a declaration"),
    "a statement after the loop": (ROPE.replace("        }\n    }\n}", "        }\n    }\n    y[t] = 0.0f;\n}"),
                                   "does not end with a for loop"),
    "a break": (ROPE.replace("        float* ov", "        if (h == 2) break;\n        float* ov"), "break"),
    "blockIdx.y already read": (ROPE.replace("int half = D / 2;", "int half = D / 2 + blockIdx.y;"), "blockIdx.y"),
    "no inner loop": ('extern "C" __global__ void rope(const float* x, const float* cs, float* y, int T, int H, int D)\n'
                      "{\n    int t = blockIdx.x * blockDim.x + threadIdx.x;\n    if (t >= T) return;\n"
                      "    for (int h = 0; h < H; ++h) y[(size_t)t * H + h] = x[(size_t)t * H + h] * cs[t];\n}\n",
                      "no loop inside it"),
    # heads that share memory (found by an adversarial review): fold runs them in parallel, unordered
    "two heads write one element": (ROPE.replace("float* ov = y + ((size_t)t * H + h) * D;", "float* ov = y + (size_t)t * H * D;"),
                                    "not proven to touch disjoint"),
    "a head reads the one before": (ROPE.replace("const float* xv = x + ((size_t)t * H + h) * D;",
                                                 "const float* xv = y + ((size_t)t * H + h - 1) * D;"), "not proven to touch disjoint"),
    # bounds whose trip the grid's extent would get wrong (found by an adversarial review)
    "a shadowed bound": (ROPE.replace("    int half = D / 2;\n    for (int h = 0; h < H; ++h)",
                                      "    int half = D / 2;\n    int Hh = H;\n    for (int h = 0; h < Hh; ++h)"), "not an integer parameter"),
    "a division in the bound": (ROPE.replace("h < H;", "h < (H - 9) / 4 + 3;"), "not a sum of products"),
    "h written": (ROPE.replace("        float* ov", "        h += 0;\n        float* ov"), "written"),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_loops_it_cannot_fold_are_left_alone(what):
    src, reason = REFUSED[what]
    why = FOLD.why_not(unit(src))
    assert why is not None and reason in why, (what, why)


def test_a_name_of_the_kernel_is_not_reused():
    src = ROPE.replace("    int half = D / 2;\n", "    int half = D / 2;\n    int ptxf_y = half;\n").replace("ov[i] =", "ov[i + 0 * ptxf_y] =")
    out = FOLD.apply(unit(src))
    assert "const int ptxf_y1 = blockIdx.y;" in out.text and "(0 + ptxf_y1)" in out.text


def test_a_trip_above_the_grid_y_limit_or_a_fixed_launch_is_refused():
    assert "above the grid's y limit" in FOLD.why_not(unit(ROPE, spec("{ T = 64, H = 70000, D = 8 }")))
    assert "policy" in FOLD.why_not(unit(ROPE, spec(policy="fixed")))


# the emulations' main opens alike: token counts, head counts (0: the guard), head dimensions, deterministic inputs
EMU_INPUTS = r"""
    const int Ts[] = {1, 7, 33}, Hs[] = {0, 1, 3, 5}, Ds[] = {2, 6, 64};
    static float x[33 * 5 * 64 + 8], cs[33 * 64 + 8], y[2][33 * 5 * 64 + 8];
    for (int i = 0; i < (int)(sizeof x / 4); ++i) x[i] = (float)((i * 37) % 101) / 7.0f - 6.0f;
    for (int i = 0; i < (int)(sizeof cs / 4); ++i) cs[i] = (float)((i * 53) % 97) / 50.0f - 1.0f;
    long cases = 0;
"""
EMU = SERIAL_PRELUDE + r"""
namespace orig {
ORIG
}
namespace fold {
FOLDED
}
int main() {""" + EMU_INPUTS + r"""    for (int T : Ts) for (int H : Hs) for (int D : Ds) {
        for (int v = 0; v < 2; ++v) {
            std::memset(y[v], 0x5a, sizeof y[v]);
            blockDim.x = 128;
            unsigned gy = v == 0 ? 1 : (unsigned)(YEXT > 1 ? YEXT : 1);
            gridDim.y = gy;
            for (unsigned by0 = 0; by0 < gy; ++by0)
                for (unsigned bx = 0; bx < (unsigned)((T + 127) / 128); ++bx)
                    for (unsigned t = 0; t < 128; ++t) {
                        unsigned by = gy - 1 - by0;  // the y blocks in reverse order: any order is the GPU's to pick
                        blockIdx.x = bx; blockIdx.y = by; threadIdx.x = t;
                        if (v == 0) orig::rope(x, cs, y[v], T, H, D); else fold::rope(x, cs, y[v], T, H, D);
                    }
        }
        if (std::memcmp(y[0], y[1], sizeof y[0])) { printf("T=%d H=%d D=%d: y differs\n", T, H, D); return 1; }
        ++cases;
    }
    printf("ok %ld\n", cases);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the host emulation")
@pytest.mark.parametrize("head", ["for (int h = 0; h < H; ++h)", "for (int h = 1; h <= H - 1; h++)"])
def test_same_outputs_on_host_emulation(head, tmp_path):
    """The original (a 1-D grid) and the folded kernel (its grid's y from the launch) write the same y, every element
    (untouched ones included), at 3 token counts, 4 head counts (0: the guard), 3 head dimensions; the y blocks run in
    reverse order (any order is the GPU's to pick)."""
    src = ROPE.replace("for (int h = 0; h < H; ++h)", head)
    out = FOLD.apply(unit(src))
    yext = out.launch.grid[1].replace("max(1, ", "", 1)[:-1]  # the y extent as C (H, or (H - 1) - (1) + 1)
    program = (EMU.replace("ORIG", src.replace('extern "C" ', "")).replace("FOLDED", out.text.replace('extern "C" ', ""))
               .replace("YEXT", f"({yext.replace('//', '/')})"))
    out = run_host(program, tmp_path)
    assert out.startswith("ok"), out


RASTER_EMU = SERIAL_PRELUDE + r"""
namespace orig {
ORIG
}
namespace raster {
RASTER
}
int main() {""" + EMU_INPUTS + r"""    for (int T : Ts) for (int H : Hs) for (int D : Ds) {
        std::memset(y[0], 0x5a, sizeof y[0]);
        std::memset(y[1], 0x5a, sizeof y[1]);
        blockDim.x = 128;
        for (unsigned bx = 0; bx < (unsigned)((T + 127) / 128); ++bx)
            for (unsigned t = 0; t < 128; ++t) { blockIdx.x = bx; threadIdx.x = t; orig::rope(x, cs, y[0], T, H, D); }
        unsigned blocks = (unsigned)(GRID);  // raster's one x: the row blocks times the folded trip
        for (unsigned b = 0; b < blocks; ++b)
            for (unsigned t = 0; t < 128; ++t) { blockIdx.x = blocks - 1 - b; blockIdx.y = 0; threadIdx.x = t; raster::rope(x, cs, y[1], T, H, D); }
        if (std::memcmp(y[0], y[1], sizeof y[0])) { printf("T=%d H=%d D=%d: y differs\n", T, H, D); return 1; }
        ++cases;
    }
    printf("ok %ld\n", cases);
    return 0;
}
"""


def test_raster_puts_a_row_blocks_folded_iterations_in_consecutive_blocks():
    from ptxfactory.search.generators.transform.raster import RasterPass
    raster = RasterPass()
    assert not raster.applies(unit(ROPE))  # no fold before it
    out = raster.apply(FOLD.apply(unit(ROPE)))
    assert out.launch.grid == ["(cdiv(T, 128)) * (max(1, (H)))"]
    assert "const unsigned ptxf_by = blockIdx.x % " in out.text and "const int ptxf_y = ptxf_by;" in out.text
    assert "blockIdx.y" not in out.text and out.text.count("blockIdx.x") == 2  # only in the two new lines
    # gridDim read anywhere (its x would no longer be the row blocks'): left alone
    folded = FOLD.apply(unit(ROPE))
    assert raster.applies(folded)
    assert not raster.applies(folded.with_text(folded.text.replace("int half = D / 2;", "int half = D / 2 + 0 * gridDim.x;").encode()))
    # the example's chains: every fold chain that reaches rowpar ends in raster, and it compiles
    from ptxfactory.search.generators.transform import plan_chains
    ctx = example_ctx("rope")
    chains = [c for c in plan_chains(unit_from_context(ctx)) if "fold" in [p.name for p in c]
              and any(p.name.startswith("rowpar") for p in c) and c[-1].name in ("launch_bounds", "raster")]  # (no prefix)
    assert chains and all("raster" in [p.name for p in c] for c in chains)
    done = run_chain(unit_from_context(ctx), chains[0])
    r = compile_candidate(TransformGenerator().candidate(ctx, done, chains[0]), "sm_90a")
    assert not isinstance(r, CompileFailed), r.log


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the host emulation")
def test_raster_same_outputs_on_host_emulation(tmp_path):
    """fold then raster, run over its 1-D grid (blocks in reverse order), writes what the original writes, every element."""
    from ptxfactory.search.generators.transform.raster import RasterPass
    src = ROPE.replace("for (int h = 0; h < H; ++h)", "for (int h = 1; h <= H - 1; h++)")
    out = RasterPass().apply(FOLD.apply(unit(src)))
    grid = out.launch.grid[0].replace("cdiv(T, 128)", "((T + 127) / 128)").replace("max(1, ", "std::max(1, ")
    program = (RASTER_EMU.replace("ORIG", src.replace('extern "C" ', "")).replace("RASTER", out.text.replace('extern "C" ', ""))
               .replace("GRID", grid.replace("//", "/")))
    out = run_host(program, tmp_path)
    assert out.startswith("ok"), out
