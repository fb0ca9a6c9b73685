"""CPU tests of the "elementwise" family: every instance compiles with NVRTC for sm_90a, without spills.

No GPU is needed (NVRTC runs without a driver). Correctness on the GPU is the verifier's business
(tests/gpu/test_gpu_family_elementwise.py); here: the pattern match, the user's signature, distinct
keys, launches that fit the compiled kernel at every size the verifier and the benchmark use, and
the skeleton's ingredients (vector loads, the scalar paths, the epilogue library).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.source import check_signature, find_kernel
from ptxfactory.harness.static_checks import MAX_GRID_DIMS, static_check
from ptxfactory.protocol import Candidate, LaunchConfig, evaluate, load_spec, parse_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators import load
from ptxfactory.search.generators.elementwise import EPILOGUES, ElementwiseFamily, match_spec, plausible, tuning_space as elementwise_configs
from _generator_support import example_ctx, with_args

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "bias_gelu" / "bias_gelu.cu"


def make_ctx(spec=None, source: str | None = None) -> GenContext:
    return example_ctx(EXAMPLE, "bias_gelu", spec, source)


def with_fields(spec, **changes):
    data = spec.model_dump(mode="json")
    for key, value in changes.items():
        if isinstance(value, dict):
            data[key].update(value)
        else:
            data[key] = value
    return type(spec).model_validate(data)


@pytest.fixture(scope="module")
def ctx() -> GenContext:
    return make_ctx()


@pytest.fixture(scope="module")
def cands(ctx) -> list[Candidate]:
    return ElementwiseFamily().propose(ctx)


@pytest.fixture(scope="module")
def compiled(cands, ctx):
    return {c.key: compile_candidate(c, ctx.spec.arch, ctx.spec.check.fast_math) for c in cands}


def test_registry_loads_elementwise():
    assert load("elementwise").name == "elementwise"


def test_proposes_the_tuning_space(cands, ctx):
    assert 18 <= len(cands) <= 30
    assert len({c.key for c in cands}) == len(cands)
    assert ctx.original.key not in {c.key for c in cands}
    epilogues = [c.params["epilogue"] for c in cands]
    # a tanh-GELU kernel: its 18 configurations; no erf, exponential or max in the source, so no erf-GELU, SiLU or
    # ReLU candidate (each would compute another function), and no identity (a bias add: the kernel calls tanh)
    assert set(epilogues) == {"gelu_tanh"}
    assert epilogues.count("gelu_tanh") >= 16
    gelu = [c.params for c in cands if c.params["epilogue"] == "gelu_tanh"]
    assert {p["tanh"] for p in gelu} == {"precise", "approx"}
    assert {p["vec"] for p in gelu} == {8, 16} and {p["hint"] for p in gelu} == {"ldg", "stream"}
    assert {p["block"] for p in gelu} >= {256, 512} and {p["unroll"] for p in gelu} >= {2, 4}
    assert all("tanh" not in c.params for c in cands if c.params["epilogue"] != "gelu_tanh")
    for c in cands:
        assert c.generator == "elementwise" and c.parent == ctx.original.key and c.kernel_name == "bias_gelu"
        assert c.description.startswith("elementwise ")
        assert all(isinstance(v, (int, str)) for v in c.params.values())


def test_every_instance_compiles_without_spills_and_passes_static_checks(cands, compiled, ctx):
    for c in cands:
        r = compiled[c.key]
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        res = r.resources
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.local_bytes == 0, f"{c.description}: {res.summary()}"
        assert 0 < res.registers <= 64 and res.registers * c.launch.block[0] <= 65536, f"{c.description}: {res.summary()}"
        assert static_check(c, ctx.spec, res, r.cubin) is None, c.description


def test_keeps_the_users_signature(cands, ctx):
    for c in cands:
        k = find_kernel(c.source, "bias_gelu")
        check_signature(ctx.spec, k)
        assert [(p.name, p.type, p.is_pointer, p.is_const) for p in k.params] == [
            (p.name, p.type, p.is_pointer, p.is_const) for p in ctx.kernel.params
        ]
        assert k.text.startswith('extern "C"'), 'the original is extern "C": so must the replacement be'
        assert c.source.count("__global__") == ctx.source.count("__global__")
        head, tail = ctx.source[: ctx.kernel.start_byte], ctx.source[ctx.kernel.end_byte :]
        assert c.source == head + c.kernel_text + tail
        helpers = re.findall(r"static __device__ (?:__forceinline__ )?[^(;]*?(\w+)\(", c.kernel_text)
        assert len(helpers) >= 8 and all(n.startswith("ptxf_") for n in helpers), helpers


def _sizes(spec) -> list[dict[str, int]]:
    plan = make_plan(spec, secret=1234)
    extra = [{"M": 1, "N": 1}, {"M": 1, "N": 7}, {"M": 65536, "N": 1024}, {"M": 1031, "N": 20001}, {"M": 3, "N": 32801}]
    return spec.check.sizes + spec.bench.sizes + plan.heldout_sizes + make_plan(spec, secret=7).heldout_sizes + extra


def test_launch_matches_launch_bounds_and_covers_every_size(cands, ctx):
    for c in cands:
        assert len(c.launch.block) == 1 and len(c.launch.grid) == 1 and c.launch.shared_mem == 0
        block = c.launch.block[0]
        bounds = re.search(r"__launch_bounds__\((\d+)(?:,\s*(\d+))?\)\s*bias_gelu\(", c.kernel_text)
        assert bounds and int(bounds.group(1)) == block == c.params["block"] and block % 32 == 0
        assert f"// Launch: grid ({c.launch.grid[0]},), block ({block},)" in c.kernel_text
        rows = block // 32 * c.params["unroll"]  # rows per block
        chunk = 32 * c.params["vec"] // 2        # columns per block (bf16)
        assert f"* {rows} + threadIdx.x / 32" in c.kernel_text and f"32 * {c.params['vec'] // 2}" in c.kernel_text
        for size in _sizes(ctx.spec):
            grid = evaluate(c.launch.grid[0], size)
            assert grid == -(-size["M"] // rows) * -(-size["N"] // chunk), (c.description, size)
            assert 1 <= grid <= MAX_GRID_DIMS[0]


def test_skeleton_ingredients(cands):
    first = cands[0].kernel_text
    for needle in ("ptxf_ew_fast", "ptxf_ew_rows", "ptxf_ew_scalar", "% 8 == 0", "blockIdx.x % ptxf_nch", "__ldg(b + j)"):
        assert needle in first, needle
    vec16 = next(c for c in cands if c.params["vec"] == 16)
    assert "uint4" in vec16.kernel_text and "reinterpret_cast<const uint4*>(b) + v" in vec16.kernel_text
    assert "uint2" in next(c for c in cands if c.params["vec"] == 8).kernel_text
    for c in cands:
        stream = c.params["hint"] == "stream"
        assert ("__ldcs(" in c.kernel_text) == stream and ("__stcs(" in c.kernel_text) == stream
        fast = c.kernel_text.split("void ptxf_ew_fast(")[1].split("// rows path")[0]
        assert "%" not in fast and "/ C" not in fast  # no division by C, no modulo, per element


def test_epilogue_library(cands, ctx):
    """Every epilogue's function body, from every configuration of the tuning space (evidence aside)."""
    m = match_spec(ctx.spec)
    family = ElementwiseFamily()
    body = {}
    for c in (family.instantiate(ctx, m, cfg) for cfg in elementwise_configs(ctx.spec)):
        act = c.kernel_text.split("ptxf_act(float v)\n{\n")[1].split("\n}")[0]
        body.setdefault((c.params["epilogue"], c.params.get("tanh")), act)
    assert "tanhf(u)" in body["gelu_tanh", "precise"] and "0.044715f" in body["gelu_tanh", "precise"]
    assert "ptxf_tanh_approx(u)" in body["gelu_tanh", "approx"]
    assert "erff(" in body["gelu_erf", None]
    assert "expf(-v)" in body["silu", None]
    assert "fmaxf(v, 0.0f)" in body["relu", None]
    assert body["identity", None].strip() == "return v;"
    approx = next(c for c in cands if c.params.get("tanh") == "approx").kernel_text
    assert 'asm("tanh.approx.f32 %0, %1;"' in approx
    assert all("tanh.approx" not in c.kernel_text for c in cands if c.params.get("tanh") != "approx")


