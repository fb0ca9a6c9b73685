"""The ``online_softmax`` pass: a max loop then an exp-sum loop over the same elements -> one online loop, which rowpar
then splits over lanes (its (max, sum) tuple merge) and vector_loops widens; what it refuses, and why. Every output
compiles with NVRTC. The arithmetic of the fused form against the two passes is checked in NumPy (float32)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxfactory.search.generators.transform import PASSES, TransformGenerator
from ptxfactory.search.generators.transform.online_softmax import OnlineSoftmaxPass

from test_transform import compiles, example_ctx, make_ctx, spec_for, unit

P = {p.name: p for p in PASSES}
ARGS = """
  { name = "z", role = "in", dtype = "f32", shape = ["M", "V"] },
  { name = "out", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "V", role = "scalar", dtype = "i32", value = "V" },
"""


def kernel(opening: str, loops: str, tail: str = "out[r] = mx + logf(s);") -> str:
    return f"""
extern "C" __global__ void lse(const float* z, float* out, int M, int V)
{{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float* p = z + (size_t)r * V;
    {opening}
    {loops}
    {tail}
}}
"""


def spec(rtol=1e-4, atol=1e-5):
    return spec_for("lse", ARGS, grid='["cdiv(M, 128)"]', block="[128]", rtol=rtol, atol=atol,
                    sizes="[{ M = 7, V = 1000 }, { M = 3, V = 1 }]")


FIRST_ELEMENT = kernel("float mx = p[0];", """
    for (int j = 1; j < V; j++) mx = fmaxf(mx, p[j]);
    float s = 0.0f;
    for (int j = 0; j < V; j++) s += expf(p[j] - mx);""")
CONSTANT_IF = kernel("float mx = -INFINITY; float s = 0.0f;", """
    for (int j = 0; j < V; ++j) { if (p[j] > mx) mx = p[j]; }
    for (int k = 0; k < V; ++k) { s = s + __expf(p[k] - mx); }""")
LOCAL = kernel("float mx = -1e30f;", """
    for (int j = 0; j < V; j++) { float v = p[j]; mx = fmaxf(v, mx); }
    float s = 0.0f;
    for (int j = 0; j < V; j++) s += expf(p[j] - mx);""")

# a causal row: only the elements up to the row's own position (j <= i) count
CAUSAL = kernel("int i = r % 5; float mx = -INFINITY;", """
    for (int j = 0; j <= i; j++) mx = fmaxf(mx, p[j]);
    float s = 0.0f;
    for (int j = 0; j <= i; j++) s += expf(p[j] - mx);""")


@pytest.mark.parametrize("source", [FIRST_ELEMENT, CONSTANT_IF, LOCAL, CAUSAL], ids=["first element", "constant, if", "local", "causal <="])
def test_the_two_loops_become_one_online_loop_that_rowpar_and_vector_loops_then_take(source):
    u = unit(source, spec())
    p = OnlineSoftmaxPass()
    assert p.why_not(u) is None
    out = p.apply(u)
    assert out.text.count("for (") == 1 and "ptxf_v > mx" in out.text
    compiles(out.text, u.spec, "lse")
    # rowpar recognises the branch form as an online softmax tuple (lanes chosen at launch follow a length of the
    # spec's sizes; a causal row's is the row's own position: a warp)
    lanes = P["rowpar_lanes32" if source is CAUSAL else "rowpar_auto"]
    split = lanes.apply(out)
    wide = P["vector_loops"].apply(split)
    cand = TransformGenerator().candidate(make_ctx(source, u.spec), wide, [p, lanes, P["vector_loops"]])
    assert "ptxf_softmax" in cand.source  # rowpar's (max, sum) merge
    compiles(cand.source, u.spec, "lse")


def test_an_inclusive_bound_is_kept_as_one_past_it():
    out = OnlineSoftmaxPass().apply(unit(CAUSAL, spec()))
    assert "for (int j = 0; j < (i) + 1; j++)" in out.text, out.text


def test_a_first_element_start_becomes_minus_infinity_and_the_loop_starts_one_earlier():
    out = OnlineSoftmaxPass().apply(unit(FIRST_ELEMENT, spec()))
    assert "float mx = __int_as_float(0xff800000);" in out.text and "for (int j = 0; j < V; j++)" in out.text


REFUSED = {
    "exact": (FIRST_ELEMENT, dict(rtol=0, atol=0), "exact results"),
    "bounds": (kernel("float mx = p[0]; float s = 0.0f;", """
        for (int j = 1; j < V; j++) mx = fmaxf(mx, p[j]);
        for (int j = 0; j < V - 1; j++) s += expf(p[j] - mx);"""), {}, "different bounds"),
    "elements": (kernel("float mx = p[0]; float s = 0.0f;", """
        for (int j = 1; j < V; j++) mx = fmaxf(mx, p[j]);
        for (int j = 0; j < V; j++) s += expf(2.0f * p[j] - mx);"""), {}, "different elements"),
    "sum start": (kernel("float mx = p[0]; float s = 1.0f;", """
        for (int j = 1; j < V; j++) mx = fmaxf(mx, p[j]);
        for (int j = 0; j < V; j++) s += expf(p[j] - mx);"""), {}, "does not start at 0"),
    "between": (kernel("float mx = p[0]; float s = 0.0f;", """
        for (int j = 1; j < V; j++) mx = fmaxf(mx, p[j]);
        mx = mx * 0.5f;
        for (int j = 0; j < V; j++) s += expf(p[j] - mx);"""), {}, "no exp-sum loop right after"),
    "start mismatch": (kernel("float mx = p[0]; float s = 0.0f;", """
        for (int j = 1; j < V; j++) mx = fmaxf(mx, p[j]);
        for (int j = 1; j < V; j++) s += expf(p[j] - mx);"""), {}, "does not start at the element"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_it_refuses_and_why(case):
    source, kw, reason = REFUSED[case]
    why = OnlineSoftmaxPass().why_not(unit(source, spec(**kw)))
    assert why is not None and reason in why, why


def test_xent_fwd_gets_online_chains_that_compile():
    ctx = example_ctx("xent_fwd")
    cands = TransformGenerator().propose(ctx)
    online = [c for c in cands if "pass:online_softmax" in c.params]
    assert any("pass:rowpar_auto" in c.params and "pass:vector_loops" in c.params for c in online)
    for c in online[:6]:
        compiles(c.source, ctx.spec, "xent_fwd")


def test_the_fused_arithmetic_matches_the_two_passes_in_float32():
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 1000):
        for scale in (1.0, 30.0):
            z = (rng.standard_normal(n) * scale).astype(np.float32)
            mx = np.float32(-np.inf)
            s = np.float32(0)
            with np.errstate(over="ignore", invalid="ignore"):
                for v in z:
                    if v > mx:
                        s, mx = s * np.exp(mx - v, dtype=np.float32) + np.float32(1), v
                    else:
                        s += np.exp(v - mx, dtype=np.float32)
            ref = np.exp(z.astype(np.float64) - z.max()).sum()
            assert mx == z.max() and abs(s - ref) <= 1e-5 * ref


SOFTMAX_T = '''
__global__ void softmax_t(const float* __restrict__ logits, float* __restrict__ probs, int rows, int cols, float temp)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* in = logits + r * cols;
    float* out = probs + r * cols;
    float mx = -1e30f;
    for (int j = 0; j < cols; j++) {
        float v = in[j] / temp;
        if (v > mx) mx = v;
    }
    float sum = 0.f;
    for (int j = 0; j < cols; j++) {
        sum += expf(in[j] / temp - mx);
    }
    for (int j = 0; j < cols; j++) {
        out[j] = expf(in[j] / temp - mx) / sum;
    }
}
'''
SOFTMAX_T_ARGS = """
  { name = "logits", role = "in", dtype = "f32", shape = ["rows", "cols"] },
  { name = "probs", role = "out", dtype = "f32", shape = ["rows", "cols"] },
  { name = "rows", role = "scalar", dtype = "i32", value = "rows" },
  { name = "cols", role = "scalar", dtype = "i32", value = "cols" },
  { name = "temp", role = "scalar", dtype = "f32", value = 0.7 },
"""


def test_a_new_users_softmax_with_a_temperature_gets_online_chains_and_no_family_drops_the_temperature():
    """The generality trial's softmax_t (a temperature scalar, C++ linkage, a local in the max loop): online_softmax
    fuses its first two loops and rowpar takes the result; the softmax and row-wise families, whose skeletons would
    drop ``temp``, propose nothing."""
    from ptxfactory.search.generators import load as load_generator

    spec = spec_for("softmax_t", SOFTMAX_T_ARGS, grid='["cdiv(rows, 128)"]', block="[128]", rtol=1e-3, atol=1e-4,
                    sizes="[{ rows = 7, cols = 1000 }]")
    out = OnlineSoftmaxPass().apply(unit(SOFTMAX_T, spec))
    assert "float ptxf_v = in[j] / temp;" in out.text and out.text.count("for (") == 2  # the third loop stays
    assert P["rowpar_auto"].why_not(out) is None
    ctx = make_ctx(SOFTMAX_T, spec)
    assert load_generator("softmax").propose(ctx) == [] and load_generator("rowwise").propose(ctx) == []
