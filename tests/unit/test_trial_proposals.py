"""What the passes propose for the generality trials (``bench/trials/``: naive kernels written by helpers playing new
users), where a pass was once kept away by something unrelated to the kernel's structure: found by the helper who
wrote them, each fixed in the passes, not in the trials."""
from __future__ import annotations

from pathlib import Path

from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import plan_chains, unit_from_context

from test_transform import make_ctx

TRIALS = Path(__file__).parents[2] / "bench" / "trials"


def chains(name: str) -> list[str]:
    cu = TRIALS / name / f"{name}.cu"
    spec = parse_spec((TRIALS / name / f"{name}.cu.toml").read_text()).kernels[name]
    return ["+".join(p.name for p in c) for c in plan_chains(unit_from_context(make_ctx(cu.read_text(), spec)))]


def test_quantize_rows_holds_the_row_after_ldg():
    # __float2int_rn(__ldg(x + ...) / scale) read x as written: conversion intrinsics were not known to be pure
    assert any("ldg+" in c and "hold_row" in c for c in chains("quantize_rows"))


def test_cosine_rows_buffers_named_a_and_b_are_vectorised():
    # rowpar's combine lambda took parameters a and b, hiding the kernel's buffers a and b from vector_loops
    assert any("rowpar" in c and "vector_loops" in c for c in chains("cosine_rows"))


def test_stencil3d7_boundary_copy_then_return_is_coarsened():
    # if (edge) { out = u; return; } interior: the return kept grid_stride and coarsen away (early_exit.py)
    found = chains("stencil3d7")
    assert any("coarsen_8" in c for c in found) and any("grid_stride" in c for c in found)


def test_spmv_csr_row_bounds_read_through_ldg_are_uniform_for_vector_loops():
    # '__ldg(rowptr + r)' was not known to be the same for every lane (a subscript rowptr[r] was): after ldg, no chain
    # of the CSR row loop carried vector_loops
    assert any("ldg+" in c and "rowpar" in c and "vector_loops" in c for c in chains("spmv_csr"))


def test_adam_step_compound_update_is_vectorised():
    # p[i] -= lr * ...: vectorize read only y[i] = v; stores (and its element registers for a buffer v hid ptxf_v0)
    assert any("vectorize" in c for c in chains("adam_step"))
