"""CPU tests of the ``mma_tile`` passes (tensor-core GEMM tiles): what they take and refuse, NVRTC compilation for
sm_90a, and the rewritten kernels run on the host against a float64 reference.

The host emulation runs every block as 256 std::threads (threadIdx.x fastest, eight warps of 32 consecutive threads,
as on the GPU) and replaces the two inline-PTX lambdas by functions that do what the PTX ISA says of them:
``mma.sync.m16n8k16`` (bf16, f16) and ``m16n8k8.tf32`` gather the warp's fragments by the ISA's layouts (lane
``4 g + t``: A's rows g and g + 8, B's column g, the accumulators' row g and g + 8, columns 2t and 2t + 1) and add
each output's products in double; ``cvt.rna.tf32.f32`` rounds to 10 mantissa bits, ties away from zero. So these
tests check the kernel text against the ISA's layouts; that the GPU follows them is the GPU tier's business
(tests/gpu/test_gpu_mma_tile.py).
"""
from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.harness.static_checks import static_check
from ptxfactory.protocol import evaluate, parse_spec
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, run_chain, unit_from_context
from ptxfactory.search.generators.transform.mma_tile import MmaTilePass
from _generator_support import example_ctx

ROOT = Path(__file__).resolve().parents[2]

GEMM = """{inc}__global__ void gemm({T}* A, {T}* B, {O}* C, int M, int N, int K)
{{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {{
        float acc = {init};
        for (int k = 0; k < K; ++k) {{
{body}
        }}
        C[row * N + col] = {store};
    }}
}}
"""
SPEC = """
[kernel.gemm]
args = [
  {{ name = "A", role = "in",  dtype = "{dt}", shape = ["M", "K"] }},
  {{ name = "B", role = "in",  dtype = "{dt}", shape = ["K", "N"] }},
  {{ name = "C", role = "out", dtype = "{ot}", shape = ["M", "N"] }},
  {{ name = "M", role = "scalar", dtype = "i32", value = "M" }},
  {{ name = "N", role = "scalar", dtype = "i32", value = "N" }},
  {{ name = "K", role = "scalar", dtype = "i32", value = "K" }},
]
launch = {{ grid = ["cdiv(N, 16)", "cdiv(M, 16)"], block = [16, 16], policy = "free" }}
[kernel.gemm.check]
rtol = {rtol}
atol = {atol}
sizes = [{{ M = 33, N = 65, K = 100 }}]
[kernel.gemm.bench]
sizes = [{{ M = 1024, N = 1024, K = 1024 }}]
"""
_C = {"f32": "const float", "bf16": "const __nv_bfloat16", "f16": "const __half"}
_INC = {"f32": "", "bf16": "#include <cuda_bf16.h>\n", "f16": "#include <cuda_fp16.h>\n"}
_CONV = {"f32": "{}", "bf16": "__bfloat162float({})", "f16": "__half2float({})"}


LAYOUT_INDEX = {"n": ("A[row * K + k]", "B[k * N + col]"), "t": ("A[k * M + row]", "B[col * K + k]")}


def gemm_case(dt: str, rtol: float = 1e-4, atol: float = 1e-3, init: str = "0.0f", via_locals: bool = False,
              out: str = "f32", fma: bool = False, layout: str = "nn"):
    """A naive GEMM of ``dt`` operands (its spec and source): ``acc += conv(A) * conv(B)``, through two locals, or
    ``acc = fmaf(conv(A), conv(B), acc)``; ``layout``: A's then B's, ``n`` as written (A row-major M x K, B K x N),
    ``t`` transposed (A stored K x M, B N x K)."""
    a, b = _CONV[dt].format(LAYOUT_INDEX[layout[0]][0]), _CONV[dt].format(LAYOUT_INDEX[layout[1]][1])
    body = (f"            float a = {a};\n            float b = {b};\n            acc += a * b;" if via_locals
            else f"            acc = fmaf({a}, {b}, acc);" if fma else f"            acc += {a} * {b};")
    store = {"f32": "acc", "bf16": "__float2bfloat16(acc)"}[out]
    oc = {"f32": "float", "bf16": "__nv_bfloat16"}[out]
    src = GEMM.format(inc=_INC[dt] + ("#include <cuda_bf16.h>\n" if out == "bf16" and dt != "bf16" else ""),
                      T=_C[dt], O=oc, init=init, body=body, store=store)
    spec = parse_spec(SPEC.format(dt=dt, ot=out, rtol=rtol, atol=atol)).kernels["gemm"]
    return example_ctx(ROOT / "examples" / "matmul_naive" / "matmul_naive.cu", "gemm", spec, src)


