"""CPU tests of ``blockrow_cluster*`` (one block per row, or one block in all -> a thread block cluster per row).

When it is proposed (the GPU's facts, sm_90, few rows, rows as long as the cluster's lanes, returns every lane takes),
what the rewrite writes (the cluster attribute, the lane, the combines and barriers made cluster-wide, the launch),
every output compiled with NVRTC for a cluster the harness reads back from the PTX, ``vector_loops`` after it, and a
g++ emulation: the original run a block at a time (its threads as host threads, ``__syncthreads`` a barrier), the
rewrite a cluster at a time (its blocks' threads as host threads, the combines modelled as in test_rowpar_cluster).
"""
from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate, compile_ptx
from ptxfactory.harness.static_checks import cluster_dims, kernel_ptx
from ptxfactory.protocol import evaluate
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, refusals
from ptxfactory.search.generators.transform import blockrow_cluster as bc
from ptxfactory.search.generators.transform import rowpar_cluster as rc
from ptxfactory.search.generators.transform.blockrow import BlockRowPass
from ptxfactory.search.generators.transform.blockrow_cluster import BlockClusterPass
from ptxfactory.search.generators.transform.shuffle_reduce import ShuffleReducePass
from ptxfactory.search.generators.transform.vector_loops import VectorLoopsPass

from test_blockrow import ARGS as ROW_ARGS, SOFTMAX
from test_rowpar_cluster import H200, HOST, with_facts
from test_transform import make_ctx, spec_for, unit

