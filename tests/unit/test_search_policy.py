"""The search without a GPU: bandit policies, knob scores, stopping rules, and cold vs warm on recorded data.

A ``RecordedDevice`` answers each candidate with a speedup recorded for its knob values (no kernel
runs), the way kernel_tuner tests its strategies: the search's choices are what is under test.
"""
from __future__ import annotations

import math
from itertools import product
from pathlib import Path

import pytest

from ptxfactory.protocol import GpuFacts, Measured, Rejected, SizeTiming
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.policy import ArmState, Thompson, Ucb1, make_policy
from ptxfactory.search.lessons import main_effects
from ptxfactory.search.priors import (
    EXPLORE_BONUS, FAILED, ArmPrior, PastConfig, Priors, candidate_score, generator_kind, job_estimate, mismatches,
)
from ptxfactory.search.strategy import optimise

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rmsnorm" / "rmsnorm.cu"

BLOCK = {64: 1.2, 128: 1.6, 256: 2.4, 512: 2.0}
HINT = {"plain": 0.9, "ldg": 1.0, "stream": 0.95}


def landscape(params: dict) -> float | None:
    """The recorded speedup of a knob setting (None: the candidate fails verification)."""
    if params.get("broken"):
        return None
    return BLOCK[params["block"]] * HINT[params["hint"]]


class KnobFamily:
    """A pretend family: one candidate per (block, hint), in natural order; the knobs are in the source as a #define."""

    kind_name = "knobs"

    def __init__(self, name: str = "knobs", broken: bool = False):
        self.name, self.broken = name, broken

    def propose(self, ctx):
        out = []
        for block, hint in product(BLOCK, HINT):
            params = {"block": block, "hint": hint}
            if self.broken:
                params["broken"] = 1
            out.append(ctx.original.model_copy(update={
                # an extra empty kernel per setting: distinct machine code, so no candidate is a binary duplicate
                "source": ctx.original.source + f'\nextern "C" __global__ void ptxf_{self.name}_{block}_{hint}() {{}}\n',
                "generator": self.name, "description": f"{self.name} block={block} hint={hint}",
                "params": params, "parent": ctx.original.key,
            }))
        return out


class RecordedDevice:
    """Speedups from :func:`landscape`; the original is 1.0. Named like a real GPU so the lesson store keeps its results."""

    def __init__(self):
        self.evaluated: list[dict] = []

    async def facts(self) -> GpuFacts:
        return GpuFacts(name="Recorded H200 (replay)", arch="sm_90a", sm_count=132, l2_bytes=60 << 20,
                        copy_gbps=4000.0, peak_gbps=4800.0)

    async def evaluate(self, spec, baseline, candidate, plan):
        cand = candidate.candidate
        self.evaluated.append(dict(cand.params))
        speedup = 1.0 if cand.key == baseline.candidate.key else landscape(cand.params)
        if speedup is None:
            return Rejected(candidate_key=cand.key, check="correctness", reason="recorded as wrong")
        t = 100.0 / speedup
        timing = SizeTiming(size={"M": 1, "N": 1}, median_us=t, p20_us=t, p80_us=t, baseline_median_us=100.0,
                            bytes_moved=1, gbps=1.0, pct_of_copy=1.0, floor_us=0.0)
        return Measured(candidate_key=cand.key, resources=candidate.resources, timings=[timing], speedup=speedup, verified_sizes=[])

    async def close(self):
        return None


@pytest.fixture
def knob_generators(monkeypatch):
    import ptxfactory.search.strategy as strategy

    families = {"knobs": KnobFamily("knobs"), "other": KnobFamily("other"), "broken": KnobFamily("broken", broken=True)}
    monkeypatch.setattr(strategy, "load_generator", lambda name: families[name])


def first_reaching(summary, fraction: float = 0.95) -> int:
    """1-based index of the first row reaching ``fraction`` of the best speedup of the landscape."""
    target = fraction * max(landscape({"block": b, "hint": h}) for b, h in product(BLOCK, HINT))
    for i, row in enumerate(summary.rows, 1):
        if isinstance(row.result, Measured) and row.result.speedup >= target:
            return i
    return len(summary.rows) + 1


# --- policies ---------------------------------------------------------------------------------