def mma_passes(ctx):
    unit = unit_from_context(ctx)
    return unit, [p for p in PASSES if isinstance(p, MmaTilePass)]


def candidate(ctx, p):
    unit = unit_from_context(ctx)
    return TransformGenerator().candidate(ctx, run_chain(unit, [p]), [p])


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_takes_naive_gemms_and_compiles(dt):
    ctx = gemm_case(dt, rtol=1e-3 if dt == "f32" else 1e-2, atol=1e-2)
    unit, passes = mma_passes(ctx)
    took = [p for p in passes if p.applies(unit)]
    want = {"mma_tile_128x128", "mma_tile_64x128", "mma_tile_128x64", "mma_tile_64x64", "mma_tile_128x128_s3",
            "mma_tile_128x64_s3", "mma_tile_64x128_s3"} | (
        {"mma_tile_128x128_tf32", "mma_tile_64x128_tf32", "mma_tile_64x64_tf32"} if dt == "f32" else set())
    assert {p.name for p in took} == want
    for p in took:
        c = candidate(ctx, p)
        assert "mma.sync.aligned." + ("m16n8k8.row.col.f32.tf32.tf32.f32" if dt == "f32" else f"m16n8k16.row.col.f32.{dt}.{dt}.f32") in c.source
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log[-3000:]
        assert r.resources.spill_stores == 0, (p.name, r.resources.summary())
        assert static_check(c, ctx.spec, r.resources, r.cubin) is None
        assert c.launch.block == [16, 16] and c.launch.grid[:2] == [f"cdiv((N), {p.tn})", f"cdiv((M), {p.tm})"]


@pytest.mark.parametrize("change, why", [
    ({"rtol": 0, "atol": 0}, "exact results"),
    ({"dt": "f32", "rtol": 1e-5}, None),  # 3xTF32 stays; only the single-TF32 variant refuses
])
def test_tolerance_gates(change, why):
    dt = change.get("dt", "bf16")
    ctx = gemm_case(dt, rtol=change["rtol"], atol=change.get("atol", 1e-3))
    unit, passes = mma_passes(ctx)
    reasons = {p.name: p.why_not(unit) for p in passes}
    if why:
        assert all(why in r for r in reasons.values()), reasons
    else:
        assert reasons["mma_tile_64x64"] is None and "below 0.0005" in reasons["mma_tile_64x64_tf32"]


def test_refuses_what_is_not_a_product_of_two_loads():
    ctx = example_ctx(ROOT / "bench" / "trials" / "cdist" / "cdist.cu", "cdist")
    unit, passes = mma_passes(ctx)
    assert all("not a product of a row load and a column load" in p.why_not(unit) for p in passes if not p.single_tf32)
    # double accumulation, mixed operand types
    ctx = gemm_case("f32")
    src = ctx.source.replace("float acc = 0.0f;", "double acc = 0.0;")
    ctx2 = example_ctx(ROOT / "examples" / "matmul_naive" / "matmul_naive.cu", "gemm", ctx.spec, src)
    unit, passes = mma_passes(ctx2)
    assert "not float" in passes[0].why_not(unit)


# ---------------------------------------------------------------- host emulation

