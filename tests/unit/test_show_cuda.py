"""``ptxfactory show`` on a CUDA kernel, on the CPU: a compile-only run (``optimise --backend none``: no GPU, every
row NotRun) stores the job; ``show --ptx`` prints the candidate's NVRTC PTX with its hot loop marked, ``show --sass``
the SASS of its cubin when a disassembler is found, else a message naming the missing tools (exit code 1).

The tool lookup (``harness.cuda_paths.tool_path``) is monkeypatched for both SASS branches: no tool at all, and a
stand-in ``nvdisasm`` (a script printing a fixed listing with one loop); the real disassembler runs only where one
is installed (the nvidia-cuda-nvdisasm wheel, a toolkit).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ptxfactory.harness.cuda_paths as cuda_paths
from ptxfactory.daemon.cli import EXIT_BAD_INPUT, EXIT_NO_GPU, build_app
from ptxfactory.daemon.show import report_json_path
from ptxfactory.protocol import JobSummary
from ptxfactory.protocol.result import NotRun

HOT = "// ptxfactory: hot loop begins (innermost loop: "
FAKE_SASS = """\t.text.rmsnorm:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   FADD R2, R2, R3 ;
        /*0020*/              @P0 BRA `(.L_x_0) ;
        /*0030*/                   EXIT ;
"""


def run(*args: object):
    return CliRunner().invoke(build_app(), [str(a) for a in args])


@pytest.fixture
def compiled_job(example_copy: Path, fake_generators) -> tuple[Path, JobSummary]:
    """A compile-only job on the rmsnorm example: the original and the fake generator's candidates, none run."""
    res = run("optimise", example_copy, "-k", "rmsnorm", "--backend", "none")
    assert res.exit_code == EXIT_NO_GPU, res.output
    summary = JobSummary.model_validate_json(report_json_path(example_copy, "rmsnorm").read_text())
    assert summary.state == "compile_only" and any(isinstance(r.result, NotRun) for r in summary.rows)
    return example_copy, summary


def _candidate(summary: JobSummary, description: str) -> int:
    return next(i for i, r in enumerate(summary.rows) if r.candidate.description == description)


def test_show_ptx_of_a_cuda_candidate_marks_its_hot_loop(compiled_job):
    source, summary = compiled_job
    number = _candidate(summary, "vectorised (pretend)")
    res = run("show", source, "-k", "rmsnorm", "--candidate", number, "--ptx")
    assert res.exit_code == 0, res.output
    text = res.stdout
    lines = text.splitlines()
    assert lines[0].startswith(f"// ptxfactory: PTX of candidate {number} of rmsnorm (vectorised (pretend)), sm_")
    assert f"job {summary.job_id}" in lines[0] and "read-only" in lines[1]
    assert ".visible .entry rmsnorm(" in text and "ld.global" in text  # NVRTC's PTX, cut to the kernel
    assert "ptxf_fake_vec" not in text  # the candidate's other kernel is not shown
    assert text.count(HOT) >= 1 and "hot loop ends" in text
    assert f"{text.count(HOT)} innermost loop" in lines[1]


def test_show_defaults_to_the_original_when_nothing_ran(compiled_job):
    source, summary = compiled_job
    res = run("show", source, "-k", "rmsnorm")  # no best in a compile-only job: the original
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("// ptxfactory: PTX of the original of rmsnorm")


def test_show_sass_without_a_disassembler_names_the_missing_tools(compiled_job, monkeypatch):
    source, _summary = compiled_job
    monkeypatch.setattr(cuda_paths, "tool_path", lambda name: None)
    res = run("show", source, "-k", "rmsnorm", "--sass")
    assert res.exit_code == EXIT_BAD_INPUT, res.output
    assert "no nvdisasm or cuobjdump found" in res.output and "install one to see SASS" in res.output
    assert not res.stdout.startswith("// ptxfactory:")


def test_show_sass_with_a_disassembler_marks_its_loop(compiled_job, monkeypatch, tmp_path):
    source, summary = compiled_job
    fake = tmp_path / "nvdisasm"
    seen = tmp_path / "args"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {seen}\ncat <<'EOF'\n{FAKE_SASS}EOF\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(cuda_paths, "tool_path", lambda name: str(fake) if name == "nvdisasm" else None)
    number = _candidate(summary, "vectorised (pretend)")
    res = run("show", source, "-k", "rmsnorm", "-n", number, "--sass")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"// ptxfactory: SASS of candidate {number} of rmsnorm")
    assert "1 innermost loop marked" in lines[1]
    assert HOT + ".L_x_0" in res.stdout and "@P0 BRA `(.L_x_0)" in res.stdout
    args = seen.read_text().split()
    assert args[0] == "-c" and args[1].endswith("kernel.cubin")  # a cubin was compiled on the CPU and handed over


@pytest.mark.skipif(cuda_paths.tool_path("nvdisasm") is None and cuda_paths.tool_path("cuobjdump") is None,
                    reason="no nvdisasm or cuobjdump here")
def test_show_sass_with_the_real_disassembler(compiled_job):
    source, _summary = compiled_job
    res = run("show", source, "-k", "rmsnorm", "--sass")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("// ptxfactory: SASS of the original of rmsnorm")
    assert "EXIT" in res.stdout and res.stdout.count(HOT) >= 1
    assert os.path.sep + "ptxfactory-sass-" not in res.stdout  # the temporary path is not leaked


def test_show_names_the_files_kernels_for_one_it_does_not_have(tmp_path):
    from ptxfactory.daemon.show import ShowError, find_summary

    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void saxpy(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 0.0f; }\n')
    with pytest.raises(ShowError, match=r"has no kernel 'nosuch' \(found: saxpy\)"):
        find_summary(src, "nosuch", None, None)
    with pytest.raises(ShowError, match="run `ptxfactory optimise"):
        find_summary(src, "saxpy", None, None)
