"""A Python function as the oracle (``check.reference = "python:ref.py:func"``): the spec key, loading,
the calling convention, the failure modes (file:line:key, nothing judged), the acceptance rule as a
pure function on NumPy arrays, and the job failing early. CPU only: the GPU half is
tests/gpu/test_python_reference.py."""
from __future__ import annotations

import re
import shutil
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from ptxfactory.harness import reference as R
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.reference import (
    ACCURACY_FACTOR, ErrorRecord, PythonReference, ReferenceFailed, ReferenceProblem, ReferenceProcess, call_reference,
    describe, host_inputs, judge, python_reference, summarise, to_bf16_bits, ulp, validate_reference, values,
)
from ptxfactory.protocol import SpecError, load_spec, parse_spec
from ptxfactory.protocol.spec import parse_reference

ROOT = Path(__file__).resolve().parents[2]
ROWSUM = ROOT / "examples" / "rowsum_seq"
RMSNORM_SPEC = ROOT / "examples" / "rmsnorm" / "rmsnorm.cu.toml"
REF_LINE = 21  # the line of `reference = ...` in examples/rowsum_seq/rowsum_seq.cu.toml


@pytest.fixture
def rowsum_dir(tmp_path: Path) -> Path:
    """The rowsum_seq example (kernel, spec, ref.py) copied into ``tmp_path/job``."""
    dst = tmp_path / "job"
    shutil.copytree(ROWSUM, dst)
    return dst


def _spec(folder: Path, reference: str | None = None, extra: str = ""):
    path = folder / "rowsum_seq.cu.toml"
    if reference is not None:
        text = path.read_text().replace('reference = "python:ref.py:rowsum"', f'reference = "{reference}"' + extra)
        path.write_text(text)
    return load_spec(path).kernels["rowsum_seq"], path


def _write(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return path


# -- the spec key ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,parsed", [
    ("kernel", None),
    ("python:ref.py:rowsum", ("ref.py", "rowsum")),
    ("python:refs/sub dir/ref.py:f", ("refs/sub dir/ref.py", "f")),
    ("python:/abs/ref.py:f", ("/abs/ref.py", "f")),
    ("python:mypkg.refs:rms_norm", ("mypkg.refs", "rms_norm")),
])
def test_reference_values_parse(text, parsed):
    assert parse_reference(text) == parsed


@pytest.mark.parametrize("text,message", [
    ("numpy", "unknown reference 'numpy'"),
    ("python:ref.py", "give the function after the last ':'"),
    ("python:ref.py:", "give the function after the last ':'"),
    ("python::f", "give the function after the last ':'"),
    ("python:ref.py:1f", "give the function after the last ':'"),
    ("python:a-b:f", "'a-b' is neither a .py file nor a dotted module name"),
])
def test_bad_reference_values_name_file_line_and_key(text, message):
    spec_text = (ROWSUM / "rowsum_seq.cu.toml").read_text().replace("python:ref.py:rowsum", text)
    with pytest.raises(SpecError) as err:
        parse_spec(spec_text, "s.toml")
    assert str(err.value).startswith(f"s.toml:{REF_LINE}: kernel.rowsum_seq.check.reference: ")
    assert message in str(err.value)


def test_reference_defaults_to_the_kernel_in_float64():
    check = load_spec(RMSNORM_SPEC).kernels["rmsnorm"].check
    assert check.reference == "kernel" and check.reference_dtype == "f64"
    spec = load_spec(ROWSUM / "rowsum_seq.cu.toml").kernels["rowsum_seq"]
    assert spec.check.reference == "python:ref.py:rowsum" and spec.check.reference_dtype == "f64"


def test_reference_dtype_f32_and_a_bad_one():
    text = (ROWSUM / "rowsum_seq.cu.toml").read_text()
    f32 = text.replace('reference = "python:ref.py:rowsum"', 'reference = "python:ref.py:rowsum"\nreference_dtype = "f32"')
    assert parse_spec(f32).kernels["rowsum_seq"].check.reference_dtype == "f32"
    with pytest.raises(SpecError) as err:
        parse_spec(f32.replace('"f32"\n', '"f16"\n', 1), "s.toml")
    assert str(err.value).startswith(f"s.toml:{REF_LINE + 1}: kernel.rowsum_seq.check.reference_dtype: Input should be 'f64' or 'f32'")


def test_a_python_reference_widens_the_held_out_sizes_beyond_the_listed_envelope():
    spec = load_spec(ROWSUM / "rowsum_seq.cu.toml").kernels["rowsum_seq"]
    as_kernel = spec.model_copy(update={"check": spec.check.model_copy(update={"reference": "kernel"})})
    listed_m = max(s["M"] for s in spec.check.sizes)
    widened = [s for secret in range(8) for s in make_plan(spec, secret=secret).heldout_sizes if s["M"] > listed_m]
    assert widened, "a Python reference lets held-out sizes go past the largest checked size"
    bench_m = max(s["M"] for s in spec.bench.sizes)
    assert all(s["M"] <= bench_m for secret in range(8) for s in make_plan(as_kernel, secret=secret).heldout_sizes)


