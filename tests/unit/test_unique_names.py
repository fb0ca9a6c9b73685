"""Locals declared more than once renamed apart (search/generators/transform/unique_names.py), which the passes that
read locals by name (``unique_names = True``: unflatten, vectorize_x) are given: scope rules, collisions, what is
left as written, the same machine code on real kernels, and a trial that unflatten took only since."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.elf import code_digest
from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import load_spec
from ptxfactory.search.generators.transform import TransformGenerator
from ptxfactory.search.generators.transform import syntax as sx
from ptxfactory.search.generators.transform.unique_names import unique_locals
from ptxfactory.search.strategy import original_candidate

from _generator_support import example_ctx

ROOT = Path(__file__).resolve().parents[2]


def renamed(src: str) -> str:
    return unique_locals(src.encode(), sx.kernel_function(sx.parse(src.encode()).root_node)).decode()


def test_sibling_loops_get_names_of_their_own():
    src = ("__global__ void k(const float* x, float* y, int N)\n{\n"
           "    float s = 0.0f;\n    for (int d = 0; d < N; d++) s += x[d];\n"
           "    for (int d = 0; d < N; d++) { float v = x[d] - s; y[d] = v; }\n"
           "    for (int d = 0; d < N; d++) { float v = y[d]; y[d] = v * d; }\n}\n")
    out = renamed(src)
    assert "for (int d = 0; d < N; d++) s += x[d];" in out
    assert "for (int d_2 = 0; d_2 < N; d_2++) { float v = x[d_2] - s; y[d_2] = v; }" in out
    assert "for (int d_3 = 0; d_3 < N; d_3++) { float v_2 = y[d_3]; y[d_3] = v_2 * d_3; }" in out


def test_an_inner_declaration_hides_the_outer_one_until_its_block_ends():
    src = ("__global__ void k(float* y, int N)\n{\n    int i = threadIdx.x;\n"
           "    { int i = 5; y[i] = 1.0f; }\n    if (int i = N) y[i] = 2.0f;\n    y[i] = 3.0f;\n}\n")
    out = renamed(src)
    assert "{ int i_2 = 5; y[i_2] = 1.0f; }" in out and "if (int i_3 = N) y[i_3] = 2.0f;" in out
    assert out.endswith("    y[i] = 3.0f;\n}\n")


def test_a_new_name_is_one_the_text_does_not_hold_and_fields_and_namespaces_keep_theirs():
    src = ("struct P { int d; };\n__global__ void k(const P* p, int* y, int N)\n{\n    int d_2 = 1;\n"
           "    for (int d = 0; d < N; d++) y[d] = p[d].d + d_2;\n"
           "    for (int d = 0; d < N; d++) y[d] += ::min(d, p->d);\n}\n")
    out = renamed(src)
    assert "for (int d_3 = 0; d_3 < N; d_3++) y[d_3] += ::min(d_3, p->d);" in out
    assert "y[d] = p[d].d + d_2;" in out


@pytest.mark.parametrize("body", [
    "for (int d = 0; d < N; d++) y[d] = 0; for (int d = 0; d < N; d++) { if (d > 3) goto out; y[d] = 1; } out: ;",
    "for (int d = 0; d < N; d++) y[d] = 0; auto f = [&](int d) { return d + 1; }; y[0] = f(N);",
    "for (int d = 0; d < N; d++) y[d] = 0; typedef int d_t; for (int d = 0; d < N; d++) y[d] = (d_t)d;",
])
def test_kernels_whose_scopes_it_does_not_follow_are_left_as_written(body):
    src = "__global__ void k(int* y, int N)\n{\n    " + body + "\n}\n"
    assert renamed(src) == src


def test_no_name_declared_twice_is_no_change():
    src = "__global__ void k(float* y, int N)\n{\n    for (int d = 0; d < N; d++) y[d] = 0.0f;\n}\n"
    assert renamed(src) == src


@pytest.mark.parametrize("path", ["examples/layernorm/layernorm.cu", "examples/softmax/softmax.cu",
                                  "bench/trials/groupnorm_fwd/groupnorm_fwd.cu", "bench/trials/attn_decode/attn_decode.cu"])
def test_the_same_machine_code(path):
    """Only names change: the renamed kernel compiles to the same instructions (a code digest over the cubin's
    machine code; on 2026-12-05 all 29 kernels of examples/ and bench/trials with a name declared twice did)."""
    cu = ROOT / path
    spec = next(iter(load_spec(str(cu) + ".toml").kernels.values()))
    src = cu.read_text()
    kernel = find_kernel(src, spec.name).text
    new = renamed(kernel)
    assert new != kernel
    a = compile_candidate(original_candidate(spec, src), spec.arch)
    b = compile_candidate(original_candidate(spec, src.replace(kernel, new)), spec.arch)
    assert isinstance(a, Compiled) and isinstance(b, Compiled), getattr(b, "log", "")
    assert code_digest(a.cubin) == code_digest(b.cubin)


def test_unflatten_takes_a_kernel_it_refused_for_a_name_declared_twice():
    """groupnorm_fwd declares its loop counter in each of its three loops: unflatten refused it ("declared more than
    once") until the passes that read locals by name were given the unit renamed apart."""
    cu = ROOT / "bench/trials/groupnorm_fwd/groupnorm_fwd.cu"
    spec = next(iter(load_spec(str(cu) + ".toml").kernels.values()))
    ctx = example_ctx(cu, kernel=spec.name)
    unflat = [c for c in TransformGenerator().propose(ctx) if "pass:unflatten" in c.params]
    assert unflat, "no unflatten candidate"
    compiled = compile_candidate(unflat[0], spec.arch)
    assert isinstance(compiled, Compiled), getattr(compiled, "log", "")


def test_red_team_uses_the_parser_reads_as_type_names_are_renamed_too():
    """Red team, 2026-12-05: ``get<u>()`` and ``ns::get<u>()`` hold u as a type name; left alone, the inner block's
    u_2 was never read and y[1] got the outer u."""
    src = ("namespace ns { template <int K> __device__ int get() { return K; } }\n"
           "template <int K> __device__ int get() { return K; }\n"
           "__global__ void k(int* y, int N)\n{\n    constexpr int u = 2; y[0] = get<u>() + ns::get<u>();\n"
           "    { constexpr int u = 4; y[1] = get<u>() + ns::get<u>(); }\n}\n")
    kernel = src[src.index("__global__"):]
    out = renamed(kernel)
    assert "{ constexpr int u_2 = 4; y[1] = get<u_2>() + ns::get<u_2>(); }" in out
    assert "y[0] = get<u>() + ns::get<u>();" in out


@pytest.mark.parametrize("body", [
    "float s = y[0];\n    { float s = y[1]; float v(s); y[2] = v; }\n    y[3] = s;",  # read as a function declaration
    "{ extern __device__ float g; y[0] = g; }\n    { extern __device__ float g; y[1] = g; }",
    "{ __device__ float f(float); y[0] = f(1.f); }\n    { __device__ float f(float); y[1] = f(2.f); }",
    "{ constexpr int u = 2;\n#pragma unroll u\n    for (int j = 0; j < 4; j++) y[j] = u; }\n"
    "    { constexpr int u = 4;\n#pragma unroll u\n    for (int j = 0; j < 4; j++) y[j] += u; }",
])
def test_red_team_kernels_it_cannot_rename_exactly_are_left_as_written(body):
    src = "__global__ void k(float* y, int N)\n{\n    " + body + "\n}\n"
    assert renamed(src) == src


def test_a_function_type_parameters_declare_nothing_in_the_kernel():
    """Red team: ``float (*op)(float x, int n)``'s n is not a second n of the kernel."""
    src = ("__global__ void k(float* y, int n, float (*op)(float x, int n))\n{\n"
           "    for (int i = 0; i < n; i++) y[i] = 1.f;\n    for (int i = 0; i < n; i++) y[i] += 1.f;\n}\n")
    out = renamed(src)
    assert "float (*op)(float x, int n))" in out and "for (int i_2 = 0; i_2 < n; i_2++) y[i_2] += 1.f;" in out