def test_no_approx_tanh_before_sm75(ctx):
    spec = with_fields(ctx.spec, arch="sm_70")
    cands = ElementwiseFamily().propose(make_ctx(spec=spec))
    assert cands and all(c.params.get("tanh") != "approx" for c in cands)


@pytest.mark.parametrize(
    "change",
    [
        {"y": {"shape": ["M"]}},                                # 1-D output
        {"x": {"shape": ["N", "M"]}},                           # input transposed against the output
        {"y": {"dtype": "f32"}},                                # output dtype differs from the input's
        {"x": {"dtype": "i32"}, "y": {"dtype": "i32"}},         # not a float
        {"b": {"shape": ["M"]}},                                # bias along the wrong axis
        {"b": {"role": "out"}},                                 # two outputs
        {"N": {"value": "M"}},                                  # no scalar for the row length
        {"M": {"dtype": "f32"}},                                # a float "size"
    ],
)
def test_refuses_other_specs(ctx, change):
    spec = with_args(ctx.spec, **change)
    assert match_spec(spec) is None
    assert ElementwiseFamily().propose(make_ctx(spec=spec)) == []


def test_refuses_fixed_launch_and_other_examples(ctx):
    spec = with_fields(ctx.spec, launch={"policy": "fixed"})
    assert ElementwiseFamily().propose(make_ctx(spec=spec)) == []
    for name in ("transpose", "rmsnorm", "gemv", "rowsum"):
        path = ROOT / "examples" / name / f"{name}.cu"
        other = load_spec(str(path) + ".toml").kernels[name]
        assert match_spec(other) is None, name