def test_ucb_tries_unobserved_arms_first_then_the_best_mean():
    a, b, c = ArmState("a", [0.1]), ArmState("b"), ArmState("c", [1.0])
    assert Ucb1().choose([a, b, c]) == "b"
    b.rewards.append(-0.5)
    assert Ucb1().choose([a, b, c]) == "c"


def test_a_prior_counts_as_observations_and_fades_with_evidence():
    family = ArmState("fam", prior=ArmPrior(n=50, mean=1.0))
    tune = ArmState("tune", [0.0])
    assert family.n == 4 and family.mean == pytest.approx(1.0)  # capped at 4 pseudo-observations
    assert Ucb1().choose([tune, family]) == "fam"
    family.rewards.extend([-0.7] * 8)  # this job's evidence outweighs the prior
    assert family.mean < 0 and Ucb1().choose([tune, family]) == "tune"


def test_thompson_is_reproducible_with_its_seed_and_prefers_the_better_arm():
    arms = [ArmState("good", [1.0] * 10), ArmState("bad", [-0.5] * 10)]
    picks = [Thompson(seed=7).choose(arms) for _ in range(3)]
    assert len(set(picks)) == 1
    policy = Thompson(seed=1)
    assert sum(policy.choose(arms) == "good" for _ in range(200)) > 190
    with pytest.raises(KeyError, match="known: ucb, thompson"):
        make_policy("greedy")


# --- knob scores --------------------------------------------------------------------------------

def _cand(params, generator="knobs"):
    from ptxfactory.protocol import Candidate, LaunchConfig

    return Candidate(kernel_name="k", source="s", kernel_text="t", launch=LaunchConfig(grid=[1], block=[1]),
                     generator=generator, params=params)


def test_job_evidence_beats_priors_and_untried_values_are_explored():
    priors = Priors(configs={"knobs": (PastConfig({"block": 256}, same_class=True, rel=-0.2),)}, knob={"hint=ldg": 0.4})
    # block from the past configuration, hint from the main effect (weighted 0.25); the mean over the two knobs
    assert candidate_score(_cand({"block": 256, "hint": "ldg"}), priors, {}) == pytest.approx((-0.2 + 0.25 * 0.4) / 2)
    job = {"knobs:block=256": [-0.5], "knobs:hint=plain": [0.2]}
    assert candidate_score(_cand({"block": 256}), priors, job) == pytest.approx(-0.5)
    # hint=stream: no prior, another hint was tried: optimistic
    assert candidate_score(_cand({"hint": "stream"}), Priors(), job) == pytest.approx(0.2 + EXPLORE_BONUS)
    assert candidate_score(_cand({"unroll": 4}), Priors(), job) == 0.0
    assert generator_kind("rowwise") == "family" and generator_kind("tune") == "tune"


def test_the_nearest_past_configuration_decides_not_the_best_value_of_each_knob():
    """Knobs interact: block=512 won with vecs=4 and lost with vecs=2. Per knob, both block=512 and vecs=2
    look middling; the configuration as a whole says which candidate to try first."""
    past = tuple(PastConfig(p, same_class=False, rel=r) for p, r in [
        ({"block": 512, "vecs": 4}, 0.0), ({"block": 512, "vecs": 2}, -0.6),
        ({"block": 256, "vecs": 2}, -0.05), ({"block": 256, "vecs": 4}, -0.3),
    ])
    priors = Priors(configs={"rowwise": past})
    scores = {(b, v): candidate_score(_cand({"block": b, "vecs": v}, "rowwise"), priors, {}) for b in (256, 512) for v in (2, 4)}
    assert max(scores, key=scores.get) == (512, 4)
    assert sorted(scores, key=scores.get, reverse=True) == [(512, 4), (256, 2), (256, 4), (512, 2)]
    near = priors.config_score(_cand({"block": 512, "vecs": 8}, "rowwise"))  # untried value: its neighbours decide
    assert near.knobs == {"block", "vecs"} and -0.6 < near.rel < 0.0