# -- resolving and loading -----------------------------------------------------------------------------------
def test_kernel_reference_resolves_to_none():
    assert python_reference(load_spec(RMSNORM_SPEC).kernels["rmsnorm"], RMSNORM_SPEC) is None


def test_file_reference_resolves_beside_the_spec(rowsum_dir: Path):
    spec, path = _spec(rowsum_dir)
    ref = python_reference(spec, path)
    assert ref.file == str((rowsum_dir / "ref.py").resolve()) and ref.module is None and ref.func == "rowsum"
    assert ref.search_path == str(rowsum_dir.resolve()) and ref.dtype == "f64" and len(ref.digest) == 64
    assert (ref.spec_path, ref.line, ref.key) == (str(path), REF_LINE, "kernel.rowsum_seq.check.reference")
    assert ref.timeout_s == R.REFERENCE_TIMEOUT_S == 30.0
    assert PythonReference.model_validate(ref.model_dump()) == ref  # plain data: it crosses to the worker


def test_file_reference_in_a_subfolder_and_edits_change_the_digest(rowsum_dir: Path):
    _write(rowsum_dir, "refs/sums.py", "def rowsum(x, s, **kw):\n    return x.sum(1)\n")
    spec, path = _spec(rowsum_dir, "python:refs/sums.py:rowsum")
    first = python_reference(spec, path)
    assert first.file == str((rowsum_dir / "refs" / "sums.py").resolve())
    _write(rowsum_dir, "refs/sums.py", "def rowsum(x, s, **kw):\n    return x.sum(1) + 0\n")
    assert python_reference(spec, path).digest != first.digest


def test_missing_file_fails_with_file_line_key(rowsum_dir: Path):
    spec, path = _spec(rowsum_dir, "python:nope.py:rowsum")
    with pytest.raises(ReferenceFailed) as err:
        python_reference(spec, path)
    assert isinstance(err.value, SpecError)
    assert str(err.value).startswith(f"{path}:{REF_LINE}: kernel.rowsum_seq.check.reference: python:nope.py:rowsum: cannot read ")
    assert "relative to the spec's folder" in str(err.value)


def test_module_reference_is_found_on_the_spec_folders_path(rowsum_dir: Path):
    _write(rowsum_dir, "myrefs/__init__.py", "")
    _write(rowsum_dir, "myrefs/sums.py", "def total(x, s, *, M, N):\n    return x.sum(axis=1)\n")
    spec, path = _spec(rowsum_dir, "python:myrefs.sums:total")
    ref = python_reference(spec, path)
    assert ref.module == "myrefs.sums" and ref.file is None and ref.digest == ""
    validate_reference(spec, ref)


def test_the_example_reference_validates(rowsum_dir: Path):
    spec, path = _spec(rowsum_dir)
    found: list[str] = []
    seconds = validate_reference(spec, python_reference(spec, path), found)
    assert 0 < seconds < 30 and found == []  # finite sums: nothing to warn about


def test_a_reference_mostly_nan_on_the_spec_inputs_is_warned_about(rowsum_dir: Path):
    # the log of row sums far below zero: every row NaN on the spec's inputs, so the check would compare nothing
    _write(rowsum_dir, "nanref.py", "import numpy as np\ndef rowsum(x, s, **kw):\n    return np.log(x.sum(1) - 1e9)\n")
    spec, path = _spec(rowsum_dir, "python:nanref.py:rowsum")
    found: list[str] = []
    with np.errstate(invalid="ignore"):
        validate_reference(spec, python_reference(spec, path), found)
    assert len(found) == 1 and "output 's' is 100% NaN or inf" in found[0] and "init" in found[0]


# -- the calling convention (in process) -----------------------------------------------------------------------
def _rmsnorm():
    return load_spec(RMSNORM_SPEC).kernels["rmsnorm"]


def test_buffers_positional_in_arg_order_sizes_and_scalars_as_keywords():
    spec = _rmsnorm()  # x (in, bf16 [M, N]), w (in, bf16 [N]), y (out, bf16 [M, N]), M, N, eps
    size = {"M": 3, "N": 5}
    inputs = host_inputs(spec, size, seed=1)
    seen = {}

    def ref(x, w, y, *, M, N, eps):
        seen.update(x=x.copy(), w=w.copy(), y=y.copy(), M=M, N=N, eps=eps)
        return x * w / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)

    out = call_reference(ref, spec, size, inputs)
    assert seen["x"].shape == (3, 5) and seen["w"].shape == (5,) and seen["y"].shape == (3, 5)
    assert seen["x"].dtype == np.float64 and seen["y"].dtype == np.float64 and np.isnan(seen["y"]).all()
    # bf16 inputs arrive as the exact values the kernel reads (widened, never re-rounded)
    assert np.array_equal(seen["x"].ravel(), values(inputs["x"], "bf16"))
    assert np.array_equal(seen["x"].astype(np.float32).view(np.uint32) >> 16, inputs["x"].reshape(3, 5).astype(np.uint32))
    assert (seen["M"], seen["N"]) == (3, 5) and isinstance(seen["M"], int)
    assert seen["eps"] == float(np.float32(1e-6)) and seen["eps"] != 1e-6  # the value the kernel gets (f32)
    assert set(out) == {"y"} and out["y"].shape == (3, 5) and out["y"].dtype == np.float64


