"""``ptxfactory init FILE [--kernel NAME]``: a spec scaffolded beside the source; never over the user's file."""
from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from ptxfactory.daemon.cli import EXIT_BAD_INPUT, EXIT_NO_GPU, build_app
from ptxfactory.protocol import load_spec


def run(*args):
    return CliRunner().invoke(build_app(), [str(a) for a in args])


def test_init_writes_a_spec_that_loads_and_lists_its_todos(example_copy: Path):
    spec = example_copy.with_name("rmsnorm.cu.toml")
    spec.unlink()
    res = run("init", example_copy, "--kernel", "rmsnorm")
    assert res.exit_code == 0, res.output
    first, *todos = res.stdout.strip().splitlines()
    assert first.startswith("wrote ") and "rmsnorm.cu.toml: [kernel.rmsnorm]" in first and f"{len(todos)} TODOs" in first
    lines = spec.read_text().splitlines()
    for todo in todos:  # FILE:LINE: message, each at its TODO comment
        where, message = todo.split(": ", 1)
        line = int(where.rsplit(":", 1)[1])
        assert message in lines[line - 1] and "TODO" in message
    loaded = load_spec(spec).kernels["rmsnorm"]
    assert [(a.name, a.role) for a in loaded.args] == [("x", "in"), ("w", "in"), ("y", "out"), ("M", "scalar"),
                                                       ("N", "scalar"), ("eps", "scalar")]
    assert loaded.symbols == ["M", "N"]


def test_the_scaffolded_spec_runs_as_written(example_copy: Path, fake_generators):
    example_copy.with_name("rmsnorm.cu.toml").unlink()
    assert run("init", example_copy).exit_code == 0  # no --kernel: every kernel the spec lacks
    res = run("optimise", example_copy, "-k", "rmsnorm", "--backend", "none")
    assert res.exit_code == EXIT_NO_GPU, res.output


def test_init_never_overwrites_an_existing_table(example_copy: Path):
    spec = example_copy.with_name("rmsnorm.cu.toml")
    before = spec.read_text()
    res = run("init", example_copy, "-k", "rmsnorm")
    assert res.exit_code == EXIT_BAD_INPUT
    assert "rmsnorm.cu.toml already has [kernel.rmsnorm]: nothing was written" in res.output
    assert spec.read_text() == before


def test_init_appends_a_kernel_the_spec_lacks(example_copy: Path):
    spec = example_copy.with_name("rmsnorm.cu.toml")
    before = spec.read_text()
    example_copy.write_text(example_copy.read_text() + "\n__global__ void zero(float* y, int n) { y[threadIdx.x] = 0; }\n"
                            "void host(float* y, int n) { zero<<<(n + 127) / 128, 128>>>(y, n); }\n")
    res = run("init", example_copy)
    assert res.exit_code == 0, res.output
    assert "appended to" in res.stdout and "[kernel.zero]" in res.stdout and "[kernel.rmsnorm]" not in res.stdout
    text = spec.read_text()
    assert text.startswith(before)
    loaded = load_spec(spec)
    assert set(loaded.kernels) == {"rmsnorm", "zero"}
    assert loaded.kernels["zero"].launch.grid == ["cdiv(n, 128)"] and loaded.kernels["zero"].launch.block == [128]


def test_init_bad_input_exits_1(tmp_path: Path, example_copy: Path):
    res = run("init", example_copy, "-k", "nope")
    assert res.exit_code == EXIT_BAD_INPUT and "no __global__ kernel named 'nope' (found: rmsnorm)" in res.output
    res = run("init", tmp_path / "missing.cu")
    assert res.exit_code == EXIT_BAD_INPUT and "cannot read" in res.output
    assert not (tmp_path / "missing.cu.toml").exists()


def test_init_is_listed_in_help():
    res = run("--help")
    assert res.exit_code == 0 and "init" in res.stdout


def test_init_warns_of_constant_memory_the_spec_cannot_set(tmp_path: Path):
    """A kernel reading ``__constant__`` memory that the host sets with cudaMemcpyToSymbol: init says, on stderr and
    in the spec, that the tool runs it with zeros there (file, line, symbol)."""
    source = tmp_path / "blur.cu"
    source.write_text("__constant__ float c_w[5];\n"
                      "__global__ void blur(const float* x, float* y, int n) {\n"
                      "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "    if (i < n) y[i] = c_w[i % 5] * x[i];\n"
                      "}\n")
    res = run("init", source)
    assert res.exit_code == 0, res.output
    warning = ("blur.cu:4: constant memory 'c_w' is read by the kernel and not set by the spec: it is zero when the tool "
               "runs the kernel; pass it as an argument")
    assert f"warning: {warning}" in " ".join(res.stderr.split()) and "warning" not in res.stdout
    assert f"# warning: {warning}" in source.with_name("blur.cu.toml").read_text()
    load_spec(source.with_name("blur.cu.toml"))