def test_a_family_never_run_borrows_its_siblings_configurations():
    """Softmax shares block, rows per block, vectors and hint with the row-wise family: it is scored from
    row-wise's past; a transpose (tile, pad) shares too little with anything to borrow."""
    rowwise = (PastConfig({"block": 256, "rows_per_block": 8, "vecs": 4, "hint": "ldg", "grid": "adaptive"}, False, 0.0),
               PastConfig({"block": 512, "rows_per_block": 16, "vecs": 2, "hint": "ldg", "grid": "adaptive"}, False, -0.4))
    gemv = (PastConfig({"block": 512, "vec": 16, "hint": "ldg", "unroll": 4}, False, 0.0),)
    priors = Priors(configs={"rowwise": rowwise, "rowreduce": gemv})
    softmax = frozenset({"block", "rows_per_block", "vecs", "vec", "hint", "exp", "math"})
    assert priors.sibling("softmax", softmax) == "rowwise"
    good = _cand({"block": 256, "rows_per_block": 8, "vecs": 4, "vec": 16, "hint": "ldg", "exp": "exp2", "math": "fast"}, "softmax")
    bad = _cand({"block": 512, "rows_per_block": 16, "vecs": 2, "vec": 16, "hint": "ldg", "exp": "exp2", "math": "fast"}, "softmax")
    assert candidate_score(good, priors, {}, vocabulary=softmax) > candidate_score(bad, priors, {}, vocabulary=softmax)
    assert priors.config_score(good, softmax).knobs == {"block", "rows_per_block", "vecs", "hint"}
    assert priors.sibling("transpose", frozenset({"tile", "rows", "block", "pad", "vec"})) is None
    # tune and transform are no family: their knobs (a block, a macro) never make them a sibling
    tune = Priors(configs={"tune": (PastConfig({"block": 256, "TILE": 32}, False, 0.0),)})
    assert tune.sibling("newfamily", frozenset({"block", "TILE", "vec"})) is None


def test_this_jobs_nearest_configurations_decide_and_a_failure_weighs_on_its_neighbours():
    best, slow = {"a": 0, "b": 0, "c": 0}, {"a": 1, "b": 1, "c": 0}
    evaluated = [(best, math.log(2.0)), (slow, math.log(1.0))]
    near_best, _ = job_estimate({"a": 0, "b": 0, "c": 1}, evaluated, math.log(2.0), prior=None)
    near_slow, _ = job_estimate({"a": 1, "b": 1, "c": 1}, evaluated, math.log(2.0), prior=None)
    assert near_slow < near_best < 0.0
    assert near_best > -0.2 and near_slow < -0.5
    # a failure counts as FAILED for its neighbours; the prior pulls an estimate only a little
    broken, knobs = job_estimate({"a": 0, "b": 1, "c": 1}, [({"a": 0, "b": 1, "c": 0}, None)], 0.0, prior=0.0)
    assert knobs == {"a", "b", "c"} and FAILED < broken < 0.8 * FAILED
    assert job_estimate({"x": 1}, evaluated, 0.0, prior=None) is None  # no knob in common


def test_a_chain_with_another_restructuring_pass_is_not_its_neighbour():
    """Pass flags only one configuration has count as differences: a rowpar chain sharing its cosmetic passes with the
    best (a smem_tile chain) is not estimated as good as it; the rowpar single measured slow pulls it down."""
    common = {"pass:restrict": 1, "pass:ldg": 1, "pass:launch_bounds": 1, "hint": "ldg"}
    tiled = {**common, "pass:smem_tile_4x4": 1}
    evaluated = [(tiled, math.log(2.0)), ({"pass:rowpar_auto": 1, "lanes": "auto"}, math.log(0.4)),
                 ({**common, "pass:rowpar_block256": 1, "lanes": 256, "block": 256}, math.log(0.05))]
    lanes32, _ = job_estimate({**common, "pass:rowpar_lanes32": 1, "lanes": 32, "block": 256}, evaluated, math.log(2.0), prior=None)
    tiled8, _ = job_estimate({**common, "pass:smem_tile_8x8": 1}, evaluated, math.log(2.0), prior=None)
    assert lanes32 < -0.5 and -0.3 < tiled8 < 0.0  # (both were 0: the shared cosmetic passes made them the best's twins)
    assert mismatches(tiled, {**common, "pass:rowpar_lanes32": 1, "lanes": 32}) == 2  # two passes; lanes is rowpar's own
    assert mismatches({"pass:rowpar_lanes32": 1, "lanes": 32}, {"pass:rowpar_block256": 1, "lanes": 256}) == 2  # variant, lanes
    assert mismatches({"pass:hold_row8": 1}, {"pass:hold_row_auto": 1}) == 1
    # the auto bounds and the tile rectangles are variants too: one pass each, whatever the suffix
    assert mismatches({"pass:rowpar_auto_e128": 1}, {"pass:rowpar_lanes32": 1}) == 1
    assert mismatches({"pass:smem_tile_8x4_k16": 1}, {"pass:smem_tile_4x4": 1}) == 1
    assert mismatches({"pass:smem_tile_8x4_k16": 1}, {"pass:rowpar_auto": 1}) == 2
    assert mismatches({"pass:rowpar_lanes32": 1, "lanes": 32, "option": "x"}, {"pass:rowpar_lanes32": 1, "lanes": 16}) == 1
    # no passes (a family's configurations): a knob left out has its default, so it differs from one set
    assert mismatches({"block": 128, "option": "x"}, {"block": 256}) == 2
    assert mismatches({"block": 512, "occupancy": "full"}, {"block": 512, "wpre": True}) == 2
    assert mismatches({"block": 512, "occupancy": "full"}, {"block": 512}) == 1


