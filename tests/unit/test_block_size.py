"""CPU tests of the block-size analysis (search/generators/block_size.py) and the "tune" generator's block variants.

Small hand-written kernels: which blocks tune proposes, with which grid, and which it refuses and why;
every proposed variant compiles with NVRTC and its grid covers at least the work of the original.
"""
from __future__ import annotations

import re

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import Candidate, LaunchConfig, evaluate, parse_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators import block_size as bs
from ptxfactory.search.generators.block_size import block_choices
from ptxfactory.search.generators.tune import TuneGenerator
from ptxfactory.harness.source import find_kernel
from _generator_support import example_ctx

ROW_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "s", role = "out", dtype = "f32", shape = ["M"] },
  { name = "m", role = "scalar", dtype = "i32", value = "M" },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
"""
ELEM_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
"""


def spec(name: str, args: str, grid: str, block: int = 256, shared_mem: int = 0, policy: str = "free"):
    sizes = "[{ M = 3, N = 1000 }]" if "M" in args else "[{ N = 1000 }]"
    bench = "[{ M = 64, N = 4096 }]" if "M" in args else "[{ N = 100000 }]"
    text = f"""
[kernel.{name}]
args = [{args}]
launch = {{ grid = {grid}, block = [{block}], shared_mem = {shared_mem}, policy = "{policy}" }}
[kernel.{name}.check]
sizes = {sizes}
[kernel.{name}.bench]
sizes = {bench}
"""
    return parse_spec(text).kernels[name]


def parent(source: str, sp, options=(), params=None, grid=None) -> Candidate:
    k = find_kernel(source, sp.name)
    launch = LaunchConfig(grid=grid or sp.launch.grid, block=sp.launch.block, shared_mem=sp.launch.shared_mem)
    return Candidate(kernel_name=sp.name, source=source, kernel_text=k.text, launch=launch, options=list(options),
                     params=params or {})


