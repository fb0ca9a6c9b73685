"""CPU tests of the ``specialise`` pass (the body versioned on the bench sizes' values of small loop-bounding integer
scalars), and of rowpar refusing a loop shorter than its lanes at every bench size.

What the pass writes (one version per combination of values, the value in the name's own type, the body as written
for any other value), what it refuses and why, NVRTC compiles every output, and g++ host runs give the original's
bits through a specialised version and through the version as written.
"""
from __future__ import annotations

import shutil

import pytest

from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import PASSES, plan_chains
from ptxfactory.search.generators.transform.rowpar import RowParallelPass
from ptxfactory.search.generators.transform.specialise import MAX_VERSIONS, SpecialisePass

from test_smem_tile import host_agree
from test_transform import compiles, unit

# K x K max pooling with stride S over an H x W image, one thread per flat output: the window's loops have a runtime
# trip count K
POOL = """
extern "C" __global__ void pool(const float* x, float* y, int H, int W, int K, int S)
{
    int OH = (H - K) / S + 1;
    int OW = (W - K) / S + 1;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= OH * OW) return;
    int oh = idx / OW, ow = idx % OW;
    float m = -1e30f;
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++) {
            float v = x[(oh * S + kh) * W + ow * S + kw];
            if (v > m) m = v;
        }
    y[idx] = m;
}
"""


def pool_spec(bench: str = "[{ H = 512, W = 512, K = 3, S = 2 }, { H = 512, W = 512, K = 2, S = 2 }]", k_type: str = "i32"):
    return parse_spec(f"""
[kernel.pool]
args = [
  {{ name = "x", role = "in", dtype = "f32", shape = ["H", "W"] }},
  {{ name = "y", role = "out", dtype = "f32", shape = ["(H - K) // S + 1", "(W - K) // S + 1"] }},
  {{ name = "H", role = "scalar", dtype = "i32", value = "H" }},
  {{ name = "W", role = "scalar", dtype = "i32", value = "W" }},
  {{ name = "K", role = "scalar", dtype = "{k_type}", value = "K" }},
  {{ name = "S", role = "scalar", dtype = "i32", value = "S" }},
]
values = ["K", "S"]
launch = {{ grid = ["cdiv(((H - K) // S + 1) * ((W - K) // S + 1), 128)"], block = [128], policy = "free" }}
[kernel.pool.check]
rtol = 0
atol = 0
sizes = [{{ H = 9, W = 11, K = 3, S = 2 }}, {{ H = 8, W = 8, K = 2, S = 2 }}, {{ H = 12, W = 7, K = 5, S = 1 }}]
[kernel.pool.bench]
sizes = {bench}
""").kernels["pool"]


def test_the_body_is_versioned_on_the_bench_sizes_values_in_bench_order():
    spec = pool_spec()
    out = SpecialisePass().apply(unit(POOL, spec)).text
    # one version per value of K the bench sizes take (S bounds no loop: not specialised), then the code as written
    assert out.index("if (K == 3) {") < out.index("} else if (K == 2) {") < out.index("} else {")
    assert out.count("kh < ((int)3)") == 1 and out.count("kh < ((int)2)") == 1 and out.count("kh < K;") == 1
    assert "S ==" not in out and "((int)2)) / S" in out
    compiles(out, spec, "pool")


def test_a_value_takes_the_scalars_own_type():
    spec = pool_spec(k_type="i64")
    source = POOL.replace("int K, int S", "long long K, int S")
    out = SpecialisePass().apply(unit(source, spec)).text
    assert "((long long)3)" in out and "((int)3)" not in out
    compiles(out, spec, "pool")


def test_a_bench_size_with_a_large_value_runs_the_code_as_written_and_the_others_are_versioned():
    """K = 100 at one bench size (above MAX_VALUE) no longer refuses the pass: the sizes where K is small get their
    version, the large one the body as written (k-means assignment, D = 32 / 128 / 64 at its bench sizes: none was
    versioned before)."""
    spec = pool_spec("[{ H = 512, W = 512, K = 3, S = 2 }, { H = 512, W = 512, K = 100, S = 2 }]")
    out = SpecialisePass().apply(unit(POOL, spec)).text
    assert "if (K == 3) {" in out and "K == 100" not in out and out.count("kh < K;") == 1
    compiles(out, spec, "pool")


