"""CPU tests of the "rowwise" family's variants of its class (issue 12): per-row statistics outputs, an output
dtype other than the input's, scalars it does not need (and sizes in another order), a residual added to x
before the normalisation (its sum optionally stored: the "fused add + norm" of transformer blocks).

Each variant is a small naive kernel written as a newcomer would (one thread per row, or one block per row),
with its spec: ``match_spec`` accepts it, the candidates compile with NVRTC for sm_90a without spills and keep
the user's signature (names, types, order) in the user's file. Where g++ exists, candidates' kernel text runs
on the host under an emulation of the CUDA features it uses (one std::thread per CUDA thread, shuffles and
barriers, bounds- and alignment-checked ``__ldg``), and every output (y, h, each statistic) is compared with a
NumPy reference: this is what checks which statistic goes to which buffer. Specs the family must still refuse
close the file.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.harness.source import check_signature, find_kernel
from ptxfactory.protocol import evaluate, parse_spec
from ptxfactory.protocol.result import GpuFacts
from ptxfactory.search.generators.rowwise import (RowwiseConfig, RowwiseNormFamily, full_fits, match_spec,
                                                  residual_added, variants)
from _generator_support import example_ctx
from _host_cuda import HOST_BLOCKS

_CT = {"f32": "float", "bf16": "__nv_bfloat16", "i32": "int", "i64": "long long"}


def make_spec(kernel: str, args: str, bench=((64, 1024), (16, 4096))):
    """A spec from one line per argument: ``name role dtype shape|value`` (shape ``R,C``); launch free."""
    rows = []
    for line in args.strip().splitlines():
        name, role, dtype, rest = line.split()
        if role == "scalar":
            value = rest if re.fullmatch(r"[A-Za-z_]\w*", rest) else float(rest) if "." in rest or "e" in rest else int(rest)
            rows.append(f'{{ name = "{name}", role = "scalar", dtype = "{dtype}", value = {value if not isinstance(value, str) else chr(34) + value + chr(34)} }}')
        else:
            shape = ", ".join(f'"{d}"' for d in rest.split(","))
            rows.append(f'{{ name = "{name}", role = "{role}", dtype = "{dtype}", shape = [{shape}] }}')
    bench_sizes = ", ".join(f"{{ R = {r}, C = {c} }}" for r, c in bench)
    text = (f'[kernel.{kernel}]\narch = "sm_90a"\nargs = [\n  ' + ",\n  ".join(rows) + "\n]\n"
            f'launch = {{ grid = ["R"], block = [256], policy = "free" }}\n'
            f"[kernel.{kernel}.check]\nsizes = [{{ R = 3, C = 100 }}]\n[kernel.{kernel}.bench]\nsizes = [{bench_sizes}]\n")
    return parse_spec(text).kernels[kernel]


def ctx_of(source: str, spec):
    return example_ctx("rmsnorm", spec=spec, source="#include <cuda_bf16.h>\n" + source)


# ---------------------------------------------------------------- the naive kernels, one per variant


@dataclass(frozen=True)
class Case:
    kernel: str
    source: str
    args: str
    norm: str  # what the kernel computes: "rms" or "layer"
    stats: tuple[str, ...] = ()  # the statistic in each [R] output, in signature order
    residual: bool = False


CASES = {
    # RMSNorm, one thread per row, f32; stores the rstd per row
    "rms_rstd": Case("rms_rstd", r"""
__global__ void rms_rstd(const float* x, const float* w, float* y, float* rstd, int R, int C, float eps)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    float ss = 0.f;
    for (int i = 0; i < C; ++i) ss += x[r * C + i] * x[r * C + i];
    float inv = rsqrtf(ss / C + eps);
    rstd[r] = inv;
    for (int i = 0; i < C; ++i) y[r * C + i] = x[r * C + i] * inv * w[i];
}
""", """
x in f32 R,C
w in f32 C
y out f32 R,C
rstd out f32 R
R scalar i32 R
C scalar i32 C
eps scalar f32 1e-5
""", "rms", ("rstd",)),
    # LayerNorm, one block of 256 per row, bf16 in/out; mean and rstd per row in f32 (as PyTorch's forward saves them)
    "ln_mean_rstd": Case("ln_mean_rstd", r"""
