"""``ptxfactory profile`` on the CPU: the kernel as written (resources, occupancy, the SASS summary where a
disassembler is found), a job's candidate (``-n``), and the counters' three cases: no GPU (a reason), a stand-in
``ncu`` printing a recorded raw page (``fixtures/ncu_raw_rmsnorm.csv``) with a GPU pretended, and ncu missing."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ptxfactory.harness.backend as backend
import ptxfactory.harness.cuda_paths as cuda_paths
from ptxfactory.daemon.cli import EXIT_BAD_INPUT, EXIT_NO_GPU, build_app
from ptxfactory.daemon.show import report_json_path
from ptxfactory.protocol import JobSummary

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HAS_DISASSEMBLER = cuda_paths.tool_path("nvdisasm") is not None or cuda_paths.tool_path("cuobjdump") is not None


def run(*args: object):
    return CliRunner().invoke(build_app(), [str(a) for a in args])


def test_profile_of_the_kernel_as_written_without_a_gpu(example_copy, monkeypatch):
    monkeypatch.setattr(backend, "gpu_available", lambda: None)
    res = run("profile", example_copy, "-k", "rmsnorm")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.startswith("rmsnorm as written in rmsnorm.cu, sm_90a; launch grid=(M) block=(256)")
    assert "registers/thread" in out and "spills (stored / loaded)" in out and "0 B / 0 B" in out
    assert "static shared memory/block" in out and "1024 B" in out  # the kernel's __shared__ float[256]
    assert "theoretical occupancy" in out and "256 threads" in out
    if HAS_DISASSEMBLER:
        assert "whole kernel: " in out and "global loads (16-bit" in out and "innermost loop" in out
    else:
        assert "SASS unavailable: no nvdisasm or cuobjdump found" in out
    assert "Nsight Compute, one launch at M=32768 N=16384" in out  # the largest timed size
    assert "counters unavailable: no NVIDIA GPU here" in out


def test_profile_reads_a_stand_in_ncus_counters(example_copy, monkeypatch, tmp_path):
    fake = tmp_path / "ncu"
    fake.write_text(f"#!/bin/sh\ncat {FIXTURES / 'ncu_raw_rmsnorm.csv'}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(backend, "gpu_available", lambda: "NVIDIA H200 (pretended)")
    monkeypatch.setenv("PTXFACTORY_NCU", str(fake))
    res = run("profile", example_copy, "-k", "rmsnorm")
    assert res.exit_code == 0, res.output
    out = res.stdout
    for line in ("- DRAM throughput: 61.8% of peak", "- memory throughput: 63.0% of peak", "- SM throughput: 18.4% of peak",
                 "- achieved occupancy: 86.7% of peak",
                 "- top warp stalls (cycles per issued instruction): long_scoreboard 24.62, lg_throttle 3.87, wait 2.14"):
        assert line in out


def test_profile_without_ncu_says_so(example_copy, monkeypatch):
    monkeypatch.setattr(backend, "gpu_available", lambda: "NVIDIA H200 (pretended)")
    monkeypatch.delenv("PTXFACTORY_NCU", raising=False)
    monkeypatch.setattr(cuda_paths, "tool_path", lambda name: None)
    res = run("profile", example_copy, "-k", "rmsnorm")
    assert res.exit_code == 0, res.output
    assert "counters unavailable: Nsight Compute (ncu) is not installed here" in res.stdout
    assert "SASS unavailable: no nvdisasm or cuobjdump found" in res.stdout


def test_profile_of_a_jobs_candidate(example_copy, fake_generators, monkeypatch):
    res = run("optimise", example_copy, "-k", "rmsnorm", "--backend", "none")
    assert res.exit_code == EXIT_NO_GPU, res.output
    summary = JobSummary.model_validate_json(report_json_path(example_copy, "rmsnorm").read_text())
    number = next(i for i, r in enumerate(summary.rows) if r.candidate.description == "vectorised (pretend)")
    res = run("profile", example_copy, "-k", "rmsnorm", "-n", number, "--no-counters")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"candidate {number} of rmsnorm (vectorised (pretend)), job {summary.job_id}, sm_90a")
    assert "counters unavailable: not asked for (--no-counters)" in res.stdout
    res = run("profile", example_copy, "-k", "rmsnorm", "-n", len(summary.rows) + 5)
    assert res.exit_code == EXIT_BAD_INPUT and "not" in res.output


@pytest.mark.parametrize("args, message", [(("-k", "nope"), "no [kernel.nope] table (it describes rmsnorm;")])
def test_profile_refuses_bad_input(example_copy, args, message):
    res = run("profile", example_copy, *args)
    assert res.exit_code == EXIT_BAD_INPUT and message in res.output


def test_profile_of_a_file_without_a_spec_points_at_init(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 0.0f; }\n')
    res = run("profile", src, "-k", "k", "--no-counters")
    assert res.exit_code == EXIT_BAD_INPUT and "no spec (k.cu.toml)" in res.output and "ptxfactory init" in res.output


def test_a_compile_error_in_the_file_names_the_file_and_its_line(tmp_path):
    src = tmp_path / "later.cu"
    src.write_text('extern "C" __global__ void ok_k(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 0.0f; }\n'
                   'extern "C" __global__ void bad_k(float* y, int n) { y[0] = undefined_var; }\n')
    src.with_name("later.cu.toml").write_text("""[kernel.ok_k]
args = [{ name = "y", role = "out", dtype = "f32", shape = ["n"] }, { name = "n", role = "scalar", dtype = "i32", value = "n" }]
launch = { grid = [1], block = [32] }
[kernel.ok_k.check]
sizes = [{ n = 32 }]
[kernel.ok_k.bench]
sizes = [{ n = 32 }]
""")
    res = run("profile", src, "-k", "ok_k", "--no-counters")
    assert res.exit_code == EXIT_BAD_INPUT and "later.cu(2)" in res.output and "ok_k.cu(" not in res.output, res.output
