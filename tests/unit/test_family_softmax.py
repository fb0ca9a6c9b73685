"""CPU tests of the "softmax" family: every candidate compiles with NVRTC for sm_90a, without spills.

No GPU is needed: NVRTC runs without a driver. Correctness on the GPU is the verifier's business
(tests/gpu/test_gpu_family_softmax.py); here: the pattern match, the user's signature kept, distinct
keys, launches that fit the compiled kernel and the sm_90 limits at every spec, held-out and bench
size, and a dispatch that matches the grid expression.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.source import check_signature, find_kernel
from ptxfactory.harness.static_checks import MAX_GRID_DIMS, static_check
from ptxfactory.protocol import Candidate, evaluate, load_spec, parse_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators import load
from ptxfactory.search.generators.softmax import SoftmaxConfig, SoftmaxFamily, match_spec
from _generator_support import example_ctx, with_args

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "softmax" / "softmax.cu"


def make_ctx(spec=None, source: str | None = None, name: str = "softmax") -> GenContext:
    return example_ctx(EXAMPLE, name, spec, source)


def spill_free(log: str) -> bool:
    """No spills in any function of a ptxas report (the entry and its ``__noinline__`` tiers), and at most
    16 bytes of stack per function (what the call of a tier may take)."""
    frames = [int(n) for n in re.findall(r"(\d+) bytes stack frame", log)]
    return not re.search(r"[1-9]\d* bytes spill (stores|loads)", log) and bool(frames) and max(frames) <= 16


@pytest.fixture(scope="module")
def ctx() -> GenContext:
    return make_ctx()


@pytest.fixture(scope="module")
def cands(ctx) -> list[Candidate]:
    return SoftmaxFamily().propose(ctx)


@pytest.fixture(scope="module")
def compiled(cands, ctx):
    return {c.key: compile_candidate(c, ctx.spec.arch, ctx.spec.check.fast_math) for c in cands}


def _config(c: Candidate) -> SoftmaxConfig:
    p = c.params
    return SoftmaxConfig(p["block"], p["rows_per_block"], p["vecs"], p["hint"], p["exp"])


def test_registry_loads_softmax():
    assert load("softmax").name == "softmax"


def test_proposes_the_tuning_space(cands, ctx):
    assert 12 <= len(cands) <= 30
    assert len({c.key for c in cands}) == len(cands)
    assert ctx.original.key not in {c.key for c in cands}
    for c in cands:
        assert c.generator == "softmax" and c.parent == ctx.original.key and c.kernel_name == "softmax"
        assert c.description.startswith("softmax ")
        assert set(c.params) == {"block", "rows_per_block", "vecs", "vec", "hint", "exp", "math"}
        assert c.params["vec"] == 16 and c.params["hint"] in ("ldg", "stream") and c.params["exp"] in ("expf", "exp2")
    assert {c.params["exp"] for c in cands} == {"expf", "exp2"}
    assert {c.params["hint"] for c in cands} == {"ldg", "stream"}


def test_every_candidate_compiles_without_spills_and_passes_static_checks(cands, compiled, ctx):
    for c in cands:
        r = compiled[c.key]
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        res = r.resources
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.local_bytes <= 16, f"{c.description}: {res.summary()}"
        assert spill_free(r.log), f"{c.description}: {r.log}"
        assert 0 < res.registers * c.launch.block[0] <= 65536, f"{c.description}: {res.summary()}"
        assert res.shared_bytes <= 48 * 1024
        assert static_check(c, ctx.spec, res, r.cubin) is None, c.description


def test_keeps_the_users_signature(cands, ctx):
    for c in cands:
        k = find_kernel(c.source, "softmax")
        check_signature(ctx.spec, k)
        assert [(p.name, p.type, p.is_pointer, p.is_const) for p in k.params] == [
            (p.name, p.type, p.is_pointer, p.is_const) for p in ctx.kernel.params
        ]
        assert k.text.startswith('extern "C"')
        head, tail = ctx.source[: ctx.kernel.start_byte], ctx.source[ctx.kernel.end_byte :]
        assert c.source == head + c.kernel_text + tail
        assert "// Launch: grid (" in c.kernel_text


def _tier(cfg: SoftmaxConfig, n: int, vec: int = 8):
    return next(t for t in cfg.tiers(vec) if t.cap is None or n <= t.cap)


def test_launch_matches_launch_bounds_and_limits(cands, ctx):
    plan = make_plan(ctx.spec, secret=1234)
    sizes = ctx.spec.check.sizes + ctx.spec.bench.sizes + plan.heldout_sizes
    sizes += [{"M": 1, "N": 1}, {"M": 1031, "N": 2051}, {"M": 3, "N": 32801}, {"M": 1, "N": 10**6}, {"M": 65537, "N": 3}]
    sizes += [{"M": 37, "N": n} for n in range(1, 70000, 997)]
    for c in cands:
        block = c.launch.block[0]
        bounds = re.search(r"__launch_bounds__\((\d+)(?:,\s*(\d+))?\)\s*softmax\(", c.kernel_text)
        assert bounds and int(bounds.group(1)) == block and block % 32 == 0 and block <= 1024
        cfg = _config(c)
        sizes_c = sizes + [{"M": 5, "N": t.cap + d} for t in cfg.tiers(8) if t.cap for d in (-1, 0, 1)]
        for size in sizes_c:
            grid = evaluate(c.launch.grid[0], size)
            rpb = _tier(cfg, size["N"]).rpb
            assert grid * rpb >= size["M"] > (grid - 1) * rpb, f"{c.description} grid {grid} for {size}"
            assert 1 <= grid <= MAX_GRID_DIMS[0]


def test_dispatch_matches_tiers(cands):
    for c in cands:
        cfg = _config(c)
        tiers = cfg.tiers(8)
        assert tiers[-1].cap is None and all(t.cap is not None for t in tiers[:-1])
        for t in tiers:
            assert t.tpr % 32 == 0 and cfg.block % t.tpr == 0
            groups = cfg.block // t.tpr
            assert t.rpb <= groups or t.rpb % groups == 0  # barrier counts are uniform
        kernel = c.kernel_text.split("__global__")[-1]
        calls = re.findall(r"ptxf_softmax<(\d+), (\d+), (\d+), (true|false)>", kernel)
        assert [(int(a), int(b), int(v), raw == "true") for a, b, v, raw in calls] == [(t.tpr, t.rpb, t.mv, t.raw) for t in tiers]
        assert [int(x) for x in re.findall(r"if \(N <= (\d+)\)", kernel)] == [t.cap for t in tiers[:-1]]
        assert tiers[-1].raw and tiers[-1].mv >= 2 * cfg.vecs  # bf16: the last tier caches raw vectors


def test_vector_path_features(cands):
    text = cands[0].kernel_text
    for needle in ("uint4", "__shfl_xor_sync", "ptxf_row_reduce", "1.f / s", "& 15u", "__ldg"):
        assert needle in text, needle
    exp2 = next(c for c in cands if c.params["exp"] == "exp2")
    assert "ex2.approx.ftz.f32" in exp2.kernel_text and "1.4426950408889634f" in exp2.kernel_text
    expf = next(c for c in cands if c.params["exp"] == "expf")
    assert "expf(d)" in expf.kernel_text and "ex2.approx" not in expf.kernel_text
    stream = next(c for c in cands if c.params["hint"] == "stream")
    assert "__ldcs" in stream.kernel_text and "__stcs" in stream.kernel_text


@pytest.mark.parametrize(
    "change",
    [
        {"y": {"shape": ["M"]}},  # a row reduction, not a softmax
        {"x": {"shape": ["N"]}},  # 1-D input
        {"y": {"dtype": "f32"}},  # output dtype differs from the input's
        {"x": {"dtype": "i32"}, "y": {"dtype": "i32"}},  # not a float
        {"M": {"value": "N"}},  # no scalar for the row count
        {"N": {"dtype": "f32"}},  # the row length is not an integer
    ],
)
def test_refuses_other_specs(ctx, change):
    spec = with_args(ctx.spec, **change)
    assert match_spec(spec) is None
    assert SoftmaxFamily().propose(make_ctx(spec=spec)) == []


def test_refuses_fixed_launch_and_other_patterns(ctx):
    data = ctx.spec.model_dump(mode="json")
    data["launch"]["policy"] = "fixed"
    assert SoftmaxFamily().propose(make_ctx(spec=type(ctx.spec).model_validate(data))) == []
    # a LayerNorm spec (weights, eps) and an RMSNorm spec are not softmax
    for name in ("layernorm", "rmsnorm"):
        path = EXAMPLE.parents[1] / name / f"{name}.cu"
        spec = load_spec(str(path) + ".toml").kernels[name]
        assert match_spec(spec) is None
        assert SoftmaxFamily().propose(make_ctx(spec=spec, source=path.read_text(), name=name)) == []


F32_I64 = """
__global__ void row_softmax(const float* inp, float* out, long long rows, long long cols)
{
    long long r = blockIdx.x;
    if (r >= rows) return;
    float m = -1e30f, s = 0.f;
    for (long long i = 0; i < cols; ++i) m = fmaxf(m, inp[r * cols + i]);
    for (long long i = 0; i < cols; ++i) s += expf(inp[r * cols + i] - m);
    for (long long i = 0; i < cols; ++i) out[r * cols + i] = expf(inp[r * cols + i] - m) / s;
}
"""
F32_I64_SPEC = """
[kernel.row_softmax]
args = [
  { name = "inp", role = "in", dtype = "f32", shape = ["R", "C"] },
  { name = "out", role = "out", dtype = "f32", shape = ["R", "C"] },
  { name = "rows", role = "scalar", dtype = "i64", value = "R" },
  { name = "cols", role = "scalar", dtype = "i64", value = "C" },
]
launch = { grid = ["R"], block = [1], policy = "free" }
[kernel.row_softmax.check]
sizes = [{ R = 3, C = 100 }]
[kernel.row_softmax.bench]
sizes = [{ R = 4096, C = 2048 }]
"""


def test_f32_i64_cxx_linkage_compiles_without_spills():
    """f32 (4 per vector, no raw tier), i64 sizes, C++ linkage, other names: every candidate compiles spill-free."""
    spec = parse_spec(F32_I64_SPEC).kernels["row_softmax"]
    cands = SoftmaxFamily().propose(make_ctx(spec=spec, source=F32_I64))
    assert 12 <= len(cands) <= 30
    for c in cands:
        k = find_kernel(c.source, "row_softmax")
        check_signature(spec, k)
        assert not k.text.lstrip().startswith("extern")
        assert "long long" in c.kernel_text and "ptxf_softmax<" in c.kernel_text
        assert "true>(" not in c.kernel_text.split("__global__")[-1]  # f32: no raw tier
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log
        assert spill_free(r.log), f"{c.description}: {r.log}"


def test_f16_inside_extern_c_block_compiles():
    """f16 inside `extern "C" { ... }`: the helpers get C++ linkage, the kernel keeps C linkage."""
    src = EXAMPLE.read_text().replace("cuda_bf16.h", "cuda_fp16.h").replace("__nv_bfloat16", "__half")
    src = src.replace("__bfloat162float", "__half2float").replace("__float2bfloat16", "__float2half")
    src = src.replace('extern "C" __global__', 'extern "C" {\n__global__') + "}\n"
    spec = with_args(load_spec(str(EXAMPLE) + ".toml").kernels["softmax"], x={"dtype": "f16"}, y={"dtype": "f16"})
    cands = SoftmaxFamily().propose(make_ctx(spec=spec, source=src))
    assert cands
    for c in (cands[0], cands[-1]):
        assert 'extern "C++" {' in c.kernel_text and "__half" in c.kernel_text
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log
        assert r.lowered_name == "softmax" and spill_free(r.log)


def test_a_kernel_that_calls_no_exponential_gets_no_softmax():
    """The family matches signatures; a kernel of the same signature that never calls an exponential (a prefix sum,
    a row copy) is not a softmax, and proposing the skeleton for it would only spend GPU time on candidates that
    compute another function. A comment naming ``expf`` is no evidence."""
    ctx = make_ctx()
    assert SoftmaxFamily().propose(ctx)
    body = ctx.kernel.text
    plain = body.replace("__expf(", "(").replace("expf(", "(").replace("exp(", "(") + "\n// expf( in a comment\n"
    bare = make_ctx(source=ctx.source.replace(body, plain))
    assert "exp" not in bare.kernel.text.split("//")[0] and SoftmaxFamily().propose(bare) == []


COL_SOFTMAX = """#include <cuda_bf16.h>
extern "C" __global__ void softmax(const __nv_bfloat16* x, __nv_bfloat16* y, int M, int N)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    float mx = -INFINITY;
    for (int i = 0; i < M; i++) mx = fmaxf(mx, __bfloat162float(x[i * N + j]));
    float sum = 0.0f;
    for (int i = 0; i < M; i++) sum += expf(__bfloat162float(x[i * N + j]) - mx);
    for (int i = 0; i < M; i++) y[i * N + j] = __float2bfloat16(expf(__bfloat162float(x[i * N + j]) - mx) / sum);
}
"""


def test_a_softmax_down_the_columns_gets_no_row_softmax(ctx):
    """The same signature and spec as a row softmax, but each thread walks a column (a softmax over dimension 0):
    the skeleton normalises rows, another function, so the family proposes nothing (it once took the budget)."""
    from ptxfactory.search.base import walks_columns
    col = example_ctx("softmax", source=COL_SOFTMAX)
    assert walks_columns(col.kernel.text, "x") and not walks_columns(ctx.kernel.text, "x")
    assert SoftmaxFamily().propose(col) == []
    row = COL_SOFTMAX.replace("x[i * N + j]", "x[j * N + i]")  # the same loops reading rows: proposed
    assert SoftmaxFamily().propose(example_ctx("softmax", source=row))


LOG_SOFTMAX = """#include <cuda_bf16.h>
extern "C" __global__ void softmax(const __nv_bfloat16* x, __nv_bfloat16* y, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    const __nv_bfloat16* xr = x + (size_t)row * N;
    __nv_bfloat16* yr = y + (size_t)row * N;
    float mx = -INFINITY;
    for (int j = 0; j < N; j++) mx = fmaxf(mx, __bfloat162float(xr[j]));
    float sum = 0.0f;
    for (int j = 0; j < N; j++) sum += expf(__bfloat162float(xr[j]) - mx);
    float lse = mx + logf(sum);
    for (int j = 0; j < N; j++) yr[j] = __float2bfloat16(__bfloat162float(xr[j]) - lse);
}
"""


def test_a_log_softmax_gets_no_softmax_skeleton():
    """A log-softmax has the softmax's signature and calls ``expf``, but stores ``x - max - log(sum)``: the skeleton
    (``exp(x - max) / sum``) computes another function, so the family refuses and says why, whether the store goes
    through a row pointer (``yr[j] = ...``, a helper's trial drew 24 such candidates) or into y itself."""
    fam = SoftmaxFamily()
    aliased = example_ctx("softmax", source=LOG_SOFTMAX)
    assert fam.propose(aliased) == [] and "logarithm" in fam.why_not(aliased)
    direct = LOG_SOFTMAX.replace("yr[j] =", "y[(size_t)row * N + j] =")
    assert fam.propose(example_ctx("softmax", source=direct)) == []
    # the same kernel storing the softmax is proposed: the refusal reads the store, not the file
    plain = LOG_SOFTMAX.replace("__bfloat162float(xr[j]) - lse)", "expf(__bfloat162float(xr[j]) - mx) / sum)")
    assert fam.propose(example_ctx("softmax", source=plain))


def test_a_square_buffer_is_named_in_the_refusal():
    """A square [N, N] input is not x[R, C] to the row families: the refusal says so rather than counting no input."""
    spec = parse_spec("""
[kernel.k]
args = [
  { name = "A", role = "in", dtype = "f32", shape = ["N", "N"] },
  { name = "C", role = "out", dtype = "f32", shape = ["N", "N"] },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["N"], block = [256], policy = "free" }
[kernel.k.check]
sizes = [{ N = 33 }]
[kernel.k.bench]
sizes = [{ N = 4096 }]
""").kernels["k"]
    assert match_spec(spec) is None and "A is [N, N]: a square buffer" in match_spec.why(spec)


def test_an_activation_calling_exp_is_no_softmax():
    """A SELU (an exponential, no loop or reduction: each output its own element's function) drew the family's 24
    candidates, which could only fail verification (a new user's trial, 2026-12-05); the family now says why not."""
    selu = """extern "C" __global__ void softmax(const float* x, float* y, int M, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M * N) { float v = x[i]; y[i] = v > 0.0f ? 1.0507f * v : 1.7581f * (expf(v) - 1.0f); }
}
"""
    c = make_ctx(source=selu)
    why = SoftmaxFamily().why_not(c)
    assert why is not None and "no loop, shuffle, barrier or atomic" in why
    assert SoftmaxFamily().propose(c) == []
