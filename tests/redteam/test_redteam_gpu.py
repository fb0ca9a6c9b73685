"""Red-team suite, GPU tier: every red-team file gets the answer its header expects, for the right reason.

As the strategy does: compile, then :func:`static_check` (a file expected ``static_*`` must be refused there and
never reach the GPU), then one :class:`GpuBackend` evaluation against the original with a fixed-secret plan.
The honest candidates (the example itself, the "rowwise" family's best RMS instance, ``honest_warp_rows.cu``) must
be measured; the family's LayerNorm instance must fail on correctness.
"""
from __future__ import annotations

import asyncio
import re

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.static_checks import static_check

import _redteam as R

pytestmark = pytest.mark.gpu

SPEC = R.SPEC
CASES = R.cases()
SECRET = 20_260_117  # fixed: the held-out sizes are then {M: 3, N: 32801} plus two random odd shapes
PLAN = make_plan(SPEC, secret=SECRET).model_copy(update={"timeout_s": 60.0})
_LOOP: asyncio.AbstractEventLoop | None = None  # one loop for the module: the backend's lock and worker outlive a test
_BACKEND: GpuBackend | None = None
_BASELINE: Compiled | None = None


def _run(coro):
    global _LOOP
    if _LOOP is None:
        _LOOP = asyncio.new_event_loop()
    return _LOOP.run_until_complete(coro)


def _backend() -> tuple[GpuBackend, Compiled]:
    """One worker for the whole module (started on first use, stopped at module teardown)."""
    global _BACKEND, _BASELINE
    if _BACKEND is None:
        _BASELINE = compile_candidate(R.original(), SPEC.arch)
        assert isinstance(_BASELINE, Compiled), _BASELINE
        _BACKEND = GpuBackend()
    return _BACKEND, _BASELINE


@pytest.fixture(scope="module", autouse=True)
def _close_backend():
    yield
    if _BACKEND is not None:
        _run(_BACKEND.close())
    if _LOOP is not None:
        _LOOP.close()


def evaluate(candidate, spec=SPEC, arch: str | None = None):
    """Compile (for ``arch``, else the spec's), static-check, evaluate under ``spec`` (the example's, or a red-team
    file's with its ``check:`` changes; the same sizes, so the same plan): the result (or the static finding) and
    whether it reached the GPU."""
    backend, baseline = _backend()
    compiled = compile_candidate(candidate, arch or spec.arch, spec.check.fast_math)
    if not isinstance(compiled, Compiled):
        return compiled, False
    finding = static_check(candidate, spec, compiled.resources, compiled.cubin)
    if finding is not None:
        return finding, False
    return _run(backend.evaluate(spec, baseline, compiled, PLAN)), True


def test_plan_has_the_long_row():
    longest = max(s["N"] for s in SPEC.check.sizes + SPEC.bench.sizes)  # inside the listed envelope: the oracle is the kernel
    assert {"M": 3, "N": longest - 1 + longest % 2} in PLAN.heldout_sizes


def _param(case: R.Case):
    if case.known_gap:
        return pytest.param(case, id=case.name, marks=pytest.mark.xfail(
            strict=True, reason=f"known verifier gap: {case.known_gap} (XPASS: fixed; drop the known-gap line)"))
    return pytest.param(case, id=case.name)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_redteam_file_gets_the_expected_answer(case: R.Case):
    result, ran = evaluate(case.candidate, case.spec, case.arch)
    if case.static:
        assert not ran, f"{case.name} reached the GPU"
        answer, reason = result.check, result.reason
    else:
        if not ran and case.gap and getattr(result, "check", None) == case.gap:
            pytest.fail(f"{case.name}: the static gap is fixed ({result.reason}): update its header")
        assert ran, f"{case.name} never reached the GPU: {result}"
        answer = case.answer(result)
        reason = getattr(result, "reason", "")
    print(f"\n[redteam] {case.name}: {answer}: {reason}")
    assert answer in case.expect, f"{case.name}: expected {'|'.join(case.expect)}, got {answer}: {reason or result}"
    if answer != "measured":
        assert reason, f"{case.name}: a refusal must say why"
    if case.reason:
        assert re.search(case.reason, reason), f"{case.name}: reason {reason!r} does not match {case.reason!r}"


def test_honest_original_is_measured():
    result, ran = evaluate(R.original())
    assert ran and result.outcome == "measured", result
    assert 0.8 < result.speedup < 1.25
    for t in result.timings:
        assert t.median_us >= t.floor_us


def test_honest_family_best_is_measured_and_faster():
    best = R.family_best()
    result, ran = evaluate(best)
    assert ran and result.outcome == "measured", (best.description, result)
    assert result.speedup > 1.5, result.speedup  # the family's point; 2.79x on the H200 sweep
    assert len(result.verified_sizes) == len(SPEC.check.sizes) + len(PLAN.heldout_sizes)


def test_family_layernorm_instance_fails_on_correctness():
    layer = R.family("layer")[0]
    result, ran = evaluate(layer)
    assert ran and result.outcome == "rejected" and result.check == "correctness", result
