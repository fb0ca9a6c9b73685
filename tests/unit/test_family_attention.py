"""CPU tests of the "attention" family (search/generators/attention.py): which specs it takes and why it refuses, the
variants it proposes for a naive attention kernel written one thread per query (the helper's trial,
bench/trials/attn_naive), NVRTC compiles of every candidate, and host runs of the skeleton (g++, a block's threads
as std::threads with barriers and shuffles) against a float64 attention at sizes that end inside a block and inside
a tile: full and causal, both layouts, one and two threads a query.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.attention import AttentionConfig, AttentionFamily, Variant, match_spec, render_kernel

from _host_cuda import HOST_BLOCKS
from test_transform import make_ctx

TRIAL = Path(__file__).parents[2] / "bench" / "trials" / "attn_naive"


def trial_ctx(source: str | None = None, spec_text: str | None = None):
    spec = parse_spec(spec_text or (TRIAL / "attn_naive.cu.toml").read_text()).kernels["attn_naive"]
    return make_ctx(source or (TRIAL / "attn_naive.cu").read_text(), spec)


def test_the_naive_trial_gets_the_skeleton_its_likeliest_variant_first():
    """[B, H, T, 64] f32, a square root in the source, no causal mask, T bounding the key loops: the first variants
    are "bhtd", full, scale 1/sqrt(64), with the whole tuning space; the others one configuration each."""
    ctx = trial_ctx()
    fam = AttentionFamily()
    assert fam.why_not(ctx) is None
    cands = fam.propose(ctx)
    first = cands[0].params
    assert (first["layout"], first["causal"], first["scale"]) == ("bhtd", 0, "rsqrt_d")
    assert len([c for c in cands if (c.params["layout"], c.params["causal"]) == ("bhtd", 0)]) == 4
    assert {(c.params["layout"], c.params["causal"]) for c in cands} == {("bhtd", 0), ("bhtd", 1), ("bthd", 0), ("bthd", 1)}
    assert cands[0].launch.grid == ["cdiv(T, 64) * ((B) * (H))"] and cands[0].launch.block == [128]


def test_every_candidate_compiles():
    ctx = trial_ctx()
    for c in AttentionFamily().propose(ctx):
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log
        assert r.resources.spill_stores <= 64, (c.description, r.resources.summary())


@pytest.mark.parametrize("change, reason", [
    (lambda t: t.replace('{ name = "v", role = "in"', '{ name = "v", role = "out"'), "inputs and"),
    (lambda t: t.replace('"64"]', '"D"]').replace('{ name = "T", role', '{ name = "D", role = "scalar", dtype = "i32", value = "D" },\n  { name = "T", role')
     .replace("T = 7 }", "T = 7, D = 64 }").replace("T = 129 }", "T = 129, D = 48 }").replace("T = 1 }", "T = 1, D = 64 }")
     .replace("T = 1031 }", "T = 1031, D = 64 }").replace("T = 64 }", "T = 64, D = 64 }").replace("T = 1024 }", "T = 1024, D = 64 }")
     .replace("T = 2048 }", "T = 2048, D = 64 }").replace("T = 256 }", "T = 256, D = 64 }"), "the head dimension takes"),
])
def test_refusals_say_why(change, reason):
    spec = parse_spec(change((TRIAL / "attn_naive.cu.toml").read_text())).kernels["attn_naive"]
    why = match_spec.why(spec)
    assert why is not None and reason in why, why


ELEMENTWISE3 = """
__global__ void attn_naive(const float* q, const float* k, const float* v, float* out, int B, int H, int T)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)B * H * T * 64) return;
    out[i] = q[i] * expf(k[i]) + v[i];
}
"""


def test_a_kernel_without_an_exponential_or_a_loop_over_keys_is_not_attention():
    """The family fits signatures; a kernel of the same signature that calls no exponential, or an elementwise one of
    three inputs that does, computes another function: no candidates, and the report says why."""
    src = (TRIAL / "attn_naive.cu").read_text().replace("expf(s - m)", "(s - m)")
    assert "no exponential" in AttentionFamily().why_not(trial_ctx(source=src))
    ctx = trial_ctx(source=ELEMENTWISE3)
    assert "not attention" in AttentionFamily().why_not(ctx) and AttentionFamily().propose(ctx) == []


HOST_PRELUDE = r"""#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>
#include <algorithm>
struct Dim { unsigned x = 0, y = 0, z = 0; };
thread_local Dim threadIdx, blockIdx;
Dim blockDim;
struct alignas(16) float4 { float x, y, z, w; };
static inline float __ldg(const float* p) { return *p; }
using std::min;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static  /* blocks run one at a time: static storage is the block's */
""" + HOST_BLOCKS

HOST_MAIN = r"""
int main(int argc, char** argv) {
    const int B = atoi(argv[1]), H = atoi(argv[2]), T = atoi(argv[3]), D = KD, grid = atoi(argv[4]), block = atoi(argv[5]);
    const int bthd = atoi(argv[6]), causal = atoi(argv[7]);
    const size_t n = (size_t)B * H * T * D;
    std::vector<float> q(n), k(n), v(n), out(n, NAN);
    unsigned s = 7u;
    auto rnd = [&] { s = s * 1664525u + 1013904223u; return (float)((int)(s >> 9) - (1 << 22)) / (1 << 22); };
    for (size_t i = 0; i < n; ++i) { q[i] = rnd(); k[i] = rnd(); v[i] = rnd(); }
    blockDim.x = block;
    launch(grid, block, [&] { KERNEL(q.data(), k.data(), v.data(), out.data(), B, H, T); });
    // bthd reads the spec's [B, H, T, D] as [B, positions, heads, D]: positions the second axis (H's), heads T's
    const int P = bthd ? H : T, NH = bthd ? T : H;
    auto at = [&](int b, int h, int t, int d) { return bthd ? (((size_t)b * P + t) * NH + h) * D + d : (((size_t)b * NH + h) * P + t) * D + d; };
    double worst = 0.0;
    for (int b = 0; b < B; ++b) for (int h = 0; h < NH; ++h) for (int i = 0; i < P; ++i) {
        std::vector<double> p(P);
        double mx = -1e300;
        for (int j = 0; j < P; ++j) {
            double dot = 0.0;
            for (int d = 0; d < D; ++d) dot += (double)q[at(b, h, i, d)] * k[at(b, h, j, d)];
            p[j] = (causal && j > i) ? -1e300 : dot / std::sqrt((double)D);
            mx = std::max(mx, p[j]);
        }
        double l = 0.0;
        for (int j = 0; j < P; ++j) { p[j] = (causal && j > i) ? 0.0 : std::exp(p[j] - mx); l += p[j]; }
        for (int d = 0; d < D; ++d) {
            double o = 0.0;
            for (int j = 0; j < P; ++j) o += p[j] * v[at(b, h, j, d)];
            worst = std::max(worst, std::fabs(o / l - (double)out[at(b, h, i, d)]));
        }
    }
    std::printf("%.3g\n", worst);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("layout, causal, cfg", [
    ("bhtd", False, AttentionConfig(64, 64, 2)),
    ("bhtd", True, AttentionConfig(32, 64, 2)),
    ("bthd", False, AttentionConfig(64, 64, 1)),
    ("bthd", True, AttentionConfig(128, 32, 2)),
])
def test_the_skeleton_computes_attention_on_the_host(layout, causal, cfg, tmp_path):
    """2 batches, 3 heads, 77 positions (a partial query block, a partial key tile, chunks of masked keys): every output within
    1e-5 of a float64 attention of the same inputs, in the variant's layout and mask; the dead queries of the last
    block store nothing (the NaN poison would show)."""
    ctx = trial_ctx()
    m = match_spec(ctx.spec)
    text = render_kernel(ctx, m, Variant(layout, causal, "rsqrt_d"), cfg)
    kernel = text.replace("__global__ void", "void").replace('extern "C" ', "")
    kernel = kernel.replace("attn_naive(", "ptxf_attn(", 1)
    program = HOST_PRELUDE + kernel + HOST_MAIN.replace("KERNEL", "ptxf_attn").replace("KD", str(m.d))
    cpp, exe = tmp_path / "attn.cpp", tmp_path / "attn"
    cpp.write_text(program)
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", "-pthread", str(cpp), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    B, H, T = (2, 3, 77) if layout == "bhtd" else (2, 77, 3)  # 77 positions, 3 heads either way
    grid = -(-77 // cfg.br) * B * 3
    run = subprocess.run([str(exe), str(B), str(H), str(T), str(grid), str(cfg.block), str(int(layout == "bthd")),
                          str(int(causal))], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.strip()) < 1e-5, run.stdout


def test_bf16_storage_compiles():
    """q, k, v and out in bf16, the arithmetic in fp32: every candidate compiles (loads through __ldg of the 16-bit
    type, stores rounded to nearest)."""
    spec_text = (TRIAL / "attn_naive.cu.toml").read_text().replace('dtype = "f32", shape', 'dtype = "bf16", shape')
    src = "#include <cuda_bf16.h>\n" + (TRIAL / "attn_naive.cu").read_text().replace("const float* q, const float* k, const float* v, float* out",
                                                                                    "const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* out")
    ctx = trial_ctx(source=src, spec_text=spec_text)
    cands = AttentionFamily().propose(ctx)
    assert cands
    for c in cands[:3]:
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log