class CubeFamily:
    """Three binary knobs, one candidate per corner, in natural order."""

    name = "cube"

    def propose(self, ctx):
        return [ctx.original.model_copy(update={
            "source": ctx.original.source + f'\nextern "C" __global__ void ptxf_cube_{a}{b}{c}() {{}}\n',
            "generator": "cube", "description": f"cube {a}{b}{c}", "params": {"a": a, "b": b, "c": c},
            "parent": ctx.original.key,
        }) for a, b, c in product((0, 1), repeat=3)]


class CubeDevice(RecordedDevice):
    """A landscape where the best corner (1, 0, 0) is one step from the first and the opposite corner is worst."""

    SPEEDUP = {(0, 0, 0): 2.0, (1, 0, 0): 3.0, (0, 1, 0): 1.8, (0, 0, 1): 1.9, (1, 1, 0): 2.5, (1, 0, 1): 2.6,
               (0, 1, 1): 1.2, (1, 1, 1): 1.1}

    async def evaluate(self, spec, baseline, candidate, plan):
        cand = candidate.candidate
        if cand.key == baseline.candidate.key:
            return await super().evaluate(spec, baseline, candidate, plan)
        t = 100.0 / self.SPEEDUP[(cand.params["a"], cand.params["b"], cand.params["c"])]
        timing = SizeTiming(size={"M": 1, "N": 1}, median_us=t, p20_us=t, p80_us=t, baseline_median_us=100.0,
                            bytes_moved=1, gbps=1.0, pct_of_copy=1.0, floor_us=0.0)
        return Measured(candidate_key=cand.key, resources=candidate.resources, timings=[timing],
                        speedup=100.0 / t, speedup_lo=0.99 * 100.0 / t, speedup_hi=1.01 * 100.0 / t, verified_sizes=[])


async def test_the_search_moves_one_knob_at_a_time_from_the_best(monkeypatch):
    """After the first corner, the next candidates are its neighbours (one knob changed, in the family's order),
    not the corner that changes every knob at once; then the new best's neighbours; the far corner last."""
    import ptxfactory.search.strategy as strategy

    monkeypatch.setattr(strategy, "load_generator", lambda name: CubeFamily())
    summary = await optimise(EXAMPLE, "rmsnorm", backend=CubeDevice(), generators=("cube",), patience=None, use_lessons=False)
    corners = [tuple(r.candidate.params.values()) for r in summary.rows[1:]]
    assert corners[:4] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0)], corners
    assert set(corners[4:6]) == {(1, 1, 0), (1, 0, 1)}, corners
    assert corners[-1] == (1, 1, 1) or corners[-2] == (1, 1, 1), corners
    assert summary.row(summary.best_key).candidate.params == {"a": 1, "b": 0, "c": 0}


# --- the job on recorded data ---------------------------------------------------------------------

