"""What past jobs say before this one starts: scores for knobs and generators, from the lesson store.

Knob scores are *relative*: the mean over past experiments of ``log(speedup / best speedup of that
job)`` (0 = as fast as that job's best, a failed or crashed candidate counts as :data:`FAILED`), so
a lesson learnt on a kernel where everything was 3x faster compares with one where it was 1.2x
(the normalisation kernel_tuner's strategies use). Three levels of evidence, most specific first:

- ``same_class``: ``"generator:knob=value"`` on this kernel class and arch;
- ``any_class``: ``"generator:knob=value"`` on any kernel class of this arch;
- ``knob``: ``"knob=value"`` whatever the generator, on this arch (how ``block=256`` or ``hint=ldg``
  fared across families: the lesson that carries over to a family never run before).

Generators get a prior too, from the rewards their candidates earned (``log(speedup / best so far
in that job)``, clipped; a failure ``log 0.5``): over every class for ``tune`` and ``transform``,
which apply to any kernel; only on this kernel class for a family, whose record on another class
(where it may compute another function) says nothing here. The bandit treats a prior as a few
pseudo-observations; a family with no record on this class counts as never tried, so it goes first.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ptxfactory.protocol import Candidate

# Weights of the three levels in a candidate's score: the more general, the less it is trusted.
SAME_CLASS, ANY_CLASS, ANY_GENERATOR = 1.0, 0.5, 0.25
# Relative score of a candidate that failed (verification, crash, compile): below any verified one
# worth keeping (log 0.22: a candidate at 22% of the best).
FAILED = -1.5

# Knobs that choose *which function* a family computes (RMS or LayerNorm, the activation of an
# epilogue), not how fast: what was right for one kernel class says nothing about another, so only
# same-class lessons count for them.
FUNCTION_KNOBS = frozenset({"norm", "epilogue"})


def generator_kind(name: str) -> str:
    """``tune`` and ``transform`` are themselves; every other generator is an expert ``family`` skeleton."""
    return name if name in ("tune", "transform", "original") else "family"


@dataclass(frozen=True)
class ArmPrior:
    """Past evidence for one generator: ``n`` experiments with mean log speedup ``mean``."""

    n: int
    mean: float


@dataclass(frozen=True)
class Priors:
    """Scores from the lesson store (see the module docstring). Empty for a cold start."""

    same_class: Mapping[str, float] = field(default_factory=dict)
    any_class: Mapping[str, float] = field(default_factory=dict)
    knob: Mapping[str, float] = field(default_factory=dict)
    generators: Mapping[str, ArmPrior] = field(default_factory=dict)
    class_generators: Mapping[str, ArmPrior] = field(default_factory=dict)
    _neutral: dict = field(default_factory=dict, compare=False, repr=False)  # memo of neutral()

    @property
    def empty(self) -> bool:
        return not (self.same_class or self.any_class or self.knob or self.generators or self.class_generators)

    def knob_score(self, generator: str, key: str, value) -> float | None:
        """The weighted score of one knob value, or None when no past job tried it."""
        name = f"{generator}:{key}={value}"
        if name in self.same_class:
            return SAME_CLASS * self.same_class[name]
        if key in FUNCTION_KNOBS:
            return None
        if name in self.any_class:
            return ANY_CLASS * self.any_class[name]
        if f"{key}={value}" in self.knob:
            return ANY_GENERATOR * self.knob[f"{key}={value}"]
        return None

    def neutral(self, generator: str, key: str) -> float | None:
        """The mean prior score of the values of ``key`` that past jobs tried (None: none was): what a value
        never tried before is assumed to score, so that unknown is neither best nor worst."""
        if (generator, key) not in self._neutral:
            self._neutral[(generator, key)] = self._mean_known(generator, key)
        return self._neutral[(generator, key)]

    def _mean_known(self, generator: str, key: str) -> float | None:
        scores = [self.knob_score(generator, key, name.split("=", 1)[1])
                  for name in {*self.same_class, *self.any_class} if name.startswith(f"{generator}:{key}=")]
        if key not in FUNCTION_KNOBS:
            scores += [ANY_GENERATOR * v for name, v in self.knob.items() if name.startswith(f"{key}=")]
        scores = [x for x in scores if x is not None]
        return sum(scores) / len(scores) if scores else None

    def arm(self, generator: str) -> ArmPrior | None:
        """Evidence for ``generator``: on this class for a family, on any class for ``tune``/``transform``."""
        if generator_kind(generator) == "family":
            return self.class_generators.get(generator)
        return self.generators.get(generator)


EXPLORE_BONUS = 0.05  # log-speedup units: an untried knob value looks a little better than the best tried one


def job_score(logs: list[float | None], best_log: float) -> float:
    """This job's relative score of one knob value: the mean of ``log(speedup) - log(best so far)``
    over its candidates (``None``: a failure, :data:`FAILED`), each clipped to at least FAILED."""
    return sum(FAILED if v is None else max(FAILED, v - best_log) for v in logs) / len(logs)


def candidate_score(cand: Candidate, priors: Priors, job: Mapping[str, list[float | None]], best_log: float = 0.0) -> float:
    """How promising ``cand`` looks: the sum over its knobs of one relative score per knob value (<= ~0).

    ``job`` maps ``"generator:knob=value"`` to the log speedups of this job's candidates with that
    value (None for a failure); ``best_log`` is the log of the best speedup so far. A knob value's
    score is, in order: its score in this job (:func:`job_score`); its prior
    (:meth:`Priors.knob_score`); when other values of the same knob were tried in this job, the best
    of their scores plus :data:`EXPLORE_BONUS` (optimism: every value of a knob gets tried early);
    the mean prior of the knob's other values (:meth:`Priors.neutral`); else 0. With no evidence at
    all every candidate scores 0 and the generator's own order stands.
    """
    score = 0.0
    for key, value in cand.params.items():
        name = f"{cand.generator}:{key}={value}"
        logs = job.get(name)
        if logs:
            score += job_score(logs, best_log)
            continue
        prior = priors.knob_score(cand.generator, key, value)
        if prior is not None:
            score += prior
            continue
        prefix = f"{cand.generator}:{key}="
        tried = [job_score(v, best_log) for k, v in job.items() if k.startswith(prefix) and v]
        if tried:
            score += max(tried) + EXPLORE_BONUS
            continue
        score += priors.neutral(cand.generator, key) or 0.0
    return score
