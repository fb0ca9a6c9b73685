"""CPU tests of the ``rowpar`` pass (one thread per row -> lanes per row) and its reduction recogniser.

Each kernel is small and hand-written the way a first version is: what the pass rewrites (loops
split, accumulators combined, stores made by one lane, the launch), what it refuses and why, and
every output compiled with NVRTC through the transform generator's candidate (helpers included).
"""
from __future__ import annotations

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import evaluate
from ptxfactory.search.generators.transform import PASSES, TransformGenerator
from ptxfactory.search.generators.transform import syntax as sx
from ptxfactory.search.generators.transform.affine import independent, poly
from ptxfactory.search.generators.transform.reductions import loop_accumulators
from ptxfactory.search.generators.transform.rowpar import RowParallelPass

from test_transform import make_ctx, spec_for, unit

ROW_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
SIZES = "[{ M = 7, N = 100 }]"


def row_spec(name="k", args=ROW_ARGS, **kw):
    kw.setdefault("grid", '["cdiv(M, 128)"]')
    kw.setdefault("sizes", SIZES)
    return spec_for(name, args, **kw)


L2NORM = """
extern "C" __global__ void k(const float* x, float* y, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float ss = 0.0f;
    for (int j = 0; j < N; j++) {
        float v = x[r * N + j];
        ss += v * v;
    }
    float inv = rsqrtf(ss + 1e-6f);
    for (int j = 0; j < N; j++)
        y[r * N + j] = x[r * N + j] * inv;
}
"""

XENT_ARGS = """
  { name = "logits", role = "in", dtype = "f32", shape = ["M", "V"] },
  { name = "target", role = "in", dtype = "i32", shape = ["M"], init = "randint(0, V)" },
  { name = "loss", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "V", role = "scalar", dtype = "i32", value = "V" },
"""
XENT = """
extern "C" __global__ void xent(const float* logits, const int* target, float* loss, int M, int V)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M) {
        const float* p = logits + (size_t)row * V;
        float m = -3.402823466e38f;
        for (int j = 0; j < V; ++j) m = fmaxf(m, p[j]);
        float s = 0.0f;
        for (int j = 0; j < V; ++j) s += expf(p[j] - m);
        loss[row] = logf(s) + m - p[target[row]];
    }
}
"""

ARGMAX_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "best", role = "out", dtype = "f32", shape = ["M"] },
  { name = "where", role = "out", dtype = "i32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
ARGMAX = """
extern "C" __global__ void argmax(const float* x, float* best, int* where, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float b = x[(size_t)r * N];
    int w = 0;
    for (int j = 1; j < N; j++) {
        float v = x[(size_t)r * N + j];
        if (v > b) { b = v; w = j; }
    }
    best[r] = b;
    where[r] = w;
}
"""

ROPE_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["T", "D"] },
  { name = "c", role = "in", dtype = "f32", shape = ["T", "D"] },
  { name = "y", role = "out", dtype = "f32", shape = ["T", "D"] },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
"""
ROPE = """
extern "C" __global__ void rope(const float* x, const float* c, float* y, int T, int D)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int half = D / 2;
    for (int d = 0; d < half; d++) {
        float a = x[t * D + d], b = x[t * D + d + half];
        y[t * D + d] = a * c[t * D + d] - b * c[t * D + d + half];
        y[t * D + d + half] = b * c[t * D + d] + a * c[t * D + d + half];
    }
}
"""


def rowpar(lanes):
    return next(p for p in PASSES if isinstance(p, RowParallelPass) and p.lanes == lanes)


def candidate_compiles(source: str, spec, lanes: int) -> str:
    """The transform generator's single-pass candidate for ``lanes`` compiles (helpers and all); returns its kernel text."""
    ctx = make_ctx(source, spec)
    gen = TransformGenerator()
    p = rowpar(lanes)
    out = p.apply(unit(source, spec))
    cand = gen.candidate(ctx, out, [p])
    assert cand is not None and cand.params[f"pass:{p.name}"] == 1 and cand.params["lanes"] == lanes
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    return cand.kernel_text


