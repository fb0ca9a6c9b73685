"""What the passes propose for the generality trials (``bench/trials/``: naive kernels written by helpers playing new
users), where a pass was once kept away by something unrelated to the kernel's structure: found by the helper who
wrote them, each fixed in the passes, not in the trials."""
from __future__ import annotations

from pathlib import Path

from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import plan_chains, unit_from_context

from test_transform import make_ctx

TRIALS = Path(__file__).parents[2] / "bench" / "trials"


def trial_ctx(name: str, kernel: str | None = None):
    """The trial's kernel as a job sees it (the original candidate a job makes: a template instantiated with the
    spec's first values)."""
    from ptxfactory.search.strategy import original_candidate

    source = (TRIALS / name / f"{name}.cu").read_text()
    spec = parse_spec((TRIALS / name / f"{name}.cu.toml").read_text()).kernels[kernel or name]
    return make_ctx(source, spec, original=original_candidate(spec, source))


def chains(name: str) -> list[str]:
    return ["+".join(p.name for p in c) for c in plan_chains(unit_from_context(trial_ctx(name)))]


def test_quantize_rows_holds_the_row_after_ldg():
    # __float2int_rn(__ldg(x + ...) / scale) read x as written: conversion intrinsics were not known to be pure
    assert any("ldg+" in c and "hold_row" in c for c in chains("quantize_rows"))


def test_cosine_rows_buffers_named_a_and_b_are_vectorised():
    # rowpar's combine lambda took parameters a and b, hiding the kernel's buffers a and b from vector_loops
    assert any("rowpar" in c and "vector_loops" in c for c in chains("cosine_rows"))


def applied(name: str, chain: str) -> str:
    """The kernel text after the planned chain named ``chain`` (pass names joined by ``+``) for trial ``name``."""
    unit = unit_from_context(trial_ctx(name))
    found = [c for c in plan_chains(unit) if "+".join(p.name for p in c) == chain]
    assert found, f"{chain} not planned for {name}"
    for p in found[0]:
        unit = p.apply(unit)
    return unit.data.decode()


def test_triplet_loss_anchor_named_a_is_vectorised_after_atomic_agg():
    # atomic_agg's fold lambda took parameters a and b, hiding the kernel's row pointer a from vector_loops (the
    # helper found every chain with atomic_agg loading the anchor as scalars)
    text = applied("triplet_loss", "restrict+ldg+rowpar_auto+atomic_agg+vector_loops")
    assert "reinterpret_cast<const uint4*>((a + " in text and "reinterpret_cast<const uint4*>((n + " in text


def test_frobenius_sum_of_squares_gets_16_byte_loads_in_its_grid_stride_loop():
    # the scalar grid-stride loop atomic_agg sums in (one atomic a warp a kernel) had no 16-byte loads: vector_loops took
    # a row's lanes only, and atomic_agg's hit flag was no accumulation it knew
    spec = parse_spec((TRIALS / "frobenius_norm" / "frobenius_norm.cu.toml").read_text()).kernels["frobenius_sumsq"]
    unit = unit_from_context(make_ctx((TRIALS / "frobenius_norm" / "frobenius_norm.cu").read_text(), spec))
    found = ["+".join(p.name for p in c) for c in plan_chains(unit)]
    assert "restrict+ldg+grid_stride+atomic_agg+vector_loops+unroll+launch_bounds" in found


def test_a_templated_reduction_reads_its_locals_as_the_spec_fixes_them():
    # template <typename T> with T = float only: a local `T m` was of type 'T' to the passes ("m's type cannot be
    # shuffled"), so no rowpar, colpar or scan took a templated reduction (the helper who wrote min_dim2_tmpl found it)
    assert any(c.startswith("restrict+ldg+rowpar_auto+vector_loops") for c in chains("min_dim2_tmpl"))


def test_an_index_local_declared_inside_the_guard_is_read_by_vectorize_x():
    # `if (row < rows && col < cols) { int idx = row * cols + col; y[idx] = gelu(x[idx]); }`: vectorize_x read the
    # top-level locals only, so the commonest 2-D elementwise kernel got no 16-byte accesses
    assert "restrict+ldg+vectorize_x+launch_bounds" in chains("gelu_erf_2d")


