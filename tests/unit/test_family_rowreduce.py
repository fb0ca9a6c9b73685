"""CPU tests of the "rowreduce" family (row sums, GEMV): everything compiles with NVRTC for sm_90a.

No GPU is needed: NVRTC runs without a driver. Checked here: both examples (rowsum, gemv) get the
whole tuning space in product order, every candidate compiles without spills and passes the static
checks, keeps the user's signature, launches what its ``__launch_bounds__`` says with a grid that
covers every row at every spec, held-out and boundary size; specs without the pattern get nothing; a row-mean kernel gets mean candidates only, and a kernel
storing anything else (sqrtf(s), s * 2, an atomic) gets nothing, with a reason.
Where g++ exists, a few candidates' kernel text also runs on the host under an emulation of the
CUDA features it uses (one std::thread per CUDA thread, warp shuffles and __syncthreads through
barriers, every __ldg/__ldcs checked against the buffers' bounds and its own alignment) and is
compared with a double-precision reference, buffers placed both 16-byte aligned and unaligned.
"""
from __future__ import annotations

import hashlib
import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.source import check_signature, find_kernel
from ptxfactory.harness.static_checks import MAX_GRID_DIMS, static_check
from ptxfactory.protocol import Candidate, LaunchConfig, evaluate, load_spec, parse_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators import load
from ptxfactory.search.generators.rowreduce import (
    BLOCKS, HINTS, TPRS, UNROLLS, VECS, RowReduceConfig, RowReduceFamily, match_spec, store_evidence, tuning_space,
)
from _generator_support import example_ctx, with_args
from _host_cuda import HOST_BLOCKS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {"rowsum": ROOT / "examples" / "rowsum" / "rowsum.cu", "gemv": ROOT / "examples" / "gemv" / "gemv.cu"}


def make_ctx(name: str, spec=None, source: str | None = None) -> GenContext:
    return example_ctx(EXAMPLES.get(name), name, spec, source)


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def example(request):
    """(ctx, candidates, compiled by key) for one example; compiled once per module."""
    ctx = make_ctx(request.param)
    cands = RowReduceFamily().propose(ctx)
    return ctx, cands, {c.key: compile_candidate(c, ctx.spec.arch, ctx.spec.check.fast_math) for c in cands}