__global__ void ln_mean_rstd(const __nv_bfloat16* x, const __nv_bfloat16* gamma, const __nv_bfloat16* beta,
                             __nv_bfloat16* y, float* mean_out, float* rstd_out, int M, int N, float eps)
{
    __shared__ float part[256];
    int row = blockIdx.x;
    float s = 0.f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) s += __bfloat162float(x[(size_t)row * N + i]);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = 128; k > 0; k /= 2) { if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k]; __syncthreads(); }
    float mean = part[0] / N;
    __syncthreads();
    float q = 0.f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) { float d = __bfloat162float(x[(size_t)row * N + i]) - mean; q += d * d; }
    part[threadIdx.x] = q;
    __syncthreads();
    for (int k = 128; k > 0; k /= 2) { if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k]; __syncthreads(); }
    float inv_std = rsqrtf(part[0] / N + eps);
    if (threadIdx.x == 0) { mean_out[row] = mean; rstd_out[row] = inv_std; }
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = (__bfloat162float(x[(size_t)row * N + i]) - mean) * inv_std;
        y[(size_t)row * N + i] = __float2bfloat16(v * __bfloat162float(gamma[i]) + __bfloat162float(beta[i]));
    }
}
""", """
x in bf16 R,C
gamma in bf16 C
beta in bf16 C
y out bf16 R,C
mean_out out f32 R
rstd_out out f32 R
M scalar i32 R
N scalar i32 C
eps scalar f32 1e-5
""", "layer", ("mean", "rstd")),
    # RMSNorm, f32 in, bf16 out (an output dtype other than the input's), one thread per row
    "rms_f32_to_bf16": Case("rms_f32_to_bf16", r"""
__global__ void rms_f32_to_bf16(const float* x, const float* w, __nv_bfloat16* y, int R, int C, float eps)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    float ss = 0.f;
    for (int i = 0; i < C; ++i) ss += x[r * C + i] * x[r * C + i];
    float k = rsqrtf(ss / C + eps);
    for (int i = 0; i < C; ++i) y[r * C + i] = __float2bfloat16(x[r * C + i] * k * w[i]);
}
""", """
x in f32 R,C
w in f32 C
y out bf16 R,C
R scalar i32 R
C scalar i32 C
eps scalar f32 1e-6
""", "rms"),
    # LayerNorm, bf16 in, f32 out, no weight or bias
    "ln_bf16_to_f32": Case("ln_bf16_to_f32", r"""
__global__ void ln_bf16_to_f32(const __nv_bfloat16* x, float* y, int R, int C, float eps)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    float s = 0.f;
    for (int i = 0; i < C; ++i) s += __bfloat162float(x[r * C + i]);
    float mu = s / C, v = 0.f;
    for (int i = 0; i < C; ++i) { float d = __bfloat162float(x[r * C + i]) - mu; v += d * d; }
    float k = rsqrtf(v / C + eps);
    for (int i = 0; i < C; ++i) y[r * C + i] = (__bfloat162float(x[r * C + i]) - mu) * k;
}
""", """
x in bf16 R,C
y out f32 R,C
R scalar i32 R
C scalar i32 C
eps scalar f32 1e-5
""", "layer"),
    # scalars it does not need (an int flag, a float alpha) and sizes in another order; y before x
    "rms_scalars": Case("rms_scalars", r"""
__global__ void rms_scalars(float* out, const float* inp, float epsilon, int flag, long long cols, float alpha,
                            const float* g, int rows)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float ss = 0.f;
    for (long long i = 0; i < cols; ++i) ss += inp[r * cols + i] * inp[r * cols + i];
    float k = rsqrtf(ss / cols + epsilon);
    for (long long i = 0; i < cols; ++i) out[r * cols + i] = inp[r * cols + i] * k * g[i];
}
""", """
out out f32 R,C
inp in f32 R,C
epsilon scalar f32 1e-6
flag scalar i32 0
cols scalar i64 C
alpha scalar f32 1.0
g in f32 C
rows scalar i32 R
""", "rms"),
    # RMSNorm, bf16 in, weight and out, one warp per row (the forms of full_fits: full occupancy, pipelined short rows)
    "rms_bf16": Case("rms_bf16", r"""
__global__ void rms_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int R, int C, float eps)
{
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= R) return;
    float ss = 0.f;
    for (int i = lane; i < C; i += 32) { float v = __bfloat162float(x[r * C + i]); ss += v * v; }
    for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float k = rsqrtf(ss / C + eps);
    for (int i = lane; i < C; i += 32) y[r * C + i] = __float2bfloat16(__bfloat162float(x[r * C + i]) * k * __bfloat162float(w[i]));
}
""", """
x in bf16 R,C
w in bf16 C
y out bf16 R,C
R scalar i32 R
C scalar i32 C
eps scalar f32 1e-6
""", "rms"),
    # fused residual add + RMSNorm, bf16, one block per row: h = x + residual to residual_out, y = rmsnorm(h) * w
    "add_rms": Case("add_rms", r"""
__global__ void add_rms(const __nv_bfloat16* x, const __nv_bfloat16* residual, const __nv_bfloat16* w,
                        __nv_bfloat16* y, __nv_bfloat16* residual_out, int R, int C, float eps)
{
    __shared__ float part[128];
    int row = blockIdx.x;
    float ss = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float h = __bfloat162float(x[row * C + i]) + __bfloat162float(residual[row * C + i]);
        residual_out[row * C + i] = __float2bfloat16(h);
        ss += h * h;
    }
    part[threadIdx.x] = ss;
    __syncthreads();
    for (int k = 64; k > 0; k /= 2) { if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k]; __syncthreads(); }
    float inv = rsqrtf(part[0] / C + eps);
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float h = __bfloat162float(x[row * C + i]) + __bfloat162float(residual[row * C + i]);
        y[row * C + i] = __float2bfloat16(h * inv * __bfloat162float(w[i]));
    }
}
""", """
x in bf16 R,C
residual in bf16 R,C
w in bf16 C
y out bf16 R,C
residual_out out bf16 R,C
R scalar i32 R
C scalar i32 C
eps scalar f32 1e-6
""", "rms", residual=True),
    # residual updated in place (inout) + LayerNorm, f32, one thread per row, through variables
    "add_ln_inplace": Case("add_ln_inplace", r"""