SHIM = r"""#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <algorithm>
#include <barrier>
#include <memory>
#include <thread>
#include <vector>
struct ptxf_dim { unsigned x, y, z; };
thread_local ptxf_dim threadIdx, blockIdx;
ptxf_dim blockDim{16, 16, 1}, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
using std::min;
using std::max;
struct __nv_bfloat16 { unsigned short x; };
struct __half { unsigned short x; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint4 __ldg(const uint4* p) { return *p; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 v) { return v.x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return {u}; }
inline unsigned short __half_as_ushort(__half v) { return v.x; }
inline __half __ushort_as_half(unsigned short u) { return {u}; }
static float bits_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static unsigned float_bits(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { return bits_float(u); }
inline unsigned __float_as_uint(float f) { return float_bits(f); }
inline float __bfloat162float(__nv_bfloat16 v) { return bits_float((unsigned)v.x << 16); }
inline __nv_bfloat16 __float2bfloat16(float f) { unsigned u = float_bits(f); u += 0x7fff + ((u >> 16) & 1); return {(unsigned short)(u >> 16)}; }
inline float __half2float(__half h) {
    unsigned s = (h.x >> 15) & 1, e = (h.x >> 10) & 31, m = h.x & 1023;
    float v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? std::ldexp((float)m, -24) : std::ldexp((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}
static float ptxf_host_tf32_value(unsigned u) { return bits_float(u); }
static unsigned ptxf_host_tf32(float v) { unsigned u = float_bits(v); u = (u + 0x1000u) & 0xffffe000u; return u; }
static double ptxf_half_value(unsigned short h, int kind) {
    return kind == 0 ? (double)bits_float((unsigned)h << 16) : (double)__half2float(__half{h});
}
struct WarpSlots { unsigned a[32][4]; unsigned b[32][2]; const unsigned char* rows[32]; };
static WarpSlots g_slots[8];
static std::unique_ptr<std::barrier<>> g_warp[8];
static std::unique_ptr<std::barrier<>> g_all;
inline void __syncthreads() { g_all->arrive_and_wait(); }
// PTXF_KIND: 0 bf16, 1 f16 (m16n8k16), 2 tf32 (m16n8k8)
static void ptxf_host_mma(float* d, const unsigned* a, const unsigned* b) {
    const int tid = threadIdx.y * 16 + threadIdx.x, w = tid / 32, lane = tid % 32;
    WarpSlots& S = g_slots[w];
    std::memcpy(S.a[lane], a, 16);
    std::memcpy(S.b[lane], b, 8);
    g_warp[w]->arrive_and_wait();
    const int K = PTXF_KIND == 2 ? 8 : 16;
    double A[16][16] = {}, B[16][8] = {};
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        if (PTXF_KIND == 2) {
            A[g][t] = ptxf_host_tf32_value(S.a[l][0]); A[g + 8][t] = ptxf_host_tf32_value(S.a[l][1]);
            A[g][t + 4] = ptxf_host_tf32_value(S.a[l][2]); A[g + 8][t + 4] = ptxf_host_tf32_value(S.a[l][3]);
            B[t][g] = ptxf_host_tf32_value(S.b[l][0]); B[t + 4][g] = ptxf_host_tf32_value(S.b[l][1]);
        } else {
            const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
            for (int r = 0; r < 4; ++r) {
                A[rows[r]][cols[r]] = ptxf_half_value(S.a[l][r] & 0xffff, PTXF_KIND);
                A[rows[r]][cols[r] + 1] = ptxf_half_value(S.a[l][r] >> 16, PTXF_KIND);
            }
            for (int r = 0; r < 2; ++r) {
                B[2 * t + 8 * r][g] = ptxf_half_value(S.b[l][r] & 0xffff, PTXF_KIND);
                B[2 * t + 8 * r + 1][g] = ptxf_half_value(S.b[l][r] >> 16, PTXF_KIND);
            }
        }
    }
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
        const int r = g + (e / 2) * 8, c = 2 * t + e % 2;
        double s = d[e];
        for (int k = 0; k < K; ++k) s += A[r][k] * B[k][c];
        d[e] = (float)s;
    }
    g_warp[w]->arrive_and_wait();
}
// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l gives the address of row l % 8 of matrix l / 8 (16 bytes);
// register q of lane 4 g + t holds matrix q's row g, elements 2t and 2t + 1 (.trans: column g, rows 2t and 2t + 1)
static void ptxf_host_ldmatrix(unsigned* r, const void* p, bool trans) {
    const int tid = threadIdx.y * 16 + threadIdx.x, w = tid / 32, lane = tid % 32;
    WarpSlots& S = g_slots[w];
    S.rows[lane] = static_cast<const unsigned char*>(p);
    g_warp[w]->arrive_and_wait();
    const int g = lane / 4, t = lane % 4;
    for (int q = 0; q < 4; ++q) {
        unsigned short lo, hi;
        if (!trans) {
            std::memcpy(&lo, S.rows[q * 8 + g] + 4 * t, 2); std::memcpy(&hi, S.rows[q * 8 + g] + 4 * t + 2, 2);
        } else {
            std::memcpy(&lo, S.rows[q * 8 + 2 * t] + 2 * g, 2); std::memcpy(&hi, S.rows[q * 8 + 2 * t + 1] + 2 * g, 2);
        }
        r[q] = lo | ((unsigned)hi << 16);
    }
    g_warp[w]->arrive_and_wait();
}
static void ptxf_host_ldm(unsigned* r, const void* p) { ptxf_host_ldmatrix(r, p, false); }
static void ptxf_host_ldmt(unsigned* r, const void* p) { ptxf_host_ldmatrix(r, p, true); }
template <class F> void launch(unsigned gx, unsigned gy, unsigned gz, F f) {
    gridDim = {gx, gy, gz};
    for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) {
        g_all = std::make_unique<std::barrier<>>(256);
        for (int w = 0; w < 8; ++w) g_warp[w] = std::make_unique<std::barrier<>>(32);
        std::vector<std::thread> ts;
        for (int t = 0; t < 256; ++t)
            ts.emplace_back([&, t, x, y, z] { threadIdx = {(unsigned)(t % 16), (unsigned)(t / 16), 0}; blockIdx = {x, y, z}; f(); });
        for (auto& th : ts) th.join();
    }
}
"""
_NP_IN = {"f32": np.float32, "bf16": np.uint16, "f16": np.float16}


