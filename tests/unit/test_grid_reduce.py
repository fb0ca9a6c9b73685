"""CPU tests of the ``grid_reduce`` transform pass (search/generators/transform/grid_reduce.py): a block-sum kernel
that loads one element per thread folds many per thread over a grid capped at one wave.

Where it applies and why it refuses, the rewrite and its launch (capped with the GPU's facts, kept without), NVRTC
compiles, the generator's chain with shuffle_reduce, and the semantics: the original and the rewrite run on the host
(g++, thread blocks emulated by tests/unit/_host_cuda.py) at sizes inside, on and past a block's edge, with grids
capped at 1, 3 and more blocks than needed, and give the same sum (integer-valued data: float sums exact).
"""
from __future__ import annotations

import dataclasses
import shutil
import subprocess

import pytest

from ptxfactory.protocol import GpuFacts, evaluate
from ptxfactory.search.generators.transform import PASSES, TransformGenerator
from ptxfactory.search.generators.transform.grid_reduce import GridReducePass
from ptxfactory.search.generators.transform.grid_stride import FACTS_NOTE

from _host_cuda import HOST_BLOCKS
from ptxfactory.protocol.spec import parse_spec

from test_transform import compiles, make_ctx, unit

SUM = """
extern "C" __global__ void block_sum(const float* x, const float* w, float* out, int n)
{
    __shared__ float cache[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    cache[tid] = (i < n) ? x[i] * w[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) cache[tid] += cache[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, cache[0]);
}
"""
ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["n"] },
  { name = "w", role = "in", dtype = "f32", shape = ["n"] },
  { name = "out", role = "inout", dtype = "f32", shape = [1], init = "zeros" },
  { name = "n", role = "scalar", dtype = "i32", value = "n" },
"""
GR = GridReducePass()


def sum_spec(*, rtol=1e-4, atol=1e-3, deterministic=False, block="[256]", policy="free"):
    """The kernel's spec: a float atomic sum is not repeatable bit for bit (deterministic = false)."""
    return parse_spec(f"""
[kernel.block_sum]
args = [{ARGS}]
launch = {{ grid = ["cdiv(n, 256)"], block = {block}, policy = "{policy}" }}
[kernel.block_sum.check]
rtol = {rtol}
atol = {atol}
deterministic = {str(deterministic).lower()}
sizes = [{{ n = 1000 }}, {{ n = 1 }}]
[kernel.block_sum.bench]
sizes = [{{ n = 16777216 }}]
""").kernels["block_sum"]


def test_registered_before_shuffle_reduce_in_the_grid_group():
    names = [p.name for p in PASSES]
    assert names.index("grid_reduce") < names.index("shuffle_reduce")
    assert GR.group == "grid" and not GR.exact


def test_rewrites_the_load_into_a_fold_and_caps_the_grid_with_the_gpu_s_facts():
    u = unit(SUM, sum_spec())
    assert GR.why_not(u) is None
    out = GR.apply(u)
    assert "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int)gridDim.x * (int)blockDim.x)" in out.text
    assert "ptxf_a = ptxf_a + (float)(x[i] * w[i]);" in out.text and "cache[tid] = ptxf_a;" in out.text
    assert "cache[tid] = (i < n)" not in out.text and "if (tid == 0) atomicAdd(out, cache[0]);" in out.text
    assert out.launch.grid == ["cdiv(n, 256)"]  # no GPU facts: the grid stays, one element a thread at most
    compiles(out.text, sum_spec(), "block_sum")
    facts = GpuFacts(name="test GPU", arch="sm_90a", sm_count=132, l2_bytes=1 << 20, copy_gbps=100.0, peak_gbps=200.0)
    capped = GR.apply(dataclasses.replace(u, notes={FACTS_NOTE: facts}))
    assert capped.launch.grid == ["min(cdiv(n, 256), 1056)"]  # 132 SMs x 8 blocks of 256
    assert evaluate(capped.launch.grid[0], {"n": 1000}) == 4 and evaluate(capped.launch.grid[0], {"n": 10**8}) == 1056


