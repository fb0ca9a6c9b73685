"""The original's float64 shadow (harness/shadow.py): the source rewrite (scalars in double, buffers and the kernel's
own parameters untouched, refusals), its compilation beside the original, the judgement against it, and the worker
payload and session id that carry it. The GPU path is tests/gpu/test_gpu_shadow.py."""
from __future__ import annotations

import numpy as np
import pytest

from ptxfactory.harness import shadow as S
from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.gpu_backend import _payload
from ptxfactory.harness.session import session_id
from ptxfactory.protocol import parse_spec
from ptxfactory.search.strategy import original_candidate

ROW_STATS = """
extern "C" __global__ void row_stats(const float* x, float* mean, float* var, int M, int N, float scale)
{
    __shared__ float stage[32];
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float* xr = x + (size_t)r * N;
    float s = 0.0f;
    for (int j = 0; j < N; j++) s += xr[j];
    float m = s / N;
    float q = 0.0f;
    for (int k = 0; k < N; k++) { float d = xr[k] - m; q = fmaf(d, d, q); }
    stage[threadIdx.x % 32] = m;
    mean[r] = stage[threadIdx.x % 32] * scale;
    var[r] = __fdividef(q, (float)N) + 1.5e-3f * expf(-1.0f);
}
"""
SPEC = """[kernel.row_stats]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "mean", role = "out", dtype = "f32", shape = ["M"] },
  { name = "var", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "scale", role = "scalar", dtype = "f32", value = "1.0" },
]
launch = { grid = ["cdiv(M, 32)"], block = [32], shared_mem = 0, policy = "free" }
[kernel.row_stats.check]
rtol = 1e-4
atol = 1e-5
sizes = [{ M = 3, N = 100 }]
[kernel.row_stats.bench]
sizes = [{ M = 64, N = 1048576 }]
"""


def test_scalars_go_to_double_and_memory_keeps_its_types():
    out = S.promoted_source(ROW_STATS)
    assert out is not None
    assert "double s = 0.0;" in out and "double m = s / N;" in out and "double d = xr[k] - m;" in out
    assert "(double)N" in out and "1.5e-3 * ptxf_shadow_exp(-1.0)" in out
    assert "ptxf_shadow_fma(d, d, q)" in out and "ptxf_shadow_div(q, (double)N)" in out
    # the kernel's parameters are the spec's arguments, the pointers and the shared array are memory
    assert "void row_stats(const float* x, float* mean, float* var, int M, int N, float scale)" in out
    assert "const float* xr" in out and "__shared__ float stage[32];" in out
    shared = S.promoted_source("__global__ void k(float* y) { __shared__ float s; float v = y[0]; s = v; y[0] = s; }")
    assert "__shared__ float s;" in shared and "double v" in shared  # a shared scalar is memory too
    # each helper the rewrite calls is defined once, and no other
    assert out.count("double ptxf_shadow_exp(double a)") == 1 and "ptxf_shadow_rsqrt" not in out


def test_the_shadow_compiles_with_the_originals_name():
    spec = parse_spec(SPEC).kernels["row_stats"]
    base = compile_candidate(original_candidate(spec, ROW_STATS), spec.arch)
    assert isinstance(base, Compiled), base
    shadow = S.shadow_compiled(spec, base)
    assert isinstance(shadow, Compiled), shadow
    assert shadow.lowered_name == base.lowered_name and shadow.cubin != base.cubin


@pytest.mark.parametrize("source", [
    "__global__ void k(float* y) { float v = y[0]; y[0] = __int_as_float(__float_as_int(v) ^ 1); }",
    "__global__ void k(float* y) { float v = y[0]; y[0] = v * sizeof(float); }",
    "__global__ void k(float* y) { float v; asm(\"mov.f32 %0, 1.0;\" : \"=f\"(v)); y[0] = v; }",
    "__global__ void k(float* y) { union { float f; int i; } u; u.f = y[0]; y[0] = u.f; }",
    "template <typename T> __device__ T twice(T v) { return v + v; }\n"
    "__global__ void k(float* y) { float v = y[0]; y[0] = twice<float>(v); }",
    "__global__ void k(float* y) { float v = y[0] y[0] = v; }",  # a syntax error
    "__global__ void k(unsigned* y, const float* x) { float v = x[0]; y[0] = *(unsigned*)&v; }",  # punning
    "__global__ void k(unsigned* y, const float* x) { float v = x[0]; y[0] = reinterpret_cast<unsigned&>(v); }",
    "__global__ void k(unsigned* y, const float* x) { float v = x[0]; unsigned b; memcpy(&b, &v, 4); y[0] = b; }",
    "__global__ void k(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x]; }",  # nothing in float
])
def test_refused_where_the_rewrite_could_change_the_meaning(source):
    assert S.promoted_source(source) is None


