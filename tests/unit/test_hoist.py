"""CPU tests of the ``hoist`` pass (a buffer's elements that an inner loop of literal trip count reads at indices the
enclosing loop never changes -> registers filled once before that loop): what it rewrites, what it refuses, the
output compiled with NVRTC without local memory, and equal to the original bit for bit on the host."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import PASSES, plan_chains, unit_from_context
from ptxfactory.search.generators.transform.hoist import MAX_HOLD, HoistPass

from test_smem_tile import host_agree
from test_transform import compiles, make_ctx, unit

# the nearest centroid's squared distance, one thread per point: x's row read again for every centroid
NEAREST = """
extern "C" __global__ void nearest(const float* x, const float* c, float* dist, int N, int K)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float best = 3.0e38f;
    for (int k = 0; k < K; k++) {
        float d = 0.0f;
        for (int j = 0; j < 16; j++) {
            float diff = x[i * 16 + j] - c[k * 16 + j];
            d += diff * diff;
        }
        best = fminf(best, d);
    }
    dist[i] = best;
}
"""

SPEC = parse_spec("""
[kernel.nearest]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["N", "16"] },
  { name = "c", role = "in", dtype = "f32", shape = ["K", "16"] },
  { name = "dist", role = "out", dtype = "f32", shape = ["N"] },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "K", role = "scalar", dtype = "i32", value = "K" },
]
launch = { grid = ["cdiv(N, 128)"], block = [128], policy = "free" }
[kernel.nearest.check]
sizes = [{ N = 7, K = 3 }]
[kernel.nearest.bench]
sizes = [{ N = 1048576, K = 64 }]
""").kernels["nearest"]


def test_the_threads_row_is_read_once_before_the_centroid_loop():
    out = HoistPass().apply(unit(NEAREST, SPEC)).text
    fill = out.index("ptxf_hold0[j - (0)] = x[i * 16 + j];")
    assert out.index("float ptxf_hold0[16];") < fill < out.index("for (int k = 0; k < K; k++) {\n")
    assert "{ int k = 0; if (k < K) {" in out  # no read where the loop does not run (K = 0)
    assert "float diff = ptxf_hold0[j - (0)] - c[k * 16 + j];" in out and "x[" not in out[fill + 40:]
    assert re.search(r"#pragma unroll\s+for \(int j = 0; j < 16; j\+\+\) \{\s+float diff", out)  # indices constant
    compiles(out, SPEC, "nearest")  # (no local memory: the array is in registers)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("size", [{"N": 37, "K": 5}, {"N": 9, "K": 1}, {"N": 5, "K": 0}])
def test_the_hoisted_kernel_gives_the_originals_bits_on_the_host(size, tmp_path):
    assert host_agree(NEAREST, SPEC, size, [HoistPass()], tmp_path).strip() == "1 dist same"


def test_after_specialise_and_ldg_the_k_means_trial_holds_its_point():
    """bench/trials/kmeans_assign: D is a runtime scalar; specialise makes it a literal at the bench sizes whose D is
    at most 64 (32 and 64), and hoist then holds the point's row (read through __ldg) in each of those versions."""
    trial = Path(__file__).parents[2] / "bench" / "trials" / "kmeans_assign"
    spec = parse_spec((trial / "kmeans_assign.cu.toml").read_text()).kernels["kmeans_assign"]
    u = unit_from_context(make_ctx((trial / "kmeans_assign.cu").read_text(), spec))
    chains = {"+".join(p.name for p in c) for c in plan_chains(u)}
    assert any(c.endswith("specialise+hoist+launch_bounds") and "grid_stride" in c for c in chains), chains
    passes = {p.name: p for p in PASSES}
    for name in ("restrict", "ldg", "specialise"):
        u = passes[name].apply(u)
    out = HoistPass().apply(u).text
    assert "= __ldg(x + (i * ((int)32) + j)); }" in out and "= __ldg(x + (i * ((int)64) + j)); }" in out
    assert out.count("float ptxf_hold") == 2  # (the version as written, D a runtime value, is left alone)
    compiles(out, spec, "kmeans_assign")