def _tier(c: Candidate, ctx: GenContext, k: int) -> tuple[int, int, int | None]:
    """The (threads per row, rows per block, cap) the kernel dispatches to for row length k."""
    p = c.params
    cfg = RowReduceConfig(p["block"], p["vec"], p["tpr"], p["unroll"], p["hint"])
    tiers = cfg.tiers(p["vec"] // ctx.spec.args[0].dtype.itemsize)
    return next((t for t in tiers if t[2] is not None and k <= t[2]), tiers[-1])


def _sizes(ctx: GenContext) -> list[dict[str, int]]:
    r, k = ctx.spec.symbols
    sizes = ctx.spec.check.sizes + ctx.spec.bench.sizes
    for secret in range(8):
        sizes += make_plan(ctx.spec, secret=secret).heldout_sizes
    sizes += [{r: 1, k: 1}, {r: 1031, k: 2049}, {r: 3, k: 32801}, {r: 2**20 + 1, k: 3}]
    sizes += [{r: 37, k: n + d} for n in (2048, 4096, 8192, 16384, 32768, 65536) for d in (-1, 0, 1)]
    return sizes


# ---------------------------------------------------------------- proposals


def test_registry_loads_the_family():
    assert load("rowreduce").name == "rowreduce"


def test_proposes_the_tuning_space_in_product_order(example):
    ctx, cands, _ = example
    assert 12 <= len(cands) <= 30
    product = [dict(zip(("block", "vec", "tpr", "unroll", "hint"), p)) for p in itertools.product(BLOCKS, VECS, TPRS, UNROLLS, HINTS)]
    assert [c.params for c in cands] == product == [cfg.params() for cfg in tuning_space()]
    assert len({c.key for c in cands}) == len(cands) and ctx.original.key not in {c.key for c in cands}
    for c in cands:
        assert c.generator == "rowreduce" and c.parent == ctx.original.key and c.kernel_name == ctx.spec.name
        assert c.description.startswith("rowreduce ") and c.launch.shared_mem == 0
        assert c.options == ctx.original.options


def test_match_finds_roles_and_symbols():
    m = match_spec(make_ctx("gemv").spec)
    assert (m.a, m.v, m.y, m.r_arg, m.k_arg, m.r_sym, m.k_sym) == ("A", "x", "y", "M", "K", "M", "K")
    m = match_spec(make_ctx("rowsum").spec)
    assert (m.a, m.v, m.y, m.r_arg, m.k_arg, m.r_sym, m.k_sym) == ("x", None, "s", "M", "N", "M", "N")


# ---------------------------------------------------------------- compiled candidates


def test_every_candidate_compiles_without_spills_and_passes_static_checks(example):
    ctx, cands, compiled = example
    for c in cands:
        r = compiled[c.key]
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        res = r.resources
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.local_bytes == 0, f"{c.description}: {res.summary()}"
        assert 0 < res.registers * c.launch.block[0] <= 65536, f"{c.description}: {res.summary()}"
        assert static_check(c, ctx.spec, res, r.cubin) is None, c.description
        assert r.lowered_name == ctx.spec.name  # extern "C" kept


def test_keeps_the_users_signature(example):
    ctx, cands, _ = example
    for c in cands:
        k = find_kernel(c.source, ctx.spec.name)
        check_signature(ctx.spec, k)
        assert [(p.name, p.type, p.is_pointer, p.is_const) for p in k.params] == [
            (p.name, p.type, p.is_pointer, p.is_const) for p in ctx.kernel.params
        ]
        assert k.text.startswith('extern "C"')
        assert c.source.count("__global__") == ctx.source.count("__global__")
        head, tail = ctx.source[: ctx.kernel.start_byte], ctx.source[ctx.kernel.end_byte :]
        assert c.source == head + c.kernel_text + tail


def test_launch_matches_launch_bounds_and_covers_every_row(example):
    ctx, cands, _ = example
    r_sym, k_sym = ctx.spec.symbols
    for c in cands:
        block = c.launch.block[0]
        bounds = re.search(r"__launch_bounds__\((\d+), (\d+)\)\s*" + ctx.spec.name + r"\(", c.kernel_text)
        assert bounds and int(bounds.group(1)) == block == c.params["block"]
        assert int(bounds.group(2)) * block * 128 <= 65536  # min blocks per SM: leaves ptxas 128 registers a thread
        assert f"// Launch: grid ({c.launch.grid[0]},), block ({block},)" in c.kernel_text
        for size in _sizes(ctx):
            grid = evaluate(c.launch.grid[0], size)
            rpb = _tier(c, ctx, size[k_sym])[1]
            assert 1 <= grid <= MAX_GRID_DIMS[0]
            assert grid * rpb >= size[r_sym] > (grid - 1) * rpb, f"{c.description}: grid {grid} at {size}"


def test_dispatch_matches_tiers(example):
    """The kernel's `if (K <= cap)` chain calls the tiers' threads per row in order; a 4096 x 16384 GEMV gets 128+ threads a row."""
    ctx, cands, _ = example
    itemsize = ctx.spec.args[0].dtype.itemsize
    for c in cands:
        p = c.params
        tiers = RowReduceConfig(p["block"], p["vec"], p["tpr"], p["unroll"], p["hint"]).tiers(p["vec"] // itemsize)
        kernel = c.kernel_text.split("__global__")[-1]
        calls = re.findall(r"ptxf_rowreduce<(\d+), (\d+)>", kernel)
        assert [int(t) for t, _ in calls] == [t for t, _, _ in tiers]
        assert all(int(u) == p["unroll"] for _, u in calls)
        assert [int(x) for x in re.findall(r"if \(\w+ <= (\d+)\) ptxf_rowreduce", kernel)] == [cap for _, _, cap in tiers[:-1]]
        assert all(t % 32 == 0 and p["block"] % t == 0 and rpb * t == p["block"] for t, rpb, _ in tiers)
        if p["tpr"] == "auto" and p["unroll"] == 4:  # long rows: 128+ threads per row; the grid fills 132 SMs many times
            r_sym, k_sym = ctx.spec.symbols
            grid = evaluate(c.launch.grid[0], {r_sym: 4096, k_sym: 16384})
            assert grid >= 8 * 132 and grid * p["block"] >= 4096 * min(256, p["block"]), (c.description, grid)


def test_kernel_uses_vector_loads_shuffles_and_scalar_edges(example):
    ctx, cands, _ = example
    for c in cands:
        text = c.kernel_text
        for needle in ("uint4", "__shfl_xor_sync", "% 16u", "if ((int)t < head)", "if (tail + t < K)"):
            assert needle in text, (c.description, needle)
        assert ("__ldcs(" in text) == (c.params["hint"] == "stream")
        assert not re.search(r"\batomic\w*\s*\(", text)  # deterministic: no atomics
        if ctx.spec.name == "gemv":
            assert "switch (D)" in text and "ptxf_row_body<TPR, U, 3>" in text
        else:
            assert "switch (D)" not in text


# ---------------------------------------------------------------- what does not match


GEMV_MISMATCHES = [
    {"y": {"shape": ["K"]}},  # output along the wrong axis
    {"y": {"shape": ["M", "K"]}},  # 2-D output: not a reduction
    {"x": {"shape": ["M"]}},  # vector along the rows
    {"A": {"shape": ["K"]}},  # no matrix
    {"A": {"dtype": "i32"}},  # not a float matrix
    {"y": {"dtype": "f16"}},  # output neither f32 nor A's dtype
    {"x": {"dtype": "i32"}},  # integer vector
    {"M": {"value": "K"}},  # no scalar for the row count
    {"K": {"value": 7}},  # K scalar is a constant
    {"M": {"dtype": "f32"}},  # float row count
    {"x": {"role": "out"}},  # two outputs
]


@pytest.mark.parametrize("change", GEMV_MISMATCHES)
def test_refuses_other_specs(change):
    spec = with_args(make_ctx("gemv").spec, **change)
    assert match_spec(spec) is None
    assert RowReduceFamily().propose(make_ctx("gemv", spec=spec)) == []


def test_refuses_fixed_launch_and_other_kernels():
    for name in EXAMPLES:
        ctx = make_ctx(name)
        data = ctx.spec.model_dump(mode="json")
        data["launch"]["policy"] = "fixed"
        spec = type(ctx.spec).model_validate(data)
        assert RowReduceFamily().propose(make_ctx(name, spec=spec)) == []
    rms = ROOT / "examples" / "rmsnorm" / "rmsnorm.cu"  # y[M, N]: a row-wise map, not a reduction
    spec = load_spec(str(rms) + ".toml").kernels["rmsnorm"]
    assert match_spec(spec) is None
    source = rms.read_text()
    kernel = find_kernel(source, "rmsnorm")
    original = Candidate(kernel_name="rmsnorm", source=source, kernel_text=kernel.text,
                         launch=LaunchConfig(grid=spec.launch.grid, block=spec.launch.block))
    assert RowReduceFamily().propose(GenContext(spec=spec, source=source, kernel=kernel, original=original)) == []


def test_refuses_a_signature_that_differs():
    ctx = make_ctx("gemv")
    source = ctx.source.replace("float* y, int M, int K", "float* y, int K, int M")  # parameter order differs from the spec
    assert RowReduceFamily().propose(make_ctx("gemv", source=source)) == []


# ---------------------------------------------------------------- other dtypes, linkage, widths


HALF_SOURCE = """#include <cuda_bf16.h>
#include <cuda_fp16.h>
__global__ void proj(const __nv_bfloat16* W, const __VT* h, __YT* out, long long rows, long long cols)
{
    long long r = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.f;
    for (long long k = 0; k < cols; ++k) s += __bfloat162float(W[r * cols + k]) * __VF(h[k]);
    out[r] = __YF(s);
}
"""
HALF_SPEC = """
[kernel.proj]
args = [
  { name = "W", role = "in", dtype = "bf16", shape = ["R", "C"] },
  { name = "h", role = "in", dtype = "VD", shape = ["C"] },
  { name = "out", role = "out", dtype = "YD", shape = ["R"] },
  { name = "rows", role = "scalar", dtype = "i64", value = "R" },
  { name = "cols", role = "scalar", dtype = "i64", value = "C" },
]
launch = { grid = ["cdiv(R, 128)"], block = [128], policy = "free" }
[kernel.proj.check]
sizes = [{ R = 3, C = 100 }]
[kernel.proj.bench]
sizes = [{ R = 4096, C = 4096 }]
"""
_VT = {"bf16": ("__nv_bfloat16", "__bfloat162float"), "f16": ("__half", "__half2float"), "f32": ("float", "")}


@pytest.mark.parametrize("vdt, ydt", [("bf16", "bf16"), ("f32", "f32"), ("f16", "bf16")])
def test_bf16_matrix_i64_sizes_cxx_linkage(vdt, ydt):
    """bf16 A (8 elements per vector: 8 shifts of v), bf16/f16/f32 v, i64 sizes, C++ linkage: instantiated and compiled."""
    vt, vf = _VT[vdt]
    yt, yf = {"bf16": ("__nv_bfloat16", "__float2bfloat16"), "f32": ("float", "")}[ydt]
    source = HALF_SOURCE.replace("__VT", vt).replace("__VF", vf).replace("__YT", yt).replace("__YF", yf)
    spec = parse_spec(HALF_SPEC.replace("VD", vdt).replace("YD", ydt)).kernels["proj"]
    ctx = GenContext(spec=spec, source=source, kernel=find_kernel(source, "proj"),
                     original=Candidate(kernel_name="proj", source=source, kernel_text=find_kernel(source, "proj").text,
                                        launch=LaunchConfig(grid=spec.launch.grid, block=spec.launch.block)))
    cands = RowReduceFamily().propose(ctx)
    assert len(cands) == len(tuning_space())
    for c in (cands[0], cands[-1]):
        k = find_kernel(c.source, "proj")
        check_signature(spec, k)
        assert not k.text.lstrip().startswith("extern")
        assert "ptxf_row_body<TPR, U, 7>" in c.kernel_text and "long long" in c.kernel_text
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log
        assert r.resources.spill_stores == 0 and r.resources.local_bytes == 0, r.resources.summary()


@pytest.mark.parametrize("vec", [4, 8])
def test_narrower_vectors_compile(vec):
    """vec = 4 (f32: one element, no head or tail) and 8 bytes, outside the default space, still instantiate and compile."""
    for name in EXAMPLES:
        ctx = make_ctx(name)
        c = RowReduceFamily().instantiate(ctx, match_spec(ctx.spec), RowReduceConfig(256, vec, "auto", 4, "ldg"))
        assert c.params["vec"] == vec
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log
        assert r.resources.spill_stores == 0


def test_inside_extern_c_block():
    """A kernel inside `extern "C" { ... }`: the template helpers get C++ linkage, the kernel keeps C linkage."""
    src = EXAMPLES["gemv"].read_text().replace('extern "C" __global__', 'extern "C" {\n__global__') + "}\n"
    c = RowReduceFamily().propose(make_ctx("gemv", source=src))[0]
    assert not c.kernel_text.startswith('extern "C" ') and 'extern "C++" {' in c.kernel_text
    r = compile_candidate(c, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.lowered_name == "gemv"


# ---------------------------------------------------------------- host emulation of the kernel text

SHIM = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
#define __device__
#define __forceinline__ inline
#define __global__
#define __restrict__
#define __launch_bounds__(...)
#define __shared__ static
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct ptxf_dim { unsigned x; };
thread_local ptxf_dim threadIdx, blockIdx;
inline std::vector<std::pair<const char*, const char*>> g_ranges;
template <class T> inline const T* checked(const T* p) {
    const char* b = (const char*)p;
    if ((uintptr_t)b % sizeof(T)) { printf("misaligned %zu-byte load\n", sizeof(T)); fflush(stdout); std::abort(); }
    for (auto& r : g_ranges) if (b >= r.first && b + sizeof(T) <= r.second) return p;
    printf("out-of-bounds %zu-byte load\n", sizeof(T)); fflush(stdout); std::abort();
}
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
template <class T> inline T __ldg(const T* p) { return *checked(p); }
template <class T> inline T __ldcs(const T* p) { return *checked(p); }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
""" + HOST_BLOCKS
MAIN = r"""
static float* buffer(long n, long offset) {  // n floats at `offset` floats past a 256-byte boundary
    char* base = (char*)aligned_alloc(256, ((n + offset) * 4 + 256 + 255) / 256 * 256);
    float* p = (float*)base + offset;
    g_ranges.push_back({(const char*)p, (const char*)(p + n)});
    return p;
}
int main(int argc, char** argv) {
    long M = atol(argv[1]), K = atol(argv[2]), off = atol(argv[5]);
    int grid = atoi(argv[3]), block = atoi(argv[4]);
    float* A = buffer(M * K, off); float* v = buffer(K, off ? 3 : 0); float* y = buffer(M, 0);
    unsigned s = 12345;
    auto rnd = [&] { s = s * 1664525u + 1013904223u; return (float)((s >> 8) & 0xffff) / 65536.f + 0.5f; };
    for (long i = 0; i < M * K; ++i) A[i] = rnd();
    for (long i = 0; i < K; ++i) v[i] = HASV ? rnd() : 1.f;
    for (long i = 0; i < M; ++i) y[i] = NAN;
    launch(grid, block, [&] { CALL; });
    for (long r = 0; r < M; ++r) {
        double ref = 0;
        for (long k = 0; k < K; ++k) ref += (double)A[r * K + k] * (double)v[k];
        if (!(std::fabs(y[r] - ref) <= 1e-5 * std::fabs(ref))) { printf("row %ld: got %g want %g\n", r, y[r], ref); return 1; }
    }
    printf("ok\n");
    return 0;
}
"""
CALLS = {"gemv": "gemv(A, v, y, (int)M, (int)K)", "rowsum": "rowsum(A, y, (int)M, (int)K)"}
# (block, tpr, unroll, hint): the widest tiers (512 threads per row) and the warp-per-row kernel
EMULATED = [(512, "auto", 4, "stream"), (128, "warp", 8, "ldg")]
EMU_SIZES = [(7, 1000), (3, 8), (33, 4100), (1, 1), (5, 4099), (9, 5), (2, 2049), (3, 8193), (2, 16385), (2, 32801)]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) for the host emulation")
@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("knobs", EMULATED, ids=lambda k: "-".join(map(str, k)))
def test_kernel_text_on_host_emulation(name, knobs, tmp_path):
    """The kernel text, run on the host, sums every row right with aligned and misaligned rows and v, and loads nothing out of bounds."""
    ctx = make_ctx(name)
    block, tpr, unroll, hint = knobs
    c = RowReduceFamily().instantiate(ctx, match_spec(ctx.spec), RowReduceConfig(block, 16, tpr, unroll, hint))
    text = SHIM + c.kernel_text + MAIN.replace("HASV", "1" if name == "gemv" else "0").replace("CALL", CALLS[name])
    src = tmp_path / f"emu_{hashlib.sha1(text.encode()).hexdigest()[:8]}.cpp"
    src.write_text(text)
    exe = tmp_path / "emu"
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", str(src), "-o", str(exe), "-pthread"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    r_sym, k_sym = ctx.spec.symbols
    for m, k in EMU_SIZES:
        grid = evaluate(c.launch.grid[0], {r_sym: m, k_sym: k})
        for off in (0, 1):  # buffers 256-byte aligned, or A one float and v three floats past it
            run = subprocess.run([str(exe), str(m), str(k), str(grid), str(block), str(off)], capture_output=True, text=True, timeout=120)
            assert run.returncode == 0 and run.stdout.strip() == "ok", f"{c.description} at {m}x{k} offset {off}: {run.stdout[-300:]}"


# ---------------------------------------------------------------- evidence: what the kernel stores per row

ROWMEAN_SOURCE = """#include <cuda_fp16.h>
#define IDX(r,c) ((r)*N+(c))
__global__ void row_mean(const __half* x, float* out, int M, int N) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float s = 0.0f;
    for (int c = 0; c < N; c++) {
        s += __half2float(x[IDX(r, c)]);
    }
    out[r] = s / N;
}
"""
ROWMEAN_SPEC = """
[kernel.row_mean]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "f16", shape = ["M", "N"], init = "normal" },
  { name = "out", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(M, 256)"], block = [256], shared_mem = 0, policy = "free" }
[kernel.row_mean.check]
sizes = [{ M = 7, N = 1000 }, { M = 1, N = 1 }]
[kernel.row_mean.bench]
sizes = [{ M = 4096, N = 8192 }]
"""


def rowmean_ctx(store: str = "out[r] = s / N;") -> GenContext:
    source = ROWMEAN_SOURCE.replace("out[r] = s / N;", store)
    spec = parse_spec(ROWMEAN_SPEC).kernels["row_mean"]
    kernel = find_kernel(source, "row_mean")
    return GenContext(spec=spec, source=source, kernel=kernel,
                      original=Candidate(kernel_name="row_mean", source=source, kernel_text=kernel.text,
                                         launch=LaunchConfig(grid=spec.launch.grid, block=spec.launch.block)))


def test_examples_store_the_row_sum():
    """The examples' stores (`s[row] = partial[0]`, `y[row] = acc`, `s[row] = sum`) are evidence of a plain sum."""
    for name, y, k in (("rowsum", "s", "N"), ("gemv", "y", "K"), ("rowsum_seq", "s", "N")):
        ctx = example_ctx(name)
        assert store_evidence(ctx.kernel.text, y, k).kind == "sum", name
        cands = RowReduceFamily().propose(ctx)
        assert len(cands) == len(tuning_space()) and RowReduceFamily().refusals(ctx) == []
        assert all("1.0f / (float)K" not in c.kernel_text and " mean " not in c.description for c in cands)


@pytest.mark.parametrize("store", [
    "out[r] = s / N;", "out[r] = s / (float)N;", "out[r] = s * (1.0f / N);", "out[r] = (1.f / (float)N) * s;",
    "s /= N; out[r] = s;", "float m = s / N; out[r] = m;", "out[r] = __fdividef(s, N);",
])
def test_row_mean_gets_only_mean_candidates(store):
    ctx = rowmean_ctx(store)
    cands = RowReduceFamily().propose(ctx)
    assert len(cands) == len(tuning_space()) and RowReduceFamily().refusals(ctx) == []
    for c in cands:
        assert c.description.startswith("rowreduce mean "), c.description
        assert "y[row] = ptxf_f2y(acc * (1.0f / (float)K));" in c.kernel_text
        check_signature(ctx.spec, find_kernel(c.source, "row_mean"))


def test_row_mean_candidates_compile():
    """Every mean candidate of the f16 row-mean kernel compiles with NVRTC, without spills, and passes the static checks."""
    ctx = rowmean_ctx()
    for c in RowReduceFamily().propose(ctx):
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        assert r.resources.spill_stores == 0 and r.resources.local_bytes == 0, f"{c.description}: {r.resources.summary()}"
        assert static_check(c, ctx.spec, r.resources, r.cubin) is None, c.description


@pytest.mark.parametrize("store", [
    "out[r] = sqrtf(s);", "out[r] = s * 2.0f;", "out[r] = s - 1.0f;", "out[r] = s / (N - 1);", "out[r] = s / M;",
    "out[r] += s;", "atomicAdd(&out[r], s);", "s = sqrtf(s); out[r] = s;", "s *= 0.5f; out[r] = s;",
    "out[r] = 0.0f;", "out[r] = s * s;", "out[r] = expf(s) / N;",
])
def test_other_stores_get_nothing_and_say_why(store):
    ctx = rowmean_ctx(store)
    assert match_spec(ctx.spec) is not None  # the signature alone has the pattern
    assert store_evidence(ctx.kernel.text, "out", "N").kind is None
    assert RowReduceFamily().propose(ctx) == []
    [(name, reason)] = RowReduceFamily().refusals(ctx)
    assert name == "rowreduce" and reason.startswith("line 10:") and "out" in reason