def test_refuses_a_signature_that_differs(ctx):
    source = ctx.source.replace("__nv_bfloat16* y, int M, int N", "__nv_bfloat16* y, int N, int M")
    assert ElementwiseFamily().propose(make_ctx(source=source)) == []


NO_BIAS = """#include <cuda_fp16.h>
__global__ void act_rows(const __half* inp, __half* out, long long rows, long long cols)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) { float v = __half2float(inp[i]); out[i] = __float2half(v > 0.f ? v : 0.f); }
}
"""
NO_BIAS_SPEC = """
[kernel.act_rows]
args = [
  { name = "inp", role = "in", dtype = "f16", shape = ["R", "C"] },
  { name = "out", role = "out", dtype = "f16", shape = ["R", "C"] },
  { name = "rows", role = "scalar", dtype = "i64", value = "R" },
  { name = "cols", role = "scalar", dtype = "i64", value = "C" },
]
launch = { grid = ["cdiv(R * C, 256)"], block = [256], policy = "free" }
[kernel.act_rows.check]
sizes = [{ R = 3, C = 100 }]
[kernel.act_rows.bench]
sizes = [{ R = 4096, C = 2048 }]
"""


def test_f16_no_bias_cxx_linkage():
    """f16, no bias, i64 sizes, C++ linkage, other names: instantiated and compiled."""
    spec = parse_spec(NO_BIAS_SPEC).kernels["act_rows"]
    ctx = make_ctx(spec=spec, source=NO_BIAS)
    cands = ElementwiseFamily().propose(ctx)
    # a relu kernel (a conditional choice) never calls tanh, erf or exp: ReLU only (its 9 configurations)
    assert {c.params["epilogue"] for c in cands} == {"relu"} and len(cands) == 9
    for c in cands[:2] + cands[-3:]:
        k = find_kernel(c.source, "act_rows")
        check_signature(spec, k)
        assert not k.text.lstrip().startswith("extern")
        assert c.launch.grid[0].startswith("cdiv(R, ") and "cdiv(C, " in c.launch.grid[0]
        assert "if constexpr (false)" in c.kernel_text and "static_cast<const __half*>(nullptr)" in c.kernel_text
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log
        assert r.resources.spill_stores == 0 and r.resources.local_bytes == 0
        assert r.lowered_name != "act_rows"  # C++ linkage: mangled, as the original


