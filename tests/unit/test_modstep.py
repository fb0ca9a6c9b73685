"""CPU tests of the ``modstep`` pass (a loop filtered by a divisibility test -> a loop stepping over the accepted
iterations only): what it rewrites and in which forms, what it refuses and why, the output compiled with NVRTC, and
equal to the original bit for bit on the host at several strides (1 to 4) and paddings."""
from __future__ import annotations

import re
import shutil

import pytest

from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import plan_chains, run_chain, PASSES
from ptxfactory.search.generators.transform.modstep import ModStepPass

from _host_cuda import host_ok
from test_transform import compiles, unit

# a transposed 2-D convolution, gather form, one thread an output; stride and padding runtime scalars
CONVT = """
extern "C" __global__ void convt(const float* x, const float* w, float* y, int N, int Cin, int Cout, int H, int W,
                                 int OH, int OW, int K, int stride, int pad)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * Cout * OH * OW) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int oc = (idx / (OW * OH)) % Cout;
    int n = idx / (OW * OH * Cout);
    float sum = 0.0f;
    for (int ic = 0; ic < Cin; ic++) {
        for (int kh = 0; kh < K; kh++) {
            int th = oh + pad - kh;
            if (th < 0 || th % stride != 0) continue;
            int ih = th / stride;
            if (ih >= H) continue;
            for (int kw = 0; kw < K; kw++) {
                int tw = ow + pad - kw;
                if (tw < 0 || tw % stride != 0) continue;
                int iw = tw / stride;
                if (iw >= W) continue;
                sum += x[((n * Cin + ic) * H + ih) * W + iw] * w[((ic * Cout + oc) * K + kh) * K + kw];
            }
        }
    }
    y[idx] = sum;
}
"""

# a transposed 1-D convolution, the wrapping form, a literal stride through a #define
CONVT1D = """
#define STRIDE 2
extern "C" __global__ void convt1d(const float* x, const float* w, float* y, int L, int OL, int K, int pad)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OL) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        int t = o + pad - k;
        if (t >= 0 && (t % STRIDE) == 0 && t / STRIDE < L) {
            acc += x[t / STRIDE] * w[k];
        }
    }
    y[o] = acc;
}
"""


def convt_spec(stride="S", pad="P"):
    return parse_spec(f"""
[kernel.convt]
args = [
  {{ name = "x", role = "in", dtype = "f32", shape = ["N", "Cin", "H", "W"] }},
  {{ name = "w", role = "in", dtype = "f32", shape = ["Cin", "Cout", "K", "K"] }},
  {{ name = "y", role = "out", dtype = "f32", shape = ["N", "Cout", "OH", "OW"] }},
  {{ name = "N", role = "scalar", dtype = "i32", value = "N" }},
  {{ name = "Cin", role = "scalar", dtype = "i32", value = "Cin" }},
  {{ name = "Cout", role = "scalar", dtype = "i32", value = "Cout" }},
  {{ name = "H", role = "scalar", dtype = "i32", value = "H" }},
  {{ name = "W", role = "scalar", dtype = "i32", value = "W" }},
  {{ name = "OH", role = "scalar", dtype = "i32", value = "OH" }},
  {{ name = "OW", role = "scalar", dtype = "i32", value = "OW" }},
  {{ name = "K", role = "scalar", dtype = "i32", value = "K" }},
  {{ name = "stride", role = "scalar", dtype = "i32", value = "{stride}" }},
  {{ name = "pad", role = "scalar", dtype = "i32", value = "{pad}" }},
]
launch = {{ grid = ["cdiv(N * Cout * OH * OW, 128)"], block = [128], policy = "free" }}
[kernel.convt.check]
sizes = [{{ N = 1, Cin = 3, Cout = 2, H = 5, W = 4, OH = 9, OW = 7, K = 3, S = 2, P = 1 }}]
[kernel.convt.bench]
sizes = [{{ N = 8, Cin = 64, Cout = 64, H = 64, W = 64, OH = 127, OW = 127, K = 3, S = 2, P = 1 }}]
""").kernels["convt"]


