"""CPU tests of the one-thread-per-row/element openings (:mod:`transform.opening`) the grid passes share.

Small kernels written the way a newcomer writes a first version: compound guards with uniform parts, a local alias of
``threadIdx.x``, other declarators beside the row index, ``unsigned``/``size_t``/``long`` indices, and 2-D grids whose
``y`` index is a block-uniform batch index (a batched matrix-vector product for rowpar, meanpool over ``[B, T, C]``
for colpar). Each applies, its candidate compiles with NVRTC for sm_90a, and the launch keeps ``grid[1:]`` and
recomputes ``grid[0]``; what must stay refused stays refused, and says why.
"""
from __future__ import annotations

import dataclasses

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import GpuFacts, evaluate, parse_spec
from ptxfactory.search.generators.transform import PASSES, TransformGenerator
from ptxfactory.search.generators.transform.colpar import ColumnParallelPass
from ptxfactory.search.generators.transform.grid_stride import FACTS_NOTE, GridStridePass
from ptxfactory.search.generators.transform.rowpar import RowParallelPass
from ptxfactory.search.generators.transform.scan import ScanPass

from test_transform import make_ctx, spec_for, unit

ROW_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""


def small_spec(name: str, args: str, grid: str, block: str, sizes: str, bench: str):
    """A spec with its own bench size (spec_for's 4096 for every symbol is too big for a [B, T, C] buffer)."""
    text = f"""
[kernel.{name}]
args = [{args}]
launch = {{ grid = {grid}, block = {block}, policy = "free" }}
[kernel.{name}.check]
rtol = 1e-2
atol = 1e-2
sizes = {sizes}
[kernel.{name}.bench]
sizes = [{bench}]
"""
    return parse_spec(text).kernels[name]


def rowpar(lanes):
    return next(p for p in PASSES if type(p) is RowParallelPass and p.lanes == lanes)


def colpar(split):
    return next(p for p in PASSES if isinstance(p, ColumnParallelPass) and p.lanes == split)


def grid_stride():
    return next(p for p in PASSES if isinstance(p, GridStridePass))


def compiled(source: str, spec, p) -> str:
    """``p``'s single-pass candidate compiles with NVRTC for sm_90a (helpers and all); returns its kernel text."""
    out = p.apply(unit(source, spec))
    cand = TransformGenerator().candidate(make_ctx(source, spec), out, [p])
    assert cand is not None and cand.params[f"pass:{p.name}"] == 1
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    return cand.kernel_text


def row_kernel(opening: str, loop: str = "for (int j = 0; j < N; j++) s += x[r * N + j];", close: str = "") -> str:
    return f"""
extern "C" __global__ void k(const float* x, float* y, int M, int N)
{{
{opening}
    float s = 0.f;
    {loop}
    y[r] = s;
{close}}}
"""


ROW_OPENINGS = {
    "compound_guard": row_kernel("    int r = blockIdx.x * blockDim.x + threadIdx.x;\n    if (r >= M || N <= 0) return;"),
    "guard_three_parts": row_kernel("    int r = blockIdx.x * blockDim.x + threadIdx.x;\n    if (N < 1 || (r >= M) || M == 0) return;"),
    "tid_alias": row_kernel("    int tid = threadIdx.x;\n    int r = blockIdx.x * blockDim.x + tid;\n    if (r >= M) return;"),
    "all_aliases": row_kernel("    const int tid = threadIdx.x;\n    int bx = blockIdx.x;\n    int bd = blockDim.x;\n"
                              "    int r = bx * bd + tid;\n    if (r >= M) return;"),
    "two_declarators": row_kernel("    int r = blockIdx.x * blockDim.x + threadIdx.x, j;\n    if (r >= M) return;",
                                  loop="for (j = 0; j < N; j++) s += x[r * N + j];"),
    "two_declarators_two_loops": row_kernel(
        "    int j, r = blockIdx.x * blockDim.x + threadIdx.x;\n    if (r >= M) return;",
        loop="for (j = 0; j < N; j++) s += x[r * N + j];\n    for (j = 0; j < N; j++) s += x[r * N + j];"),
    "unsigned_row": row_kernel("    unsigned r = blockIdx.x * blockDim.x + threadIdx.x;\n    if (r >= M) return;"),
    "unsigned_int_row": row_kernel("    unsigned int r = blockIdx.x * blockDim.x + threadIdx.x;\n    if (r >= M) return;"),
    "size_t_row": row_kernel("    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n    if (r >= M) return;"),
    "size_t_cast_whole": row_kernel("    size_t r = (size_t)(blockIdx.x * blockDim.x + threadIdx.x);\n    if (r >= M) return;"),
    "long_row": row_kernel("    long r = blockIdx.x * blockDim.x + threadIdx.x;\n    if (r >= M) return;"),
    "braced_conjunction": row_kernel("    int r = blockIdx.x * blockDim.x + threadIdx.x;\n    if (r < M && N > 0) {",
                                     close="    }\n"),
    "braced_then_return": row_kernel("    int r = blockIdx.x * blockDim.x + threadIdx.x;\n    if (r < M) {",
                                     close="    }\n    return;\n"),
}