__global__ void add_ln_inplace(const float* x, float* res, const float* g, const float* bta, float* out,
                               int R, int C, float eps)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    float s = 0.f;
    for (int i = 0; i < C; ++i) {
        float a = x[r * C + i];
        float b = res[r * C + i];
        float h = a + b;
        res[r * C + i] = h;
        s += h;
    }
    float m = s / C, q = 0.f;
    for (int i = 0; i < C; ++i) { float d = res[r * C + i] - m; q += d * d; }
    float k = rsqrtf(q / C + eps);
    for (int i = 0; i < C; ++i) out[r * C + i] = (res[r * C + i] - m) * k * g[i] + bta[i];
}
""", """
x in f32 R,C
res inout f32 R,C
g in f32 C
bta in f32 C
out out f32 R,C
R scalar i32 R
C scalar i32 C
eps scalar f32 1e-5
""", "layer", residual=True),
    # everything at once: bf16 x + residual, f32 y, the sum stored, rstd per row (bf16), an unused flag
    "add_rms_all": Case("add_rms_all", r"""
__global__ void add_rms_all(const __nv_bfloat16* x, const __nv_bfloat16* skip, int flag, float* y,
                            __nv_bfloat16* hidden, __nv_bfloat16* inv_rms, const __nv_bfloat16* w, int R, int C, float eps)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    float ss = 0.f;
    for (int i = 0; i < C; ++i) {
        float h = __bfloat162float(x[r * C + i]) + __bfloat162float(skip[r * C + i]);
        hidden[r * C + i] = __float2bfloat16(h);
        ss += h * h;
    }
    float k = rsqrtf(ss / C + eps);
    inv_rms[r] = __float2bfloat16(k);
    for (int i = 0; i < C; ++i)
        y[r * C + i] = (__bfloat162float(x[r * C + i]) + __bfloat162float(skip[r * C + i])) * k * __bfloat162float(w[i]);
}
""", """
x in bf16 R,C
skip in bf16 R,C
flag scalar i32 1
y out f32 R,C
hidden out bf16 R,C
inv_rms out bf16 R
w in bf16 C
R scalar i32 R
C scalar i32 C
eps scalar f32 1e-6
""", "rms", ("rstd",), residual=True),
    # LayerNorm with the variance and the std per row (names say which)
    "ln_var_sigma": Case("ln_var_sigma", r"""
__global__ void ln_var_sigma(const float* x, float* y, float* sigma, float* variance, int R, int C, float eps)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    float s = 0.f;
    for (int i = 0; i < C; ++i) s += x[r * C + i];
    float m = s / C, q = 0.f;
    for (int i = 0; i < C; ++i) q += (x[r * C + i] - m) * (x[r * C + i] - m);
    variance[r] = q / C;
    sigma[r] = sqrtf(q / C + eps);
    for (int i = 0; i < C; ++i) y[r * C + i] = (x[r * C + i] - m) / sqrtf(q / C + eps);
}
""", """
x in f32 R,C
y out f32 R,C
sigma out f32 R
variance out f32 R
R scalar i32 R
C scalar i32 C
eps scalar f32 1e-5
""", "layer", ("std", "var")),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    c = CASES[request.param]
    spec = make_spec(c.kernel, c.args)
    ctx = ctx_of(c.source, spec)
    return c, ctx, RowwiseNormFamily().propose(ctx)


def _right_form(c: Case, cand) -> bool:
    """The candidate computes the kernel's function: its norm, and the statistics in the right buffers."""
    return cand.params["norm"] == c.norm and cand.params.get("stats", "") == ",".join(c.stats)


def test_match_spec_accepts_the_variant(case):
    c, ctx, cands = case
    m = match_spec(ctx.spec)
    assert m is not None
    assert (m.res is not None) == c.residual
    assert len(m.stats) == len(c.stats)
    assert cands, "no candidates"
    assert sum(_right_form(c, k) for k in cands) >= 1
    assert len({k.key for k in cands}) == len(cands)


def test_statistics_follow_the_evidence(case):
    """Outputs whose names or stored values say what they hold get that statistic only: no other assignment."""
    c, ctx, cands = case
    if c.stats:
        assert {k.params["stats"] for k in cands} == {",".join(c.stats)}
    else:
        assert all("stats" not in k.params for k in cands)


def test_candidates_compile_without_spills(case):
    c, ctx, cands = case
    right = [k for k in cands if _right_form(c, k)]
    for k in {id(x): x for x in (cands[0], cands[-1], right[0], right[-1])}.values():
        r = compile_candidate(k, "sm_90a")
        assert not isinstance(r, CompileFailed), f"{k.description}: {r.log[-3000:]}"
        res = r.resources
        assert res.spill_stores == 0 and res.local_bytes == 0, f"{k.description}: {res.summary()}"


