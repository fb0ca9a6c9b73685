"""CPU tests of the ``hold_row`` pass: a row that several lane-strided loops read is read once, into registers.

What it rewrites (on rowpar's and blockrow's outputs of the shipped examples and on kernels written lane-strided by
hand), what it refuses and why, how it picks the elements per lane from the spec's sizes, how it composes with
vector_loops, and every output compiled with NVRTC with no local memory (the held array must stay in registers).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import load_spec
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, run_chain, unit_from_context
from ptxfactory.search.generators.transform.hold_row import HoldRowPass

from test_transform import make_ctx, spec_for

ROOT = Path(__file__).resolve().parents[2]


def passes(*names):
    return [next(p for p in PASSES if p.name == n) for n in names]


def held(chain_names, source, spec):
    """The unit after ``chain_names`` (hold_row last) and its candidate, compiled with NVRTC: no local memory."""
    ctx = make_ctx(source, spec)
    chain = passes(*chain_names)
    u = unit_from_context(ctx)
    for p in chain:
        assert p.applies(u), (p.name, getattr(p, "why_not", lambda _: None)(u))
        u = p.apply(u)
    cand = TransformGenerator().candidate(ctx, u, chain)
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.resources.local_bytes == 0 and r.resources.spill_stores == 0, r.resources.summary()
    return u, cand


def example(name):
    path = ROOT / "examples" / name / f"{name}.cu"
    return path.read_text(), load_spec(str(path) + ".toml").kernels[name]


# ---------------------------------------------------------------- the examples after rowpar / blockrow


@pytest.mark.parametrize("name,grid,loops", [
    ("standardize_rows", "blockrow_auto", 3), ("standardize_rows", "blockrow_lanes32", 3),
    ("standardize_rows", None, 3),  # the original: a block per row whose loops are already blockDim-strided
    ("l2norm_rows", "rowpar_auto", 2), ("l2norm_rows", "rowpar_lanes32", 2), ("l2norm_rows", "rowpar_block256", 2),
])
def test_examples_read_the_row_once(name, grid, loops):
    source, spec = example(name)
    chain = ["restrict"] + ([grid] if grid else []) + ["hold_row_auto"]
    u, cand = held(chain, source, spec)
    assert u.text.count("if (ptxf_hold) {") == loops  # every loop that read the row has its held path
    assert u.text.count("ptxf_held0[ptxf_t] = xr[i];") == 1  # one load per element, in the first loop
    assert u.text.count("for (int i = ") == loops  # the original loops stay, for rows longer than H per lane
    assert cand.params["pass:hold_row_auto"] == 1 and cand.params["held"] == u.notes["held"]
    assert u.launch == run_chain(unit_from_context(make_ctx(source, spec)), passes(*chain[:-1])).launch


def test_auto_holds_what_the_bench_sizes_need():
    # blockrow_auto gives a row cdiv(N, 16) lanes (up to 1024): 16 elements per lane at N = 4096 and N = 512
    source, spec = example("standardize_rows")
    u, _ = held(["blockrow_auto", "hold_row_auto"], source, spec)
    assert u.notes["held"] == 16 and "__nv_bfloat16 ptxf_held0[16];" in u.text
    # 32 fixed lanes: 16 elements per lane only at N = 512 (4096 would need 128)
    u, _ = held(["blockrow_lanes32", "hold_row_auto"], source, spec)
    assert u.notes["held"] == 16
    assert "const bool ptxf_hold = (long long)(N) - (0) <= (long long)16 * (long long)(blockDim.x);" in u.text


def test_fixed_sizes_that_never_run_are_refused():
    source, spec = example("standardize_rows")
    u = run_chain(unit_from_context(make_ctx(source, spec)), passes("blockrow_auto"))
    assert "never run" in HoldRowPass(8).why_not(u)
    assert HoldRowPass(16).applies(u) and HoldRowPass(32).applies(u)


def test_generated_candidates_with_hold_row_compile():
    for name in ("standardize_rows", "l2norm_rows"):
        source, spec = example(name)
        ctx = make_ctx(source, spec)
        cands = [c for c in TransformGenerator().propose(ctx) if any(k.startswith("pass:hold_row") for k in c.params)]
        assert cands, name
        for c in cands:
            r = compile_candidate(c, "sm_90a")
            assert not isinstance(r, CompileFailed), (c.description, r.log)
            if "launch_bounds" not in c.description:  # launch_bounds alone makes ptxas spill a few bytes in some chains
                assert r.resources.local_bytes == 0, (c.description, r.resources.summary())


# ---------------------------------------------------------------- kernels written lane-strided


ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "w", role = "in", dtype = "f32", shape = ["N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
# a warp per row, written by hand: the index through a local constant, x read in three loops, w in two
WARP = """
extern "C" __global__ void k(const float* x, const float* w, float* y, int M, int N)
{
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (row >= M) return;
    float s = 0.0f;
    for (int j = lane; j < N; j += 32) {
        int idx = row * N + j;
        float v = x[idx];
        s += v * w[j];
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    float m = s / N;
    float q = 0.0f;
    for (int j = lane; j < N; j += 32) {
        float d = x[row * N + j] * w[j] - m;
        q += d * d;
    }
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    float r = rsqrtf(q / N + 1e-5f);
    for (int j = lane; j < N; j += 32)
        y[row * N + j] = (x[row * N + j] * w[j] - m) * r;
}
"""


def spec(**kw):
    kw.setdefault("grid", '["cdiv(M * 32, 256)"]')
    kw.setdefault("block", "[256]")
    kw.setdefault("sizes", "[{ M = 7, N = 100 }]")
    return spec_for("k", ARGS, **kw)


def test_a_hand_written_warp_per_row_kernel():
    u, _ = held(["hold_row_auto"], WARP, small_spec(256))
    assert u.notes["held"] == 8  # rows of 256 over a warp
    assert "float ptxf_held0[" in u.text and "float ptxf_held1[" in u.text  # x and w
    assert "ptxf_held0[ptxf_t] = x[(row * N + j)];" in u.text  # the body's constant inlined in the hoisted load
    assert u.text.count("if (ptxf_hold) {") == 3
    assert "x[" not in u.text.split("if (ptxf_hold)")[2].split("} else {")[0]  # the second loop's held path: no global read of x


def test_auto_refuses_when_no_bench_size_fits():
    s = spec(sizes="[{ M = 7, N = 5000 }]")  # bench N = 4096: 128 elements per lane of a warp
    assert "no bench size fits" in HoldRowPass("auto").why_not(unit_from_context(make_ctx(WARP, s)))
    assert "never run" in HoldRowPass(32).why_not(unit_from_context(make_ctx(WARP, s)))


def small_spec(n=256):
    """A spec whose bench size has rows of ``n`` (8 per lane of a warp at 256)."""
    s = spec()
    return s.model_copy(update={"bench": s.bench.model_copy(update={"sizes": [{"M": 64, "N": n}]})})


def test_elements_per_lane_follow_the_spec():
    u = HoldRowPass("auto").apply(unit_from_context(make_ctx(WARP, small_spec(256))))
    assert u.notes["held"] == 8
    # rows of 1000: 32 elements of x and of w per lane, 64 registers: more than auto takes (the fixed 32 may)
    why = HoldRowPass("auto").why_not(unit_from_context(make_ctx(WARP, small_spec(1000))))
    assert why is not None and "no bench size fits" in why
    assert HoldRowPass(32).applies(unit_from_context(make_ctx(WARP, small_spec(1000))))
    # one buffer held (w no longer read twice): 16 per lane at rows of 512 fit, 32 (rows of 1000) do not
    one = WARP.replace("s += v * w[j];", "s += v;").replace("y[row * N + j] = (x[row * N + j] * w[j] - m) * r;",
                                                           "y[row * N + j] = (x[row * N + j] - m) * r;")
    u = HoldRowPass("auto").apply(unit_from_context(make_ctx(one, small_spec(512))))
    assert u.notes["held"] == 16 and "ptxf_held1" not in u.text


@pytest.mark.parametrize("h", [8, 16, 32])
def test_fixed_sizes_compile_without_local_memory(h):
    u, _ = held([f"hold_row{h}"], WARP, small_spec(256))
    assert f"float ptxf_held0[{h}];" in u.text and f"ptxf_t < {h};" in u.text


REFUSED = [
    # x written (in place) in the last loop: the kernel writes x, nothing else is read twice at one index
    ("written by the kernel", [
        ("const float* x", "float* x"), ("const float* w", "const float* ww"),
        ("s += v * w[j];", "s += v;"), ("float d = x[row * N + j] * w[j] - m;", "float d = x[row * N + j] - m;"),
        ("y[row * N + j] = (x[row * N + j] * w[j] - m) * r;", "x[row * N + j] = (x[row * N + j] - m) * r;")]),
    # each loop reads x at its own index (and w is not read twice)
    ("no buffer read at one index", [
        ("s += v * w[j];", "s += v;"), ("float d = x[row * N + j] * w[j] - m;", "float d = x[row * N + j + 1] - m;"),
        ("y[row * N + j] = (x[row * N + j] * w[j] - m) * r;", "y[row * N + j] = x[row * N + j + 2] * r;")]),
    # different bounds in every loop
    ("no two lane-strided loops", [
        ("    for (int j = lane; j < N; j += 32) {\n        float d", "    for (int j = lane; j < N - 1; j += 32) {\n        float d"),
        ("    for (int j = lane; j < N; j += 32)\n", "    for (int j = lane; j < N - 2; j += 32)\n")]),
    # the row length written between the loops
    ("written between them", [("float m = s / N;", "float m = s / N;\n    N = N - 1;")]),
    # the first loop reads x and w only under a condition
    ("under a condition", [("        float v = x[idx];\n        s += v * w[j];", "        if (j > 3) s += x[idx] * w[j];")]),
    # a break in every loop
    ("break", [("s += v * w[j];", "s += v * w[j]; if (s > 1e9f) break;"), ("q += d * d;", "q += d * d; if (q > 1e9f) break;")]),
]


@pytest.mark.parametrize("reason,changes", REFUSED, ids=[r for r, _ in REFUSED])
def test_refusals_say_why(reason, changes):
    src = WARP
    for old, new in changes:
        assert old in src, old
        src = src.replace(old, new)
    args = ARGS.replace('name = "x", role = "in"', 'name = "x", role = "inout"') if "float* x," in src and "const float* x" not in src else ARGS
    args = args.replace('name = "w"', 'name = "ww"') if "ww" in src else args
    s = spec_for("k", args, grid='["cdiv(M * 32, 256)"]', block="[256]", sizes="[{ M = 7, N = 100 }]")
    s = s.model_copy(update={"bench": s.bench.model_copy(update={"sizes": [{"M": 64, "N": 256}]})})
    why = HoldRowPass("auto").why_not(unit_from_context(make_ctx(src, s)))
    assert why is not None and reason in why, why


def test_a_conditional_read_after_an_unconditional_one_is_held():
    src = WARP.replace("float d = x[row * N + j] * w[j] - m;", "float d = (j > 3 ? x[row * N + j] * w[j] : 0.0f) - m;")
    u, _ = held(["hold_row_auto"], src, small_spec(256))
    assert "(j > 3 ? ptxf_held0[ptxf_t] * ptxf_held1[ptxf_t] : 0.0f)" in u.text


# ---------------------------------------------------------------- composition with vector_loops


def test_vector_loops_after_hold_row_widens_the_long_rows_path():
    source, spec_ = example("standardize_rows")
    u, _ = held(["blockrow_auto", "hold_row_auto", "vector_loops"], source, spec_)
    fast, slow = u.text.split("if (ptxf_hold) {")[1].split("} else {", 1)
    assert "uint4" not in fast and "ptxf_held0[ptxf_t] = xr[i];" in fast  # the held path: one scalar load per element
    assert "const uint4 ptxf_vl_c0 = *reinterpret_cast<const uint4*>(&xr[ptxf_vl_v]);" in slow  # the original loop, widened


def test_hold_row_refuses_vector_loops_output():
    source, spec_ = example("standardize_rows")
    u = run_chain(unit_from_context(make_ctx(source, spec_)), passes("blockrow_auto", "vector_loops"))
    assert "vector_loops" in HoldRowPass("auto").why_not(u)


def test_hold_row_applies_once():
    source, spec_ = example("l2norm_rows")
    u = run_chain(unit_from_context(make_ctx(source, spec_)), passes("rowpar_lanes32", "hold_row_auto"))
    assert all("already held" in HoldRowPass(h).why_not(u) for h in ("auto", 8, 16, 32))


def test_registers_bound_the_held_size():
    # two double rows of 32 per lane in a block of 1024 threads: 128 registers held, 32 available
    src = WARP.replace("float", "double").replace("1e-5f", "1e-5").replace("0.0f", "0.0")
    args = ARGS.replace("f32", "f64")
    s = spec_for("k", args, grid='["cdiv(M * 32, 1024)"]', block="[1024]", sizes="[{ M = 7, N = 100 }]")
    s = s.model_copy(update={"bench": s.bench.model_copy(update={"sizes": [{"M": 64, "N": 1024}]})})
    assert "held registers" in HoldRowPass(32).why_not(unit_from_context(make_ctx(src, s)))


def test_a_cast_pointer_is_not_taken_for_its_buffer():
    # xi points into x through a cast: its index counts ints, not x's floats, so its read stays a global load
    src = WARP.replace("int lane = threadIdx.x & 31;", "int lane = threadIdx.x & 31;\n    const int* xi = (const int*)x;").replace(
        "float d = x[row * N + j] * w[j] - m;", "float d = __int_as_float(xi[row * N + j]) * w[j] - m;")
    u, _ = held(["hold_row_auto"], src, small_spec(256))
    assert "__int_as_float(xi[row * N + j]) * ptxf_held1[ptxf_t]" in u.text  # w held, xi read from memory
    assert "(ptxf_held0[ptxf_t] * ptxf_held1[ptxf_t] - m) * r" in u.text  # x held by the first and last loops


SOFTMAX = """
extern "C" __global__ void k(const float* x, const float* w, float* y, int M, int N)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < M; r += blockDim.x * gridDim.x) {
        float m = -3.0e38f;
        for (int j = 0; j < N; j++) m = fmaxf(m, x[(size_t)r * N + j]);
        float s = 0.0f;
        for (int j = 0; j < N; j++) s += expf(x[(size_t)r * N + j] - m);
        for (int j = 0; j < N; j++) y[(size_t)r * N + j] = expf(x[(size_t)r * N + j] - m) / s;
    }
}
"""


@pytest.mark.parametrize("grid,h", [("rowpar_lanes32", 16), ("rowpar_auto", 16), ("rowpar_block256", 2)])
def test_a_grid_stride_softmax_after_rowpar(grid, h):
    # a thread per row over a grid-stride loop of rows, x read by three loops; bench rows of 512
    s = spec_for("k", ARGS, grid='["cdiv(M, 128)"]', block="[128]", sizes="[{ M = 7, N = 100 }]")
    s = s.model_copy(update={"bench": s.bench.model_copy(update={"sizes": [{"M": 4096, "N": 512}]})})
    u, _ = held([grid, "hold_row_auto"], SOFTMAX, s)
    assert u.notes["held"] == h and u.text.count("if (ptxf_hold) {") == 3
    assert u.text.count("ptxf_held0[ptxf_t] = x[(size_t)r * N + j];") == 1
    assert "y[(size_t)r * N + j] = expf(ptxf_held0[ptxf_t] - m) / s;" in u.text


# a row's second pass under a uniform test (a helper's row entropy, 2026-12-04): each thread's own partial here, so that
# the host runs the threads one after another (no shuffles)
GUARDED = """
extern "C" __global__ void k(const float* x, const float* w, float* y, int M, int N)
{
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (row >= M) return;
    float s = 0.0f;
    for (int j = lane; j < N; j += 32) s += x[row * N + j] * w[j];
    if (s > 0.0f) {
        float r = 1.0f / s;
        for (int j = lane; j < N; j += 32) y[row * N + j] = x[row * N + j] * w[j] * r;
    } else {
        for (int j = lane; j < N; j += 32) y[row * N + j] = -x[row * N + j];
    }
}
"""


def test_a_loop_under_an_if_reads_the_row_held_by_an_earlier_loop(tmp_path):
    """The second pass inside ``if (s > 0) {...} else {...}`` reads the held row (both branches); the loop that fills
    it is a statement of the block, never under the if; on the host, thread by thread, the same bits as the original
    at rows that take the held path (N <= 8 x 32) and rows that take the original loops."""
    import numpy as np
    from _host_cuda import SERIAL_PRELUDE, run_host

    u, _ = held(["hold_row_auto"], GUARDED, small_spec(256))
    assert u.notes["held"] == 8 and u.text.count("if (ptxf_hold) {") == 3
    body = u.text.split("if (s > 0.0f)")[1]
    assert "ptxf_held0[ptxf_t]" in body and "x[" not in body.split("} else {  // more than")[0]
    first = u.text.split("if (s > 0.0f)")[0]
    assert "ptxf_held0[ptxf_t] = " in first  # filled by the first loop only
    for M, N in ((3, 200), (2, 300)):
        rng = np.random.default_rng(N)
        x, w = rng.normal(size=M * N).astype(np.float32), rng.normal(size=N).astype(np.float32)
        arr = lambda v: ", ".join(f"{a:.9g}f" for a in v)  # noqa: E731
        prog = SERIAL_PRELUDE + GUARDED.replace("void k(", "void k_old(") + u.text.replace("void k(", "void k_new(") + f"""
int main() {{
    static float x[{M * N}] = {{{arr(x)}}}, w[{N}] = {{{arr(w)}}};
    static float a[{M * N}], b[{M * N}];
    blockDim.x = 256;
    for (unsigned t = 0; t < 32u * {M}; ++t) {{
        blockIdx.x = t / 256; threadIdx.x = t % 256;
        k_old(x, w, a, {M}, {N}); k_new(x, w, b, {M}, {N});
    }}
    printf("%s\\n", std::memcmp(a, b, sizeof a) == 0 ? "same" : "DIFFERENT");
}}
"""
        assert run_host(prog, tmp_path) == "same", (M, N)
