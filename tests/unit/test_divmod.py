"""CPU tests of the ``divmod`` pass (``k / d`` and ``k % d`` of a strided loop index -> a carried quotient and remainder).

What it rewrites (RoPE's collapsed nest after rowpar, a grid-stride loop over a flat index), what it refuses, that every
output compiles with NVRTC, and, compiled for the host with g++, that the rewritten loop writes exactly what the
original writes for many starts, steps and divisors (negative ones take the original loop), index types int, unsigned
and long long, with ``continue`` in the body.
"""
from __future__ import annotations

import shutil

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, run_chain
from ptxfactory.search.generators.transform.divmod import DivModPass
from ptxfactory.search.generators.transform.unroll import UnrollPass

from _host_cuda import host_ok
from test_transform import example_ctx, make_ctx, spec_for, unit

DM = DivModPass()

FLAT_ARGS = """
  { name = "x", role = "in", dtype = "i32", shape = ["N"] },
  { name = "y", role = "out", dtype = "i32", shape = ["N"] },
  { name = "z", role = "out", dtype = "i64", shape = ["N"] },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "D", role = "scalar", dtype = "i32", value = 7 },
  { name = "E", role = "scalar", dtype = "i32", value = 5 },
"""
# a grid-stride loop over a flat index taken apart by two divisors known at run time, with a continue
FLAT = """
extern "C" __global__ void k(const int* x, int* y, long long* z, int N, int D, int E)
{
    for (IDX i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += blockDim.x * gridDim.x) {
        int q = i / D, r = i % D;
        y[i] = x[i] * 3 + q * 1000 + r;
        if (r == 2) continue;
        z[i] = (long long)(i / (E)) * 7 + i % E + (i % 4);
    }
}
"""


def _flat(idx: str = "int") -> str:
    return FLAT.replace("IDX", idx)


def test_rope_collapsed_nest_carries_its_digits():
    """collapse + rowpar_auto on RoPE divides the flat index by D/2 each iteration; divmod carries both digits, keeps
    the loop as written for a negative start/step/divisor, and the chain (with unroll) compiles."""
    ctx = example_ctx("rope")
    chain = [next(p for p in PASSES if p.name == n) for n in ("collapse", "rowpar_auto")]
    before = run_chain(unit_from(ctx), chain)
    assert "ptxf_f / (half)" in before.text and DM.refusal(before) is None
    out = UnrollPass().apply(DM.apply(before))
    main, fallback = out.text.split("} else {")
    assert "int h = (int)(ptxf_dm_q0);" in main and "int i = (int)(ptxf_dm_r0);" in main and "ptxf_f / (half)" not in main.split("#pragma")[1]
    assert "ptxf_f / (half)" in fallback and out.text.count("#pragma unroll 4") == 2
    cand = TransformGenerator().candidate(ctx, out, chain + [DM, UnrollPass()])
    assert cand is not None and cand.params["pass:divmod"] == 1
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log


def unit_from(ctx):
    from ptxfactory.search.generators.transform import unit_from_context
    return unit_from_context(ctx)


def test_grid_stride_flat_index_two_divisors():
    spec = spec_for("k", FLAT_ARGS, sizes="[{ N = 1000 }]")
    u = unit(_flat(), spec)
    assert DM.refusal(u) is None
    out = DM.apply(u)
    # D and E are two divisors (E written (E) once and E once: one divisor); the literal 4 is left to the compiler
    assert "const auto ptxf_dm_d0 = (D);" in out.text and "const auto ptxf_dm_d1 = (E);" in out.text
    assert "ptxf_dm_d2" not in out.text and "(i % 4)" in out.text
    main = out.text.split("} else {")[0]
    assert "i / D" not in main and "i % E" not in main and "(long long)(ptxf_dm_q1) * 7 + ptxf_dm_r1" in main
    cand = TransformGenerator().candidate(make_ctx(_flat(), spec), out, [DM])
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log


