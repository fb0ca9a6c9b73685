"""What past jobs say before this one starts: scores for configurations, knobs and generators, from the lesson store.

Every score is *relative*: ``log(speedup / best speedup of that job)`` (0 = as fast as that job's
best; a failed or crashed candidate counts as :data:`FAILED`), so a lesson learnt on a kernel where
everything was 3x faster compares with one where it was 1.2x (the normalisation kernel_tuner's
strategies use). Two kinds of evidence:

- ``configs``: every configuration a generator evaluated in past jobs, with its relative score.
  A new candidate of the same generator is scored by the configurations nearest to it (kernel
  regression over its knob values, :meth:`Priors.config_score`): knobs interact (a wide block wins
  with few vectors per thread and loses with many), so the configuration that won on LayerNorm,
  as a whole, is the first guess for RMSNorm, not the best value of each knob alone.
- ``knob``: ``"knob=value"`` main effects whatever the generator (in each past job and generator, the
  mean score of the candidates with that value minus the mean of all its values): how ``block=256``
  or ``math=fast`` fared across families, the lesson that carries over to a family never run before.

A failure teaches only on its own kernel class: on another class the family may have computed
another function (a GELU epilogue on a softmax), which says nothing about speed. Knobs that choose
*which* function is computed (:data:`FUNCTION_KNOBS`) are compared only within their class.

Generators get a prior too, from the rewards their candidates earned (``log(speedup / best so far
in that job)``, clipped; a failure ``log 0.5``): over every class for ``tune`` and ``transform``,
which apply to any kernel; only on this kernel class for a family, whose record on another class
(where it may compute another function) says nothing here. The bandit treats a prior as a few
pseudo-observations; a family with no record on this class counts as never tried, so it goes first.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ptxfactory.protocol import Candidate

# Weight of a past configuration from another kernel class against one from this class, and of the
# generator-agnostic main effects in a candidate's score: the more general, the less it is trusted.
OTHER_CLASS, ANY_GENERATOR = 0.5, 0.25
# Each knob value that differs divides a past configuration's weight by e**2 (about 7): the nearest
# configurations decide, farther ones only break ties.
MISMATCH_DECAY = 2.0
# A family never run before borrows the past configurations of the generator whose knobs overlap its
# own by at least this Jaccard similarity (softmax and row-wise normalisation: 0.5; transpose and GEMV: 0.25).
SIBLING_SIMILARITY = 0.4
# Relative score of a candidate that failed (verification, crash, compile): below any verified one
# worth keeping (log 0.22: a candidate at 22% of the best).
FAILED = -1.5

# Knobs that choose *which function* a family computes (RMS or LayerNorm, the activation of an
# epilogue), not how fast: what was right for one kernel class says nothing about another, so only
# same-class lessons count for them.
FUNCTION_KNOBS = frozenset({"norm", "epilogue", "stats", "residual", "y"})


def generator_kind(name: str) -> str:
    """``tune`` and ``transform`` are themselves (``ptx_tune`` and ``ptx_transform``, their PTX counterparts, too);
    every other generator is an expert ``family`` skeleton."""
    name = name.removeprefix("ptx_")
    return name if name in ("tune", "transform", "original") else "family"


@dataclass(frozen=True)
class ArmPrior:
    """Past evidence for one generator: ``n`` experiments with mean log speedup ``mean``."""

    n: int
    mean: float


@dataclass(frozen=True)
class PastConfig:
    """One configuration of a generator in past jobs: its knob values (function knobs only when
    ``same_class``), ``n`` experiments with mean relative score ``rel``."""

    params: Mapping[str, object]
    same_class: bool
    rel: float
    n: int = 1


@dataclass(frozen=True)
class ConfigScore:
    """A candidate's score from past configurations of its generator: ``rel`` (relative log speedup,
    <= 0) for each knob in ``knobs``, the knobs the past configurations share with it."""

    rel: float
    knobs: frozenset[str]


@dataclass(frozen=True)
class Priors:
    """Scores from the lesson store (see the module docstring). Empty for a cold start."""

    configs: Mapping[str, tuple[PastConfig, ...]] = field(default_factory=dict)  # generator -> its past configurations
    knob: Mapping[str, float] = field(default_factory=dict)  # "knob=value" -> mean main effect
    generators: Mapping[str, ArmPrior] = field(default_factory=dict)
    class_generators: Mapping[str, ArmPrior] = field(default_factory=dict)
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def empty(self) -> bool:
        return not (self.configs or self.knob or self.generators or self.class_generators)

    def config_score(self, cand: Candidate, vocabulary: frozenset[str] | None = None) -> ConfigScore | None:
        """Kernel regression over past configurations: the weighted mean of their relative scores, each
        weighted by ``exp(-2 * knob values that differ)``, by its number of experiments, and by 1 (this
        class) or :data:`OTHER_CLASS`. Only the knobs both have are compared; function knobs only within
        the class. The configurations are those of ``cand``'s generator, else those of the generator's
        nearest sibling (:meth:`sibling`, by ``vocabulary``: every knob the generator proposes, so that
        all its candidates are scored from the same past). None when neither has a past."""
        vocabulary = vocabulary if vocabulary is not None else frozenset(cand.params)
        memo = ("config", cand.generator, json.dumps(cand.params, sort_keys=True, default=str), vocabulary)
        if memo not in self._memo:
            source = cand.generator if cand.generator in self.configs else self.sibling(cand.generator, vocabulary)
            self._memo[memo] = self._regress(cand.params, self.configs[source]) if source else None
        return self._memo[memo]

    def sibling(self, generator: str, vocabulary: frozenset[str]) -> str | None:
        """The other family whose past configurations have the knobs most like ``vocabulary`` (Jaccard
        similarity of the two knob sets, function knobs aside; at least two shared and a similarity of
        :data:`SIBLING_SIMILARITY`): a family with the same tuning structure (the softmax and the row-wise
        normalisation both have block, rows per block, vectors per thread and a load hint), whose best
        configurations are the first guess for a family never run before."""
        memo = ("sibling", generator, vocabulary)
        if memo not in self._memo:
            wanted = vocabulary - FUNCTION_KNOBS
            best, best_sim = None, SIBLING_SIMILARITY
            families = {g: c for g, c in self.configs.items() if generator_kind(g) == "family"}
            for other, configs in sorted(families.items()):
                theirs = {k for c in configs for k in c.params} - FUNCTION_KNOBS
                shared = len(wanted & theirs)
                sim = shared / len(wanted | theirs) if wanted | theirs else 0.0
                if other != generator and shared >= 2 and sim >= best_sim:
                    best, best_sim = other, sim + 1e-12  # ties: the first in name order
            self._memo[memo] = best
        return self._memo[memo]

    @staticmethod
    def _regress(params: Mapping[str, object], configs: tuple[PastConfig, ...]) -> ConfigScore | None:
        total = weight = 0.0
        knobs: set[str] = set()
        for past in configs:
            shared = [k for k in params if k in past.params]
            if not shared:
                continue
            w = past.n * (1.0 if past.same_class else OTHER_CLASS) * math.exp(-MISMATCH_DECAY * mismatches(params, past.params))
            total += w * past.rel
            weight += w
            knobs.update(shared)
        return ConfigScore(total / weight, frozenset(knobs)) if weight > 0 else None

    def knob_score(self, key: str, value) -> float | None:
        """The weighted main effect of one knob value across generators, or None when no past job varied it."""
        if key in FUNCTION_KNOBS:
            return None
        effect = self.knob.get(f"{key}={value}")
        return None if effect is None else ANY_GENERATOR * effect

    def neutral(self, key: str) -> float | None:
        """The mean score of the values of ``key`` that past jobs tried (None: none was): what a value
        never tried before is assumed to score, so that unknown is neither best nor worst."""
        memo = ("neutral", key)
        if memo not in self._memo:
            scores = [] if key in FUNCTION_KNOBS else [v for name, v in self.knob.items() if name.startswith(f"{key}=")]
            self._memo[memo] = ANY_GENERATOR * sum(scores) / len(scores) if scores else None
        return self._memo[memo]

    def arm(self, generator: str) -> ArmPrior | None:
        """Evidence for ``generator``: on this class for a family, on any class for ``tune``/``transform``."""
        if generator_kind(generator) == "family":
            return self.class_generators.get(generator)
        return self.generators.get(generator)


EXPLORE_BONUS = 0.05  # log-speedup units: an untried knob value looks a little better than the best tried one
PASS_FLAG = "pass:"  # a knob that says a source pass was applied (value 1); absent means not applied
# the variant suffix of a pass's name (rowpar_lanes32, rowpar_auto_e128, smem_tile_4x4, hold_row8, scan_warp): variants of one pass
_VARIANT = re.compile(r"(_auto(_e\d+)?|_warp|_lanes\d+|_block\d+|_rows\d+|_\d+x\d+(_k\d+|_tf32)?(_s\d+)?|_?\d+)$")


def pass_kind(name: str) -> str:
    """A pass variant's pass: ``rowpar_lanes32`` and ``rowpar_auto_e128`` -> ``rowpar``, ``hold_row8`` -> ``hold_row``,
    ``smem_tile_8x4_k16`` -> ``smem_tile``, ``mma_tile_64x128_tf32`` -> ``mma_tile`` (a ``pass:`` flag keeps its prefix)."""
    return _VARIANT.sub("", name)


def mismatches(a: Mapping[str, object], b: Mapping[str, object]) -> int:
    """How many knob values differ between two configurations of one generator: the knobs both have, compared, plus
    the passes only one has (``pass:NAME`` flags: a chain with ``smem_tile_4x4`` and one with ``rowpar_lanes32``
    differ there, however alike their other passes), two variants of one pass (``rowpar_lanes32`` and
    ``rowpar_block256``) counting once. Between chains of passes a knob only one has otherwise (``lanes``, ``block``)
    is not counted: it belongs to a pass the other does not run. Between configurations of no passes (a family's, a
    tuning's) it is: a knob left out there has its default value (a row-wise configuration without ``occupancy`` runs
    at its launch bounds' occupancy), so ``occupancy=full`` and ``wpre`` are two knobs away, not the same point."""
    shared = sum(a[k] != b[k] for k in a if k in b)
    only = [{pass_kind(k) for k in x.keys() - y.keys() if k.startswith(PASS_FLAG)} for x, y in ((a, b), (b, a))]
    if not any(k.startswith(PASS_FLAG) for k in (*a, *b)):
        return shared + len(a.keys() ^ b.keys())
    return shared + len(only[0] | only[1])


def job_score(logs: list[float | None], best_log: float) -> float:
    """This job's relative score of one knob value: the mean of ``log(speedup) - log(best so far)``
    over its candidates (``None``: a failure, :data:`FAILED`), each clipped to at least FAILED."""
    return sum(FAILED if v is None else max(FAILED, v - best_log) for v in logs) / len(logs)


# Weight of the prior guess in the estimate from this job's configurations: that of one evaluated
# configuration two knob values away, so the nearest evaluated configurations dominate.
JOB_PRIOR_WEIGHT = math.exp(-2 * MISMATCH_DECAY)


def job_estimate(params: Mapping[str, object], evaluated: list[tuple[Mapping[str, object], float | None]], best_log: float,
                 prior: float | None) -> tuple[float, frozenset[str]] | None:
    """This job's estimate of a configuration's relative score (``log(speedup) - best_log``): kernel regression
    over the configurations of the same generator this job evaluated (``(params, log speedup)``, None for a
    failure, :data:`FAILED`), shrunk towards ``prior`` (else the mean of those evaluated) with the weight of
    one configuration two values away. Returns the estimate and the knobs it covers, or None."""
    total = weight = 0.0
    knobs: set[str] = set()
    rels = []
    for past, log in evaluated:
        shared = [k for k in params if k in past]
        if not shared:
            continue
        rel = FAILED if log is None else max(FAILED, log - best_log)
        w = math.exp(-MISMATCH_DECAY * mismatches(params, past))
        total += w * rel
        weight += w
        rels.append(rel)
        knobs.update(shared)
    if not rels:
        return None
    centre = prior if prior is not None else sum(rels) / len(rels)
    return (total + JOB_PRIOR_WEIGHT * centre) / (weight + JOB_PRIOR_WEIGHT), frozenset(knobs)


def candidate_score(cand: Candidate, priors: Priors, job: Mapping[str, list[float | None]], best_log: float = 0.0,
                    vocabulary: frozenset[str] | None = None,
                    evaluated: list[tuple[Mapping[str, object], float | None]] | None = None,
                    parent_rel: float | None = None) -> float:
    """How promising ``cand`` looks: the mean over its knobs of one relative score per knob value (a
    candidate with fewer knobs, a GELU-erf beside a GELU-tanh with its approximation knob, is neither
    favoured nor penalised for it).

    ``evaluated``: the configurations of ``cand``'s generator this job evaluated, ``(params, log speedup
    or None)``; ``best_log``: the log of the best speedup so far. Once there are some, the knobs they
    cover score :func:`job_estimate` (the nearest evaluated configurations decide, so the search moves
    one or two knob values away from the best so far before it jumps across the space). Every other
    knob value scores, in order: its score in this job from ``job`` (``"generator:knob=value"`` -> the
    log speedups of the candidates with that value, :func:`job_score`); the score of the nearest past
    configurations (:meth:`Priors.config_score`; ``vocabulary``: every knob ``cand``'s generator
    proposes), when they have this knob; the value's main effect across generators
    (:meth:`Priors.knob_score`); when other values of the same knob were tried in this job, the best
    of their scores plus :data:`EXPLORE_BONUS`; the mean main effect of the knob's values
    (:meth:`Priors.neutral`); else the generator's average relative score in this job, else in past jobs
    (:func:`_average`), else 0, or ``parent_rel`` where that is higher: the relative score of the candidate
    ``cand`` was made from (``log(its speedup) - best_log``; 0 for a child of the best), as a knob nobody knows
    is guessed to leave its parent's time as it was. With no evidence at all every candidate scores 0 and the
    generator's own order stands.
    """
    if not cand.params:
        return 0.0
    past = priors.config_score(cand, vocabulary) if priors.configs else None
    here = job_estimate(cand.params, evaluated, best_log, past.rel if past else None) if evaluated else None
    score = 0.0
    unknown = None  # what a knob nothing knows scores: found once for the candidate, at its first such knob
    for key, value in cand.params.items():
        if here is not None and key in here[1]:
            score += here[0]
            continue
        name = f"{cand.generator}:{key}={value}"
        logs = job.get(name)
        if logs:
            score += job_score(logs, best_log)
            continue
        if past is not None and key in past.knobs:
            score += past.rel
            continue
        prior = priors.knob_score(key, value)
        if prior is not None:
            score += prior
            continue
        prefix = f"{cand.generator}:{key}="
        tried = [job_score(v, best_log) for k, v in job.items() if k.startswith(prefix) and v]
        if tried:
            score += max(tried) + EXPLORE_BONUS
            continue
        neutral = priors.neutral(key)
        if neutral is None:
            if unknown is None:
                unknown = _average(cand.generator, priors, evaluated, best_log)
                unknown = unknown if parent_rel is None else max(unknown, parent_rel)
            neutral = unknown
        score += neutral
    return score / len(cand.params)


def _average(generator: str, priors: Priors, evaluated: list[tuple[Mapping[str, object], float | None]] | None,
             best_log: float) -> float:
    """What a knob nothing has ever said anything about scores: the mean relative score of the configurations
    ``generator`` evaluated in this job (``evaluated``), else of its past configurations, else 0. Relative scores
    are at most 0 (0: as fast as the best), so scoring such a knob 0 would rank a candidate made only of new
    knobs (``fast_math`` alone on the naive kernel) level with the best so far, ahead of every chain the job or
    the store knows (H200, l2norm_rows after another job's lessons: four of its nine candidates were that single
    and its children). The average keeps an unknown knob neither best nor worst; on a child of the best,
    :func:`candidate_score` raises it to the parent's 0 (with the average alone, fast_math as a follow-up of the
    best and shuffle_reduce after blockrow were not tried within 12 candidates: H200, 2026-12-04)."""
    if evaluated:
        return job_score([v for _, v in evaluated], best_log)
    past = priors.configs.get(generator)
    if past:
        return sum(c.rel * c.n for c in past) / sum(c.n for c in past)
    return 0.0