def test_f32_and_mixed_bias_dtypes_compile(ctx):
    """f32 x/y (4 floats per 16-byte vector) with an f32 bias; bf16 x/y with an f32 bias (per-element bias loads)."""
    src32 = ctx.source.replace("__nv_bfloat16", "float").replace("__bfloat162float", "").replace("__float2bfloat16", "")
    spec32 = with_args(ctx.spec, x={"dtype": "f32"}, b={"dtype": "f32"}, y={"dtype": "f32"})
    mixed = ctx.source.replace("const __nv_bfloat16* b", "const float* b")
    spec_mixed = with_args(ctx.spec, b={"dtype": "f32"})
    for spec, src, needle in ((spec32, src32, "% 4 == 0"), (spec_mixed, mixed, "(b + v * 8 + e)")):
        cands = ElementwiseFamily().propose(make_ctx(spec=spec, source=src))
        assert cands and needle in cands[-1].kernel_text
        for c in (cands[0], cands[-1]):
            r = compile_candidate(c, "sm_90a")
            assert not isinstance(r, CompileFailed), r.log
            assert r.resources.spill_stores == 0 and r.resources.local_bytes == 0
    assert "reinterpret_cast<const uint4*>(b)" not in ElementwiseFamily().propose(make_ctx(spec=spec_mixed, source=mixed))[-1].kernel_text