def test_a_scalar_large_at_one_size_stays_a_name_in_that_size_s_version(tmp_path):
    """Two loop-bounding scalars, one of them large at a size: that size's version names only the small one."""
    source = """
extern "C" __global__ void rowdots(const float* a, const float* x, float* y, int N, int K, int D)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float s = 0.0f;
    for (int k = 0; k < K; k++)
        for (int d = 0; d < D; d++)
            s += a[k * D + d] * x[i * D + d];
    y[i] = s;
}
"""
    spec = parse_spec("""
[kernel.rowdots]
args = [
  { name = "a", role = "in", dtype = "f32", shape = ["K", "D"] },
  { name = "x", role = "in", dtype = "f32", shape = ["N", "D"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N"] },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "K", role = "scalar", dtype = "i32", value = "K" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
]
launch = { grid = ["cdiv(N, 128)"], block = [128], policy = "free" }
[kernel.rowdots.check]
sizes = [{ N = 7, K = 3, D = 5 }]
[kernel.rowdots.bench]
sizes = [{ N = 4096, K = 64, D = 32 }, { N = 4096, K = 256, D = 128 }, { N = 4096, K = 100, D = 16 }]
""").kernels["rowdots"]
    out = SpecialisePass().apply(unit(source, spec)).text
    assert out.index("if (K == 64 && D == 32) {") < out.index("} else if (D == 16) {") < out.index("} else {"), out
    assert "K == 256" not in out and "D == 128" not in out and "K == 100" not in out
    assert out.count("k < K;") == 2 and out.count("d < D;") == 1  # (D == 16's version keeps K, the last both)
    compiles(out, spec, "rowdots")
    if shutil.which("g++") is not None:  # each version gives the original's bits on the host
        for size in ({"N": 5, "K": 64, "D": 32}, {"N": 7, "K": 3, "D": 16}, {"N": 6, "K": 2, "D": 9}):
            report = host_agree(source, spec, size, [SpecialisePass()], tmp_path)
            assert report.strip() == "1 y same", (size, report)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("size", [{"H": 9, "W": 11, "K": 3, "S": 2}, {"H": 8, "W": 10, "K": 2, "S": 2},
                                  {"H": 12, "W": 7, "K": 5, "S": 1}])
def test_each_version_gives_the_originals_bits_on_the_host(size, tmp_path):
    """K = 3 and K = 2 run a specialised version, K = 5 the code as written: each equals the original bit for bit."""
    report = host_agree(POOL, pool_spec(), size, [SpecialisePass()], tmp_path)
    assert report.strip() == "1 y same", report


