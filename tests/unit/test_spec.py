"""The kernel spec: the example parses; every malformed spec names file, line and key; signatures are checked; expressions are safe."""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxfactory.harness.source import SignatureMismatch, check_signature, find_kernel
from ptxfactory.protocol import ExprError, SpecError, evaluate, load_spec, parse_spec, spec_path_for, symbols_in

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rmsnorm" / "rmsnorm.cu"
SPEC_TEXT = EXAMPLE.with_name("rmsnorm.cu.toml").read_text()
SOURCE = EXAMPLE.read_text()
PATH = "kernels/rmsnorm.cu.toml"


def line_of(text: str, marker: str) -> int:
    """1-based line of the only line containing ``marker``."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if marker in line]
    assert len(hits) == 1, f"{marker!r} is on lines {hits}"
    return hits[0]


def edited(old: str, new: str) -> str:
    assert SPEC_TEXT.count(old) == 1, old
    return SPEC_TEXT.replace(old, new)


def spec_error(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(text, PATH)
    err = info.value
    assert str(err).startswith(f"{PATH}:"), str(err)
    return err


# --- the example ---------------------------------------------------------------------------------

def test_example_spec_parses_with_every_key():
    spec_file = load_spec(spec_path_for(EXAMPLE))
    assert spec_file.path.endswith("rmsnorm.cu.toml")
    spec = spec_file.kernels["rmsnorm"]
    assert spec.arch == "sm_90a"
    assert [a.name for a in spec.args] == ["x", "w", "y", "M", "N", "eps"]
    assert [a.role for a in spec.args] == ["in", "in", "out", "scalar", "scalar", "scalar"]
    assert spec.args[1].distribution() == ("normal", 1.0, 0.1)
    assert spec.args[0].distribution() == ("normal", 0.0, 1.0)
    assert spec.launch.policy == "free" and spec.launch.grid == ["M"] and spec.launch.block == [256]
    assert spec.check.reference == "kernel" and spec.check.rtol == 1e-2 and spec.check.seeds == 3
    assert {"M": 3, "N": 8} in spec.check.sizes
    assert spec.bench.metric == "geomean_time" and len(spec.bench.sizes) == 4
    assert spec.symbols == ["M", "N"]
    # x and w read once, y written once: 2 * M*N*2 bytes + N*2 bytes
    assert spec.bytes_moved_at({"M": 4, "N": 8}) == 2 * 4 * 8 * 2 + 8 * 2


def test_spec_path_is_the_source_path_plus_toml():
    assert spec_path_for("a/b/rmsnorm.cu") == Path("a/b/rmsnorm.cu.toml")


def test_missing_spec_file_names_the_path(tmp_path):
    with pytest.raises(SpecError, match="cannot read spec") as info:
        load_spec(tmp_path / "nope.cu.toml")
    assert info.value.path.endswith("nope.cu.toml")


# --- every error path: file, line, key -------------------------------------------------------------

ERRORS = [
    # (id, old, new, marker on the expected line, expected key, fragment of the message)
    ("unknown_key", 'arch = "sm_90a"', 'arch = "sm_90a"\nflavour = "spicy"', "flavour", "kernel.rmsnorm.flavour", "Extra inputs"),
    ("unknown_key_in_check", "seeds = 3", "seeds = 3\nstrict = true", "strict", "kernel.rmsnorm.check.strict", "Extra inputs"),
    ("unknown_key_in_arg", 'init = "normal(1.0, 0.1)" }', 'init = "normal(1.0, 0.1)", colour = 1 }', "colour",
     "kernel.rmsnorm.args[1].colour", "Extra inputs"),
    ("bad_dtype", '{ name = "y",   role = "out", dtype = "bf16"', '{ name = "y",   role = "out", dtype = "bf17"', "bf17",
     "kernel.rmsnorm.args[2].dtype", "'bf16'"),
    ("bad_role", '{ name = "y",   role = "out"', '{ name = "y",   role = "output"', '"output"', "kernel.rmsnorm.args[2].role", "'out'"),
    ("scalar_without_value", '{ name = "N",   role = "scalar", dtype = "i32", value = "N" }',
     '{ name = "N",   role = "scalar", dtype = "i32" }', '"N",   role', "kernel.rmsnorm.args[4]", "needs a 'value'"),
    ("scalar_with_shape", 'dtype = "f32", value = 1e-6 }', 'dtype = "f32", value = 1e-6, shape = ["N"] }', '"eps"',
     "kernel.rmsnorm.args[5]", "takes no 'shape'"),
    ("buffer_without_shape", '{ name = "y",   role = "out", dtype = "bf16", shape = ["M", "N"] }',
     '{ name = "y",   role = "out", dtype = "bf16" }', '"y"', "kernel.rmsnorm.args[2]", "needs a 'shape'"),
    ("unknown_symbol_in_shape", 'shape = ["N"]', 'shape = ["K"]', '"K"', "kernel.rmsnorm.args[1].shape", "unknown size symbol(s) K"),
    ("unknown_symbol_in_launch", 'grid = ["M"]', 'grid = ["R"]', 'grid = ["R"]', "kernel.rmsnorm.launch.grid", "unknown size symbol(s) R"),
    ("unknown_symbol_in_scalar", 'value = "N" }', 'value = "Q" }', '"Q"', "kernel.rmsnorm.args[4].value", "unknown size symbol(s) Q"),
    ("negative_tolerance", "rtol = 1e-2", "rtol = -1e-2", "rtol", "kernel.rmsnorm.check.rtol", "greater than or equal to 0"),
    ("bad_arch", 'arch = "sm_90a"', 'arch = "hopper"', "hopper", "kernel.rmsnorm.arch", "sm_90"),
    ("bad_init", 'init = "normal(1.0, 0.1)"', 'init = "gaussian"', "gaussian", "kernel.rmsnorm.args[1].init", "unknown init 'gaussian'"),
    ("bad_init_params", 'init = "normal(1.0, 0.1)"', 'init = "normal(1.0)"', "normal(1.0)", "kernel.rmsnorm.args[1].init", "takes two bounds"),
    ("too_many_block_dims", "block = [256]", "block = [8, 8, 4, 1]", "block = [8", "kernel.rmsnorm.launch.block", "at most 3"),
    ("bad_policy", 'policy = "free"', 'policy = "loose"', "loose", "kernel.rmsnorm.launch.policy", "'fixed'"),
]


@pytest.mark.parametrize("old,new,marker,key,fragment", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_spec_error_names_file_line_and_key(old, new, marker, key, fragment):
    text = edited(old, new)
    err = spec_error(text)
    assert err.key == key, str(err)
    assert err.line == line_of(text, marker), str(err)
    assert fragment in err.message, str(err)
    assert str(err) == f"{PATH}:{err.line}: {key}: {err.message}"


def test_not_toml_gives_the_line():
    text = edited('arch = "sm_90a"', "arch = sm_90a")
    err = spec_error(text)
    assert err.line == line_of(text, "arch = sm_90a")
    assert "not valid TOML" in err.message


@pytest.mark.parametrize("text", ["", "[other]\nx = 1\n", "kernel = 3\n"], ids=["empty", "other_table", "not_a_table"])
def test_no_kernel_table(text):
    err = spec_error(text)
    assert err.key == "kernel" and err.line == 1
    assert "no [kernel.NAME] table" in err.message


def test_kernel_entry_that_is_not_a_table():
    err = spec_error('[kernel]\nrmsnorm = 3\n')
    assert err.key == "kernel.rmsnorm" and err.line == 2 and "must be a table" in err.message


def test_unknown_top_level_key():
    text = 'title = "x"\n' + SPEC_TEXT
    err = spec_error(text)
    assert err.key == "title" and err.line == 1


def test_missing_table_is_named():
    text = SPEC_TEXT.split("[kernel.rmsnorm.check]")[0]
    err = spec_error(text)
    assert err.key == "kernel.rmsnorm.check" and "Field required" in err.message
    assert err.line == line_of(text, "[kernel.rmsnorm]")


def test_missing_key_is_named():
    err = spec_error(edited("sizes = [{ M = 7,", "# sizes = [{ M = 7,"))
    assert err.key == "kernel.rmsnorm.check.sizes" and "Field required" in err.message and err.line is not None


def test_missing_key_points_at_its_table():
    text = edited("sizes = [{ M = 7,", "# sizes = [{ M = 7,")
    assert spec_error(text).line == line_of(text, "[kernel.rmsnorm.check]")


def test_duplicate_argument_names():
    text = edited('{ name = "N",   role = "scalar"', '{ name = "M",   role = "scalar"')
    err = spec_error(text)
    assert err.key.startswith("kernel.rmsnorm") and err.line is not None
    assert "duplicate argument name(s): M" in err.message


def test_inconsistent_size_symbols_are_reported():
    text = edited("{ M = 3, N = 8 }", "{ M = 3, K = 8 }")
    err = spec_error(text)
    assert err.key.startswith("kernel.rmsnorm") and err.line is not None
    assert "check.sizes[2]" in str(err) and "['K', 'M']" in err.message


def test_inconsistent_bench_symbols_are_reported():
    err = spec_error(edited("{ M = 8192, N = 7168 }", "{ M = 8192 }"))
    assert "bench.sizes[3]" in str(err) and "expected ['M', 'N']" in err.message


def test_inconsistent_size_symbols_point_at_the_size_entry():
    text = edited("{ M = 3, N = 8 }", "{ M = 3, K = 8 }")
    err = spec_error(text)
    assert err.key == "kernel.rmsnorm.check.sizes[2]"
    assert err.line == line_of(text, "K = 8")


@pytest.mark.parametrize("expr", ["M.real", "M < N"])
def test_forbidden_expression_in_spec_is_a_spec_error(expr):
    err = spec_error(edited('grid = ["M"]', f'grid = ["{expr}"]'))
    assert err.key == "kernel.rmsnorm.launch.grid"


@pytest.mark.parametrize("expr,fragment", [
    ("M - 100", "-93 at {'M': 7, 'N': 1000}: every grid and block dimension must be at least 1"),
    ("abs(M)", "function abs() is not allowed"),
    ("M / 2", "use '//' (floor) or cdiv(a, b) (ceiling)"),
    ("M ** 99999999", "exponent out of range"),
])
def test_a_launch_that_cannot_run_at_a_size_is_a_spec_error(expr, fragment):
    """Caught when the spec loads, with its line and key: not later as every candidate's static_launch failure."""
    text = edited('grid = ["M"]', f'grid = ["{expr}"]')
    err = spec_error(text)
    assert err.key == "kernel.rmsnorm.launch.grid" and err.line == line_of(text, "launch =")
    assert fragment in err.message, err.message


