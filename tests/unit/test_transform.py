"""CPU tests of the "transform" generator: each pass on small hand-written kernels, then all seven examples.

Per pass: the precondition holds (or not) where it should, the text change is the expected one, the
result still parses as the same kernel and compiles with NVRTC for sm_90a. On the examples: which
passes apply, and every proposed candidate compiles without spills, passes the static checks, keeps
the user's signature and linkage, has a distinct key, records its passes, and launches within limits.
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
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, unit_from_context
from ptxfactory.search.generators.transform.fast_math import FastMathPass
from ptxfactory.search.generators.transform.grid_stride import GridStridePass
from ptxfactory.search.generators.transform.launch_bounds import LaunchBoundsPass
from ptxfactory.search.generators.transform.ldg import LdgNoAllocatePass, LdgPass, StreamPass
from ptxfactory.search.generators.transform.restrict import RestrictPass
from ptxfactory.search.generators.transform.shuffle_reduce import ShuffleReducePass
from ptxfactory.search.generators.transform.unroll import UnrollPass

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ("rmsnorm", "softmax", "layernorm", "rowsum", "transpose", "bias_gelu", "gemv")
PASS_NAMES = {p.name for p in PASSES}


def make_ctx(source: str, spec, original: Candidate | None = None) -> GenContext:
    kernel = find_kernel(source, spec.name)
    original = original or Candidate(
        kernel_name=spec.name, source=source, kernel_text=kernel.text,
        launch=LaunchConfig(grid=spec.launch.grid, block=spec.launch.block, shared_mem=spec.launch.shared_mem),
    )
    return GenContext(spec=spec, source=original.source, kernel=find_kernel(original.source, spec.name), original=original)


def example_ctx(name: str) -> GenContext:
    path = ROOT / "examples" / name / f"{name}.cu"
    return make_ctx(path.read_text(), load_spec(str(path) + ".toml").kernels[name])


def spec_for(name: str, args: str, grid='["cdiv(N, 128)"]', block="[128]", rtol=1e-2, atol=1e-2, fast_math=False,
             policy="free", sizes="[{ N = 1000 }]"):
    """A spec for a hand-written kernel; the bench size sets every symbol of the first check size to 4096."""
    symbols = re.findall(r"(\w+) =", sizes.split("}")[0])
    bench = ", ".join(f"{k} = 4096" for k in symbols)
    text = f"""