def test_only_the_keywords_the_function_takes_unless_it_has_kwargs():
    spec = _rmsnorm()
    size = {"M": 2, "N": 4}
    inputs = host_inputs(spec, size)
    got = {}

    def narrow(x, w, y, eps):  # eps positional-or-keyword after the buffers; no M, N
        got["eps"] = eps
        return x

    def wide(x, w, y, **kw):
        got["kw"] = kw
        return x

    call_reference(narrow, spec, size, inputs)
    call_reference(wide, spec, size, inputs)
    assert got["eps"] == float(np.float32(1e-6)) and set(got["kw"]) == {"M", "N", "eps"}


def test_reference_dtype_f32_gives_float32_arrays():
    spec = _rmsnorm()
    size = {"M": 2, "N": 4}
    dtypes = {}

    def ref(x, w, y, **kw):
        dtypes.update(x=x.dtype, y=y.dtype)
        return x.astype(np.float32)

    out = call_reference(ref, spec, size, host_inputs(spec, size), compute="f32")
    assert dtypes == {"x": np.float32, "y": np.float32} and out["y"].dtype == np.float64


def test_outputs_filled_in_place_or_returned_as_tuple_or_dict(rowsum_dir: Path):
    spec, _ = _spec(rowsum_dir)
    size = {"M": 3, "N": 7}
    inputs = host_inputs(spec, size, seed=3)
    want = values(inputs["x"], "f32").reshape(3, 7).sum(axis=1)

    def fills(x, s, **kw):
        s[:] = x.sum(axis=1)

    for fn in (fills, lambda x, s, **kw: x.sum(axis=1), lambda x, s, **kw: (x.sum(axis=1),),
               lambda x, s, **kw: {"s": x.sum(axis=1)}, lambda x, s, **kw: list(x.sum(axis=1))):
        out = call_reference(fn, spec, size, inputs)
        assert np.allclose(out["s"], want, rtol=1e-15), fn


def test_integer_inputs_arrive_exactly_in_their_dtype_and_integer_outputs_must_be_integers():
    text = textwrap.dedent("""
        [kernel.gather]
        args = [
          { name = "idx", role = "in", dtype = "i64", shape = ["T"], init = "randint(16777000, 16777300)" },
          { name = "out", role = "out", dtype = "i32", shape = ["T"] },
          { name = "T", role = "scalar", dtype = "i32", value = "T" },
        ]
        launch = { grid = ["T"], block = [32] }
        [kernel.gather.check]
        reference = "python:ref.py:f"
        sizes = [{ T = 64 }]
        [kernel.gather.bench]
        sizes = [{ T = 64 }]
    """)
    spec = parse_spec(text).kernels["gather"]
    inputs = host_inputs(spec, {"T": 64})
    seen = {}

    def ref(idx, out, *, T):
        seen["idx"] = idx.copy()
        return idx - 16777000

    got = call_reference(ref, spec, {"T": 64}, inputs)
    assert seen["idx"].dtype == np.int64 and np.array_equal(seen["idx"], inputs["idx"])
    assert (seen["idx"] % 2 == 1).any()  # odd values above 2**24: never passed through float32
    assert got["out"].dtype == np.int64 and np.array_equal(got["out"], inputs["idx"] - 16777000)
    with pytest.raises(ReferenceProblem, match=r"returned float64 for the i32 output 'out': return integers"):
        call_reference(lambda idx, out, **kw: idx * 1.0, spec, {"T": 64}, inputs)


@pytest.mark.parametrize("fn,message", [
    (lambda x, s, **kw: x.sum(axis=1, keepdims=True), r"returned shape \(3, 1\) for output 's', expected \(3,\) \(shape \['M'\] at M=3 N=7\)"),
    (lambda x, s, **kw: (x.sum(1), x.sum(1)), r"returned 2 values for 1 output\(s\) \(s\)"),
    (lambda x, s, **kw: {"y": x.sum(1)}, r"returned a dict without output\(s\) s; with unknown key\(s\) y \(the outputs are: s\)"),
    (lambda x, s, **kw: None, r"returned None and left output 's' unfilled \(all NaN\)"),
    (lambda x, s, **kw: np.array(["a", "b", "c"]), r"returned dtype <U1 for output 's'"),
    (lambda x, s, **kw: 1 / 0, r"raised ZeroDivisionError: division by zero \(test_reference.py:\d+, in <lambda>\)"),
])
def test_wrong_outputs_and_exceptions_say_what_is_wrong(rowsum_dir: Path, fn, message):
    spec, _ = _spec(rowsum_dir)
    with pytest.raises(ReferenceProblem, match=message):
        call_reference(fn, spec, {"M": 3, "N": 7}, host_inputs(spec, {"M": 3, "N": 7}))