def test_too_many_threads_per_block_is_a_spec_error():
    err = spec_error(edited("block = [256]", "block = [2048]"))
    assert err.key == "kernel.rmsnorm.launch.block" and "2048 threads per block" in err.message


def test_unparseable_expression_in_spec_is_a_spec_error():
    err = spec_error(edited('grid = ["M"]', 'grid = ["(M"]'))
    assert err.key == "kernel.rmsnorm.launch.grid" and "cannot parse" in err.message


# --- the signature check ---------------------------------------------------------------------------

SPEC = parse_spec(SPEC_TEXT).kernels["rmsnorm"]


def signature_error(old: str, new: str) -> str:
    assert old in SOURCE
    with pytest.raises(SignatureMismatch) as info:
        check_signature(SPEC, find_kernel(SOURCE.replace(old, new), "rmsnorm"))
    return str(info.value)


def test_example_signature_matches():
    check_signature(SPEC, find_kernel(SOURCE, "rmsnorm"))


def test_signature_count_mismatch_lists_both_sides():
    msg = signature_error(", float eps)", ")")
    assert "has 5 parameters" in msg and "lists 6 args" in msg and "eps" in msg


def test_signature_name_mismatch_names_the_argument():
    msg = signature_error("int M, int N", "int rows, int N")
    assert msg.startswith("args[3] ('M')") and "'rows'" in msg


