"""CPU tests of the rowwise family's short-row configurations (:func:`short_configs`): where the configurations sized
from the longest bench row give a thread of the shortest one fewer than SHORT_CACHE vectors, configurations sized from
the shortest follow the first pair, each thread then holding SHORT_CACHE (or half) of its vectors in flight with a
small register cache; their kernels compile without spills and verify on the host emulation like any other."""
from __future__ import annotations

from dataclasses import replace

from ptxfactory.harness.compile import compile_candidate
from ptxfactory.protocol import evaluate
from ptxfactory.protocol.result import GpuFacts
from ptxfactory.search.generators.rowwise import (MIN_TPR, PIPE_CACHE, PIPE_REGISTERS, SHORT_BLOCKS, SHORT_CACHE, RowwiseNormFamily,
                                                  _configs, full_fits, match_spec, pipe_configs, short_configs,
                                                  thread_vectors, tuning_space)
from _generator_support import example_ctx


def _ctx(bench: list[dict], arch: str = "sm_90a"):
    ctx = example_ctx("rmsnorm")
    spec = ctx.spec.model_copy(update={"arch": arch, "bench": ctx.spec.bench.model_copy(update={"sizes": bench})})
    return example_ctx("rmsnorm", spec=spec)


def test_short_rows_get_configurations_sized_for_them():
    # bf16: a row of 256 is 32 vectors; of 512, 64
    for n, tpr in ((256, 8), (512, 16)):
        for c in short_configs(n // 8):
            assert c.cluster == 1 and not c.stage and c.vecs in (SHORT_CACHE, SHORT_CACHE // 2)
            assert c.tiers(8)[0][0] == max(MIN_TPR, min(32, n // 8 // c.vecs)), c
            assert thread_vectors(c, n // 8, 8) == min(c.vecs, n // 8 // 32 if c.vecs * 32 < n // 8 else c.vecs)
        assert any(thread_vectors(c, n // 8, 8) == SHORT_CACHE and c.tiers(8)[0][0] == tpr for c in short_configs(n // 8))
    # a row shorter than MIN_TPR threads' caches: still MIN_TPR threads
    assert {c.tiers(8)[0][0] for c in short_configs(2)} == {MIN_TPR}


def test_they_follow_the_first_pair_only_where_the_shortest_bench_row_needs_them():
    wide = _ctx([{"M": 32768, "N": 256}, {"M": 8192, "N": 262144}])
    space = tuning_space(match_spec(wide.spec), wide.spec)
    first = next(i for i, c in enumerate(space) if c.cluster == 1)
    assert thread_vectors(space[first], 32, 8) < SHORT_CACHE
    shorts = short_configs(32)
    assert space[first + 2:first + 2 + len(shorts)] == short_configs(32, wpre=True)[:len(shorts)]  # after the first pair
    half = [c for c in shorts if c.vecs < SHORT_CACHE and not c.full]
    assert [c for c in shorts if c.full] == [replace(c, full=True) for c in half] and half
    assert [c for c in short_configs(32, wpre=True) if c.wpre] == [replace(c, wpre=True) for c in half]
    # rows of 1024 and more: the first configuration gives each thread SHORT_CACHE vectors already
    mid = _ctx([{"M": 32768, "N": 1024}, {"M": 8192, "N": 16384}])
    space = tuning_space(match_spec(mid.spec), mid.spec)
    first = next(i for i, c in enumerate(space) if c.cluster == 1)
    shorts = short_configs(128)
    assert thread_vectors(space[first], 128, 8) >= SHORT_CACHE and space[first + 2:first + 2 + len(shorts)] != shorts


def test_short_candidates_compile_without_spills():
    """The short configurations, their full-occupancy and preloaded-w twins, as candidates: each compiles (NVRTC,
    sm_90a) without local memory within 64 registers (32 at full occupancy); only the wpre twin preloads w."""
    ctx = _ctx([{"M": 32768, "N": 256}, {"M": 8192, "N": 262144}])
    cands = {}
    for c in RowwiseNormFamily().propose(ctx):
        p = c.params
        if "cluster" not in p and "stage" not in p and p["norm"] == "rms":
            cands[(p["block"], p["rows_per_block"], p["vecs"], bool(p.get("wpre")), p.get("occupancy") == "full")] = c
    shorts = short_configs(32, wpre=True)
    assert all((s.block, s.rows_per_block, s.vecs, s.wpre, s.full) in cands for s in shorts)
    for cfg in (shorts[0], next(s for s in shorts if s.wpre), next(s for s in shorts if s.full)):
        c = cands[(cfg.block, cfg.rows_per_block, cfg.vecs, cfg.wpre, cfg.full)]
        r = compile_candidate(c, ctx.spec.arch, ctx.spec.check.fast_math)
        assert r.resources is not None and r.resources.spill_stores == 0 and r.resources.local_bytes == 0, c.description
        assert r.resources.registers <= (32 if cfg.full else 64), c.description
        assert ("constexpr bool WPRE = true;" in c.kernel_text) == cfg.wpre == ("wpre" in c.description)
        assert (f"__launch_bounds__({cfg.block}, {2048 // cfg.block})" in c.kernel_text) == cfg.full == ("occ=full" in c.description)


def _with_facts(ctx, sm_count: int = 132):
    facts = GpuFacts(name="H200-like", arch="sm_90a", sm_count=sm_count, l2_bytes=60 << 20, copy_gbps=4000.0,
                     peak_gbps=4800.0)
    return replace(ctx, facts=facts)


def test_pipelined_short_rows_only_on_a_gpu_and_sized_from_its_sms():
    """Pipelined configurations come with the GPU's facts only (a compile-only job cannot size a persistent grid), ahead
    of the other short ones; each launches at most one full wave (the SM count times the blocks its launch bounds
    promise an SM) and fewer where the rows need fewer blocks."""
    ctx = _ctx([{"M": 32768, "N": 256}, {"M": 8192, "N": 262144}])
    assert not any("persist" in c.params for c in RowwiseNormFamily().propose(ctx))
    m = match_spec(ctx.spec)
    space = tuning_space(m, ctx.spec, sm_count=132)
    pipes = pipe_configs(32, 132)
    first = next(i for i, c in enumerate(space) if c.cluster == 1)
    at = first + 2 + len(short_configs(32, wpre=True))  # after the first pair and the other short ones
    assert space[at:at + len(pipes)] == pipes and len(pipes) == len(SHORT_BLOCKS)
    for c in pipes:
        assert c.persist == 132 * c.min_blocks and c.min_blocks == 65536 // (c.block * PIPE_REGISTERS[c.vecs - 1])
        assert c.vecs == PIPE_CACHE and c.tiers(8)[0][0] == max(MIN_TPR, min(32, 32 // c.vecs))
    cands = [c for c in RowwiseNormFamily().propose(_with_facts(ctx)) if "persist" in c.params]
    assert len(cands) == len(pipes)
    for cand in cands:
        p = cand.params
        grid = evaluate(cand.launch.grid[0], {"M": 32768, "N": 256})
        rows_a_block = p["block"] // max(MIN_TPR, min(32, 32 // p["vecs"]))
        assert grid == min(p["persist"], -(-32768 // rows_a_block))
        assert evaluate(cand.launch.grid[0], {"M": 5, "N": 256}) == -(-5 // rows_a_block)  # a few rows: fewer blocks
        assert "constexpr bool PIPE = true" in cand.kernel_text and f"pipe={p['persist']}" in cand.description


def test_pipelined_candidates_compile_without_spills_within_their_budget():
    """Each pipelined candidate compiles (NVRTC, sm_90a) within PIPE_REGISTERS registers a thread (its two register
    caches and 64-bit row arithmetic), with no local memory."""
    ctx = _with_facts(_ctx([{"M": 32768, "N": 256}, {"M": 8192, "N": 262144}]))
    cands = [c for c in RowwiseNormFamily().propose(ctx) if "persist" in c.params]
    assert cands
    for cand in cands:
        r = compile_candidate(cand, ctx.spec.arch, ctx.spec.check.fast_math)
        assert r.resources is not None and r.resources.spill_stores == 0 and r.resources.local_bytes == 0, cand.description
        budget = 65536 // (cand.params["block"] * (65536 // (cand.params["block"] * PIPE_REGISTERS[cand.params["vecs"] - 1])))
        assert r.resources.registers <= budget, cand.description


def test_no_pipelined_configurations_for_forms_that_would_spill():
    """A residual (two register caches of x and res) or per-row statistics: not pipelined (full_fits)."""
    ctx = _with_facts(_ctx([{"M": 32768, "N": 256}]))
    m = match_spec(ctx.spec)
    assert full_fits(m)
    assert not full_fits(replace(m, res="r")) and not full_fits(replace(m, stats=(("s", "f32", "rstd"),)))
    space = _configs(replace(m, res="r"), ctx.spec, sm_count=132)
    assert space and not any(c.persist for c in space)
