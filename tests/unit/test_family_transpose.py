"""CPU tests of the "transpose" family: every instance compiles with NVRTC for sm_90a, without spills.

No GPU is needed (NVRTC runs without a driver). Correctness on the GPU is the verifier's business
(tests/gpu/test_gpu_family_transpose.py); here: the pattern match, the user's signature, distinct keys,
launches that fit the compiled kernel at every size the verifier and the benchmark use, shared
memory as the configuration says, and the vector/scalar dispatch.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.source import check_signature, find_kernel
from ptxfactory.harness.static_checks import MAX_GRID_DIMS, static_check
from ptxfactory.protocol import Candidate, evaluate, load_spec, parse_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators import load
from ptxfactory.search.generators.transpose import TransposeConfig, TransposeFamily, match_spec, tuning_space
from _generator_support import example_ctx, with_args

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "transpose" / "transpose.cu"


def make_ctx(spec=None, source: str | None = None) -> GenContext:
    return example_ctx(EXAMPLE, "transpose", spec, source)


def bf16_ctx() -> GenContext:
    src = "#include <cuda_bf16.h>\n" + EXAMPLE.read_text().replace("float", "__nv_bfloat16")
    spec = load_spec(str(EXAMPLE) + ".toml").kernels["transpose"]
    return make_ctx(spec=with_args(spec, x={"dtype": "bf16"}, y={"dtype": "bf16"}), source=src)


@pytest.fixture(scope="module")
def ctx() -> GenContext:
    return make_ctx()


@pytest.fixture(scope="module")
def cands(ctx) -> list[Candidate]:
    return TransposeFamily().propose(ctx)


@pytest.fixture(scope="module")
def compiled(cands, ctx):
    return {c.key: compile_candidate(c, ctx.spec.arch, ctx.spec.check.fast_math) for c in cands}


def _config(c: Candidate) -> TransposeConfig:
    return TransposeConfig(c.params["tile"], c.params["rows"], c.params["pad"], c.params["vec"])


def test_registry_loads_transpose():
    assert load("transpose").name == "transpose"


def test_proposes_the_tuning_space(cands, ctx):
    assert 12 <= len(cands) <= 20
    assert len({c.key for c in cands}) == len(cands)
    assert ctx.original.key not in {c.key for c in cands}
    assert {c.params["tile"] for c in cands} == {32, 64}
    assert {c.params["pad"] for c in cands} == {0, 1}
    assert {c.params["vec"] for c in cands} == {4, 16}
    assert {c.params["rows"] for c in cands} == {8, 16}
    for c in cands:
        assert c.generator == "transpose" and c.parent == ctx.original.key and c.kernel_name == "transpose"
        assert c.description.startswith("transpose ")
        assert c.params["block"] == 32 * c.params["rows"]
        assert _config(c).valid(4)
    order = [(c.params["tile"], c.params["rows"], -c.params["pad"], c.params["vec"]) for c in cands]
    assert order == sorted(order), "product order, the padded tile first"
    assert cands[0].params["pad"] == 1


def test_every_instance_compiles_without_spills_and_passes_static_checks(cands, compiled, ctx):
    for c in cands:
        r = compiled[c.key]
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        res = r.resources
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.local_bytes == 0, f"{c.description}: {res.summary()}"
        assert 0 < res.registers <= 64 and res.registers * c.launch.block[0] <= 65536, f"{c.description}: {res.summary()}"
        assert res.shared_bytes == _config(c).smem_bytes(4) <= 48 * 1024, f"{c.description}: {res.summary()}"
        assert static_check(c, ctx.spec, res, r.cubin) is None, c.description


def test_keeps_the_users_signature(cands, ctx):
    for c in cands:
        k = find_kernel(c.source, "transpose")
        check_signature(ctx.spec, k)
        assert [(p.name, p.type, p.is_pointer, p.is_const) for p in k.params] == [
            (p.name, p.type, p.is_pointer, p.is_const) for p in ctx.kernel.params
        ]
        assert k.text.startswith('extern "C"')
        head, tail = ctx.source[: ctx.kernel.start_byte], ctx.source[ctx.kernel.end_byte :]
        assert c.source == head + c.kernel_text + tail
        helpers = re.findall(r"static __device__ (?:__forceinline__ )?[^(;]*?(\w+)\(", c.kernel_text)
        assert helpers and all(n.startswith("ptxf_") for n in helpers), helpers


def _sizes(spec) -> list[dict[str, int]]:
    extra = [{"M": 1, "N": 1}, {"M": 1, "N": 99999}, {"M": 99999, "N": 1}, {"M": 3, "N": 32793}, {"M": 2_100_000, "N": 3}]
    return (spec.check.sizes + spec.bench.sizes + make_plan(spec, secret=1234).heldout_sizes
            + make_plan(spec, secret=99).heldout_sizes + extra)


def test_launch_matches_launch_bounds_and_covers_every_size(cands, ctx):
    for c in cands:
        assert len(c.launch.block) == 1 and len(c.launch.grid) == 1 and c.launch.shared_mem == 0
        block = c.launch.block[0]
        bounds = re.search(r"__launch_bounds__\((\d+)(?:,\s*(\d+))?\)\s*transpose\(", c.kernel_text)
        assert bounds and int(bounds.group(1)) == block and block % 32 == 0
        assert f"// Launch: grid ({c.launch.grid[0]},), block ({block},)" in c.kernel_text
        t = c.params["tile"]
        for size in _sizes(ctx.spec):
            grid = evaluate(c.launch.grid[0], size)
            assert grid == -(-size["M"] // t) * -(-size["N"] // t), (c.description, size)
            assert 1 <= grid <= MAX_GRID_DIMS[0]  # a 1-D grid: no 65535 limit on either side


def test_vector_and_scalar_dispatch(cands):
    for c in cands:
        text, cfg = c.kernel_text, _config(c)
        v = cfg.elems(4)
        assert f"__shared__ unsigned ptxf_tile[{cfg.tile}][{cfg.tile} + {cfg.pad}];" in text
        assert "__syncthreads();" in text and "ptxf_transpose_tile<1, 1>" in text
        if v == 1:
            assert "uint4" not in text and "ptxf_rv" not in text
        else:
            for pair in (f"<{v}, {v}>", f"<{v}, 1>", f"<1, {v}>"):
                assert f"ptxf_transpose_tile{pair}" in text
            assert f"ptxf_C % {v} == 0" in text and f"ptxf_R % {v} == 0" in text and "uint4" in text


def test_bf16_instances_compile():
    ctx = bf16_ctx()
    cands = TransposeFamily().propose(ctx)
    assert len(cands) == len(tuning_space(2)) >= 12
    assert all(_config(c).valid(2) for c in cands)
    assert any(c.params["vec"] == 16 for c in cands)  # 8 bf16 per access at tile 64
    for c in cands:
        assert "unsigned short" in c.kernel_text
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        assert r.resources.spill_stores == 0 and r.resources.local_bytes == 0
        assert r.resources.shared_bytes == _config(c).smem_bytes(2)
        assert static_check(c, ctx.spec, r.resources, r.cubin) is None


def test_invalid_configurations_are_refused():
    assert not TransposeConfig(32, 16, 1, 16).valid(4)  # 512 threads x 4 floats > 32 x 32
    assert not TransposeConfig(32, 8, 1, 16).valid(2)  # 256 threads x 8 bf16 > 32 x 32
    assert TransposeConfig(64, 16, 1, 16).valid(2)


@pytest.mark.parametrize(
    "change",
    [
        {"y": {"shape": ["M", "N"]}},                   # a copy, not a transpose
        {"y": {"dtype": "bf16"}},                       # dtype changes
        {"N": {"value": "M"}},                          # no scalar for the row length
        {"M": {"dtype": "f64"}},                        # a float "size"
    ],
)
def test_refuses_other_specs(ctx, change):
    spec = with_args(ctx.spec, **change)
    assert match_spec(spec) is None
    assert TransposeFamily().propose(make_ctx(spec=spec)) == []


@pytest.mark.parametrize(
    "change, float_source",
    [
        ({"x": {"dtype": "i32"}, "y": {"dtype": "i32"}}, False),  # raw bits: any element type
        ({"x": {"shape": ["M", "M"]}, "y": {"shape": ["M", "M"]}}, True),  # square: the one reading but the copy
    ],
)
def test_takes_other_element_types_and_square_shapes(ctx, change, float_source):
    spec = with_args(ctx.spec, **change)
    (m,) = match_spec(spec)
    assert m.perm == (1, 0) and not m.batch
    if float_source:  # the example's float signature fits the spec (an int x is another kernel's)
        assert len(TransposeFamily().propose(make_ctx(spec=spec))) == len(tuning_space(4))


def test_refuses_fixed_launch_and_other_examples(ctx):
    data = ctx.spec.model_dump(mode="json")
    data["launch"]["policy"] = "fixed"
    assert TransposeFamily().propose(make_ctx(spec=type(ctx.spec).model_validate(data))) == []
    for name in ("bias_gelu", "rmsnorm", "softmax", "gemv", "rowsum"):
        path = ROOT / "examples" / name / f"{name}.cu"
        other = load_spec(str(path) + ".toml").kernels[name]
        assert match_spec(other) is None, name


THIRD_ARG = """
[kernel.tr]
args = [
  { name = "a", role = "in", dtype = "f32", shape = ["R", "C"] },
  { name = "b", role = "out", dtype = "f32", shape = ["C", "R"] },
  { name = "r", role = "scalar", dtype = "i64", value = "R" },
  { name = "c", role = "scalar", dtype = "i64", value = "C" },
  { name = "alpha", role = "scalar", dtype = "f32", value = 2.0 },
]
launch = { grid = ["R"], block = [32], policy = "free" }
[kernel.tr.check]
sizes = [{ R = 3, C = 100 }]
[kernel.tr.bench]
sizes = [{ R = 4096, C = 2048 }]
"""


def test_refuses_an_extra_scalar():
    assert match_spec(parse_spec(THIRD_ARG).kernels["tr"]) is None


CXX = """__global__ void flip(const float* a, float* b, long long r, long long c)
{
    for (long long i = 0; i < r * c; ++i) b[(i % c) * r + i / c] = a[i];
}
"""
CXX_SPEC = THIRD_ARG.replace('  { name = "alpha", role = "scalar", dtype = "f32", value = 2.0 },\n', "").replace("kernel.tr", "kernel.flip")


def test_cxx_linkage_i64_sizes_other_names():
    spec = parse_spec(CXX_SPEC).kernels["flip"]
    cands = TransposeFamily().propose(make_ctx(spec=spec, source=CXX))
    assert len(cands) == len(tuning_space(4))
    c = cands[-1]
    k = find_kernel(c.source, "flip")
    check_signature(spec, k)
    assert not k.text.lstrip().startswith("extern") and c.launch.grid == ["max(1, cdiv(R, 64) * cdiv(C, 64))"]
    r = compile_candidate(c, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.lowered_name != "flip"