def test_inside_extern_c_block(ctx):
    src = ctx.source.replace('extern "C" __global__', 'extern "C" {\n__global__') + "}\n"
    c = ElementwiseFamily().propose(make_ctx(source=src))[0]
    assert c.kernel_text.startswith('extern "C++" {')
    r = compile_candidate(c, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.lowered_name == "bias_gelu"


@pytest.mark.parametrize("epilogue,source,kernel,ok", [
    ("gelu_erf", "y = 0.5f * v * (1.0f + erff(v * 0.7071f));", "", True),
    ("gelu_erf", "y = v * tanhf(v);", "", False),
    ("silu", "y = v / (1.0f + __expf(-v));", "", True),
    ("silu", "y = v > 0 ? v : 0;", "", False),
    ("relu", "y = fmaxf(v, 0.f);", "", True),
    ("relu", "y = v * 2.0f;", "", False),
    ("identity", "", "{ if (i < n) y[i] = x[i] + b[i % C]; }", True),
    ("identity", "", "{ for (int i = t; i < n; i += blockDim.x * gridDim.x) y[i] = x[i]; }", True),
    ("identity", "", "{ float acc = 0; for (int j = 0; j < N; j++) { acc += x[r * N + j]; y[r * N + j] = acc; } }", False),
    # an activation's function in the kernel: no bias add (a helper's erf-GELU drew an identity candidate)
    ("identity", "", "{ if (i < n) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.7071f)); }", False),
    # a row softmax calls expf and fmaxf, but its loops over the row make it no SiLU or ReLU (a new user's trial)
    ("silu", "m = fmaxf(m, x[j]); s += expf(x[j] - m);", "{ for (int j = 0; j < cols; j++) m = fmaxf(m, x[j]); }", False),
    ("relu", "m = fmaxf(m, x[j]);", "{ int j = 0; while (j < cols) m = fmaxf(m, x[j++]); }", False),
    ("relu", "y = fmaxf(v, 0.f);", "{ for (int k = 0; k < 4; ++k) y[4 * i + k] = fmaxf(x[4 * i + k], 0.f); }", True),
    ("relu", "y = fmaxf(v, 0.f);", "{ for (int k = 0; k < 4u; ++k) y[4 * i + k] = fmaxf(x[4 * i + k], 0.f); }", True),
    # a row loop that maps each element keeps its epilogues (block per row, thread per row: a review's false refusals)
    ("gelu_tanh", "tanhf(u)", "{ for (int c = threadIdx.x; c < C; c += blockDim.x) y[r * C + c] = g(x[r * C + c] + b[c]); }", True),
    ("silu", "v / (1.0f + expf(-v))", "{ for (int c = 0; c < C; ++c) { float v = x[r * C + c]; y[r * C + c] = v / (1.0f + expf(-v)); } }", True),
    # a softmax over rows with a grid stride is still a reduction
    ("silu", "expf(x[j] - m)", "{ for (int r = t; r < R; r += gridDim.x * blockDim.x) { float s = 0.f; for (int j = 0; j < C; j++) s += expf(x[j]); } }", False),
])
def test_an_epilogue_needs_evidence_from_the_source(epilogue, source, kernel, ok):
    """The trial's row cumsum got identity, ReLU, SiLU and erf-GELU candidates, each another function: an epilogue
    is proposed only where the source computes with what it needs (a loop of the kernel's own rules out a bias add)."""
    assert plausible(epilogue, source, kernel) is ok


FLIP = """
__global__ void flip_last(const float* x, float* y, int rows, int cols)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < rows * cols) {
        int r = idx / cols;
        int c = idx % cols;
        y[idx] = x[r * cols + (cols - 1 - c)];
    }
}
"""
FLIP_SPEC = """
[kernel.flip_last]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["R", "C"] },
  { name = "y", role = "out", dtype = "f32", shape = ["R", "C"] },
  { name = "rows", role = "scalar", dtype = "i32", value = "R" },
  { name = "cols", role = "scalar", dtype = "i32", value = "C" },
]
launch = { grid = ["cdiv(R * C, 256)"], block = [256], policy = "free" }
[kernel.flip_last.check]
sizes = [{ R = 3, C = 5 }]
[kernel.flip_last.bench]
sizes = [{ R = 4096, C = 4096 }]
"""


@pytest.mark.parametrize("store, refused", [
    ("y[idx] = x[r * cols + (cols - 1 - c)];", True),           # a flip: another element (a helper's new user)
    ("y[idx] = x[idx + 1 < rows * cols ? idx + 1 : idx];", True),  # a shift
    ("y[idx] = x[idx];", False),                               # a copy: the identity epilogue's to verify
    ("y[idx] = __ldg(x + r * cols + (cols - 1 - c));", False),   # read through an intrinsic: not read here
])
def test_a_kernel_that_reads_another_element_than_it_writes_is_no_elementwise_map(store, refused):
    """The family's skeleton maps x[i] onto y[i]: a kernel reading x elsewhere (a flip) gets no candidate (each
    would fail verification) and the report says why; one the check cannot read is left to the verifier."""
    spec = parse_spec(FLIP_SPEC).kernels["flip_last"]
    source = FLIP.replace("y[idx] = x[r * cols + (cols - 1 - c)];", store)
    fam = ElementwiseFamily()
    launch = LaunchConfig(grid=spec.launch.grid, block=spec.launch.block)
    ctx = GenContext(spec=spec, source=source, kernel=find_kernel(source, "flip_last"),
                     original=Candidate(kernel_name="flip_last", source=source, kernel_text=find_kernel(source, "flip_last").text,
                                        launch=launch))
    why = fam.why_not(ctx)
    if refused:
        assert why is not None and "another element than the one it writes" in why and not fam.propose(ctx)
    else:
        assert why is None and fam.propose(ctx)
