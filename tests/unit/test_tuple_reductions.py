"""CPU tests of the tuple reductions: an online softmax's (max, sum) and a Welford (count, mean, M2) split across lanes.

The recogniser (:mod:`.reductions` with ``tuples=True``, over :mod:`.symbolic`) on the spellings naive authors use and
on near-misses it must refuse with a reason; ``rowpar``'s outputs for naive kernels compiled with NVRTC (sub-warp, warp,
block and chosen-at-launch lanes); and a NumPy model of the emitted lane starts, per-lane updates and merges (butterfly
in a warp, then the warps' parts in order) on random rows with empty lanes and -inf entries, against the serial loop.
"""
from __future__ import annotations

import numpy as np
import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.search.generators.transform import TransformGenerator
from ptxfactory.search.generators.transform import syntax as sx
from ptxfactory.search.generators.transform.colpar import ColumnParallelPass
from ptxfactory.search.generators.transform.reductions import loop_accumulators
from ptxfactory.search.generators.transform.symbolic import Evaluator, canon, same

from test_rowpar import XENT_ARGS, candidate_compiles, row_spec, rowpar
from test_transform import make_ctx, unit


def recognise(body: str, carried: str, start: str = "0", tuples: bool = True):
    """``loop_accumulators`` of ``for (int j = start; j < n; j++) { body }`` with ``carried`` (space-separated), and the
    reasons it gave."""
    src = f"void f(const float* x, float* y, int len) {{ float m, s, mu, q, t, a, b, c; int n, w;\n" \
          f"for (int j = {start}; j < len; j++) {{ {body} }} }}"
    loop = next(n for n in sx.walk(sx.parse(src.encode()).root_node) if n.type == "for_statement")
    first = loop.child_by_field_name("initializer").children_by_field_name("declarator")[0].child_by_field_name("value")
    why: list[str] = []
    accs = loop_accumulators(loop.child_by_field_name("body"), set(carried.split()), "j", tuples=tuples, start=first, why=why)
    return accs, why


# -- the recogniser ----------------------------------------------------------------------------------------------

SOFTMAX_FORMS = {
    "max temporary": "float v = x[j]; float mn = fmaxf(m, v); s = s * expf(m - mn) + expf(v - mn); m = mn;",
    "operands swapped": "float v = x[j]; float mn = max(v, m); s = expf(v - mn) + expf(m - mn) * s; m = mn;",
    "old max kept": "float v = x[j]; float mo = m; m = fmaxf(m, v); s = s * exp(mo - m) + exp(v - m);",
    "two statements": "float v = x[j]; float mn = fmaxf(m, v); s *= __expf(m - mn); s += __expf(v - mn); m = mn;",
    "element inline": "float mn = fmaxf(m, x[j]); s = s * expf(m - mn) + expf(x[j] - mn); m = mn;",
    "ternary max": "float v = x[j]; float mn = v > m ? v : m; s = s * expf(m - mn) + expf(v - mn); m = mn;",
    "if/else": "float v = x[j]; if (v > m) { s = s * __expf(m - v) + 1.0f; m = v; } else { s += __expf(v - m); }",
    "if/else, m on the left": "float v = x[j]; if (m < v) { s = 1 + s * expf(m - v); m = v; } else s = s + expf(v - m);",
    "if/else, >=": "float v = x[j]; if (v >= m) { s = s * expf(m - v) + 1.0f; m = v; } else { s += expf(v - m); }",
    "if/else reversed": "float v = x[j]; if (v <= m) { s += expf(v - m); } else { s = s * expf(m - v) + 1.0f; m = v; }",
    "rescale under if": "float v = x[j]; if (v > m) { s *= expf(m - v); m = v; } s += expf(v - m);",
}


@pytest.mark.parametrize("form", SOFTMAX_FORMS)
def test_online_softmax_spellings(form):
    accs, why = recognise(SOFTMAX_FORMS[form], "m s")
    assert accs is not None, why
    (acc,) = accs.values()
    assert acc.kind == "softmax" and acc.members == {"max": "m", "sum": "s"} and acc.names == ["m", "s"]
    assert acc.exp == next(f for f in ("__expf", "expf", "exp") if f + "(" in SOFTMAX_FORMS[form])