REFUSED = {
    "index written": ("int q = i / D; i += 0;", "index is written"),
    "index through a reference": ("int& ri = i; int q = i / D; ri += 1;", "aliased"),
    "index redeclared inside": ("int q = i / D; { const int i = 5; q += i / D; }", "redeclared"),
    "divisor declared in the body": ("int m = x[i] % 5 + 1; int q = i / m;", "no k / d"),
    "divisor through a pointer": ("int* pd = &D; int q = i / D; *pd = D + 1;", "no k / d"),
    "divisor through a reference": ("int& rd = D; int q = i % D; rd += 1;", "no k / d"),
    "float divisor": ("float f = 2.5f; int q = (int)(i / f);", "no k / d"),
    "literal divisor": ("int q = i / 8 + i % 3;", "no k / d"),
    "divisor written": ("int q = i / D; D = 3;", "no k / d"),
    "divisor read from memory": ("int q = i / x[0];", "no k / d"),
    "cast index": ("int q = (short)i / D;", "no k / d"),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_loops_it_cannot_prove_are_left_alone(what):
    body, reason = REFUSED[what]
    src = ('extern "C" __global__ void k(const int* x, int* y, long long* z, int N, int D, int E)\n{\n'
           "    for (int i = threadIdx.x; i < N; i += blockDim.x) {\n        " + body + "\n        y[i] = q;\n    }\n}\n")
    why = DM.refusal(unit(src, spec_for("k", FLAT_ARGS, sizes="[{ N = 1000 }]")))
    assert why is not None and reason in why, (what, why)


def test_a_condition_other_than_k_below_n_is_refused():
    src = _flat("unsigned").replace("i < N;", "i != (unsigned)N;")
    why = DM.refusal(unit(src, spec_for("k", FLAT_ARGS, sizes="[{ N = 1000 }]")))
    assert why is not None and "k < N" in why


def test_a_step_with_a_call_is_refused():
    src = _flat().replace("i += blockDim.x * gridDim.x", "i += min(blockDim.x, 64u)")
    why = DM.refusal(unit(src, spec_for("k", FLAT_ARGS, sizes="[{ N = 1000 }]")))
    assert why is not None and "step" in why


EMU_SHIM = r"""
#include <cstdio>
#include <cstring>
#define __global__
struct ptxf_dim { unsigned x, y, z; };
ptxf_dim threadIdx, blockIdx, blockDim, gridDim;
"""
EMU_MAIN = r"""
int main() {
    const int Ns[] = {0, 1, 7, 100, 1000};
    const int Ds[] = {1, 2, 3, 7, 8, 64, 999, 1000, 5000, -3, -1};
    const int Es[] = {5, 1, 129, -7};
    const unsigned blocks[][2] = {{8, 3}, {1, 1}, {32, 5}, {7, 2}, {128, 1}};
    static int x[1000], y[2][1000];
    static long long z[2][1000];
    for (int i = 0; i < 1000; ++i) x[i] = (i * 2654435761u) >> 20;
    long cases = 0;
    for (int N : Ns) for (int D : Ds) for (int E : Es) for (auto& b : blocks) {
        if ((D < 0 || E < 0) && N > 100) continue;
        for (int v = 0; v < 2; ++v) {
            std::memset(y[v], 0x5a, sizeof y[v]); std::memset(z[v], 0x5a, sizeof z[v]);
            blockDim.x = b[0]; gridDim.x = b[1];
            for (unsigned bx = 0; bx < b[1]; ++bx) for (unsigned t = 0; t < b[0]; ++t) {
                blockIdx.x = bx; threadIdx.x = t;
                if (v == 0) orig::k(x, y[v], z[v], N, D, E); else dm::k(x, y[v], z[v], N, D, E);
            }
        }
        if (std::memcmp(y[0], y[1], sizeof y[0]) || std::memcmp(z[0], z[1], sizeof z[0])) {
            printf("N=%d D=%d E=%d block=%u grid=%u: outputs differ\n", N, D, E, b[0], b[1]); return 1;
        }
        ++cases;
    }
    printf("ok %ld\n", cases);
    return 0;
}
"""


# a start that is negative only once converted to the index type (an unsigned value minus 3): the original loop
NEGATIVE_START = """
extern "C" __global__ void k(const int* x, int* y, long long* z, int N, int D, int E)
{
    unsigned s0 = threadIdx.x - 3u;
    for (int i = s0; i < N; i += blockDim.x) {
        if (i + 3 < N) y[i + 3] = 1000 * (i / D) + i % D + x[i + 3];
    }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the host emulation")
@pytest.mark.parametrize("idx", ["int", "unsigned", "long long", "negative start"])
def test_same_outputs_on_host_emulation(idx, tmp_path):
    """The original and the rewritten kernel, run thread after thread on the host, write the same y and z (every
    element, untouched ones included) at 5 lengths, 11 divisors D (negative: the original loop), 4 divisors E and 5
    launch shapes; the index int, unsigned or long long."""
    src = NEGATIVE_START if idx == "negative start" else _flat(idx)
    spec = spec_for("k", FLAT_ARGS, sizes="[{ N = 1000 }]")
    out = DM.apply(unit(src, spec))
    assert "(transform divmod)" in out.text
    host = {ns: t.replace('extern "C" ', "") for ns, t in (("orig", src), ("dm", out.text))}
    program = EMU_SHIM + "".join(f"namespace {ns} {{\n{t}\n}}\n" for ns, t in host.items()) + EMU_MAIN
    host_ok(program, tmp_path)


def test_chains_try_it_after_the_ones_without_it():
    """divmod is an unproven optional group: on RoPE every chain with it follows its twin without it, and the twins
    differ by divmod alone (or by specialise in its place)."""
    from ptxfactory.search.generators.transform import plan_chains
    chains = ["+".join(p.name for p in c) for c in plan_chains(unit_from(example_ctx("rope")))]
    with_dm = [c for c in chains if "+divmod" in c]
    assert with_dm and all("collapse" in c for c in with_dm)  # the split inner loop alone has no division to carry
    for c in with_dm:
        # the twin may version the divisors instead (specialise and divmod are alternatives for one division)
        twins = [t for t in chains if "+divmod" not in t and t.replace("+specialise", "") == c.replace("+divmod", "")]
        assert twins and all(chains.index(t) < chains.index(c) for t in twins), c
