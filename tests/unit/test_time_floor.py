"""The impossible-time floor (``bytes_moved / peak bandwidth``) in ``Evaluator.evaluate``, on the CPU (NumPy stand-in for
CuPy, the timing stubbed to chosen medians): a candidate under the floor is refused while the original is above it;
where the original itself runs under the floor, the spec's bytes_moved overstate, and the floor is not applied at that
size (a note on the result, and the job's warning). tests/gpu/test_harness.py runs both for real on the H200."""
from __future__ import annotations

import numpy as np
import pytest

from ptxfactory.protocol import Measured, Rejected
from ptxfactory.protocol.result import FLOOR_NOT_APPLIED

from test_reference_worker import ROWSUM, SEQUENTIAL, TREE, _evaluator, gpu_eval, job  # noqa: F401


def _evaluate(gpu_eval, job, monkeypatch, cand_us: float, base_us: float, floor_us: float):
    """The tree candidate against the sequential original at one bench size, timed at ``cand_us`` and ``base_us``
    (medians, µs), with the GPU's peak bandwidth set so that the bench size's floor is ``floor_us``."""
    spec, plan, _ = job
    plan = plan.model_copy(update={"reference": None})
    ev = _evaluator(gpu_eval)
    size = plan.bench_sizes[0]
    ev._facts = ev._facts.model_copy(update={"peak_gbps": spec.bytes_moved_at(size) / (floor_us * 1e3)})
    monkeypatch.setattr(ev, "verify", lambda *a, **k: None)
    spread = np.array([0.99, 1.0, 1.01])
    monkeypatch.setattr(ev, "time_size", lambda *a, **k: (cand_us * spread, base_us * spread, None))
    assert spec.floor_us(size, ev._facts.peak_gbps) == pytest.approx(floor_us)
    return ev.evaluate(spec, SEQUENTIAL, "seq", TREE, plan, "tree"), size


def test_a_candidate_under_the_floor_is_refused_while_the_original_is_above_it(gpu_eval, job, monkeypatch):
    result, size = _evaluate(gpu_eval, job, monkeypatch, cand_us=40.0, base_us=400.0, floor_us=100.0)
    assert isinstance(result, Rejected) and result.check == "impossible_time", result
    assert "40.00 µs" in result.reason and "100.00 µs floor" in result.reason


def test_a_candidate_above_the_floor_is_measured_without_a_note(gpu_eval, job, monkeypatch):
    result, _ = _evaluate(gpu_eval, job, monkeypatch, cand_us=150.0, base_us=400.0, floor_us=100.0)
    assert isinstance(result, Measured), result
    assert result.speedup == pytest.approx(400 / 150) and not any(FLOOR_NOT_APPLIED in n for n in result.notes)
    assert result.timings[0].floor_us == pytest.approx(100.0)


def test_a_floor_the_original_itself_beats_is_not_applied_and_says_why(gpu_eval, job, monkeypatch):
    """A downscale whose spec counts the input it skips: the original runs in 80 µs under a 100 µs floor, so a
    correct candidate at 40 µs is measured, with a note naming the size and both times."""
    result, size = _evaluate(gpu_eval, job, monkeypatch, cand_us=40.0, base_us=80.0, floor_us=100.0)
    assert isinstance(result, Measured), result
    assert result.speedup == pytest.approx(2.0)
    [note] = [n for n in result.notes if n.startswith(FLOOR_NOT_APPLIED)]
    assert str(size) in note and "80.00 µs" in note and "100.00 µs" in note and "bytes_moved" in note