def test_the_generator_chains_it_with_shuffle_reduce():
    cands = TransformGenerator().propose(make_ctx(SUM, sum_spec()))
    chained = [c for c in cands if "pass:grid_reduce" in c.params and "pass:shuffle_reduce" in c.params]
    assert chained and "pass:atomic_agg" not in chained[0].params  # its atomic is one a block already
    for c in chained[:2]:
        compiles(c.source, sum_spec(), "block_sum")


LOAD = "cache[tid] = (i < n) ? x[i] * w[i] : 0.0f;"
ATOMIC = "if (tid == 0) atomicAdd(out, cache[0]);"
REFUSALS = {  # what changes in SUM -> a piece of the reason (the later ones: an adversarial review's wrong rewrites)
    "per-block output": ((ATOMIC, "if (tid == 0) out[blockIdx.x] = cache[0];"), "global memory written"),
    "atomic per block slot": (("atomicAdd(out, cache[0])", "atomicAdd(out + blockIdx.x % 2, cache[0])"),
                              "is not p, p + c or &p[c]"),
    "a step after the load": ((LOAD, LOAD + " cache[tid] = cache[tid] * cache[tid];"), "written outside the load and the tree"),
    "a block's condition": ((ATOMIC, "if (tid == 0 && blockIdx.x == 0) atomicAdd(out, cache[0]);"), "not 'if (t == 0)"),
    "a per-block address": ((ATOMIC, "float* o = blockIdx.x == 0 ? out : out + 1; if (tid == 0) atomicAdd(o, cache[0]);"),
                            "is not p, p + c or &p[c]"),
    "a second atomic": ((ATOMIC, ATOMIC + " if (tid == 0) atomicAdd(out, 1.0f);"), "2 atomics"),
    "a bias before the tree": (("    __syncthreads();\n    for", "    if (tid == 0) cache[0] += 1.0f;\n    __syncthreads();\n    for"),
                               "written outside the load and the tree"),
    "an alias of the index": ((LOAD, "int k = i; cache[tid] = (i < n) ? x[k] * w[k] : 0.0f;"), "is read outside the load"),
    "a local in the element": ((LOAD, "const float two = 2.0f; cache[tid] = (i < n) ? x[i] * two : 0.0f;"), "reads 'two'"),
    "the block in the element": ((LOAD, "cache[tid] = (i < n) ? x[i] * (float)(blockIdx.x % 3) : 0.0f;"), "reads 'blockIdx'"),
    "the grid in the element": ((LOAD, "cache[tid] = (i < n) ? x[i] * (float)(gridDim.x % 2) : 0.0f;"), "reads 'gridDim'"),
    "a bound of bits": ((LOAD, "cache[tid] = (i < (n & ~7)) ? x[i] : 0.0f;"), "cannot be evaluated"),
    "max tree": (("cache[tid] += cache[tid + s];", "cache[tid] = fmaxf(cache[tid], cache[tid + s]);"), "not a sum"),
    "nonzero fallback": ((": 0.0f;", ": 1.0f;"), "is not zero"),
    "index read later": ((ATOMIC, "if (tid == 0 && i < n) atomicAdd(out, cache[0]);"), "is read outside the load"),
    "no ternary": (("cache[tid] = (i < n) ? x[i] * w[i] : 0.0f;", "cache[tid] = x[i] * w[i];"), "the load is not"),
    "a return": (("int tid = threadIdx.x;", "int tid = threadIdx.x; if (n == 0) return;"), "a return in the kernel"),
    "no tree": (("for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n        if (tid < s) cache[tid] += cache[tid + s];\n"
                 "        __syncthreads();\n    }", ""), "no shared-memory tree reduction loop"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refuses(case):
    change, reason = REFUSALS[case]
    src = SUM.replace(*change)
    assert src != SUM
    why = GR.why_not(unit(src, sum_spec()))
    assert why is not None and reason in why, why


def test_refuses_a_grid_that_does_not_cover_the_bound():
    """A fixed grid of 4 blocks sums the first 1024 elements only: folded, it would sum them all."""
    spec = sum_spec()
    fixed = spec.model_copy(update={"launch": spec.launch.model_copy(update={"grid": ["4"]})})
    u = unit(SUM, fixed)
    u = dataclasses.replace(u, launch=u.launch.model_copy(update={"grid": ["4"]}))
    assert "do not cover" in GR.why_not(u)


def test_refuses_an_exact_or_repeatable_float_spec_and_a_fixed_launch():
    assert "exact results" in GR.why_not(unit(SUM, sum_spec(rtol=0, atol=0)))
    assert "repeatable bits" in GR.why_not(unit(SUM, sum_spec(deterministic=True)))
    assert "not \"free\"" in GR.why_not(unit(SUM, sum_spec(policy="fixed")))
    assert "multiple of 32" in GR.why_not(unit(SUM, sum_spec(block="[100]")))


HOST_MAIN = r"""
static inline float atomicAdd(float* p, float v) { static std::mutex m; std::lock_guard<std::mutex> g(m); float o = *p; *p += v; return o; }
""".strip()

HOST_RUN = r"""
int main(int argc, char** argv) {
    int n = atoi(argv[1]);
    std::vector<float> x(n), w(n);
    for (int j = 0; j < n; ++j) { x[j] = (float)(j % 7 - 3); w[j] = (float)(j % 3 + 1); }
    blockDim.x = 256;
    float want = 0.0f;
    gridDim.x = (n + 255) / 256;
    launch(gridDim.x, 256, [&] { k_orig(x.data(), w.data(), &want, n); });
    for (int a = 2; a < argc; ++a) {
        float got = 0.0f;
        gridDim.x = atoi(argv[a]);
        launch(gridDim.x, 256, [&] { k_fold(x.data(), w.data(), &got, n); });
        if (got != want) { printf("grid %d: %g, the original %g\n", gridDim.x, got, want); return 1; }
    }
    printf("same %g\n", want);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) for the host emulation")
def test_the_fold_gives_the_original_s_sum_on_the_host_under_any_grid(tmp_path):
    u = unit(SUM, sum_spec())
    folded = GR.apply(u)
    prelude = r"""#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
struct Dim { unsigned x = 0, y = 0, z = 0; };
thread_local Dim threadIdx, blockIdx;
Dim blockDim, gridDim;
""" + HOST_BLOCKS + HOST_MAIN + "\n"
    kernels = "".join(v.text.replace('extern "C" __global__ void block_sum(', f"static void {name}(")
                      for v, name in ((u, "k_orig"), (folded, "k_fold")))
    src = tmp_path / "grid_reduce_host.cpp"
    src.write_text(prelude + kernels.replace("__shared__", "static") + HOST_RUN)
    exe = tmp_path / "grid_reduce_host"
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", str(src), "-o", str(exe), "-pthread"],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    for n in (1, 255, 256, 257, 3000):
        run = subprocess.run([str(exe), str(n), "1", "3", str(n // 256 + 5)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and run.stdout.startswith("same"), (n, run.stdout, run.stderr)


def test_the_shape_is_refused_before_the_specs_demands():
    """A one-block reduction (no blockIdx.x index before the tree) under a deterministic spec: the structural reason
    comes first (a new user set check.deterministic = false and met it only then, 2026-12-05)."""
    src = ('extern "C" __global__ void block_sum(const float* x, float* out, int n)\n{\n    __shared__ float part[256];\n'
           "    float acc = 0.0f;\n    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];\n"
           "    part[threadIdx.x] = acc;\n    __syncthreads();\n"
           "    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];\n"
           "        __syncthreads();\n    }\n    if (threadIdx.x == 0) out[0] = part[0];\n}\n")
    why = GR.why_not(unit(src, sum_spec(deterministic=True)))
    assert why is not None and "no index" in why and "repeatable" not in why
