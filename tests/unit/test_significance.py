""""Faster" needs a margin: the bootstrap interval on interleaved timings, the A/A spread of the original
against itself, the winner re-timed before it is reported, and no exit 0 without a significant win."""
from __future__ import annotations

import numpy as np
import pytest

from ptxfactory.harness.stats import speedup_interval
from ptxfactory.protocol import Measured, SizeTiming


def _samples(rng, ratio: float, noise: float, n: int = 40, sizes: int = 3, drift: float = 0.0):
    """Interleaved A/B samples: a shared per-repetition drift (clocks, heat) plus independent noise."""
    out = []
    for s in range(sizes):
        base_us = 100.0 * (s + 1)
        shared = 1 + drift * rng.standard_normal(n)
        base = base_us * shared * (1 + noise * rng.standard_normal(n))
        cand = base_us / ratio * shared * (1 + noise * rng.standard_normal(n))
        out.append((np.abs(cand), np.abs(base)))
    return out


def _measured(samples) -> Measured:
    timings = [SizeTiming(size={"N": i}, median_us=float(np.median(c)), p20_us=0, p80_us=0, baseline_median_us=float(np.median(b)),
                          bytes_moved=1, gbps=0, pct_of_copy=0, floor_us=0) for i, (c, b) in enumerate(samples)]
    speedup = float(np.exp(np.mean([np.log(t.baseline_median_us / t.median_us) for t in timings])))
    lo, hi = speedup_interval(samples, seed=1)
    return Measured(candidate_key="k", timings=timings, speedup=speedup, speedup_lo=lo, speedup_hi=hi)


def test_a_real_speedup_is_inside_its_interval_and_significant():
    rng = np.random.default_rng(0)
    m = _measured(_samples(rng, ratio=1.25, noise=0.03))
    assert m.speedup_lo < 1.25 < m.speedup_hi and m.speedup_lo > 1.15
    assert m.significant()


@pytest.mark.parametrize("noise,drift", [(0.01, 0.0), (0.05, 0.0), (0.03, 0.05), (0.10, 0.02)])
def test_a_over_a_is_never_a_significant_win(noise, drift):
    """The original against itself through the decision rule, 20 times per noise level: never a win."""
    rng = np.random.default_rng(7)
    for trial in range(20):
        aa = _measured(_samples(rng, ratio=1.0, noise=noise, drift=drift))  # the job's row of the original
        cand = _measured(_samples(rng, ratio=1.0, noise=noise, drift=drift))  # an "optimised" copy of the original
        assert not cand.significant(aa.speedup_hi), (trial, cand.speedup, cand.speedup_lo, aa.speedup_hi)


def test_a_one_percent_gain_inside_a_three_percent_noise_is_not_significant():
    rng = np.random.default_rng(3)
    calls = [_measured(_samples(rng, ratio=1.01, noise=0.03, n=20)).significant() for _ in range(20)]
    assert sum(calls) <= 2  # a 95% interval: a 1% gain under 3% noise seldom clears it


def test_a_speedup_under_the_aa_spread_is_not_significant_even_with_a_tight_interval():
    m = Measured(candidate_key="k", timings=[], speedup=1.02, speedup_lo=1.01, speedup_hi=1.03)
    assert m.significant() and not m.significant(noise_hi=1.025)
    tiny = Measured(candidate_key="k", timings=[], speedup=1.005, speedup_lo=1.001, speedup_hi=1.009)
    assert not tiny.significant()  # under MIN_GAIN: never a win, however tight


def test_no_interval_is_never_significant():
    assert not Measured(candidate_key="k", timings=[], speedup=5.0).significant()


@pytest.mark.parametrize("bad", [[], [([], [])], [([1.0, -1.0], [1.0, 1.0])]])
def test_bad_samples_raise(bad):
    with pytest.raises(ValueError):
        speedup_interval(bad)


async def test_simulated_backend_never_exits_0_and_never_writes_best_cu(tmp_path):
    from pathlib import Path

    from ptxfactory.daemon.cli import EXIT_NOT_FASTER, exit_code
    from ptxfactory.daemon.report import write_outputs
    from ptxfactory.harness.simulated import SimulatedDevice
    from ptxfactory.search.strategy import optimise

    example = Path(__file__).resolve().parents[2] / "examples" / "rmsnorm" / "rmsnorm.cu"
    summary = await optimise(example, "rmsnorm", backend=SimulatedDevice(delay_s=0), max_candidates=4)
    assert summary.best_key is not None  # the search picks a best (code actions in the tests need one) ...
    assert exit_code(summary) == EXIT_NOT_FASTER  # ... but nothing was verified
    write_outputs(summary, tmp_path / "out")
    assert not (tmp_path / "out" / "best.cu").exists() and (tmp_path / "out" / "report.md").exists()


def test_a_launcher_in_best_cu_is_told_the_new_launch():
    """best.cu keeps the file's host code: a launcher passing the original's grid and block would compile and compute
    wrong results with a candidate launched otherwise; each launch site gets the new launch above it."""
    from ptxfactory.daemon.report import annotate_launch_sites

    src = """__global__ void k(const float* x, float* y, int n) { }
template <typename T> __global__ void kt(T* y) { }
void run(const float* x, float* y, int n) {
    int blocks = (n + 255) / 256;
    k<<<blocks, 256>>>(x, y, n);
    if (n > 0) { k <<<1, 32>>>(x, y, n); }
    kt<float><<<1, 1>>>(y);
}
"""
    out = annotate_launch_sites(src, "k", "ptxfactory: launch k with grid [cdiv(n, 1024)], block [256]")
    lines = out.splitlines()
    at = [i for i, line in enumerate(lines) if "k<<<" in line or "k <<<" in line]
    assert len(at) == 2 and all(lines[i - 1].strip() == "// ptxfactory: launch k with grid [cdiv(n, 1024)], block [256]"
                                for i in at)
    assert lines[at[0] - 1].startswith("    //")
    assert "kt<float><<<" in out and out.count("// ptxfactory") == 2
    assert annotate_launch_sites(src, "kt", "x").count("// x") == 1


def test_launch_notes_leave_strings_and_macros_alone():
    """Found by a red team (2026-12-05): a note inserted inside a multi-line macro broke the file, and one inside a raw
    string changed it. Launches are read from the syntax tree: neither is touched."""
    from ptxfactory.daemon.report import annotate_launch_sites

    src = """__global__ void k(float* x, int n) { }
#define LAUNCH_K(x, n) \\
    k<<<((n) + 255) / 256, 256>>>(x, n)
const char* doc = R"(k<<<grid, block>>>(x, n))";
void run(float* x, int n) {
    LAUNCH_K(x, n);
    k<<<1, 32>>>(x, n);
}
"""
    out = annotate_launch_sites(src, "k", "note")
    assert out.count("// note") == 1 and out.index("// note") < out.index("    k<<<1, 32>>>")
    assert 'R"(k<<<grid, block>>>(x, n))"' in out and "\\\n    k<<<((n)" in out
