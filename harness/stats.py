"""Is a candidate faster, or is it noise? A bootstrap interval on interleaved A/B timings.

Pure NumPy, no GPU: the worker calls :func:`speedup_interval` with the samples it timed, and the
CPU tests call it with recorded or synthetic samples.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 2000


def speedup_interval(samples: Sequence[tuple[Sequence[float], Sequence[float]]], seed: int = 0,
                     n_boot: int = BOOTSTRAP_SAMPLES, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The ``confidence`` interval (lo, hi) of the geometric-mean speedup over sizes.

    ``samples`` holds, per bench size, ``(candidate_times, baseline_times)``: the times (any unit, the
    same for both, > 0) of launches that were interleaved A/B, so repetition ``r`` of the candidate and of
    the baseline ran next to each other. The speedup at a size is median(baseline) / median(candidate);
    the bootstrap resamples repetitions as pairs (keeping what the interleaving shares: clocks, heat,
    neighbours), ``n_boot`` times, and takes the percentiles of the geometric mean over sizes.

    Raises:
        ValueError: no sizes, a size with no samples, or a time that is not positive.
    """
    if not samples:
        raise ValueError("speedup_interval: no sizes")
    rng = np.random.default_rng(seed)
    logs = np.zeros(n_boot)
    for cand, base in samples:
        c, b = np.asarray(cand, dtype=np.float64), np.asarray(base, dtype=np.float64)
        n = min(len(c), len(b))
        if n == 0:
            raise ValueError("speedup_interval: a size with no samples")
        if np.any(c[:n] <= 0) or np.any(b[:n] <= 0):
            raise ValueError("speedup_interval: times must be positive")
        idx = rng.integers(0, n, size=(n_boot, n))
        logs += np.log(np.median(b[:n][idx], axis=1)) - np.log(np.median(c[:n][idx], axis=1))
    logs /= len(samples)
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(logs, [tail, 1 - tail])
    return math.exp(lo), math.exp(hi)
