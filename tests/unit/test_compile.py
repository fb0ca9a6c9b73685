"""NVRTC compilation on the CPU: resources of the example, compile errors with their line, refused options, ptxas reports."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptxfactory.harness.compile import Compiled, check_options, compile_candidate, parse_ptxas_report
from ptxfactory.protocol import Candidate, CompileFailed, LaunchConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rmsnorm" / "rmsnorm.cu"
SOURCE = EXAMPLE.read_text()
LAUNCH = LaunchConfig(grid=["M"], block=[256])


def candidate(source: str = SOURCE, options: list[str] | None = None, name: str = "rmsnorm") -> Candidate:
    return Candidate(kernel_name=name, source=source, kernel_text="", launch=LAUNCH, options=options or [])


def test_example_compiles_with_registers_and_no_spills():
    out = compile_candidate(candidate(), "sm_90a")
    assert isinstance(out, Compiled), getattr(out, "log", "")
    assert out.cubin[:4] == b"\x7fELF"
    assert out.lowered_name == "rmsnorm"  # extern "C": not mangled
    res = out.resources
    assert res is not None and res.registers > 0
    assert res.shared_bytes == 256 * 4  # __shared__ float partial[256]
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.local_bytes == 0


def test_compile_error_reports_the_line():
    bad = SOURCE.replace("rsqrtf(partial[0] / N + eps)", "rsqrtf(partial[0] / N + epsilon)")
    line = next(i + 1 for i, text in enumerate(bad.splitlines()) if "epsilon" in text)
    out = compile_candidate(candidate(bad), "sm_90a")
    assert isinstance(out, CompileFailed)
    assert f"rmsnorm.cu({line}): error" in out.log, out.log
    assert "epsilon" in out.log
    assert out.candidate_key == candidate(bad).key


def test_missing_semicolon_is_a_compile_failure_not_an_exception():
    out = compile_candidate(candidate(SOURCE.replace("sum += v * v;", "sum += v * v")), "sm_90a")
    assert isinstance(out, CompileFailed) and re.search(r"rmsnorm\.cu\(\d+\): error", out.log)


@pytest.mark.parametrize("options", [["-o {tmp}/x"], ["-o", "{tmp}/x"], ["--output-file={tmp}/x"], ["-I/etc"], ["--include-path=/"],
                                     ["-maxrregcount=32; touch {tmp}/x"], ["--dopt=on"]])
def test_refused_options_never_reach_nvrtc(options, tmp_path):
    options = [o.format(tmp=tmp_path) for o in options]
    out = compile_candidate(candidate(options=options), "sm_90a")
    assert isinstance(out, CompileFailed)
    assert "is not allowed" in out.log and options[0] in out.log
    assert not (tmp_path / "x").exists()


def test_fast_math_needs_the_spec_to_allow_it():
    refused = compile_candidate(candidate(options=["--use_fast_math"]), "sm_90a", fast_math_allowed=False)
    assert isinstance(refused, CompileFailed) and "check.fast_math = true" in refused.log
    allowed = compile_candidate(candidate(options=["--use_fast_math"]), "sm_90a", fast_math_allowed=True)
    assert isinstance(allowed, Compiled)


@pytest.mark.parametrize("options,ok", [
    (["-maxrregcount=64"], True), (["--extra-device-vectorization"], True), (["-DBLOCK=128"], True),
    (["--ftz=true"], False), (["--prec-div=false"], False), (["-maxrregcount=4096"], False), (["-DX=$(id)"], False),
])
def test_check_options(options, ok):
    assert (check_options(options, fast_math_allowed=False) is None) is ok


def test_maxrregcount_makes_ptxas_spill():
    heavy = r'''
extern "C" __global__ void heavy(float* out, const float* in) {
  float acc[64];
  #pragma unroll
  for (int j = 0; j < 64; ++j) acc[j] = in[threadIdx.x * 64 + j];
  #pragma unroll
  for (int k = 0; k < 8; ++k)
    #pragma unroll
    for (int j = 0; j < 64; ++j) acc[j] = acc[j] * acc[(j + k) & 63] + 1.0f;
  float s = 0.0f;
  #pragma unroll
  for (int j = 0; j < 64; ++j) s += acc[j];
  out[threadIdx.x] = s;
}
'''
    out = compile_candidate(candidate(heavy, ["-maxrregcount=24"], name="heavy"), "sm_90a")
    assert isinstance(out, Compiled), getattr(out, "log", "")
    assert out.resources is not None
    assert out.resources.registers <= 24
    assert out.resources.spill_stores > 0 and out.resources.spill_loads > 0 and out.resources.local_bytes > 0
    assert "spilled" in out.resources.summary()


SAMPLE_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5otherPf' for 'sm_90a'
ptxas info    : Function properties for _Z5otherPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'rmsnorm' for 'sm_90a'
ptxas info    : Function properties for rmsnorm
    48 bytes stack frame, 44 bytes spill stores, 40 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]
ptxas info    : Compile time = 15.951 ms
"""


def test_parse_ptxas_report_with_spills_picks_the_right_entry():
    res = parse_ptxas_report(SAMPLE_LOG, "rmsnorm")
    assert (res.registers, res.shared_bytes, res.local_bytes, res.spill_stores, res.spill_loads) == (255, 2048, 48, 44, 40)
    other = parse_ptxas_report(SAMPLE_LOG, "_Z5otherPf")
    assert (other.registers, other.shared_bytes, other.spill_stores) == (8, 0, 0)


def test_parse_ptxas_report_without_the_entry():
    assert parse_ptxas_report(SAMPLE_LOG, "missing") is None


def test_an_error_inside_a_kernel_template_names_its_template_arguments():
    """The editor's diagnostic for a template instantiated with a value that cannot compile says which one."""
    from ptxfactory.daemon.analysis import compile_messages

    src = "template <int ITEMS, int BLOCK>\n__global__ void k(float* x)\n{\n    __shared__ float s[ITEMS];\n    x[0] = s[0];\n}\n"
    cand = Candidate(kernel_name="k", source=src, kernel_text=src, launch=LaunchConfig(grid=[1], block=[1]), template_args=[0, 256])
    failed = compile_candidate(cand, "sm_90a")
    assert isinstance(failed, CompileFailed)
    (message,) = compile_messages(failed.log)
    assert message.line == 3 and message.severity == "error"
    assert message.text == "the size of an array must be greater than zero (with ITEMS=0, BLOCK=256)"