[kernel.{name}]
args = [{args}]
launch = {{ grid = {grid}, block = {block}, policy = "{policy}" }}
[kernel.{name}.check]
rtol = {rtol}
atol = {atol}
fast_math = {str(fast_math).lower()}
sizes = {sizes}
[kernel.{name}.bench]
sizes = [{{ {bench} }}]
"""
    return parse_spec(text).kernels[name]


ELEMENTWISE_ARGS = """
  { name = "a", role = "in", dtype = "f32", shape = ["N"] },
  { name = "c", role = "in", dtype = "f32", shape = ["N"] },
  { name = "b", role = "out", dtype = "f32", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
"""
ELEMENTWISE = """
extern "C" __global__ void axpy(const float* a, float* c, float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = a[i] * 2.0f + c[i];
    b[i] = v / 3.0f;
}
"""


def unit(source: str, spec):
    return unit_from_context(make_ctx(source, spec))


def compiles(text_or_source: str, spec, name: str) -> None:
    """The source parses as the same kernel (signature checked) and compiles with NVRTC without spills."""
    check_signature(spec, find_kernel(text_or_source, name))
    cand = Candidate(kernel_name=name, source=text_or_source, kernel_text=text_or_source, launch=LaunchConfig(grid=[1], block=[128]))
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.resources.spill_stores == 0 and r.resources.local_bytes == 0


def elementwise_spec(**kw):
    return spec_for("axpy", ELEMENTWISE_ARGS, **kw)


# ---------------------------------------------------------------- restrict


def test_restrict_adds_restrict_and_const_on_read_only_pointers():
    spec = elementwise_spec()
    u = unit(ELEMENTWISE, spec)
    assert RestrictPass().applies(u)
    out = RestrictPass().apply(u).text
    assert "(const float* __restrict__ a, const float* __restrict__ c, float* __restrict__ b, int n)" in out
    compiles(out, spec, "axpy")
    assert not RestrictPass().applies(RestrictPass().apply(u))  # idempotent: nothing left to do


def test_restrict_no_const_for_cxx_linkage_or_written_pointers():
    spec = elementwise_spec()
    src = ELEMENTWISE.replace('extern "C" ', "").replace("b[i] = v / 3.0f;", "b[i] = v / 3.0f; c[i] = 0.0f;")
    out = RestrictPass().apply(unit(src, spec)).text
    assert "float* __restrict__ c" in out and "const float* __restrict__ c" not in out
    compiles(out, spec, "axpy")
    done = ELEMENTWISE.replace("const float* a, float* c, float* b", "const float* __restrict__ a, const float* __restrict__ c, float* __restrict__ b")
    assert not RestrictPass().applies(unit(done, spec))


# ---------------------------------------------------------------- launch_bounds


def test_launch_bounds_for_a_literal_block():
    spec = elementwise_spec(block="[128]")
    u = unit(ELEMENTWISE, spec)
    assert LaunchBoundsPass().applies(u)
    out = LaunchBoundsPass().apply(u).text
    assert 'extern "C" __global__ void __launch_bounds__(128) axpy(' in out
    compiles(out, spec, "axpy")


def test_launch_bounds_not_for_symbolic_block_or_existing_bounds():
    spec = spec_for("axpy", ELEMENTWISE_ARGS + '{ name = "bs", role = "scalar", dtype = "i32", value = "B" },',
                    block='["B"]', sizes="[{ N = 1000, B = 128 }]")
    src = ELEMENTWISE.replace("int n)", "int n, int bs)")
    assert not LaunchBoundsPass().applies(unit(src, spec))
    bounded = ELEMENTWISE.replace("void axpy", "void __launch_bounds__(256) axpy")
    assert not LaunchBoundsPass().applies(unit(bounded, elementwise_spec()))


# ---------------------------------------------------------------- unroll

LOOPS = """
extern "C" __global__ void loops(const float* x, float* y, int n)
{
    float acc = 0.0f;
    for (int k = 0; k < 8; ++k) acc += x[k];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        acc += x[i];
    }
    for (int j = 0; j < n; ++j) acc -= x[j];
    y[threadIdx.x] = acc;
}
"""
LOOPS_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
"""


def test_unroll_fixed_trip_count_and_strided_loop():
    spec = spec_for("loops", LOOPS_ARGS)
    u = unit(LOOPS, spec)
    assert UnrollPass().applies(u)
    out = UnrollPass().apply(u).text
    assert "    #pragma unroll\n    for (int k = 0; k < 8; ++k)" in out
    assert "    #pragma unroll 4\n    for (int i = threadIdx.x; i < n; i += blockDim.x)" in out
    assert out.count("#pragma unroll") == 2  # the loop over n with unit step is left alone
    compiles(out, spec, "loops")
    assert not UnrollPass().applies(UnrollPass().apply(u))


def test_unroll_skips_loops_with_barriers_or_pragmas():
    spec = spec_for("loops", LOOPS_ARGS)
    src = LOOPS.replace("for (int k = 0; k < 8; ++k)", "#pragma unroll 2\n    for (int k = 0; k < 8; ++k)")
    src = src.replace("acc += x[i];", "acc += x[i]; __syncthreads();")
    assert not UnrollPass().applies(unit(src, spec))


# ---------------------------------------------------------------- grid_stride


def test_grid_stride_rewrites_the_guarded_index_and_caps_the_grid():
    spec = elementwise_spec()
    u = unit(ELEMENTWISE, spec)
    assert GridStridePass().applies(u)
    v = GridStridePass().apply(u)
    assert "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int)gridDim.x * (int)blockDim.x) {" in v.text
    assert "if (i >= n) return;" not in v.text and "b[i] = v / 3.0f;" in v.text
    assert v.launch.grid == ["min(cdiv(N, 128), 2112)"]  # 132 SMs x 16 blocks of 128 threads
    compiles(v.text, spec, "axpy")