CONVT1D_SPEC = parse_spec("""
[kernel.convt1d]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["L"] },
  { name = "w", role = "in", dtype = "f32", shape = ["K"] },
  { name = "y", role = "out", dtype = "f32", shape = ["OL"] },
  { name = "L", role = "scalar", dtype = "i32", value = "L" },
  { name = "OL", role = "scalar", dtype = "i32", value = "OL" },
  { name = "K", role = "scalar", dtype = "i32", value = "K" },
  { name = "pad", role = "scalar", dtype = "i32", value = 1 },
]
launch = { grid = ["cdiv(OL, 128)"], block = [128], policy = "free" }
[kernel.convt1d.check]
sizes = [{ L = 9, OL = 17, K = 3 }]
[kernel.convt1d.bench]
sizes = [{ L = 65536, OL = 131071, K = 3 }]
""").kernels["convt1d"]


def test_both_tap_loops_step_by_the_stride_from_the_first_tap_that_lands():
    out = ModStepPass().apply(unit(CONVT, convt_spec()))
    assert "for (int kh = ptxf_mod_first(0, (long long)oh + (long long)pad, ptxf_mod_step(stride)); kh < K; " \
           "kh = ptxf_mod_next(kh, ptxf_mod_step(stride), K))" in out.text  # (the target in 64 bits, the step clamped)
    assert "for (int kw = ptxf_mod_first(0, (long long)ow + (long long)pad, ptxf_mod_step(stride)); kw < K; " \
           "kw = ptxf_mod_next(kw, ptxf_mod_step(stride), K))" in out.text
    assert "th % stride != 0" in out.text  # a runtime stride: the test stays (undefined for 0, and a sign to mind)
    assert [n for n, _ in out.helpers] == ["ptxf_mod_step", "ptxf_mod_first", "ptxf_mod_next"]
    compiles(_with_helpers(out), convt_spec(), "convt")


def test_a_literal_stride_drops_the_test_and_keeps_the_other_terms():
    out = ModStepPass().apply(unit(CONVT1D, CONVT1D_SPEC))
    assert "for (int k = ptxf_mod_first(0, (long long)o + (long long)pad, 2); k < K; k = ptxf_mod_next(k, 2, K))" in out.text
    assert "if ((t >= 0) && (t / 2 < L))" in out.text and "% 2" not in out.text  # (the #define read as 2)
    compiles(_with_helpers(out), CONVT1D_SPEC, "convt1d")


def test_the_perfect_nest_form_is_read_too():
    """perfect_nest sinks kh's test into the kw loop (the unit the passes see): kh's test is found one loop down."""
    u = unit(CONVT, convt_spec())
    assert u.text.index("int th = oh + pad - kh;") > u.text.index("for (int kw")  # the canonical nest
    out = ModStepPass().apply(u).text
    assert "kh = ptxf_mod_next(kh, ptxf_mod_step(stride), K)" in out and "kw = ptxf_mod_next(kw, ptxf_mod_step(stride), K)" in out


@pytest.mark.parametrize("body, reason", [
    ("for (int k = 0; k < K; k++) { int t = o + pad - 2 * k; if (t % s != 0) continue; acc += x[t / 3]; }",
     "multiplies k by -2 and divides by a runtime s"),
    ("for (int k = 0; k < K; k++) { int t = o + pad - k * k; if (t % 3 != 0) continue; acc += x[t / 3]; }",
     "is not of c * k plus terms free of k"),
    ("for (int k = 0; k < K; k++) { unsigned t = o + pad - k; if (t % 3 != 0) continue; acc += x[t / 3]; }",
     "reads other than 32-bit int names and literals"),
    ("for (int k = 0; k < K; k++) { int t = o + pad - k; if (t % s != 0) continue; acc += x[t / 3]; s++; }",
     "written in the loop"),
    ("for (int k = 0; k < K; k++) { int t = o + pad - k; if (t % (s++) != 0) continue; acc += x[t]; }",
     "a call or an assignment"),
])
def test_refusals_say_why(body, reason):
    src = CONVT1D.replace("""    for (int k = 0; k < K; ++k) {
        int t = o + pad - k;
        if (t >= 0 && (t % STRIDE) == 0 && t / STRIDE < L) {
            acc += x[t / STRIDE] * w[k];
        }
    }""", "    int s = 2;\n    " + body)
    assert body in src
    why = ModStepPass().why_not(unit(src, CONVT1D_SPEC))
    assert why is not None and reason in why, why