def test_a_function_that_does_not_take_the_buffers_is_told_the_calling_convention(rowsum_dir: Path):
    spec, _ = _spec(rowsum_dir)

    def rowsum(x, *, M, N):
        return x.sum(axis=1)

    with pytest.raises(ReferenceProblem) as err:
        call_reference(rowsum, spec, {"M": 3, "N": 7}, host_inputs(spec, {"M": 3, "N": 7}))
    assert str(err.value) == ("raised TypeError: test_a_function_that_does_not_take_the_buffers_is_told_the_calling_convention."
                              "<locals>.rowsum() takes 1 positional argument but 2 positional arguments (and 2 keyword-only arguments) were "
                              "given; it is called as rowsum(x, s, *, M, N): "
                              "every buffer positionally in the spec's order, size symbols and scalars by keyword")


def test_several_outputs_need_a_tuple_a_dict_or_filling():
    text = textwrap.dedent("""
        [kernel.two]
        args = [
          { name = "x", role = "in", dtype = "f32", shape = ["N"] },
          { name = "a", role = "out", dtype = "f32", shape = ["N"] },
          { name = "b", role = "inout", dtype = "f16", shape = ["N"] },
          { name = "N", role = "scalar", dtype = "i32", value = "N" },
        ]
        launch = { grid = ["N"], block = [32] }
        [kernel.two.check]
        reference = "python:ref.py:f"
        sizes = [{ N = 8 }]
        [kernel.two.bench]
        sizes = [{ N = 8 }]
    """)
    spec = parse_spec(text).kernels["two"]
    inputs = host_inputs(spec, {"N": 8})
    b_in = values(inputs["b"], "f16")

    def fills(x, a, b, **kw):
        assert np.array_equal(b, b_in)  # an inout buffer holds its input
        a[:] = x
        b *= 2

    out = call_reference(fills, spec, {"N": 8}, inputs)
    assert np.array_equal(out["b"], 2 * b_in) and np.array_equal(out["a"], values(inputs["x"], "f32"))
    by_order = call_reference(lambda x, a, b, **kw: (x, b * 2), spec, {"N": 8}, inputs)
    assert np.array_equal(by_order["b"], 2 * b_in)
    with pytest.raises(ReferenceProblem, match=r"returned one ndarray for 2 outputs \(a, b\)"):
        call_reference(lambda x, a, b, **kw: x, spec, {"N": 8}, inputs)


# -- failure modes through the child process -------------------------------------------------------------------
BROKEN = """
    import os, sys, time
    import numpy as np

    def raises(x, s, **kw):
        raise ValueError("no such row")

    def bad_shape(x, s, **kw):
        return x.sum()

    def slow(x, s, **kw):
        time.sleep(120)

    def dies(x, s, **kw):
        os._exit(3)

    def chatty(x, s, **kw):
        print("debug output from the reference")
        return x.sum(axis=1)

    def big_only(x, s, *, N, **kw):
        if N > 100:
            raise MemoryError("too big")
        return x.sum(axis=1)

    not_a_function = 42
"""


def _broken(rowsum_dir: Path, func: str, timeout_s: float = 30.0):
    _write(rowsum_dir, "ref.py", BROKEN)
    spec, path = _spec(rowsum_dir, f"python:ref.py:{func}")
    return spec, python_reference(spec, path, timeout_s=timeout_s), path


def _prefix(path: Path) -> str:
    return f"{path}:{REF_LINE}: kernel.rowsum_seq.check.reference: "


@pytest.mark.parametrize("func,message", [
    ("raises", "python:ref.py:raises raised ValueError: no such row (ref.py:6, in raises) at M=3 N=8"),
    ("bad_shape", "python:ref.py:bad_shape returned shape () for output 's', expected (3,) (shape ['M'] at M=3 N=8) at M=3 N=8"),
    ("dies", "the process running python:ref.py:dies died (exit code 3) at M=3 N=8"),
    ("missing", "python:ref.py:missing could not be loaded: "),
    ("not_a_function", "python:ref.py:not_a_function could not be loaded: 'not_a_function' in "),
])
def test_a_failing_reference_fails_the_check_with_file_line_key(rowsum_dir: Path, func: str, message: str):
    spec, ref, path = _broken(rowsum_dir, func)
    with pytest.raises(ReferenceFailed) as err:
        validate_reference(spec, ref)  # at the smallest check size whose symbols differ, M=3 N=8
    assert str(err.value).startswith(_prefix(path) + message), str(err.value)
    if func == "missing":
        assert "has no function 'missing' (it defines: bad_shape, big_only, chatty, dies, raises, slow)" in str(err.value)