WELFORD_FORMS = {
    "n += 1": ("float v = x[j]; n += 1; float d = v - mu; mu += d / n; q += d * (v - mu);", "n mu q", "0", None),
    "n++ and plain assignments": ("float v = x[j]; n++; float d = v - mu; mu = mu + d / n; q = q + (v - mu) * d;",
                                  "n mu q", "0", None),
    "count after": ("float v = x[j]; float d = v - mu; mu += d / (n + 1.0f); q += d * (v - mu); n += 1.0f;",
                    "n mu q", "0", None),
    "old mean kept": ("float v = x[j]; ++n; float old = mu; mu += (v - mu) / n; q += (v - old) * (v - mu);",
                      "n mu q", "0", None),
    "West's M2": ("float v = x[j]; n++; float d = v - mu; mu += d / n; q += d * d * (n - 1) / n;", "n mu q", "0", None),
    "running mean": ("float v = x[j]; float d = v - mu; mu = (mu * n + v) / (n + 1); q += d * (v - mu); n += 1;",
                     "n mu q", "0", None),
    "running mean, count first": ("float v = x[j]; n += 1; float d = v - mu; mu = ((n - 1) * mu + v) / n; "
                                  "q = q + d * d * ((n - 1) / (float)n);", "n mu q", "0", None),
    "count j + 1": ("float v = x[j]; float d = v - mu; mu += d / (j + 1); q += d * (v - mu);", "mu q", "0", 0),
    "count (float)(j + 1)": ("float v = x[j]; float d = v - mu; mu += d / (float)(j + 1); q += d * (v - mu);",
                             "mu q", "0", 0),
    "count j from 1": ("float v = x[j - 1]; float d = v - mu; mu += d / j; q += d * (v - mu);", "mu q", "1", 0),
    "count in a local": ("float v = x[j]; float c = j + 1.0f; float d = v - mu; mu += d / c; q += d * (v - mu);",
                         "mu q", "1", 1),
}


@pytest.mark.parametrize("form", WELFORD_FORMS)
def test_welford_spellings(form):
    body, carried, start, count_start = WELFORD_FORMS[form]
    accs, why = recognise(body, carried, start)
    assert accs is not None, why
    (acc,) = accs.values()
    assert acc.kind == "welford" and acc.members["mean"] == "mu" and acc.members["m2"] == "q"
    if count_start is None:
        assert acc.members["count"] == "n" and not acc.counts
    else:  # the count comes from the loop index: the expressions rowpar replaces by a per-lane count
        assert acc.members["count"] is None and acc.count_start == count_start
        assert [sx.text(c) for c in acc.counts] in (["j + 1"], ["(float)(j + 1)"], ["j"], ["j + 1.0f"])