@pytest.mark.parametrize("case, source, bench, why", [
    ("no loop scalar", POOL.replace("kh < K", "kh < 3").replace("kw < K", "kw < 3"), None, "no integer scalar bounds a loop or divides in one"),
    ("written", POOL.replace("float m = -1e30f;", "float m = -1e30f; K = K + 0;"), None, "K written in the body"),
    ("declared again", POOL.replace("float v = x", "int K = 2; float v = x"), None, "K declared again"),
    ("large", POOL, "[{ H = 512, W = 512, K = 100, S = 2 }]", "K is at least 100 at every bench size"),
    ("many", POOL, "[" + ", ".join(f"{{ H = 512, W = 512, K = {k}, S = 1 }}" for k in range(2, 3 + MAX_VERSIONS)) + "]",
     f"{MAX_VERSIONS + 1} combinations of K"),
    ("label", POOL.replace("y[idx] = m;", "done: y[idx] = m;"), None, "a label"),
    ("nested shared", POOL.replace("float v = x", "__shared__ float t[32]; t[0] = 0.f; float v = x"), None,
     "__shared__ declaration inside a block"),
    # found by an adversarial review: each compiled to something else, or failed to compile, before these refusals
    ("shared sized by a local", POOL.replace("float m = -1e30f;", "const int T = 32; __shared__ float sm[T]; "
     "sm[threadIdx.x % 32] = 0; float m = -1e30f;"), None, "reads T, declared before it"),
    ("shared of a local type", POOL.replace("float m = -1e30f;", "struct P { float a; }; __shared__ P sm[32]; "
     "sm[threadIdx.x % 32].a = 0; float m = -1e30f;"), None, "reads P, declared before it"),
    ("define in the body", POOL.replace("float m = -1e30f;", "\n#define T2 32\n    __shared__ float sm[T2]; "
     "float m = -1e30f;"), None, "a preprocessor directive"),
    ("macro-qualified shared", "#define SMEM __shared__\n" + POOL.replace("float m = -1e30f;", "SMEM float sm[4096]; "
     "sm[threadIdx.x] = 0; float m = -1e30f + sm[0];"), None, "does not parse"),
    ("lambda capture", POOL.replace("float m = -1e30f;", "float m = -1e30f; auto f = [K](int i) { return i < K; }; "
     "m += f(1);"), None, "K at line 8 of the kernel is not a plain read"),
    ("const reference", POOL.replace("float m = -1e30f;", "float m = -1e30f; const int& r = K; m += r;"), None,
     "not a plain read"),
    ("forwarding reference", POOL.replace("float m = -1e30f;", "float m = -1e30f; auto&& r = K; if (idx == 0) r = 1;"),
     None, "not a plain read"),
    ("asm operand", POOL.replace("float m = -1e30f;", 'float m = -1e30f; asm volatile("" : "+r"(K));'), None,
     "not a plain read"),
    ("decltype", POOL.replace("float m = -1e30f;", "float m = -1e30f; decltype((K)) q = K; m += q;"), None,
     "not a plain read"),
    ("user call", "__device__ void bump(int& k) { k++; }\n" + POOL.replace("float m = -1e30f;",
     "float m = -1e30f; bump(K);"), None, "not a plain read"),
    ("enumerator", POOL.replace("float m = -1e30f;", "float m = -1e30f; { enum { K = 7 }; m += K; }"), None,
     "K declared again in the body (an enumerator)"),
])
def test_refusals_say_why(case, source, bench, why):
    spec = pool_spec(bench) if bench else pool_spec()
    reason = SpecialisePass().refusal(unit(source, spec))
    assert reason is not None and why in reason, (case, reason)


def test_a_grid_stride_loops_bound_does_not_count():
    source = """
extern "C" __global__ void scale(const float* x, float* y, int n, int c)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n * c; i += blockDim.x * gridDim.x)
        y[i] = 2.0f * x[i];
}
"""
    spec = parse_spec("""
[kernel.scale]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["n", "c"] },
  { name = "y", role = "out", dtype = "f32", shape = ["n", "c"] },
  { name = "n", role = "scalar", dtype = "i32", value = "n" },
  { name = "c", role = "scalar", dtype = "i32", value = "c" },
]
launch = { grid = [264], block = [256], policy = "free" }
[kernel.scale.check]
sizes = [{ n = 100, c = 3 }]
[kernel.scale.bench]
sizes = [{ n = 1000000, c = 3 }]
""").kernels["scale"]
    assert SpecialisePass().refusal(unit(source, spec)) == "no integer scalar bounds a loop or divides in one"


def test_top_level_shared_arrays_are_declared_once_before_the_versions():
    source = """
extern "C" __global__ void blur(const float* x, float* y, int n, int R)
{
    __shared__ float tile[256 + 64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    float s = 0.0f;
    for (int r = 0; r <= R && threadIdx.x + r < 256; r++) s += tile[threadIdx.x + r];
    if (i < n) y[i] = s;
}
"""
    spec = parse_spec("""
[kernel.blur]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["n"] },
  { name = "y", role = "out", dtype = "f32", shape = ["n"] },
  { name = "n", role = "scalar", dtype = "i32", value = "n" },
  { name = "R", role = "scalar", dtype = "i32", value = "R" },
]
values = ["R"]
launch = { grid = ["cdiv(n, 256)"], block = [256], policy = "fixed" }
[kernel.blur.check]
sizes = [{ n = 1000, R = 4 }]
[kernel.blur.bench]
sizes = [{ n = 1000000, R = 4 }]
""").kernels["blur"]
    out = SpecialisePass().apply(unit(source, spec)).text
    assert out.count("__shared__") == 1 and out.index("__shared__") < out.index("if (R == 4)")
    compiles(out, spec, "blur")