def _bf16_bits(v: np.ndarray) -> np.ndarray:
    u = v.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _emulate(cand, spec, kind: int, sizes: dict, arrays: dict[str, np.ndarray], tmp_path) -> np.ndarray:
    """Build and run ``cand`` on the host with ``arrays`` (raw element values by argument name); C as float64."""
    src = re.sub(r"(?m)^(\s*)auto ptxf_mma = .*$", r"\1auto ptxf_mma = ptxf_host_mma;", cand.source)
    src = re.sub(r"(?m)^(\s*)auto ptxf_tf32 = .*$", r"\1auto ptxf_tf32 = ptxf_host_tf32;", src)
    src = re.sub(r"(?m)^(\s*)auto ptxf_(ldmt?) = .*$", r"\1auto ptxf_\2 = ptxf_host_\2;", src)
    # cp.async: a copy at once (each thread's own copies complete by its wait, as on the GPU; the barrier after it
    # publishes them); the stages' dynamic shared memory a static buffer (one block at a time)
    src = re.sub(r"(?m)^(\s*)auto ptxf_cp16 = .*$", r"\1auto ptxf_cp16 = [](void* s, const void* g) { std::memcpy(s, g, 16); };", src)
    src = re.sub(r"(?m)^(\s*)auto ptxf_(commit|wait) = .*$", r"\1auto ptxf_\2 = [] {};", src)
    src = re.sub(r"extern __shared__ __align__\(128\) unsigned char ptxf_smem\[\];",
                 "static __attribute__((aligned(128))) unsigned char ptxf_smem[1 << 18];", src)
    src = re.sub(r"#include <cuda_(bf16|fp16)\.h>\n", "", src)
    bufs = [a for a in spec.args if a.is_buffer]
    scalars = [a for a in spec.args if not a.is_buffer]
    ctype = {"f32": "float", "bf16": "__nv_bfloat16", "f16": "__half"}
    loads = "\n".join(
        f'    std::vector<unsigned char> {a.name}_b({arrays[a.name].nbytes} + 16); FILE* f_{a.name} = fopen("{a.name}.bin", "rb"); '
        f'fread({a.name}_b.data(), 1, {arrays[a.name].nbytes}, f_{a.name}); fclose(f_{a.name}); '
        f'auto* {a.name} = reinterpret_cast<{ctype[a.dtype.value]}*>({a.name}_b.data());' for a in bufs)
    grid = [int(evaluate(g, sizes)) for g in cand.launch.grid] + [1, 1]
    call = ", ".join([a.name for a in bufs] + [str(sizes[a.value]) if isinstance(a.value, str) else f"{a.value}f" for a in scalars])
    out = next(a for a in bufs if a.role == "out")
    text = (f"#define PTXF_KIND {kind}\n" + SHIM + src + f"""
int main() {{
{loads}
    launch({grid[0]}, {grid[1]}, {grid[2]}, [&] {{ {spec.name}({call}); }});
    FILE* o = fopen("out.bin", "wb"); fwrite({out.name}, 1, {arrays[out.name].nbytes}, o); fclose(o);
    puts("ok");
}}
""")
    cpp = tmp_path / f"emu_{hashlib.sha1(text.encode()).hexdigest()[:10]}.cpp"
    cpp.write_text(text)
    exe = tmp_path / "emu"
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", str(cpp), "-o", str(exe), "-pthread"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    for name, arr in arrays.items():
        arr.tofile(tmp_path / f"{name}.bin")
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout[-500:] + run.stderr[-500:]
    raw = np.fromfile(tmp_path / "out.bin", np.uint16 if out.dtype.value == "bf16" else np.float32)
    return (_bf16_value(raw) if out.dtype.value == "bf16" else raw).astype(np.float64)