@pytest.mark.parametrize("body", [
    # a side effect before the test runs in every iteration: the iterations cannot be skipped
    "for (int k = 0; k < K; k++) { acc += 1.0f; if ((o + pad - k) % 2) continue; acc += x[(o + pad - k) / 2]; }",
    # a statement after the wrapping if runs for rejected iterations too
    "for (int k = 0; k < K; k++) { if ((o + pad - k) % 2 == 0) { acc += x[(o + pad - k) / 2]; } acc *= 0.5f; }",
    # the counter written in the body
    "for (int k = 0; k < K; k++) { if ((o + pad - k) % 2) continue; acc += x[(o + pad - k) / 2]; k += 0; }",
    # no divisibility test at all
    "for (int k = 0; k < K; k++) { acc += x[k]; }",
])
def test_loops_whose_rejected_iterations_do_something_are_left(body):
    src = CONVT1D.replace("""    for (int k = 0; k < K; ++k) {
        int t = o + pad - k;
        if (t >= 0 && (t % STRIDE) == 0 && t / STRIDE < L) {
            acc += x[t / STRIDE] * w[k];
        }
    }""", "    " + body)
    assert not ModStepPass().applies(unit(src, CONVT1D_SPEC))


def test_it_is_an_unproven_optional_group_its_chains_follow_the_ones_without_it():
    chains = ["+".join(p.name for p in c) for c in plan_chains(unit(CONVT, convt_spec()))]
    with_it = [c for c in chains if "+modstep" in c]  # (modstep alone is a single, proposed beside the others)
    assert with_it and "modstep" in chains
    for c in with_it:
        twins = [t for t in chains if "modstep" not in t and t.replace("+specialise", "") == c.replace("+modstep", "").replace("+specialise", "")]
        assert twins and chains.index(twins[0]) < chains.index(c), c
    # after specialise (its chain order), the version of stride 2 steps by a literal 2 and drops the test; the
    # version as written steps by |stride|
    chain = [next(p for p in PASSES if p.name == n) for n in ("restrict", "specialise", "modstep")]
    out = run_chain(unit(CONVT, convt_spec()), chain).text
    assert "kh = ptxf_mod_next(kh, 2, ((int)3)))" in out and "kw = ptxf_mod_next(kw, 2, ((int)3)))" in out
    assert "% ((int)2)" not in out
    assert "kh = ptxf_mod_next(kh, ptxf_mod_step(stride), K))" in out and "th % stride != 0" in out
    # specialise also versions the stride when modstep ran first (its helpers take values)
    chain = [next(p for p in PASSES if p.name == n) for n in ("restrict", "modstep", "specialise")]
    assert "ptxf_mod_step(((int)2))" in run_chain(unit(CONVT, convt_spec()), chain).text


def _with_helpers(u) -> str:
    return "\n\n".join(d for _, d in u.helpers) + "\n\n" + u.text


