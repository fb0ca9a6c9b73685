"""CPU tests of the ``blockrow`` pass: a kernel written one block per row (shared-memory tree reductions) gets any
number of lanes per row. What it rewrites (the reduction idioms, the reads of [0], the barriers, the launch), what
it refuses, and every output compiled with NVRTC; the shipped block-per-row examples included."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import evaluate, load_spec
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, Unit
from ptxfactory.search.generators.transform.blockrow import BlockRowPass

from test_transform import make_ctx, spec_for, unit

ROOT = Path(__file__).resolve().parents[2]
ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
SOFTMAX = """
extern "C" __global__ void k(const float* x, float* y, int M, int N)
{
    __shared__ float red[128];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    float m = -3.0e38f;
    for (int i = tid; i < N; i += blockDim.x) m = fmaxf(m, x[row * N + i]);
    red[tid] = m;
    __syncthreads();
    for (int s = 64; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    float mx = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int i = tid; i < N; i += blockDim.x) sum += expf(x[row * N + i] - mx);
    red[tid] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    float total = red[0];
    for (int i = tid; i < N; i += blockDim.x) y[row * N + i] = expf(x[row * N + i] - mx) / total;
}
"""


def spec(**kw):
    kw.setdefault("grid", '["M"]')
    kw.setdefault("sizes", "[{ M = 7, N = 100 }]")
    return spec_for("k", ARGS, **kw)


def compiles(source: str, s, lanes) -> str:
    ctx = make_ctx(source, s)
    p = next(q for q in PASSES if isinstance(q, BlockRowPass) and q.lanes == lanes)
    cand = TransformGenerator().candidate(ctx, p.apply(unit(source, s)), [p])
    assert cand is not None and cand.params[f"pass:{p.name}"] == 1
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    return cand.kernel_text


@pytest.mark.parametrize("lanes", ["auto", 32, 128])
def test_softmax_reductions_become_row_reductions(lanes):
    s = spec(block="[128]")
    p = BlockRowPass(lanes)
    assert p.why_not(unit(SOFTMAX, s)) is None
    out = p.apply(unit(SOFTMAX, s))
    assert "__shared__" not in out.text and "red[" not in out.text
    assert "const float ptxf_r0 = ptxf_row_reduce((float)(m), [](const float& ptxf_a, const float& ptxf_b) { return (float)(fmaxf(ptxf_a, ptxf_b)); });" in out.text
    assert "float mx = ptxf_r0;" in out.text and "float total = ptxf_r1;" in out.text
    assert out.text.count("ptxf_row_sync();") == 1  # the barrier after reading red[0]
    assert "int row = (int)((unsigned long long)blockIdx.x * blockDim.y + threadIdx.y);" in out.text
    dims = [evaluate(b, {"M": 1000, "N": 64}) for b in out.launch.block]
    grid = evaluate(out.launch.grid[0], {"M": 1000, "N": 64})
    assert dims[0] * dims[1] <= 1024 and grid * dims[1] >= 1000 and (dims[0] <= 32 or dims[1] == 1)
    compiles(SOFTMAX, s, lanes)


def test_exact_specs_keep_their_sums():
    assert "exact" in BlockRowPass(32).why_not(unit(SOFTMAX, spec(block="[128]", rtol=0, atol=0)))


@pytest.mark.parametrize("change,reason", [
    ("float total = red[0];", "float total = red[1];"),
    ("int row = blockIdx.x;", "int row = blockIdx.x; if (blockIdx.x > 5) return;"),
    ("int tid = threadIdx.x;", "int tid = threadIdx.x; int g = gridDim.x;"),
    ("float total = red[0];", "float total = red[0]; m = __shfl_xor_sync(0xffffffffu, m, 1);"),
])
def test_refusals(change, reason):
    s = spec(block="[128]")
    assert BlockRowPass("auto").why_not(unit(SOFTMAX.replace(change, reason), s)) is not None


@pytest.mark.parametrize("name", ["standardize_rows", "softmax", "rmsnorm", "layernorm", "rowsum"])
def test_the_block_per_row_examples(name):
    path = ROOT / "examples" / name / f"{name}.cu"
    s = load_spec(str(path) + ".toml").kernels[name]
    k = find_kernel(path.read_text(), name)
    u = Unit(text=k.text, launch=s.launch, spec=s, c_linkage=True)
    assert BlockRowPass("auto").why_not(u) is None
    compiles(path.read_text(), s, "auto")