async def test_plateau_and_budget_stop_the_search(knob_generators):
    summary = await optimise(EXAMPLE, "rmsnorm", backend=RecordedDevice(), generators=("knobs",), patience=3, use_lessons=False)
    assert summary.stop_reason == "plateau: 3 candidates without a 1% gain"
    speedups = [r.result.speedup for r in summary.rows[1:]]
    last_gain = max(i for i, s in enumerate(speedups) if s > 1.01 * max([1.0] + speedups[:i]))
    assert len(speedups) - 1 - last_gain <= 3 + 2  # stops within patience (+ the candidates already compiling)
    budget = await optimise(EXAMPLE, "rmsnorm", backend=RecordedDevice(), generators=("knobs",), max_candidates=5, patience=None)
    assert len(budget.rows) == 5 and budget.stop_reason == "budget of 5 candidates"
    assert budget.wall_s > 0 and 0 < budget.gpu_busy_s <= budget.wall_s


async def test_a_knob_value_that_broke_is_not_tried_again_first(knob_generators):
    """Within a job: after the broken family's first failure, the bandit moves to the family that works."""
    summary = await optimise(EXAMPLE, "rmsnorm", backend=RecordedDevice(), generators=("broken", "knobs"),
                             patience=None, max_candidates=8, use_lessons=False)
    gens = [r.candidate.generator for r in summary.rows[1:]]
    assert gens[:2] == ["broken", "knobs"]  # each arm once (UCB), in order
    assert gens[2:].count("knobs") >= 4, gens


async def test_warm_search_from_another_family_needs_at_most_half_the_candidates(knob_generators, tmp_path):
    """Cold: no lessons. Warm: lessons from a different family ("other", another kernel class) with the
    same knob landscape. The warm job reaches 95% of the best in at most half the candidates."""
    store = await LessonStore.open(tmp_path / "lessons.sqlite")
    try:
        cold = await optimise(EXAMPLE, "rmsnorm", backend=RecordedDevice(), store=store, generators=("knobs",),
                              patience=None, use_lessons=False)
        # the lessons of another family on another kernel: only the generator-agnostic knob level carries over
        await store._db.execute("UPDATE experiments SET generator = 'other', kernel_class = 'elsewhere'")
        await store._db.commit()
        priors = await store.search_priors("knobs", "sm_90a")
        assert priors.knob["block=256"] > priors.knob["block=64"]
        assert list(priors.configs) == ["other"] and not any(c.same_class for c in priors.configs["other"])
        assert priors.sibling("knobs", frozenset({"block", "hint"})) == "other"
        warm = await optimise(EXAMPLE, "rmsnorm", backend=RecordedDevice(), store=store, generators=("knobs",), patience=None)
    finally:
        await store.close()
    n_cold, n_warm = first_reaching(cold), first_reaching(warm)
    assert n_cold >= 4, [r.candidate.description for r in cold.rows]
    assert n_warm <= n_cold / 2, (n_cold, n_warm, [r.candidate.description for r in warm.rows])
    assert warm.rows[1].candidate.params["block"] == 256  # the first choice follows the lesson


async def test_priors_ignore_simulated_runs(tmp_path, fake_generators):
    from ptxfactory.harness.simulated import SimulatedDevice

    store = await LessonStore.open(tmp_path / "lessons.sqlite")
    try:
        await optimise(EXAMPLE, "rmsnorm", backend=SimulatedDevice(0), store=store, generators=("fake",))
        priors = await store.search_priors("generic", "sm_90a")
    finally:
        await store.close()
    assert priors.empty and math.isclose(len(priors.generators), 0)


def test_function_knobs_transfer_only_within_their_kernel_class():
    """Which function a family computes (norm, epilogue) is learnt per class; how fast (block, hint) carries over."""
    other_class = Priors(configs={"rowwise": (PastConfig({"block": 256}, same_class=False, rel=-0.1),)}, knob={"norm=layer": 1.0})
    # (says nothing: it scores what any knob nobody tried does, the generator's average past score)
    assert candidate_score(_cand({"norm": "layer"}, "rowwise"), other_class, {}) == pytest.approx(-0.1)
    assert candidate_score(_cand({"block": 256}, "rowwise"), other_class, {}) == pytest.approx(-0.1)
    same_class = Priors(configs={"rowwise": (PastConfig({"norm": "layer"}, same_class=True, rel=-0.7),)})
    assert candidate_score(_cand({"norm": "layer"}, "rowwise"), same_class, {}) == pytest.approx(-0.7)