NEAR_MISSES = {
    "rescale of the wrong sign": ("float v = x[j]; float mn = fmaxf(m, v); s = s * expf(mn - m) + expf(v - mn); m = mn;",
                                  "m s", "neither an online softmax"),
    "no rescale": ("float v = x[j]; float mn = fmaxf(m, v); s = s + expf(v - mn); m = mn;", "m s", "neither"),
    "new max not kept": ("float v = x[j]; float mn = fmaxf(m, v); s = s * expf(m - mn) + expf(v - mn);", "m s", None),
    "max updated first": ("float v = x[j]; m = fmaxf(m, v); s = s * expf(m - m) + expf(v - m);", "m s", "neither"),
    "extra use of the new max": ("float v = x[j]; float mn = fmaxf(m, v); s = s * expf(m - mn) + expf(v - mn); "
                                 "m = mn; y[j] = mn;", "m s", "writes what is not one of the updated variables"),
    "two exponentials": ("float v = x[j]; float mn = fmaxf(m, v); s = s * __expf(m - mn) + expf(v - mn); m = mn;",
                         "m s", "neither"),
    "min, not max": ("float v = x[j]; float mn = fminf(m, v); s = s * expf(m - mn) + expf(v - mn); m = mn;", "m s",
                     "neither"),
    "then-branch adds exp(e - m)": ("float v = x[j]; if (v > m) { s = s * expf(m - v) + expf(v - m); m = v; } "
                                    "else { s += expf(v - m); }", "m s", "neither"),
    "condition on something else": ("float v = x[j]; if (v > 0.0f) { s = s * expf(m - v) + 1.0f; m = v; } "
                                    "else { s += expf(v - m); }", "m s", "neither"),
    "element changes between reads": ("float v = x[j]; float mn = fmaxf(m, v); v = v * 2.0f; "
                                      "s = s * expf(m - mn) + expf(v - mn); m = mn;", "m s", "written in the loop"),
    "element read from memory the loop writes": ("float mn = fmaxf(m, x[j]); y[j] = 0.0f; "
                                                 "s = s * expf(m - mn) + expf(x[j] - mn); m = mn;", "m s",
                                                 "reads memory the loop also writes"),
    "a continue": ("float v = x[j]; if (v < 0.0f) continue; float mn = fmaxf(m, v); "
                   "s = s * expf(m - mn) + expf(v - mn); m = mn;", "m s", "continue"),
    "count updated conditionally": ("float v = x[j]; if (v > 0.0f) n += 1; float d = v - mu; mu += d / n; "
                                    "q += d * (v - mu);", "n mu q", "not a Welford update"),
    "count += 2": ("float v = x[j]; n += 2; float d = v - mu; mu += d / n; q += d * (v - mu);", "n mu q", "not a Welford"),
    "West's M2 over the new count": ("float v = x[j]; n++; float d = v - mu; mu += d / n; q += d * d * n / (n + 1);",
                                     "n mu q", "not a Welford"),
    "running mean without the element": ("float v = x[j]; n += 1; float d = v - mu; mu = (n - 1) * mu / n; "
                                         "q += d * (v - mu);", "n mu q", "not a Welford"),
    "an integer division": ("float v = x[j]; n += 1; float d = v - mu; mu += d / n; q = q + d * d * ((n - 1) / n);",
                            "n mu q", "integer division"),
    "M2 with the old mean twice": ("float v = x[j]; n += 1; float d = v - mu; mu += d / n; q += d * d;", "n mu q",
                                   "not a Welford"),
    "mean divided by the old count": ("float v = x[j]; float d = v - mu; mu += d / n; q += d * (v - mu); n += 1;",
                                      "n mu q", "not a Welford"),
    "an int temporary": ("float v = x[j]; n += 1; int d = v - mu; mu += d / n; q += d * (v - mu);", "n mu q",
                         "not float or double"),
    "count j + 1 from 1": ("float v = x[j]; float d = v - mu; mu += d / (j - 1); q += d * (v - mu);", "mu q",
                           "count"),
    "count 2 * j + 1": ("float v = x[j]; float d = v - mu; mu += d / (2 * j + 1); q += d * (v - mu);", "mu q", "count"),
    "count local used elsewhere": ("float v = x[j]; float c = j + 1; y[j] = c; float d = v - mu; mu += d / c; "
                                   "q += d * (v - mu);", "mu q", "not a local j + c read by the update alone"),
    "three linked sums": ("float v = x[j]; a += b * v; b += c; c += v;", "a b c", None),
}


@pytest.mark.parametrize("what", NEAR_MISSES)
def test_near_misses_are_refused_with_a_reason(what):
    body, carried, reason = NEAR_MISSES[what]
    accs, why = recognise(body, carried)
    assert accs is None, what
    if reason is not None:
        assert why and reason in why[0], why


def test_tuples_only_when_asked_and_arg_pairs_unchanged():
    """A pass that does not merge tuples (vector_loops) is not given them; an arg max's linked pair stays an arg."""
    accs, _ = recognise(SOFTMAX_FORMS["max temporary"], "m s", tuples=False)
    assert accs is None
    accs, _ = recognise("float v = x[j]; if (v > b) { b = v; w = j; }", "b w")
    assert accs is not None and accs["b"].kind == "arg" and accs["b"].index == "w"
    # a tuple beside a plain sum
    accs, _ = recognise(SOFTMAX_FORMS["max temporary"] + " t += v;", "m s t")
    assert accs is not None and {a.kind for a in accs.values()} == {"softmax", "sum"}