EMU = [  # (dtype, variant, init, via locals, output dtype[, fmaf])
    ("f32", "mma_tile_64x64", "0.0f", False, "f32"),          # 3xTF32
    ("f32", "mma_tile_128x64", "0.0f", False, "f32", True),   # acc = fmaf(a, b, acc)
    ("f32", "mma_tile_64x128_tf32", "0.0f", False, "f32"),   # a single TF32 product
    ("bf16", "mma_tile_128x64", "1.5f", True, "bf16"),       # through locals, a nonzero start, a bf16 output
    ("f16", "mma_tile_64x128", "0.0f", False, "f32"),
]


@pytest.mark.parametrize("dt, variant, init, via_locals, out, fma", [c if len(c) == 6 else (*c, False) for c in EMU])
def test_kernel_text_on_host_emulation(dt, variant, init, via_locals, out, fma, tmp_path):
    """The rewritten GEMM on the host, at sizes with partial tiles on every side and a k not a multiple of the step:
    every output within a tolerance that the fp32 sum of exact products meets (3xTF32: ~fp32's; a single TF32: 2^-10
    of the sum of |products|), and the outputs outside the matrix never written."""
    ctx = gemm_case(dt, rtol=1e-3 if variant.endswith("tf32") else 1e-4, atol=1e-2, init=init, via_locals=via_locals, out=out,
                    fma=fma)
    p = next(q for q in PASSES if getattr(q, "name", "") == variant)
    unit = unit_from_context(ctx)
    assert p.why_not(unit) is None
    cand = candidate(ctx, p)
    rng = np.random.default_rng(11)
    M, N, K = 70, 140, 45
    a, b = rng.normal(size=(M, K)).astype(np.float32), rng.normal(size=(K, N)).astype(np.float32)
    if dt == "bf16":
        raw = {"A": _bf16_bits(a), "B": _bf16_bits(b)}
        av, bv = _bf16_value(raw["A"]).astype(np.float64), _bf16_value(raw["B"]).astype(np.float64)
    elif dt == "f16":
        raw = {"A": a.astype(np.float16), "B": b.astype(np.float16)}
        av, bv = raw["A"].astype(np.float64), raw["B"].astype(np.float64)
    else:
        raw = {"A": a, "B": b}
        av, bv = a.astype(np.float64), b.astype(np.float64)
    raw["C"] = np.full(M * N, 0xFFFF if out == "bf16" else np.nan, np.uint16 if out == "bf16" else np.float32)
    got = _emulate(cand, ctx.spec, {"bf16": 0, "f16": 1, "f32": 2}[dt], {"M": M, "N": N, "K": K}, raw, tmp_path).reshape(M, N)
    want = av @ bv + float(init.rstrip("f"))
    scale = np.abs(av) @ np.abs(bv)
    tol = {"f32": 2e-6, "bf16": 1e-2, "f16": 1e-5}[dt] if not variant.endswith("tf32") else 2e-3
    if out == "bf16":
        tol = max(tol, 1e-2)
    assert np.all(np.isfinite(got)), "an output was not written"
    err = np.abs(got - want) / (scale + 1e-30)
    assert err.max() < tol, (variant, float(err.max()), np.unravel_index(err.argmax(), err.shape))