def test_candidates_keep_the_users_signature(case):
    c, ctx, cands = case
    for k in cands:
        kd = find_kernel(k.source, c.kernel)
        check_signature(ctx.spec, kd)
        assert [(p.name, p.type, p.is_pointer, p.is_const) for p in kd.params] == [
            (p.name, p.type, p.is_pointer, p.is_const) for p in ctx.kernel.params]
        head, tail = ctx.source[: ctx.kernel.start_byte], ctx.source[ctx.kernel.end_byte:]
        assert k.source == head + k.kernel_text + tail


def test_residual_is_added_only_with_evidence():
    assert residual_added("float h = __bfloat162float(x[i]) + __bfloat162float(r[i]);", "x", "r")
    assert residual_added("float a = x[i]; float b = r[i]; float h = a + b;", "x", "r")
    assert residual_added("float a = x[i]; a += r[i];", "x", "r")
    assert not residual_added("float h = x[i] * r[i];", "x", "r")
    assert not residual_added("float a = x[i]; float b = r[i] + 1.f; s += a * b;", "x", "r")
    assert not residual_added("y[i] = x[i] + 1; z[i] = r[i];", "x", "r")


NO_EVIDENCE = r"""
__global__ void rms_st(const float* x, const float* w, float* y, float* st, int R, int C, float eps)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    float ss = 0.f;
    for (int i = 0; i < C; ++i) ss += x[r * C + i] * x[r * C + i];
    float t = ss / C + eps;
    st[r] = t;
    for (int i = 0; i < C; ++i) y[r * C + i] = x[r * C + i] / sqrtf(t) * w[i];
}
"""


def test_statistics_without_evidence_are_the_plausible_ones():
    """An [R] output whose name and stored values say nothing: each plausible statistic, the first with the
    whole space, the others one probe per norm they fit."""
    spec = make_spec("rms_st", CASES["rms_rstd"].args.replace("rstd", "st"))
    ctx = ctx_of(NO_EVIDENCE, spec)
    forms = variants(match_spec(spec), ctx.kernel.text)
    assert [f.stats[0][2] for f, _, _ in forms] == ["rstd", "mean", "rms"]
    assert [ev for _, _, ev in forms] == [True, False, False]
    by = {}
    for k in RowwiseNormFamily().propose(ctx):
        by.setdefault(k.params["stats"], []).append(k.params["norm"])
    assert by["mean"] == ["layer"] and by["rms"] == ["rms"] and len(by["rstd"]) > 10


# ---------------------------------------------------------------- refusals


