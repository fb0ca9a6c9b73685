"""CPU tests of the "rowwise" family on LayerNorm with a bias (examples/layernorm): x, gamma, beta -> y.

The spec has two ``[C]`` vectors: the weight, then the bias (signature order). Every candidate is a
LayerNorm (two passes over the register-cached row: the mean, then the squared deviations), compiles
with NVRTC for sm_90a without spills, passes the static checks and keeps the user's signature.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.source import check_signature, find_kernel
from ptxfactory.harness.static_checks import MAX_GRID_DIMS, static_check
from ptxfactory.protocol import Candidate, evaluate, load_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators.rowwise import RowwiseConfig, RowwiseNormFamily, match_spec
from _generator_support import example_ctx, with_args

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "layernorm" / "layernorm.cu"


def make_ctx(spec=None, source: str | None = None) -> GenContext:
    return example_ctx(EXAMPLE, "layernorm", spec, source)


@pytest.fixture(scope="module")
def ctx() -> GenContext:
    return make_ctx()


@pytest.fixture(scope="module")
def cands(ctx) -> list[Candidate]:
    return RowwiseNormFamily().propose(ctx)


@pytest.fixture(scope="module")
def compiled(cands, ctx):
    return {c.key: compile_candidate(c, ctx.spec.arch, ctx.spec.check.fast_math) for c in cands}


def _config(c: Candidate) -> RowwiseConfig:
    p = c.params
    return RowwiseConfig(p["block"], p["rows_per_block"], p["vecs"], p["hint"], p["grid"], p["norm"],
                         p.get("cluster", 1), p.get("stage") == "smem")


def test_matches_weight_then_bias(ctx):
    m = match_spec(ctx.spec)
    assert m is not None
    assert (m.x, m.w, m.b, m.y, m.r_arg, m.c_arg, m.eps_arg) == ("x", "gamma", "beta", "y", "M", "N", "eps")
    assert m.w_dtype == m.b_dtype == "bf16"


def test_every_candidate_is_layer_norm(cands, ctx):
    # the register configurations and the staged twins of those with the read-only hint (sm_90a here)
    assert 12 <= len([c for c in cands if not c.params.get("stage")]) <= 30 and len(cands) <= 50
    assert all(c.params["norm"] == "layer" for c in cands)
    assert len({c.key for c in cands}) == len(cands) and ctx.original.key not in {c.key for c in cands}
    for c in cands:
        assert c.generator == "rowwise" and c.parent == ctx.original.key and c.kernel_name == "layernorm"
        assert c.description.startswith("rowwise layer ")
        kernel = c.kernel_text.split("__global__")[-1]
        assert re.findall(r"ptxf_rowwise<\d+, \d+, \d+, (true|false)>", kernel) and ", false>(" not in kernel


def test_every_candidate_compiles_without_spills_and_passes_static_checks(cands, compiled, ctx):
    for c in cands:
        r = compiled[c.key]
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        res = r.resources
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.local_bytes == 0, f"{c.description}: {res.summary()}"
        assert 0 < res.registers * c.launch.block[0] <= 65536
        assert static_check(c, ctx.spec, res, r.cubin) is None, c.description


def test_keeps_the_users_signature(cands, ctx):
    for c in cands:
        k = find_kernel(c.source, "layernorm")
        check_signature(ctx.spec, k)
        assert [(p.name, p.type, p.is_pointer, p.is_const) for p in k.params] == [
            (p.name, p.type, p.is_pointer, p.is_const) for p in ctx.kernel.params
        ]
        assert k.text.startswith('extern "C"')
        head, tail = ctx.source[: ctx.kernel.start_byte], ctx.source[ctx.kernel.end_byte :]
        assert c.source == head + c.kernel_text + tail


def test_bias_is_added_after_scaling_and_variance_is_two_pass(cands):
    text = cands[0].kernel_text
    # the bias: vector path (h[k]) and scalar path (b[j]), both after the weight
    assert "o[k] = ((f[k] - mean) * scale) * g[k] + h[k];" in text
    assert "o * ptxf_w2f(w[j]) + ptxf_b2f(b[j])" in text
    # the kernel passes the user's gamma and beta (by name) as the weight and the bias
    assert re.search(r"ptxf_rowwise<[^>]*>\(x, gamma, beta, y,", text)
    assert "ptxf_aligned(gamma, 16) && ptxf_aligned(beta, 16)" in text
    # second pass: squared deviations from the mean, reduced again; no E[x^2] - mean^2
    assert "const float d = f[k] - mean; acc[0] += d * d;" in text
    assert "mean * mean" not in text
    assert text.count("ptxf_row_reduce<TPR, 1>(acc") == 2


def test_launch_matches_launch_bounds_and_limits(cands, ctx):
    plan = make_plan(ctx.spec, secret=99)
    sizes = ctx.spec.check.sizes + ctx.spec.bench.sizes + plan.heldout_sizes
    sizes += [{"M": 1, "N": 1}, {"M": 1031, "N": 2051}, {"M": 3, "N": 32801}, {"M": 65537, "N": 5}]
    sizes += [{"M": 37, "N": n} for n in range(1, 40000, 997)]
    for c in cands:
        block = c.launch.block[0]
        bounds = re.search(r"__launch_bounds__\((\d+)(?:,\s*(\d+))?\)\s*layernorm\(", c.kernel_text)
        assert bounds and int(bounds.group(1)) == block <= 1024 and block % 32 == 0
        cfg = _config(c)
        tiers = cfg.tiers(8)
        for size in sizes:
            grid = evaluate(c.launch.grid[0], size)
            rpb = next((t for t in tiers if size["N"] <= t[2]), tiers[-1])[1]
            assert grid * rpb >= size["M"] > (grid - 1) * rpb, f"{c.description} grid {grid} for {size}"
            assert grid <= MAX_GRID_DIMS[0]


@pytest.mark.parametrize(
    "change",
    [
        {"beta": {"shape": ["M"]}},  # the bias along the wrong axis
        {"beta": {"role": "out"}},  # two outputs
        {"gamma": {"dtype": "i32"}},  # an integer weight
        {"eps": {"value": "N"}},  # no constant eps
    ],
)
def test_refuses_other_specs(ctx, change):
    spec = with_args(ctx.spec, **change)
    assert match_spec(spec) is None
    assert RowwiseNormFamily().propose(make_ctx(spec=spec)) == []


def test_refuses_a_third_vector():
    src = EXAMPLE.read_text().replace("const __nv_bfloat16* beta,", "const __nv_bfloat16* beta, const __nv_bfloat16* extra,")
    data = load_spec(str(EXAMPLE) + ".toml").kernels["layernorm"].model_dump(mode="json")
    at = next(i for i, a in enumerate(data["args"]) if a["name"] == "beta") + 1
    data["args"].insert(at, {**data["args"][at - 1], "name": "extra"})
    spec = type(load_spec(str(EXAMPLE) + ".toml").kernels["layernorm"]).model_validate(data)
    assert match_spec(spec) is None
    assert RowwiseNormFamily().propose(make_ctx(spec=spec, source=src)) == []


def test_f32_bias_and_other_names_compile():
    """f32 with f32 vectors, other parameter names: the bias load is 16 bytes, the kernel compiles spill-free."""
    src = EXAMPLE.read_text().replace("__nv_bfloat16", "float").replace("__bfloat162float", "").replace("__float2bfloat16", "")
    src = src.replace("gamma", "scale_w").replace("beta", "shift_b")
    spec = load_spec(str(EXAMPLE) + ".toml").kernels["layernorm"]
    data = spec.model_dump(mode="json")
    for a in data["args"]:
        a["name"] = {"gamma": "scale_w", "beta": "shift_b"}.get(a["name"], a["name"])
        if a["role"] != "scalar":
            a["dtype"] = "f32"
    spec = type(spec).model_validate(data)
    cands = RowwiseNormFamily().propose(make_ctx(spec=spec, source=src))
    assert cands and all(c.params["norm"] == "layer" for c in cands)
    for c in (cands[0], cands[-1]):
        assert "% 4 == 0" in c.kernel_text and "ptxf_aligned(shift_b, 16)" in c.kernel_text
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log
        assert r.resources.spill_stores == 0 and r.resources.local_bytes == 0