@pytest.mark.parametrize("what", sorted(ROW_OPENINGS))
def test_rowpar_takes_the_tolerant_openings(what):
    src = ROW_OPENINGS[what]
    spec = spec_for("k", ROW_ARGS, grid='["cdiv(M, 128)"]', sizes="[{ M = 7, N = 100 }]")
    u = unit(src, spec)
    for lanes in (32, "auto"):
        p = rowpar(lanes)
        assert p.why_not(u) is None, (what, p.why_not(u))
        out = p.apply(u)
        assert len(out.launch.grid) == 1
        text = compiled(src, spec, p)
        assert "ptxf_lane" in text
    out = rowpar(32).apply(u)
    assert evaluate(out.launch.grid[0], {"M": 1000, "N": 5}) == -(-1000 // 8)  # 8 rows of 32 lanes per block
    if what.startswith("two_declarators"):
        assert ", j" in out.text or "j, " in out.text  # the other declarator kept


ELEM_ARGS = """
  { name = "a", role = "in", dtype = "f32", shape = ["N"] },
  { name = "b", role = "out", dtype = "f32", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
  { name = "s", role = "scalar", dtype = "f32", value = "2.0" },
"""


@pytest.mark.parametrize("opening, keep", [
    ("int tid = threadIdx.x;\n    int i = blockIdx.x * blockDim.x + tid;\n    if (i >= n || s == 0.0f) return;",
     "i < n && !((s == 0.0f))"),
    ("int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (n <= 0 || i >= n) return;", "i < n && !((n <= 0))"),
])
def test_grid_stride_reads_the_same_openings(opening, keep):
    src = f"""
extern "C" __global__ void k(const float* a, float* b, int n, float s)
{{
    {opening}
    b[i] = a[i] / s;
}}
"""
    spec = spec_for("k", ELEM_ARGS)
    p = grid_stride()
    assert p.applies(unit(src, spec))
    text = compiled(src, spec, p)
    assert keep in text  # the guard's uniform parts stay in the loop's condition


BMV_ARGS = """
  { name = "A", role = "in", dtype = "f32", shape = ["Bt", "M", "K"] },
  { name = "v", role = "in", dtype = "f32", shape = ["Bt", "K"] },
  { name = "y", role = "out", dtype = "f32", shape = ["Bt", "M"] },
  { name = "Bt", role = "scalar", dtype = "i32", value = "Bt" },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "K", role = "scalar", dtype = "i32", value = "K" },
"""
BMV = """
extern "C" __global__ void bmv(const float* A, const float* v, float* y, int Bt, int M, int K)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (i < M) {
        float s = 0.f;
        for (int j = 0; j < K; j++)
            s += A[((size_t)b * M + i) * K + j] * v[b * K + j];
        y[b * M + i] = s;
    }
}
"""
BMV_EARLY = """
extern "C" __global__ void bmv(const float* A, const float* v, float* y, int Bt, int M, int K)
{
    const int b = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M || b >= Bt) return;
    const float* row = A + ((size_t)b * M + i) * K;
    float s = 0.f;
    for (int j = 0; j < K; j++) {
        if (b > 0 && K > 1) s += row[j] * v[b * K + j];
        else s += row[j] * v[j];
    }
    y[b * M + i] = s;
}
"""


def bmv_spec(grid='["cdiv(M, 128)", "Bt"]', block="[128]"):
    return small_spec("bmv", BMV_ARGS, grid, block, "[{ Bt = 3, M = 7, K = 100 }]", "{ Bt = 16, M = 1024, K = 512 }")


@pytest.mark.parametrize("src", [BMV, BMV_EARLY], ids=["braced", "early_with_batch_guard"])
def test_rowpar_takes_a_batched_matvec_on_a_2d_grid(src):
    spec = bmv_spec()
    u = unit(src, spec)
    for lanes in (32, 8, 256, "auto"):
        p = rowpar(lanes)
        assert p.why_not(u) is None, p.why_not(u)
        out = p.apply(u)
        assert out.launch.grid[1:] == ["Bt"]  # the batch dimension kept
        rows_per_block = {32: 8, 8: 32, 256: 1}.get(lanes)
        if rows_per_block:
            assert evaluate(out.launch.grid[0], {"Bt": 3, "M": 1000, "K": 5}) == -(-1000 // rows_per_block)
        text = compiled(src, spec, p)
        assert "blockIdx.y" in text  # b stays the block's batch index
    assert "if (i >= M || b >= Bt) return;" in rowpar(32).apply(unit(BMV_EARLY, spec)).text  # a whole-row early return


def test_scan_keeps_to_1d_grids():
    src = """
extern "C" __global__ void k(const float* x, float* y, int Bt, int M, int K)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (i >= M) return;
    float s = 0.f;
    for (int j = 0; j < K; j++) { s += x[(b * M + i) * K + j]; y[(b * M + i) * K + j] = s; }
}
"""
    args = """
  { name = "x", role = "in", dtype = "f32", shape = ["Bt", "M", "K"] },
  { name = "y", role = "out", dtype = "f32", shape = ["Bt", "M", "K"] },
  { name = "Bt", role = "scalar", dtype = "i32", value = "Bt" },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "K", role = "scalar", dtype = "i32", value = "K" },
"""
    spec = small_spec("k", args, '["cdiv(M, 128)", "Bt"]', "[128]", "[{ Bt = 3, M = 7, K = 100 }]", "{ Bt = 4, M = 256, K = 256 }")
    u = unit(src, spec)
    assert not any(p.applies(u) for p in PASSES if isinstance(p, ScanPass))  # its launch is 1-D: it would drop Bt
    why = rowpar(32).why_not(u)
    assert "kept serial" in why and "carried s" in why  # C6: the serial loop's own reason reaches the report


MEANPOOL_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["B", "T", "C"] },
  { name = "out", role = "out", dtype = "f32", shape = ["B", "C"] },
  { name = "B", role = "scalar", dtype = "i32", value = "B" },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "C", role = "scalar", dtype = "i32", value = "C" },
