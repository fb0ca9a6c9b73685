"""Which generator (arm) proposes the next candidate: bandit policies over the job's arms.

One interface, small policies: ``choose(arms)`` gets every arm that still has proposals, with
its observations in this job and its prior from past jobs, and returns one arm's name. Rewards
are log speedups over the original (failures count as log 0.5), so a mean of 0 is "as fast as
the original". Policies are deterministic given their seed, so a resumed job makes the same
choices as the one it replaces.
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .priors import ArmPrior

# Pseudo-observations a prior is worth, at most: enough to order the first choices, little enough
# that a handful of this job's own results override it.
PRIOR_WEIGHT = 4.0


@dataclass
class ArmState:
    """One generator in this job: its rewards so far and its prior (None: never seen in a past job)."""

    name: str
    rewards: list[float] = field(default_factory=list)
    prior: ArmPrior | None = None
    pending: int = 0  # candidates chosen from this arm whose results are not in yet

    @property
    def pseudo_n(self) -> float:
        return min(PRIOR_WEIGHT, float(self.prior.n)) if self.prior else 0.0

    @property
    def n(self) -> float:
        """Observations, prior pseudo-observations included."""
        return len(self.rewards) + self.pseudo_n

    @property
    def mean(self) -> float:
        """Posterior mean reward (0 when nothing is known)."""
        n = self.n
        if n == 0:
            return 0.0
        prior_sum = self.pseudo_n * self.prior.mean if self.prior else 0.0
        return (prior_sum + sum(self.rewards)) / n


class Policy(Protocol):
    """Picks the arm that proposes the next candidate."""

    name: str

    def choose(self, arms: Sequence[ArmState]) -> str:
        """The name of one of ``arms`` (never empty)."""
        ...


class Ucb1:
    """UCB1 (Auer et al. 2002): the arm maximising ``mean + c * sqrt(ln N / n)``; an arm never
    tried (no result, none pending, no prior) goes first, in the order given. Candidates still
    compiling or running count in ``n`` (their results are not in yet: choosing ahead must not pick
    the same untried arm twice). ``c = 0.5`` suits rewards in log-speedup units (most within
    [-0.7, 1.5]). Ties go to the earlier arm."""

    name = "ucb"

    def __init__(self, c: float = 0.5):
        self.c = c

    def choose(self, arms: Sequence[ArmState]) -> str:
        for arm in arms:
            if arm.n + arm.pending == 0:
                return arm.name
        total = sum(arm.n + arm.pending for arm in arms)
        return max(arms, key=lambda a: a.mean + self.c * math.sqrt(math.log(total + 1) / (a.n + a.pending))).name


class Thompson:
    """Thompson sampling with a Gaussian posterior per arm: draw ``mean + N(0, sigma / sqrt(n + 1))``
    and take the largest draw (``sigma = 0.5`` log-speedup units). Seeded, so reproducible."""

    name = "thompson"

    def __init__(self, seed: int = 0, sigma: float = 0.5):
        self.rng, self.sigma = random.Random(seed), sigma

    def choose(self, arms: Sequence[ArmState]) -> str:
        return max(arms, key=lambda a: a.mean + self.rng.gauss(0.0, self.sigma / math.sqrt(a.n + 1))).name


POLICIES = {"ucb": Ucb1, "thompson": Thompson}


def make_policy(name: str, seed: int = 0) -> Policy:
    """``"ucb"`` or ``"thompson"``. Raises ``KeyError`` naming the known policies."""
    if name == "ucb":
        return Ucb1()
    if name == "thompson":
        return Thompson(seed)
    raise KeyError(f"unknown search policy {name!r} (known: {', '.join(POLICIES)})")
