"""sink.py: pure declarations written before a kernel's thread index move to just after its guard, so the passes'
openings (which start at the index) read the kernel; anything it cannot prove harmless is left as written."""
from __future__ import annotations

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import Candidate, LaunchConfig, parse_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators.transform import TransformGenerator, refusals, unit_from_context
from ptxfactory.search.generators.transform import syntax as sx
from ptxfactory.search.generators.transform.sink import sink_declarations

SPEC = """[kernel.rowmax]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(M, 128)"], block = [128], shared_mem = 0, policy = "free" }
[kernel.rowmax.check]
rtol = 0
atol = 0
sizes = [{ M = 7, N = 100 }]
[kernel.rowmax.bench]
sizes = [{ M = 4096, N = 4096 }]
"""

ACC_FIRST = """extern "C" __global__ void rowmax(const float* x, float* y, int M, int N)
{
    float best = -1e30f;
    int count = 0, unused = N * 2;
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    for (int j = 0; j < N; j++) { best = fmaxf(best, x[(size_t)r * N + j]); count++; }
    y[r] = best + 0.0f * count;
}
"""


def _sink(src: str) -> str:
    data = src.encode()
    fn = sx.kernel_function(sx.parse(data).root_node)
    return sink_declarations(data, fn.child_by_field_name("body")).decode()


def _ctx(src: str) -> GenContext:
    spec = parse_spec(SPEC).kernels["rowmax"]
    k = find_kernel(src, "rowmax")
    orig = Candidate(kernel_name="rowmax", source=src, kernel_text=k.text,
                     launch=LaunchConfig(grid=spec.launch.grid, block=spec.launch.block, shared_mem=0))
    return GenContext(spec=spec, source=src, kernel=k, original=orig)


def test_accumulators_declared_before_the_index_move_after_the_guard_and_rowpar_takes_the_kernel():
    out = _sink(ACC_FIRST)
    lines = [ln.strip() for ln in out.splitlines()]
    assert lines.index("if (r >= M) return;") < lines.index("float best = -1e30f;") < lines.index("int count = 0, unused = N * 2;")
    assert lines.index("int r = blockIdx.x * blockDim.x + threadIdx.x;") == 2
    ctx = _ctx(ACC_FIRST)
    assert not any(n.startswith("rowpar") and not n.startswith("rowpar_cluster")  # (clusters need the GPU's facts)
                   for names, _ in refusals(unit_from_context(ctx)) for n in names.split(", "))
    cands = TransformGenerator().propose(ctx)
    assert cands[0].description == "transform rowpar_auto"
    assert isinstance(compile_candidate(cands[0], "sm_90a"), Compiled)


def test_the_guarded_block_form_gets_the_declarations_at_its_start():
    src = ACC_FIRST.replace("if (r >= M) return;\n    for", "if (r < M) {\n        for").replace("0.0f * count;\n", "0.0f * count;\n    }\n")
    out = _sink(src)
    assert "if (r < M) {\n        float best = -1e30f;\n        int count = 0, unused = N * 2;\n        for" in out, out


@pytest.mark.parametrize("first", [
    "float v = x[0];",                       # a memory read
    "float s = expf(1.0f);",                 # a call
    "__shared__ float tile[32];",            # shared data
])
def test_a_statement_it_cannot_prove_harmless_before_the_index_stops_it(first):
    src = ACC_FIRST.replace("float best = -1e30f;", f"{first}\n    float best = -1e30f;")
    assert _sink(src) == src


def test_a_write_before_the_guard_stops_it():
    src = ACC_FIRST.replace("int count = 0, unused = N * 2;", "int count = 0, unused = N * 2;\n    int k = count++;")
    assert _sink(src) == src


MAXPOOL = """__global__ void maxpool2x2(const float* x, float* y, int N, int C, int H, int W) {
    int Ho = H / 2, Wo = W / 2;
    float unused = 0.0f;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * C * Ho * Wo;
    if (idx >= total) return;
    int wo = idx % Wo;
    y[idx] = x[wo] + unused;
}
"""


def test_what_the_guard_reads_goes_before_the_index_and_the_rest_after_the_guard():
    lines = [ln.strip() for ln in _sink(MAXPOOL).splitlines()]
    order = [lines.index(t) for t in ("int Ho = H / 2, Wo = W / 2;", "int total = N * C * Ho * Wo;",
                                      "int idx = blockIdx.x * blockDim.x + threadIdx.x;", "if (idx >= total) return;",
                                      "float unused = 0.0f;", "int wo = idx % Wo;")]
    assert order == sorted(order), lines


def test_an_alias_of_threadidx_first_keeps_its_place_and_the_accumulators_go_after_the_guard():
    src = ACC_FIRST.replace("    float best = -1e30f;\n", "    int tid = threadIdx.x;\n    float best = -1e30f;\n").replace(
        "+ threadIdx.x;", "+ tid;")
    lines = [ln.strip() for ln in _sink(src).splitlines()]
    assert lines.index("int tid = threadIdx.x;") < lines.index("int r = blockIdx.x * blockDim.x + tid;") \
        < lines.index("if (r >= M) return;") < lines.index("float best = -1e30f;")
