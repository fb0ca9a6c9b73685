"""Static checks look at the kernel under test and what it reaches (the device functions it calls, the macros it
expands, the globals it touches), not at other kernels or host code in the same file."""
from __future__ import annotations

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.static_checks import check_binary, check_source, kernel_ptx, ptx_functions, scoped_source
from ptxfactory.protocol import Candidate, LaunchConfig

HONEST = """
__device__ __forceinline__ float twice(float v) { return 2.0f * v; }

extern "C" __global__ void k(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = twice(x[i]);
}
"""

UNRELATED = {
    "printf": 'extern "C" __global__ void debug_dump(const float* x) { printf("%f\\n", x[threadIdx.x]); }\n',
    "clock": 'extern "C" __global__ void timed(long long* t) { t[0] = clock64(); }\n',
    "global": '__device__ unsigned int launches;\nextern "C" __global__ void count() { atomicAdd(&launches, 1u); }\n',
    "host": "void launch(const float* x, float* y, int n) { k<<<(n + 255) / 256, 256>>>(x, y, n); cudaDeviceSynchronize(); }\n",
}


def cand(source: str, name: str = "k") -> Candidate:
    return Candidate(kernel_name=name, source=source, kernel_text=source, launch=LaunchConfig(grid=[1], block=[256]))


@pytest.mark.parametrize("what", ["printf", "clock", "global"])
def test_an_unrelated_kernel_in_the_same_file_does_not_refuse_the_candidate(what):
    src = HONEST + UNRELATED[what]
    assert check_source(cand(src)) is None
    out = compile_candidate(cand(src), "sm_90a")
    assert isinstance(out, Compiled), out.log
    assert check_binary(cand(src), out.cubin, "sm_90a") is None
    # the other kernel itself is still refused
    other = {"printf": "debug_dump", "clock": "timed", "global": "count"}[what]
    finding = check_source(cand(src, other)) or check_binary(cand(src, other), out.cubin, "sm_90a")
    assert finding is not None and finding.check == "static_source"


def test_host_code_that_launches_the_kernel_is_not_the_kernel():
    src = HONEST + UNRELATED["host"]
    assert "cudaDeviceSynchronize" not in scoped_source(src, "k")
    assert check_source(cand(src)) is None


@pytest.mark.parametrize("helper,why", [
    ('__device__ float twice(float v) { printf("%f", v); return 2.0f * v; }', "printf"),
    ("#define TWICE(v) (clock() ? 2.0f * (v) : 0.0f)\n__device__ float twice(float v) { return TWICE(v); }", "clock"),
    ("__device__ int calls;\n__device__ float deeper(float v) { calls++; return v; }\n"
     "__device__ float twice(float v) { return 2.0f * deeper(v); }", "mutable __device__ global"),
    ("struct F { float v; };\n__device__ F operator*(float a, F b) { printf(\"!\"); return F{a * b.v}; }\n"
     "__device__ float twice(float v) { return (2.0f * F{v}).v; }", "printf"),  # an operator is called without its name
])
def test_what_the_kernel_calls_is_still_checked(helper, why):
    src = HONEST.replace("__device__ __forceinline__ float twice(float v) { return 2.0f * v; }", helper)
    finding = check_source(cand(src))
    assert finding is not None and why in finding.reason


def test_line_numbers_stay_those_of_the_file():
    src = UNRELATED["printf"] + HONEST.replace("return 2.0f * v;", 'printf("x"); return 2.0f * v;')
    scoped = scoped_source(src, "k")
    assert len(scoped) == len(src) and scoped.count("\n") == src.count("\n")
    line = next(i + 1 for i, ln in enumerate(src.splitlines()) if 'printf("x")' in ln)
    assert check_source(cand(src)).reason.startswith(f"line {line}: calls printf")


def test_a_global_written_by_a_called_function_is_found_in_the_ptx():
    """The compiled-code check follows calls: a noinline device function that writes a global the source hid."""
    src = ("#define PERSIST __device__\nPERSIST unsigned int seen;\n"
           "__device__ __noinline__ void mark() { seen = 1u; }\n"
           'extern "C" __global__ void k(float* y) { mark(); y[0] = 1.0f; }\n'
           'extern "C" __global__ void clean(float* y) { y[0] = 2.0f; }\n')
    out = compile_candidate(cand(src), "sm_90a")
    assert isinstance(out, Compiled), out.log
    finding = check_binary(cand(src), out.cubin, "sm_90a")
    assert finding is not None and "seen" in finding.reason
    assert check_binary(cand(src, "clean"), out.cubin, "sm_90a") is None


def test_ptx_functions_and_kernel_ptx():
    ptx = (".extern .func (.param .b32 r) proto(.param .b32 p);\n"
           ".func (.param .b32 r) _Z4helpi(.param .b32 p)\n{\n\t{ .reg .b32 t; }\n\tret;\n}\n"
           ".visible .entry _Z1kPf(.param .u64 p)\n.maxntid 256, 1, 1\n{\n\tcall.uni (r), _Z4helpi, (p);\n\tret;\n}\n"
           ".visible .entry other(.param .u64 p)\n{\n\tret;\n}\n")
    funcs = ptx_functions(ptx)
    assert set(funcs) == {"_Z4helpi", "_Z1kPf", "other"} and funcs["_Z4helpi"][1].endswith("ret;\n}")
    scoped = kernel_ptx(ptx, "k")
    assert "_Z4helpi(" in scoped and ".entry _Z1kPf" in scoped and "other" not in scoped
    assert kernel_ptx(ptx, "missing") == ptx
