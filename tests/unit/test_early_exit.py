"""CPU tests of the early-exit normalisation (``if (edge) { ...; return; } rest`` -> ``if (edge) {...} else {rest}``):
what it rewrites, what it leaves as written, that the passes which run an element's code several times in one thread
(grid_stride, coarsen) then take a boundary-copying stencil, that their outputs compile with NVRTC, and, compiled for
the host with g++, that the rewritten kernel writes exactly what the original writes."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import TransformGenerator, plan_chains, run_chain, unit_from_context
from ptxfactory.search.generators.transform import syntax as sx
from ptxfactory.search.generators.transform.early_exit import else_for_early_exits

from _host_cuda import SERIAL_PRELUDE, run_host
from test_transform import make_ctx

TRIAL = Path(__file__).parents[2] / "bench" / "trials" / "stencil3d7"
STENCIL = (TRIAL / "stencil3d7.cu").read_text()


def rewrite(src: str) -> str:
    data = src.encode()
    fn = sx.kernel_function(sx.parse(data).root_node)
    return else_for_early_exits(data, fn.child_by_field_name("body")).decode()


def test_the_boundary_copy_becomes_an_if_else():
    out = rewrite(STENCIL)
    assert "        out[idx] = u[idx];\n    } else {\n" in out and "return;\n    }" not in out
    assert out.count("return;") == 1  # the guard stays: the openings read it
    assert sx.kernel_function(sx.parse(out.encode()).root_node) is not None


def test_two_early_exits_nest():
    src = """extern "C" __global__ void k(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (i == 0) { y[i] = 0.0f; return; }
    if (i == n - 1) { y[i] = 1.0f; return; }
    y[i] = x[i - 1] + x[i + 1];
}"""
    out = rewrite(src)
    assert out.count(" else {") == 2 and out.count("return;") == 1


LEFT = {
    "a guard": "if (i >= n) { return; }\n    y[i] = x[i];",
    "nothing after it": "if (i == 0) { y[i] = 0.0f; return; }",
    "another return inside": "if (i == 0) { if (n > 3) return; y[i] = 0.0f; return; }\n    y[i] = x[i];",
    "an else already": "if (i == 0) { y[i] = 0.0f; return; } else { y[i] = 2.0f; }\n    y[i] += x[i];",
    "a goto": "if (i == 0) { y[i] = 0.0f; return; }\n    goto end;\n    end: y[i] = x[i];",
}


@pytest.mark.parametrize("what", sorted(LEFT))
def test_left_as_written(what):
    src = ('extern "C" __global__ void k(const float* x, float* y, int n)\n{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
           f"    {LEFT[what]}\n}}")
    assert rewrite(src) == src, what


def test_grid_stride_and_coarsen_take_the_stencil_and_compile():
    spec = parse_spec((TRIAL / "stencil3d7.cu.toml").read_text()).kernels["stencil3d7"]
    ctx = make_ctx(STENCIL, spec)
    unit = unit_from_context(ctx)
    chains = plan_chains(unit)
    names = {p.name for c in chains for p in c}
    assert {"grid_stride", "coarsen_4", "coarsen_8"} <= names
    for c in chains:
        if any(p.name in ("grid_stride", "coarsen_8") for p in c) and len(c) > 2:
            r = compile_candidate(TransformGenerator().candidate(ctx, run_chain(unit, c), c), "sm_90a")
            assert not isinstance(r, CompileFailed), r.log


EMU = SERIAL_PRELUDE + r"""
namespace a {
ORIG
}
namespace b {
FLAT
}
int main() {
    static float u[9 * 7 * 11], out[2][9 * 7 * 11];
    for (int i = 0; i < 9 * 7 * 11; ++i) u[i] = (float)((i * 37) % 101) / 7.0f - 6.0f;
    const int dims[][3] = {{1, 1, 1}, {3, 3, 3}, {9, 7, 11}, {2, 5, 4}};
    for (auto& d : dims) {
        int Z = d[0], Y = d[1], X = d[2], n = Z * Y * X;
        for (int v = 0; v < 2; ++v) {
            std::memset(out[v], 0x5a, sizeof out[v]);
            blockDim.x = 64;
            for (unsigned bx = 0; bx < (unsigned)((n + 63) / 64); ++bx)
                for (unsigned t = 0; t < 64; ++t) {
                    blockIdx.x = bx; threadIdx.x = t;
                    if (v == 0) a::stencil3d7(u, out[v], Z, Y, X, 0.5f, 0.25f); else b::stencil3d7(u, out[v], Z, Y, X, 0.5f, 0.25f);
                }
        }
        if (std::memcmp(out[0], out[1], sizeof out[0])) { printf("%d %d %d differs\n", Z, Y, X); return 1; }
    }
    printf("ok\n");
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the host emulation")
def test_same_outputs_on_host_emulation(tmp_path):
    program = EMU.replace("ORIG", STENCIL.replace('extern "C" ', "")).replace("FLAT", rewrite(STENCIL).replace('extern "C" ', ""))
    out = run_host(program, tmp_path)
    assert out.startswith("ok"), out