def _layout_agrees(cand, ctx, dt: str, layout: str, k: int, seed: int, tmp_path) -> None:
    """``cand`` on the host at (72, 136, ``k``) (rows 16-byte aligned) and (33, 70, 21) (mostly not), A and B stored as
    ``layout`` says: every output within 2e-6 of the float64 product, relative to the sum of |products|."""
    rng = np.random.default_rng(seed)
    for M, N, K in ((72, 136, k), (33, 70, 21)):
        a, b = rng.normal(size=(M, K)).astype(np.float32), rng.normal(size=(K, N)).astype(np.float32)
        if dt == "bf16":
            a, b = _bf16_value(_bf16_bits(a)), _bf16_value(_bf16_bits(b))
        sa, sb = (a if layout[0] == "n" else a.T.copy()), (b if layout[1] == "n" else b.T.copy())
        raw = {"A": _bf16_bits(sa) if dt == "bf16" else sa, "B": _bf16_bits(sb) if dt == "bf16" else sb,
               "C": np.full(M * N, np.nan, np.float32)}
        got = _emulate(cand, ctx.spec, {"bf16": 0, "f32": 2}[dt], {"M": M, "N": N, "K": K}, raw, tmp_path).reshape(M, N)
        want = a.astype(np.float64) @ b.astype(np.float64)
        err = np.abs(got - want) / (np.abs(a).astype(np.float64) @ np.abs(b) + 1e-30)
        assert np.all(np.isfinite(got)) and err.max() < 2e-6, (layout, M, N, K, float(err.max()))


@pytest.mark.parametrize("dt", ["bf16", "f32"])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_every_operand_layout_on_host_emulation(dt, layout, tmp_path):
    """Each operand's tile is contiguous along the coordinate its global memory is (k: ldmatrix; its side:
    ldmatrix.trans), fetched 16 bytes at a time where aligned and in bounds: every layout of A and B at sizes whose
    rows are all 16-byte aligned (the vector path everywhere but the tails) and at odd ones (element by element)."""
    ctx = gemm_case(dt, layout=layout, atol=1e-2)
    p = next(q for q in PASSES if getattr(q, "name", "") == "mma_tile_64x64")
    cand = candidate(ctx, p)
    src = cand.source
    if dt == "bf16":  # a tile whose rows are k is read transposed
        a_load, b_load = ("ptxf_ldm(" if layout[0] == "n" else "ptxf_ldmt("), ("ptxf_ldmt(" if layout[1] == "n" else "ptxf_ldm(")
        assert f"{a_load}ptxf_a[ptxf_i]" in src and f"{b_load}&ptxf_b[ptxf_j][0]" in src, src
    assert src.count("reinterpret_cast<const uint4*>(ptxf_a)") == 2 * 2  # both operands, at the first and next steps
    _layout_agrees(cand, ctx, dt, layout, 48, 3, tmp_path)


