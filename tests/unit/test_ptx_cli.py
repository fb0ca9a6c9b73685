"""A ``.ptx`` file from the shell (issue 14's acceptance, CPU tier): ``ptxfactory init`` scaffolds the spec of the PTX
example's entry, ``ptxfactory optimise`` runs the main job on it headless (compile only: no GPU here) with the PTX
generators alone, and ``ptxfactory show --ptx`` / ``--sass`` print a candidate's views with the hot loop marked.
The real generators and ptxas run (skipped where no ptxas is found)."""
from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxfactory.daemon.cli import EXIT_NO_GPU, build_app
from ptxfactory.daemon.show import report_json_path
from ptxfactory.harness.cuda_paths import tool_path
from ptxfactory.harness.source import check_signature, find_kernel
from ptxfactory.protocol import CompileFailed, JobSummary, NotRun, load_spec, spec_path_for
from ptxfactory.search.strategy import PTX_GENERATORS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rowsum_ptx"
pytestmark = pytest.mark.skipif(tool_path("ptxas") is None, reason="no ptxas")


def run(*args: object):
    return CliRunner().invoke(build_app(), [str(a) for a in args])


@pytest.fixture
def ptx_copy(tmp_path: Path) -> Path:
    """rowsum_ptx.ptx, its spec and ref.py copied into tmp_path; returns the .ptx."""
    for name in ("rowsum_ptx.ptx", "rowsum_ptx.ptx.toml", "ref.py"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    return tmp_path / "rowsum_ptx.ptx"


def test_init_scaffolds_the_entry_as_its_author_described_it(ptx_copy: Path):
    spec_path_for(ptx_copy).unlink()
    res = run("init", ptx_copy)
    assert res.exit_code == 0, res.output
    spec = load_spec(spec_path_for(ptx_copy)).kernels["rowsum_ptx"]
    check_signature(spec, find_kernel(ptx_copy.read_text(), "rowsum_ptx"))
    mine = tomllib.loads((EXAMPLE / "rowsum_ptx.ptx.toml").read_text())["kernel"]["rowsum_ptx"]["args"]
    assert [(a.name, a.role, a.dtype.value) for a in spec.args] == [(a["name"], a["role"], a["dtype"]) for a in mine]


def test_optimise_then_show_from_the_shell(ptx_copy: Path):
    res = run("optimise", ptx_copy, "-k", "rowsum_ptx", "--backend", "none")
    assert res.exit_code == EXIT_NO_GPU, res.output
    summary = JobSummary.model_validate_json(report_json_path(ptx_copy, "rowsum_ptx").read_text())
    assert summary.state == "compile_only"
    assert {r.candidate.generator for r in summary.rows} == {"original", *PTX_GENERATORS}
    assert all(r.result.compiler == "ptxas" for r in summary.rows)
    assert all(isinstance(r.result, NotRun) and r.result.resources.registers > 0 for r in summary.rows), \
        [(r.candidate.description, r.reason) for r in summary.rows if isinstance(r.result, CompileFailed)]

    number = next(i for i, r in enumerate(summary.rows) if r.candidate.params.get("pass") == "nc")
    shown = run("show", ptx_copy, "-k", "rowsum_ptx", "-n", number, "--ptx")
    assert shown.exit_code == 0, shown.output
    assert "// ptxfactory: hot loop begins" in shown.stdout and "ld.global.nc.f32" in shown.stdout
    if tool_path("nvdisasm") or tool_path("cuobjdump"):
        sass = run("show", ptx_copy, "-k", "rowsum_ptx", "-n", number, "--sass")
        assert sass.exit_code == 0, sass.output
        assert "LDG" in sass.stdout and "hot loop begins" in sass.stdout
