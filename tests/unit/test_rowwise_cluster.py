"""CPU tests of the rowwise family's cluster tier: a row too long for one block's register cache split over the blocks
of a thread block cluster (sm_90+), the blocks' sums combined through distributed shared memory.

What is checked here: which configurations get a cluster (from the longest bench row and the target, nothing else),
the launch grid (whole clusters at every row length, a cluster per row past the single-block tiers), the kernel text
(compiled with NVRTC for sm_90a, the cluster compiled in, its barriers and remote loads in the PTX, the static checks
pass), the index mapping of the template (every vector of a row read by exactly one thread of the cluster), and the
static launch check that refuses grids of partial clusters. The tier runs for real in
tests/gpu/test_gpu_rowwise_cluster.py.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptxfactory.harness.source import find_kernel
from ptxfactory.harness.compile import CompileFailed, compile_candidate, compile_ptx
from ptxfactory.harness.static_checks import MAX_CLUSTER_BLOCKS, check_launch, cluster_dims, kernel_ptx, static_check
from ptxfactory.protocol import LaunchConfig, evaluate
from ptxfactory.search.generators.rowwise import (CLUSTER_CACHE, STAGE_REGS, RowwiseNormFamily, cluster_capable, cluster_configs,
                                                  match_spec, tuning_space)
from _generator_support import example_ctx

ROOT = Path(__file__).resolve().parents[2]


def _ctx(example: str, bench: list[dict], arch: str = "sm_90a"):
    ctx = example_ctx(example)
    spec = ctx.spec.model_copy(update={"arch": arch, "bench": ctx.spec.bench.model_copy(update={"sizes": bench})})
    return example_ctx(example, spec=spec)


def _cluster_cands(ctx):
    return [c for c in RowwiseNormFamily().propose(ctx) if "cluster" in c.params]


def test_a_cluster_only_where_a_row_outgrows_one_blocks_cache():
    # a row of 4096 bf16 (512 vectors) fits a block of 256 caching 4 vectors a thread: no cluster at all
    assert cluster_configs(512) == []
    # 8192 vectors (a 65536-long bf16 row): 512 threads x 4 vectors need 4 blocks; 256 need 8; 1024 need 2; blocks of
    # 512 and 256 also at twice the cache (2 and 4 blocks), first
    got = [(c.block, c.cluster, c.vecs) for c in cluster_configs(8192)]
    assert got == [(512, 2, 8), (512, 4, 4), (256, 4, 8), (256, 8, 4), (1024, 2, 4)]
    # 32768 vectors (262144 bf16): clusters of 16, past the portable 8 (MAX_CLUSTER_BLOCKS on sm_90)
    got = [(c.block, c.cluster, c.vecs) for c in cluster_configs(32768)]
    assert got == [(512, 8, 8), (512, 16, 4), (256, 16, 8), (1024, 8, 4)] and MAX_CLUSTER_BLOCKS == 16
    # past 16 blocks the cache per thread grows (to twice CLUSTER_CACHE), then the rest is re-read
    got = {(c.block, c.cluster, c.vecs) for c in cluster_configs(131072)}
    assert got == {(512, 16, 2 * CLUSTER_CACHE), (256, 16, 2 * CLUSTER_CACHE), (1024, 16, 2 * CLUSTER_CACHE)}
    assert all(c.block * c.cluster * c.vecs >= 8192 for c in cluster_configs(8192))
    # staged (16-byte entries): over the fewest blocks whose STAGE_BYTES (64 KiB) hold the row
    got = [(c.block, c.cluster, c.vecs) for c in cluster_configs(32768, stage_entry=16)]
    assert got == [(512, 8, 8), (256, 8, 16), (1024, 8, 4)]
    assert all(c.stage and c.block * c.cluster * c.vecs >= 32768 for c in cluster_configs(32768, stage_entry=16))


def test_clusters_follow_the_bench_rows_and_the_target():
    long = _ctx("rmsnorm", [{"M": 64, "N": 262144}, {"M": 32768, "N": 1024}])
    assert {c.cluster for c in tuning_space(match_spec(long.spec), long.spec)} >= {8}
    short = _ctx("rmsnorm", [{"M": 32768, "N": 1024}, {"M": 8192, "N": 2048}])
    assert {c.cluster for c in tuning_space(match_spec(short.spec), short.spec)} == {1}
    # no clusters before sm_90
    old = _ctx("rmsnorm", [{"M": 64, "N": 262144}], arch="sm_80")
    assert {c.cluster for c in tuning_space(match_spec(old.spec), old.spec)} == {1}
    assert cluster_capable("sm_90a") and cluster_capable("sm_100") and not cluster_capable("sm_89")


@pytest.mark.parametrize("example", ["rmsnorm", "standardize_rows"])
def test_the_grid_is_whole_clusters_and_the_fewest_blocks_per_long_row(example):
    ctx = _ctx(example, [{"M": 64, "N": 262144}, {"M": 4096, "N": 2048}])
    cands = _cluster_cands(ctx)
    assert cands, "a 262144-long row gets cluster candidates"
    for c in cands:
        cl, block, vecs = c.params["cluster"], c.params["block"], c.params["vecs"]
        assert f"__attribute__((cluster_dims({cl}, 1, 1)))" in c.kernel_text and f"cluster={cl}" in c.description
        assert find_kernel(c.source, ctx.spec.name).params == ctx.kernel.params  # the definition still reads
        one_block = block * vecs * 8  # bf16: 8 elements a vector; the last single-block tier's cap
        for m in (1, 3, 64, 1031):
            for n in (8, 1000, 4096, one_block, one_block + 8, 262144, 100003):
                grid = evaluate(c.launch.grid[0], {"M": m, "N": n})
                assert grid % cl == 0, (c.description, m, n, grid)
                if n > one_block:  # S blocks a row: the fewest (a power of two, at most cl) whose caches hold it
                    split = next((k for k in (2, 4, 8, 16) if k < cl and k * one_block >= n), cl)
                    assert grid == cl * -(-m // (cl // split)), (c.description, m, n, grid)
                else:
                    assert grid >= cl and grid <= cl * m, (c.description, m, n, grid)  # rows per block >= 1
        # the dispatch: single-block tiers up to one block's cache, then the cluster's tier
        assert re.search(rf"if \(N <= {one_block}\) ptxf_rowwise<{block}, 1, {vecs}, (true|false)>", c.kernel_text)
        assert re.search(rf"else ptxf_rowwise<{block}, 1, {vecs}, (true|false), {cl}>", c.kernel_text)
        if cl > 2:  # the split chosen in the kernel as in the grid
            assert f"(N <= {2 * one_block} ? 2 : " in c.kernel_text, c.description


@pytest.mark.parametrize("example", ["rmsnorm", "standardize_rows"])
def test_cluster_candidates_compile_with_the_cluster_in_the_ptx_and_pass_the_static_checks(example):
    ctx = _ctx(example, [{"M": 64, "N": 262144}, {"M": 4096, "N": 2048}])
    for c in _cluster_cands(ctx):
        r = compile_candidate(c, ctx.spec.arch, ctx.spec.check.fast_math)
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        assert r.compiler == "nvrtc", c.description  # NVRTC takes the template (nvcc's fallback would hide an error)
        assert r.resources.registers * c.launch.block[0] <= 65536
        ptx = kernel_ptx(compile_ptx(c, ctx.spec.arch), ctx.spec.name)
        assert cluster_dims(ptx) == (c.params["cluster"], 1, 1)
        assert "barrier.cluster.arrive" in ptx and "barrier.cluster.wait" in ptx
        # each block stores its sum into its peers' shared memory (st.async), reads its own
        assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32" in ptx and "barrier.cluster.arrive.relaxed" in ptx
        assert "ld.shared::cluster" not in ptx and "st.shared::cluster" not in ptx
        assert static_check(c, ctx.spec, r.resources, r.cubin) is None, c.description


def test_the_static_check_refuses_partial_clusters_and_oversized_ones():
    ctx = _ctx("rmsnorm", [{"M": 64, "N": 262144}])
    c = _cluster_cands(ctx)[0]
    cl = c.params["cluster"]
    assert check_launch(c, ctx.spec, None, (cl, 1, 1)) is None
    odd = c.model_copy(update={"launch": LaunchConfig(grid=[f"{cl} * M + 1"], block=c.launch.block, shared_mem=0)})
    found = check_launch(odd, ctx.spec, None, (cl, 1, 1))
    assert found is not None and "not whole clusters" in found.reason
    # the same grid is fine for a kernel without a cluster, and a 32-block cluster is past sm_90's (non-portable) 16
    assert check_launch(odd, ctx.spec, None, None) is None
    assert "non-portable" in check_launch(c, ctx.spec, None, (32, 1, 1)).reason
    # read from the PTX: static_check finds the cluster itself
    r = compile_candidate(odd, ctx.spec.arch, ctx.spec.check.fast_math)
    found = static_check(odd, ctx.spec, r.resources, r.cubin)
    assert found is not None and found.check == "static_launch" and "not whole clusters" in found.reason
    assert cluster_dims(".entry k(\n)\n.explicitcluster\n.reqnctapercluster 2, 1, 1\n{") == (2, 1, 1)
    assert cluster_dims(".entry k(\n)\n{") is None


def test_every_vector_of_a_row_is_read_by_exactly_one_thread_of_the_cluster():
    """The template's index mapping (rowwise.cu): thread t of block `rank` takes vectors v0 + i * STRIDE for the i it
    caches (i < MV in registers; staged: i < NR = STAGE_REGS in registers where nc <= NR, else i < nc in shared
    memory), then from v0 + (regs ? NR : MV) * STRIDE on (re-read), with v0 = rank * TPR + t and STRIDE = S * TPR
    (S: the row's blocks of the cluster)."""
    text = (ROOT / "search" / "generators" / "rowwise.cu").read_text()
    assert "const ${IDX} v0 = (${IDX})rank * TPR + t;" in text and "const int STRIDE = S * TPR;" in text
    # loaded: into shared memory, w (b) preloaded for the cached vectors (NW: the registers' NR, staged all MV), into
    # registers (ptxf_load_row: the row, pipelined also the first and the next group's, each from v0 with STRIDE); read
    # back (ptxf_each_cached): from registers, from shared memory (unrolled whole where w is preloaded: i < nc of NS)
    assert text.count("v0 + i * STRIDE") == 2 and text.count("v0 + i * stride") == 4
    assert text.count("v0, STRIDE, nvec);") == 3
    assert text.count("for (int i = 0; i < NR; ++i)") == 3 and text.count("for (int i = 0; i < nc; ++i)") == 2
    assert text.count("for (int i = 0; i < NW; ++i)") == 1 and "constexpr int NW = !WPRE ? 1 : STAGE ? MV : NR;" in text
    assert "for (int i = 0; i < NS; ++i)" in text and "if (i < nc && active && v < nvec) fn(xsm[i * ${BLOCK}], v, i);" in text
    assert "if (ptxf_vec && v < nvec) wbs[i] = ptxf_load_wb(w, b, v);" in text
    assert "const ${IDX} rest = v0 + (regs ? NR : MV) * STRIDE;" in text
    assert text.count("v = rest; active && v < nvec; v += STRIDE") == 3
    # a staged thread caches nc = min(MV, cdiv(nvec, STRIDE)) vectors (what the launch's shared memory holds)
    assert "const int nc = STAGE ? (int)(nvec < (${IDX})MV * STRIDE ? (nvec + STRIDE - 1) / STRIDE : (${IDX})MV) : MV;" in text
    assert "const bool regs = !STAGE || nc <= NR;" in text and "constexpr int NR = STAGE ? ${STAGE_REGS} : MV;" in text
    for cl, tpr, mv, nvec in [(2, 64, 4, 512), (8, 32, 2, 1000), (4, 32, 4, 37), (8, 64, 8, 64 * 8 * 8 + 5), (1, 32, 16, 40),
                              (1, 32, 16, 64), (2, 32, 8, 65)]:
        for stage in (False, True):
            stride = cl * tpr
            nc = (min(mv, -(-nvec // stride)) if stage else mv)
            nr = STAGE_REGS if stage else mv
            regs = not stage or nc <= nr
            cached = nr if regs else nc
            seen = []
            for rank in range(cl):
                for t in range(tpr):
                    v0 = rank * tpr + t
                    seen += [v0 + i * stride for i in range(cached) if v0 + i * stride < nvec]
                    v = v0 + (nr if regs else mv) * stride
                    while v < nvec:
                        seen.append(v)
                        v += stride
            assert sorted(seen) == list(range(nvec)), (cl, tpr, mv, nvec, stage)


@pytest.mark.parametrize("example", ["rmsnorm", "standardize_rows"])
def test_pushed_sums_follow_a_started_cluster_and_precede_their_barrier(example):
    """In a cluster kernel's PTX: thread 0 initialises the two mbarriers and fences them for the cluster, then a relaxed
    arrive and its wait before the first remote store (every block of the cluster has started and set its barriers);
    per sum, the block arms its barrier for the S slots, stores its sum with st.async (counted on the peer's barrier)
    and waits on its own barrier with acquire at cluster scope; no barrier over the cluster after the start and no other
    remote access (a block's incoming stores all complete before it passes its wait: it may leave)."""
    ctx = _ctx(example, [{"M": 64, "N": 262144}, {"M": 4096, "N": 2048}])
    pushed = _cluster_cands(ctx)
    assert pushed
    for c in pushed:
        ptx = kernel_ptx(compile_ptx(c, ctx.spec.arch), ctx.spec.name)
        ops = re.findall(r"barrier\.cluster\.[\w.]+|st\.shared::cluster|ld\.shared::cluster|st\.async[\w.:]*|"
                         r"mbarrier\.[\w.:]+|fence\.mbarrier_init[\w.]*", ptx)
        start = ["mbarrier.init.shared::cta.b64"] * 2 + ["fence.mbarrier_init.release.cluster",
                                                         "barrier.cluster.arrive.relaxed.aligned", "barrier.cluster.wait.acquire.aligned"]
        one = ["mbarrier.arrive.expect_tx.shared::cta.b64", "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32",
               "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64"]
        sums = 2 if c.params["norm"] == "layer" else 1  # LayerNorm: the mean, then the squared deviations
        assert ops == start + one * sums, (c.description, ops)
        # the barriers sit after the 2 x CL float slots, 8-byte aligned, and the shared array holds them
        cl = c.params["cluster"]
        assert f"__shared__ __align__(8) float ptxf_cl[{2 * cl + 4}];" in c.kernel_text, c.description
        assert f"reinterpret_cast<unsigned long long*>(cl + 2 * {cl}) + which" in c.kernel_text, c.description

def test_each_long_bench_row_gets_wide_clusters_sized_for_it():
    """Bench rows of 65536 and 262144 bf16: the longest row's configurations, and for the shorter one the wide ones
    (8 vectors a thread, blocks of 512 and 256) over the fewest blocks that hold it; the register ones with 8 vectors a
    thread before those with 4, the staged ones after."""
    ctx = _ctx("rmsnorm", [{"M": 32768, "N": 65536}, {"M": 8192, "N": 262144}])
    space = [c for c in tuning_space(match_spec(ctx.spec), ctx.spec) if c.cluster > 1]
    got = [(c.block, c.vecs, c.cluster, c.stage) for c in space]
    assert (512, 8, 2, False) in got and (256, 8, 4, False) in got  # 65536: 2 x 512 x 8 x 8, 4 x 256 x 8 x 8
    assert (512, 8, 8, False) in got and (256, 8, 16, False) in got  # 262144
    regs = [c.vecs for c in space if not c.stage]
    assert regs == sorted(regs, reverse=True) and all(c.stage for c in space[len(regs):])
    # a bench of one long row: only its own
    one = _ctx("rmsnorm", [{"M": 8192, "N": 262144}])
    assert {c.cluster for c in tuning_space(match_spec(one.spec), one.spec) if not c.stage and c.cluster > 1} == {8, 16}