def test_a_specialised_kernel_is_not_specialised_again():
    spec = pool_spec()
    once = SpecialisePass().apply(unit(POOL, spec))
    assert SpecialisePass().refusal(once) == "already specialised"


def test_chains_end_with_it_before_launch_bounds():
    names = [p.name for p in PASSES]
    # (modstep, interior, hoist and raster between them: modstep steps the loops a literal stride of a version
    # filters, interior decides a version's edge tests at its literal window's extremes, hoist reads the literals
    # specialise writes; raster only orders the blocks of fold's grid, once the launch is chosen)
    assert names.index("specialise") == names.index("launch_bounds") - 5 and names.index("modstep") == names.index("specialise") + 1
    assert names.index("interior") == names.index("modstep") + 1 and names.index("hoist") == names.index("interior") + 1
    assert names.index("raster") == names.index("hoist") + 1
    chains = [[p.name for p in c] for c in plan_chains(unit(POOL, pool_spec()))]
    assert ["specialise"] in chains
    assert any(c[-2:] == ["specialise", "launch_bounds"] and "unflatten" in c for c in chains), chains


@pytest.mark.parametrize("lanes", ["auto", 4, 32, 256])
def test_rowpar_refuses_a_loop_shorter_than_its_lanes_at_every_bench_size(lanes):
    """The pooling window's loop (K = 2, 3 at the bench sizes) split over 4 or more lanes: most would idle."""
    reason = RowParallelPass(lanes).why_not(unit(POOL, pool_spec()))
    assert reason is not None and "runs 3 iterations at most at the bench sizes" in reason, reason
    # a window of 64 at a bench size is long enough for 4 and 32 lanes, not for a block of 256
    long = RowParallelPass(lanes).why_not(unit(POOL, pool_spec("[{ H = 512, W = 512, K = 64, S = 2 }]")))
    assert (long is not None and "fewer than the 256 lanes" in long) if lanes == 256 else (long is None or "iterations at most" not in long), long


TAPS = """
extern "C" __global__ void taps(const float* x, float* y, int n, int R, int G)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int width = 2 * R + 1;
    int span = (n / G) * width;
    float s = 0.0f;
    for (int k = 0; k < width; k++) s += x[(i + k) % n];
    for (int k = 0; k < span; k += 4096) s += x[k % n];
    y[i] = s;
}
"""


def test_a_local_counts_only_when_computed_from_small_scalars_alone():
    """``width = 2 * R + 1`` bounds a short loop (R is specialised); ``span = (n / G) * width`` reads the length n, so G,
    which only that local reads, is not."""
    spec = parse_spec("""
[kernel.taps]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["n"] },
  { name = "y", role = "out", dtype = "f32", shape = ["n"] },
  { name = "n", role = "scalar", dtype = "i32", value = "n" },
  { name = "R", role = "scalar", dtype = "i32", value = "R" },
  { name = "G", role = "scalar", dtype = "i32", value = "G" },
]
values = ["R", "G"]
launch = { grid = ["cdiv(n, 256)"], block = [256], policy = "free" }
[kernel.taps.check]
sizes = [{ n = 1000, R = 2, G = 4 }]
[kernel.taps.bench]
sizes = [{ n = 1000000, R = 2, G = 32 }, { n = 1000000, R = 3, G = 32 }]
""").kernels["taps"]
    out = SpecialisePass().apply(unit(TAPS, spec)).text
    assert "if (R == 2) {" in out and "} else if (R == 3) {" in out and "G ==" not in out
    assert "2 * ((int)2) + 1" in out and "(n / G)" in out
    compiles(out, spec, "taps")


