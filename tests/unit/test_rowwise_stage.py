"""CPU tests of the rowwise family's staged cache: a row's cached vectors in dynamic shared memory filled by
``cp.async`` (sm_80+), sized at launch from the row length, instead of registers sized for the longest bench row.

Checked here: which targets get staged configurations (sm_80 without clusters, sm_90 with them), the size of the
cache per thread (:func:`stage_vecs`: the longest bench row, at most STAGE_BYTES a block), the launch's dynamic
shared memory at every row length against what the kernel's dispatch makes each thread cache, the PTX (the copies
and their wait, few registers whatever the cache's size; NVRTC, not nvcc's fallback) and the static checks; a short
row's vectors (at most STAGE_REGS a thread) held in registers, the launch then asking for no shared memory. Host emulation of the kernel text
(the copies done by plain loads there) is in test_rowwise_variants.py; the GPU runs in
tests/gpu/test_gpu_rowwise_cluster.py.
"""
from __future__ import annotations

import pytest

from ptxfactory.harness.compile import compile_candidate, compile_ptx
from ptxfactory.harness.static_checks import static_check
from ptxfactory.protocol import evaluate
from ptxfactory.search.generators.rowwise import (STAGE_BYTES, STAGE_REGS, RowwiseConfig, RowwiseNormFamily, match_spec,
                                                  stage_vecs)
from _generator_support import example_ctx

MATRIX_BENCH = [{"M": 32768, "N": 256}, {"M": 32768, "N": 4096}, {"M": 8192, "N": 262144}]


def _ctx(bench: list[dict], arch: str = "sm_90a", example: str = "rmsnorm"):
    ctx = example_ctx(example)
    spec = ctx.spec.model_copy(update={"arch": arch, "bench": ctx.spec.bench.model_copy(update={"sizes": bench})})
    return example_ctx(example, spec=spec)


def _staged(ctx):
    return [c for c in RowwiseNormFamily().propose(ctx) if c.params.get("stage") == "smem"]


def test_staged_configurations_follow_the_target():
    for arch, staged, clusters in (("sm_75", False, False), ("sm_80", True, False), ("sm_90a", True, True)):
        cands = RowwiseNormFamily().propose(_ctx(MATRIX_BENCH, arch))
        st = [c for c in cands if c.params.get("stage")]
        assert bool(st) == staged, arch
        assert any("cluster" in c.params for c in st) == clusters, arch
        # every staged one is the twin of a register configuration proposed just before it (or a cluster one)
        for c in st:
            assert c.launch.shared_mem != 0 and "stage=smem" in c.description
        assert all(c.launch.shared_mem == 0 for c in cands if not c.params.get("stage"))


def test_stage_vecs_holds_the_row_within_the_budget():
    assert stage_vecs(256, 32, 16) == 1  # a short row: one vector a thread
    assert stage_vecs(256, 1000, 16) == 4  # 256 * 4 >= 1000
    cap = STAGE_BYTES // (256 * 16)
    assert stage_vecs(256, 1 << 20, 16) == cap  # a row past the budget: the budget
    assert stage_vecs(256, 1 << 20, 32) == cap // 2  # a residual's entries are twice as large
    assert stage_vecs(256, 32768, 16, cluster=8) == 16  # 8 blocks of 256 threads x 16 vectors hold 32768
    for block in (128, 256, 512, 1024):
        assert block * 16 * stage_vecs(block, 1 << 30, 16) <= STAGE_BYTES