def test_the_job_start_check_runs_where_the_symbols_differ():
    """At {B = 1, T = 1, D = 1} every shape in those symbols is [1, 1, 1]: a shape written [B, T, D] for an output the
    reference makes [B, T, T] would pass there; the check runs at the smallest size whose symbols differ."""
    from ptxfactory.harness.reference import smallest_check_size, telling_check_size
    from ptxfactory.protocol import parse_spec

    spec = parse_spec("""[kernel.k]
args = [{ name = "q", role = "in", dtype = "f32", shape = ["B", "T", "D"] },
        { name = "s", role = "out", dtype = "f32", shape = ["B", "T", "D"] }]
launch = { grid = ["B"], block = [32] }
[kernel.k.check]
sizes = [{ B = 1, T = 1, D = 1 }, { B = 2, T = 9, D = 9 }, { B = 2, T = 7, D = 5 }, { B = 3, T = 70, D = 50 }]
[kernel.k.bench]
sizes = [{ B = 8, T = 512, D = 64 }]
""").kernels["k"]
    assert smallest_check_size(spec) == {"B": 1, "T": 1, "D": 1}
    assert telling_check_size(spec) == {"B": 2, "T": 7, "D": 5}
    one = parse_spec("""[kernel.k]
args = [{ name = "x", role = "in", dtype = "f32", shape = ["M"] }, { name = "y", role = "out", dtype = "f32", shape = ["M"] }]
launch = { grid = ["M"], block = [32] }
[kernel.k.check]
sizes = [{ M = 1 }, { M = 5 }]
[kernel.k.bench]
sizes = [{ M = 64 }]
""").kernels["k"]
    assert telling_check_size(one) == {"M": 5}


def test_a_reference_that_does_not_import_names_the_error(rowsum_dir: Path):
    _write(rowsum_dir, "ref.py", "import numpy as np\ndef rowsum(x, s, **kw)\n    return x.sum(1)\n")
    spec, path = _spec(rowsum_dir)
    with pytest.raises(ReferenceFailed) as err:
        validate_reference(spec, python_reference(spec, path))
    assert str(err.value).startswith(_prefix(path) + "python:ref.py:rowsum could not be loaded: SyntaxError: ")


def test_a_slow_reference_is_stopped_at_its_deadline(rowsum_dir: Path):
    spec, ref, path = _broken(rowsum_dir, "slow", timeout_s=1.0)
    proc = ReferenceProcess(ref, spec)
    t0 = time.monotonic()
    with pytest.raises(ReferenceFailed) as err:
        proc.outputs({"M": 1, "N": 1}, host_inputs(spec, {"M": 1, "N": 1}))
    assert time.monotonic() - t0 < 15
    assert str(err.value) == (_prefix(path) + "python:ref.py:slow took longer than 1 s at M=1 N=1 (it was stopped): "
                              "make it faster (vectorise with NumPy), or check smaller sizes")
    assert proc._proc is None  # killed and reaped


def test_the_process_answers_many_calls_and_recovers_after_a_failure(rowsum_dir: Path, capfd):
    spec, ref, path = _broken(rowsum_dir, "big_only")
    proc = ReferenceProcess(ref, spec)
    try:
        small = {"M": 3, "N": 7}
        inputs = host_inputs(spec, small)
        out = proc.outputs(small, inputs)
        assert np.allclose(out["s"], values(inputs["x"], "f32").reshape(3, 7).sum(1))
        pid = proc._proc.pid
        with pytest.raises(ReferenceFailed, match=r"raised MemoryError: too big \(ref.py:\d+, in big_only\) at M=3 N=1000"):
            proc.outputs({"M": 3, "N": 1000}, host_inputs(spec, {"M": 3, "N": 1000}))
        assert proc.outputs(small, inputs)["s"].shape == (3,) and proc._proc.pid == pid  # an exception keeps the process
    finally:
        proc.close()


def test_the_references_prints_go_to_stderr_not_stdout(rowsum_dir: Path, capfd):
    spec, ref, _ = _broken(rowsum_dir, "chatty")
    validate_reference(spec, ref)
    captured = capfd.readouterr()
    assert "debug output from the reference" not in captured.out


# -- the acceptance rule ---------------------------------------------------------------------------------------
def _sequential(x: np.ndarray) -> np.ndarray:
    """The naive kernel's order: one running fp32 sum per row (np.cumsum never reorders)."""
    return np.cumsum(x, axis=1, dtype=np.float32)[:, -1]


def _tree(x: np.ndarray, threads: int = 256) -> np.ndarray:
    """A block reduction's order: each of ``threads`` threads sums its strided elements, then a tree, all in fp32."""
    m, n = x.shape
    padded = np.concatenate([x, np.zeros((m, -n % threads), np.float32)], axis=1).reshape(m, -1, threads)
    part = np.cumsum(padded, axis=1, dtype=np.float32)[:, -1, :]
    while part.shape[1] > 1:
        half = part.shape[1] // 2
        part = (part[:, :half] + part[:, half:]).astype(np.float32)
    return part[:, 0]