def test_main_effects_compare_values_within_one_job_and_generator():
    """A knob that never varied says nothing; a job's tune children (all slow) do not drag down the
    family's block=128 in the same job, because each (job, generator) is its own group."""
    family = [({"block": 128, "vec": 16}, 0.0), ({"block": 256, "vec": 16}, -0.2)]
    tune = [({"block": 512}, -1.0)]
    other_job = [({"block": 128, "vec": 4}, -0.1), ({"block": 256, "vec": 16}, -0.1)]
    effects = main_effects([family, tune, other_job])
    assert effects["block=128"] == pytest.approx((0.1 + 0.0) / 2)
    assert effects["block=256"] == pytest.approx((-0.1 + 0.0) / 2)
    assert "block=512" not in effects  # tune tried one block in its group
    assert effects["vec=16"] == pytest.approx(0.0) and effects["vec=4"] == pytest.approx(0.0)


async def test_a_failure_on_another_kernel_class_is_not_a_lesson_about_speed(tmp_path):
    """An epilogue family run on a softmax computes the wrong function and is rejected; on a bias+GELU its
    block=256 must not inherit that failure. On its own class the failure counts."""
    from ptxfactory.protocol import Candidate, LaunchConfig

    store = await LessonStore.open(tmp_path / "lessons.sqlite")
    try:
        for job, kclass, params, result in [
            ("softmax-job", "softmax", {"epilogue": "gelu", "block": 256}, None),
            ("softmax-job", "softmax", {"epilogue": "gelu", "block": 512}, None),
            ("gelu-job", "gelu", {"epilogue": "gelu", "block": 512}, 2.0),
        ]:
            cand = Candidate(kernel_name="k", source=f"s{job}{params}", kernel_text="t", launch=LaunchConfig(grid=[1], block=[1]),
                             generator="elementwise", params=params)
            timing = SizeTiming(size={"M": 1}, median_us=1.0, p20_us=1.0, p80_us=1.0, baseline_median_us=2.0, bytes_moved=1,
                                gbps=1.0, pct_of_copy=1.0, floor_us=0.0)
            outcome = (Measured(candidate_key=cand.key, resources=None, timings=[timing], speedup=result, verified_sizes=[]) if result
                       else Rejected(candidate_key=cand.key, check="correctness", reason="wrong function"))
            await store.record(job_id=job, kernel_fingerprint=job, kernel_class=kclass, arch="sm_90a", candidate=cand,
                               result=outcome, gpu=await RecordedDevice().facts())
        elsewhere = await store.search_priors("bias_gelu", "sm_90a")
        at_home = await store.search_priors("softmax", "sm_90a")
    finally:
        await store.close()
    assert [(c.params, c.same_class) for c in elsewhere.configs["elementwise"]] == [({"block": 512}, False)]
    assert sorted((c.params["block"], c.rel) for c in at_home.configs["elementwise"] if c.same_class) == [(256, -1.5), (512, -1.5)]


async def test_kernel_class_names_the_family_and_the_signature(knob_generators):
    summary = await optimise(EXAMPLE, "rmsnorm", backend=None, generators=("knobs",))
    assert summary.kernel_class == "knobs/in2d,in1d,out2d,i32,i32,f32"


def test_idle_workers_compile_the_next_likeliest_candidates_not_the_ones_already_compiling():
    """favourites(): round by round each arm's next-best proposal (arms by their mean), skipping those in flight."""
    from ptxfactory.search.strategy import _Search

    search = _Search(spec=None, original=_cand({}, "original"), gens={"fam": None, "tune": None}, chooser=None, max_candidates=64)
    fam = [_cand({"block": b}, "fam").model_copy(update={"source": f"fam{b}"}) for b in (64, 128, 256)]
    tune = [_cand({"option": o}, "tune").model_copy(update={"source": o}) for o in ("-maxrregcount=64", "-maxrregcount=128")]
    search.queues = {"fam": list(fam), "tune": list(tune)}
    search.arms["fam"].rewards.append(0.5)  # the family has done better: its proposals come first each round
    search.job_knobs = {"fam:block=256": [0.0], "fam:block=128": [-0.4], "fam:block=64": [-0.8]}
    picks = search.favourites(4)
    assert [c.source for c in picks] == ["fam256", "-maxrregcount=64", "fam128", "-maxrregcount=128"]
    picks = search.favourites(2, exclude={fam[2].key, tune[0].key})
    assert [c.source for c in picks] == ["fam128", "-maxrregcount=128"]


