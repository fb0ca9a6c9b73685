"""Kernel templates on types: ``template <typename T, int VEC>`` with ``[tune] template = { T = ["float"], VEC = [...] }``.
The spec's dtypes are checked against the parameter types as instantiated (with every value of ``T``), a
mismatch names the spec's file, line and key, and the job compiles the instantiations with NVRTC."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.source import SignatureMismatch, check_signature, find_kernel
from ptxfactory.protocol import parse_spec
from ptxfactory.search.strategy import JobError, load_job, optimise, original_candidate

KERNEL = (Path(__file__).resolve().parents[1] / "kernels" / "axpb_typename.cu").read_text()


def spec_text(dtype: str = "f32", t: str = '["float"]', vec: str = "[1, 2, 4]") -> str:
    return f'''[kernel.axpb]
arch = "sm_90a"
args = [
  {{ name = "x", role = "in", dtype = "{dtype}", shape = ["N"] }},
  {{ name = "y", role = "out", dtype = "{dtype}", shape = ["N"] }},
  {{ name = "a", role = "scalar", dtype = "f32", value = 2.0 }},
  {{ name = "b", role = "scalar", dtype = "f32", value = 0.5 }},
  {{ name = "n", role = "scalar", dtype = "i32", value = "N" }},
]
launch = {{ grid = ["cdiv(N, 256)"], block = [256] }}

[kernel.axpb.tune]
template = {{ T = {t}, VEC = {vec} }}

[kernel.axpb.check]
sizes = [{{ N = 1000 }}, {{ N = 4097 }}]

[kernel.axpb.bench]
sizes = [{{ N = 16777216 }}]
'''


def test_type_parameters_are_found():
    kdef = find_kernel(KERNEL, "axpb")
    assert kdef.template_params == ("T", "VEC") and kdef.template_types == ("T",)
    other = find_kernel("template <int A, class U = float, typename... Ts, bool B = true> __global__ void k(U* x) {}", "k")
    assert other.template_params == ("A", "U", "Ts", "B") and other.template_types == ("U", "Ts")


@pytest.mark.parametrize("dtype,t", [("f32", '["float"]'), ("bf16", '["__nv_bfloat16"]'), ("bf16", '["__nv_bfloat16", "nv_bfloat16"]')])
def test_a_typename_template_is_accepted_and_compiles(dtype, t):
    spec = parse_spec(spec_text(dtype, t)).kernels["axpb"]
    check_signature(spec, find_kernel(KERNEL, "axpb"))  # std::int32_t n is an i32 too
    original = original_candidate(spec, KERNEL)
    assert original.name_expression == f"axpb<{t.split(chr(34))[1]}, 1>"
    out = compile_candidate(original, spec.arch)
    assert isinstance(out, Compiled), out.log
    assert out.compiler == "nvrtc" and out.lowered_name.startswith("_Z4axpbI")
    assert out.resources is not None and out.resources.registers > 0


@pytest.mark.parametrize("dtype,t", [("f32", '["__nv_bfloat16"]'), ("bf16", '["float"]'), ("f32", '["float", "__nv_bfloat16"]')])
def test_a_dtype_that_the_instantiation_does_not_declare_is_refused(dtype, t):
    spec = parse_spec(spec_text(dtype, t)).kernels["axpb"]
    with pytest.raises(SignatureMismatch, match=r"args\[0\] \('x'\): dtype .* the kernel declares T\* x and tune.template gives T = ") as info:
        check_signature(spec, find_kernel(KERNEL, "axpb"))
    assert info.value.key == "tune.template.T"


def test_the_mismatch_names_the_spec_file_line_and_key(tmp_path):
    src = tmp_path / "axpb.cu"
    src.write_text(KERNEL)
    toml = tmp_path / "axpb.cu.toml"
    text = spec_text("f32", '["float", "__nv_bfloat16"]')
    toml.write_text(text)
    line = next(i + 1 for i, ln in enumerate(text.splitlines()) if ln.startswith("template ="))
    with pytest.raises(JobError, match=rf"{toml}:{line}: kernel\.axpb\.tune\.template\.T: does not match the kernel: args\[0\] \('x'\)"):
        load_job(src, "axpb")
    # a concrete parameter: the arg's dtype is the key
    text = spec_text().replace('{ name = "n", role = "scalar", dtype = "i32"', '{ name = "n", role = "scalar", dtype = "u32"')
    toml.write_text(text)
    line = next(i + 1 for i, ln in enumerate(text.splitlines()) if '"n"' in ln)
    with pytest.raises(JobError, match=rf"{toml}:{line}: kernel\.axpb\.args\[4\]\.dtype: does not match the kernel: args\[4\] \('n'\): "
                                       r"dtype u32 expects .*, the kernel declares std::int32_t"):
        load_job(src, "axpb")


def test_the_editor_shows_the_mismatch_with_its_spec_line(tmp_path, monkeypatch):
    from ptxfactory.daemon.analysis import analyse_now
    from ptxfactory.harness import compile_pool

    monkeypatch.setattr(compile_pool, "_SHARED", compile_pool.CompilePool(workers=0))
    src = tmp_path / "axpb.cu"
    src.write_text(KERNEL)
    text = spec_text("bf16", '["float"]')
    (tmp_path / "axpb.cu.toml").write_text(text)
    line = next(i + 1 for i, ln in enumerate(text.splitlines()) if ln.startswith("template ="))
    k = analyse_now(src, KERNEL).kernels["axpb"]
    assert k.mismatch is not None and k.mismatch.startswith(f"axpb.cu.toml:{line}: kernel.axpb.tune.template.T: does not match the kernel")


async def test_the_job_tunes_the_value_knob_with_the_type_fixed(tmp_path):
    src = tmp_path / "axpb.cu"
    src.write_text(KERNEL)
    (tmp_path / "axpb.cu.toml").write_text(spec_text("bf16", '["__nv_bfloat16"]'))
    summary = await optimise(src, "axpb", backend=None, generators=("tune",))
    assert summary.state == "compile_only"
    args = {tuple(r.candidate.template_args) for r in summary.rows}
    assert {("__nv_bfloat16", 1), ("__nv_bfloat16", 2), ("__nv_bfloat16", 4)} <= args
    assert all(r.result.outcome == "not_run" and r.result.resources is not None for r in summary.rows), [r.reason for r in summary.rows]
