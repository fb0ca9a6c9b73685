"""CPU tests of the rowwise family's short-row configurations (:func:`short_configs`): where the configurations sized
from the longest bench row give a thread of the shortest one fewer than SHORT_CACHE vectors, configurations sized from
the shortest follow the first pair, each thread then holding SHORT_CACHE (or half) of its vectors in flight with a
small register cache; their kernels compile without spills and verify on the host emulation like any other."""
from __future__ import annotations

from dataclasses import replace

from ptxfactory.harness.compile import compile_candidate
from ptxfactory.search.generators.rowwise import (MIN_TPR, SHORT_CACHE, RowwiseNormFamily, match_spec, short_configs,
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