def test_a_kernel_written_as_a_grid_stride_loop_gets_one_wave_and_16_byte_loads():
    """softplus_gs strides over the grid itself, its grid capped by the user at 65535 blocks: with an H200's facts
    grid_stride caps it at one wave (at 16M elements 65535 x 256 threads would leave three quarters idle once each
    moves 4 a step) and vector_loops widens the loop (the grid its group); a kernel that reads blockIdx.x elsewhere is
    not grid-size agnostic and keeps its grid."""
    from ptxfactory.protocol import GpuFacts
    from ptxfactory.search.base import GenContext
    from ptxfactory.search.generators import load
    from ptxfactory.search.generators.transform.grid_stride import strided_already

    ctx = trial_ctx("softplus_gs")
    h200 = GpuFacts(name="H200", arch="sm_90a", sm_count=132, l2_bytes=50 << 20, copy_gbps=4200.0, peak_gbps=4800.0)
    ctx = GenContext(spec=ctx.spec, source=ctx.source, kernel=ctx.kernel, original=ctx.original, facts=h200)
    found = {c.description: c for c in load("transform").propose(ctx)}
    best = found["transform stream+grid_stride+vector_loops+launch_bounds"]
    assert best.launch.grid == ["min(min(cdiv(n, 256), 65535), 1056)"] and "__ldcs(reinterpret_cast<const uint4*>" in best.kernel_text
    assert strided_already(unit_from_context(ctx))
    for change in ("float v = x[i] + (blockIdx.x == 0 ? 1.0f : 0.0f);",  # found by a red team (2026-12-05): each
                   "float v = x[i] + (i < stride ? 1.0f : 0.0f);",       # result depends on the grid's size
                   "float v = x[i] + (threadIdx.x == 0 ? 1.0f : 0.0f);"):
        odd = ctx.source.replace("float v = x[i];", change)
        assert not strided_already(unit_from_context(make_ctx(odd, ctx.spec))), change
    carried = ctx.source.replace("    for (size_t i", "    int first = 1;\n    for (size_t i").replace(
        "float v = x[i];", "float v = x[i] + first; first = 0;")
    assert not strided_already(unit_from_context(make_ctx(carried, ctx.spec)))


def test_a_four_tap_window_is_not_split_over_four_lanes():
    # maxpool1d_dil's window of 4 taps drew rowpar_lanes4: a load a lane, then a combine, for outputs that already fill
    # the GPU (the helper who wrote it judged it a likely loss)
    assert not any("rowpar" in c for c in chains("maxpool1d_dil"))


def test_vectorize_reads_a_bound_declared_before_the_index_and_says_the_real_reason():
    # `int idx = ...; int total = N * C * L_out; if (idx < total)`: the canonical form moves `total` above the index,
    # and vectorize then said "total comes before the index" (a new user's false reason): it reads the tolerant
    # opening and a bound through such a local, and says what stops it (the window's loop)
    from ptxfactory.search.generators.transform.vectorize import VectorizePass

    why = VectorizePass().why_not(unit_from_context(trial_ctx("maxpool1d_k2s2")))
    assert why is not None and "a loop in the element's code" in why


def test_a_split_that_gains_neither_parallelism_nor_coalescing_is_refused_on_a_gpu():
    """convT2d_s2's channel loop (lanes reading H * W apart) under outputs that fill an H200 many times: rowpar
    refuses with the GPU's facts (a helper judged those candidates losses); a row reduction keeps its split."""
    from ptxfactory.protocol import GpuFacts
    from ptxfactory.search.base import GenContext
    from ptxfactory.search.generators.transform.rowpar import RowParallelPass

    h200 = GpuFacts(name="H200", arch="sm_90a", sm_count=132, l2_bytes=50 << 20, copy_gbps=4200.0, peak_gbps=4800.0)

    def on_gpu(name, kernel=None):
        ctx = trial_ctx(name, kernel)
        return unit_from_context(GenContext(spec=ctx.spec, source=ctx.source, kernel=ctx.kernel, original=ctx.original,
                                            facts=h200))

    why = RowParallelPass(8).why_not(on_gpu("convT2d_s2", "conv_transpose2d"))
    assert why is not None and "the rows fill the GPU" in why
    assert RowParallelPass(8).why_not(on_gpu("argmax_lastdim")) is None