EMU = r"""
#include <cstdio>
#include <cstring>
#include <climits>
#include <cstdint>
#include <cstddef>
#include <vector>
struct ptxf_dim3 { unsigned x, y, z; };
static ptxf_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_equal_to_the_original_bit_for_bit_at_several_strides_and_paddings(tmp_path):
    """The original and the rewrite (runtime stride; the literal-stride form by a #define of 2, and of 3) on the host,
    every output compared bit for bit: strides 1 to 4, paddings 0 to 2, windows
    2 to 5, odd and even sizes."""
    programs = [EMU]
    orig = CONVT[CONVT.index("extern"):]
    new = ModStepPass().apply(unit(CONVT, convt_spec()))
    programs.append(re.sub(r"\bvoid convt\(", "void k0(", orig))
    programs += [d for _, d in new.helpers]
    programs.append(re.sub(r"\bvoid convt\(", "void k1(", new.text))
    for lit in (2, 3):  # the literal form: the test dropped
        src = CONVT.replace("int stride, int pad)", "int stride_unused, int pad)").replace("extern", f"#define stride {lit}\nextern", 1)
        u = ModStepPass().apply(unit(src, convt_spec()))
        assert "% stride" not in u.text.split("ptxf_mod_first")[-1]
        programs.append(re.sub(r"\bvoid convt\(", f"void l{lit}(", u.text[u.text.index("extern") if "extern" in u.text else 0:])
                        .replace("stride", str(lit)).replace(f"{lit}_unused", "stride_unused"))
    main = r"""
typedef void (*K)(const float*, const float*, float*, int, int, int, int, int, int, int, int, int, int);
static void run(K k, const std::vector<float>& x, const std::vector<float>& w, std::vector<float>& y,
                int N, int Cin, int Cout, int H, int W, int OH, int OW, int Ks, int s, int p) {
    blockDim = {128, 1, 1};
    int total = N * Cout * OH * OW;
    gridDim = {(unsigned)((total + 127) / 128), 1, 1};
    for (unsigned b = 0; b < gridDim.x; ++b) for (unsigned t = 0; t < 128; ++t) {
        blockIdx = {b, 0, 0}; threadIdx = {t, 0, 0};
        k(x.data(), w.data(), y.data(), N, Cin, Cout, H, W, OH, OW, Ks, s, p);
    }
}
int main() {
    unsigned seed = 7u;
    auto rnd = [&] { seed = seed * 1664525u + 1013904223u; return (float)((int)(seed >> 9) - (1 << 22)) / (1 << 22); };
    int cases = 0, bad = 0;
    for (int s : {1, 2, 3, 4}) for (int p = 0; p <= 2; ++p) for (int Ks = 2; Ks <= 5; ++Ks) {
        int N = 2, Cin = 3, Cout = 2, H = 5, W = 4;
        int as = s < 0 ? -s : s;
        int OH = (H - 1) * as - 2 * p + Ks, OW = (W - 1) * as - 2 * p + Ks;
        if (OH <= 0 || OW <= 0) continue;
        std::vector<float> x(N * Cin * H * W), w(Cin * Cout * Ks * Ks);
        for (auto& v : x) v = rnd();
        for (auto& v : w) v = rnd();
        std::vector<float> y0(N * Cout * OH * OW, -1.f), y1(y0.size(), -2.f);
        run(k0, x, w, y0, N, Cin, Cout, H, W, OH, OW, Ks, s, p);
        run(k1, x, w, y1, N, Cin, Cout, H, W, OH, OW, Ks, s, p);
        bad += std::memcmp(y0.data(), y1.data(), y0.size() * 4) != 0; cases++;
        if (s == 2 || s == 3) {
            std::vector<float> y2(y0.size(), -3.f);
            run(s == 2 ? l2 : l3, x, w, y2, N, Cin, Cout, H, W, OH, OW, Ks, 0, p);
            bad += std::memcmp(y0.data(), y2.data(), y0.size() * 4) != 0; cases++;
        }
    }
    std::printf("%s %d cases, %d different\n", bad ? "DIFFERENT" : "ok", cases, bad);
    return bad != 0;
}
"""
    host_ok("\n".join(programs) + main, tmp_path)


# a transposed 1-D convolution with dilation, runtime stride and dilation (KernelBench's dilated ConvTranspose1d)
CONVT1D_DIL = """
extern "C" __global__ void convt1d_dil(const float* x, const float* w, float* y, int L, int OL, int K, int stride,
                                       int pad, int dil)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OL) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        int t = o + pad - k * dil;
        if (t % stride != 0) continue;
        int i = t / stride;
        if (i < 0 || i >= L) continue;
        acc += x[i] * w[k];
    }
    y[o] = acc;
}
"""


def dil_spec(bench: str):
    return parse_spec(f"""