def test_symbolic_trees_up_to_commutativity():
    """Updates evaluated over the tracked values: the largest subexpressions free of them are atoms (by their text)."""
    src = b"void f() { float t = x * 2.0f; x = b * a + x; y = x < t ? x : t; }"
    body = next(n for n in sx.walk(sx.parse(src).root_node) if n.type == "compound_statement")
    final = Evaluator({"x", "y"}, lambda node: None).run(sx.statements(body))
    new_x = ("+", ("var", "x"), ("atom", "b*a"))
    assert same(final["x"], new_x) and not same(final["x"], ("+", ("var", "x"), ("atom", "a*b")))
    assert same(final["y"], ("cond", ("cmp", ">", ("*", ("var", "x"), ("num", 2.0)), new_x), new_x,
                             ("*", ("var", "x"), ("num", 2.0))))
    assert canon(("cmp", "<", ("atom", "a"), ("atom", "b"))) == ("cmp", ">", ("atom", "b"), ("atom", "a"))


# -- rowpar's outputs, compiled -------------------------------------------------------------------------------------

XENT_ONLINE = """
extern "C" __global__ void xent(const float* logits, const int* target, float* loss, int M, int V)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    const float* p = logits + (size_t)row * V;
    float m = -1e30f, s = 0.0f;
    for (int j = 0; j < V; ++j) {
        float v = p[j];
        float m_new = fmaxf(m, v);
        s = s * expf(m - m_new) + expf(v - m_new);
        m = m_new;
    }
    loss[row] = logf(s) + m - p[target[row]];
}
"""

XENT_BRANCH = """
extern "C" __global__ void xent(const float* logits, const int* target, float* loss, int M, int V)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M) {
        float mx = __int_as_float(0xff800000);  // -inf
        float sum = 0.0f;
        for (int j = 0; j < V; j++) {
            float v = logits[(size_t)row * V + j];
            if (v > mx) {
                sum = sum * __expf(mx - v) + 1.0f;
                mx = v;
            } else {
                sum += __expf(v - mx);
            }
        }
        loss[row] = __logf(sum) + mx - logits[(size_t)row * V + target[row]];
    }
}
"""

