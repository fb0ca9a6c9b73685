"""CPU tests of the "rowwise" family and the "tune" generator: everything compiles with NVRTC for sm_90a.

No GPU is needed: NVRTC runs without a driver. Correctness on the GPU is the verifier's business
(tests/gpu); here: the right kernel name and signature, distinct keys, launches that fit the
compiled kernel, no spills, and the pattern match refusing specs it cannot handle.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, check_options, compile_candidate
from ptxfactory.harness.source import check_signature, find_kernel
from ptxfactory.protocol import Candidate, LaunchConfig, evaluate, load_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators import load
from ptxfactory.search.generators.rowwise import RowwiseConfig, RowwiseNormFamily, match_spec
from ptxfactory.search.generators.tune import TuneGenerator
from _generator_support import example_ctx, with_args, with_launch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rmsnorm" / "rmsnorm.cu"


def make_ctx(spec=None, source: str | None = None, options=()) -> GenContext:
    return example_ctx(EXAMPLE, "rmsnorm", spec, source, options)


@pytest.fixture(scope="module")
def ctx() -> GenContext:
    return make_ctx()


@pytest.fixture(scope="module")
def rowwise(ctx) -> list[Candidate]:
    return RowwiseNormFamily().propose(ctx)


@pytest.fixture(scope="module")
def compiled(rowwise):
    return {c.key: compile_candidate(c, "sm_90a") for c in rowwise}


# ---------------------------------------------------------------- rowwise


def test_registry_loads_both():
    assert load("rowwise").name == "rowwise"
    assert load("tune").name == "tune"


def test_rowwise_proposes_rms_and_layer(rowwise, ctx):
    norms = [c.params["norm"] for c in rowwise if not c.params.get("stage")]  # (and the staged twins)
    assert 20 <= norms.count("rms") <= 30
    assert 1 <= norms.count("layer") <= 2
    assert len({c.key for c in rowwise}) == len(rowwise)
    assert ctx.original.key not in {c.key for c in rowwise}
    for c in rowwise:
        assert c.generator == "rowwise" and c.parent == ctx.original.key and c.kernel_name == "rmsnorm"
        assert c.description.startswith("rowwise ")


def test_rowwise_every_instance_compiles_without_spills(rowwise, compiled):
    for c in rowwise:
        r = compiled[c.key]
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        res = r.resources
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.local_bytes == 0, f"{c.description}: {res.summary()}"
        assert 0 < res.registers * c.launch.block[0] <= 65536, f"{c.description}: {res.summary()} does not fit one SM"
        assert res.shared_bytes <= 48 * 1024


def test_rowwise_keeps_the_users_signature(rowwise, ctx):
    for c in rowwise:
        k = find_kernel(c.source, "rmsnorm")
        check_signature(ctx.spec, k)
        assert [(p.name, p.type, p.is_pointer, p.is_const) for p in k.params] == [
            (p.name, p.type, p.is_pointer, p.is_const) for p in ctx.kernel.params
        ]
        assert k.text.startswith('extern "C"'), "the original is extern \"C\": so must the replacement be"
        assert c.source.count("__global__") == ctx.source.count("__global__")
        # kernel_text is exactly what replaced the original kernel in the user's file
        head, tail = ctx.source[: ctx.kernel.start_byte], ctx.source[ctx.kernel.end_byte :]
        assert c.source == head + c.kernel_text + tail


def _config(c: Candidate) -> RowwiseConfig:
    p = c.params
    return RowwiseConfig(p["block"], p["rows_per_block"], p["vecs"], p["hint"], p["grid"], p["norm"], p.get("cluster", 1))


def _tier(cfg: RowwiseConfig, n: int, vec: int = 8) -> tuple[int, int, int]:
    tiers = cfg.tiers(vec)
    return next((t for t in tiers if n <= t[2]), tiers[-1])


def test_rowwise_launch_matches_launch_bounds(rowwise, ctx):
    for c in rowwise:
        assert len(c.launch.block) == 1 and len(c.launch.grid) == 1
        block = c.launch.block[0]
        bounds = re.search(r"__launch_bounds__\((\d+)(?:,\s*(\d+))?\)\s*rmsnorm\(", c.kernel_text)
        assert bounds, c.kernel_text[-600:]
        assert int(bounds.group(1)) == block <= 1024 and block % 32 == 0
        cfg = _config(c)
        sizes = ctx.spec.bench.sizes + ctx.spec.check.sizes + [{"M": 1, "N": 1}, {"M": 33, "N": 7}, {"M": 1000, "N": 99999}]
        sizes += [{"M": 37, "N": n} for n in range(1, 40000, 97)] + [{"M": 5, "N": t[2] + d} for t in cfg.tiers(8) for d in (-1, 0, 1)]
        cl = cfg.cluster  # a cluster kernel: whole clusters, the extra blocks idle; past one block's cache a cluster per row
        for size in sizes:
            grid = evaluate(c.launch.grid[0], size)
            assert grid % cl == 0, f"{c.description} grid {grid} for {size}"
            if cl > 1 and size["N"] > cfg.tiers(8)[-1][2]:
                assert grid == cl * size["M"], f"{c.description} grid {grid} for {size}"
                continue
            rpb = _tier(cfg, size["N"])[1]
            assert grid * rpb >= size["M"] > (grid - cl) * rpb, f"{c.description} grid {grid} for {size}"


def test_rowwise_dispatch_matches_tiers(rowwise):
    """The kernel's `if (N <= cap)` chain calls the tiers' (threads per row, rows per block) in order."""
    for c in rowwise:
        cfg = _config(c)
        tiers = cfg.tiers(8)
        assert tiers[-1][0] == cfg.block and all((t % 32 == 0 or 32 % t == 0) and cfg.block % t == 0 for t, _, _ in tiers)
        for tpr, rpb, _ in tiers:  # rows per step divide rows per block, or one step holds them all: barrier counts are uniform
            groups = cfg.block // tpr
            assert rpb <= groups or rpb % groups == 0
        kernel = c.kernel_text.split("__global__")[1]
        calls = re.findall(r"ptxf_rowwise<(\d+), (\d+), (\d+), (true|false)>", kernel)
        assert [(int(t), int(r)) for t, r, *_ in calls] == [(t, r) for t, r, _ in tiers]
        assert all(int(v) == cfg.vecs for _, _, v, _ in calls)
        caps = [cap for _, _, cap in tiers] if cfg.cluster > 1 else [cap for _, _, cap in tiers[:-1]]  # then the cluster's tier
        assert [int(x) for x in re.findall(r"if \(N <= (\d+)\)", kernel)] == caps
        if cfg.grid == "adaptive":
            assert [r for _, r, _ in tiers] == sorted((r for _, r, _ in tiers), reverse=True)
            assert tiers[-1][1] == max(1, cfg.rows_per_block * tiers[0][0] // cfg.block)


def test_rowwise_covers_largest_bench_row_in_registers(rowwise, ctx):
    """The best-first candidates keep the longest bench row (16384 bf16 = 2048 vectors) in registers."""
    c_max = max(s["N"] for s in ctx.spec.bench.sizes)
    first = rowwise[0]
    assert first.params["block"] * first.params["vecs"] * 8 >= c_max
    assert sum(c.params["block"] * c.params["vecs"] * 8 >= c_max for c in rowwise) >= len(rowwise) // 2


def test_rowwise_layer_norm_subtracts_mean(rowwise):
    layer = [c for c in rowwise if c.params["norm"] == "layer"]
    rms = [c for c in rowwise if c.params["norm"] == "rms"]
    assert all(", true>(" in c.kernel_text for c in layer)
    assert all(", true>(" not in c.kernel_text for c in rms)


def test_rowwise_uses_vector_loads_shuffles_and_a_scalar_path(rowwise):
    text = rowwise[0].kernel_text
    for needle in ("uint4", "__shfl_xor_sync", "rsqrtf", "__ldg", "% 8 == 0", "ptxf_aligned(x, 16)", "ptxf_aligned(w, 16)"):
        assert needle in text, needle
    assert re.search(r"for \(int j = v0; active && j < C; j \+= STRIDE\)", text)


@pytest.mark.parametrize(
    "change",
    [
        {"y": {"shape": ["M"]}},  # 1-D output
        {"x": {"shape": ["N"]}},  # 1-D input
        {"x": {"dtype": "i32"}, "y": {"dtype": "i32"}},  # not a float (an output dtype other than x's is a variant it
        # takes: tests/unit/test_rowwise_variants.py)
        {"w": {"shape": ["M"]}},  # weight along the wrong axis
        {"eps": {"value": "N"}},  # no constant eps
        {"M": {"value": "N"}},  # no scalar for the row count
    ],
)
def test_rowwise_refuses_other_specs(ctx, change):
    spec = with_args(ctx.spec, **change)
    assert match_spec(spec) is None
    assert RowwiseNormFamily().propose(make_ctx(spec=spec)) == []


def test_rowwise_refuses_fixed_launch(ctx):
    spec = with_launch(ctx.spec, policy="fixed")
    assert RowwiseNormFamily().propose(make_ctx(spec=spec)) == []


SCALAR_NO_W = """#include <cuda_fp16.h>
__global__ void norm_rows(const __half* inp, __half* out, long long rows, long long cols, float epsilon)
{
    long long r = blockIdx.x;
    if (r >= rows) return;
    float s = 0.f;
    for (long long i = 0; i < cols; ++i) { float v = __half2float(inp[r * cols + i]); s += v * v; }
    float k = rsqrtf(s / cols + epsilon);
    for (long long i = 0; i < cols; ++i) out[r * cols + i] = __float2half(__half2float(inp[r * cols + i]) * k);
}
"""
SCALAR_NO_W_SPEC = """
[kernel.norm_rows]
args = [
  { name = "inp", role = "in", dtype = "f16", shape = ["R", "C"] },
  { name = "out", role = "out", dtype = "f16", shape = ["R", "C"] },
  { name = "rows", role = "scalar", dtype = "i64", value = "R" },
  { name = "cols", role = "scalar", dtype = "i64", value = "C" },
  { name = "epsilon", role = "scalar", dtype = "f32", value = 1e-5 },
]
launch = { grid = ["R"], block = [1], policy = "free" }
[kernel.norm_rows.check]
sizes = [{ R = 3, C = 100 }]
[kernel.norm_rows.bench]
sizes = [{ R = 4096, C = 2048 }]
"""


def test_rowwise_other_dtype_no_weight_cxx_linkage(tmp_path):
    """f16, no weight, i64 sizes, C++ linkage, other names: still instantiated and compiled."""
    from ptxfactory.protocol import parse_spec

    spec = parse_spec(SCALAR_NO_W_SPEC).kernels["norm_rows"]
    ctx = make_ctx(spec=spec, source=SCALAR_NO_W)
    cands = RowwiseNormFamily().propose(ctx)
    assert cands
    for c in cands[:3] + cands[-1:]:
        k = find_kernel(c.source, "norm_rows")
        check_signature(spec, k)
        assert not k.text.lstrip().startswith("extern")
        assert c.launch.grid[0] == "R" or c.launch.grid[0].startswith("cdiv(R, ")
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log
        assert r.resources.spill_stores == 0
        assert "long long" in c.kernel_text and "__half" in c.kernel_text


def test_rowwise_f32_with_weight_compiles():
    src = EXAMPLE.read_text().replace("__nv_bfloat16", "float").replace("__bfloat162float", "").replace("__float2bfloat16", "")
    spec = load_spec(str(EXAMPLE) + ".toml").kernels["rmsnorm"]
    spec = with_args(spec, x={"dtype": "f32"}, w={"dtype": "f32"}, y={"dtype": "f32"})
    cands = RowwiseNormFamily().propose(make_ctx(spec=spec, source=src))
    assert cands
    assert "% 4 == 0" in cands[0].kernel_text  # 4 floats per 16-byte vector
    r = compile_candidate(cands[0], "sm_90a")
    assert not isinstance(r, CompileFailed), r.log


# ---------------------------------------------------------------- tune


def test_tune_variants_compile_and_differ(ctx):
    variants = TuneGenerator().propose(ctx)
    assert variants
    keys = {v.key for v in variants}
    assert len(keys) == len(variants) and ctx.original.key not in keys
    for v in variants:
        assert v.generator == "tune" and v.parent == ctx.original.key
        assert (v.options, v.launch) != (ctx.original.options, ctx.original.launch)
        assert check_options(v.options, ctx.spec.check.fast_math) is None
        assert v.source == ctx.original.source
        r = compile_candidate(v, "sm_90a", fast_math_allowed=ctx.spec.check.fast_math)
        assert not isinstance(r, CompileFailed), r.log


def test_tune_options_and_blocks(ctx):
    variants = TuneGenerator().propose(ctx)
    opts = {o for v in variants for o in v.options}
    assert {"--extra-device-vectorization", "-maxrregcount=64", "-maxrregcount=128"} <= opts
    assert "--use_fast_math" not in opts  # the example's spec does not allow fast-math
    blocks = sorted(v.launch.block[0] for v in variants if "block" in v.params)
    assert blocks == [128]  # 256 is the parent's; its __shared__ float partial[256] rules out 512 and 1024
    for v in variants:
        assert v.launch.grid == ctx.original.launch.grid and v.launch.shared_mem == ctx.original.launch.shared_mem


def test_tune_fast_math_only_when_allowed(ctx):
    data = ctx.spec.model_dump(mode="json")
    data["check"]["fast_math"] = True
    spec = type(ctx.spec).model_validate(data)
    variants = TuneGenerator().propose(make_ctx(spec=spec))
    fast = [v for v in variants if "--use_fast_math" in v.options]
    assert len(fast) == 1
    r = compile_candidate(fast[0], "sm_90a", fast_math_allowed=True)
    assert not isinstance(r, CompileFailed), r.log


def test_tune_fixed_launch_keeps_block_and_replaces_regcap(ctx):
    spec = with_launch(ctx.spec, policy="fixed")
    variants = TuneGenerator().propose(make_ctx(spec=spec, options=["-maxrregcount=64"]))
    assert all(v.launch == ctx.original.launch for v in variants)
    assert all(sum(o.startswith("-maxrregcount") for o in v.options) <= 1 for v in variants)
    assert not any(v.options == ["-maxrregcount=64"] for v in variants)  # the parent's own options: a duplicate
    assert ["-maxrregcount=128"] in [v.options for v in variants]


def test_tune_respects_launch_bounds(ctx):
    """A parent with __launch_bounds__(256) gets no block above 256."""
    text = ctx.kernel.text.replace("__global__ void rmsnorm", "__global__ void __launch_bounds__(256) rmsnorm")
    source = ctx.source.replace(ctx.kernel.text, text)
    variants = TuneGenerator().propose(make_ctx(source=source))
    assert sorted(v.launch.block[0] for v in variants if "block" in v.params) == [128]


def test_tune_keeps_a_familys_block(ctx, rowwise):
    """A rowwise parent chose its block as a knob: tune varies only its options."""
    parent = rowwise[0]
    c = GenContext(spec=ctx.spec, source=ctx.source, kernel=ctx.kernel, original=parent)
    variants = TuneGenerator().propose(c)
    assert variants and all(v.launch == parent.launch and v.kernel_text == parent.kernel_text for v in variants)
    assert all(v.options != parent.options for v in variants)


def test_rowwise_inside_extern_c_block():
    """A kernel inside `extern "C" { ... }`: the template helpers get C++ linkage, the kernel keeps C linkage."""
    src = EXAMPLE.read_text().replace('extern "C" __global__', 'extern "C" {\n__global__') + "}\n"
    ctx = make_ctx(source=src)
    c = RowwiseNormFamily().propose(ctx)[0]
    assert not c.kernel_text.startswith('extern "C" ') and 'extern "C++" {' in c.kernel_text
    r = compile_candidate(c, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.lowered_name == "rmsnorm"  # unmangled: C linkage


MACRO_KERNEL = """
#ifndef UNROLL
#define UNROLL 1
#endif
extern "C" __global__ void scale(const float* x, float* y, int n)
{
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * UNROLL;
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) {
        if (i + k < n) y[i + k] = 2.0f * x[i + k];
    }
}
"""
MACRO_SPEC = """[kernel.scale]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(N, 256)"], block = [256] }
check = { sizes = [{ N = 1000 }] }
bench = { sizes = [{ N = 1048576 }] }
tune = { defines = { UNROLL = [1, 2, 4] } }
"""


def test_tune_sets_the_specs_macro_knobs_one_at_a_time():
    """Each value of a spec-declared macro becomes a -D option (the parent's own value skipped); each compiles
    to other machine code; a child of a -DUNROLL=2 parent changes UNROLL again, never adds a second -D."""
    from ptxfactory.harness.elf import code_digest
    from ptxfactory.protocol import parse_spec

    spec = parse_spec(MACRO_SPEC).kernels["scale"]
    ctx = make_ctx(spec=spec, source=MACRO_KERNEL)
    cands = [c for c in TuneGenerator().propose(ctx) if "UNROLL" in c.params]
    assert [c.options for c in cands] == [["-DUNROLL=1"], ["-DUNROLL=2"], ["-DUNROLL=4"]]
    assert [c.params for c in cands] == [{"UNROLL": 1}, {"UNROLL": 2}, {"UNROLL": 4}]
    digests = {code_digest(compile_candidate(c, spec.arch).cubin) for c in cands[1:]}
    assert len(digests) == 2
    child = TuneGenerator().propose(GenContext(spec=spec, source=MACRO_KERNEL, kernel=ctx.kernel, original=cands[1]))
    unroll = [c.options for c in child if "UNROLL" in c.params]
    assert unroll == [["-DUNROLL=1"], ["-DUNROLL=4"]]


def test_the_apply_edit_states_a_changed_launch_and_compile_options():
    """A code action's edit cannot carry -D or -maxrregcount: the comment above the kernel says so."""
    from ptxfactory.daemon.lsp.code_actions import replacement
    from ptxfactory.protocol import CandidateRow, Measured

    def row(cand):
        return CandidateRow(candidate=cand, result=Measured(candidate_key=cand.key, timings=[], speedup=1.5, verified_sizes=[]))

    ctx = make_ctx()
    base = row(ctx.original)
    same = row(ctx.original.model_copy(update={"description": "same"}))
    assert replacement(same, base) == ctx.original.kernel_text
    opts = row(ctx.original.model_copy(update={"options": ["-DUNROLL=4"], "description": "tune -DUNROLL=4"}))
    text = replacement(opts, base)
    assert text.startswith("// ptxfactory: tune -DUNROLL=4. Compile with -DUNROLL=4.\n") and "Launch it" not in text
    both = row(ctx.original.model_copy(update={"options": ["-maxrregcount=64"], "launch": LaunchConfig(grid=["M"], block=[128])}))
    assert "Launch it with grid=(M) block=(128)" in replacement(both, base) and "Compile with -maxrregcount=64." in replacement(both, base)


TEMPLATE_KERNEL = (Path(__file__).resolve().parents[1] / "kernels" / "scale_template.cu").read_text()
TEMPLATE_SPEC = MACRO_SPEC.replace("tune = { defines = { UNROLL = [1, 2, 4] } }", "tune = { template = { UNROLL = [1, 2, 4], SCALE = [2] } }")


def test_every_non_template_candidate_keeps_its_key():
    """Keys name experiments in lesson stores and recorded runs: the template field must not change them.
    These are the original kernels' keys in the GPU run recorded on 2026-11-30."""
    import json

    from ptxfactory.search.strategy import original_candidate

    recorded = json.loads((Path(__file__).resolve().parents[2] / "bench/results/self-improvement-2026-11-30.json").read_text())
    for name, runs in recorded["examples"].items():
        c = example_ctx(name)
        assert original_candidate(c.spec, c.source).key == runs["cold"]["baseline_key"], name


def test_tune_sets_the_kernels_template_parameters_one_at_a_time():
    """The original is scale<1, 2> (the first values); each other value is one instantiation, compiled under
    its own lowered name, with other machine code; the key tells the instantiations apart."""
    from ptxfactory.harness.elf import code_digest
    from ptxfactory.protocol import parse_spec
    from ptxfactory.search.strategy import original_candidate

    spec = parse_spec(TEMPLATE_SPEC).kernels["scale"]
    original = original_candidate(spec, TEMPLATE_KERNEL)
    assert original.template_args == [1, 2] and original.name_expression == "scale<1, 2>"
    assert original.description == "original kernel (scale<1, 2>)"
    ctx = GenContext(spec=spec, source=TEMPLATE_KERNEL, kernel=find_kernel(TEMPLATE_KERNEL, "scale"), original=original)
    cands = [c for c in TuneGenerator().propose(ctx) if "UNROLL" in c.params]
    assert [c.template_args for c in cands] == [[2, 2], [4, 2]]
    assert [c.params for c in cands] == [{"UNROLL": 2, "SCALE": 2}, {"UNROLL": 4, "SCALE": 2}]  # the whole instantiation
    assert cands[0].description == "tune UNROLL=2 (template: scale<2, 2>)" and cands[0].options == []
    assert len({original.key, *(c.key for c in cands)}) == 3
    compiled = [compile_candidate(c, spec.arch) for c in (original, *cands)]
    assert all(not isinstance(c, CompileFailed) for c in compiled), [getattr(c, "log", "") for c in compiled]
    assert len({c.lowered_name for c in compiled}) == 3 and all(c.lowered_name.startswith("_Z5scaleILi") for c in compiled)
    assert len({code_digest(c.cubin) for c in compiled}) == 3
    assert all(c.resources is not None and c.resources.registers > 0 for c in compiled)


def test_a_template_kernel_and_its_spec_must_agree():
    from ptxfactory.harness.source import SignatureMismatch
    from ptxfactory.protocol import parse_spec

    kdef = find_kernel(TEMPLATE_KERNEL, "scale")
    assert kdef.template_params == ("UNROLL", "SCALE")
    names = find_kernel("template <Layout L, typename T, int... Ns> __global__ void k(float* x) {}", "k").template_params
    assert names == ("L", "T", "Ns")  # a value parameter of a user type, a type parameter, a pack
    no_knobs = parse_spec(MACRO_SPEC.replace("tune = { defines = { UNROLL = [1, 2, 4] } }", "")).kernels["scale"]
    with pytest.raises(SignatureMismatch, match=r"is a template of <UNROLL, SCALE>: tune.template must give values for each"):
        check_signature(no_knobs, kdef)
    swapped = parse_spec(TEMPLATE_SPEC.replace("UNROLL = [1, 2, 4], SCALE = [2]", "SCALE = [2], UNROLL = [1]")).kernels["scale"]
    with pytest.raises(SignatureMismatch, match="in that order"):
        check_signature(swapped, kdef)
    plain = find_kernel(MACRO_KERNEL, "scale")
    with pytest.raises(SignatureMismatch, match="is not a template"):
        check_signature(parse_spec(TEMPLATE_SPEC).kernels["scale"], plain)


async def test_a_template_kernel_runs_through_the_job_compile_only(tmp_path):
    """Without a GPU every instantiation compiles and reports its resources, and so do the transform passes on
    the template (same instantiation); the Apply edit says which instantiation to launch."""
    from ptxfactory.daemon.lsp.code_actions import replacement
    from ptxfactory.search.strategy import optimise

    src = tmp_path / "scale.cu"
    src.write_text(TEMPLATE_KERNEL)
    (tmp_path / "scale.cu.toml").write_text(TEMPLATE_SPEC)
    summary = await optimise(src, "scale", backend=None, generators=("tune", "transform"))
    passes = [r for r in summary.rows if r.candidate.generator == "transform"]
    assert passes and all(r.candidate.template_args == [1, 2] and r.result.outcome == "not_run" for r in passes)
    assert any("__restrict__" in r.candidate.kernel_text for r in passes)
    by_args = {tuple(r.candidate.template_args): r for r in summary.rows if r.candidate.generator != "transform"}
    assert {(1, 2), (2, 2), (4, 2)} <= set(by_args)
    assert all(r.result.outcome == "not_run" and r.result.resources is not None for r in by_args.values())
    edit = replacement(by_args[(4, 2)], summary.row(summary.baseline_key))
    assert "Instantiate it as scale<4, 2> (the original used scale<1, 2>)." in edit


def test_a_tune_child_records_every_knob_of_its_parent():
    """Macro and template knobs together: a child changes one and keeps the others in its params, so two
    children compiled differently never record the same setting (the lesson store and the search tell them apart)."""
    from ptxfactory.protocol import parse_spec
    from ptxfactory.search.strategy import original_candidate

    spec = parse_spec(TEMPLATE_SPEC.replace("tune = { template", "tune = { defines = { PAD = [0, 1] }, template")).kernels["scale"]
    original = original_candidate(spec, TEMPLATE_KERNEL)
    ctx = GenContext(spec=spec, source=TEMPLATE_KERNEL, kernel=find_kernel(TEMPLATE_KERNEL, "scale"), original=original)
    unroll4 = next(c for c in TuneGenerator().propose(ctx) if c.params.get("UNROLL") == 4)
    child = GenContext(spec=spec, source=TEMPLATE_KERNEL, kernel=ctx.kernel, original=unroll4)
    pad = next(c for c in TuneGenerator().propose(child) if c.params.get("PAD") == 1)
    assert pad.params == {"PAD": 1, "UNROLL": 4, "SCALE": 2} and pad.template_args == [4, 2] and pad.options == ["-DPAD=1"]
    back = GenContext(spec=spec, source=TEMPLATE_KERNEL, kernel=ctx.kernel, original=pad)
    assert next(c for c in TuneGenerator().propose(back) if c.template_args == [2, 2]).params == {"PAD": 1, "UNROLL": 2, "SCALE": 2}


def test_the_report_says_which_instantiation_to_launch():
    from ptxfactory.daemon.report import launch_needed
    from ptxfactory.protocol import CandidateRow, JobSummary, Measured, parse_spec
    from ptxfactory.search.strategy import original_candidate

    spec = parse_spec(TEMPLATE_SPEC).kernels["scale"]
    base = original_candidate(spec, TEMPLATE_KERNEL)
    best = base.model_copy(update={"template_args": [4, 2], "generator": "tune"})
    rows = [CandidateRow(candidate=c, result=Measured(candidate_key=c.key, timings=[], speedup=s, verified_sizes=[]))
            for c, s in ((base, 1.0), (best, 1.5))]
    summary = JobSummary(job_id="j", source_path="scale.cu", kernel="scale", state="finished", rows=rows,
                         baseline_key=base.key, best_key=best.key, message="")
    lines = launch_needed(summary)
    assert "drop-in" not in " ".join(lines)
    assert "- Launch the instantiation `scale<4, 2>` instead of `scale<1, 2>`: change the template arguments at the launch site." in lines


@pytest.mark.parametrize("family, example", [("rowwise", "rmsnorm"), ("softmax", "softmax"), ("rowreduce", "rowsum"),
                                             ("elementwise", "bias_gelu"), ("transpose", "transpose")])
def test_each_family_says_why_its_skeleton_does_not_fit(family, example):
    """``why_not``: None on the example it was written for (it proposes there), a reason on every other example it
    proposes nothing for, never on one it proposes for; the fixed-launch spec is refused with the policy named."""
    from ptxfactory.search.generators import load

    gen = load(family)
    ctx = example_ctx(example)
    assert gen.propose(ctx) and gen.why_not(ctx) is None
    for other in ("rmsnorm", "softmax", "rowsum", "bias_gelu", "transpose", "colsum", "swiglu", "histogram"):
        octx = example_ctx(other)
        proposes, why = bool(gen.propose(octx)), gen.why_not(octx)
        assert proposes == (why is None), (family, other, why)
        assert why is None or (isinstance(why, str) and len(why) > 10)
    fixed = ctx.spec.model_copy(update={"launch": ctx.spec.launch.model_copy(update={"policy": "fixed"})})
    assert "launch policy" in gen.why_not(example_ctx(example, spec=fixed))


@pytest.mark.parametrize("family, example", [("softmax", "softmax"), ("elementwise", "bias_gelu"), ("transpose", "transpose")])
def test_a_family_run_again_on_its_applied_candidate_still_compiles(family, example):
    """The first candidate applied to the file, the family run again on it (the engineer accepts a rewrite and asks
    for more): the old helpers stay at file scope, the new ones take their own names (base.own_names)."""
    from _generator_support import example_ctx

    ctx = example_ctx(example)
    first = load(family).propose(ctx)[0]
    again = load(family).propose(example_ctx(example, source=first.source))
    assert again
    r = compile_candidate(again[0], ctx.spec.arch)
    assert not isinstance(r, CompileFailed), r.log[-2000:]