def test_grid_stride_if_block_form_and_64_bit_index():
    spec = elementwise_spec()
    src = ELEMENTWISE.replace("int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n",
                              "size_t i = threadIdx.x + (size_t)blockIdx.x * blockDim.x;\n    if (i < (size_t)n) {\n")
    src = src.replace("b[i] = v / 3.0f;\n}", "b[i] = v / 3.0f;\n    }\n}")
    v = GridStridePass().apply(unit(src, spec))
    assert "for (size_t i = threadIdx.x + (size_t)blockIdx.x * blockDim.x; i < (size_t)n; i += (size_t)gridDim.x * (size_t)blockDim.x)" in v.text
    compiles(v.text, spec, "axpy")


@pytest.mark.parametrize("change", [
    ("b[i] = v / 3.0f;", "b[i] = v / 3.0f; __syncthreads();"),  # a barrier in the loop body
    ("b[i] = v / 3.0f;", "b[threadIdx.x] = v;"),  # per-thread indexing in the body
    ("float v = a[i]", "if (v0 > 1) return; float v = a[i]"),  # another return
    ("b[i] = v / 3.0f;", "b[i] = v / 3.0f; n = 0;"),  # the bound changes
])
def test_grid_stride_refuses_unsafe_bodies(change):
    src = ELEMENTWISE.replace(*change).replace("v0", "a[0]")
    assert not GridStridePass().applies(unit(src, elementwise_spec()))


def test_grid_stride_needs_a_free_1d_launch():
    assert not GridStridePass().applies(unit(ELEMENTWISE, elementwise_spec(policy="fixed")))
    assert not GridStridePass().applies(unit(ELEMENTWISE, elementwise_spec(grid='["cdiv(N, 128)", 2]')))


# ---------------------------------------------------------------- ldg / ldg_na / stream


def test_ldg_reads_of_read_only_inputs():
    spec = elementwise_spec()
    u = unit(ELEMENTWISE, spec)
    out = LdgPass().apply(u).text
    assert "float v = __ldg(a + i) * 2.0f + __ldg(c + i);" in out
    assert "b[i] = v / 3.0f;" in out  # outputs untouched
    compiles(out, spec, "axpy")


def test_ldg_skips_written_or_address_taken_inputs():
    spec = elementwise_spec()
    src = ELEMENTWISE.replace("b[i] = v / 3.0f;", "b[i] = v / 3.0f; atomicAdd(&c[0], 1.0f);")
    out = LdgPass().apply(unit(src, spec)).text
    assert "__ldg(a + i)" in out and "__ldg(c" not in out
    only_c = ELEMENTWISE.replace("a[i] * 2.0f", "2.0f").replace("b[i] = v / 3.0f;", "b[i] = v; c[i] = 1.0f;")
    assert not LdgPass().applies(unit(only_c, spec))


def test_ldg_no_allocate_emits_a_ptx_helper():
    spec = elementwise_spec()
    v = LdgNoAllocatePass().apply(unit(ELEMENTWISE, spec))
    assert "ptxf_ldna_f32(a + i) * 2.0f + ptxf_ldna_f32(c + i)" in v.text
    [(name, helper)] = v.helpers  # one helper per element type, however many pointers use it
    assert name == "ptxf_ldna_f32" and "ld.global.nc.L1::no_allocate.f32" in helper
    compiles('extern "C++" {\n' + helper + "\n}\n" + v.text, spec, "axpy")


def test_stream_loads_and_stores():
    spec = elementwise_spec()
    out = StreamPass().apply(unit(ELEMENTWISE, spec)).text
    assert "__ldcs(a + i)" in out and "__stcs(b + i, (float)(v / 3.0f));" in out
    compiles(out, spec, "axpy")
    read_back = ELEMENTWISE.replace("b[i] = v / 3.0f;", "b[i] = v / 3.0f; b[i] += 1.0f;")
    assert "__stcs" not in StreamPass().apply(unit(read_back, spec)).text  # b is read: not a streamed output


# ---------------------------------------------------------------- shuffle_reduce

