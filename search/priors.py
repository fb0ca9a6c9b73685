"""What past jobs say before this one starts: scores for knobs and generators, from the lesson store.

Scores are mean log speedups (a failed or crashed candidate counts as log 0.5, see
:class:`~ptxfactory.protocol.lesson.Lesson`), so 0 means "no better than the original" and the
scale is the same for every kernel. Three levels of evidence, most specific first:

- ``same_class``: ``"generator:knob=value"`` on this kernel class and arch;
- ``any_class``: ``"generator:knob=value"`` on any kernel class of this arch;
- ``knob``: ``"knob=value"`` whatever the generator, on this arch (how ``block=256`` or ``hint=ldg``
  fared across families: the lesson that carries over to a family never run before).

Generators get a prior too (``generators``: evidence and mean per generator, and per kind:
``family``, ``transform``, ``tune``), which the bandit treats as pseudo-observations.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ptxfactory.protocol import Candidate

# Weights of the three levels in a candidate's score: the more general, the less it is trusted.
SAME_CLASS, ANY_CLASS, ANY_GENERATOR = 1.0, 0.5, 0.25

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

    @property
    def empty(self) -> bool:
        return not (self.same_class or self.any_class or self.knob or self.generators)

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

    def arm(self, generator: str) -> ArmPrior | None:
        """Evidence for ``generator``, else for its kind (a family never run before borrows the families' record)."""
        return self.generators.get(generator) or self.generators.get(f"kind:{generator_kind(generator)}")


EXPLORE_BONUS = 0.05  # log-speedup units: an untried knob value looks a little better than the best tried one


def candidate_score(cand: Candidate, priors: Priors, job: Mapping[str, list[float]]) -> float:
    """How promising ``cand`` looks: the sum over its knobs of one score per knob value.

    ``job`` maps ``"generator:knob=value"`` to this job's rewards so far. A knob value's score is,
    in order: its mean reward in this job; its prior (:meth:`Priors.knob_score`); when other values
    of the same knob were tried in this job, the best of their means plus :data:`EXPLORE_BONUS`
    (optimism: every value of a knob gets tried early, one knob at a time); else 0. With no evidence
    at all every candidate scores 0 and the generator's own order stands.
    """
    score = 0.0
    for key, value in cand.params.items():
        name = f"{cand.generator}:{key}={value}"
        rewards = job.get(name)
        if rewards:
            score += sum(rewards) / len(rewards)
            continue
        prior = priors.knob_score(cand.generator, key, value)
        if prior is not None:
            score += prior
            continue
        prefix = f"{cand.generator}:{key}="
        tried = [sum(r) / len(r) for k, r in job.items() if k.startswith(prefix) and r]
        if tried:
            score += max(tried) + EXPLORE_BONUS
    return score
