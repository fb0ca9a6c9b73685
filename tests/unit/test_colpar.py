"""CPU tests of the ``colpar`` pass (one thread per column -> columns on x, the column's rows split over y).

Kernels written the way a first version of a column reduction is: what the pass rewrites (the split loop, the
combines, the store by one thread, the threads past the last column sent through the combines' barriers, the
launch), what it refuses and why (and rowpar's refusal of the same kernels), launch expressions evaluated at the
spec's sizes, and every output compiled with NVRTC through the transform generator's candidate (helpers included).
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.harness.static_checks import static_check
from ptxfactory.protocol import GpuFacts, evaluate, load_spec
from ptxfactory.search.generators.transform import PASSES, TransformGenerator
from ptxfactory.search.generators.transform.colpar import ColumnParallelPass
from ptxfactory.search.generators.transform.grid_stride import FACTS_NOTE
from ptxfactory.search.generators.transform.rowpar import RowParallelPass

from test_transform import make_ctx, spec_for, unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "colsum" / "colsum.cu"
COL_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "out", role = "out", dtype = "f32", shape = ["N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
SIZES = "[{ M = 100, N = 7 }, { M = 5000, N = 300 }]"
FACTS = GpuFacts(name="test GPU", arch="sm_90a", sm_count=132, l2_bytes=1 << 20, copy_gbps=100.0, peak_gbps=200.0)


def col_spec(name="k", args=COL_ARGS, **kw):
    kw.setdefault("grid", '["cdiv(N, 128)"]')
    kw.setdefault("sizes", SIZES)
    return spec_for(name, args, **kw)


def kernel(body: str, guard: str = "return", name: str = "k", params: str = "const float* x, float* out, int M, int N") -> str:
    """A one-thread-per-column kernel around ``body`` (the column's code), guarded by a return or an enclosing if."""
    head = f'extern "C" __global__ void {name}({params})\n{{\n    int c = blockIdx.x * blockDim.x + threadIdx.x;\n'
    if guard == "return":
        return head + "    if (c >= N) return;\n" + body + "}\n"
    return head + "    if (c < N) {\n" + body + "    }\n}\n"


COLSUM = kernel("""    float s = 0.0f;
    for (int r = 0; r < M; r++) s += x[(size_t)r * N + c];
    out[c] = s;
""")


def colpar(split):
    return next(p for p in PASSES if isinstance(p, ColumnParallelPass) and p.lanes == split)


def rowpar(lanes):
    return next(p for p in PASSES if isinstance(p, RowParallelPass) and not isinstance(p, ColumnParallelPass) and p.lanes == lanes)


def candidate_compiles(source: str, spec, split, facts=None) -> str:
    """The transform generator's single-pass candidate compiles with NVRTC (helpers and all); returns its kernel text."""
    ctx = make_ctx(source, spec)
    p = colpar(split)
    u = unit(source, spec)
    if facts is not None:
        u = dataclasses.replace(u, notes={FACTS_NOTE: facts})
    out = p.apply(u)
    cand = TransformGenerator().candidate(ctx, out, [p])
    assert cand is not None and cand.params[f"pass:{p.name}"] == 1 and cand.params["lanes"] == split
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.resources.spill_stores == 0
    return cand.kernel_text


def block_at(launch, size) -> list[int]:
    return [int(evaluate(b, size)) for b in launch.block]


# ---------------------------------------------------------------- what it rewrites


@pytest.mark.parametrize("split", [4, 8, 16, 32])
def test_column_sum_rows_split_over_y_combined_in_order(split):
    spec = col_spec()
    u = unit(COLSUM, spec)
    p = colpar(split)
    assert p.why_not(u) is None
    out = p.apply(u)
    text = out.text
    assert "int c = (int)((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x);" in text
    assert "const unsigned ptxf_lane = threadIdx.y;" in text
    assert f"for (int r = (0) + ptxf_lane; r < M; r += {split}) s += x[(size_t)r * N + c];" in text
    assert "if (ptxf_lane != 0u) s = 0;" in text  # the other threads of the column start their share at 0
    reduce = "s = ptxf_col_reduce(s, [](const float& ptxf_a, const float& ptxf_b) { return (float)(ptxf_a + ptxf_b); });"
    assert reduce in text
    store = text.index("out[c] = s;")
    assert text.index(reduce) < text.rindex("if (ptxf_lane == 0u)", 0, store) < store  # one thread stores the sum
    # threads past the last column take part in the combine's two barriers, then leave
    assert "if (c >= N) { ptxf_col_idle(2); return; }" in text
    assert out.launch.block == [32, split]
    for size in ({"M": 100, "N": 7}, {"M": 5000, "N": 300}, {"M": 1, "N": 64}):
        assert evaluate(out.launch.grid[0], size) == -(-size["N"] // 32)
    kt = candidate_compiles(COLSUM, spec, split)
    assert 'asm volatile("barrier.sync 0;" ::: "memory");' in kt  # a barrier divergent threads may reach
    assert "__syncthreads" not in kt


def test_an_enclosing_guard_gets_an_else_through_the_barriers():
    src = kernel("""        float s = 0.0f;
        for (int r = 0; r < M; ++r) s += x[r * N + c];
        out[c] = s / (float)M;
""", guard="if")
    spec = col_spec()
    text = colpar(8).apply(unit(src, spec)).text
    assert re.search(r"\} else \{  // past the last column \(transform colpar\)\n\s*ptxf_col_idle\(2\);\n\s*\}", text)
    assert text.index("s = ptxf_col_reduce(") < text.index("out[c] = s / (float)M;")
    candidate_compiles(src, spec, 8)
    candidate_compiles(src, spec, "auto")


KIN = {
    "sum of squares": ("float s = 0.0f;", "for (int r = 0; r < M; r++) { float v = x[r * N + c]; s += v * v; }", "out[c] = s;"),
    "column norm": ("float s = 0.0f;", "for (int r = 0; r < M; r++) s += x[r * N + c] * x[r * N + c];", "out[c] = sqrtf(s);"),
    "max": ("float m = -3.402823466e38f;", "for (int r = 0; r < M; r++) m = fmaxf(m, x[r * N + c]);", "out[c] = m;"),
    "min through a local column pointer": ("const float* col = x + c;\n    float m = col[0];",
                                           "for (int r = 1; r < M; r++) if (col[(size_t)r * N] < m) m = col[(size_t)r * N];",
                                           "out[c] = m;"),
    "index through a local constant": ("double s = 0.0;", "for (int r = 0; r < M; r++) { int at = r * N + c; s += (double)x[at]; }",
                                       "out[c] = (float)s;"),
    "through __ldg": ("float s = 0.0f;", "for (int r = 0; r < M; r++) s += __ldg(x + (r * N + c));", "out[c] = s;"),
}


@pytest.mark.parametrize("what", sorted(KIN))
def test_the_kin_of_a_column_sum(what):
    decl, loop, store = KIN[what]
    src = kernel(f"    {decl}\n    {loop}\n    {store}\n")
    spec = col_spec()
    assert rowpar(32).why_not(unit(src, spec)) is not None
    for split in (8, "auto"):
        text = candidate_compiles(src, spec, split)
        assert "ptxf_lane; r < M; r += " in text and "ptxf_col_reduce(" in text and "ptxf_col_idle(2)" in text


def test_bias_gradient_and_a_mean_and_variance_in_one_loop():
    """db[c] = sum_r dy[r, c] beside two accumulators of one loop: two combines, so four barriers for idle threads."""
    args = """
  { name = "dy", role = "in", dtype = "f32", shape = ["B", "H"] },
  { name = "db", role = "out", dtype = "f32", shape = ["H"] },
  { name = "sq", role = "out", dtype = "f32", shape = ["H"] },
  { name = "B", role = "scalar", dtype = "i32", value = "B" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
"""
    src = """
extern "C" __global__ void bias_grad(const float* dy, float* db, float* sq, int B, int H)
{
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= H) return;
    float g = 0.0f, g2 = 0.0f;
    for (int b = 0; b < B; ++b) {
        float v = dy[(size_t)b * H + h];
        g += v;
        g2 += v * v;
    }
    db[h] = g;
    sq[h] = g2 / B - (g / B) * (g / B);
}
"""
    spec = spec_for("bias_grad", args, grid='["cdiv(H, 256)"]', block="[256]", sizes="[{ B = 64, H = 1000 }]")
    text = candidate_compiles(src, spec, 16)
    assert "g = ptxf_col_reduce(g," in text and "g2 = ptxf_col_reduce(g2," in text
    assert "if (h >= H) { ptxf_col_idle(4); return; }" in text
    assert text.count("if (ptxf_lane == 0u)") == 2
    out = colpar(16).apply(unit(src, spec))
    assert evaluate(out.launch.grid[0], {"B": 64, "H": 1000}) == 32  # cdiv(1000, 32): the guard's bound is H


def test_column_argmax_first_index_on_ties():
    args = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "best", role = "out", dtype = "f32", shape = ["N"] },
  { name = "where", role = "out", dtype = "i32", shape = ["N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
    src = kernel("""    float b = x[c];
    int w = 0;
    for (int r = 1; r < M; r++) {
        float v = x[(size_t)r * N + c];
        if (v > b) { b = v; w = r; }
    }
    best[c] = b;
    where[c] = w;
""", name="colargmax", params="const float* x, float* best, int* where, int M, int N")
    spec = spec_for("colargmax", args, grid='["cdiv(N, 128)"]', sizes=SIZES, rtol=0, atol=0)
    text = candidate_compiles(src, spec, 32)
    assert "ptxf_col_reduce_arg(b, w," in text and "ptxf_v2 > ptxf_v1 || (ptxf_v2 == ptxf_v1 && ptxf_k2 < ptxf_k1)" in text
    assert "(1) + ptxf_lane" in text
    candidate_compiles(src, spec, "auto")


def test_auto_shape_follows_the_sizes_and_the_gpu():
    """colpar_auto: X columns and Y threads per column are launch expressions: without the GPU's facts 32 columns and
    the fewest threads giving each at most 16 rows (at most 1024 / X); with them 8 columns when blocks of 32 would not
    give every SM one, and at least a full wave of threads."""
    spec = col_spec()
    p = colpar("auto")
    out = p.apply(unit(COLSUM, spec))
    assert "r += blockDim.y" in out.text
    shapes = {(m, n): (block_at(out.launch, {"M": m, "N": n}), evaluate(out.launch.grid[0], {"M": m, "N": n}))
              for m, n in [(100, 7), (16, 5000), (17, 5000), (1000, 64), (10**6, 64)]}
    assert shapes[(100, 7)] == ([32, 8], 1)
    assert shapes[(16, 5000)] == ([32, 1], 157)
    assert shapes[(17, 5000)] == ([32, 2], 157)
    assert shapes[(1000, 64)] == ([32, 32], 2)  # cdiv(1000, 16) = 63 -> 64, capped at 1024 / 32
    wide = p.apply(dataclasses.replace(unit(COLSUM, spec), notes={FACTS_NOTE: FACTS}))
    sh = {(m, n): (block_at(wide.launch, {"M": m, "N": n}), evaluate(wide.launch.grid[0], {"M": m, "N": n}))
          for m, n in [(10**6, 64), (8192, 8192), (100, 7), (64, 4224), (64, 4100)]}
    assert sh[(10**6, 64)] == ([8, 128], 8)  # few columns: 8 a block, so 8 blocks rather than 2
    assert sh[(8192, 8192)] == ([32, 32], 256)
    assert sh[(100, 7)] == ([8, 128], 1)  # 7 columns cannot fill the GPU: as many threads a column as a block takes
    assert sh[(64, 4224)] == ([32, 32], 132)  # 132 blocks of 32 columns, one an SM; a wave wants 64 threads a column
    assert sh[(64, 4100)][0][0] == 8  # 129 blocks of 32 would leave SMs idle: 8 columns a block
    assert block_at(wide.launch, {"M": 3, "N": 5}) == [8, 4]  # no more threads a column than rows (3 -> 4)
    for size in ({"M": 100, "N": 7}, {"M": 5000, "N": 300}):
        x, y = block_at(wide.launch, size)
        assert 1 <= x * y <= 1024 and evaluate(wide.launch.grid[0], size) * x >= size["N"]
    candidate_compiles(COLSUM, spec, "auto", facts=FACTS)


def test_the_example_colsum():
    """examples/colsum: every colpar variant applies, no rowpar one does; launches valid at its check and bench sizes."""
    spec = load_spec(str(EXAMPLE) + ".toml").kernels["colsum"]
    source = EXAMPLE.read_text()
    u = unit(source, spec)
    assert all(p.why_not(u) is None for p in PASSES if isinstance(p, ColumnParallelPass))
    assert all("colpar's case" in p.why_not(u) for p in PASSES if type(p) is RowParallelPass)
    for split in ("auto", 4, 32):
        out = colpar(split).apply(dataclasses.replace(u, notes={FACTS_NOTE: FACTS}))
        for size in spec.check.sizes + spec.bench.sizes:
            x, y = block_at(out.launch, size)
            assert 1 <= x * y <= 1024 and evaluate(out.launch.grid[0], size) * x >= size["N"]
        candidate_compiles(source, spec, split, facts=FACTS)
    cands = TransformGenerator().propose(make_ctx(source, spec))
    names = [c.description for c in cands]
    assert "transform colpar_auto" in names and not any("rowpar" in n for n in names)
    assert any("colpar_rows8+" in n for n in names)  # chained with the hints, unroll and launch bounds
    for c in cands:  # every proposal (colpar's chains included) compiles, unspilled, and passes the static checks
        r = compile_candidate(c, spec.arch, spec.check.fast_math)
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        assert r.resources.spill_stores == 0 and r.resources.local_bytes == 0, c.description
        assert static_check(c, spec, r.resources, r.cubin) is None, c.description


# ---------------------------------------------------------------- what it refuses


REFUSED = {
    "a written buffer read in the loop": ("""    out[c] = 0.0f;
    for (int r = 0; r < M; r++) out[c] += x[r * N + c];
""", "no loop to split"),
    "a gather index (not affine)": ("""    float s = 0.0f;
    for (int r = 0; r < M; r++) s += x[(int)x[r] * N + c];
    out[c] = s;
""", "does not walk a column"),
    "a row (contiguous along the loop): rowpar's case": ("""    float s = 0.0f;
    for (int r = 0; r < M; r++) s += x[c * M + r];
    out[c] = s;
""", "does not walk a column"),
    "a barrier": ("""    __syncthreads();
    float s = 0.0f;
    for (int r = 0; r < M; r++) s += x[r * N + c];
    out[c] = s;
""", "barrier"),
    "shared memory": ("""    __shared__ float t[4];
    float s = 0.0f;
    for (int r = 0; r < M; r++) s += x[r * N + c];
    t[0] = s;
    out[c] = t[0];
""", "shared"),
    "a loop inside an if": ("""    float s = 0.0f;
    if (M > 4) {
        for (int r = 0; r < M; r++) s += x[r * N + c];
    }
    out[c] = s;
""", "inside another statement"),
    "a return in the column's code": ("""    float s = 0.0f;
    for (int r = 0; r < M; r++) s += x[r * N + c];
    if (s == 0.0f) return;
    out[c] = s;
""", "a return in the column's code"),
    "a buffer written and read back": ("""    for (int r = 0; r < M; r++) y[r * N + c] = 2.0f * x[r * N + c];
    float s = 0.0f;
    for (int r = 0; r < M; r++) s += y[r * N + c];
    out[c] = s;
""", "read back"),
    "a recurrence down the column": ("""    float h = 0.0f;
    for (int r = 0; r < M; r++) h = 0.5f * h + x[r * N + c];
    out[c] = h;
""", "no loop to split"),
}


WITH_Y = COL_ARGS.replace('  { name = "M"', '  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },\n  { name = "M"', 1)


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_refusals_say_why(what):
    body, reason = REFUSED[what]
    src = kernel(body, params="const float* x, float* out, float* y, int M, int N")
    why = colpar(8).why_not(unit(src, col_spec(args=WITH_Y)))
    assert why is not None and reason in why, (what, why)


def test_grid_stride_loop_over_columns_and_an_exact_spec_are_refused():
    loop = """
extern "C" __global__ void k(const float* x, float* out, int M, int N)
{
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < N; c += blockDim.x * gridDim.x) {
        float s = 0.0f;
        for (int r = 0; r < M; r++) s += x[r * N + c];
        out[c] = s;
    }
}
"""
    assert "grid-stride loop over columns" in colpar(8).why_not(unit(loop, col_spec()))
    assert "no loop to split" in colpar(8).why_not(unit(COLSUM, col_spec(rtol=0, atol=0)))  # a float sum re-associated
    assert "policy" in colpar("auto").why_not(unit(COLSUM, col_spec(policy="fixed")))


def test_rowpar_still_takes_rows_and_broadcast_reads():
    """rowpar's new refusal is for column loops only: a row sum, and a transposed GEMV's row of A read beside a
    vector read by every thread alike (v[j]), stay rowpar's; colpar refuses the row sum."""
    row = kernel("""    float s = 0.0f;
    for (int j = 0; j < M; j++) s += x[(size_t)c * M + j];
    out[c] = s;
""")
    spec = col_spec()
    assert rowpar(32).why_not(unit(row, spec)) is None
    assert "does not walk a column" in colpar(8).why_not(unit(row, spec))
    gemv_t = kernel("""    float s = 0.0f;
    for (int j = 0; j < M; j++) s += x[(size_t)j * N + c] * x[j];
    out[c] = s;
""")
    # x[j]: every thread the same element; x[j * N + c]: a column: colpar's, not rowpar's
    assert colpar(8).why_not(unit(gemv_t, spec)) is None
    assert "colpar's case" in rowpar(32).why_not(unit(gemv_t, spec))
    candidate_compiles(gemv_t, spec, 8)


def test_bad_split_is_a_value_error():
    with pytest.raises(ValueError):
        ColumnParallelPass(3)


COL_SOFTMAX = """
extern "C" __global__ void col_softmax(const float* x, float* y, int R, int N)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N) return;
    float m = -INFINITY;
    for (int r = 0; r < R; r++) m = fmaxf(m, x[r * N + c]);
    float s = 0.0f;
    for (int r = 0; r < R; r++) s += expf(x[r * N + c] - m);
    for (int r = 0; r < R; r++) y[r * N + c] = expf(x[r * N + c] - m) / s;
}
"""
COL_SOFTMAX_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["R", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["R", "N"] },
  { name = "R", role = "scalar", dtype = "i32", value = "R" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
COL_HOST = r"""
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__
#define __restrict__
#define __shared__ static
struct Dim { unsigned x = 0, y = 0, z = 0; };
thread_local Dim threadIdx, blockIdx;
Dim blockDim, gridDim;
static std::unique_ptr<std::barrier<>> g_bar;
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline float __expf(float v) { return expf(v); }
template <typename T> T __shfl_xor_sync(unsigned, T v, int) { return v; }
"""


@pytest.mark.parametrize("hold", [False, True])
def test_an_online_softmax_over_a_column_merges_its_parts_in_order(hold, tmp_path):
    """A softmax over dimension 0 (a channel softmax's shape): online_softmax makes the max and the sum one loop, and
    colpar splits each column's rows over y and merges the (max, sum) parts in shared memory in the order of
    threadIdx.y (ptxf_col_merge; colpar refused a tuple before, 2026-12-05). On the host, blocks of 32 x 4 threads with
    a real barrier: the original's outputs within float rounding, rows shorter and longer than the split."""
    import subprocess

    from ptxfactory.search.generators.transform.online_softmax import OnlineSoftmaxPass

    from ptxfactory.protocol import parse_spec
    from ptxfactory.search.generators.transform.hold_row import HoldRowPass

    spec = parse_spec(f"""
[kernel.col_softmax]
args = [{COL_SOFTMAX_ARGS}]
launch = {{ grid = ["cdiv(N, 128)"], block = [128], policy = "free" }}
[kernel.col_softmax.check]
rtol = 1e-5
atol = 1e-7
sizes = [{{ R = 37, N = 100 }}]
[kernel.col_softmax.bench]
sizes = [{{ R = 64, N = 50176 }}]
""").kernels["col_softmax"]
    fused = OnlineSoftmaxPass().apply(unit(COL_SOFTMAX, spec))
    p = ColumnParallelPass(4)
    assert p.why_not(fused) is None
    out = p.apply(fused)
    assert "ptxf_col_merge(ptxf_part)" in out.text
    if hold:  # each thread's 16 rows of its column held in registers between the two loops: x read once
        h = next(q for q in PASSES if isinstance(q, HoldRowPass) and q.held == 16)
        assert h.why_not(out) is None
        out = h.apply(out)
        assert "ptxf_held" in out.text
    names = [n for n, _ in out.helpers]
    assert names.index("ptxf_softmax") < names.index("ptxf_col_merge")
    from test_transform import make_ctx
    chain = [OnlineSoftmaxPass(), p] + ([h] if hold else [])
    cand = TransformGenerator().candidate(make_ctx(COL_SOFTMAX, spec), out, chain)
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    helpers = "\n".join(t for n, t in out.helpers if n in ("ptxf_rn", "ptxf_softmax", "ptxf_col_merge", "ptxf_col_idle"))
    helpers = helpers.replace("static __device__", "static").replace("__device__", "")
    bar = "static inline void ptxf_col_bar() { g_bar->arrive_and_wait(); }\n"
    orig = COL_SOFTMAX.replace('extern "C" __global__ void col_softmax(', "void k_orig(")
    new = out.text.replace('extern "C" __global__ void col_softmax(', "void k_new(").replace("__global__ void col_softmax(", "void k_new(")
    main = r"""
int main() {
    for (int R : {1, 3, 37, 200}) for (int N : {5, 33, 100}) {
        std::vector<float> x(R * N), y1(R * N, -7.0f), y2(R * N, -7.0f);
        unsigned s = 99u + R * N;
        for (auto& v : x) { s = s * 1664525u + 1013904223u; v = (float)((int)(s >> 9) - (1 << 22)) / (1 << 20); }
        blockDim = {128, 1, 1};
        for (unsigned b = 0; b * 128 < (unsigned)N; ++b) for (unsigned t = 0; t < 128; ++t) {
            blockIdx.x = b; threadIdx.x = t; k_orig(x.data(), y1.data(), R, N); }
        blockDim = {32, 4, 1};
        for (unsigned b = 0; b * 32 < (unsigned)N; ++b) {
            g_bar = std::make_unique<std::barrier<>>(128);
            std::vector<std::thread> ts;
            for (unsigned t = 0; t < 128; ++t) ts.emplace_back([&, t, b] { blockIdx.x = b; threadIdx.x = t % 32; threadIdx.y = t / 32;
                k_new(x.data(), y2.data(), R, N); });
            for (auto& th : ts) th.join();
        }
        for (int i = 0; i < R * N; ++i)
            if (!(fabsf(y1[i] - y2[i]) <= 1e-5f * fabsf(y1[i]) + 1e-7f)) { printf("R=%d N=%d i=%d: %g vs %g\n", R, N, i, y1[i], y2[i]); return 1; }
    }
    printf("close\n");
    return 0;
}
"""
    cpp, exe = tmp_path / "col.cpp", tmp_path / "col"
    cpp.write_text(COL_HOST + bar + helpers + "\n" + orig + new + main)
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", "-ffp-contract=off", "-pthread", str(cpp), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "close", run.stdout + run.stderr


def test_a_welford_update_down_the_column_is_merged_in_order():
    """Since 2026-12-05 colpar merges tuples (ptxf_col_merge): a Welford over a column's rows splits over y."""
    body = """    float n = 0.0f, m = 0.0f, m2 = 0.0f;
    for (int r = 0; r < M; r++) { float v = x[r * N + c]; n += 1.0f; float d = v - m; m += d / n; m2 += d * (v - m); }
    out[c] = m2 / n;
"""
    src = kernel(body)
    out = ColumnParallelPass(8).apply(unit(src, col_spec()))
    assert "ptxf_welford<" in out.text and "ptxf_col_merge(ptxf_part)" in out.text
