"""CPU tests of the ``scan`` pass (a running accumulation stored per element, one thread per row -> a warp or a
block per row, scanned in chunks).

Each kernel is small and written the way a first version is (KernelBench's cumsum, a running max, an exclusive
sum): what the pass rewrites, the launch, what it refuses and why, and every output compiled with NVRTC through
the transform generator's candidate (helpers included). A NumPy emulation of the chunked order checks that the
three phases (each lane's part, the scan of the parts with the carry, the replay with the stores) give the serial
loop's values, exclusive and inclusive.
"""
from __future__ import annotations

import numpy as np
import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import evaluate
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, plan_chains, refusals, run_chain
from ptxfactory.search.generators.transform.rowpar import RowParallelPass
from ptxfactory.search.generators.transform.scan import ITEMS, WARP_ELEMENTS, ScanPass

from test_rowpar import L2NORM, row_spec
from test_transform import make_ctx, unit

HEAD = """
extern "C" __global__ void k({args})
{{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
{body}}}
"""
FLOAT_ARGS = "const float* x, float* y, int M, int N"


def kernel(body: str, args: str = FLOAT_ARGS) -> str:
    return HEAD.format(args=args, body=body)


INCLUSIVE = kernel("""    float acc = 0.0f;
    for (int j = 0; j < N; j++) {
        acc += x[r * N + j];
        y[r * N + j] = acc;
    }
""")
EXCLUSIVE = kernel("""    float acc = 0.0f;
    for (int j = 0; j < N; j++) {
        y[r * N + j] = acc;
        acc += x[r * N + j];
    }
""")
RUNNING_MAX = kernel("""    const float* row = x + (size_t)r * N;
    float* out = y + (size_t)r * N;
    float m = row[0];
    for (int j = 0; j < N; ++j) {
        m = fmaxf(m, row[j]);
        out[j] = m;
    }
""")
INT_ARGS_C = "const int* x, int* y, int M, int N"
INT_CUMSUM = kernel("""    int acc = 0;
    for (int j = 0; j < N; j++) {
        acc = acc + x[r * N + j];
        y[r * N + j] = acc;
    }
""", INT_ARGS_C)
WITH_TOTAL = kernel("""    float acc = 0.0f;
    int base = r * N;
    for (int j = 0; j < N; j++) {
        float v = x[base + j];
        acc += v;
        y[base + j] = acc * 0.5f + v;
    }
    total[r] = acc;
""", "const float* x, float* y, float* total, int M, int N")

INT_ARGS = """
  { name = "x", role = "in", dtype = "i32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "i32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
TOTAL_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "total", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
CASES = {
    "inclusive": (INCLUSIVE, lambda: row_spec()),
    "exclusive": (EXCLUSIVE, lambda: row_spec()),
    "running max": (RUNNING_MAX, lambda: row_spec()),
    "int cumsum (exact)": (INT_CUMSUM, lambda: row_spec(args=INT_ARGS, rtol=0, atol=0)),
    "cumsum and its total": (WITH_TOTAL, lambda: row_spec(args=TOTAL_ARGS)),
}


def scan(variant: str) -> ScanPass:
    return next(p for p in PASSES if isinstance(p, ScanPass) and p.variant == variant)


def candidate_compiles(source: str, spec, chain) -> str:
    """The transform generator's candidate for ``chain`` compiles with NVRTC (helpers and all); returns its kernel text."""
    ctx = make_ctx(source, spec)
    out = run_chain(unit(source, spec), chain)
    cand = TransformGenerator().candidate(ctx, out, chain)
    assert cand is not None and all(cand.params[f"pass:{p.name}"] == 1 for p in chain)
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    return cand.kernel_text