SUM_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N"] },
  { name = "out", role = "out", dtype = "f32", shape = [1] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
"""
# the classic first whole-array reduction: one block, a strided loop, a shared tree, thread 0 stores
ONE_BLOCK_SUM = """
#define THREADS 256
extern "C" __global__ void k(const float* x, float* out, int n)
{
    __shared__ float sdata[THREADS];
    int tid = threadIdx.x;
    float acc = 0.0f;
    for (int i = tid; i < n; i += blockDim.x) acc += x[i];
    sdata[tid] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[0] = sdata[0] / n;
}
"""
# a max by the same idiom, the strided loop reading threadIdx.x itself
ONE_BLOCK_MAX = ONE_BLOCK_SUM.replace("acc += x[i]", "acc = fmaxf(acc, x[i])").replace("float acc = 0.0f", "float acc = -3.0e38f") \
    .replace("sdata[tid] += sdata[tid + s]", "sdata[tid] = fmaxf(sdata[tid], sdata[tid + s])").replace(" / n;", ";") \
    .replace("for (int i = tid;", "for (int i = threadIdx.x;")

# the block's size spelled as a #define (the loops' step, the tree's start) and through a copy of blockDim.x
SPELLED_SUM = ONE_BLOCK_SUM.replace("i += blockDim.x", "i += THREADS").replace("int s = blockDim.x / 2", "int s = THREADS / 2")
ALIAS_SUM = ONE_BLOCK_SUM.replace("int tid = threadIdx.x;", "unsigned tid = threadIdx.x, nt = blockDim.x;") \
    .replace("for (int i = tid; i < n; i += blockDim.x)", "for (unsigned i = tid; i < n; i += nt)").replace("int s = blockDim.x / 2", "unsigned s = nt / 2")

# a LayerNorm's sum and sum of squares reduced by one tree loop of two arrays
FUSED_TREE = """
extern "C" __global__ void k(const float* x, float* y, int M, int N)
{
    __shared__ float s_sum[128];
    __shared__ float s_sq[128];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    float a = 0.0f, b = 0.0f;
    for (int i = tid; i < N; i += blockDim.x) { float v = x[row * N + i]; a += v; b += v * v; }
    s_sum[tid] = a;
    s_sq[tid] = b;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) { s_sum[tid] += s_sum[tid + s]; s_sq[tid] += s_sq[tid + s]; }
        __syncthreads();
    }
    float mean = s_sum[0] / N;
    float var = s_sq[0] / N - mean * mean;
    float inv = 1.0f / sqrtf(var + 1e-5f);
    for (int i = tid; i < N; i += blockDim.x) y[row * N + i] = (x[row * N + i] - mean) * inv;
}
"""
# two stores before one barrier, then a tree loop each (a max and a sum)
TWO_TREES = """
extern "C" __global__ void k(const float* x, float* y, int M, int N)
{
    __shared__ float s_max[128];
    __shared__ float s_sum[128];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    float m = -3.0e38f, a = 0.0f;
    for (int i = tid; i < N; i += blockDim.x) { m = fmaxf(m, x[row * N + i]); a += x[row * N + i]; }
    s_max[tid] = m;
    s_sum[tid] = a;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) s_max[tid] = fmaxf(s_max[tid], s_max[tid + s]);
        __syncthreads();
    }
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) s_sum[tid] += s_sum[tid + s];
        __syncthreads();
    }
    float top = s_max[0], mean = s_sum[0] / N;
    for (int i = tid; i < N; i += blockDim.x) y[row * N + i] = x[row * N + i] - top + mean;
}
"""

KERNELS = {  # name -> (source, args, grid, block)
    "sum": (ONE_BLOCK_SUM, SUM_ARGS, "[1]", "[256]"),
    "max": (ONE_BLOCK_MAX, SUM_ARGS, "[1]", "[256]"),
    "softmax": (SOFTMAX, ROW_ARGS, '["M"]', "[128]"),
    "spelled": (SPELLED_SUM, SUM_ARGS, "[1]", "[256]"),
    "alias": (ALIAS_SUM, SUM_ARGS, "[1]", "[256]"),
    "fused_tree": (FUSED_TREE, ROW_ARGS, '["M"]', "[128]"),
    "two_trees": (TWO_TREES, ROW_ARGS, '["M"]', "[128]"),
}


def few_rows_spec(name: str, rows: int = 4, n: int = 1 << 22):
    src, args, grid, block = KERNELS[name]
    sizes = "[{ M = 3, N = 100 }]" if "M" in grid else "[{ N = 100 }]"
    s = spec_for("k", args, grid=grid, block=block, sizes=sizes)
    bench = {"M": rows, "N": n} if "M" in grid else {"N": n}
    return s.model_copy(update={"bench": s.bench.model_copy(update={"sizes": [bench]})})


def facts_unit(name: str, **kw):
    return with_facts(unit(KERNELS[name][0], few_rows_spec(name, **kw)))


# -- when it is proposed ------------------------------------------------------------------------------------------


def test_a_one_block_kernel_is_one_row_for_the_cluster_but_not_for_blockrow():
    u = facts_unit("sum")
    assert "no row = blockIdx.x declaration" in BlockRowPass("auto").why_not(u)
    # one row on 132 SMs x 2 blocks of 1024: every cluster size leaves the wave unfilled, the largest first
    names = [p.name for p in PASSES if isinstance(p, BlockClusterPass) and p.why_not(u) is None]
    assert names == ["blockrow_cluster16", "blockrow_cluster8", "blockrow_cluster4", "blockrow_cluster2"]
    two = with_facts(unit(ONE_BLOCK_SUM, spec_for("k", SUM_ARGS, grid="[2]", block="[256]", sizes="[{ N = 100 }]")))
    assert "no row = blockIdx.x declaration" in BlockClusterPass(4).why_not(two)  # two blocks doing the same row


def test_proposed_only_with_the_gpus_facts_on_sm90_and_few_rows():
    u = unit(SOFTMAX, few_rows_spec("softmax"))
    assert "facts" in BlockClusterPass(8).why_not(u)
    assert "sm_90 or later" in BlockClusterPass(8).why_not(with_facts(u, H200.model_copy(update={"arch": "sm_80"})))
    assert BlockClusterPass(8).why_not(with_facts(u)) is None
    many = facts_unit("softmax", rows=4096, n=4096)
    assert "a block a row already fills a wave of 264 blocks" in BlockClusterPass(2).why_not(many)
    assert "8 blocks a row already fill a wave" in BlockClusterPass(16).why_not(facts_unit("softmax", rows=64))


def test_rows_shorter_than_the_cluster_an_exact_sum_and_a_cluster_attribute_are_refused():
    short = facts_unit("sum", n=6000)
    assert "fewer than the 8192 lanes of a cluster of 8" in BlockClusterPass(8).why_not(short)
    assert BlockClusterPass(4).why_not(short) is None
    exact = with_facts(unit(ONE_BLOCK_SUM, few_rows_spec("sum").model_copy(update={"check": few_rows_spec("sum").check.model_copy(update={"rtol": 0, "atol": 0})})))
    assert "exact" in BlockClusterPass(4).why_not(exact)
    asked = ONE_BLOCK_SUM.replace("void k(", "void __attribute__((cluster_dims(2, 1, 1))) k(")
    assert "already asks for a thread block cluster" in BlockClusterPass(4).why_not(with_facts(unit(asked, few_rows_spec("sum"))))


@pytest.mark.parametrize("guard,refused", [
    ("if (row >= M) return;", False),               # every lane of a row takes it
    ("if (tid >= N) return;", True),                # lanes past the row's end leave: the cluster barrier would hang
    ("if (x[row * N] > 0.0f) return;", True),       # a load: not read as uniform
    ("if (threadIdx.x > 1000) return;", True),
])
def test_returns_that_not_every_lane_takes_are_refused(guard, refused):
    src = SOFTMAX.replace("int tid = threadIdx.x;", "int tid = threadIdx.x;\n    " + guard)
    why = BlockClusterPass(4).why_not(with_facts(unit(src, few_rows_spec("softmax"))))
    assert (why is not None) == refused, why
    assert why is None or "return at line" in why or "the thread's index used as a value" in why


def test_the_blocks_size_spelled_as_a_define_or_a_copy_is_the_row_lanes():
    """``i += THREADS`` (the #define expanded) becomes the cluster's lanes, as ``blockDim.x`` does; a copy
    ``nt = blockDim.x`` is read as the block's size; a lane loop strided by another number is refused."""
    t = BlockClusterPass(8).apply(facts_unit("spelled")).text
    assert "i += 8192u" in t and "+= 256" not in t and "sdata" not in t
    assert ShuffleReducePass().why_not(facts_unit("spelled")) is None  # the tree from 256 / 2 is a tree
    t = BlockClusterPass(8).apply(facts_unit("alias")).text
    assert "nt = 8192u" in t and "i += nt" in t and "sdata" not in t
    half = with_facts(unit(ONE_BLOCK_SUM.replace("i += blockDim.x", "i += 128"), few_rows_spec("sum")))
    assert "starts at the thread's index but is not i < n; i += blockDim.x (or the block's 256)" in BlockClusterPass(8).why_not(half)


def test_blockrow_rewrites_a_loop_strided_by_the_blocks_size_in_numbers():
    """blockrow gives a row 32 lanes: a loop written ``i += 256`` for its block of 256 would skip 7/8 of the row."""
    out = BlockRowPass(32).apply(unit(SPELLED_SUM.replace("int tid", "int row = blockIdx.x;\n    int tid").replace("x[i]", "x[row * n + i]"),
                                      spec_for("k", SUM_ARGS, grid='["N"]', block="[256]", sizes="[{ N = 100 }]")))
    assert "i += blockDim.x" in out.text and "+= 256" not in out.text


def test_blockrow_gives_few_rows_no_fewer_lanes_than_their_block():
    """4 rows of a block of 128 on 132 SMs: 32 lanes a row would idle more of the GPU; auto (from the row's length)
    and the cluster stay; without the GPU's facts nothing is known."""
    few = facts_unit("softmax")
    assert "4 rows at most at the bench sizes, fewer than the GPU's 132 SMs" in BlockRowPass(32).why_not(few)
    assert BlockRowPass("auto").why_not(few) is None and BlockClusterPass(4).why_not(few) is None
    assert BlockRowPass(32).why_not(unit(SOFTMAX, few_rows_spec("softmax"))) is None
    assert BlockRowPass(32).why_not(facts_unit("softmax", rows=4096, n=4096)) is None


RT_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "out", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
RT_TREE = """
    sh[tid] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sh[tid] += sh[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[row] = sh[0];
}
"""
RT_HEAD = """
extern "C" __global__ void k(const float* x, float* out, int M, int N)
{
    __shared__ float sh[256];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    float acc = 0.0f;
"""
BLOCK_REDUCE = """
__device__ float blockReduceSum(float v)
{
    __shared__ float sh[256];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}
"""


LEAKS = "updates per lane, is used other than as the value a reduction stores"  # (_check_partials: found first)
NOT_PARTIAL = "which no loop strided by the lanes accumulates"


def rt_spec(args: str = RT_ARGS):
    s = spec_for("k", args, grid='["M"]', block="[256]", sizes="[{ M = 3, N = 1000 }]")
    return s.model_copy(update={"bench": s.bench.model_copy(update={"sizes": [{"M": 4, "N": 1 << 22}]})})


@pytest.mark.parametrize("middle, reason", [  # the red team's of 2026-12-06: each applied and computed something else
    ("float first = x[row * N + tid]; for (int i = tid + blockDim.x; i < N; i += blockDim.x) acc += x[row * N + i]; acc += first;",
     "the thread's index used as a value"),
    ("for (int i = tid; i < N; i += blockDim.x) acc += x[row * N + i]; acc *= 1.0f + (float)threadIdx.x / (float)blockDim.x;",
     "the thread's index used as a value"),
    ("int i = tid; while (i < N) { acc += x[row * N + i]; i += 256; }", "the thread's index used as a value"),
    ("int i; for (i = tid; i < N; i += 256) acc += x[row * N + i];", "the thread's index used as a value"),
    ("for (int i = tid; i < N; i += blockDim.x) acc += x[row * N + i]; if ((int)threadIdx.x - 300 < 0) acc += 1.0f;",
     "the thread's index used as a value"),
    ("for (int i = tid; i < N; i += blockDim.x) { acc += x[row * N + i]; __syncthreads(); }",
     "a barrier inside a loop strided by the lanes"),
    ("for (int i = tid; i < N; i += blockDim.x) acc += x[row * N + i]; int pos = __syncthreads_count(acc > 0.0f); acc += pos;",
     "warp collectives"),
    ("for (int i = tid; i < N; i += blockDim.x) acc += x[row * N + i]; acc = blockReduceSum(acc);",
     "blockReduceSum() reads the thread's index or waits"),
    ("int chunk = (N + blockDim.x - 1) / blockDim.x; for (int i = tid * chunk; i < N && i < (tid + 1) * chunk; i++) acc += x[row * N + i];",
     "the block's size used as a value"),
])
def test_uses_of_the_lanes_a_new_lane_count_would_change_are_refused(middle, reason):
    src = ("#define THREADS 256\n" + BLOCK_REDUCE if "blockReduceSum" in middle else "") + RT_HEAD + "    " + middle + RT_TREE
    s = rt_spec()
    u = with_facts(unit(src, s))
    for p in (BlockClusterPass(8), BlockRowPass(32), BlockRowPass("auto")):
        why = p.why_not(u)
        assert why is not None and (reason in why or LEAKS in why or NOT_PARTIAL in why), (p.name, why)


@pytest.mark.parametrize("change, reason", [  # the second red team's of 2026-12-06
    (("int tid = threadIdx.x;", "int tid = threadIdx.x;"), None),  # (the unchanged kernel applies)
    (("sh[tid] = acc;", "sh[tid] = acc + (float)tid;"), LEAKS),
    (("sh[tid] = acc;", "sh[tid] = acc / blockDim.x;"), LEAKS),
    (("sh[tid] = acc;", "sh[tid] = 1.0f;"), "which no loop strided by the lanes accumulates"),
    (("int tid = threadIdx.x;", "unsigned char tid = threadIdx.x;"), "more lanes than it holds"),
    (("i += blockDim.x", "i += (unsigned char)blockDim.x"), "a narrow type wraps"),
    (("for (int i = tid;", "for (unsigned short i = tid;"), "a loop index of type 'unsigned short'"),
    (("if (tid == 0) out[row] = sh[0];", "if (tid == 0) out[row] = sh[0]; else out[row] += 0.0f;"), "an else for the threads"),
    (("float acc = 0.0f;", "float acc = 1.0f;"), "does not start at 0"),
    (("if (tid == 0) out[row] = sh[0];", "if (tid == 0) out[row] = sh[0] - acc;"), LEAKS),
    (("acc += x[row * N + i];", "{ acc += x[row * N + i]; if (x[row * N + i] > 3.9f) break; }"), "stops early"),
    (("acc += x[row * N + i];", "for (int j = tid; j < N; j += blockDim.x) acc += x[row * N + i] * x[j];"), "nested in each other"),
    (("if (tid == 0) out[row] = sh[0];", "float& r = sh[0];\n    if (tid == 0) out[row] = r;"), "read other than at [0]"),
])
def test_the_second_red_teams_rewrites_are_refused(change, reason):
    src = (RT_HEAD + "    for (int i = tid; i < N; i += blockDim.x) acc += x[row * N + i];\n" + RT_TREE).replace(*change)
    u = with_facts(unit(src, rt_spec()))
    for p in (BlockClusterPass(8), BlockRowPass("auto")):
        why = p.why_not(u)
        assert (why is None) if reason is None else (why is not None and reason in why), (p.name, why)


def test_a_block_of_192_whose_tree_drops_elements_is_no_reduction():
    s = rt_spec().model_copy(update={"launch": rt_spec().launch.model_copy(update={"block": [192]})})
    src = (RT_HEAD + "    for (int i = tid; i < N; i += blockDim.x) acc += x[row * N + i];\n" + RT_TREE).replace("sh[256]", "sh[192]")
    assert "used outside a reduction idiom" in BlockRowPass("auto").why_not(with_facts(unit(src, s)))
    assert ShuffleReducePass().why_not(with_facts(unit(src, s))) is not None


def test_a_later_groups_store_reading_an_earlier_result_reads_the_combined_value():
    """A max over lanes of the first tree's ``sh[0]`` (the same on every lane: a max of it is it): the copy of the
    store's value reads the first combine (it was copied as written: an undefined ``sh``, or overlapping edits)."""
    src = RT_HEAD.replace("__shared__ float sh[256];", "__shared__ float sh[256];\n    __shared__ float sv[256];") + \
        "    for (int i = tid; i < N; i += blockDim.x) acc += x[row * N + i];\n" + \
        RT_TREE.replace("    if (tid == 0) out[row] = sh[0];\n}", "") + \
        "    sv[tid] = sh[0] * 2.0f;\n    __syncthreads();\n    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n" + \
        "        if (tid < s) sv[tid] = fmaxf(sv[tid], sv[tid + s]);\n        __syncthreads();\n    }\n" + \
        "    if (tid == 0) out[row] = sv[0];\n}\n"
    u = with_facts(unit(src, rt_spec()))
    for p in (BlockClusterPass(4), BlockRowPass("auto")):
        assert p.why_not(u) is None, p.why_not(u)
        t = p.apply(u).text
        assert "sh[" not in t and "sv[" not in t and "((float)(ptxf_r0 * 2.0f)" in t, t


def test_blockrow_stops_the_rows_past_the_end_and_both_drop_the_old_launch_bounds():
    """A block of several rows (32 lanes: 8 rows) launched over cdiv(M, 8) blocks: the last block's rows past M
    return (the softmax has no row guard of its own); a block a row (128 lanes) needs none. __launch_bounds__(128)
    would refuse the new blocks: gone."""
    src = SOFTMAX.replace("void k(", "void __launch_bounds__(128) k(")
    t = BlockRowPass(32).apply(unit(src, few_rows_spec("softmax"))).text
    assert "if ((long long)(row) >= (long long)(M)) return;" in t and "__launch_bounds__" not in t
    assert "return;" not in BlockRowPass(128).apply(unit(SOFTMAX, few_rows_spec("softmax"))).text
    assert "__launch_bounds__" not in BlockClusterPass(4).apply(with_facts(unit(src, few_rows_spec("softmax")))).text


def test_a_guard_around_the_whole_reduction_and_a_per_thread_store_are_refused():
    guarded = RT_HEAD + "    for (int i = tid; i < N; i += blockDim.x) acc += x[row * N + i];\n    if (tid < 256) {" + RT_TREE + "}"
    s = rt_spec()
    assert "(tid < 256)" in BlockClusterPass(8).why_not(with_facts(unit(guarded, s)))
    store = RT_HEAD + "    for (int i = tid; i < N; i += blockDim.x) acc += x[row * N + i];\n    x2[row * 256 + tid] = acc;" + RT_TREE
    store = store.replace("float* out,", "float* out, float* x2,")
    args = RT_ARGS.replace('{ name = "M"', '{ name = "x2", role = "out", dtype = "f32", shape = ["M", 256] },\n  { name = "M"')
    s2 = rt_spec(args)
    why = BlockClusterPass(8).why_not(with_facts(unit(store, s2)))
    assert "row * 256 + tid" in why or LEAKS in why


def test_a_strided_loop_from_the_rows_base_plus_the_lane_is_a_lane_loop():
    """``for (int i = row * N + tid; i < (row + 1) * N; i += 256)``: its step, the block's size in numbers, becomes
    the cluster's lanes (kept, it would count elements several times)."""
    src = RT_HEAD + "    for (int i = row * N + tid; i < (row + 1) * N; i += 256) acc += x[i];\n" + RT_TREE
    s = rt_spec()
    t = BlockClusterPass(8).apply(with_facts(unit(src, s))).text
    assert "for (int i = row * N + tid; i < (row + 1) * N; i += 8192u)" in t


@pytest.mark.parametrize("name", ["fused_tree", "two_trees"])
def test_a_tree_of_several_arrays_is_a_reduction_each(name):
    """A tree loop halving two arrays (or two stores before one barrier, then a tree each): a combine per array, the
    barrier and the trees gone; blockrow too."""
    t = BlockClusterPass(4).apply(facts_unit(name)).text
    assert t.count("ptxf_cluster_reduce<4>(") == 2 and "__syncthreads" not in t and "s_sum" not in t
    assert "ptxf_cluster_sync" not in t  # (the combines wait for the cluster themselves)
    out = BlockRowPass(32).apply(unit(KERNELS[name][0], few_rows_spec(name)))
    assert out.text.count("ptxf_row_reduce(") == 2 and "__syncthreads" not in out.text and "s_sum" not in out.text


def test_the_refusal_list_names_the_reason_once():
    reasons = refusals(facts_unit("softmax", rows=4096, n=4096))
    (entry,) = [(names, r) for names, r in reasons if "blockrow_cluster" in names]
    assert entry[0] == "blockrow_cluster16, blockrow_cluster8, blockrow_cluster4, blockrow_cluster2"


# -- what it writes --------------------------------------------------------------------------------------------------


def test_the_one_block_sum_spans_the_cluster():
    out = BlockClusterPass(8).apply(facts_unit("sum"))
    t = out.text
    assert "__attribute__((cluster_dims(8, 1, 1))) k(" in t
    assert "const unsigned ptxf_lane = (blockIdx.x % 8u) * 1024u + threadIdx.x;" in t
    assert "int tid = ptxf_lane;" in t and "i += 8192u" in t
    assert "const float ptxf_r0 = ptxf_cluster_reduce<8>((float)(acc)," in t and "out[0] = ptxf_r0 / n;" in t
    assert "__shared__" not in t and "__syncthreads" not in t and "sdata" not in t
    assert out.launch.block == ["1024"] and evaluate(out.launch.grid[0], {"N": 1 << 22}) == 8
    assert {"ptxf_block_reduce", "ptxf_cluster_reduce", "ptxf_cluster_sync", "ptxf_peer"} <= {n for n, _ in out.helpers}


def test_a_row_per_block_softmax_spans_the_cluster():
    out = BlockClusterPass(4).apply(facts_unit("softmax"))
    t = out.text
    assert "int row = (int)(blockIdx.x / 4u);" in t
    assert t.count("ptxf_cluster_reduce<4>(") == 2 and "float mx = ptxf_r0;" in t and "float total = ptxf_r1;" in t
    assert t.count("ptxf_cluster_sync();") == 1  # the barrier after reading red[0]
    assert t.count("i += 4096u") == 3 and "threadIdx.x" not in t.replace("* 1024u + threadIdx.x;", "")
    assert evaluate(out.launch.grid[0], {"M": 4, "N": 1}) == 16


@pytest.mark.parametrize("name", KERNELS)
def test_every_kernel_compiles_for_the_cluster_the_harness_reads(name):
    src, *_ = KERNELS[name]
    spec = few_rows_spec(name)
    p = BlockClusterPass(16)
    out = p.apply(with_facts(unit(src, spec)))
    cand = TransformGenerator().candidate(make_ctx(src, spec), out, [p])
    assert cand is not None and cand.params["pass:blockrow_cluster16"] == 1 and cand.params["lanes"] == 16384
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.resources.spill_stores == 0 and r.resources.registers <= 64
    ptx = compile_ptx(cand, "sm_90a")
    assert cluster_dims(kernel_ptx(ptx, cand.kernel_name)) == (16, 1, 1)
    assert "mapa" in ptx and "barrier.cluster.arrive" in ptx


def test_vector_loops_widen_the_lanes_through_a_copy_of_the_lane():
    """``int tid = ptxf_lane;`` is the cluster's lane to vector_loops: 16-byte loads, the step four lanes' worth."""
    spec = few_rows_spec("sum")
    p, v = BlockClusterPass(8), VectorLoopsPass()
    out = p.apply(with_facts(unit(ONE_BLOCK_SUM, spec)))
    assert v.why_not(out) is None
    t = v.apply(out).text
    assert "*reinterpret_cast<const uint4*>(&x[" in t and "+= 32768" in t
    cand = TransformGenerator().candidate(make_ctx(ONE_BLOCK_SUM, spec), v.apply(out), [p, v])
    assert not isinstance(compile_candidate(cand, "sm_90a"), CompileFailed)


# -- a g++ emulation of the rewritten kernels against the originals ------------------------------------------------

ORIGINAL_HOST = r"""
static std::unique_ptr<std::barrier<>> g_block;
inline void __syncthreads() { g_block->arrive_and_wait(); }
"""


def _program(name: str, out, cl: int, block: int) -> str:
    """Reads the sizes and a seed, fills the inputs, runs the original a block at a time (each with ``block`` host
    threads) and the rewrite a cluster at a time, and prints the largest relative difference of each output."""
    src, args, grid, _ = KERNELS[name]
    names = re.findall(r'name = "(\w+)", role = "(\w+)", dtype = "(\w+)", shape = \[([^\]]*)\]', args)
    buffers = [(n, role, shape.replace('"', "").replace(",", " *")) for n, role, _, shape in names]
    scalars = re.findall(r'role = "scalar", dtype = "i32", value = "(\w+)"', args)  # (the size symbols, in order)
    orig = src.replace('extern "C"', "").replace("void k(", "void k_orig(").replace("__shared__", "static")
    new = re.sub(r'extern "C"\s*', "", out.text).replace(" k(", " k_new(")
    new = re.sub(r"__attribute__\(\(cluster_dims\([^)]*\)\)\)\s*", "", new)
    rows = "M" if "M" in grid else "1"
    lines = [f"#define CL {cl}", HOST, ORIGINAL_HOST, orig, new, "int main(int argc, char** argv) {"]
    lines += [f"  int {s} = atoi(argv[{k + 1}]);" for k, s in enumerate(scalars)]
    lines.append(f"  srand(atoi(argv[{len(scalars) + 1}]));")
    for n, role, shape in buffers:
        lines.append(f"  std::vector<float> {n}_a({shape}), {n}_b({shape});")
        if role == "in":
            lines.append(f"  for (auto& v : {n}_a) v = (float)((rand() % 2001) - 1000) / 250.0f; {n}_b = {n}_a;")
        else:
            lines.append(f"  for (size_t i = 0; i < {n}_a.size(); ++i) {n}_a[i] = {n}_b[i] = -7.0f;")
    a_args = ", ".join([f"{n}_a.data()" for n, *_ in buffers] + scalars)
    b_args = ", ".join([f"{n}_b.data()" for n, *_ in buffers] + scalars)
    lines += [
        f"  blockDim = {{{block}, 1, 1}}; gridDim = {{(unsigned)({rows}), 1, 1}};",
        f"  for (unsigned b = 0; b < (unsigned)({rows}); ++b) {{",
        f"    g_block = std::make_unique<std::barrier<>>({block});",
        "    std::vector<std::thread> ts;",
        f"    for (unsigned t = 0; t < {block}; ++t) ts.emplace_back([&, t] {{ blockIdx.x = b; threadIdx.x = t; k_orig({a_args}); }});",
        "    for (auto& th : ts) th.join();",
        "  }",
        f"  blockDim = {{{rc.CLUSTER_BLOCK}, 1, 1}}; gridDim = {{(unsigned)(({rows}) * CL), 1, 1}}; g_threads = CL * {rc.CLUSTER_BLOCK};",
        f"  for (unsigned c = 0; c < (unsigned)({rows}); ++c) {{",
        "    g_cluster = std::make_unique<std::barrier<>>(g_threads);",
        "    std::vector<std::thread> ts;",
        "    for (unsigned i = 0; i < g_threads; ++i) ts.emplace_back([&, i] {",
        f"      blockIdx.x = c * CL + i / {rc.CLUSTER_BLOCK}; threadIdx.x = i % {rc.CLUSTER_BLOCK}; k_new({b_args}); }});",
        "    for (auto& th : ts) th.join();",
        "  }",
    ]
    for n, role, _ in buffers:
        if role != "in":
            lines.append(f"  {{ double d = 0; for (size_t i = 0; i < {n}_a.size(); ++i) d = fmax(d, fabs((double){n}_a[i] - (double){n}_b[i]) "
                         f"/ (1.0 + fabs((double){n}_a[i]))); printf(\"{n} %.3g\\n\", d); }}")
    lines.append("  return 0; }")
    return "\n".join(lines)


def _emulate(name: str, edit, tmp_path, monkeypatch) -> list[tuple[tuple, dict[str, float]]]:
    """Builds the emulation of ``name``'s rewrite by a cluster of 4 blocks of 32 threads (the block size patched down:
    a cluster is 128 host threads; ``edit`` changes the rewrite's text) and runs it on rows shorter and longer than a
    cluster's lanes; ``(sizes, {output: largest relative difference})`` per run."""
    monkeypatch.setattr(rc, "CLUSTER_BLOCK", 32)
    monkeypatch.setattr(bc, "CLUSTER_BLOCK", 32)
    src, args, grid, block = KERNELS[name]
    out = BlockClusterPass(4).apply(with_facts(unit(src, few_rows_spec(name, n=1 << 12))))
    assert "* 32u + threadIdx.x" in out.text and ("+= 128u" in out.text or "nt = 128u" in out.text)
    if edit is not None:
        out = dataclasses.replace(out, text=edit(out.text))
    cpp, exe = tmp_path / "emu.cpp", tmp_path / "emu"
    cpp.write_text(_program(name, out, 4, int(block.strip("[]"))))
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", "-ffp-contract=off", "-pthread", str(cpp), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    runs = []
    sizes = ((1000,), (127,), (1,), (129,), (5000,)) if "M" not in grid else ((3, 1000), (2, 127), (5, 1), (1, 129))
    for seed, size in enumerate(sizes):
        run = subprocess.run([str(exe), *map(str, size), str(seed)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        runs.append((size, {b: float(d) for b, d in (line.split() for line in run.stdout.strip().split("\n"))}))
    return runs


@pytest.mark.parametrize("name", KERNELS)
def test_host_emulation_agrees_with_the_original(name, tmp_path, monkeypatch):
    """The rewrite gives the original's outputs: exactly for a max, within float re-association for sums, every output
    written where the original writes it (and nowhere else: the outputs start as -7 on both sides)."""
    for size, diffs in _emulate(name, None, tmp_path, monkeypatch):
        assert diffs and all(d <= (0 if name == "max" else 1e-4) for d in diffs.values()), (name, size, diffs)


def test_the_emulation_fails_a_rewrite_whose_blocks_overlap(tmp_path, monkeypatch):
    """Every block starting its lanes at its own thread index (the cluster rank dropped) sums the first part four
    times: the emulation reports it."""
    runs = _emulate("sum", lambda t: t.replace("(blockIdx.x % 4u) * 32u + threadIdx.x", "threadIdx.x"), tmp_path, monkeypatch)
    assert any(d > 1e-2 for size, diffs in runs if size[0] > 32 for d in diffs.values())


def test_shuffle_reduce_takes_a_tree_of_two_arrays_as_two_shuffle_reductions():
    u = unit(FUSED_TREE, few_rows_spec("fused_tree"))
    p = ShuffleReducePass()
    assert p.why_not(u) is None
    t = p.apply(u).text
    assert t.count("warp-shuffle reduction (transform shuffle_reduce)") == 2 and "s_sum[tid + s]" not in t
    assert "s_sum[0] = ptxf_v;" in t and "s_sq[0] = ptxf_v;" in t
    cand = TransformGenerator().candidate(make_ctx(FUSED_TREE, few_rows_spec("fused_tree")), p.apply(u), [p])
    assert not isinstance(compile_candidate(cand, "sm_90a"), CompileFailed)