REFUSED = {
    # an extra input of another shape (the transpose of x's)
    "other_shape_input": ("x in f32 R,C\nt in f32 C,R\ny out f32 R,C\nR scalar i32 R\nC scalar i32 C\neps scalar f32 1e-5", ""),
    # a per-row input
    "per_row_input": ("x in f32 R,C\nsc in f32 R\ny out f32 R,C\nR scalar i32 R\nC scalar i32 C\neps scalar f32 1e-5", ""),
    # a column reduction beside the normalisation
    "column_output": ("x in f32 R,C\ny out f32 R,C\ncs out f32 C\nR scalar i32 R\nC scalar i32 C\neps scalar f32 1e-5", ""),
    # three per-row outputs
    "three_stats": ("x in f32 R,C\ny out f32 R,C\na out f32 R\nb out f32 R\nc out f32 R\nR scalar i32 R\nC scalar i32 C\neps scalar f32 1e-5", ""),
    # a residual of another dtype
    "residual_dtype": ("x in f32 R,C\nr in bf16 R,C\ny out f32 R,C\nR scalar i32 R\nC scalar i32 C\neps scalar f32 1e-5", ""),
    # two [R, C] outputs without a residual
    "two_outputs": ("x in f32 R,C\ny out f32 R,C\nz out f32 R,C\nR scalar i32 R\nC scalar i32 C\neps scalar f32 1e-5", ""),
    # two small float constants, neither named eps
    "two_eps": ("x in f32 R,C\ny out f32 R,C\nR scalar i32 R\nC scalar i32 C\na scalar f32 1e-5\nb scalar f32 1e-3", ""),
    # an integer output
    "int_output": ("x in f32 R,C\ny out i32 R,C\nR scalar i32 R\nC scalar i32 C\neps scalar f32 1e-5", ""),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refuses(name):
    args, _ = REFUSED[name]
    assert match_spec(make_spec("k", args)) is None


def test_refuses_a_residual_that_is_not_added():
    """A second [R, C] input that the kernel multiplies (a gate), not adds: no candidates."""
    src = CASES["add_rms"].source.replace(
        "__bfloat162float(x[row * C + i]) + __bfloat162float(residual[row * C + i])",
        "__bfloat162float(x[row * C + i]) * __bfloat162float(residual[row * C + i])")
    spec = make_spec("add_rms", CASES["add_rms"].args)
    ctx = ctx_of(src, spec)
    assert match_spec(spec) is not None and variants(match_spec(spec), ctx.kernel.text) == []
    assert RowwiseNormFamily().propose(ctx) == []


# ---------------------------------------------------------------- numerics: the kernel text on the host

SHIM = r"""
#include <barrier>
#include <math.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
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
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
struct __nv_bfloat16 { unsigned short u; };
struct ptxf_dim { unsigned x; };
thread_local ptxf_dim threadIdx, blockIdx;
inline ptxf_dim gridDim;
inline std::vector<std::pair<const char*, const char*>> g_ranges;
template <class T> inline T* checked(T* p) {
    const char* b = (const char*)p;
    if ((uintptr_t)b % sizeof(T)) { printf("misaligned %zu-byte access\n", sizeof(T)); fflush(stdout); std::abort(); }
    for (auto& r : g_ranges) if (b >= r.first && b + sizeof(T) <= r.second) return p;
    printf("out-of-bounds %zu-byte access\n", sizeof(T)); fflush(stdout); std::abort();
}
template <class T> inline T __ldg(const T* p) { return *checked(p); }
template <class T> inline T __ldcs(const T* p) { return *checked(p); }
template <class T> inline void __stcs(T* p, T v) { *checked(p) = v; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
inline float __bfloat162float(__nv_bfloat16 v) { return __uint_as_float((unsigned)v.u << 16); }
inline __nv_bfloat16 __float2bfloat16(float f) {
    unsigned u = __float_as_uint(f);
    if (std::isnan(f)) return {(unsigned short)0x7fc0};
    return {(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 v) { return v.u; }
""" + HOST_BLOCKS + r"""template <class T> T* load(const std::string& path, long n, long offset) {  // `offset` elements past a 256-byte boundary
    char* base = (char*)aligned_alloc(256, ((n + offset) * sizeof(T) + 256 + 255) / 256 * 256);
    T* p = (T*)base + offset;
    FILE* f = fopen(path.c_str(), "rb");
    if (n && fread(p, sizeof(T), n, f) != (size_t)n) { printf("short read %s\n", path.c_str()); std::abort(); }
    fclose(f);
    g_ranges.push_back({(const char*)p, (const char*)(p + n)});
    return p;
}
template <class T> void save(const std::string& path, const T* p, long n) {
    FILE* f = fopen(path.c_str(), "wb"); fwrite(p, sizeof(T), n, f); fclose(f);
}
"""


def _count(shape: list[str]) -> str:
    return " * ".join(shape)


def _main(c: Case, spec) -> str:
    """main(grid, block, dir, R, C, offset): every buffer read from dir/NAME.bin (offset elements past a 256-byte
    boundary for inputs), the kernel launched, every buffer written back."""
    lines, call = [], []
    for a in spec.args:
        if a.is_buffer:
            n = _count([d.strip() for d in a.shape])
            off = "off" if a.role != "out" else "0"
            lines.append(f"    {_CT[a.dtype.value]}* {a.name} = load<{_CT[a.dtype.value]}>(dir + \"/{a.name}.bin\", {n}, {off});")
            call.append(a.name)
        else:
            v = a.value.strip() if isinstance(a.value, str) else repr(a.value)
            call.append(f"({_CT[a.dtype.value]})({v})")
    saves = [f"    save(dir + \"/{a.name}.bin\", {a.name}, {_count([d.strip() for d in a.shape])});" for a in spec.args if a.is_buffer]
    return ("int main(int argc, char** argv) {\n    int grid = atoi(argv[1]), block = atoi(argv[2]); std::string dir = argv[3];\n"
            "    long R = atol(argv[4]), C = atol(argv[5]), off = atol(argv[6]);\n" + "\n".join(lines)
            + f"\n    gridDim.x = grid;\n    launch(grid, block, [&] {{ {c.kernel}({', '.join(call)}); }});\n" + "\n".join(saves) + "\n    printf(\"ok\\n\");\n    return 0;\n}\n")


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _reference(c: Case, spec, vals: dict[str, np.ndarray], R: int, C: int) -> dict[str, np.ndarray]:
    """What the kernel computes, in float64 from the inputs' stored values."""
    bufs = [a for a in spec.args if a.is_buffer]
    ins2 = [a.name for a in bufs if a.role in ("in", "inout") and len(a.shape) == 2]
    vecs = [a.name for a in bufs if a.role == "in" and [d.strip() for d in a.shape] == ["C"]]
    m = match_spec(spec)
    eps = next(float(a.value) for a in spec.args if a.name == m.eps_arg)
    h = vals[ins2[0]] + (vals[ins2[1]] if len(ins2) > 1 else 0)
    if c.norm == "layer":
        mean = h.mean(axis=1, keepdims=True)
        m2 = ((h - mean) ** 2).mean(axis=1, keepdims=True)
        yv = (h - mean) / np.sqrt(m2 + eps)
    else:
        mean = np.zeros((R, 1))
        m2 = (h * h).mean(axis=1, keepdims=True)
        yv = h / np.sqrt(m2 + eps)
    if vecs:
        yv = yv * vals[vecs[0]]
    if len(vecs) > 1:
        yv = yv + vals[vecs[1]]
    stat = {"mean": mean, "rstd": 1 / np.sqrt(m2 + eps), "var": m2, "std": np.sqrt(m2 + eps), "rms": np.sqrt(m2 + eps)}
    outs2 = [a.name for a in bufs if a.role == "out" and len(a.shape) == 2]
    out = {m.y: yv}
    if m.h:
        out[m.h] = h
    for a, s in zip([a.name for a in bufs if a.role == "out" and len(a.shape) == 1], c.stats):
        out[a] = stat[s][:, 0]
    assert set(outs2) <= set(out)
    return out


EMU_SIZES = [(5, 8), (3, 37), (2, 1), (3, 4100), (2, 4104), (9, 256)]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) for the host emulation")
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_text_on_host_emulation(name, tmp_path):
    """The right form's first and last configurations, a staged one, one with w preloaded (in a register cache, and in
    a staged one whose every cached vector's w is in registers) and a pipelined one (a
    persistent grid of 2 SMs' blocks: each block takes several groups of rows, the last ones partial), run on the
    host: y, h and every per-row statistic match
    the NumPy reference at sizes that take the vector path, the scalar path and re-reads past the register cache,
    with the inputs 16-byte aligned and not; nothing loaded out of bounds or misaligned."""
    c = CASES[name]
    spec = make_spec(c.kernel, c.args)
    ctx = ctx_of(c.source, spec)
    right = [k for k in RowwiseNormFamily().propose(ctx) if _right_form(c, k)]
    assert right
    rng = np.random.default_rng(7)
    staged = [k for k in right if k.params.get("stage")][:1]  # the cache in shared memory, filled by plain copies here
    # w (b) preloaded: proposed where the shortest bench row is short for the first configuration
    short = ctx_of(c.source, make_spec(c.kernel, c.args, bench=((64, 256), (16, 4096))))
    wpre = [k for k in RowwiseNormFamily().propose(short) if _right_form(c, k) and k.params.get("wpre")][:1]
    assert bool(wpre) == any(a.role == "in" and len(a.shape) == 1 and a.shape[0].strip() == "C" for a in spec.args
                             if a.is_buffer), name
    # pipelined: a job on a GPU (facts) of 2 SMs, for the forms of full_fits; also run on grids of 1 and 2 blocks, each
    # block then taking several groups of rows
    two_sms = replace(short, facts=GpuFacts(name="two SMs", arch="sm_90a", sm_count=2, l2_bytes=1 << 20, copy_gbps=1.0,
                                            peak_gbps=1.0))
    pipe = [k for k in RowwiseNormFamily().propose(two_sms) if _right_form(c, k) and k.params.get("persist")]
    assert bool(pipe) == full_fits(match_spec(spec)), name
    assert all(k.params["persist"] == 2 * RowwiseConfig(k.params["block"], 1, k.params["vecs"], persist=1).min_blocks
               for k in pipe)
    # a staged cache with w (b) preloaded (every cached vector's w in registers: the staged cluster ones' template; here
    # without a cluster, which the host cannot emulate), where the kernel has a weight or bias
    forms = [f for f, _, _ in variants(match_spec(spec), ctx.kernel.text) if [s for _, _, s in f.stats] == list(c.stats)]
    staged_wpre = [RowwiseNormFamily().instantiate(ctx, forms[0], RowwiseConfig(256, 8, 4, norm=c.norm, stage=True, wpre=True))
                   for _ in forms[:1] if wpre]
    for cand in {k.key: k for k in (right[0], right[-1], *staged, *wpre, *pipe[:2], *staged_wpre)}.values():
        text = SHIM + cand.source.replace("#include <cuda_bf16.h>\n", "").replace(  # a staged cache: one block's, static
            "extern __shared__ __align__(16) unsigned char ptxf_stage[];", "alignas(16) static unsigned char ptxf_stage[1 << 17];"
        ) + _main(c, spec)
        src = tmp_path / f"emu_{hashlib.sha1(text.encode()).hexdigest()[:8]}.cpp"
        src.write_text(text)
        exe = tmp_path / "emu"
        build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", str(src), "-o", str(exe), "-pthread"],
                               capture_output=True, text=True)
        assert build.returncode == 0, build.stderr[-3000:]
        for R, C in EMU_SIZES:
            for off in (0, 1):
                vals, files = {}, {}
                for a in spec.args:
                    if not a.is_buffer:
                        continue
                    n = R * C if len(a.shape) == 2 else R if a.shape[0].strip() == "R" else C
                    v = rng.normal(0.5 if a.role != "out" else 0.0, 1.0, n).astype(np.float32)
                    if a.role == "out":
                        v[:] = np.nan
                    bits = _bf16_bits(v) if a.dtype.value == "bf16" else v
                    vals[a.name] = (_from_bf16(bits) if a.dtype.value == "bf16" else v).astype(np.float64).reshape(
                        (R, C) if len(a.shape) == 2 else (n,))
                    bits.tofile(tmp_path / f"{a.name}.bin")
                grid = evaluate(cand.launch.grid[0], {"R": R, "C": C})
                for g in sorted({grid, min(grid, 1), min(grid, 2)} if cand.params.get("persist") else {grid}):
                    for a in spec.args:  # the outputs back to NaN between grids
                        if a.is_buffer and a.role == "out":
                            (_bf16_bits(np.full(vals[a.name].size, np.nan, np.float32)) if a.dtype.value == "bf16" else
                             np.full(vals[a.name].size, np.nan, np.float32)).tofile(tmp_path / f"{a.name}.bin")
                    _emulate(c, spec, cand, exe, tmp_path, vals, g, R, C, off)