@pytest.mark.parametrize("what", sorted(CASES))
@pytest.mark.parametrize("variant", ["warp", "block256", "auto"])
def test_newcomers_scans_apply_and_compile(what, variant):
    src, make = CASES[what]
    spec = make()
    u = unit(src, spec)
    p = scan(variant)
    assert p.why_not(u) is None
    assert RowParallelPass(32).why_not(u) is not None  # rowpar leaves these alone: the gap this pass fills
    out = p.apply(u)
    text = out.text
    fn = {"warp": "ptxf_warp_scan_start(", "block256": "ptxf_block_scan_start(", "auto": "ptxf_row_scan_start("}[variant]
    assert fn in text and "ptxf_part" in text and "ptxf_run" in text
    part_loop = text[text.index("ptxf_part = "):text.index(fn)]
    replay = text[text.index(fn):]
    assert "y[" not in part_loop and "out[" not in part_loop  # the first pass leaves the stores out
    assert ("y[" in replay) or ("out[" in replay)
    M, N = 1000, 3000
    if variant == "warp":
        assert out.launch.block == [256] and evaluate(out.launch.grid[0], {"M": M, "N": N}) == -(-M // 8)
    elif variant == "block256":
        assert out.launch.block == [256] and evaluate(out.launch.grid[0], {"M": M, "N": N}) == M
    candidate_compiles(src, spec, [p])


def test_the_row_total_is_written_by_one_lane_after_the_loop():
    out = scan("warp").apply(unit(WITH_TOTAL, row_spec(args=TOTAL_ARGS))).text
    guard = out.index("if (ptxf_lane == 0u)")
    assert out.index("ptxf_warp_scan_start") < guard < out.index("total[r] = acc;")
    assert "int base = r * N;" in out  # the row's declarations run on every lane


def test_max_parts_start_at_the_running_value_and_sums_at_zero():
    t = scan("warp").apply(unit(RUNNING_MAX, row_spec())).text
    assert "float ptxf_part = m;" in t and "fmaxf(ptxf_a, ptxf_b)" in t
    t = scan("warp").apply(unit(INT_CUMSUM, row_spec(args=INT_ARGS, rtol=0, atol=0))).text
    assert "int ptxf_part = (int)0;" in t


def test_auto_lanes_follow_the_row_length():
    spec = row_spec()
    out = scan("auto").apply(unit(INCLUSIVE, spec))
    for n, lanes in ((100, 32), (WARP_ELEMENTS, 32), (WARP_ELEMENTS + 1, 256), (100_000, 256)):
        size = {"M": 4096, "N": n}
        b = [evaluate(x, size) for x in out.launch.block]
        assert b[0] == lanes and b[0] * b[1] == 256 if lanes == 32 else b == [256, 1], (n, b)
        assert evaluate(out.launch.grid[0], size) == -(-4096 // b[1])


def test_proposed_first_and_chained_with_the_hints():
    spec = row_spec()
    chains = [[p.name for p in c] for c in plan_chains(unit(INCLUSIVE, spec))]
    assert chains[0] == ["scan_auto"]
    assert any("scan_warp" in c and "ldg" in c for c in chains)
    for chain in chains[:6]:
        candidate_compiles(INCLUSIVE, spec, [p for p in PASSES if p.name in chain])


REFUSED = {
    "two carried accumulators": (kernel("""    float s = 0.0f, q = 0.0f;
    for (int j = 0; j < N; j++) {
        s += x[r * N + j];
        q += x[r * N + j] * x[r * N + j];
        y[r * N + j] = s + q;
    }
"""), "carries q, s"),
    "the output read back at j - 1": (kernel("""    float acc = 0.0f;
    for (int j = 0; j < N; j++) {
        acc += x[r * N + j];
        y[r * N + j] = acc + (j > 0 ? y[r * N + j - 1] : 0.0f);
    }
"""), "another index"),
    "a store at a non-affine index": (kernel("""    float acc = 0.0f;
    for (int j = 0; j < N; j++) {
        acc += x[r * N + j];
        y[r * N + (j * 7) % N] = acc;
    }
"""), "not affine"),
    "a local computed from the accumulator": (kernel("""    float acc = 0.0f;
    for (int j = 0; j < N; j++) {
        acc += x[r * N + j];
        float t = acc * 2.0f;
        y[r * N + j] = t;
    }
"""), "not a sum, product, max or min"),
    "a recurrence": (kernel("""    float h = 0.0f;
    for (int j = 0; j < N; j++) {
        h = 0.5f * h + x[r * N + j];
        y[r * N + j] = h;
    }
"""), "not a sum, product, max or min"),
    "a reduction (rowpar's)": (kernel("""    float acc = 0.0f;
    for (int j = 0; j < N; j++) acc += x[r * N + j];
    y[r] = acc;
"""), "rowpar's case"),
    "two loops": (L2NORM, "2 loops"),
    "a break": (kernel("""    float acc = 0.0f;
    for (int j = 0; j < N; j++) {
        acc += x[r * N + j];
        y[r * N + j] = acc;
        if (acc > 1.0f) break;
    }
"""), "break"),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_refusals_with_their_reasons(what):
    src, reason = REFUSED[what]
    for v in ("warp", "block256", "auto"):
        why = scan(v).why_not(unit(src, row_spec()))
        assert why is not None and reason in why, (what, v, why)


def test_a_fixed_launch_is_refused():
    why = scan("warp").why_not(unit(INCLUSIVE, row_spec(policy="fixed")))
    assert why is not None and "policy" in why


def test_an_exact_spec_refuses_float_sums_not_int_sums_nor_max():
    exact = row_spec(rtol=0, atol=0)
    why = scan("warp").why_not(unit(INCLUSIVE, exact))
    assert why is not None and "exact" in why and "floating-point sum" in why
    assert scan("warp").why_not(unit(RUNNING_MAX, exact)) is None
    assert scan("warp").why_not(unit(INT_CUMSUM, row_spec(args=INT_ARGS, rtol=0, atol=0))) is None


def test_refusals_report_why_the_scan_left_a_kernel_alone():
    reasons = dict(refusals(unit(REFUSED["two carried accumulators"][0], row_spec())))
    assert reasons.get("scan_auto, scan_warp, scan_block256", "").startswith("the loop at line"), reasons
    assert "carries q, s" in reasons["scan_auto, scan_warp, scan_block256"]


# ---------------------------------------------------------------- the chunked order, emulated


def chunked(x: np.ndarray, start, op, identity, idempotent: bool, lanes: int, exclusive: bool):
    """The rewrite's three phases on one row, in NumPy (op, the lanes' parts, the scan with the carry, the replay)."""
    n = len(x)
    y = np.empty_like(x)
    carry = start
    for c in range(0, n, lanes * ITEMS):
        parts = []
        for lane in range(lanes):
            part = carry if idempotent else identity
            for i in range(ITEMS):
                j = c + lane * ITEMS + i
                if j < n:
                    part = op(part, x[j])
            parts.append(part)
        incl = list(parts)
        for k in range(1, lanes):
            incl[k] = op(incl[k - 1], parts[k])
        for lane in range(lanes):
            run = carry if lane == 0 else op(carry, incl[lane - 1])
            for i in range(ITEMS):
                j = c + lane * ITEMS + i
                if j < n:
                    if exclusive:
                        y[j] = run
                    run = op(run, x[j])
                    if not exclusive:
                        y[j] = run
        carry = op(carry, incl[-1])
    return y, carry


@pytest.mark.parametrize("n", [0, 1, 7, 255, 256, 257, 1000, 2049])
@pytest.mark.parametrize("lanes", [32, 256])
def test_the_chunked_order_gives_the_serial_values(n, lanes):
    rng = np.random.default_rng(n + lanes)
    x = rng.integers(-50, 50, size=n).astype(np.int64)
    for exclusive in (False, True):
        y, total = chunked(x, 3, lambda a, b: a + b, 0, False, lanes, exclusive)
        serial = 3 + np.cumsum(x)
        want = np.concatenate([[3], serial[:-1]]) if exclusive else serial
        assert np.array_equal(y, want[:n]) and total == (serial[-1] if n else 3)
    y, total = chunked(x, -1000, max, None, True, lanes, False)
    assert np.array_equal(y, np.maximum.accumulate(np.concatenate([[-1000], x]))[1:])


INPLACE_ARGS = """
  { name = "x", role = "inout", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""


def test_an_in_place_scan_reads_before_it_stores_and_a_read_back_is_refused():
    src = kernel("""    float acc = 0.0f;
    for (int j = 0; j < N; j++) {
        float v = x[r * N + j];
        acc += v;
        x[r * N + j] = acc;
    }
""", "float* x, int M, int N")
    spec = row_spec(args=INPLACE_ARGS)
    assert scan("warp").why_not(unit(src, spec)) is None
    candidate_compiles(src, spec, [scan("block256")])
    back = kernel("""    float acc = 0.0f;
    for (int j = 0; j < N; j++) {
        y[r * N + j] = acc;
        acc += y[r * N + j] + x[r * N + j];
    }
""")
    why = scan("warp").why_not(unit(back, row_spec()))
    assert why is not None and "reads back what it stored" in why