[kernel.convt1d_dil]
args = [
  {{ name = "x", role = "in", dtype = "f32", shape = ["L"] }},
  {{ name = "w", role = "in", dtype = "f32", shape = ["K"] }},
  {{ name = "y", role = "out", dtype = "f32", shape = ["OL"] }},
  {{ name = "L", role = "scalar", dtype = "i32", value = "L" }},
  {{ name = "OL", role = "scalar", dtype = "i32", value = "OL" }},
  {{ name = "K", role = "scalar", dtype = "i32", value = "K" }},
  {{ name = "stride", role = "scalar", dtype = "i32", value = "S" }},
  {{ name = "pad", role = "scalar", dtype = "i32", value = "P" }},
  {{ name = "dil", role = "scalar", dtype = "i32", value = "D" }},
]
launch = {{ grid = ["cdiv(OL, 128)"], block = [128], policy = "free" }}
[kernel.convt1d_dil.check]
sizes = [{{ L = 9, OL = 19, K = 3, S = 2, P = 1, D = 2 }}]
[kernel.convt1d_dil.bench]
sizes = [{bench}]
""").kernels["convt1d_dil"]


def test_a_dilation_specialised_to_a_literal_is_stepped_by_the_stride_over_the_gcd():
    """specialise versions the dilation (a counter's coefficient in the test) with the stride; modstep then steps
    each version: D = 3, S = 2 (coprime: step 2, the test dropped), D = 2, S = 4 (gcd 2: step 2, the test kept)."""
    spec = dil_spec("{ L = 4096, OL = 8200, K = 5, S = 2, P = 1, D = 3 }, { L = 4096, OL = 16390, K = 5, S = 4, P = 1, D = 2 }")
    chain = [next(p for p in PASSES if p.name == n) for n in ("specialise", "modstep")]
    out = run_chain(unit(CONVT1D_DIL, spec), chain).text
    assert "dil == 3" in out.replace("(", "").replace(")", "") or "((int)3)" in out
    assert out.count("ptxf_mod_next(k, 2, ((int)5))") == 2  # both versions step by 2 (S / gcd(D, S))
    assert "if (t % ((int)4) != 0) continue;" in out and "t % ((int)2) != 0" not in out  # gcd 2: kept; coprime: dropped
    assert "ptxf_mod_step(stride)" not in out  # the version as written: runtime dilation, refused there


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_dilated_versions_equal_the_original_bit_for_bit(tmp_path):
    """Every (stride, dilation) of 1..4 x 1..3 through the specialised and stepped kernel (versions for (2, 3), (4, 2),
    (3, 3), (2, 2)) against the original, paddings 0..3, windows 1..6, on the host."""
    spec = dil_spec("{ L = 4096, OL = 8200, K = 5, S = 2, P = 1, D = 3 }, { L = 4096, OL = 16390, K = 5, S = 4, P = 1, D = 2 }, "
                    "{ L = 4096, OL = 8200, K = 5, S = 3, P = 1, D = 3 }, { L = 4096, OL = 8200, K = 5, S = 2, P = 1, D = 2 }")
    chain = [next(p for p in PASSES if p.name == n) for n in ("specialise", "modstep")]
    new = run_chain(unit(CONVT1D_DIL, spec), chain)
    assert "ptxf_mod_first" in new.text
    orig = CONVT1D_DIL[CONVT1D_DIL.index("extern"):]
    program = [EMU, re.sub(r"\bvoid convt1d_dil\(", "void k0(", orig)] + [d for _, d in new.helpers] + \
        [re.sub(r"\bvoid convt1d_dil\(", "void k1(", new.text)]
    main = r"""
typedef void (*F)(const float*, const float*, float*, int, int, int, int, int, int);
static void run(F k, const std::vector<float>& x, const std::vector<float>& w, std::vector<float>& y, int L, int OL,
                int K, int s, int p, int d) {
    blockDim = {128, 1, 1}; gridDim = {(unsigned)((OL + 127) / 128), 1, 1};
    for (unsigned b = 0; b < gridDim.x; ++b) for (unsigned t = 0; t < 128; ++t) {
        blockIdx = {b, 0, 0}; threadIdx = {t, 0, 0};
        k(x.data(), w.data(), y.data(), L, OL, K, s, p, d);
    }
}
int main() {
    unsigned seed = 11u;
    auto rnd = [&] { seed = seed * 1664525u + 1013904223u; return (float)((int)(seed >> 9) - (1 << 22)) / (1 << 22); };
    int cases = 0, bad = 0;
    for (int s = 1; s <= 4; ++s) for (int d = 1; d <= 3; ++d) for (int p = 0; p <= 3; ++p) for (int K = 1; K <= 6; ++K) {
        int L = 7, OL = (L - 1) * s - 2 * p + d * (K - 1) + 1;
        if (OL <= 0) continue;
        std::vector<float> x(L), w(K);
        for (auto& v : x) v = rnd();
        for (auto& v : w) v = rnd();
        std::vector<float> y0(OL, -1.f), y1(OL, -2.f);
        run(k0, x, w, y0, L, OL, K, s, p, d);
        run(k1, x, w, y1, L, OL, K, s, p, d);
        bad += std::memcmp(y0.data(), y1.data(), OL * 4) != 0; cases++;
    }
    std::printf("%s %d cases, %d different\n", bad ? "DIFFERENT" : "ok", cases, bad);
    return bad != 0;
}
"""
    host_ok("\n".join(program) + main, tmp_path)