def _dispatch_nc(cfg: RowwiseConfig, vec: int, c: int) -> tuple[int, int]:
    """(stride, cached vectors a thread) as the kernel's dispatch and ``nc`` make them at row length ``c``."""
    tiers = cfg.tiers(vec)
    nvec = c // vec
    tpr, cl = next(((t, 1) for t, _, cap in tiers if c <= cap), (tiers[-1][0], 1))
    if cfg.cluster > 1 and c > tiers[-1][2]:  # the fewest blocks of the cluster whose caches hold the row
        tpr, cl = cfg.block, next((s for s in (2, 4, 8, 16) if s < cfg.cluster and s * cfg.block * cfg.vecs * vec >= c), cfg.cluster)
    stride = tpr * cl
    return stride, (-(-nvec // stride) if nvec < cfg.vecs * stride else cfg.vecs)


@pytest.mark.parametrize("example", ["rmsnorm", "standardize_rows"])
def test_the_launch_holds_what_every_thread_caches_at_every_row_length(example):
    ctx = _ctx(MATRIX_BENCH, example=example)
    m = match_spec(ctx.spec)
    st = _staged(ctx)
    assert len(st) >= 4 and any("cluster" in c.params for c in st)
    lengths = sorted({1, 7, 8, 9, 255, 256, 257, 4095, 4096, 4104, 65536, 100003, 262144, 300000}
                     | {cap + d for c in st for _, _, cap in RowwiseConfig(**_cfg_args(c)).tiers(m.vec) for d in (-1, 0, 1, 8)})
    for cand in st:
        cfg = RowwiseConfig(**_cfg_args(cand))
        for c in lengths:
            if c < 1:
                continue
            smem = int(evaluate(cand.launch.shared_mem, {"M": 3, "N": c}))
            stride, nc = _dispatch_nc(cfg, m.vec, c)
            need = cfg.block * 16 * nc if c >= m.vec and nc > STAGE_REGS else 0
            assert smem >= need, (cand.description, c, smem, need)
            if nc <= STAGE_REGS:  # a short row's vectors stay in registers: no shared memory asked for
                assert smem == 0, (cand.description, c, smem)
            assert smem <= cfg.block * 16 * cfg.vecs <= STAGE_BYTES, (cand.description, c, smem)


def _cfg_args(cand) -> dict:
    p = cand.params
    return dict(block=p["block"], rows_per_block=p["rows_per_block"], vecs=p["vecs"], hint=p["hint"], grid=p["grid"],
                norm=p["norm"], cluster=p.get("cluster", 1), stage=p.get("stage") == "smem")


def test_staged_kernels_compile_with_the_copies_and_few_registers():
    ctx = _ctx(MATRIX_BENCH)
    st = _staged(ctx)
    picks = [st[0], next(c for c in st if "cluster" in c.params), max(st, key=lambda c: c.params["vecs"])]
    for cand in {c.key: c for c in picks}.values():
        ptx = compile_ptx(cand, ctx.spec.arch)
        assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_all" in ptx, cand.description
        assert ".extern .shared .align 16 .b8 ptxf_stage[]" in ptx, cand.description
        r = compile_candidate(cand, ctx.spec.arch, ctx.spec.check.fast_math)
        assert r.compiler == "nvrtc", (cand.description, r.log[:500])  # not nvcc's fallback: NVRTC takes the template
        assert r.resources.spill_stores == 0 and r.resources.registers <= 64, (cand.description, r.resources)
        assert static_check(cand, ctx.spec, r.resources, r.cubin) is None, cand.description
    # the register twin of the largest cache holds it in registers: more of them than its staged twin
    big = max(st, key=lambda c: c.params["vecs"])
    twin = next(c for c in RowwiseNormFamily().propose(ctx)
                if not c.params.get("stage") and c.params["block"] == big.params["block"] and c.params.get("cluster") == big.params.get("cluster")
                and c.params["vecs"] >= 8)
    regs = compile_candidate(twin, ctx.spec.arch, ctx.spec.check.fast_math).resources.registers
    assert regs > compile_candidate(big, ctx.spec.arch, ctx.spec.check.fast_math).resources.registers, twin.description


def test_no_register_cache_takes_more_than_half_the_register_file():
    from ptxfactory.search.generators.rowwise import REGISTER_CACHE

    cands = RowwiseNormFamily().propose(_ctx(MATRIX_BENCH))
    regs = [c for c in cands if not c.params.get("stage")]
    assert all(c.params["block"] * c.params["vecs"] <= REGISTER_CACHE for c in regs)
    big = [c for c in regs if c.params["block"] == 1024]
    assert big and max(c.params["vecs"] for c in big) == REGISTER_CACHE // 1024
    for cand in big:  # (1024 threads x 16 vectors spilled 836 bytes)
        r = compile_candidate(cand, "sm_90a", False)
        assert r.resources.spill_stores == 0, (cand.description, r.resources)


def test_staged_cluster_configurations_preload_w_where_enough_of_x_stays_in_flight():
    """A kernel with a weight: each staged cluster configuration whose SM still holds STAGED_WPRE_IN_FLIGHT bytes of x
    with w in registers takes it preloaded in place of its plain twin, and also over twice the blocks; the others keep
    the plain one. Without a weight, none preloads. Bytes in flight: the blocks the registers (48 + 4 a cached vector of
    bf16 w) and the shared memory allow, times a block's cache."""
    from ptxfactory.search.generators.rowwise import (STAGED_WPRE_IN_FLIGHT, cluster_configs, staged_wpre_blocks,
                                                      staged_wpre_in_flight)

    nvec = 262144 // 8
    plain = cluster_configs(nvec, 16)
    assert plain and all(c.stage and not c.wpre for c in plain)
    with_w = cluster_configs(nvec, 16, wpre_words=4)
    for c in with_w:
        if c.wpre:
            assert staged_wpre_in_flight(c, 4, 16) >= STAGED_WPRE_IN_FLIGHT
    for c in plain:
        twin = RowwiseConfig(c.block, c.rows_per_block, c.vecs, cluster=c.cluster, stage=True, wpre=True)
        kept = staged_wpre_in_flight(twin, 4, 16) >= STAGED_WPRE_IN_FLIGHT
        assert (twin in with_w) == kept and (c in with_w) == (not kept), c
    # the H200 sweep's configurations (bench/results/h200-2026-12-04-f): 256 threads x 16 vectors (108 registers: 2
    # blocks, 128 KiB) and x 8 over 16 blocks (80: 3 blocks, 96 KiB) preload; 512 x 8 (80: 1 block, 64 KiB) does not
    assert staged_wpre_blocks(RowwiseConfig(256, 8, 16, cluster=8, stage=True, wpre=True), 4) == 2
    assert RowwiseConfig(256, 8, 16, cluster=8, stage=True, wpre=True) in with_w
    assert RowwiseConfig(256, 8, 8, cluster=16, stage=True, wpre=True) in with_w
    assert RowwiseConfig(512, 16, 8, cluster=8, stage=True) in with_w
    assert RowwiseConfig(512, 16, 8, cluster=8, stage=True, wpre=True) not in with_w
    # the family: RMSNorm with a weight on sm_90 proposes them; their launch bounds are what the rule assumed
    cands = _staged(_ctx(MATRIX_BENCH))
    pre = [c for c in cands if c.params.get("wpre")]
    assert pre and all("cluster" in c.params for c in pre)
    for c in pre:
        cfg = RowwiseConfig(c.params["block"], c.params["rows_per_block"], c.params["vecs"], cluster=c.params["cluster"],
                            stage=True, wpre=True)
        assert f"__launch_bounds__({cfg.block}, {staged_wpre_blocks(cfg, 4)})" in c.source