def test_a_tree_sum_disagreeing_with_a_sequential_original_is_accepted_against_the_reference():
    spec = load_spec(ROWSUM / "rowsum_seq.cu.toml").kernels["rowsum_seq"]
    rtol, atol = spec.check.rtol, spec.check.atol
    x = (np.random.default_rng(0).standard_normal((4, 1_000_003)) + 1).astype(np.float32)  # the spec's largest check size
    ref = x.astype(np.float64).sum(axis=1)
    seq, tree = _sequential(x).astype(np.float64), _tree(x).astype(np.float64)
    # the original as the oracle would reject the tree ...
    assert (np.abs(tree - seq) > atol + rtol * np.abs(seq)).any()
    # ... the reference accepts it (within tolerance, and far more accurate than the original) ...
    j = judge(tree, seq, ref, "f32", rtol, atol)
    assert j.ok and j.within_tol and j.candidate_err * 10 < j.original_err
    # ... and the original itself, though outside the tolerance, passes as no less accurate than itself
    own = judge(seq, seq, ref, "f32", rtol, atol)
    assert own.ok and not own.within_tol and own.candidate_err == own.original_err
    # the reverse: the sequential sum as a candidate against a tree original is less accurate: rejected
    worse = judge(seq, tree, ref, "f32", rtol, atol)
    assert not worse.ok and worse.candidate_err > worse.bound
    assert "less accurate than 2x the original's + 4 ulp" in describe(worse, "s", (4,))