def test_signature_scalar_given_a_pointer():
    msg = signature_error("int M, int N", "int* M, int N")
    assert msg.startswith("args[3] ('M')") and "pointer" in msg


def test_signature_buffer_given_a_scalar():
    msg = signature_error("__nv_bfloat16* y,", "__nv_bfloat16 y,")
    assert msg.startswith("args[2] ('y')") and "needs a pointer" in msg


@pytest.mark.parametrize("old,new,arg,declared", [
    ("float eps", "double eps", "args[5] ('eps')", "double"),
    ("const __nv_bfloat16* w", "const __half* w", "args[1] ('w')", "__half"),
])
def test_signature_dtype_mismatch_names_the_argument(old, new, arg, declared):
    msg = signature_error(old, new)
    assert msg.startswith(arg) and f"declares {declared}" in msg


def test_missing_kernel_lists_the_kernels_found():
    with pytest.raises(KeyError, match="found: rmsnorm"):
        find_kernel(SOURCE, "layernorm")


# --- expressions -----------------------------------------------------------------------------------

@pytest.mark.parametrize("expr,value", [
    ("M", 7), ("(M + 3) // 4", 2), ("256 * 4", 1024), (12, 12), ("cdiv(N, 4)", 3), ("min(M, N)", 7),
    ("max(M, N) % 5", 0), ("-M + 2 ** 3", 1), ("+N", 10),
])
def test_evaluate(expr, value):
    assert evaluate(expr, {"M": 7, "N": 10}) == value