def compiles(c: Candidate) -> None:
    r = compile_candidate(c, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log


# ---------------------------------------------------------------- kernels

ROWSUM = """
extern "C" __global__ void rowsum(const float* x, float* s, int m, int n)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= m) return;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += x[(size_t)row * n + i];
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) s[row] = partial[0];
}
"""

SCALE = """
extern "C" __global__ void scale(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""


def test_shared_array_sized_by_a_constant_bounds_the_block():
    """partial[256] indexed by threadIdx.x: 128 only (the grid, one block per row, kept); 512 and 1024 would overflow it."""
    sp = spec("rowsum", ROW_ARGS, '["M"]')
    ch = block_choices(parent(ROWSUM, sp), sp)
    assert list(ch.launches) == [128] and ch.launches[128].grid == ["M"]
    assert ch.refused == {b: "__shared__ partial[256] indexed by threadIdx.x: at most 256 threads" for b in (512, 1024)}


def test_tune_proposes_only_the_blocks_the_code_allows_and_they_compile():
    sp = spec("rowsum", ROW_ARGS, '["M"]')
    p = parent(ROWSUM, sp)
    variants = TuneGenerator().propose(GenContext(spec=sp, source=ROWSUM, kernel=find_kernel(ROWSUM, "rowsum"), original=p))
    blocks = [v for v in variants if "block" in v.params]
    assert [v.launch.block for v in blocks] == [[128]]
    for v in blocks:
        compiles(v)


def test_shared_size_from_a_define_and_an_option():
    src = "#define BLOCK 256\n" + ROWSUM.replace("partial[256]", "partial[BLOCK]")
    sp = spec("rowsum", ROW_ARGS, '["M"]')
    assert list(block_choices(parent(src, sp), sp).launches) == [128]
    src = "#ifndef BLOCK\n#define BLOCK 256\n#endif\n" + ROWSUM.replace("partial[256]", "partial[BLOCK]")
    # two values of BLOCK in the text (the #define, the option): the option is what the compiler sees
    ch = block_choices(parent(src, sp, options=["-DBLOCK=1024"]), sp)
    assert list(ch.launches) == [128, 512, 1024]
    for b, launch in ch.launches.items():
        compiles(parent(src, sp, options=["-DBLOCK=1024"]).model_copy(update={"launch": launch}))


def test_shared_size_unknown_refuses_every_block():
    src = ROWSUM.replace("__shared__ float partial[256];", "extern __shared__ float partial[];")
    sp = spec("rowsum", ROW_ARGS, '["M"]', shared_mem=1024)  # 256 floats
    assert list(block_choices(parent(src, sp), sp).launches) == [128]
    sp = spec("rowsum", ROW_ARGS, '["M"]', shared_mem=4096)  # 1024 floats
    assert list(block_choices(parent(src, sp), sp).launches) == [128, 512, 1024]
    src = "template <int K> __device__ float* buf() { __shared__ float p[K]; return p; }\n" + ROWSUM.replace(
        "__shared__ float partial[256];", "float* partial = buf<256>();")
    ch = block_choices(parent(src, sp), sp)
    assert not ch.launches and set(ch.refused.values()) == {bs.UNKNOWN_SIZE.format(name="p")}


def test_per_warp_partials_and_lanes():
    """warp_sums[32] indexed by threadIdx.x / 32 allows 1024 threads; lane = threadIdx.x % 32 bounds nothing;
    tid * 2 halves what an array of 512 allows."""
    src = ROWSUM.replace("__shared__ float partial[256];", "__shared__ float partial[256];\n    __shared__ float warp_sums[32];\n"
                         "    __shared__ float pairs[512];\n    int tid = threadIdx.x, warp = tid / 32, lane = tid & 31;")
    src = src.replace("if (threadIdx.x == 0) s[row] = partial[0];",
                      "warp_sums[warp] = partial[lane]; pairs[tid * 2] = 0.0f; if (tid == 0) s[row] = warp_sums[0] + pairs[0];")
    src = src.replace("partial[256]", "partial[1024]")
    sp = spec("rowsum", ROW_ARGS, '["M"]')
    ch = block_choices(parent(src, sp), sp)
    assert list(ch.launches) == [128]
    assert ch.refused[512] == "__shared__ pairs[512] indexed by threadIdx.x: at most 256 threads"
    ch = block_choices(parent(src.replace("pairs[tid * 2]", "pairs[lane]"), sp), sp)
    assert list(ch.launches) == [128, 512, 1024]


def test_index_that_cannot_be_bounded_refuses():
    sp = spec("rowsum", ROW_ARGS, '["M"]')
    src = ROWSUM.replace("partial[threadIdx.x] = sum;", "partial[threadIdx.x * threadIdx.x % 256] = sum;")
    assert list(block_choices(parent(src, sp), sp).launches) == [128]  # % 256 bounds it whatever the block
    src = ROWSUM.replace("partial[threadIdx.x] = sum;", "partial[threadIdx.x * threadIdx.x] = sum;")
    assert set(block_choices(parent(src, sp), sp).refused.values()) == {
        bs.UNKNOWN_INDEX.format(name="partial", index="threadIdx.x * threadIdx.x")}
    src = ROWSUM.replace("partial[threadIdx.x] = sum;", "partial[(int)x[threadIdx.x]] = sum;")
    ch = block_choices(parent(src, sp), sp)
    assert not ch.launches and all(r.startswith("__shared__ partial is indexed by") for r in ch.refused.values())


def test_shared_array_passed_to_a_helper_counts_as_thread_indexed():
    src = ROWSUM.replace('extern "C"', '__device__ void put(float* p, float v) { p[threadIdx.x] = v; }\nextern "C"')
    src = src.replace("partial[threadIdx.x] = sum;", "put(partial, sum);").replace("partial[256]", "partial[512]")
    sp = spec("rowsum", ROW_ARGS, '["M"]')
    assert list(block_choices(parent(src, sp), sp).launches) == [128, 512]


def test_no_blockdim_fixes_the_block():
    src = SCALE.replace("blockIdx.x * blockDim.x", "blockIdx.x * 256")
    sp = spec("scale", ELEM_ARGS, '["cdiv(N, 256)"]')
    ch = block_choices(parent(src, sp), sp)
    assert not ch.launches and set(ch.refused.values()) == {bs.NO_BLOCKDIM}
    # blockDim read in a helper the kernel calls counts
    helper = '__device__ int stride() { return blockDim.x; }\n'
    src = helper + SCALE.replace("int i = blockIdx.x * blockDim.x + threadIdx.x;", "int i = blockIdx.x * stride() + threadIdx.x;")
    assert block_choices(parent(src, sp), sp).launches
    # ... but not in a function it does not call
    src = helper + SCALE.replace("blockIdx.x * blockDim.x", "blockIdx.x * 256")
    assert set(block_choices(parent(src, sp), sp).refused.values()) == {bs.NO_BLOCKDIM}


def test_blockidx_times_the_launched_block_fixes_it():
    src = SCALE.replace("int i = blockIdx.x * blockDim.x + threadIdx.x;",
                        "int i = (blockIdx.x << 8) + threadIdx.x; if (blockDim.x == 0) return;")
    sp = spec("scale", ELEM_ARGS, '["cdiv(N, 256)"]')
    assert set(block_choices(parent(src, sp), sp).refused.values()) == {bs.BLOCKIDX_TIMES_BLOCK.format(b0=256)}


def test_tree_reduction_from_a_constant_stride_fixes_the_block():
    src = ROWSUM.replace("int stride = blockDim.x / 2", "int stride = 128").replace("partial[256]", "partial[1024]")
    sp = spec("rowsum", ROW_ARGS, '["M"]')
    ch = block_choices(parent(src, sp), sp)
    assert not ch.launches and set(ch.refused.values()) == {bs.CONSTANT_STRIDE.format(c=128)}
    # a warp-shuffle loop from 16 touches no shared data: no constraint
    src = ROWSUM.replace("partial[threadIdx.x] = sum;", "for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);\n"
                         "    partial[threadIdx.x] = sum;")
    assert list(block_choices(parent(src, sp), sp).launches) == [128]


def test_launch_bounds_cap_the_block():
    src = SCALE.replace("__global__ void", "__global__ void __launch_bounds__(512)")
    sp = spec("scale", ELEM_ARGS, '["cdiv(N, 256)"]')
    ch = block_choices(parent(src, sp), sp)
    assert list(ch.launches) == [128, 512] and ch.refused == {1024: bs.LAUNCH_BOUNDS.format(n=512)}
    src = "#define NT 128\n" + SCALE.replace("__global__ void", "__global__ void __launch_bounds__(NT)")
    assert list(block_choices(parent(src, sp), sp).launches) == [128]
    src = SCALE.replace("__global__ void", "template <int NT> __global__ void __launch_bounds__(NT)").replace('extern "C" ', "")
    assert set(block_choices(parent(src, sp), sp).refused.values()) == {bs.LAUNCH_BOUNDS_UNKNOWN.format(arg="NT")}


@pytest.mark.parametrize("grid,b1,new", [
    ("cdiv(N, 256)", 512, "cdiv(N, 512)"),
    ("cdiv(N, 256)", 128, "cdiv(N, 128)"),
    ("(N + 255) // 256", 1024, "(N + 1023) // 1024"),
    ("N // 256 + 1", 128, "N // 128 + 1"),
    ("max(1, cdiv(N, 256))", 512, "max(1, cdiv(N, 512))"),
])
def test_grid_divided_by_the_block_is_recomputed(grid, b1, new):
    sp = spec("scale", ELEM_ARGS, f'["{grid}"]')
    ch = block_choices(parent(SCALE, sp), sp)
    assert ch.launches[b1].grid == [new]
    for size in sp.check.sizes + sp.bench.sizes:  # the same elements are covered: at least N threads
        assert int(evaluate(new, size)) * b1 >= size["N"]
    compiles(parent(SCALE, sp).model_copy(update={"launch": ch.launches[b1]}))


def test_a_larger_block_that_leaves_sms_idle_is_refused_with_the_gpus_sm_count():
    """scale at N = 100000 in blocks of 256: 391 blocks. On a GPU of 132 SMs, blocks of 512 make 196 and blocks of 1024
    make 98: only 1024 leaves SMs idle at every bench size, and is refused. Smaller blocks are always proposed; without
    an SM count nothing is refused for this."""
    sp = spec("scale", ELEM_ARGS, '["cdiv(N, 256)"]')
    ch = block_choices(parent(SCALE, sp), sp, sm_count=132)
    assert 512 in ch.launches and 128 in ch.launches and 1024 not in ch.launches
    assert ch.refused[1024] == ("at most 98 blocks at the bench sizes, fewer than the GPU's 132 SMs: a larger block "
                                "leaves SMs idle")
    assert 1024 in block_choices(parent(SCALE, sp), sp).launches
    few = block_choices(parent(SCALE, sp), sp, sm_count=1000)  # 391 blocks already fewer: every larger block refused
    assert set(few.refused) >= {512, 1024} and 128 in few.launches


def test_grid_of_several_elements_per_thread_keeps_them():
    """A vectorised kernel's grid cdiv(N, 256 * 4) (4 elements per thread): cdiv(N, 512 * 4) at 512 threads."""
    sp = spec("scale", ELEM_ARGS, '["cdiv(N, 1024)"]')
    ch = block_choices(parent(SCALE, sp), sp)
    assert ch.launches[512].grid == ["cdiv(N, 2048)"] and ch.launches[128].grid == ["cdiv(N, 512)"]


def test_grid_that_hides_the_block_refuses():
    """An index grown by blockIdx * blockDim with a grid that does not divide by the block: refused,
    unless the kernel loops over the grid (reads gridDim), which covers its work with any grid."""
    sp = spec("scale", ELEM_ARGS, "[4096]")
    ch = block_choices(parent(SCALE, sp), sp)
    assert not ch.launches and set(ch.refused.values()) == {bs.GRID_FIXED.format(grid=[4096])}
    strided = SCALE.replace("if (i < n) y[i] = 2.0f * x[i];", "for (; i < n; i += gridDim.x * blockDim.x) y[i] = 2.0f * x[i];")
    ch = block_choices(parent(strided, sp), sp)
    assert {b: l.grid for b, l in ch.launches.items()} == {128: [4096], 512: [4096], 1024: [4096]}
    sp = spec("scale", ELEM_ARGS, '["cdiv(N, 256) + 256"]')  # the block's literal outside a division
    assert set(block_choices(parent(SCALE, sp), sp).refused.values()) == {bs.GRID_BAD.format(grid=["cdiv(N, 256) + 256"])}


def test_grid_cap_of_a_grid_stride_loop_keeps_its_threads():
    strided = SCALE.replace("if (i < n) y[i] = 2.0f * x[i];", "for (; i < n; i += gridDim.x * blockDim.x) y[i] = 2.0f * x[i];")
    sp = spec("scale", ELEM_ARGS, '["min(cdiv(N, 256), 1024)"]')
    ch = block_choices(parent(strided, sp, params={"grid_cap": 1024}), sp)
    assert ch.launches[512].grid == ["min(cdiv(N, 512), 512)"] and ch.launches[128].grid == ["min(cdiv(N, 128), 2048)"]


def test_row_per_block_grid_that_divides_by_the_block_refuses():
    sp = spec("rowsum", ROW_ARGS, '["cdiv(M, 256) * 256"]')
    ch = block_choices(parent(ROWSUM, sp), sp)
    assert ch.refused[128].startswith("grid ['cdiv(M, 256) * 256'] divides by the block")


def test_no_block_change_for_a_fixed_policy_a_family_block_or_a_2d_block():
    sp = spec("scale", ELEM_ARGS, '["cdiv(N, 256)"]', policy="fixed")
    assert block_choices(parent(SCALE, sp), sp).skipped and not block_choices(parent(SCALE, sp), sp).refused
    sp = spec("scale", ELEM_ARGS, '["cdiv(N, 256)"]')
    assert block_choices(parent(SCALE, sp, params={"block": 256}), sp).skipped


def test_examples_blocks():
    """The shipped naive kernels: the row kernels (partial[256]) get 128 only; the elementwise ones every
    size with a recomputed grid. Each proposed variant compiles."""
    for name, blocks in (("rmsnorm", [128]), ("softmax", [128]), ("bias_gelu", [128, 512, 1024])):
        ctx = example_ctx(name)
        variants = [v for v in TuneGenerator().propose(ctx) if "block" in v.params]
        assert [v.launch.block[0] for v in variants] == blocks, name
        for v in variants:
            grid = ctx.original.launch.grid[0]
            m = re.fullmatch(r"cdiv\((.*), 256\)", str(grid))
            assert v.launch.grid == ([f"cdiv({m.group(1)}, {v.launch.block[0]})"] if m else ctx.original.launch.grid)
            r = compile_candidate(v, "sm_90a", fast_math_allowed=ctx.spec.check.fast_math)
            assert not isinstance(r, CompileFailed), r.log


def test_a_guard_below_the_array_size_lifts_the_bound():
    """The cross-warp step of a shuffle reduction: warp_sums[32] read by threadIdx.x under `if (threadIdx.x < 32)`
    allows every block; the same read unguarded (or under a guard above 32) allows 32 threads."""
    step = ("__shared__ float warp_sums[32];\n    int tid = threadIdx.x;\n    if ((tid & 31) == 0) warp_sums[tid >> 5] = sum;\n"
            "    __syncthreads();\n    if (tid < 32) sum = tid < (blockDim.x >> 5) ? warp_sums[tid] : 0.0f;\n"
            "    if (threadIdx.x == 0) s[row] = sum;\n}")
    src = ROWSUM[: ROWSUM.index("    partial[threadIdx.x] = sum;")].replace("    __shared__ float partial[256];\n", "") + "    " + step
    sp = spec("rowsum", ROW_ARGS, '["M"]')
    assert list(block_choices(parent(src, sp), sp).launches) == [128, 512, 1024]
    assert list(block_choices(parent(src.replace("if (tid < 32)", "if (tid < 64)"), sp), sp).launches) == []
    assert list(block_choices(parent(src.replace("if (tid < 32) ", ""), sp), sp).launches) == []
    compiles(parent(src, sp).model_copy(update={"launch": block_choices(parent(src, sp), sp).launches[1024]}))


def test_loaded_values_are_data_not_indices():
    """v = __ldg(x + row * n + i) mixes blockIdx (row) and blockDim (i) in its address, not in its value:
    v * v is no block-scaled index, so a block-per-row grid is kept."""
    src = ROWSUM.replace("sum += x[(size_t)row * n + i];", "{ float v = __ldg(x + (size_t)row * n + i); sum += v * v; }")
    sp = spec("rowsum", ROW_ARGS, '["M"]')
    assert block_choices(parent(src, sp), sp).launches[128].grid == ["M"]


# -- 2-D blocks: the shape of a block of independent threads ----------------------------------------------------
GRID2_ARGS = """
  { name = "u", role = "in", dtype = "f32", shape = ["H", "W"] },
  { name = "v", role = "out", dtype = "f32", shape = ["H", "W"] },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "W", role = "scalar", dtype = "i32", value = "W" },
"""
SMOOTH = """
extern "C" __global__ void k(const float* u, float* v, int H, int W)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= H || j >= W) return;
    float l = j > 0 ? u[i * W + j - 1] : 0.0f;
    v[i * W + j] = 0.5f * (u[i * W + j] + l);
}
"""


def spec2(grid='["cdiv(W, 16)", "cdiv(H, 16)"]', block="[16, 16]", sizes="[{ H = 3, W = 50 }]",
          bench="[{ H = 4096, W = 4096 }]", launch_bounds: str = ""):
    text = f"""
[kernel.k]
args = [{GRID2_ARGS}]
launch = {{ grid = {grid}, block = {block}, policy = "free" }}
[kernel.k.check]
sizes = {sizes}
[kernel.k.bench]
sizes = {bench}
"""
    return parse_spec(text).kernels["k"]


def test_a_2d_block_of_independent_threads_gets_rows_of_whole_warps_and_each_grid_dimension_rescaled():
    sp = spec2()
    ch = bs.block_shapes(parent(SMOOTH, sp), sp)
    assert ch.skipped is None and not ch.refused, ch.refused
    assert list(ch.launches) == [f"{x}x{y}" for x, y in bs.BLOCK_SHAPES]
    assert ch.launches["32x8"].grid == ["cdiv(W, 32)", "cdiv(H, 8)"] and ch.launches["32x8"].block == [32, 8]
    assert ch.launches["256x1"].grid == ["cdiv(W, 256)", "cdiv(H, 1)"]
    for size in ({"H": 3, "W": 50}, {"H": 4096, "W": 4096}):  # every launch covers every point
        for launch in ch.launches.values():
            g = [int(evaluate(e, size)) for e in launch.grid]
            assert g[0] * launch.block[0] >= size["W"] and g[1] * launch.block[1] >= size["H"]
    tuned = TuneGenerator().propose(GenContext(spec=sp, source=SMOOTH, kernel=find_kernel(SMOOTH, "k"), original=parent(SMOOTH, sp)))
    shaped = [c for c in tuned if c.params.get("block") == "64x4"]
    assert len(shaped) == 1 and shaped[0].description == "tune block=64x4" and shaped[0].launch.block == [64, 4]
    compiles(shaped[0])


@pytest.mark.parametrize("what, source, reason", [
    ("shared", SMOOTH.replace("float l =", "__shared__ float t[16][16]; t[threadIdx.y][threadIdx.x] = 0.0f; float l ="),
     "__shared__"),
    ("barrier", SMOOTH.replace("float l =", "__syncthreads(); float l ="), "synchronises"),
    ("shuffle", SMOOTH.replace("v[i * W + j] = 0.5f * (u[i * W + j] + l);",
                               "v[i * W + j] = __shfl_down_sync(0xffffffffu, l, 1);"), "exchanges"),
    ("literal", SMOOTH.replace("blockIdx.y * blockDim.y", "blockIdx.y * 16"), "blockIdx.y is multiplied by 16"),
    ("unscaled y", SMOOTH.replace("int i = blockIdx.y * blockDim.y + threadIdx.y;", "int i = blockIdx.y;"),
     "blockIdx.y * blockDim.y"),
    ("grid stride", SMOOTH.replace("if (i >= H || j >= W) return;", "if (i >= H || j >= W + gridDim.x) return;"), "gridDim"),
    ("per block", SMOOTH.replace("float l =", "if (threadIdx.x == 0 && threadIdx.y == 0) v[blockIdx.y] += 1.0f; float l ="),
     "threadIdx.x is read other than in blockIdx.x * blockDim.x + threadIdx.x"),
    ("block row", SMOOTH.replace("float l =", "float t = (float)blockIdx.y; float l =").replace("0.5f *", "t *"),
     "blockIdx.y is read other than"),
    ("block width", SMOOTH.replace("0.5f *", "(float)blockDim.y *"), "blockDim.y is read other than"),
    ("warp max", SMOOTH.replace("v[i * W + j] = 0.5f * (u[i * W + j] + l);",
                                "v[i * W + j] = (float)__reduce_max_sync(0xffffffffu, (unsigned)(u[i * W + j] + l));"),
     "exchanges"),
    ("lane id", SMOOTH.replace("v[i * W + j] = 0.5f * (u[i * W + j] + l);",
                               'unsigned q; asm("mov.u32 %0, %%laneid;" : "=r"(q)); v[i * W + j] = (float)q;'),
     "inline assembly"),
])
def test_a_2d_block_whose_threads_depend_on_its_shape_keeps_it(what, source, reason):
    sp = spec2()
    ch = bs.block_shapes(parent(source, sp), sp)
    assert not ch.launches and ch.refused and all(reason in why for why in ch.refused.values()), ch.refused


def test_a_2d_grid_that_does_not_show_the_block_or_leaves_the_hardwares_range_is_refused():
    sp = spec2(grid='["cdiv(W, 16)", "H"]')
    ch = bs.block_shapes(parent(SMOOTH, sp), sp)
    assert list(ch.launches) == ["32x16"] and ch.launches["32x16"].grid == ["cdiv(W, 32)", "H"]  # y kept: H stays
    assert "grid ['cdiv(W, 16)', 'H'] uses the block's size" in ch.refused["32x8"]  # y changes: H does not show it
    sp = spec2(bench="[{ H = 100000, W = 64 }]")  # a y grid of 100000 rows of 1
    ch = bs.block_shapes(parent(SMOOTH, sp), sp)
    assert "256x1" in ch.refused and "128x4" in ch.launches
    sp = spec2(block="[256]", grid='["cdiv(W, 256)", "H"]')
    assert bs.block_shapes(parent(SMOOTH, sp), sp).skipped


def test_a_3d_block_keeps_its_depth_and_its_z_grid():
    """A 3-D launch (a new user's 7-point Laplacian on 32 x 4 x 2 blocks once got no block at all): its x and y shapes
    vary, its depth and z grid stay, and no block exceeds 1024 threads."""
    src = SMOOTH.replace("int i = blockIdx.y", "int c = blockIdx.z * blockDim.z + threadIdx.z; int i = blockIdx.y")
    sp = spec2(grid='["cdiv(W, 32)", "cdiv(H, 4)", "2"]', block="[32, 4, 2]")
    ch = bs.block_shapes(parent(src, sp), sp)
    assert ch.skipped is None and ch.launches["64x8x2"].block == [64, 8, 2]
    assert ch.launches["64x8x2"].grid == ["cdiv(W, 64)", "cdiv(H, 8)", "2"]
    assert all(b.block[0] * b.block[1] * b.block[2] <= 1024 for b in ch.launches.values())
    sp = spec2(grid='["cdiv(W, 32)", "cdiv(H, 4)", "1"]', block="[32, 4, 8]")  # 32 x 16 x 8: 4096 threads
    assert "more than a block's 1024" in bs.block_shapes(parent(src, sp), sp).refused["32x16x8"]


_Z = SMOOTH.replace("int i = blockIdx.y", "int c = blockIdx.z * blockDim.z + threadIdx.z; int i = blockIdx.y")


@pytest.mark.parametrize("source", [
    # the red team (2026-12-05): a builtin read where the syntax shows no threadIdx.x (3 of 150 outputs moved)
    "#define TX threadIdx.x\n" + _Z.replace("v[i * W + j] =", "if (TX == 0) v[i * W + j] ="),
    _Z.replace("v[i * W + j] =", "uint3 t = threadIdx; if (t.x == 0) v[i * W + j] ="),
    _Z.replace("v[i * W + j] =", "const uint3* p = &threadIdx; if (p->x == 0) v[i * W + j] ="),
    _Z.replace("v[i * W + j] =", "dim3 b = blockDim; v[i * W + j] = (float)(b.x * b.y) *"),
    "__device__ bool first(uint3 t) { return t.x == 0; }\n" + _Z.replace("v[i * W + j] =", "if (first(threadIdx)) v[i * W + j] ="),
])
def test_a_builtin_read_through_a_macro_a_copy_or_a_call_keeps_the_block(source):
    sp = spec2(grid='["cdiv(W, 32)", "cdiv(H, 4)", "2"]', block="[32, 4, 2]")
    ch = bs.block_shapes(parent(source, sp), sp)
    assert not ch.launches and ch.refused, ch.launches


def test_launch_bounds_cap_a_2d_blocks_threads():
    src = SMOOTH.replace('extern "C" __global__ void k(', 'extern "C" __global__ void __launch_bounds__(256) k(')
    sp = spec2()
    ch = bs.block_shapes(parent(src, sp), sp)
    assert "32x16" in ch.refused and "64x8" in ch.refused and "32x8" in ch.launches and "128x2" in ch.launches