"""
MEANPOOL = """
extern "C" __global__ void meanpool(const float* x, float* out, int B, int T, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (c >= C || b >= B) return;
    float acc = 0;
    for (int t = 0; t < T; t++)
        acc += x[((size_t)b * T + t) * C + c];
    out[(size_t)b * C + c] = acc / T;
}
"""


def meanpool_spec(grid='["cdiv(C, 128)", "B"]', block="[128]"):
    return small_spec("meanpool", MEANPOOL_ARGS, grid, block, "[{ B = 3, T = 100, C = 7 }]", "{ B = 8, T = 512, C = 1024 }")


def test_colpar_takes_meanpool_on_a_2d_grid():
    spec = meanpool_spec()
    u = unit(MEANPOOL, spec)
    assert "colpar's case" in rowpar(32).why_not(u)  # a column walk: rowpar refuses as before
    for split in (4, 16, "auto"):
        p = colpar(split)
        assert p.why_not(u) is None, p.why_not(u)
        out = p.apply(u)
        assert out.launch.grid[1:] == ["B"]
        assert evaluate(out.launch.grid[0], {"B": 3, "T": 5, "C": 1000}) == -(-1000 // 32)
        text = compiled(MEANPOOL, spec, p)
        assert "if (c >= C || b >= B) { ptxf_col_idle(" in text  # past the last column or batch: through the barriers
        assert "int b = blockIdx.y;" in text


def test_a_3d_grid_with_two_batch_indices():
    src = MEANPOOL.replace("int B, int T", "int B, int H, int T").replace("int b = blockIdx.y;", "int b = blockIdx.z;\n    int h = blockIdx.y;") \
        .replace("(size_t)b * T", "((size_t)b * H + h) * T").replace("out[(size_t)b * C + c]", "out[((size_t)b * H + h) * C + c]")
    args = MEANPOOL_ARGS.replace('["B", "T", "C"]', '["B", "H", "T", "C"]').replace('["B", "C"]', '["B", "H", "C"]') \
        + '  { name = "H", role = "scalar", dtype = "i32", value = "H" },\n'
    args = args.replace('{ name = "T"', '{ name = "H", role = "scalar", dtype = "i32", value = "H" },\n  { name = "T"', 1)
    args = args.rsplit('  { name = "H"', 1)[0]
    spec = small_spec("meanpool", args, '["cdiv(C, 128)", "H", "B"]', "[128]", "[{ B = 3, H = 2, T = 100, C = 7 }]",
                      "{ B = 4, H = 2, T = 256, C = 1024 }")
    p = colpar(8)
    assert p.why_not(unit(src, spec)) is None, p.why_not(unit(src, spec))
    assert p.apply(unit(src, spec)).launch.grid[1:] == ["H", "B"]
    compiled(src, spec, p)


REFUSED = {
    # a y index that depends on threadIdx.y: a 2-D block of rows, not a batch
    "y_from_threadIdx_y": (MEANPOOL.replace("int b = blockIdx.y;", "int b = blockIdx.y * blockDim.y + threadIdx.y;"),
                           '["cdiv(C, 32)", "cdiv(B, 4)"]', "[32, 4]"),
    "y_from_threadIdx_y_1d_block": (MEANPOOL.replace("int b = blockIdx.y;", "int b = blockIdx.y * blockDim.y + threadIdx.y;"),
                                    '["cdiv(C, 128)", "B"]', "[128]"),
    "batch_written": (MEANPOOL.replace("float acc = 0;", "float acc = 0;\n    b = min(b, B - 1);"), '["cdiv(C, 128)", "B"]', "[128]"),
    "guard_reads_memory": (MEANPOOL.replace("b >= B)", "b >= B || x[0] != x[0])"), '["cdiv(C, 128)", "B"]', "[128]"),
    "guard_calls": (MEANPOOL.replace("b >= B)", "b >= B || isnan((float)T))"), '["cdiv(C, 128)", "B"]', "[128]"),
    "guard_thread_part": (MEANPOOL.replace("b >= B)", "b >= B || c < 0)"), '["cdiv(C, 128)", "B"]', "[128]"),
    "grid_y_not_read": (MEANPOOL.replace("int b = blockIdx.y;", "int b = 0;"), '["cdiv(C, 128)", "B"]', "[128]"),
    "alias_used_later": (MEANPOOL.replace("int c = blockIdx.x * blockDim.x + threadIdx.x;",
                                          "int tid = threadIdx.x;\n    int c = blockIdx.x * blockDim.x + tid;")
                         .replace("acc / T", "acc / T + tid * 0.f"), '["cdiv(C, 128)", "B"]', "[128]"),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_what_stays_refused(what):
    src, grid, block = REFUSED[what]
    u = unit(src, meanpool_spec(grid, block))
    for p in PASSES:
        if isinstance(p, RowParallelPass):
            assert not p.applies(u), (what, p.name)
    assert not grid_stride().applies(u)


def test_refusals_say_why():
    src, grid, block = REFUSED["batch_written"]
    assert "batch index 'b' (blockIdx.y) is written" in colpar(8).why_not(unit(src, meanpool_spec(grid, block)))
    src, grid, block = REFUSED["guard_reads_memory"]
    assert "not uniform" in colpar(8).why_not(unit(src, meanpool_spec(grid, block)))
    src, grid, block = REFUSED["grid_y_not_read"]
    assert "grid.y" in colpar(8).why_not(unit(src, meanpool_spec(grid, block)))


def test_grid_stride_and_a_2d_grid_or_other_declarators():
    """grid_stride rewrites the index's declaration into its loop and launches a 1-D grid: it takes neither."""
    spec = spec_for("k", ELEM_ARGS)
    src = """
extern "C" __global__ void k(const float* a, float* b, int n, float s)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x, j = 0;
    if (i >= n) return;
    b[i] = a[i] * s + j;
}
"""
    assert not grid_stride().applies(unit(src, spec))
    assert not grid_stride().applies(unit(MEANPOOL, meanpool_spec()))


FACTS = GpuFacts(name="test GPU", arch="sm_90a", sm_count=132, l2_bytes=1 << 20, copy_gbps=100.0, peak_gbps=200.0)


def test_auto_shapes_count_the_batches_toward_the_wave():
    """Many batches of few rows already fill the GPU: rowpar_auto keeps to few lanes a row, colpar_auto to 32 columns a
    block and few threads a column (without the batches, each would spread a row over a whole block)."""
    size = {"Bt": 1024, "M": 64, "K": 256, "B": 1024, "T": 256, "C": 64}
    out = rowpar("auto").apply(dataclasses.replace(unit(BMV, bmv_spec()), notes={FACTS_NOTE: FACTS}))
    assert evaluate(out.launch.block[0], size) == 8  # cdiv(256, 32) elements a lane: 8 lanes
    assert out.launch.grid[1:] == ["Bt"]
    out = colpar("auto").apply(dataclasses.replace(unit(MEANPOOL, meanpool_spec()), notes={FACTS_NOTE: FACTS}))
    assert [evaluate(b, size) for b in out.launch.block] == [32, 16]  # cdiv(256, 16) rows a thread: 16 threads
    assert out.launch.grid[1:] == ["B"]