def test_a_candidate_made_only_of_knobs_nobody_tried_scores_the_generator_s_average_not_its_best():
    """Relative scores are at most 0 (0: the best). A candidate whose knobs neither this job nor the store has seen
    (fast_math alone on the naive kernel) scores the generator's average: below the chain the store rates near its
    best, above the one it rates far below. Scoring it 0 put it first (H200, l2norm_rows after quantize_rows's
    lessons). In a job, the configurations evaluated so far give the average."""
    chain = {"pass:rowpar_auto": 1, "pass:vector_loops": 1, "lanes": "auto", "vec": 16}
    single = {"pass:rowpar_auto": 1, "lanes": "auto"}
    fast = {"pass:fast_math": 1, "math": "fast", "fast_math_ops": "fdividef"}
    past = (PastConfig(chain, False, -0.05, n=2), PastConfig(single, False, -0.45), PastConfig({"pass:grid_stride": 1}, False, -1.2))
    priors = Priors(configs={"transform": past})
    average = (2 * -0.05 - 0.45 - 1.2) / 4
    scores = {name: candidate_score(_cand(p, "transform"), priors, {}) for name, p in
              (("chain", chain), ("single", single), ("fast", fast))}
    assert scores["fast"] == pytest.approx(average)
    assert scores["chain"] > scores["fast"] and scores["fast"] > -1.2
    # in a job: the evaluated configurations' mean relative score (a failure counts FAILED)
    evaluated = [(chain, math.log(40.0)), (single, math.log(29.0)), ({"pass:restrict": 1}, None)]
    best_log = math.log(40.0)
    in_job = candidate_score(_cand(fast, "transform"), Priors(), {}, best_log, evaluated=evaluated)
    assert in_job == pytest.approx((0.0 + math.log(29 / 40) + FAILED) / 3)
    # nothing known at all: 0, and the generator's own order stands
    assert candidate_score(_cand(fast, "transform"), Priors(), {}) == 0.0


def test_an_unknown_knob_on_a_child_of_the_best_scores_its_parent_not_the_average():
    """A knob nothing knows is guessed to leave its parent's time as it was: on a child of the best (fast_math as a
    follow-up) it scores the parent's 0, ahead of the chains the job rates below the best; on a child of a worse
    candidate, the higher of that parent's score and the generator's average. With the average alone, the follow-up
    of the best was not tried within 12 candidates (H200, bias_gelu, 2026-12-04)."""
    chain = {"pass:rowpar_auto": 1, "pass:vector_loops": 1, "lanes": "auto", "vec": 16}
    fast = {"pass:fast_math": 1, "math": "fast", "fast_math_ops": "fdividef"}
    evaluated = [(chain, math.log(40.0)), ({"pass:rowpar_auto": 1, "lanes": "auto"}, math.log(10.0))]
    best_log = math.log(40.0)
    average = (0.0 + math.log(10 / 40)) / 2

    def score(parent_rel):
        return candidate_score(_cand(fast, "transform"), Priors(), {}, best_log, evaluated=evaluated, parent_rel=parent_rel)

    assert score(None) == pytest.approx(average)
    assert score(0.0) == pytest.approx(0.0)
    assert score(math.log(30 / 40)) == pytest.approx(math.log(30 / 40)) and score(math.log(30 / 40)) > average
    assert score(math.log(2 / 40)) == pytest.approx(average)
    # a knob the job has evidence for keeps that evidence, whoever the parent is
    other = {"pass:rowpar_auto": 1, "lanes": "auto"}
    assert (candidate_score(_cand(other, "transform"), Priors(), {}, best_log, evaluated=evaluated, parent_rel=0.0)
            == candidate_score(_cand(other, "transform"), Priors(), {}, best_log, evaluated=evaluated))