@pytest.mark.parametrize("variant", ["spec", "uniform", "x64", "x1e-3"])
@pytest.mark.parametrize("n", [1000, 4100, 100_003, 1_000_003])
def test_the_example_spec_tolerance_fits_a_tree_order_at_every_stress_variant(variant, n):
    """What the example's comment says: a 256-thread strided + tree order stays within a quarter of the tolerance."""
    spec = load_spec(ROWSUM / "rowsum_seq.cu.toml").kernels["rowsum_seq"]
    rng = np.random.default_rng(n)
    m = max(2, min(16, 2_000_000 // n))
    raw = rng.random((m, n)) * 2 - 1 if variant == "uniform" else rng.standard_normal((m, n)) + 1
    x = (raw * {"x64": 64.0, "x1e-3": 1e-3}.get(variant, 1.0)).astype(np.float32)
    ref = x.astype(np.float64).sum(axis=1)
    tree = _tree(x).astype(np.float64)
    assert (np.abs(tree - ref) <= 0.25 * (spec.check.atol + spec.check.rtol * np.abs(ref))).all()


def test_no_less_accurate_allows_twice_the_original_error_plus_a_few_ulp():
    ref = np.array([1.0, 2.0, 3.0, 1000.0])
    orig = ref + np.array([0, 0, 0, 0.5])  # max |err| 0.5
    j = judge(ref + [0, 0, 0, 1.0], orig, ref, "f32", 0.0, 0.0)
    assert j.ok and not j.within_tol and j.bound == ACCURACY_FACTOR * 0.5 + 4 * ulp(1000.0, "f32")
    assert not judge(ref + [0, 0, 0, 1.01], orig, ref, "f32", 0.0, 0.0).ok
    # an exact original still leaves a few ulp at the largest |ref|
    assert judge(ref + [0, 0, 0, 4 * ulp(1000.0, "f32")], ref, ref, "f32", 0.0, 0.0).ok
    assert not judge(ref + [0, 0, 0, 5 * ulp(1000.0, "f32")], ref, ref, "f32", 0.0, 0.0).ok


def test_ulp_of_each_dtype():
    assert ulp(1.0, "f32") == 2.0**-23 and ulp(1.0, "f64") == 2.0**-52
    assert ulp(1.0, "f16") == 2.0**-10 and ulp(1.0, "bf16") == 2.0**-7 and ulp(1000.0, "bf16") == 4.0
    assert ulp(1e9, "f16") == ulp(65504.0, "f16") and ulp(5.0, "i32") == 0.0


def test_nan_and_inf_must_match_the_reference_unless_the_original_misses_too():
    ref = np.array([np.nan, np.inf, -np.inf, 1.0, 2.0])
    orig = ref.copy()
    ok = judge(ref.copy(), orig, ref, "f32", 1e-3, 1e-3)
    assert ok.ok and ok.within_tol  # the same NaN and infinities count as right (inf - inf is not an error)
    wrong_inf = ref.copy()
    wrong_inf[1] = -np.inf
    assert not judge(wrong_inf, orig, ref, "f32", 1e-3, 1e-3).ok
    nan_where_finite = ref.copy()
    nan_where_finite[3] = np.nan
    j = judge(nan_where_finite, orig, ref, "f32", 1e-3, 1e-3)
    assert not j.ok and j.new_nonfinite == 1 and "NaN, inf or never written" in describe(j, "y", (5,))
    # where the original overflowed too, the candidate may as well (it is no less accurate there)
    orig_overflows = ref.copy()
    orig_overflows[4] = np.inf
    cand = ref.copy()
    cand[4] = np.inf
    assert judge(cand, orig_overflows, ref, "f32", 1e-3, 1e-3).ok


def test_never_written_elements_always_fail():
    ref = np.array([np.nan, 1.0])
    cand = np.array([np.nan, 1.0])
    j = judge(cand, ref, ref, "f32", 1e-3, 1e-3, unwritten=np.array([True, False]))
    assert not j.ok and j.wrong == 1 and j.first_wrong == 0


def test_integers_are_exact_within_tolerance_and_no_worse_than_the_original():
    ref = np.array([16777217, 2**40 + 1, 5], dtype=np.int64)
    assert judge(ref.copy(), ref, ref, "i64", 1.0, 1.0).within_tol
    off = ref + np.array([1, 0, 0])
    j = judge(off, ref, ref, "i64", 1.0, 1.0)
    assert not j.ok and j.wrong == 1  # rtol/atol never loosen integers; an exact original leaves no slack
    assert judge(off, ref + np.array([0, 0, 1]), ref, "i32", 0.0, 0.0).ok  # the original is off by 1 too


def test_bf16_outputs_are_judged_on_their_exact_values():
    ref = np.array([1.0, -3.0, 1000.0], dtype=np.float64)
    bits = to_bf16_bits(ref.astype(np.float32))
    cand = values(bits, "bf16")
    assert np.array_equal(cand, ref)
    j = judge(values(bits + np.uint16(1), "bf16"), cand, ref, "bf16", 0.0, 0.0)  # one bf16 ulp off everywhere
    assert j.ok and not j.within_tol and j.candidate_err == ulp(1000.0, "bf16")


def test_describe_says_where_and_how_far():
    ref = np.zeros((2, 3))
    cand = ref.copy()
    cand[1, 2] = 0.5
    j = judge(cand, ref, ref, "f32", 0.0, 0.1)
    text = describe(j, "y", (2, 3))
    assert text.startswith("output 'y': 1 of 6 elements outside rtol/atol of the Python reference, first at [1, 2]; "
                           "max |err| 0.5 against the original kernel's 0")


def test_summarise_keeps_the_worst_seed_per_size_and_output():
    a, b = {"M": 3, "N": 8}, {"M": 7, "N": 1000}
    recs = [ErrorRecord(a, "s", False, 1e-6, 1e-3, True), ErrorRecord(a, "s", False, 2e-6, 5e-4, False),
            ErrorRecord(b, "s", True, 3e-7, 2e-3, True)]
    out = summarise(recs)
    assert [(e.size, e.heldout, e.candidate_max_abs, e.original_max_abs, e.within_tol) for e in out] == [
        (a, False, 2e-6, 1e-3, False), (b, True, 3e-7, 2e-3, True)]


# -- the job ------------------------------------------------------------------------------------------------------
async def test_a_broken_reference_fails_the_job_before_anything_compiles(rowsum_dir: Path, monkeypatch):
    from ptxfactory.search import strategy

    _write(rowsum_dir, "ref.py", BROKEN)
    _spec(rowsum_dir, "python:ref.py:raises")
    compiled = []
    monkeypatch.setattr(strategy, "shared_pool", lambda: compiled.append(1) or (_ for _ in ()).throw(AssertionError("compiled")))
    with pytest.raises(ReferenceFailed) as err:
        await strategy.optimise(rowsum_dir / "rowsum_seq.cu", "rowsum_seq", backend=None)
    assert str(err.value).startswith(f"{rowsum_dir / 'rowsum_seq.cu.toml'}:{REF_LINE}: kernel.rowsum_seq.check.reference: "
                                     "python:ref.py:raises raised ValueError")
    assert not compiled


async def test_the_plan_carries_the_resolved_reference_to_the_backend(rowsum_dir: Path, fake_generators):
    from ptxfactory.harness.simulated import SimulatedDevice
    from ptxfactory.search.strategy import optimise

    plans = []

    class Recording(SimulatedDevice):
        async def evaluate(self, spec, baseline, candidate, plan):
            plans.append(plan)
            return await super().evaluate(spec, baseline, candidate, plan)

    await optimise(rowsum_dir / "rowsum_seq.cu", "rowsum_seq", backend=Recording(delay_s=0), max_candidates=2)
    assert plans and all(p.reference is not None and p.reference.file == str((rowsum_dir / "ref.py").resolve()) for p in plans)
    kernel_ref = make_plan(load_spec(RMSNORM_SPEC).kernels["rmsnorm"], secret=1)
    assert kernel_ref.reference is None


def test_the_cli_exits_1_with_the_references_file_line_key(rowsum_dir: Path, fake_generators):
    from typer.testing import CliRunner

    from ptxfactory.daemon.cli import EXIT_BAD_INPUT, build_app

    _write(rowsum_dir, "ref.py", BROKEN)
    _spec(rowsum_dir, "python:ref.py:bad_shape")
    res = CliRunner().invoke(build_app(), ["optimise", str(rowsum_dir / "rowsum_seq.cu"), "-k", "rowsum_seq", "--backend", "none"])
    assert res.exit_code == EXIT_BAD_INPUT, res.output
    # the headless progress lines ("   0.1 s  [0/1] checking the Python reference ...") come first, then the error
    error = [line for line in res.stderr.splitlines() if not re.match(r"\s*\d+\.\d s  ", line)]
    assert error[0].startswith(f"{rowsum_dir / 'rowsum_seq.cu.toml'}:{REF_LINE}: "
                               "kernel.rowsum_seq.check.reference: python:ref.py:bad_shape returned shape ()")


# -- the report ----------------------------------------------------------------------------------------------------
def test_the_table_and_report_show_candidate_and_original_errors_against_the_reference():
    from ptxfactory.daemon import report
    from ptxfactory.protocol import Candidate, CandidateRow, JobSummary, LaunchConfig, Measured, RefError, SizeTiming

    def cand(desc: str, generator: str) -> Candidate:
        return Candidate(kernel_name="k", source=f"__global__ void k() {{ /* {desc} */ int {generator} = 0; }}", kernel_text="", generator=generator,
                         description=desc, launch=LaunchConfig(grid=["M"], block=[128]))

    def measured(c: Candidate, speedup: float, cand_err: float) -> Measured:
        timing = SizeTiming(size={"M": 256, "N": 1000000}, median_us=100 / speedup, p20_us=1, p80_us=1, baseline_median_us=100,
                            bytes_moved=1 << 30, gbps=1.0, pct_of_copy=1.0, floor_us=1.0)
        errors = [RefError(size={"M": 4, "N": 1000003}, output="s", candidate_max_abs=cand_err, original_max_abs=5.25, within_tol=cand_err < 1),
                  RefError(size={"M": 3, "N": 999999}, output="s", heldout=True, candidate_max_abs=cand_err / 2,
                           original_max_abs=4.0, within_tol=True)]
        return Measured(candidate_key=c.key, timings=[timing], speedup=speedup, speedup_lo=speedup * 0.98,
                        speedup_hi=speedup * 1.02, ref_errors=errors)

    orig, tree = cand("original kernel", "original"), cand("block tree", "rowreduce")
    summary = JobSummary(job_id="j", source_path="k.cu", kernel="k", state="finished", baseline_key=orig.key, best_key=tree.key,
                         rows=[CandidateRow(candidate=orig, result=measured(orig, 1.0, 5.25)),
                               CandidateRow(candidate=tree, result=measured(tree, 12.0, 0.0757))])
    views = report.row_views(summary)
    assert views[0].verdict == "yes; max |err| vs reference 5.2"  # the original's own row
    assert views[1].verdict == "yes; max |err| vs reference 0.076 (original 5.2)"
    md = report.render_markdown(summary)
    assert "## Accuracy against the Python reference" in md
    assert "| size | output | #1 | original | within rtol/atol |" in md
    assert "| M=4 N=1000003 | s | 0.0757 | 5.25 | yes |" in md
    assert "| M=3 N=999999 (held-out) | s | 0.0379 | 4 | yes |" in md
    assert md.index("## Accuracy") < md.index("## Candidates")
    plain = summary.model_copy(update={"rows": [r.model_copy(update={"result": r.result.model_copy(update={"ref_errors": []})})
                                                for r in summary.rows]})
    assert "Accuracy" not in report.render_markdown(plain) and report.row_views(plain)[1].verdict == "yes"
    assert JobSummary.model_validate_json(summary.model_dump_json()) == summary  # report.json round-trips the errors


def test_an_integer_output_equal_to_the_poison_is_right_where_the_reference_says_so():
    # int8's poison is 127 - 7 = 120, a value an int8 quantisation writes (bench/trials/quantize_rows: the original
    # kernel itself was rejected, 2026-12-03); an element holding it is wrong only where the reference differs
    ref = np.array([120, -5, 7, 120], dtype=np.int64)
    poisoned = np.array([True, False, False, True])
    j = judge(ref.copy(), ref.copy(), ref, "i8", 0.0, 0.0, unwritten=poisoned)
    assert j.ok and j.within_tol
    skipped = np.array([120, -5, 120, 120], dtype=np.int64)  # element 2 never written: 120 where 7 was due
    j = judge(skipped, ref.copy(), ref, "i8", 0.0, 0.0, unwritten=np.array([True, False, True, True]))
    assert not j.ok and j.wrong == 1 and j.new_nonfinite == 1
