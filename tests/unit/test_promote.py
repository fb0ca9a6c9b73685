"""The ``promote`` pass: an element a loop updates at one fixed index is held in a register for the loop (a naive
kernel accumulating straight into its output), so rowpar and smem_tile see a sum; what it refuses. Outputs compile
with NVRTC."""
from __future__ import annotations

import pytest

from ptxfactory.search.generators.transform import PASSES, TransformGenerator
from ptxfactory.search.generators.transform.promote import PromotePass

from test_transform import compiles, make_ctx, spec_for, unit

P = {p.name: p for p in PASSES}
ROW_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
ROWSUM = """
extern "C" __global__ void rs(const float* x, float* y, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < M) {
        y[r] = 0.0f;
        for (int j = 0; j < N; j++) {
            y[r] += x[r * N + j];
        }
    }
}
"""


def row_spec():
    return spec_for("rs", ROW_ARGS, grid='["cdiv(M, 128)"]', sizes="[{ M = 7, N = 100 }]")


def test_a_row_sum_into_the_output_becomes_a_register_sum_that_rowpar_takes():
    u = unit(ROWSUM, row_spec())
    assert P["rowpar_auto"].why_not(u) is not None  # the store in the loop: rowpar cannot split it
    out = PromotePass().apply(u)
    assert "float ptxf_reg0 = 0.0f;" in out.text and "ptxf_reg0 += x[r * N + j];" in out.text and "y[r] = ptxf_reg0;" in out.text
    assert "y[r] = 0.0f;" not in out.text  # the store before the loop starts the register instead
    compiles(out.text, u.spec, "rs")
    assert P["rowpar_auto"].why_not(out) is None
    cands = TransformGenerator().propose(make_ctx(ROWSUM, u.spec))
    assert any("pass:promote" in c.params and "pass:rowpar_auto" in c.params for c in cands)


MATMUL_ARGS = """
  { name = "A", role = "in", dtype = "f32", shape = ["M", "K"] },
  { name = "B", role = "in", dtype = "f32", shape = ["K", "N"] },
  { name = "C", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "K", role = "scalar", dtype = "i32", value = "K" },
"""
MATMUL = """
extern "C" __global__ void mm(const float* A, const float* B, float* C, int M, int N, int K)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        C[row * N + col] = 0.0f;
        for (int k = 0; k < K; k++)
            C[row * N + col] += A[row * K + k] * B[k * N + col];
    }
}
"""


def test_a_gemm_accumulating_in_c_gets_smem_tile_chains_first():
    spec = spec_for("mm", MATMUL_ARGS, grid='["cdiv(N, 16)", "cdiv(M, 16)"]', block="[16, 16]",
                    sizes="[{ M = 33, N = 65, K = 100 }]")
    ctx = make_ctx(MATMUL, spec)
    cands = TransformGenerator().propose(ctx)
    assert {"pass:promote", "pass:smem_tile_4x4"} <= set(cands[2].params)  # the chains lead: a restructuring one applies
    for c in cands[:4]:
        # a 128 x 64 tile may keep a word or two spilled at 128 registers (measured the fastest on the H200)
        compiles(c.source, spec, "mm", spill_bytes=16 if "pass:smem_tile_8x4_k16" in c.params else 0)


@pytest.mark.parametrize("loop", [
    "for (int j = 0; j < N; j++) { y[r] += x[r * N + j]; __syncthreads(); }",      # a barrier
    "for (int j = 0; j < N; j++) { y[r] += x[r * N + j]; y[j % M] += 1.0f; }",    # another index
    "for (int j = 0; j < N; j++) atomicAdd(&y[r], x[r * N + j]);",                 # an atomic
    "for (int j = 0; j < N; j++) { y[r] += x[r * N + j]; if (y[r] > 9.f) return; }",  # a return
    "float* yr = y + r; for (int j = 0; j < N; j++) y[r] += yr[0] * x[r * N + j];",  # an alias of y
    "for (int j = 0; j < N; j++) y[r + j * 0] += x[r * N + j];",                     # an index that names j
])
def test_what_it_refuses(loop):
    source = ROWSUM.replace("""        for (int j = 0; j < N; j++) {
            y[r] += x[r * N + j];
        }""", "        " + loop)
    assert loop in source
    assert not PromotePass().applies(unit(source, row_spec()))


def test_a_pragma_stays_on_its_loop_and_the_register_goes_above_both():
    src = ROWSUM.replace("        for (int j", "#pragma unroll 4\n        for (int j").replace("        y[r] = 0.0f;\n", "")
    out = P["promote"].apply(unit(src, row_spec()))
    text = out.text
    assert "float ptxf_reg0 = y[r];" in text
    assert text.index("float ptxf_reg0 = y[r];") < text.index("#pragma unroll 4")
    assert "#pragma unroll 4\n        for (int j" in text, text  # nothing between the pragma and its loop
    compiles(text, row_spec(), "rs")


def test_an_index_declared_inside_the_loop_is_not_loop_invariant():
    src = ROWSUM.replace("            y[r] += x[r * N + j];", "            int o = r + j % 2;\n            y[o] += x[r * N + j];")
    assert not P["promote"].applies(unit(src, row_spec()))


def test_after_smem_tile_the_register_name_is_its_own_and_the_chain_compiles():
    """smem_tile writes its outputs in an unrolled loop, each at an index declared in that loop (a batched GEMM whose
    store promote once hoisted out of the loop, naming its register like smem_tile's ptxf_p0)."""
    from test_unflatten import ATTN, attn_spec
    spec = attn_spec()
    tiled = P["smem_tile_4x4"].apply(unit(ATTN, spec))
    if P["promote"].applies(tiled):
        out = P["promote"].apply(tiled)
        assert "ptxf_reg" in out.text
        compiles(out.text, spec, "attn")
    ctx = make_ctx(ATTN, spec)
    for c in TransformGenerator().propose(ctx):
        if "pass:promote" in c.params and "pass:smem_tile_4x4" in c.params:
            compiles(c.source, spec, "attn")