@pytest.mark.parametrize("lanes", [32, 8, 256])
def test_l2norm_rows_split_sum_then_map(lanes):
    spec = row_spec()
    u = unit(L2NORM, spec)
    p = rowpar(lanes)
    assert p.why_not(u) is None
    out = p.apply(u)
    step = f"j += {lanes}"
    assert out.text.count(step) == 2  # both loops split
    assert out.text.count("(0) + ptxf_lane") == 2
    assert "if (ptxf_lane != 0u) ss = 0;" in out.text  # the sum's other lanes start at 0
    reduce = "ptxf_block_reduce(ss," if lanes > 32 else f"ptxf_group_reduce<{lanes}>(ss,"
    assert reduce in out.text
    assert out.text.index(reduce) < out.text.index("rsqrtf")  # combined before the value is used
    assert "ptxf_lane == 0u" not in out.text  # the stores are in a split loop: no first-lane guard
    rows_per_block = 1 if lanes > 32 else 256 // lanes
    assert out.launch.block == [256 if lanes <= 32 else lanes]
    assert evaluate(out.launch.grid[0], {"M": 1000, "N": 5}) == -(-1000 // rows_per_block)
    candidate_compiles(L2NORM, spec, lanes)


def test_cross_entropy_max_then_sum_and_one_lane_stores():
    spec = row_spec("xent", XENT_ARGS, sizes="[{ M = 5, V = 50 }]")
    u = unit(XENT, spec)
    p = rowpar(32)
    assert p.why_not(u) is None
    text = p.apply(u).text
    assert "m = ptxf_group_reduce<32>(m, [](const float& ptxf_a, const float& ptxf_b) { return (float)(fmaxf(ptxf_a, ptxf_b)); });" in text
    assert "if (ptxf_lane != 0u) m =" not in text  # a max keeps its start value on every lane
    assert "s = ptxf_group_reduce<32>(s," in text
    guard = text.index("if (ptxf_lane == 0u)")
    assert guard < text.index("loss[row] =") and text.index("s = ptxf_group_reduce") < guard
    candidate_compiles(XENT, spec, 32)
    candidate_compiles(XENT, spec, 1024)


def test_argmax_pairs_and_first_index_on_ties():
    spec = row_spec("argmax", ARGMAX_ARGS)
    text = rowpar(16).apply(unit(ARGMAX, spec)).text
    assert "ptxf_group_reduce_arg<16>(b, w," in text
    assert "ptxf_v2 > ptxf_v1 || (ptxf_v2 == ptxf_v1 && ptxf_k2 < ptxf_k1)" in text  # strict > in the source: the first index wins ties
    assert "for (int j = (1) + ptxf_lane; j < N; j += 16)" in text
    candidate_compiles(ARGMAX, spec, 16)
    candidate_compiles(ARGMAX, spec, 512)
    last = ARGMAX.replace("if (v > b)", "if (v >= b)")
    assert "ptxf_k2 > ptxf_k1" in rowpar(32).apply(unit(last, spec)).text  # >= keeps the last index


def test_rope_two_writes_per_iteration_proven_disjoint():
    spec = row_spec("rope", ROPE_ARGS, grid='["cdiv(T, 128)"]', sizes="[{ T = 9, D = 64 }]")
    p = rowpar(8)
    assert p.why_not(unit(ROPE, spec)) is None
    text = candidate_compiles(ROPE, spec, 8)
    assert "for (int d = (0) + ptxf_lane; d < half; d += 8)" in text
    # the second half starts one element earlier: iterations would overlap, so the loop is not split
    overlap = ROPE.replace("d + half]", "d + half - 1]")
    assert "no loop to split" in p.why_not(unit(overlap, spec))


REFUSED = {
    "a prefix sum reads its accumulator": """
    float acc = 0.0f;
    for (int j = 0; j < N; j++) { acc += x[r * N + j]; y[r * N + j] = acc; }
""",
    "a shift reads the next element it overwrites": """
    for (int j = 0; j < N; j++) y[r * N + j] = y[r * N + j + 1];
""",
    "a break": """
    for (int j = 0; j < N; j++) { if (x[r * N + j] < 0.0f) break; y[r * N + j] = 1.0f; }
""",
    "one element written by every iteration": """
    for (int j = 0; j < N; j++) y[r * N] = x[r * N + j];
""",
    "a recurrence": """
    float h = 0.0f;
    for (int j = 0; j < N; j++) h = 0.5f * h + x[r * N + j];
    y[r * N] = h;
""",
    "an online softmax without its rescale (two accumulators updated together)": """
    float m = -INFINITY, s = 0.0f;
    for (int j = 0; j < N; j++) { float v = x[r * N + j]; float mn = fmaxf(m, v); s = s + expf(v - mn); m = mn; }
    y[r * N] = s;
""",
    "a gather write": """
    for (int j = 0; j < N; j++) y[r * N + (int)x[j]] = 1.0f;
""",
    "a thread-local array filled in the loop": """
    float buf[4];
    for (int j = 0; j < 4; j++) buf[j] = x[r * N + j];
    y[r * N] = buf[0] + buf[3];
""",
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_loops_it_cannot_prove_safe_are_left_alone(what):
    src = "extern \"C\" __global__ void k(const float* x, float* y, int M, int N)\n{\n" \
          "    int r = blockIdx.x * blockDim.x + threadIdx.x;\n    if (r >= M) return;\n" + REFUSED[what] + "}\n"
    spec = row_spec()
    reason = rowpar(32).why_not(unit(src.replace("const float* x", "float* x"), spec) if "shift" in what else unit(src, spec))
    # the loop is not split; the kernel as a whole is then refused (no loop left to split, or the loop kept serial
    # writes memory and row variables, so no single lane may run it alone)
    assert reason is not None and ("no loop to split" in reason or "serial loop writes memory" in reason), (what, reason)


WHOLE_REFUSALS = {
    "__syncthreads": ("    __shared__ float t[128];\n    t[threadIdx.x] = x[r];\n    __syncthreads();\n"
                      "    for (int j = 0; j < N; j++) y[r * N + j] = t[0];\n", "shared"),
    "blockDim": ("    for (int j = 0; j < N; j++) y[r * N + j] = blockDim.x;\n", "threadIdx/blockIdx/blockDim/gridDim"),
    "serial loop writing memory and row state": (
        "    float c = 0.0f;\n    int j = 0;\n    while (j < N) { c += x[r * N + j]; y[r * N + j] = c; j++; }\n", "serial loop writes memory"),
    "a pointer given to a function": ("    for (int j = 0; j < N; j++) y[r * N + j] = 0.0f;\n    sink(y);\n", "what it writes is unknown"),
}


@pytest.mark.parametrize("what", sorted(WHOLE_REFUSALS))
def test_kernels_it_refuses_whole(what):
    body, reason = WHOLE_REFUSALS[what]
    src = ("__device__ void sink(float* p) { p[0] = 1.0f; }\n"
           "extern \"C\" __global__ void k(const float* x, float* y, int M, int N)\n{\n"
           "    int r = blockIdx.x * blockDim.x + threadIdx.x;\n    if (r >= M) return;\n" + body + "}\n")
    why = rowpar(32).why_not(unit(src, row_spec()))
    assert why is not None and reason in why, why


def test_fixed_launch_and_non_literal_block_are_refused():
    assert "policy" in rowpar(32).why_not(unit(L2NORM, row_spec(policy="fixed")))
    args = ROW_ARGS + '  { name = "B", role = "scalar", dtype = "i32", value = "B" },\n'
    src = L2NORM.replace("int M, int N)", "int M, int N, int B)")
    assert "literal 1-D block" in rowpar(32).why_not(unit(src, row_spec(args=args, block='["B"]', sizes="[{ M = 7, N = 100, B = 128 }]")))


def test_a_serial_loop_stays_serial_and_a_memory_loop_goes_to_one_lane():
    src = """
extern "C" __global__ void k(const float* x, float* y, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float h = 0.0f;
    for (int j = 0; j < 16; j++) h = 0.5f * h + x[r * N + j];  // a short recurrence: every lane runs it
    for (int j = 0; j < N; j++) y[r * N + j] = x[r * N + j] * h; // a map: split
    for (int j = 1; j < N; j++) y[r * N + j] += y[r * N + j - 1]; // a scan in memory: one lane
}
"""
    spec = row_spec()
    text = rowpar(32).apply(unit(src, spec)).text
    assert "h = 0.5f * h" in text and text.count("j += 32") == 1
    scan = text.index("y[r * N + j] += y[r * N + j - 1]")
    guard = text.rindex("if (ptxf_lane == 0u)", 0, scan)
    sync = text.rindex("__syncwarp(ptxf_group_mask<32>());", 0, guard)  # the map's writes are read by the scan
    assert sync < guard < scan
    candidate_compiles(src, spec, 32)
    # a recurrence over the whole row would run whole on each of the 32 lanes: 32 times its work, refused
    long = src.replace("j < 16; j++) h =", "j < N; j++) h =")
    why = rowpar(32).why_not(unit(long, spec))
    assert why is not None and "every lane of a row would run all of it (4096 iterations" in why, why


def test_rows_not_a_spec_scalar_fall_back_to_the_original_threads():
    src = L2NORM.replace("if (r >= M) return;", "if (r >= M - 1) return;")
    out = rowpar(32).apply(unit(src, row_spec()))
    assert evaluate(out.launch.grid[0], {"M": 1000, "N": 5}) == -(-999 // 8)  # (M) - 1 is a spec expression too
    src = L2NORM.replace("if (r >= M) return;", "if (r >= min(M, N)) return;")
    out = rowpar(32).apply(unit(src, row_spec()))
    assert evaluate(out.launch.grid[0], {"M": 1000, "N": 5}) == -(-1000 // 128) * 128 // 8


# ---------------------------------------------------------------- the recogniser and the dependence test


def _loop(src: str):
    tree = sx.parse(src.encode())
    return next(n for n in sx.walk(tree.root_node) if n.type == "for_statement")


@pytest.mark.parametrize("update,kind", [
    ("s += e;", "sum"), ("s -= e;", "sum"), ("s = s + e;", "sum"), ("s = e + s;", "sum"), ("s++;", "sum"),
    ("s *= e;", "prod"), ("s = fmaxf(s, e);", "max"), ("s = max(e, s);", "max"), ("s = e > s ? e : s;", "max"),
    ("if (e > s) s = e;", "max"), ("if (s > e) s = e;", "min"), ("s = fminf(e, s);", "min"),
    ("if (e > 0.0f) s += e;", "sum"), ("s = fmaf(e, e, s);", "sum"), ("s = __fmaf_rn(e, 2.0f, s);", "sum"),
])
def test_recognised_accumulations(update, kind):
    loop = _loop(f"void f() {{ for (int j = 0; j < n; j++) {{ float e = x[j]; {update} }} }}")
    accs = loop_accumulators(loop.child_by_field_name("body"), {"s"}, "j")
    assert accs is not None and accs["s"].kind == kind


@pytest.mark.parametrize("update", [
    "s = s - e + s;", "s = e - s;", "s += s;", "y[j] = s; s += e;", "s = fmaxf(s, e); s += e;", "s = 2.0f * s + e;",
    "if (e > s) { s = e; t = j * j; }", "s--;", "if (s > 0.0f) s += e;", "s = fmaf(s, e, s);", "s = fmaf(e, e, 1.0f);",
])
def test_refused_accumulations(update):
    loop = _loop(f"void f() {{ for (int j = 0; j < n; j++) {{ float e = x[j]; {update} }} }}")
    carried = {"s", "t"} if "t =" in update else {"s"}
    assert loop_accumulators(loop.child_by_field_name("body"), carried, "j") is None


def _p(text: str):
    return poly(sx.parse(f"int z = {text};".encode()).root_node.named_children[0].child_by_field_name("declarator").child_by_field_name("value"))


@pytest.mark.parametrize("f,g,trip,ok", [
    ("r * N + j", "r * N + j", "N", True),
    ("r * N + j", "N * r + j + 1", "N", False),
    ("t * D + j", "t * D + j + h", "h", True),
    ("t * D + j", "t * D + j + h - 1", "h", False),
    ("2 * j", "2 * j + 1", "N", False),
    ("j * S", "j * S", "N", True),
    ("j", "j * 2", "N", False),
    ("(long)r * N + j", "r * N + j", "N", True),
    ("j / 2", "j", "N", False),
])
def test_dependence_test(f, g, trip, ok):
    pf, pg = _p(f), _p(g)
    assert (pf is not None and pg is not None and independent(pf, pg, "j", _p(trip))) == ok


def test_split_loops_take_the_strided_unroll():
    from ptxfactory.search.generators.transform.unroll import STRIDED_UNROLL, UnrollPass
    u = rowpar(32).apply(unit(L2NORM, row_spec()))
    assert UnrollPass().applies(u)
    assert UnrollPass().apply(u).text.count(f"#pragma unroll {STRIDED_UNROLL}\n") == 2


def test_inner_loops_of_a_loop_that_carries_nothing_are_split():
    """RoPE written one thread per token: a loop over heads (carrying nothing) around a loop over half the head
    dimension that writes two disjoint halves: the inner loop is split, the outer one runs on every lane."""
    src = """
extern "C" __global__ void rope(const float* x, const float* c, float* y, int T, int D)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int half = D / 4;
    for (int h = 0; h < 2; ++h) {
        float* o = y + ((size_t)t * 2 + h) * half * 2;
        for (int d = 0; d < half; d++) {
            int at = d + half;
            o[d] = x[t * D + d] * c[d];
            o[at] = x[t * D + at] * c[at];
        }
    }
}
"""
    spec = row_spec("rope", ROPE_ARGS, grid='["cdiv(T, 128)"]', sizes="[{ T = 9, D = 64 }]")
    text = candidate_compiles(src, spec, 16)
    assert "for (int h = 0; h < 2; ++h)" in text and "for (int d = (0) + ptxf_lane; d < half; d += 16)" in text
    # an index that moves inside an iteration of the loop being split (the inner loop's k) is not proven distinct
    moving = src.replace("for (int h = 0; h < 2; ++h) {", "for (int h = 0; h < 2; ++h) { for (int k = 0; k < 2; k++) y[t * D + h + k] = 0.0f;")
    u = rowpar(16).apply(unit(moving, spec))
    assert "for (int h = 0; h < 2; ++h)" in u.text and "h += 16" not in u.text



def test_auto_lanes_follow_the_row_length_and_the_gpu():
    """rowpar_auto: lanes per row and rows per block are launch expressions of the row length (and, with the GPU's
    facts, of the row count: at least one full wave of threads); the kernel strides by blockDim.x."""
    import dataclasses

    from ptxfactory.protocol import GpuFacts
    from ptxfactory.search.generators.transform.grid_stride import FACTS_NOTE
    spec = row_spec()
    p = rowpar("auto")
    out = p.apply(unit(L2NORM, spec))
    assert "j += blockDim.x" in out.text and "ptxf_row_reduce(ss," in out.text
    shape = {(m, n): ([evaluate(b, {"M": m, "N": n}) for b in out.launch.block], evaluate(out.launch.grid[0], {"M": m, "N": n}))
             for m, n in [(100, 64), (100, 500), (100, 4000), (100, 100000), (1000, 1)]}
    assert shape[(100, 64)] == ([8, 32], 4)  # 8 lanes, 32 rows a block
    assert shape[(100, 500)] == ([32, 8], 13)
    assert shape[(100, 4000)] == ([256, 1], 100)
    assert shape[(100, 100000)] == ([1024, 1], 100)
    assert shape[(1000, 1)] == ([8, 32], 32)
    facts = GpuFacts(name="test GPU", arch="sm_90a", sm_count=100, l2_bytes=1 << 20, copy_gbps=100.0, peak_gbps=200.0)
    u = unit(L2NORM, spec)
    wide = p.apply(dataclasses.replace(u, notes={FACTS_NOTE: facts}))
    # 100 rows of 64 cannot fill 100 SMs x 2048 threads with 8 lanes each: a block per row instead
    assert [evaluate(b, {"M": 100, "N": 64}) for b in wide.launch.block] == [1024, 1]
    assert [evaluate(b, {"M": 10**6, "N": 64}) for b in wide.launch.block] == [8, 32]
    candidate_compiles(L2NORM, spec, "auto")
    candidate_compiles(ARGMAX, row_spec("argmax", ARGMAX_ARGS), "auto")
    candidate_compiles(XENT, row_spec("xent", XENT_ARGS, sizes="[{ M = 5, V = 50 }]"), "auto")


def test_the_128_element_bound_gives_long_rows_fewer_lanes_but_still_fills_the_gpu():
    """rowpar_auto_e128: the fewest tier giving each lane at most 128 elements (auto: 32), a full wave kept: rows of
    32000 get a block of 256 (auto: 1024 lanes), many rows of 1000 a sub-warp of 8 (auto: a warp), few long rows
    still a block of 1024 (the wave)."""
    import dataclasses

    from ptxfactory.protocol import GpuFacts
    from ptxfactory.search.generators.transform.grid_stride import FACTS_NOTE
    spec = row_spec()
    facts = GpuFacts(name="test GPU", arch="sm_90a", sm_count=132, l2_bytes=1 << 20, copy_gbps=100.0, peak_gbps=200.0)
    u = dataclasses.replace(unit(L2NORM, spec), notes={FACTS_NOTE: facts})
    lanes = {}
    for variant in ("auto", "auto_e128"):
        out = rowpar(variant).apply(u)
        assert out.notes["lanes"] == variant and rowpar(variant).name == f"rowpar_{variant}"
        lanes[variant] = {(m, n): evaluate(out.launch.block[0], {"M": m, "N": n})
                          for m, n in [(4096, 32000), (131072, 1000), (512, 131072), (100, 64)]}
    assert lanes["auto"] == {(4096, 32000): 1024, (131072, 1000): 32, (512, 131072): 1024, (100, 64): 1024}
    assert lanes["auto_e128"] == {(4096, 32000): 256, (131072, 1000): 8, (512, 131072): 1024, (100, 64): 1024}
    candidate_compiles(L2NORM, spec, "auto_e128")
    candidate_compiles(XENT, row_spec("xent", XENT_ARGS, sizes="[{ M = 5, V = 50 }]"), "auto_e128")


def test_auto_lanes_read_the_row_length_through_the_rows_constants():
    spec = row_spec("rope", ROPE_ARGS, grid='["cdiv(T, 128)"]', sizes="[{ T = 9, D = 64 }]")
    out = rowpar("auto").apply(unit(ROPE, spec))
    assert "(D) // 2" in out.launch.block[0]  # int half = D / 2, the split loop's bound
    assert [evaluate(b, {"T": 9, "D": 64}) for b in out.launch.block] == [8, 32]
    candidate_compiles(ROPE, spec, "auto")
    # a row length that is no expression of the sizes: the fixed-lane variants still apply, auto does not
    src = ROPE.replace("int half = D / 2;", "int half = (int)sqrtf((float)D);")
    assert "length" in rowpar("auto").why_not(unit(src, spec)) and rowpar(32).why_not(unit(src, spec)) is None


def test_declarations_between_the_row_index_and_its_guard():
    src = L2NORM.replace("    if (r >= M) return;\n", "    const float* xr = x + (size_t)r * N;\n    int n = N;\n    if (r >= M) return;\n")
    src = src.replace("float v = x[r * N + j];", "float v = xr[j];").replace("j < N; j++) {", "j < n; j++) {")
    spec = row_spec()
    u = unit(src, spec)
    assert rowpar(32).why_not(u) is None
    text = candidate_compiles(src, spec, 32)
    assert "const float* xr = x + (size_t)r * N;" in text and "for (int j = (0) + ptxf_lane; j < n; j += 32)" in text
    assert "int n = N;" in text
    auto = rowpar("auto").apply(u)
    assert "(N)" in auto.launch.block[0]  # the loop bound n reads through int n = N


ROWLOOP = """
extern "C" __global__ void k(const float* x, float* y, int M, int N)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < M; r += blockDim.x * gridDim.x) {
        float ss = 0.0f;
        for (int j = 0; j < N; j++) ss += x[r * N + j] * x[r * N + j];
        y[r * N] = ss;
    }
}
"""


@pytest.mark.parametrize("lanes", [16, 32, 256, "auto"])
def test_a_grid_stride_loop_over_rows_strides_over_groups(lanes):
    spec = row_spec(grid='["min(cdiv(M, 128), 264)"]')
    p = rowpar(lanes)
    assert p.why_not(unit(ROWLOOP, spec)) is None
    text = candidate_compiles(ROWLOOP, spec, lanes)
    stride = {16: "(int)((unsigned long long)gridDim.x * blockDim.x / 16u)", 32: "(int)((unsigned long long)gridDim.x * blockDim.x / 32u)",
              256: "(int)gridDim.x", "auto": "(int)((unsigned long long)gridDim.x * blockDim.y)"}[lanes]
    assert f"r < M; r += {stride})" in text
    assert text.index("const unsigned ptxf_lane") < text.index("for (int r =")
    assert "if (ptxf_lane == 0u)" in text  # y[r * N] = ss by one lane
    out = p.apply(unit(ROWLOOP, spec))
    assert evaluate(out.launch.grid[0], {"M": 1000, "N": 64}) >= 1


def test_an_exact_spec_keeps_floating_point_sums_serial():
    exact = row_spec(rtol=0, atol=0)
    # the sum's loop stays serial, and every lane would run all of it: the split is refused (the map loop alone was
    # split until 2026-12-05, each lane repeating the row's sum)
    why = rowpar(32).why_not(unit(L2NORM, exact))
    assert why is not None and "stays serial (ss: a floating-point sum, and the spec asks for exact results)" in why, why
    # max and arg max stay exact
    assert rowpar(32).why_not(unit(ARGMAX, row_spec("argmax", ARGMAX_ARGS, rtol=0, atol=0))) is None


def test_a_refusal_says_why_each_loop_stays_serial():
    """A Welford update whose count is updated under a condition is not a recognised accumulation: the refusal names
    its variables."""
    src = L2NORM.replace("float ss = 0.0f;", "float n = 0.0f, m = 0.0f, m2 = 0.0f, ss = 0.0f;").replace(
        "        ss += v * v;\n", "        if (v > 0.0f) n += 1.0f; float d = v - m; m += d / n; m2 += d * (v - m);\n").replace(
        "for (int j = 0; j < N; j++)\n        y[r * N + j] = x[r * N + j] * inv;", "y[r * N] = m2 / n + inv;")
    why = rowpar(32).why_not(unit(src, row_spec()))
    assert why.startswith("no loop to split across lanes (line 6: carried m, m2, n: not recognised accumulations")


BRACELESS = """
extern "C" __global__ void k(const float* x, float* y, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float s = 1.0f;
    if (N > 4)
        for (int j = 0; j < N; j++) s += x[r * N + j];
    else
        for (int j = 0; j < N; j++) s += 2.0f * x[r * N + j];
    y[r * N] = s;
}
"""


@pytest.mark.parametrize("lanes", [8, 256])
def test_a_split_loop_that_is_a_braceless_body_keeps_its_lane_start_and_combine_inside(lanes):
    """A loop that is the whole body of an ``if``/``else`` without braces: what the pass adds before it (the other
    lanes' start at 0) and after it (the combine) goes into one block with it, so neither escapes the branch."""
    out = rowpar(lanes).apply(unit(BRACELESS, row_spec()))
    fn = sx.kernel_function(sx.parse(out.text.encode()).root_node)
    branch = next(n for n in sx.walk(fn) if n.type == "if_statement" and "N > 4" in sx.text(n.child_by_field_name("condition")))
    then, other = branch.child_by_field_name("consequence"), branch.child_by_field_name("alternative")
    for arm in (then, other.named_children[-1] if other.type == "else_clause" else other):
        assert arm.type == "compound_statement", sx.text(arm)
        text = sx.text(arm)
        assert text.index("if (ptxf_lane != 0u) s = 0") < text.index("for (") < text.index("s = ptxf_")
    candidate_compiles(BRACELESS, row_spec(), lanes)


def test_a_column_walked_through_a_flat_indexs_remainder_is_colpars():
    """A mean over dim 1 of [B, D1, D2] one thread per flat (b, j), ``j = idx % D2``: consecutive threads read
    consecutive j, each loop iteration D2 apart (a column). rowpar's lanes would read D2 apart (uncoalesced, slower
    than the original): refused, colpar's case (a new user's trial proposed 14 such rowpar candidates)."""
    src = """
extern "C" __global__ void mean_dim1(const float* x, float* out, int B, int D1, int D2)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * D2) {
        int b = idx / D2;
        int j = idx % D2;
        float sum = 0.0f;
        for (int i = 0; i < D1; i++) sum += x[b * D1 * D2 + i * D2 + j];
        out[idx] = sum / (float)D1;
    }
}
"""
    args = """
  { name = "x", role = "in", dtype = "f32", shape = ["B", "D1", "D2"] },
  { name = "out", role = "out", dtype = "f32", shape = ["B", "D2"] },
  { name = "B", role = "scalar", dtype = "i32", value = "B" },
  { name = "D1", role = "scalar", dtype = "i32", value = "D1" },
  { name = "D2", role = "scalar", dtype = "i32", value = "D2" },
"""
    from ptxfactory.protocol import parse_spec
    spec = parse_spec(f"""
[kernel.mean_dim1]
args = [{args}]
launch = {{ grid = ["cdiv(B * D2, 256)"], block = [256], policy = "free" }}
[kernel.mean_dim1.check]
rtol = 1e-4
atol = 1e-5
sizes = [{{ B = 3, D1 = 50, D2 = 37 }}]
[kernel.mean_dim1.bench]
sizes = [{{ B = 16, D1 = 256, D2 = 256 }}]
""").kernels["mean_dim1"]
    why = rowpar(32).why_not(unit(src, spec))
    assert why is not None and "colpar's case" in why
    from ptxfactory.search.generators.transform.colpar import ColumnParallelPass
    assert ColumnParallelPass(8).why_not(unit(src, spec)) is None