def test_a_window_the_launcher_fixes_is_short_for_coarsen_and_specialise_takes_unrolled_rows():
    # dwconv2d_pad (the session's generality check): `for (kh = 0; kh < K; ...)` with K = 3 from the launcher was "not a
    # short one between literal bounds" to coarsen and coarsen_outer, and specialise refused coarsen_outer's
    # `#pragma unroll` as a preprocessor directive
    found = chains("dwconv2d_pad")
    assert "ldg+coarsen_4+unroll+specialise+launch_bounds" in found
    assert "ldg+unflatten+coarsen_outer_4+specialise+launch_bounds" in found


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


def test_decay_scan_gets_no_wasted_proposals_on_an_h200():
    """decay_scan (B x D = 8192 and 65536 threads, one per (b, d), decay[d] re-read by every b) with an H200's facts:
    no grid_stride (its grid fits one wave: the loop would run once), no read-once hint on decay, no block larger than
    the original's (fewer blocks than SMs). The helper who wrote it found all three proposed (2026-12-04)."""
    from ptxfactory.harness.source import find_kernel
    from ptxfactory.protocol import Candidate, GpuFacts, LaunchConfig
    from ptxfactory.search.base import GenContext
    from ptxfactory.search.generators import load

    cu = (TRIALS / "decay_scan" / "decay_scan.cu").read_text()
    spec = parse_spec((TRIALS / "decay_scan" / "decay_scan.cu.toml").read_text()).kernels["decay_scan"]
    k = find_kernel(cu, "decay_scan")
    original = Candidate(kernel_name="decay_scan", source=cu, kernel_text=k.text,
                         launch=LaunchConfig(grid=spec.launch.grid, block=spec.launch.block))
    h200 = GpuFacts(name="H200", arch="sm_90a", sm_count=132, l2_bytes=50 << 20, copy_gbps=4200.0, peak_gbps=4800.0)
    ctx = GenContext(spec=spec, source=cu, kernel=k, original=original, facts=h200)
    found = load("transform").propose(ctx) + load("tune").propose(ctx)
    assert found and not any("grid_stride" in c.description for c in found)
    assert not any("__ldcs(decay" in c.kernel_text or "ptxf_ldna_f32(decay" in c.kernel_text for c in found)
    assert any("__ldcs(x" in c.kernel_text for c in found)  # x, streamed once, still takes the hint
    assert {c.params.get("block") for c in found if "block" in c.params} == {128}
    without = GenContext(spec=spec, source=cu, kernel=k, original=original)  # no GPU: nothing to judge the grid by
    assert any("grid_stride" in c.description for c in load("transform").propose(without))


def test_gru_cell_h_read_once_at_the_threads_index_takes_the_read_once_hints():
    """gru_cell: h [B, H] is a third of the gates' size but as large as the output hy, one element a thread: streamed,
    so stream reads it through __ldcs (it was kept off as 're-read' while the rule only compared with the largest
    buffer). The gates, read through row pointers, are not hinted (no pass follows a local pointer)."""
    from ptxfactory.search.generators.transform.ldg import StreamPass, streamed

    cu = (TRIALS / "gru_cell" / "gru_cell.cu").read_text()
    spec = parse_spec((TRIALS / "gru_cell" / "gru_cell.cu.toml").read_text()).kernels["gru_cell"]
    u = unit_from_context(make_ctx(cu, spec))
    assert streamed(u, "h") and streamed(u, "hy") and streamed(u, "xg")
    assert "__ldcs(h + idx)" in StreamPass().apply(u).text


def test_gemm_class_trials_get_tensor_core_chains():
    # the naive bf16 GEMM (bench/trials/gemm_bf16) on mma.sync m16n8k16; the fp32 batched GEMM and the direct
    # convolution (an implicit GEMM) through the 3xTF32 split, since their tolerances are not exact
    for name in ("gemm_bf16", "bmm", "conv2d"):
        assert any("mma_tile_" in c for c in chains(name)), name
    # cdist's (a - b)^2 is no product of two loads: smem_tile only
    assert not any("mma_tile_" in c for c in chains("cdist")) and any("smem_tile_" in c for c in chains("cdist"))