@pytest.mark.parametrize("case, source", [
    ("index changes with k", NEAREST.replace("x[i * 16 + j]", "x[(i + k) * 16 + j]")),
    ("no literal trip", NEAREST.replace("j < 16", "j < K")),
    ("too many", NEAREST.replace("j < 16", f"j < {MAX_HOLD + 1}")),
    ("read under a condition", NEAREST.replace("float diff = x[i * 16 + j]", "float diff = (j < 8 ? x[i * 16 + j] : 0.0f)")),
    ("inner loop under a condition", NEAREST.replace("for (int j = 0; j < 16; j++) {", "if (k > 0) for (int j = 0; j < 16; j++) {")),
    ("break in the loop", NEAREST.replace("best = fminf(best, d);", "best = fminf(best, d); if (best == 0.0f) break;")),
    ("buffer written", NEAREST.replace(
        "extern \"C\" __global__ void nearest(const float* x, const float* c, float* dist, int N, int K)",
        "extern \"C\" __global__ void nearest(float* x, const float* c, float* dist, int N, int K)").replace(
        "dist[i] = best;", "dist[i] = best; x[i * 16] = 0.0f;")),
    ("not a spec input", NEAREST.replace("float diff = x[i * 16 + j] - c[k * 16 + j];",
                                         "float diff = dist[i * 0 + j * 0] - c[k * 16 + j];")),
    ("unrolled by 4 already", NEAREST.replace("        for (int j = 0; j < 16; j++) {", "        #pragma unroll 4\n        for (int j = 0; j < 16; j++) {")),
    ("the loop's test calls", NEAREST.replace("k < K;", "k < min(K, N);")),
    ("the loop a branch of an if", NEAREST.replace("    for (int k = 0; k < K; k++) {", "    if (K > 0) for (int k = 0; k < K; k++) {")),
])
def test_refused(case, source):
    assert not HoistPass().applies(unit(source, SPEC)), case


def test_a_while_loop_is_guarded_by_its_condition_and_a_do_loop_is_not():
    loop = """    for (int k = 0; k < K; k++) {
        float d = 0.0f;"""
    as_while = NEAREST.replace(loop, """    int k = 0;
    while (k < K) {
        float d = 0.0f;""").replace("best = fminf(best, d);", "best = fminf(best, d); k++;")
    # a counted while (the step last) reads as its for loop (while_for.py); with the step elsewhere it stays a while,
    # and the hold is guarded by its condition
    assert "for (int k = 0; k < K; k++)" in unit(as_while, SPEC).text
    kept = as_while.replace("best = fminf(best, d); k++;", "k++; best = fminf(best, d);")
    out = HoistPass().apply(unit(kept, SPEC)).text
    assert "while (k < K)" in out and "{ if (k < K) {" in out
    compiles(out, SPEC, "nearest")
    as_do = as_while.replace("while (k < K) {", "do {").replace("k++;\n    }", "k++;\n    } while (k < K);")
    out = HoistPass().apply(unit(as_do, SPEC)).text
    assert "if (k < K)" not in out.split("do {")[0] and "float ptxf_hold0[16];" in out
    compiles(out, SPEC, "nearest")


def test_a_large_block_holds_less():
    """A quarter of the registers a thread of the block may have: 48 elements under a block of 128 (255 registers), none
    under a block of 1024 (64 registers: 16 at most), 16 there."""
    source = NEAREST.replace("j < 16", "j < 48").replace("i * 16", "i * 48").replace("k * 16", "k * 48")
    assert HoistPass().applies(unit(source, SPEC))
    big = SPEC.model_copy(update={"launch": SPEC.launch.model_copy(update={"block": [1024], "grid": ["cdiv(N, 1024)"]})})
    assert not HoistPass().applies(unit(source, big))
    assert HoistPass().applies(unit(NEAREST, big))  # 16
    assert not HoistPass().applies(unit(NEAREST.replace("j < 16", "j < 17"), big))
