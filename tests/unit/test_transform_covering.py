"""The transform generator's cap (MAX_CANDIDATES) keeps every kind of pass that some planned chain holds
(``covering_order``): a pass whose chains all come late in the plan is still proposed once."""
from __future__ import annotations

from pathlib import Path

from ptxfactory.search.generators.transform import (MAX_CANDIDATES, TransformGenerator, covering_order, plan_chains,
                                                    unit_from_context)
from _generator_support import example_ctx

TRIALS = Path(__file__).resolve().parents[2] / "bench" / "trials"


class _A: name = "a"
class _B: name = "b"
class _C: name = "c"


def test_the_first_chain_of_each_kind_moves_into_the_first_limit_in_order():
    a, b, c = _A(), _B(), _C()
    chains = [[a], [a, b], [a, b], [a, b], [a, b], [a, c], [b]]
    out = covering_order(chains, 3)
    assert out[:3] == [[a], [a, b], [a, c]]  # [a, c] is the first holding c: it moves up; [a, b] fills the room
    assert sorted(map(id, out)) == sorted(map(id, chains))  # nothing lost, nothing repeated
    assert out[3:] == [[a, b], [a, b], [a, b], [b]]  # the rest in the planned order
    assert covering_order(chains, 10) == chains  # room for all: the planned order
    assert covering_order(chains, 2) == chains  # more kinds than room: the planned order


def test_late_passes_are_proposed_within_the_cap():
    # cdist (a GEMM-like 2-D kernel): specialise (D = 64) was the 36th of 40 planned chains; rmsnorm_bwd: fast_math
    # past 50 lane chains
    for trial, wanted in (("cdist", "specialise"), ("rmsnorm_bwd", "fast_math")):
        ctx = example_ctx(TRIALS / trial / f"{trial}.cu")
        chains = plan_chains(unit_from_context(ctx))
        assert len(chains) > MAX_CANDIDATES and not any(p.name == wanted for c in chains[:MAX_CANDIDATES] for p in c)
        cands = TransformGenerator().propose(ctx)
        assert len(cands) == MAX_CANDIDATES
        assert any(f"pass:{wanted}" in c.params for c in cands), (trial, [c.description for c in cands])