@pytest.mark.parametrize("dt", ["bf16", "f32"])
@pytest.mark.parametrize("layout, variant", [("nn", "mma_tile_128x64_s3"), ("tn", "mma_tile_64x128_s3"),
                                             ("nt", "mma_tile_128x128_s3"), ("tt", "mma_tile_128x64_s3")])
def test_the_cp_async_stages_on_host_emulation(dt, layout, variant, tmp_path):
    """The cp.async variants: three steps' tiles in flight, one barrier a step, aligned 16-byte runs copied and the
    rest stored element by element into the same stage: right at a K of seven steps (more than the stages) and at one
    of a single partial step, rows aligned and not."""
    ctx = gemm_case(dt, layout=layout, atol=1e-2)
    p = next(q for q in PASSES if getattr(q, "name", "") == variant)
    cand = candidate(ctx, p)
    assert cand.source.count("__syncthreads();") == 1 and "cp.async.wait_group 1;" in cand.source
    assert int(cand.launch.shared_mem) > 0 and "extern __shared__" in cand.source
    _layout_agrees(cand, ctx, dt, layout, 200, 4, tmp_path)


def test_the_cp_async_stages_refuse_an_operand_fetched_element_by_element():
    ctx = red_case("            acc += A[row * K + k] * B[k * N + col];")
    src = ctx.source.replace("B[k * N + col]", "B[k * N + col * 2]")  # columns 2 apart: no 16-byte run
    ctx2 = example_ctx(ROOT / "examples" / "matmul_naive" / "matmul_naive.cu", "gemm", ctx.spec, src)
    p = next(q for q in PASSES if getattr(q, "name", "") == "mma_tile_128x64_s3")
    assert "element by element" in p.why_not(unit_from_context(ctx2))
    assert p.why_not(unit_from_context(ctx)) is None


# ---------------------------------------------------------------- what a red team found applied and wrong (2026-12-04)

RED = """{inc}__global__ void gemm({T}* A, {T}* B, float* C, int M, int N, int K)
{{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {{
        float acc = 1.0f;
{pre}
        for (int k = 0; {cond}; ++k) {{
{body}
        }}
        C[row * N + col] = {store};
    }}
}}
"""


def red_case(body: str, pre: str = "", cond: str = "k < K", store: str = "acc", dt: str = "f32", rtol: float = 1e-3,
             atol: float = 1e-3):
    src = RED.format(inc=_INC[dt], T=_C[dt], pre=pre, cond=cond, body=body, store=store)
    spec = parse_spec(SPEC.format(dt=dt, ot="f32", rtol=rtol, atol=atol)).kernels["gemm"]
    return example_ctx(ROOT / "examples" / "matmul_naive" / "matmul_naive.cu", "gemm", spec, src)


AB = "A[row * K + k] * B[k * N + col]"