@pytest.mark.parametrize("expr,symbols", [("M", {"M"}), ("cdiv(M, N) * K", {"M", "N", "K"}), ("min(4, 8)", set()), (256, set())])
def test_symbols_in_excludes_function_names(expr, symbols):
    assert symbols_in(expr) == symbols


@pytest.mark.parametrize("expr", [
    "M.real", "M.bit_length()", "[M][0]", "M if N else 1", "M < N", "lambda: 1", "abs(M)", "__import__('os')",
    "min(M, key=N)", "M @ N", "'abc'", "M and N", "(lambda: 1)()",
])
def test_forbidden_constructs_raise_expr_error(expr):
    with pytest.raises(ExprError):
        evaluate(expr, {"M": 4, "N": 3})


def test_unknown_symbol_is_named():
    with pytest.raises(ExprError, match="unknown symbol 'K'"):
        evaluate("M * K", {"M": 2})


def test_division_by_zero_is_an_expr_error():
    with pytest.raises(ExprError, match="division by zero"):
        evaluate("M // (N - N)", {"M": 2, "N": 3})


@pytest.mark.parametrize("bad", ["(", "M +", True])
def test_unparseable_or_bool_raises(bad):
    with pytest.raises(ExprError):
        symbols_in(bad)


def test_wrong_arity_is_an_expr_error():
    with pytest.raises(ExprError):
        evaluate("cdiv(M)", {"M": 4})


def test_tune_defines_parse_and_default_to_none():
    assert SPEC.tune.defines == {}
    text = SPEC_TEXT + '\n[kernel.rmsnorm.tune]\ndefines = { UNROLL = [1, 2, 4], MODE = ["fast", "exact"] }\n'
    spec = parse_spec(text, PATH).kernels["rmsnorm"]
    assert spec.tune.defines == {"UNROLL": [1, 2, 4], "MODE": ["fast", "exact"]}


@pytest.mark.parametrize("defines,fragment", [
    ('{ "2BAD" = [1] }', "is not a C identifier"),
    ("{ UNROLL = [] }", "give 1 to 16 values"),
    ('{ UNROLL = ["1; rm -rf"] }', "is not an integer or a plain token"),
    ("{ UNROLL = [[1]] }", "is not an integer or a plain token"),
    ("{ UNROLL = 4 }", "UNROLL: give a list of values, e.g. UNROLL = [4]"),
    ("{ UNROLL = [2, 4, 2] }", "UNROLL: a value is listed twice"),
])
def test_bad_tune_defines_name_the_key_and_line(defines, fragment):
    text = SPEC_TEXT + f"\n[kernel.rmsnorm.tune]\ndefines = {defines}\n"
    err = spec_error(text)
    assert err.key.startswith("kernel.rmsnorm.tune.defines") and fragment in err.message, (err.key, err.message)
    assert err.line == line_of(text, "defines =")


def test_tune_template_knobs_parse_in_order_and_are_checked_like_defines():
    text = SPEC_TEXT + '\n[kernel.rmsnorm.tune]\ntemplate = { VEC = [8, 4], TILE = [32, 64], FAST = [false, true] }\n'
    spec = parse_spec(text, PATH).kernels["rmsnorm"]
    assert list(spec.tune.template.items()) == [("VEC", [8, 4]), ("TILE", [32, 64]), ("FAST", ["false", "true"])]
    both = SPEC_TEXT + '\n[kernel.rmsnorm.tune]\ndefines = { TILE = [1] }\ntemplate = { TILE = [32] }\n'
    err = spec_error(both)
    assert err.key.startswith("kernel.rmsnorm.tune") and "TILE: a knob is either a macro (defines) or a template parameter" in err.message
    bad = SPEC_TEXT + '\n[kernel.rmsnorm.tune]\ntemplate = { TILE = ["32>"] }\n'
    err = spec_error(bad)
    assert err.key.startswith("kernel.rmsnorm.tune.template") and "is not an integer or a plain token" in err.message
    assert err.line == line_of(bad, "template =")
