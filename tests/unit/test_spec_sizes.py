"""The spec keys that say which inputs and sizes are legal and what a kernel must move: init bounds as
expressions, constraints, value symbols, align, bytes_moved/flops; the bounds on every spec-derived
computation (issue: no spec may freeze the daemon); held-out sizes inside the envelope and the constraints."""
from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ptxfactory.harness import plan as P
from ptxfactory.protocol.expr import ExprError, evaluate, holds
from ptxfactory.protocol.spec import SpecError, parse_spec

PATH = "k.cu.toml"


def spec_text(args: str = "", kernel: str = "", check: str = "", sizes: str = '[{ T = 64, V = 1000, D = 256 }]',
              bench: str = '[{ T = 4096, V = 50000, D = 1024 }]') -> str:
    args = args or '''
  { name = "table", role = "in", dtype = "f32", shape = ["V", "D"] },
  { name = "idx", role = "in", dtype = "i32", shape = ["T"], init = "randint(0, V)" },
  { name = "out", role = "out", dtype = "f32", shape = ["T", "D"] },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },'''
    return textwrap.dedent(f'''\
[kernel.gather]
args = [{args}
]
launch = {{ grid = ["T"], block = [256] }}
{kernel}
[kernel.gather.check]
sizes = {sizes}
{check}
[kernel.gather.bench]
sizes = {bench}
''')


def load(text: str):
    return parse_spec(text, PATH).kernels["gather"]