@pytest.mark.parametrize("case, why", [
    # the start copied before the loop: the epilogue would give base the finished sum (smem_tile too)
    (dict(pre="        float base = acc;", body=f"            acc += {AB};", store="acc - base"), "reads the accumulator"),
    # a cast to int changes the operand's value, or the product's
    (dict(body="            acc += (int)A[row * K + k] * B[k * N + col];"), "not a product"),
    (dict(body=f"            acc += (int)({AB});"), "not a product"),
    # a local of another type, a local read before its declaration, a local written through a reference
    (dict(body="            int a = A[row * K + k];\n            acc += a * B[k * N + col];"), "not a product"),
    (dict(pre="        float a = 2.0f;", body="            acc += a * B[k * N + col];\n            float a2 = A[row * K + k];"),
     None),  # (a reads the code before the loop: smem_tile refuses that use)
    (dict(body="            float a = A[row * K + k];\n            float& r = a;\n            r *= 2.0f;\n            acc += a * B[k * N + col];"),
     None),
    # a scalar shadowed by a row-dependent local, a fractional loop bound
    (dict(pre="        int K2 = K;\n        int K = row % 7 + 1;", body=f"            acc += A[row * K2 + k] * B[k * N + col];"), "shadows K"),
    (dict(cond="k < K * 0.5f", body=f"            acc += {AB};"), "not an integer expression"),
    # a product of two halves, rounded to a half before the sum
    (dict(dt="f16", body="            acc += __half2float(A[row * K + k] * B[k * N + col]);"), None),
    (dict(dt="f16", body=f"            acc += {AB};"), None),
    # nearly exact
    (dict(body=f"            acc += {AB};", rtol=0, atol=1e-30), "nearly) exact"),
])
def test_red_team_cases_are_refused(case, why):
    ctx = red_case(**case)
    unit = unit_from_context(ctx)
    reasons = [p.why_not(unit) for p in PASSES if isinstance(p, MmaTilePass)]
    assert all(reasons), reasons
    if why:
        assert all(why in r for r in reasons), reasons


def test_a_16_bit_product_of_converted_loads_and_a_float_local_are_taken():
    for case in (dict(dt="f16", body="            acc += __half2float(A[row * K + k]) * (float)B[k * N + col];"),
                 dict(dt="bf16", body="            __nv_bfloat16 a = A[row * K + k];\n            acc += __bfloat162float(a) * __bfloat162float(B[k * N + col]);"),
                 dict(body="            const float a = A[row * K + k];\n            acc += (float)(a * B[k * N + col]);")):
        unit = unit_from_context(red_case(**case))
        assert MmaTilePass(4, 4).why_not(unit) is None, (case, MmaTilePass(4, 4).why_not(unit))


def test_a_scale_factor_is_applied_once_to_the_sum(tmp_path):
    """``acc += alpha * A[...] * B[...] * 2.0f``: the factors the same for every term multiply the fragment's sum."""
    src = GEMM.format(inc="", T="const float", O="float", init="0.0f", store="acc",
                      body="            acc += alpha * A[row * K + k] * B[k * N + col] * 2.0f;").replace(
        "int M, int N, int K)", "int M, int N, int K, float alpha)")
    spec = parse_spec(SPEC.format(dt="f32", ot="f32", rtol=1e-3, atol=1e-2).replace(
        '  { name = "K", role = "scalar", dtype = "i32", value = "K" },\n',
        '  { name = "K", role = "scalar", dtype = "i32", value = "K" },\n  { name = "alpha", role = "scalar", dtype = "f32", value = 0.75 },\n')).kernels["gemm"]
    ctx = example_ctx(ROOT / "examples" / "matmul_naive" / "matmul_naive.cu", "gemm", spec, src)
    p = next(q for q in PASSES if getattr(q, "name", "") == "mma_tile_64x64")
    assert p.why_not(unit_from_context(ctx)) is None
    cand = candidate(ctx, p)
    assert "(alpha * 2.0f) * ptxf_c[" in cand.source
    rng = np.random.default_rng(5)
    M, N, K = 40, 70, 33
    a, b = rng.normal(size=(M, K)).astype(np.float32), rng.normal(size=(K, N)).astype(np.float32)
    raw = {"A": a, "B": b, "C": np.full(M * N, np.nan, np.float32)}
    got = _emulate(cand, ctx.spec, 2, {"M": M, "N": N, "K": K}, raw, tmp_path).reshape(M, N)
    want = 1.5 * (a.astype(np.float64) @ b.astype(np.float64))
    assert np.max(np.abs(got - want) / (1.5 * np.abs(a) @ np.abs(b))) < 2e-6
    # a factor that varies with k or the output is not a scale: refused
    src2 = src.replace("alpha * A[row * K + k]", "(float)k * A[row * K + k]")
    ctx2 = example_ctx(ROOT / "examples" / "matmul_naive" / "matmul_naive.cu", "gemm", spec, src2)
    assert p.why_not(unit_from_context(ctx2)) is not None