REDUCE = """
extern "C" __global__ void rsum(const float* x, float* s, int n)
{
    __shared__ float sh[256];
    const int tid = threadIdx.x;
    float acc = 0.0f;
    for (int i = tid; i < n; i += blockDim.x) acc += x[(size_t)blockIdx.x * n + i];
    sh[tid] = acc;
    __syncthreads();
    for (int stride = blockDim.x >> 1; stride > 0; stride >>= 1) {
        if (tid < stride) sh[tid] = sh[tid + stride] + sh[tid];
        __syncthreads();
    }
    if (tid == 0) s[blockIdx.x] = sh[0];
}
"""
REDUCE_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "s", role = "out", dtype = "f32", shape = ["M"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
"""


def reduce_spec(**kw):
    return spec_for("rsum", REDUCE_ARGS, grid='["M"]', block=kw.pop("block", "[256]"), sizes="[{ M = 3, N = 1000 }]", **kw)


def test_shuffle_reduce_replaces_the_tree_loop():
    spec = reduce_spec()
    u = unit(REDUCE, spec)
    assert ShuffleReducePass().applies(u)
    out = ShuffleReducePass().apply(u).text
    assert "for (int stride" not in out and "__shfl_down_sync(0xffffffffu, ptxf_v, ptxf_o)" in out
    assert "if (threadIdx.x == 0u) sh[0] = ptxf_v;" in out and out.count("__syncthreads()") == 3  # 1 before + 2 in the replacement
    assert "if (tid == 0) s[blockIdx.x] = sh[0];" in out
    compiles(out, spec, "rsum")


def test_shuffle_reduce_max_is_kept_exact_specs_refuse_sums():
    src = REDUCE.replace("sh[tid] = sh[tid + stride] + sh[tid];", "sh[tid] = fmaxf(sh[tid], sh[tid + stride]);")
    exact = reduce_spec(rtol=0.0, atol=0.0)
    assert not ShuffleReducePass().applies(unit(REDUCE, exact))  # a float sum would be re-associated
    u = unit(src, exact)
    assert ShuffleReducePass().applies(u)
    out = ShuffleReducePass().apply(u).text
    assert "ptxf_v = fmaxf(ptxf_v, ptxf_u);" in out
    compiles(out, exact, "rsum")


@pytest.mark.parametrize("src, block", [
    (REDUCE, '["B"]'),  # block not a literal
    (REDUCE, "[48]"),  # not a multiple of 32
    (REDUCE.replace("s[blockIdx.x] = sh[0];", "s[blockIdx.x] = sh[0] + sh[1];"), "[256]"),  # reads what the tree left in sh[1]
    (REDUCE.replace("if (tid < stride) sh[tid]", "if (tid <= stride) sh[tid]"), "[256]"),  # another loop
])
def test_shuffle_reduce_refuses(src, block):
    spec = spec_for("rsum", REDUCE_ARGS + ('{ name = "bs", role = "scalar", dtype = "i32", value = "B" },' if "B" in block else ""),
                    grid='["M"]', block=block, sizes="[{ M = 3, N = 1000" + (", B = 256" if "B" in block else "") + " }]")
    if "B" in block:
        src = src.replace("int n)", "int n, int bs)")
    assert not ShuffleReducePass().applies(unit(src, spec))


# ---------------------------------------------------------------- fast_math

FAST = """
extern "C" __global__ void act(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    int half = n / 2;
    y[i] = expf(v) + tanhf(v) + 1.0f / sqrtf(v * v + 1.0f) + v / n + (float)(half / 3);
}
"""
FAST_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
"""


def test_fast_math_rewrites_and_records_which():
    spec = spec_for("act", FAST_ARGS)
    u = unit(FAST, spec)
    assert FastMathPass().applies(u)
    v = FastMathPass().apply(u)
    assert "y[i] = __expf(v) + ptxf_tanh_approx(v) + rsqrtf(v * v + 1.0f) + __fdividef(v, n) + (float)(half / 3);" in v.text
    assert "int half = n / 2;" in v.text  # integer divisions stay
    assert v.notes["fast_math_ops"] == "expf+tanhf+rsqrt+fdividef"
    assert [n for n, _ in v.helpers] == ["ptxf_tanh_approx"]
    compiles('extern "C++" {\n' + v.helpers[0][1] + "\n}\n" + v.text, spec, "act")


def test_fast_math_only_where_the_tolerance_allows():
    assert not FastMathPass().applies(unit(FAST, spec_for("act", FAST_ARGS, rtol=1e-4)))
    assert FastMathPass().applies(unit(FAST, spec_for("act", FAST_ARGS, rtol=0.0, atol=0.0, fast_math=True)))


# ---------------------------------------------------------------- the generator on hand-written kernels


def test_registry_and_refusals():
    assert load("transform").name == "transform"
    spec = elementwise_spec()
    templ = "template <int K>\n" + ELEMENTWISE.replace('extern "C" ', "")
    assert TransformGenerator().propose(make_ctx(templ, spec)) == []
    renamed = ELEMENTWISE.replace("int n)", "int count)").replace("n)", "count)").replace("i >= n", "i >= count")
    assert TransformGenerator().propose(make_ctx(renamed, spec)) == []  # signature differs from the spec


def test_fixed_launch_keeps_the_launch():
    cands = TransformGenerator().propose(make_ctx(ELEMENTWISE, elementwise_spec(policy="fixed")))
    assert cands and all(c.launch.grid == ["cdiv(N, 128)"] and "pass:grid_stride" not in c.params for c in cands)


# ---------------------------------------------------------------- the seven examples

APPLIES = {  # pass -> examples where its precondition holds on the user's kernel
    "restrict": set(EXAMPLES), "ldg": set(EXAMPLES), "ldg_na": set(EXAMPLES), "stream": set(EXAMPLES),
    "launch_bounds": set(EXAMPLES),
    "shuffle_reduce": {"rowsum", "softmax", "layernorm", "rmsnorm"},
    "unroll": {"rowsum", "softmax", "layernorm", "rmsnorm"},
    "grid_stride": {"bias_gelu", "gemv"},
    "fast_math": {"softmax", "layernorm", "rmsnorm", "bias_gelu"},  # rtol 1e-2; rowsum, gemv (1e-4), transpose (0) refuse
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_which_passes_apply(name):
    u = unit_from_context(example_ctx(name))
    got = {p.name for p in PASSES if p.applies(u)}
    assert got == {p for p, where in APPLIES.items() if name in where}


@pytest.fixture(scope="module")
def proposals() -> dict[str, tuple[GenContext, list[Candidate], dict]]:
    out = {}
    for name in EXAMPLES:
        ctx = example_ctx(name)
        cands = TransformGenerator().propose(ctx)
        out[name] = (ctx, cands, {c.key: compile_candidate(c, ctx.spec.arch, ctx.spec.check.fast_math) for c in cands})
    return out


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_candidates_compile_and_pass_static_checks(proposals, name):
    ctx, cands, compiled = proposals[name]
    assert 5 <= len(cands) <= 16
    for c in cands:
        r = compiled[c.key]
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        res = r.resources
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.local_bytes == 0, f"{c.description}: {res.summary()}"
        assert static_check(c, ctx.spec, res, r.cubin) is None, c.description
        assert r.lowered_name == name  # C linkage kept


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_candidates_keys_passes_and_signature(proposals, name):
    ctx, cands, _ = proposals[name]
    keys = [c.key for c in cands]
    assert len(set(keys)) == len(keys) and ctx.original.key not in keys
    head, tail = ctx.source[: ctx.kernel.start_byte], ctx.source[ctx.kernel.end_byte :]
    for c in cands:
        passes = [k[5:] for k in c.params if k.startswith("pass:")]
        assert passes and set(passes) <= PASS_NAMES and all(c.params[f"pass:{p}"] == 1 for p in passes)
        assert c.description.split(" (")[0] == "transform " + "+".join(passes)
        assert c.generator == "transform" and c.parent == ctx.original.key and c.kernel_name == name
        k = find_kernel(c.source, name)
        check_signature(ctx.spec, k)
        assert [(p.name, p.type, p.is_pointer) for p in k.params] == [(p.name, p.type, p.is_pointer) for p in ctx.kernel.params]
        assert k.text.startswith('extern "C"')
        assert c.source == head + c.kernel_text + tail
        assert re.search(r"^// Launch: grid \(.*\), block \(.*\), no dynamic shared memory\.$", c.kernel_text, re.M)
        assert c.source.count("__global__") == ctx.source.count("__global__")


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_launches_within_limits(proposals, name):
    ctx, cands, _ = proposals[name]
    plan = make_plan(ctx.spec, secret=7)
    sizes = plan.verify_sizes + plan.heldout_sizes + plan.bench_sizes
    for c in cands:
        bounds = re.search(r"__launch_bounds__\((\d+)\)", c.kernel_text)
        threads = 1
        for b in c.launch.block:
            threads *= int(b)
        if bounds:
            assert int(bounds.group(1)) == threads
        for size in sizes:
            grid = [evaluate(g, size) for g in c.launch.grid]
            assert all(1 <= g <= m for g, m in zip(grid, MAX_GRID_DIMS)), (c.description, size, grid)
        if "pass:grid_stride" in c.params:
            assert c.launch.grid[0] == f"min({ctx.original.launch.grid[0]}, {c.params['grid_cap']})"


def test_example_expected_rewrites(proposals):
    by = {name: {c.description.split(" (")[0]: c for c in cands} for name, (_, cands, _) in proposals.items()}
    rowsum = by["rowsum"]["transform shuffle_reduce"].kernel_text
    assert "__shfl_down_sync" in rowsum and "for (int stride" not in rowsum and "s[row] = partial[0];" in rowsum
    softmax = by["softmax"]["transform shuffle_reduce"].kernel_text
    assert softmax.count("ptxf_v = fmaxf(ptxf_v, ptxf_u);") == 1 and softmax.count("ptxf_v = ptxf_v + ptxf_u;") == 1
    gelu = by["bias_gelu"]["transform grid_stride"]
    assert "for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < ((size_t)M * N); i += (size_t)gridDim.x * (size_t)blockDim.x)" in gelu.kernel_text
    assert gelu.launch.grid == ["min(cdiv(M * N, 256), 1056)"]
    assert "ptxf_tanh_approx(inner)" in by["bias_gelu"]["transform fast_math"].kernel_text
    assert "rsqrtf(__fdividef(partial[0], N) + eps)" in by["layernorm"]["transform fast_math"].kernel_text


def test_transform_of_a_transformed_or_family_parent(proposals):
    """A later best as the parent: helpers are not defined twice, the family's helpers stay, all compiles."""
    ctx, cands, _ = proposals["bias_gelu"]
    parent = next(c for c in cands if "pass:ldg_na" in c.params and "pass:fast_math" in c.params)
    child_ctx = make_ctx(ctx.source, ctx.spec, original=parent)
    assert not any(p.applies(unit_from_context(child_ctx)) for p in PASSES if f"pass:{p.name}" in parent.params)
    children = TransformGenerator().propose(child_ctx)
    assert [c.description for c in children] == ["transform stream"]  # only the stores are left to stream
    for c in children:
        assert c.kernel_text.count("ptxf_ldna_bf16(const") == 1 and c.kernel_text.count("ptxf_tanh_approx(float") == 1
        assert c.kernel_text.count("// Launch:") == 1 and "__stcs(y + i" in c.kernel_text
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log

    # a family's candidate: helpers and a launch comment above the definition, in its kernel text
    rctx = example_ctx("rowsum")
    helper = 'extern "C++" {\nstatic __device__ float ptxf_twice(float v) { return 2.0f * v; }\n}  // extern "C++"\n\n'
    text = helper + "// Launch: grid (M,), block (256,), no dynamic shared memory.\n" + rctx.kernel.text
    source = rctx.source[: rctx.kernel.start_byte] + text + rctx.source[rctx.kernel.end_byte :]
    family = rctx.original.model_copy(update={"source": source, "kernel_text": text, "generator": "family"})
    children = TransformGenerator().propose(make_ctx(source, rctx.spec, original=family))
    assert len(children) >= 5
    for c in children:
        assert c.kernel_text.startswith(helper) and c.kernel_text.count("// Launch:") == 1
        assert c.source == source.replace(text, c.kernel_text)
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log