def error(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(text, PATH)
    return info.value


def line_of(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


# --- init bounds are expressions over the size symbols ------------------------------------------------

def test_randint_bound_is_an_expression_evaluated_at_each_size():
    spec = load(spec_text())
    idx = spec.args[1]
    assert idx.distribution({"T": 64, "V": 1000, "D": 256}) == ("randint", 0, 1000)
    assert idx.distribution({"T": 64, "V": 7, "D": 256}) == ("randint", 0, 7)  # follows the held-out V
    assert spec.args[0].distribution({}) == ("normal", 0.0, 1.0)


def test_nested_bounds_and_float_bounds_parse():
    text = spec_text().replace('init = "randint(0, V)"', 'init = "randint(max(0, V - 10), V)"')
    assert load(text).args[1].distribution({"T": 1, "V": 100, "D": 1}) == ("randint", 90, 100)
    text = spec_text().replace('shape = ["V", "D"] }', 'shape = ["V", "D"], init = "uniform(-0.5, 0.5)" }')
    assert load(text).args[0].distribution({}) == ("uniform", -0.5, 0.5)
    # a float distribution's bounds divide as reals (a 1 / D scale); a floor 1 // D would give 0 for every D > 1
    text = spec_text().replace('shape = ["V", "D"] }', 'shape = ["V", "D"], init = "normal(0, 1 / D)" }')
    assert load(text).args[0].distribution({"T": 1, "V": 1, "D": 8}) == ("normal", 0.0, 0.125)


@pytest.mark.parametrize("init,fragment", [
    ("randint(0, W)", "unknown size symbol(s) W"),
    ("randint(0, V // 0)", "division by zero"),
    ("randint(V, V)", "is empty at"),
    ("randint(0)", "takes two bounds"),
    ("zeros(1, 2)", "takes no bounds"),
    ("poisson(3, 4)", "unknown init"),
    ("offsets(-1, 4)", "offsets never decrease"),
    ("offsets(0, 2 * V * V)", "over i32's largest value"),
    ("randint(0, V / 2)", "'/' is not allowed"),  # an integer distribution's bounds stay integers
])
def test_bad_init_bounds_name_file_line_and_key(init, fragment):
    text = spec_text().replace('"randint(0, V)"', f'"{init}"')
    err = error(text)
    assert err.key == "kernel.gather.args[1].init", str(err)
    assert err.line == line_of(text, init), str(err)
    assert fragment in err.message, str(err)


# --- exact integer inputs (the generator runs on the GPU with CuPy; NumPy has the same Generator API) --

@pytest.fixture
def numpy_buffers(monkeypatch):
    from ptxfactory.harness import buffers as B

    monkeypatch.setattr(B, "cp", np)
    return B


@pytest.mark.parametrize("dtype,lo,hi", [("i32", 2**24, 2**24 + 4), ("i64", 2**40, 2**40 + 3), ("u32", 2**32 - 5, 2**32 - 1),
                                        ("i32", -(2**31), -(2**31) + 2)])
def test_integers_are_generated_exactly_in_their_dtype(numpy_buffers, dtype, lo, hi):
    B = numpy_buffers
    text = spec_text().replace('dtype = "i32", shape = ["T"], init = "randint(0, V)"',
                               f'dtype = "{dtype}", shape = ["T"], init = "randint({lo}, {hi})"')
    spec = load(text)
    size = {"T": 4000, "V": 1000, "D": 8}
    inputs = B.make_inputs(spec, size, seed=3, variant=0)
    idx = inputs["idx"]
    assert idx.dtype == np.dtype(B.STORAGE[dtype])
    assert set(int(v) for v in np.unique(idx)) == set(range(lo, hi))  # every value, exactly, none outside


def test_randint_follows_the_size_it_is_generated_at(numpy_buffers):
    spec = load(spec_text())
    for v in (3, 1000, 2**20):
        idx = numpy_buffers.make_inputs(spec, {"T": 5000, "V": v, "D": 1}, seed=1, variant=2)["idx"]
        assert 0 <= idx.min() and idx.max() < v


def test_offsets_are_range_starts_on_the_gpu_side_and_on_the_host(numpy_buffers):
    """offsets(lo, hi): 0, then each element the previous one plus a step in [lo, hi): CSR row pointers (a kernel that
    loops from rowptr[r] to rowptr[r + 1]), the same law in the worker's generator and in the host's (the reference
    check's)."""
    from ptxfactory.harness.reference import host_inputs

    text = spec_text().replace('shape = ["T"], init = "randint(0, V)"', 'shape = ["T + 1"], init = "offsets(0, 2 * D + 1)"')
    spec = load(text)
    size = {"T": 5000, "V": 10, "D": 8}
    for ptr in (numpy_buffers.make_inputs(spec, size, seed=2, variant=3)["idx"], host_inputs(spec, size, seed=2)["idx"]):
        steps = np.diff(ptr.astype(np.int64))
        assert ptr.dtype == np.int32 and ptr.shape == (5001,) and ptr[0] == 0
        assert steps.min() == 0 and steps.max() == 16 and abs(steps.mean() - 8) < 0.5  # every row length 0..16, mean D


def test_offsets_need_an_integer_buffer():
    text = spec_text().replace('dtype = "i32", shape = ["T"], init = "randint(0, V)"', 'dtype = "f32", shape = ["T"], init = "offsets(0, 4)"')
    err = error(text)
    assert err.key == "kernel.gather.args[1]" and "an integer buffer's" in err.message, str(err)


def test_f64_inputs_are_drawn_in_f64(numpy_buffers):
    text = spec_text().replace('{ name = "table", role = "in", dtype = "f32"', '{ name = "table", role = "in", dtype = "f64"')
    table = numpy_buffers.make_inputs(load(text), {"T": 4, "V": 64, "D": 64}, seed=1, variant=0)["table"]
    assert table.dtype == np.float64
    assert np.any(table != table.astype(np.float32).astype(np.float64))  # not float32 values widened


# --- constraints, value symbols, align -----------------------------------------------------------------

def test_constraints_hold_at_listed_sizes_and_are_checked():
    spec = load(spec_text(kernel='constraints = ["D % 8 == 0", "D <= 8192"]'))
    assert spec.satisfies({"T": 1, "V": 1, "D": 64}) and not spec.satisfies({"T": 1, "V": 1, "D": 65})
    text = spec_text(kernel='constraints = ["D % 512 == 0"]')
    err = error(text)
    assert err.key == "kernel.gather.constraints[0]" and "does not hold at the listed size" in err.message, str(err)
    assert err.line == line_of(text, "constraints"), str(err)


@pytest.mark.parametrize("constraint,fragment", [("D + 1", "not a condition"), ("Q > 1", "unknown size symbol(s) Q"),
                                                 ("D % 0 == 0", "division by zero")])
def test_bad_constraints_are_spec_errors(constraint, fragment):
    err = error(spec_text(kernel=f'constraints = ["{constraint}"]'))
    assert err.key == "kernel.gather.constraints[0]" and fragment in err.message, str(err)


def test_comparisons_stay_out_of_size_expressions():
    with pytest.raises(ExprError, match="constraints"):
        evaluate("M < N", {"M": 1, "N": 2})
    assert holds("1 <= M < N and not M == 3", {"M": 2, "N": 5})


def test_value_symbols_are_copied_never_drawn():
    text = spec_text(kernel='values = ["V"]', sizes='[{ T = 64, V = 1000003, D = 256 }, { T = 9, V = 7, D = 8 }]')
    spec = load(text)
    assert spec.dims == ["T", "D"]
    for secret in range(30):
        for size in P.heldout_sizes(spec, secret):
            assert size["V"] in (1000003, 7, 50000), size
    err = error(spec_text(kernel='values = ["P"]'))
    assert err.key == "kernel.gather.values[0]" and "'P' is not a size symbol" in err.message, str(err)


@pytest.mark.parametrize("align,fragment", [(12, "power of two"), (2, "at least the element size")])
def test_align_is_a_power_of_two_of_at_least_the_element_size(align, fragment):
    text = spec_text().replace('shape = ["T", "D"] }', f'shape = ["T", "D"], align = {align} }}')
    err = error(text)
    assert err.key == "kernel.gather.args[2]" and fragment in err.message, str(err)
    ok = spec_text().replace('shape = ["T", "D"] }', 'shape = ["T", "D"], align = 16 }')
    assert load(ok).args[2].align == 16


# --- what the kernel must move and compute ----------------------------------------------------------------

def test_stated_bytes_moved_and_flops_drive_the_floor():
    spec = load(spec_text(kernel='bytes_moved = "T*4 + 2*T*D*4"\nflops = "T * D * 1000"'))
    size = {"T": 4096, "V": 50000, "D": 1024}
    assert spec.bytes_moved_at(size) == 4096 * 4 + 2 * 4096 * 1024 * 4  # not the whole table
    assert spec.flops_at(size) == 4096 * 1024 * 1000
    by_bytes = spec.bytes_moved_at(size) / (4800 * 1e3)
    assert spec.floor_us(size, 4800) == pytest.approx(by_bytes)  # no FLOP term without a peak rate
    assert spec.floor_us(size, 4800, 1.0) == pytest.approx(spec.flops_at(size) / 1e6)  # the FLOP term dominates
    default = load(spec_text())
    assert default.bytes_moved_at(size) == (50000 * 1024 + 4096 * 1024) * 4 + 4096 * 4 and default.flops_at(size) == 0


def test_negative_bytes_moved_is_a_spec_error():
    err = error(spec_text(kernel='bytes_moved = "T - 100000"'))
    assert err.key == "kernel.gather.bytes_moved", str(err)


# --- bounded: nothing in a spec may make an evaluation slow or unbounded -----------------------------------

@pytest.mark.timeout(10)
@pytest.mark.parametrize("expr,fragment", [
    ("cdiv(T, 0)", "division by zero"),
    ("-" * 3000 + "T", "too long"),
    ("-" * 900 + "T", "nested too deeply"),
    ("(" * 200 + "T" + ")" * 200, "nested too deeply"),
    ("(2**32)**64 * T", "out of range"),
    ("T*T*T*T*T*T*T*T*T*T*T*T*T*T*T*T", "out of range"),
])
def test_pathological_expressions_are_spec_errors(expr, fragment):
    text = spec_text().replace('shape = ["T", "D"] }', f'shape = ["{expr}"] }}')
    err = error(text)
    assert err.key == "kernel.gather.args[2].shape" and fragment in err.message, str(err)


def test_a_buffer_above_the_limit_is_a_spec_error():
    text = spec_text().replace('shape = ["T", "D"] }', 'shape = ["T", "D", "2**30"] }')
    err = error(text)
    assert err.key == "kernel.gather.args[2].shape" and "check.max_buffer_bytes" in err.message, str(err)


@pytest.mark.timeout(10)
def test_a_constant_buffer_above_the_heldout_cap_does_not_stall_the_heldout_search():
    text = spec_text().replace('shape = ["V", "D"] }', 'shape = ["8388608"] }')  # the freezing spec of the issue
    spec = load(text)
    sizes = P.heldout_sizes(spec, 1)
    assert sizes and all(P._elements(spec, s) <= spec.check.max_heldout_elements for s in sizes)


@pytest.mark.timeout(60)
def test_the_freezing_spec_gets_an_error_from_the_cli(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text("__global__ void gather(const float* table, const int* idx, float* out, int T, int D) {}\n")
    text = spec_text().replace('shape = ["T", "D"] }', 'shape = ["(2**32)**64 * T"] }')
    (tmp_path / "k.cu.toml").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "ptxfactory.daemon", "optimise", str(cu), "-k", "gather", "--backend", "none"],
                          capture_output=True, text=True, timeout=50)
    assert proc.returncode != 0
    assert f"k.cu.toml:{line_of(text, '2**32')}: kernel.gather.args[2].shape" in proc.stdout + proc.stderr


# --- held-out sizes: inside the envelope, every constraint, bounded ------------------------------------------

def test_heldout_sizes_stay_inside_the_listed_envelope_when_the_kernel_is_the_oracle():
    spec = load(spec_text(sizes='[{ T = 64, V = 1000, D = 256 }, { T = 3, V = 10, D = 8 }]'))
    listed = spec.check.sizes + spec.bench.sizes
    for secret in range(40):
        for size in P.heldout_sizes(spec, secret):
            for s in spec.dims:
                assert min(x[s] for x in listed) <= size[s] <= max(x[s] for x in listed), (secret, size)


def _random_spec(rng: random.Random) -> tuple[str, list[str]]:
    mods = [rng.choice([2, 4, 8, 16, 32, 64, 128]) for _ in range(2)]
    cap = rng.choice([8192, 65536, 1 << 20])
    constraints = [f"D % {mods[0]} == 0", f"T % {mods[1]} == 0 or T <= 4", f"D <= {cap}"]
    if rng.random() < 0.5:
        constraints.append("T * D <= 2**22")
    def size():
        return {"T": rng.choice([1, 2, 3, 4]) if rng.random() < 0.3 else mods[1] * rng.randint(1, 300),
                "V": rng.randint(1, 1000), "D": mods[0] * rng.randint(1, cap // mods[0])}
    def listed(n):
        out = []
        while len(out) < n:
            s = size()
            if s["T"] * s["D"] <= 2**22:
                out.append(s)
        return "[" + ", ".join("{ " + ", ".join(f"{k} = {v}" for k, v in s.items()) + " }" for s in out) + "]"
    kernel = "constraints = [" + ", ".join(f'"{c}"' for c in constraints) + "]"
    check = f'reference = "python:ref.py:gather"' if rng.random() < 0.5 else ""
    return spec_text(kernel=kernel, sizes=listed(rng.randint(1, 4)), bench=listed(rng.randint(1, 3)), check=check), constraints


@pytest.mark.timeout(120)
def test_property_every_heldout_size_satisfies_every_constraint():
    rng = random.Random(2026)
    drawn = 0
    for trial in range(150):
        text, constraints = _random_spec(rng)
        try:
            spec = load(text)
        except SpecError as exc:
            if "reference" in str(exc):  # a Python reference needs its file; drop the key for this property
                spec = load(text.replace('reference = "python:ref.py:gather"', ""))
            else:
                raise
        for secret in range(3):
            for size in P.heldout_sizes(spec, secret * 7919 + trial):
                drawn += 1
                for c in constraints:
                    assert holds(c, size), (trial, c, size)
                assert P._elements(spec, size) <= spec.check.max_heldout_elements
    assert drawn > 150 * 3 * 2  # the constraints rarely leave a target without a size


def test_to_c_writes_size_expressions_as_long_long_c():
    """``to_c``: what a family's kernel computes from its scalar arguments; compiled by g++ and compared with
    ``evaluate`` over sizes (``//`` and ``%`` agree on non-negative operands), refusing what C has no integer form of."""
    import tempfile
    from pathlib import Path

    from ptxfactory.protocol import ExprError, evaluate, to_c

    exprs = ["N", "N * C * H * W", "(H - K) // S + 1", "cdiv(W, 2) + 7 % 3", "min(A, B, 3) * max(A, 2)", "-A + +B", "2 * H"]
    names = {s: s.lower() for s in "NCHWKSAB"}
    sizes = [dict(N=3, C=5, H=17, W=9, K=3, S=2, A=4, B=11), dict(N=1, C=1, H=3, W=1, K=3, S=1, A=7, B=2)]
    lines = []
    for size in sizes:
        decl = " ".join(f"long long {v} = {size[k]};" for k, v in names.items())
        lines.append("{ " + decl + " " + " ".join(f'printf("%lld\\n", (long long){to_c(e, names)});' for e in exprs) + " }")
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "e.cpp"
        src.write_text("#include <cstdio>\n#include <algorithm>\nusing std::min; using std::max;\nint main() {\n"
                       + "\n".join(lines) + "\n}\n")
        subprocess.run(["g++", "-w", str(src), "-o", str(Path(d) / "e")], check=True)
        got = subprocess.run([str(Path(d) / "e")], capture_output=True, text=True, check=True).stdout.split()
    assert [int(g) for g in got] == [evaluate(e, size) for size in sizes for e in exprs]
    for bad, why in (("N ** 2", "no C integer form"), ("Q", "no argument that passes it"), ("1.5 * N", "no C integer form")):
        with pytest.raises(ExprError, match=why):
            to_c(bad, names)