def test_no_shadow_for_a_python_reference_integer_outputs_or_exact_tolerances():
    spec = parse_spec(SPEC).kernels["row_stats"]
    base = compile_candidate(original_candidate(spec, ROW_STATS), spec.arch)
    python = spec.model_copy(update={"check": spec.check.model_copy(update={"reference": "python:ref.py:f"})})
    assert S.shadow_compiled(python, base) is None
    ints = spec.model_copy(update={"args": [a.model_copy(update={"dtype": type(a.dtype)("i32")}) if a.role == "out" else a
                                            for a in spec.args]})
    assert S.shadow_compiled(ints, base) is None
    exact = spec.model_copy(update={"check": spec.check.model_copy(update={"rtol": 0.0, "atol": 0.0})})
    assert S.shadow_compiled(exact, base) is None
    assert S.shadow_compiled(spec, base) is not None


def _vals(*xs):
    return np.array(xs, dtype=np.float64)


def test_a_candidate_closer_to_the_shadow_than_the_drifted_original_passes():
    truth = _vals(1.0, 2.0, 4.0)
    want = truth * (1 - 4.5e-4)  # a serial fp32 sum's drift: 4.5 tolerances of 1e-4
    got = truth * (1 + 2e-5)
    ok, clause = S.judge_against_shadow(got, want, truth, "f32", 1e-4, 1e-5)
    assert ok and clause == ""


def test_a_wrong_candidate_fails_against_the_shadow_too():
    truth = _vals(1.0, 2.0, 4.0)
    want = truth * (1 - 4.5e-4)
    ok, clause = S.judge_against_shadow(truth * 1.01, want, truth, "f32", 1e-4, 1e-5)
    assert not ok and "still wrong" in clause
    ok, _ = S.judge_against_shadow(np.zeros(3), want, truth, "f32", 1e-4, 1e-5)
    assert not ok


def test_one_drifted_element_buys_no_slack_for_the_others():
    """Red team, 2026-12-05: a whole-output maximum let one element's drift (or one large value's tolerance) excuse
    every other element; each element is judged by its own drift and tolerance."""
    truth = np.linspace(0.1, 1.0, 1000)
    want = truth.copy()
    want[0] += 4e-4  # one element drifted (a few tolerances)
    got = truth + 3e-4  # every element off by ~3 tolerances, where the original is exact
    ok, clause = S.judge_against_shadow(got, want, truth, "f32", 1e-4, 1e-5)
    assert not ok and "still wrong" in clause
    big = truth.copy()
    big[0] = 1e4  # one huge value: its tolerance is not the others'
    # the original 0.5 from the shadow at every small element (thousands of tolerances: another function there), a
    # candidate 1.0 from it everywhere
    ok, clause = S.judge_against_shadow(big + 1.0, big + np.r_[0.0, np.full(999, 0.5)], big, "f32", 1e-4, 1e-5)
    assert not ok and "does not judge" in clause


def test_bf16_outputs_get_no_ulp_slack_where_the_original_is_exact():
    """Red team: a candidate that zeroes small outputs (3x atol off) passed on a 4-ulp slack of the largest value."""
    truth = np.r_[np.full(100, 0.02), 5.0]
    got = np.r_[np.zeros(100), 5.0]
    ok, _ = S.judge_against_shadow(got, truth.copy(), truth, "bf16", 1e-2, 1e-2 / 3)
    assert not ok