def test_reads_of_the_value_through_casts_sizeof_ternaries_and_math_builtins_still_specialise():
    spec = pool_spec()
    source = POOL.replace("float m = -1e30f;", "float m = -1e30f + (float)K * 0.f + sizeof(K) * 0 + min(K, 1) * 0 "
                          "+ (idx < 0 ? K : 0);")
    out = SpecialisePass().apply(unit(source, spec)).text
    assert "min(((int)3), 1)" in out and "sizeof(((int)3))" in out and "(idx < 0 ? ((int)3) : 0)" in out
    compiles(out, spec, "pool")


def test_a_loop_a_literal_already_bounds_is_no_reason_to_version():
    """vectorize's tail loop (``i < ptxf_v0 + 4 && i < n``) reads the size scalars, but a literal bounds its trip count:
    versions on them would unroll nothing (a new user's SELU got ``if (batch_size == 16)`` around a loop-free body)."""
    from ptxfactory.search.generators.transform.specialise import _literally_bounded
    from ptxfactory.search.generators.transform import syntax as sx

    def loop(src):
        return next(n for n in sx.walk(sx.parse(src.encode()).root_node) if n.type == "for_statement")

    assert _literally_bounded(loop("void f(int n, int s) { for (int i = s; i < s + 4 && i < n; ++i) {} }"))
    assert _literally_bounded(loop("void f(int n) { for (int k = 0; k < 3; ++k) {} }"))
    assert not _literally_bounded(loop("void f(int n, int s) { for (int i = s; i < n && i < s * 4; ++i) {} }"))
    assert not _literally_bounded(loop("void f(int K) { for (int k = 0; k < K; ++k) {} }"))


CONVT = """
extern "C" __global__ void convt(const float* x, const float* w, float* y, int C, int H, int OH, int K, int stride, int pad)
{
    int oh = blockIdx.x * blockDim.x + threadIdx.x;
    if (oh >= OH) return;
    float acc = 0.0f;
    for (int c = 0; c < C; c++)
        for (int kh = 0; kh < 3; kh++) {
            int t = oh + pad - kh;
            if (t < 0 || t % stride != 0) continue;
            int ih = t / stride;
            if (ih < H) acc += x[c * H + ih] * w[c * 3 + kh];
        }
    y[oh] = acc;
}
"""


def test_a_divisor_in_a_loop_is_specialised():
    """A transposed convolution's `t % stride` and `t / stride` for every tap: a runtime integer division each
    iteration, a shift once stride is a literal; stride bounds no loop, pad (no divisor) and C (above 64) stay names."""
    spec = parse_spec("""
[kernel.convt]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["C", "H"] },
  { name = "w", role = "in", dtype = "f32", shape = ["C", 3] },
  { name = "y", role = "out", dtype = "f32", shape = ["2 * H - 1"] },
  { name = "C", role = "scalar", dtype = "i32", value = "C" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "OH", role = "scalar", dtype = "i32", value = "2 * H - 1" },
  { name = "K", role = "scalar", dtype = "i32", value = 3 },
  { name = "stride", role = "scalar", dtype = "i32", value = 2 },
  { name = "pad", role = "scalar", dtype = "i32", value = 1 },
]
launch = { grid = ["cdiv(2 * H - 1, 128)"], block = [128], policy = "free" }
[kernel.convt.check]
sizes = [{ C = 3, H = 9 }]
[kernel.convt.bench]
sizes = [{ C = 256, H = 4096 }]
""").kernels["convt"]
    out = SpecialisePass().apply(unit(CONVT, spec)).text
    assert "if (stride == 2) {" in out and "t % ((int)2)" in out and "t / ((int)2)" in out
    assert "pad ==" not in out and "C ==" not in out and "K ==" not in out
    src_no_div = CONVT.replace("t % stride != 0", "t < -1").replace("t / stride", "t")
    assert SpecialisePass().refusal(unit(src_no_div, spec)).startswith("C is at least 256")