STATS_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "mean", role = "out", dtype = "f32", shape = ["M"] },
  { name = "var", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""

WELFORD_COUNT = """
extern "C" __global__ void stats(const float* x, float* mean, float* var, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    int n = 0;
    float mu = 0.0f, m2 = 0.0f;
    for (int j = 0; j < N; j++) {
        float v = x[(size_t)r * N + j];
        n += 1;
        float delta = v - mu;
        mu += delta / n;
        m2 += delta * (v - mu);
    }
    mean[r] = mu;
    var[r] = n > 1 ? m2 / (n - 1) : 0.0f;
}
"""

WELFORD_INDEX = """
extern "C" __global__ void stats(const float* x, float* mean, float* var, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float mu = 0.0f, m2 = 0.0f;
    for (int j = 0; j < N; j++) {
        float v = x[(size_t)r * N + j];
        float d = v - mu;
        mu += d / (float)(j + 1);
        m2 += d * (v - mu);
    }
    mean[r] = mu;
    var[r] = m2 / N;
}
"""

WELFORD_DOUBLE_ROWLOOP = """
extern "C" __global__ void stats(const float* x, float* mean, float* var, int M, int N)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < M; r += blockDim.x * gridDim.x) {
        long long n = 0;
        double mu = 0.0, m2 = 0.0;
        for (int j = 0; j < N; j++) {
            double v = x[(size_t)r * N + j];
            n++;
            double old = mu;
            mu = mu + (v - mu) / n;
            m2 = m2 + (v - old) * (v - mu);
        }
        mean[r] = (float)mu;
        var[r] = (float)(m2 / n);
    }
}
"""

LANES = [4, 32, 256, 1024, "auto"]
XENT_SPEC = dict(name="xent", args=XENT_ARGS, sizes="[{ M = 5, V = 50 }]")
STATS_SPEC = dict(name="stats", args=STATS_ARGS)


@pytest.mark.parametrize("lanes", LANES)
def test_online_softmax_cross_entropy(lanes):
    spec = row_spec(**XENT_SPEC)
    text = candidate_compiles(XENT_ONLINE, spec, lanes)
    merge = {"auto": "ptxf_row_merge(ptxf_part)", 256: "ptxf_block_merge(ptxf_part)", 1024: "ptxf_block_merge(ptxf_part)"}
    assert "const float ptxf_start0 = m;" in text
    assert "if (ptxf_lane != 0u) { m = ptxf_lowest<float>(); s = 0; }" in text  # the other lanes' empty parts
    assert "{ ptxf_softmax<float, 0> ptxf_part = {m, s}; " + merge.get(lanes, f"ptxf_group_merge<{lanes}>(ptxf_part)") \
        + "; m = ptxf_part.max_or(ptxf_start0); s = ptxf_part.s; }" in text
    body = text[text.index("for (int j"):]
    assert body.index("ptxf_part") < body.index("logf(s)")  # merged before the row's value is used
    assert body.index("if (ptxf_lane == 0u)") < body.index("loss[row] =")
    branch = candidate_compiles(XENT_BRANCH, spec, lanes)
    assert "ptxf_softmax<float, 1> ptxf_part = {mx, sum};" in branch  # __expf: the merge uses __expf too


@pytest.mark.parametrize("lanes", LANES)
def test_welford_with_a_count(lanes):
    text = candidate_compiles(WELFORD_COUNT, row_spec(**STATS_SPEC), lanes)
    assert "if (ptxf_lane != 0u) { n = 0; mu = 0; m2 = 0; }" in text
    assert "ptxf_welford<int, float> ptxf_part = {n, mu, m2};" in text
    assert "n = ptxf_part.n; mu = ptxf_part.mean; m2 = ptxf_part.m2;" in text


@pytest.mark.parametrize("lanes", LANES)
def test_welford_with_the_count_from_the_loop_index(lanes):
    text = candidate_compiles(WELFORD_INDEX, row_spec(**STATS_SPEC), lanes)
    assert "unsigned ptxf_count0 = 0u;" in text and "if (ptxf_lane != 0u) { mu = 0; m2 = 0; }" in text
    assert "{ ++ptxf_count0;" in text and "mu += d / (ptxf_count0);" in text and "(j + 1)" not in text
    assert "ptxf_welford<unsigned, float> ptxf_part = {ptxf_count0, mu, m2};" in text


def test_a_split_loop_without_braces_around_it():
    """A loop that is an if's whole body: its lanes' start, count and merge go into one block with it."""
    src = WELFORD_INDEX.replace("    for (int j = 0; j < N; j++) {", "    if (N > 0)\n    for (int j = 0; j < N; j++) {")
    text = candidate_compiles(src, row_spec(**STATS_SPEC), "auto")
    assert "if (N > 0)\n    { unsigned ptxf_count0 = 0u;" in text


def test_welford_from_one_keeps_the_first_lanes_count():
    src = WELFORD_INDEX.replace("float mu = 0.0f", "float mu = x[(size_t)r * N]").replace(
        "int j = 0", "int j = 1").replace("(float)(j + 1)", "(j + 1)")
    text = candidate_compiles(src, row_spec(**STATS_SPEC), 32)
    assert "unsigned ptxf_count0 = ptxf_lane == 0u ? 1u : 0u;" in text


@pytest.mark.parametrize("lanes", [8, 512, "auto"])
def test_welford_in_double_over_a_grid_stride_loop(lanes):
    spec = row_spec(**STATS_SPEC, grid='["min(cdiv(M, 128), 264)"]')
    text = candidate_compiles(WELFORD_DOUBLE_ROWLOOP, spec, lanes)
    assert "ptxf_welford<long long, double> ptxf_part = {n, mu, m2};" in text


WELFORD_C89 = """
extern "C" __global__ void stats(const float* x, float* mean, float* var, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    float v, delta, delta2;
    int n;
    float mu, m2;
    if (r >= M) return;
    n = 0; mu = 0.0f; m2 = 0.0f;
    for (int j = 0; j < N; j++) {
        v = x[(size_t)r * N + j];
        n++;
        delta = v - mu;
        mu += delta / n;
        delta2 = v - mu;
        m2 += delta * delta2;
    }
    mean[r] = mu;
    var[r] = m2 / n;
}
"""


@pytest.mark.parametrize("lanes", [16, 128])
def test_scratch_variables_declared_before_the_loop(lanes):
    """Temporaries declared before the loop (C89 style), each set once per iteration before it is read and read nowhere
    else, are read as locals of the body; one read after the loop keeps the loop serial."""
    spec = row_spec(**STATS_SPEC)
    text = candidate_compiles(WELFORD_C89, spec, lanes)
    assert "ptxf_welford<int, float> ptxf_part = {n, mu, m2};" in text and "float v, delta, delta2;" in text
    why = rowpar(lanes).why_not(unit(WELFORD_C89.replace("m2 / n;", "m2 / n + delta;"), spec))
    assert why is not None and "carried delta, delta2, m2, mu, n, v: not recognised" in why
    accs, _ = recognise("t = x[j]; s += t * t;", "s t", tuples=False)
    assert accs is None  # without the caller's word that t is dead after the loop
    src = "void f() { for (int j = 0; j < n; j++) { t = x[j]; s += t * t; } }"
    loop = next(n for n in sx.walk(sx.parse(src.encode()).root_node) if n.type == "for_statement")
    body = loop.child_by_field_name("body")
    assert set(loop_accumulators(body, {"s", "t"}, "j", dead_after={"t"})) == {"s"}
    for twice in ("t = x[j]; t = t * t; s += t;", "s += t; t = x[j];", "if (j) t = x[j]; s += t;", "t = t + x[j]; s += t;"):
        src = f"void f() {{ for (int j = 0; j < n; j++) {{ {twice} }} }}"
        loop = next(n for n in sx.walk(sx.parse(src.encode()).root_node) if n.type == "for_statement")
        assert loop_accumulators(loop.child_by_field_name("body"), {"s", "t"}, "j", dead_after={"t"}) is None, twice


def test_refusals_of_rowpar_and_colpar():
    # an exact spec: the merges re-associate
    why = rowpar(32).why_not(unit(WELFORD_COUNT, row_spec(**STATS_SPEC, rtol=0, atol=0)))
    assert why is not None and "a welford merge re-associates" in why
    # a near-miss in a kernel: the reason names the variables and what they are not
    src = XENT_ONLINE.replace("expf(m - m_new)", "expf(m_new - m)")
    why = rowpar(32).why_not(unit(src, row_spec(**XENT_SPEC)))
    assert why is not None and "m, s: updated together, but neither an online softmax" in why
    # colpar merges tuples too (since 2026-12-05, ptxf_col_merge): its column Welford loop is split
    col = WELFORD_COUNT.replace("x[(size_t)r * N + j]", "x[(size_t)j * M + r]")
    out = ColumnParallelPass(8).apply(unit(col, row_spec(**STATS_SPEC)))
    assert "ptxf_col_merge(ptxf_part)" in out.text


# -- a NumPy model of what the rewrite computes ---------------------------------------------------------------------

F = np.float32
LOWEST = np.finfo(np.float32).min


def softmax_step(m, s, v):
    """The kernel's own update (the ``m_new`` form), in float32."""
    mn = np.fmax(m, v)
    return mn, F(F(s * np.exp(F(m - mn))) + np.exp(F(v - mn)))


def softmax_step_branch(m, s, v):
    """The if/else spelling: ``if (v > m) { s = s * exp(m - v) + 1; m = v; } else s += exp(v - m);``, in float32."""
    if v > m:
        return v, F(F(s * np.exp(F(m - v))) + F(1))
    return m, F(s + np.exp(F(v - m)))


def softmax_merge(a, b):
    """ptxf_softmax::merge."""
    (ma, sa), (mb, sb) = a, b
    mx = np.fmax(ma, mb)
    fa = F(1) if ma == mx else np.exp(F(ma - mx))
    fb = F(1) if mb == mx else np.exp(F(mb - mx))
    return mx, F(F(sa * fa) + F(sb * fb))


def welford_step(n, mu, q, v):
    """The kernel's own update (count first), in float32."""
    n += 1
    d = F(v - mu)
    mu = F(mu + F(d / F(n)))
    return n, mu, F(q + F(d * F(v - mu)))


def welford_merge(a, b):
    """ptxf_welford::merge."""
    (na, ma, qa), (nb, mb, qb) = a, b
    if na == 0 or nb == 0:
        return na + nb, F(ma + mb), F(qa + qb)
    fa, fb, d, nt = F(na), F(nb), F(mb - ma), F(na + nb)
    return na + nb, F(F(F(fa * ma) + F(fb * mb)) / nt), F(F(qa + qb) + F(F(F(d * d) * F(fa * fb)) / nt))


def bits(part) -> bytes:
    return b"".join(np.asarray(x).tobytes() for x in part)


def merged(parts: list, merge) -> tuple:
    """ptxf_group_merge (L <= 32) or ptxf_block_merge (warps, then the warps' parts in order); checks every lane of a
    warp ends with the same bits."""
    warps = [parts[w:w + 32] for w in range(0, len(parts), 32)]
    tops = []
    for g in warps:
        o = len(g) // 2
        while o:
            g = [merge(g[i], g[i ^ o]) for i in range(len(g))]
            o //= 2
        assert len({bits(p) for p in g}) == 1, "lanes disagree after the butterfly"
        tops.append(g[0])
    p = tops[0]
    for t in tops[1:]:
        p = merge(p, t)
    return p


def split_softmax(row, lanes, m0, step=softmax_step):
    parts = []
    for lane in range(lanes):
        m, s = (F(m0), F(0)) if lane == 0 else (LOWEST, F(0))
        for v in row[lane::lanes]:
            m, s = step(m, s, v)
        parts.append((m, s))
    m, s = merged(parts, softmax_merge)
    return (F(m0) if s == 0 and m == LOWEST else m), s  # max_or


def serial(row, start, step):
    state = start
    for v in row:
        state = step(*state, v)
    return state


@pytest.mark.parametrize("step", [softmax_step, softmax_step_branch], ids=["max temporary", "if/else"])
@pytest.mark.parametrize("lanes", [4, 32, 256])
def test_softmax_merge_model_matches_the_serial_loop(lanes, step):
    rng = np.random.default_rng(lanes)
    rows = [rng.normal(0, 4, n).astype(F) for n in (0, 1, 3, lanes - 1, lanes, 5 * lanes + 3, 1000)]
    causal = rng.normal(0, 4, 300).astype(F)
    causal[7:] = -np.inf  # a masked row: lanes whose first element is -inf must not turn NaN
    sprinkled = rng.normal(0, 4, 500).astype(F)
    sprinkled[1::3] = -np.inf
    rows += [causal, sprinkled, np.full(40, -np.inf, F)]
    with np.errstate(all="ignore"):
        for m0 in (-np.inf, F(-1e30)):
            for row in rows:
                want_m, want_s = serial(row, (F(m0), F(0)), step)
                got_m, got_s = split_softmax(row, lanes, m0, step)
                if np.isnan(want_s):  # the serial loop's own NaN (its first element -inf from a -inf start)
                    assert np.isnan(got_s)
                    continue
                assert got_m == want_m, (len(row), m0)  # the max is exact
                finite = row[np.isfinite(row)].astype(np.float64)
                if len(finite) == 0:
                    assert got_s == want_s == 0
                    continue
                lse = np.log(np.exp(finite - finite.max()).sum()) + finite.max()
                assert np.log(np.float64(got_s)) + got_m == pytest.approx(lse, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("lanes", [4, 32, 256])
def test_welford_merge_model_matches_the_serial_loop(lanes):
    rng = np.random.default_rng(7 + lanes)
    with np.errstate(all="ignore"):
        for n in (0, 1, 2, lanes - 1, lanes + 1, 7 * lanes + 5, 3000):
            row = rng.normal(10, 2, n).astype(F)
            parts = [serial(row[lane::lanes], (0, F(0), F(0)), welford_step) for lane in range(lanes)]
            count, mu, q = merged(parts, welford_merge)
            assert count == n
            if n == 0:
                assert mu == 0 and q == 0
                continue
            assert mu == pytest.approx(row.astype(np.float64).mean(), rel=1e-5)
            assert q / n == pytest.approx(row.astype(np.float64).var(), rel=1e-4, abs=1e-6)


def test_merges_are_symmetric_bit_for_bit():
    """Either order gives the same bits, so a butterfly leaves every lane one value (uniform conditions after it)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        a = (F(rng.normal(0, 50)), F(abs(rng.normal(0, 9))))
        b = (F(rng.normal(0, 50)), F(abs(rng.normal(0, 9))))
        assert bits(softmax_merge(a, b)) == bits(softmax_merge(b, a))
        c = (int(rng.integers(0, 9)), F(rng.normal(0, 9)), F(abs(rng.normal(0, 9))))
        d = (int(rng.integers(0, 9)), F(rng.normal(0, 9)), F(abs(rng.normal(0, 9))))
        assert bits(welford_merge(c, d)) == bits(welford_merge(d, c))
    with np.errstate(all="ignore"):  # empty parts: no NaN
        assert softmax_merge((LOWEST, F(0)), (LOWEST, F(0))) == (LOWEST, 0)
        assert softmax_merge((F(-np.inf), F(0)), (LOWEST, F(0))) == (LOWEST, 0)
        assert softmax_merge((F(-np.inf), F(0)), (F(2), F(3))) == (2, 3)
        assert softmax_merge((F(-np.inf), F(0)), (F(-np.inf), F(0))) == (-np.inf, 0)  # not exp(-inf - -inf)


@pytest.mark.parametrize("source,spec", [(WELFORD_INDEX, STATS_SPEC), (XENT_BRANCH, XENT_SPEC)],
                         ids=["welford", "online softmax"])
def test_every_transform_proposal_compiles(source, spec):
    """The transform generator's proposals (rowpar's variants and the chains after them) all compile."""
    cands = TransformGenerator().propose(make_ctx(source, row_spec(**spec)))
    lanes = {c.params["lanes"] for c in cands if any(k.startswith("pass:rowpar_") for k in c.params)}
    assert lanes == {4, 8, 16, 32, 128, 256, 512, 1024, "auto", "auto_e128"}
    for c in cands:
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), (c.description, r.log)


@pytest.mark.parametrize("source,spec", [(XENT_ONLINE, XENT_SPEC), (XENT_BRANCH, XENT_SPEC), (WELFORD_COUNT, STATS_SPEC),
                                         (WELFORD_INDEX, STATS_SPEC)], ids=["softmax", "softmax if/else", "welford", "welford j+1"])
@pytest.mark.parametrize("lanes", [32, "auto"])
def test_vector_loops_widens_a_split_tuple_loop_before_rowpar_merge(source, spec, lanes):
    """After rowpar, a lane's (max, sum) or (count, mean, M2) part does not depend on which of the row's elements the
    lane takes, so vector_loops gives it 16-byte loads (VEC elements a step, each through the loop's own body); rowpar's
    merge after the loop combines the parts as before. The output compiles."""
    from ptxfactory.search.generators.transform.vector_loops import VectorLoopsPass

    spec = row_spec(**spec)
    split = rowpar(lanes).apply(unit(source, spec))
    vl = VectorLoopsPass()
    assert vl.why_not(split) is None, vl.why_not(split)
    out = vl.apply(split)
    assert "reinterpret_cast<const uint4*>" in out.text and out.text.count("ptxf_part") == split.text.count("ptxf_part")
    ctx = make_ctx(source, spec)
    cand = TransformGenerator().candidate(ctx, out, [rowpar(lanes), vl])
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log


def test_vector_loops_leaves_a_tuple_loop_without_rowpar_merge():
    """A lane-strided Welford whose loop is not followed by rowpar's merge of the lanes' parts: left alone, with why."""
    from ptxfactory.search.generators.transform.vector_loops import VectorLoopsPass

    spec = row_spec(**STATS_SPEC)
    split = rowpar(32).apply(unit(WELFORD_COUNT, spec))
    mine = split.text[:split.text.index("{ ptxf_welford")] + split.text[split.text.index("/* the lanes' parts merged (transform rowpar) */") + 48:]
    why = VectorLoopsPass().why_not(unit(mine, spec))
    assert why is not None and "without rowpar's merge" in why, why