def test_causal_softmax_masked_through_locals_gets_online_softmax_then_rowpar():
    # float v = (j > i) ? -INFINITY : row[j]; in the exp-sum loop too: the sum loop's local was not read (2026-12-05)
    assert any("online_softmax+rowpar" in c for c in chains("causal_softmax"))


def test_sum_dim1_walked_by_a_stepped_pointer_gets_colpar():
    # acc += *p; p += N;: a pointer written in the loop had no known offset (walking.py, 2026-12-05)
    assert any("colpar" in c for c in chains("sum_dim1"))


def test_maxpool2x2_counted_with_while_gets_coarsen():
    # int dh = 0; while (dh < 2) { ...; dh++; } read as a row loop: coarsen refused (while_for.py, 2026-12-05)
    assert any("coarsen_4" in c for c in chains("maxpool2x2"))


def test_blur5_on_a_2d_launch_gets_coarsen_outer():
    # a 2-D launch of 16 x 16 blocks, straight-line taps: only hints and block shapes were proposed (2026-12-05)
    # (and since its rows run without the guard in the full path, hoist reads the weights once before them)
    assert any("coarsen_outer_4+unroll+hoist" in c for c in chains("blur5"))


def test_rope_pairs_after_unflatten_gets_vectorize_x():
    # cos_t[t * half + i] along the pair index i: 16-byte loads once the flat index is a 3-D launch (2026-12-05)
    assert any("unflatten+vectorize_x" in c for c in chains("rope_pairs"))


def test_log_softmax_h_gets_no_softmax_skeleton():
    # the softmax family took it for a softmax (it calls expf): 24 candidates computing exp(x - max) / sum (2026-12-05)
    from ptxfactory.search.generators.softmax import SoftmaxFamily
    from test_transform import make_ctx as ctx_of
    cu = TRIALS / "log_softmax_h" / "log_softmax_h.cu"
    spec = parse_spec((TRIALS / "log_softmax_h" / "log_softmax_h.cu.toml").read_text()).kernels["log_softmax_h"]
    ctx = ctx_of(cu.read_text(), spec)
    assert SoftmaxFamily().propose(ctx) == [] and "logarithm" in SoftmaxFamily().why_not(ctx)


def test_attn_naive_gets_no_rowpar_that_repeats_the_second_pass_on_every_lane():
    # rowpar split the max loop and left the exp-sum and V loop serial (its thread-local acc[64]): every lane ran
    # all 2048 keys, up to 1024 times a row's work (a helper's trial, 2026-12-05)
    from ptxfactory.search.generators.transform.rowpar import RowParallelPass
    cu = TRIALS / "attn_naive" / "attn_naive.cu"
    spec = parse_spec((TRIALS / "attn_naive" / "attn_naive.cu.toml").read_text()).kernels["attn_naive"]
    u = unit_from_context(make_ctx(cu.read_text(), spec))
    why = RowParallelPass(32).why_not(u)
    assert why is not None and "every lane of a row would run all of it" in why, why
    assert not any("rowpar" in c for c in chains("attn_naive"))


def test_the_tensor_core_variants_refused_after_a_regrouping_say_their_own_reason():
    """A second helper's new user (2026-12-05): a fused conv + bias + ReLU + scale read as an implicit GEMM through a
    regrouping of the flat index's digits; the tf32 variant (rtol 1e-4) and the cp.async one (a masked, element-wise
    fetch) said the first grouping's operand test ("index of x uses ['n'], not uniform over the block")."""
    from ptxfactory.search.generators.transform import PASSES, unit_from_context
    u = unit_from_context(trial_ctx("conv_bias_relu_scale"))
    why = {p.name: p.why_not(u) for p in PASSES if p.name.startswith("mma_tile")}
    assert why["mma_tile_64x64"] is None
    assert "rtol" in why["mma_tile_64x64_tf32"] and "element by element" in why["mma_tile_64x128_s3"]