def _emulate(c: Case, spec, cand, exe, tmp_path, vals: dict, grid: int, R: int, C: int, off: int) -> None:
    """One launch of the emulation ``exe`` on the inputs in ``tmp_path``: every output matches the reference."""
    run = subprocess.run([str(exe), str(grid), str(cand.launch.block[0]), str(tmp_path), str(R), str(C), str(off)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", f"{cand.description} at {R}x{C}: {run.stdout[-300:]}"
    _compare(spec, tmp_path, _reference(c, spec, vals, R, C), 2e-4, 2e-4, f"{cand.description} at {R}x{C} offset {off} grid {grid}")


def _compare(spec, tmp_path, want: dict[str, np.ndarray], rtol: float, atol: float, label: str) -> None:
    """Each output the emulation wrote to ``tmp_path`` (NAME.bin) that ``want`` names matches it: within 1e-2
    (relative and absolute) for a bf16 buffer, ``rtol``/``atol`` for an f32 one."""
    for a in spec.args:
        if a.name not in want:
            continue
        raw = np.fromfile(tmp_path / f"{a.name}.bin", np.uint16 if a.dtype.value == "bf16" else np.float32)
        got = (_from_bf16(raw) if a.dtype.value == "bf16" else raw).astype(np.float64).reshape(want[a.name].shape)
        rt, at = (1e-2, 1e-2) if a.dtype.value == "bf16" else (rtol, atol)
        assert np.allclose(got, want[a.name], rtol=rt, atol=at), (
            f"{label}: {a.name} differs, max error {np.nanmax(np.abs(got - want[a.name]))}")


# ---------------------------------------------------------------- the softmax family: the same ideas

from ptxfactory.search.generators.softmax import SoftmaxFamily  # noqa: E402
from ptxfactory.search.generators.softmax import match_spec as softmax_match  # noqa: E402
from ptxfactory.search.generators.softmax import variants as softmax_variants  # noqa: E402

SM_CASES = {
    # log-softmax's companion: softmax plus the row's log-sum-exp, f32, one thread per row; an unused flag
    "softmax_lse": (r"""
__global__ void softmax_lse(const float* x, float* y, float* lse, int R, int flag, int C)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    float mx = -INFINITY;
    for (int i = 0; i < C; ++i) mx = fmaxf(mx, x[r * C + i]);
    float s = 0.f;
    for (int i = 0; i < C; ++i) s += expf(x[r * C + i] - mx);
    lse[r] = mx + logf(s);
    for (int i = 0; i < C; ++i) y[r * C + i] = expf(x[r * C + i] - mx) / s;
}
""", """
x in f32 R,C
y out f32 R,C
lse out f32 R
R scalar i32 R
flag scalar i32 0
C scalar i32 C
""", ("lse",)),
    # bf16 softmax, one block per row, saving the row's max and sum (f32) for the backward pass
    "softmax_max_sum": (r"""
__global__ void softmax_max_sum(const __nv_bfloat16* x, __nv_bfloat16* y, float* row_max, float* row_sum, int R, int C)
{
    __shared__ float red[128];
    int r = blockIdx.x;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < C; i += blockDim.x) m = fmaxf(m, __bfloat162float(x[r * C + i]));
    red[threadIdx.x] = m;
    __syncthreads();
    for (int k = 64; k > 0; k /= 2) { if (threadIdx.x < k) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + k]); __syncthreads(); }
    m = red[0];
    __syncthreads();
    float s = 0.f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) s += __expf(__bfloat162float(x[r * C + i]) - m);
    red[threadIdx.x] = s;
    __syncthreads();
    for (int k = 64; k > 0; k /= 2) { if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k]; __syncthreads(); }
    s = red[0];
    if (threadIdx.x == 0) { row_max[r] = m; row_sum[r] = s; }
    for (int i = threadIdx.x; i < C; i += blockDim.x) y[r * C + i] = __float2bfloat16(__expf(__bfloat162float(x[r * C + i]) - m) / s);
}
""", """
x in bf16 R,C
y out bf16 R,C
row_max out f32 R
row_sum out f32 R
R scalar i32 R
C scalar i32 C
""", ("max", "sum")),
}


@pytest.mark.parametrize("name", sorted(SM_CASES))
def test_softmax_variant_matches_compiles_and_keeps_the_signature(name):
    src, args, stats = SM_CASES[name]
    spec = make_spec(name, args)
    ctx = ctx_of(src, spec)
    m = softmax_match(spec)
    assert m is not None and len(m.stats) == len(stats)
    cands = SoftmaxFamily().propose(ctx)
    assert cands and {k.params["stats"] for k in cands} == {",".join(stats)}
    for k in cands:
        kd = find_kernel(k.source, name)
        check_signature(spec, kd)
        assert [(p.name, p.type) for p in kd.params] == [(p.name, p.type) for p in ctx.kernel.params]
    for k in (cands[0], cands[-1]):
        r = compile_candidate(k, "sm_90a")
        assert not isinstance(r, CompileFailed), f"{k.description}: {r.log[-3000:]}"
        assert r.resources.spill_stores == 0 and r.resources.local_bytes == 0, f"{k.description}: {r.resources.summary()}"


def test_softmax_statistics_without_evidence_and_refusals():
    src, args, _ = SM_CASES["softmax_lse"]
    spec = make_spec("softmax_q", args.replace("lse", "q"))
    ctx = ctx_of(src.replace("lse", "q").replace("softmax_q[r] = mx + logf(s)", "q[r] = t"), spec)
    forms = softmax_variants(softmax_match(spec), "q[r] = t;")
    assert [(f.stats[0][2], ev) for f, ev in forms] == [("lse", True), ("max", False), ("sum", False)]
    # an extra input, a column output, three per-row outputs, y of another dtype: refused
    for bad in ("x in f32 R,C\nz in f32 R,C\ny out f32 R,C\nR scalar i32 R\nC scalar i32 C",
                "x in f32 R,C\ny out f32 R,C\nc out f32 C\nR scalar i32 R\nC scalar i32 C",
                "x in f32 R,C\ny out f32 R,C\na out f32 R\nb out f32 R\nc out f32 R\nR scalar i32 R\nC scalar i32 C",
                "x in f32 R,C\ny out bf16 R,C\nR scalar i32 R\nC scalar i32 C"):
        assert softmax_match(make_spec("k", bad)) is None, bad


SM_SHIM = r"""
#define __noinline__
#define INFINITY (__builtin_inff())
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) for the host emulation")
@pytest.mark.parametrize("name", sorted(SM_CASES))
def test_softmax_kernel_text_on_host_emulation(name, tmp_path):
    """expf candidates (the first and last), on the host: y and every per-row statistic match NumPy, vector and
    scalar paths, rows past the register cache."""
    src, args, stats = SM_CASES[name]
    spec = make_spec(name, args)
    ctx = ctx_of(src, spec)
    cands = [k for k in SoftmaxFamily().propose(ctx) if k.params["exp"] == "expf"]
    c = Case(name, src, args, "softmax", stats)
    rng = np.random.default_rng(11)
    for cand in {k.key: k for k in (cands[0], cands[-1])}.values():
        text = SHIM + SM_SHIM + cand.source.replace("#include <cuda_bf16.h>\n", "") + _main(c, spec)
        cpp = tmp_path / f"sm_{hashlib.sha1(text.encode()).hexdigest()[:8]}.cpp"
        cpp.write_text(text)
        exe = tmp_path / "sm"
        build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", str(cpp), "-o", str(exe), "-pthread"], capture_output=True, text=True)
        assert build.returncode == 0, build.stderr[-3000:]
        for R, C in [(5, 8), (3, 37), (2, 1), (3, 4100), (2, 8200)]:
            for off in (0, 1):
                vals = {}
                for a in spec.args:
                    if not a.is_buffer:
                        continue
                    n = R * C if len(a.shape) == 2 else R
                    v = rng.normal(0.0, 2.0, n).astype(np.float32)
                    if a.role == "out":
                        v[:] = np.nan
                    bits = _bf16_bits(v) if a.dtype.value == "bf16" else v
                    vals[a.name] = (_from_bf16(bits) if a.dtype.value == "bf16" else v).astype(np.float64).reshape(
                        (R, C) if len(a.shape) == 2 else (n,))
                    bits.tofile(tmp_path / f"{a.name}.bin")
                grid = evaluate(cand.launch.grid[0], {"R": R, "C": C})
                run = subprocess.run([str(exe), str(grid), str(cand.launch.block[0]), str(tmp_path), str(R), str(C), str(off)],
                                     capture_output=True, text=True, timeout=300)
                assert run.returncode == 0 and run.stdout.strip() == "ok", f"{cand.description} at {R}x{C}: {run.stdout[-300:]}"
                xv = vals["x"]
                mx = xv.max(axis=1)
                s = np.exp(xv - mx[:, None]).sum(axis=1)
                want = {"y": np.exp(xv - mx[:, None]) / s[:, None]}
                outs = [a.name for a in spec.args if a.is_buffer and a.role == "out" and len(a.shape) == 1]
                for o, st in zip(outs, stats):
                    want[o] = {"max": mx, "sum": s, "lse": mx + np.log(s)}[st]
                _compare(spec, tmp_path, want, 1e-4, 1e-5, f"{cand.description} at {R}x{C} offset {off}")