def test_elements_where_the_shadow_is_another_function_stay_the_originals():
    """Red team: a fake quantiser's ties round differently in double (0.02 apart: past the span); a truncating
    candidate, wrong where the original is exact, is not judged by the shadow there."""
    truth = np.round(np.linspace(0, 1, 4097) / 0.02) * 0.02
    want = truth.copy()
    want[::512] += 0.02  # the ties the float rounding sends the other way
    got = truth - 0.02  # wrong everywhere
    ok, _ = S.judge_against_shadow(got, want, truth, "f32", 1e-4, 1e-5)
    assert not ok
    ok, clause = S.judge_against_shadow(want, want, truth, "f32", 1e-4, 1e-5)
    assert ok  # (the original itself, element for element: within the tolerance of itself)


def test_non_finite_shadow_elements_are_judged_against_the_original():
    truth = _vals(1.0, np.inf, 3.0)
    want = _vals(1.0, 3.4e38, 3.0)  # the float original saturates where the double shadow overflows
    got = _vals(1.0, 12345.0, 3.0)
    ok, clause = S.judge_against_shadow(got, want, truth, "f32", 1e-4, 1e-5)
    assert not ok and "does not judge" in clause
    assert S.judge_against_shadow(want.copy(), want, truth, "f32", 1e-4, 1e-5)[0]


def test_the_payload_carries_the_shadow_and_the_session_id_depends_on_it():
    spec = parse_spec(SPEC).kernels["row_stats"]
    base = compile_candidate(original_candidate(spec, ROW_STATS), spec.arch)
    shadow = S.shadow_compiled(spec, base)
    plain, with_shadow = _payload(base), _payload(base.__class__(**{**base.__dict__, "shadow": shadow}))
    assert "shadow" not in plain
    assert with_shadow["shadow"] == {"cubin": shadow.cubin, "lowered_name": shadow.lowered_name}
    spec_d, plan_d = {"k": 1}, {"p": 2}
    assert session_id(spec_d, plan_d, plain) != session_id(spec_d, plan_d, with_shadow)
    other = {**with_shadow, "shadow": {"cubin": shadow.cubin + b"\0", "lowered_name": shadow.lowered_name}}
    assert session_id(spec_d, plan_d, other) != session_id(spec_d, plan_d, with_shadow)


def _pair():
    spec = parse_spec(SPEC).kernels["row_stats"]
    base = compile_candidate(original_candidate(spec, ROW_STATS), spec.arch)
    baseline = Compiled(**{**base.__dict__, "shadow": S.shadow_compiled(spec, base)})
    return spec, baseline


async def test_a_timeout_with_the_shadow_runs_again_without_it(monkeypatch):
    """The worker's answer to a hang carries no phase: the backend runs a timed-out evaluation again without the
    shadow; where that one finishes, the shadow was what hung and stays off for the job; where it hangs again, the
    candidate hangs, and the shadow stays on. At most SHADOW_RETRIES such runs a job."""
    from ptxfactory.harness.gpu_backend import GpuBackend
    from ptxfactory.harness.plan import make_plan
    from ptxfactory.protocol import Crashed, TimedOut

    spec, baseline = _pair()
    plan = make_plan(spec, secret=1)
    backend, calls = GpuBackend(), []

    async def hangs_with_shadow(spec_, plan_, sid, opener, request):
        calls.append(bool(request.get("skip_shadow")))
        return {"crashed": "stand-in answer"} if request.get("skip_shadow") else {"timed_out": 120.0}

    monkeypatch.setattr(backend, "_in_session", hangs_with_shadow)
    result = await backend.evaluate(spec, baseline, baseline, plan)
    assert isinstance(result, Crashed) and calls == [False, True]
    assert baseline.candidate.key in backend.shadow_off
    calls.clear()
    await backend.evaluate(spec, baseline, baseline, plan)
    assert calls == [True]  # off for the rest of the job

    backend2, calls = GpuBackend(), []

    async def candidate_hangs(spec_, plan_, sid, opener, request):
        calls.append(bool(request.get("skip_shadow")))
        return {"timed_out": 120.0}

    monkeypatch.setattr(backend2, "_in_session", candidate_hangs)
    for _ in range(3):
        assert isinstance(await backend2.evaluate(spec, baseline, baseline, plan), TimedOut)
    assert calls == [False, True, False, True, False] and not backend2.shadow_off
