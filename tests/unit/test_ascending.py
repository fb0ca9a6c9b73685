"""CPU tests of ascending.py: descending counted loops written as ascending ones before the passes read the kernel.

What it takes and leaves, that the rewritten kernel gives the original's bits on the host (each thread run serially:
the same iterations in the same order), and that the scan pass then reads a reverse cumulative sum."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import PASSES, unit_from_context
from ptxfactory.search.generators.transform.ascending import ascending_loops
from ptxfactory.search.generators.transform.base import Unit
from ptxfactory.protocol import LaunchConfig
from _host_cuda import SERIAL_PRELUDE, run_host
from test_transform import make_ctx

SPEC = parse_spec("""
[kernel.k]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(M, 128)"], block = [128], policy = "free" }
[kernel.k.check]
rtol = 1e-4
atol = 1e-3
sizes = [{ M = 3, N = 10 }]
[kernel.k.bench]
sizes = [{ M = 4096, N = 4096 }]
""").kernels["k"]


def kernel(loop: str, pre: str = "    float acc = 0.0f;") -> str:
    return f"""extern "C" __global__ void k(const float* x, float* y, int M, int N)
{{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
{pre}
{loop}
}}
"""


TAKEN = {
    "reverse_cumsum": "    for (int j = N - 1; j >= 0; --j) { acc += x[(size_t)r * N + j]; y[(size_t)r * N + j] = acc; }",
    "strict_bound": "    for (int j = N - 1; j > 0; j--) { acc = fmaxf(acc, x[r * N + j]); y[r * N + j] = acc * j; }",
    "reversed_operands": "    for (long long j = N - 2; 1 <= j; j -= 1) { acc = 0.5f * acc + x[r * N + j]; y[r * N + j + 1] = acc; }",
    "assign_form": "    for (int j = N - 1; j >= N / 2; j = j - 1) y[r * N + j] = x[r * N + N - 1 - j] + (float)j;",
}
LEFT = {
    "ascending": "    for (int j = 0; j < N; ++j) y[r * N + j] = x[r * N + j];",
    "unsigned": "    for (unsigned j = N - 1; j >= 1; --j) y[r * N + j] = x[r * N + j];",
    "step_two": "    for (int j = N - 1; j >= 0; j -= 2) y[r * N + j] = x[r * N + j];",
    "written_in_body": "    for (int j = N - 1; j >= 0; --j) { y[r * N + j] = x[r * N + j]; if (x[r * N + j] < 0) j--; }",
    "bound_read_from_memory": "    for (int j = N - 1; j >= (int)x[r * N]; --j) y[r * N + j] = 1.0f;",
    "bound_written_in_body": "    int lo = 0;\n    for (int j = N - 1; j >= lo; --j) { y[r * N + j] = x[r * N + j]; lo++; }",
    "declared_outside": "    int j;\n    for (j = N - 1; j >= 0; --j) y[r * N + j] = x[r * N + j];\n    y[r * N] = (float)j;",
}


def rewritten(src: str) -> str:
    return unit_from_context(make_ctx(src, SPEC)).text


@pytest.mark.parametrize("what", sorted(TAKEN))
def test_descending_loops_are_written_ascending(what):
    out = rewritten(kernel(TAKEN[what]))
    assert "--" not in out and "-= 1" not in out and "j = j - 1" not in out, out
    assert "j++)" in out and "for (" in out


@pytest.mark.parametrize("what", sorted(LEFT))
def test_other_loops_are_left_as_written(what):
    src = kernel(LEFT[what])
    unit = unit_from_context(make_ctx(src, SPEC))
    assert ascending_loops(unit.data, unit.body) == unit.data


def test_a_nested_descending_loop_inside_a_rewritten_one_is_rewritten_on_a_second_read():
    src = kernel("    for (int i = N - 1; i >= 0; --i)\n        for (int j = i; j >= 0; --j) y[r * N + j] += x[r * N + i];")
    once = rewritten(src)
    assert "i++)" in once and "--j" in once  # one rewrite per loop nest


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("what", sorted(TAKEN))
def test_same_bits_on_the_host(what, tmp_path):
    """Original and rewritten kernel, each thread run serially on the host: every output bit the same."""
    src = kernel(TAKEN[what])
    new = rewritten(src)
    M, N = 5, 37
    x = np.random.default_rng(1).normal(size=M * N).astype(np.float32)
    init = ", ".join(f"{v:.9g}f" for v in x)
    prog = SERIAL_PRELUDE + "#include <cmath>\nusing std::fmax; inline float fmaxf(float a, float b) { return std::fmax(a, b); }\n"
    prog += src.replace("void k(", "void k_old(") + new.replace("void k(", "void k_new(")
    prog += f"""
int main() {{
    static float x[{M * N}] = {{{init}}};
    static float a[{M * N}], b[{M * N}];
    blockDim.x = 128;
    for (unsigned t = 0; t < 128; ++t) {{ threadIdx.x = t; blockIdx.x = 0; k_old(x, a, {M}, {N}); k_new(x, b, {M}, {N}); }}
    printf("%s\\n", std::memcmp(a, b, sizeof a) == 0 ? "same" : "DIFFERENT");
}}
"""
    assert run_host(prog, tmp_path) == "same"


def test_the_scan_pass_reads_a_reverse_cumulative_sum():
    unit = unit_from_context(make_ctx(kernel(TAKEN["reverse_cumsum"]), SPEC))
    scans = [p for p in PASSES if p.name.startswith("scan_")]
    assert scans and all(p.why_not(unit) is None for p in scans), [(p.name, p.why_not(unit)) for p in scans]
