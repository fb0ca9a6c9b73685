"""CPU tests of the "transform" generator: each pass on small hand-written kernels, then all seven examples.

Per pass: the precondition holds (or not) where it should, the text change is the expected one, the
result still parses as the same kernel and compiles with NVRTC for sm_90a. On the examples: which
passes apply, and every proposed candidate compiles without spills, passes the static checks, keeps
the user's signature and linkage, has a distinct key, records its passes, and launches within limits.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate, compile_ptx
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.source import check_signature, find_kernel
from ptxfactory.harness.static_checks import MAX_GRID_DIMS, static_check
from ptxfactory.protocol import Candidate, LaunchConfig, evaluate, load_spec, parse_spec
from ptxfactory.search.base import GenContext
from ptxfactory.search.generators import load
from ptxfactory.search.generators.transform import FOLLOW_UP_GROUPS, OPTIONAL_GROUPS, MAX_CANDIDATES, PASSES, TransformGenerator, run_chain, unit_from_context
from ptxfactory.search.generators.transform.fast_math import FastMathPass
from ptxfactory.search.generators.transform.grid_stride import GridStridePass
from ptxfactory.search.generators.transform.launch_bounds import LaunchBoundsPass
from ptxfactory.search.generators.transform.ldg import LdgNoAllocatePass, LdgPass, StreamPass
from ptxfactory.search.generators.transform.restrict import RestrictPass
from ptxfactory.search.generators.transform.shuffle_reduce import ShuffleReducePass
from ptxfactory.search.generators.transform.unroll import UnrollPass
from ptxfactory.search.generators.transform.vectorize import VectorizePass

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
    """A spec for a hand-written kernel; the bench size sets every symbol of the first check size to 4096,
    except those the block is made of (a block of 4096 threads cannot launch: a spec error)."""
    first = dict(re.findall(r"(\w+) = (\d+)", sizes.split("}")[0]))
    in_block = set(re.findall(r"\w+", block))
    bench = ", ".join(f"{k} = {v if k in in_block else 4096}" for k, v in first.items())
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


def compiles(text_or_source: str, spec, name: str, spill_bytes: int = 0) -> None:
    """The source parses as the same kernel (signature checked) and compiles with NVRTC with at most
    `spill_bytes` of spill stores and local memory (none by default)."""
    check_signature(spec, find_kernel(text_or_source, name))
    cand = Candidate(kernel_name=name, source=text_or_source, kernel_text=text_or_source, launch=LaunchConfig(grid=[1], block=[128]))
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.resources.spill_stores <= spill_bytes and r.resources.local_bytes <= spill_bytes, r.resources.summary()


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
    assert v.launch.grid == ["cdiv(N, 128)"]  # no GPU facts: uncapped (the cap from the GPU: tests/unit/test_grid_facts.py)
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


def test_hints_that_change_nothing_say_why_and_keep_the_plan_s_order():
    """A hint that changes nothing says why for the report, buffer by buffer (``why_not``): l2norm_rows reads x through a
    local row pointer (ldg, ldg_na); RMSNorm's w is re-read by every row (ldg_na); an input also written is no read-only
    one. The report's refusals then name the hints and vectorize with their reasons, not in the line of passes that
    record none; and they are no restructuring passes: a kernel that only they (and the cosmetic passes) take keeps
    the plain order."""
    from ptxfactory.search.generators.transform import _restructures, refusals

    row = unit_from_context(example_ctx("l2norm_rows"))
    # x read through a local row pointer (const float* xr = x + row * N; xr[j]): the hints follow it
    assert LdgPass().why_not(row) is None and "__ldg(xr + i)" in LdgPass().apply(row).text
    path = ROOT / "examples" / "l2norm_rows" / "l2norm_rows.cu"
    bumped = unit_from_context(make_ctx(path.read_text().replace("const float* xr = x + (size_t)row * N;",
                                                                 "const float* xr = x + (size_t)row * N; xr += 0;"),
                                        load_spec(str(path) + ".toml").kernels["l2norm_rows"]))
    assert LdgPass().why_not(bumped) == "x is accessed through a local pointer (line 6: const float* xr = x + (size_t)row * N;)"
    assert LdgNoAllocatePass().why_not(bumped) == LdgPass().why_not(bumped)
    refused = dict(refusals(bumped))
    assert refused["ldg, ldg_na"] == LdgPass().why_not(bumped) and "line 9: a loop in the element's code" in refused["vectorize"]
    silent = next(names for names, why in refused.items() if "record no reason" in why).split(", ")
    assert not {"ldg", "ldg_na", "stream", "vectorize"} & set(silent)
    bcast = """extern "C" __global__ void bcast(const float* w, float* y, int m, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m * n) return;
    y[i] = w[i % n];
}"""
    args = """{ name = "w", role = "in", dtype = "f32", shape = ["N"] }, { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
      { name = "m", role = "scalar", dtype = "i32", value = "M" }, { name = "n", role = "scalar", dtype = "i32", value = "N" }"""
    small = unit(bcast, spec_for("bcast", args, grid='["cdiv(M * N, 128)"]', sizes="[{ M = 7, N = 1000 }]"))
    assert LdgNoAllocatePass().why_not(small) == ("w is smaller than the kernel's largest buffers and outputs: read again "
                                                 "by many threads, it keeps the cached path")
    assert LdgPass().why_not(small) is None and StreamPass().why_not(small) is None  # (y's stores are streamed)
    streamed_once = StreamPass().apply(unit_from_context(example_ctx("rmsnorm")))  # (a best's child: hinted already)
    assert StreamPass().why_not(streamed_once) == ("x is already read through __ldcs; w is smaller than the kernel's largest "
                                                   "buffers and outputs: read again by many threads, it keeps the cached "
                                                   "path; y is already stored through __stcs")
    spec = elementwise_spec()
    written = ELEMENTWISE.replace("float v = a[i] * 2.0f + c[i];", "float v = c[i]; c[i] = 0.0f;").replace("b[i] = v / 3.0f;", "b[i] = a[0] + v;")
    assert LdgPass().applies(unit(written, spec)) and LdgPass().why_not(unit(written, spec)) is None  # a[0]
    only_c = unit(written.replace("a[0] + v", "v"), spec)
    assert LdgPass().why_not(only_c) == "c is written (line 5: c[i] = 0.0f;)"
    assert not any(_restructures([p]) for p in PASSES if p.group == "hint" or p.name == "vectorize")
    assert all(_restructures([p]) for p in PASSES if p.name.startswith(("rowpar_", "smem_tile_", "colpar_", "hold_row")) or p.name in ("coarsen_4", "atomic_agg"))


def test_read_once_hints_only_for_the_largest_buffers():
    """RMSNorm (x[M, N], w[N], y[M, N]): ldg_na and stream take x (and stream the store to y), never w, which every row
    reads again; ldg (which keeps the L1 path) takes both. A bias-add whose inputs are all of one size: all of them."""
    from ptxfactory.search.generators.transform.ldg import streamed

    ctx = example_ctx("rmsnorm")
    u = unit_from_context(ctx)
    assert streamed(u, "x") and not streamed(u, "w") and streamed(u, "y")
    w_reads = lambda text: re.findall(r"[\w]+\(w \+|w\[", text)  # noqa: E731
    for hint in (StreamPass(), LdgNoAllocatePass()):
        text = hint.apply(u).text
        assert ("__ldcs(x +" in text or "ptxf_ldna_bf16(x +" in text) and w_reads(text) == ["w["] * len(w_reads(text)), hint.name
    assert "__ldg(w +" in LdgPass().apply(u).text
    spec = elementwise_spec()
    assert "__ldcs(a + i)" in StreamPass().apply(unit(ELEMENTWISE, spec)).text  # a, c and b: one size


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


@pytest.mark.parametrize("rtol, ops", [(1e-7, None), (1e-6, "rsqrt+fdividef"), (1e-4, "expf+rsqrt+fdividef"),
                                       (1e-3, "expf+tanhf+rsqrt+fdividef")])
def test_fast_math_only_where_the_tolerance_allows(rtol, ops):
    """Each rewrite from its own floor: rsqrtf and __fdividef (2 ulp) from 1e-6, __expf from 1e-4, tanh.approx
    (2^-11) from 1e-3; check.fast_math allows all at any tolerance."""
    u = unit(FAST, spec_for("act", FAST_ARGS, rtol=rtol))
    assert FastMathPass().applies(u) is (ops is not None)
    if ops:
        out = FastMathPass().apply(u)
        assert out.notes["fast_math_ops"] == ops and ("tanhf(v)" in out.text) is ("tanhf" not in ops), out.text
    allowed = FastMathPass().apply(unit(FAST, spec_for("act", FAST_ARGS, rtol=0.0, atol=0.0, fast_math=True)))
    assert allowed.notes["fast_math_ops"] == "expf+tanhf+rsqrt+fdividef"
    assert "(float)(half / 3)" in allowed.text  # (an int division: never a float rewrite)


BINNED = FAST.replace("y[i] = expf(v)", "int b = (int)(v / n) + (int)floorf(expf(v)); y[i] = (float)b + expf(v)")


def test_fast_math_leaves_a_value_that_becomes_an_integer():
    """A quotient or exp that a cast, an int variable or floorf takes is left exact (2 ulp can cross an integer: a bin
    index one too low); the same operations feeding a float are rewritten."""
    out = FastMathPass().apply(unit(BINNED, spec_for("act", FAST_ARGS, rtol=1e-3)))
    assert "int b = (int)(v / n) + (int)floorf(expf(v));" in out.text, out.text
    assert "y[i] = (float)b + __expf(v)" in out.text, out.text


def test_fast_math_follows_a_float_variable_to_its_rounded_uses():
    """scale = amax / 127 then __float2int_rn(x / scale) (an int8 quantisation): one ulp of the scale moves a rounding,
    so the division that makes scale stays exact; a quotient that only feeds floats is rewritten. A chain of 40
    temporaries, each used three times, is followed in time linear in its uses (each variable's answer remembered)."""
    quant = FAST.replace("y[i] = expf(v)", "float scale = v / n; float w = v / 3.0f; y[i] = (float)__float2int_rn(v / scale) + w + expf(v)")
    out = FastMathPass().apply(unit(quant, spec_for("act", FAST_ARGS, rtol=1e-3)))
    assert "float scale = v / n;" in out.text and "float w = __fdividef(v, 3.0f);" in out.text, out.text
    chain = "".join(f"float t{k + 1} = t{k} * t{k} + t{k} - t{k}; " for k in range(40))
    deep = FAST.replace("y[i] = expf(v)", f"float t0 = v / n; {chain}int q = (int)t40; y[i] = (float)q + expf(v)")
    done = FastMathPass().apply(unit(deep, spec_for("act", FAST_ARGS, rtol=1e-3)))
    assert "float t0 = v / n;" in done.text and "__expf(v)" in done.text


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
    # coarsen_4/8 (added with the pass): an element per thread with no loop in its code (gemv's is a row loop)
    "coarsen_4": {"bias_gelu"}, "coarsen_8": {"bias_gelu"},
    # unflatten: bias_gelu's column is i % N of a guard i >= M * N (two digits: columns on x, rows on y)
    "unflatten": {"bias_gelu"},
    # coarsen_outer: a 2-D launch whose rest has no loop (transpose's copy; bias_gelu's grid is 1-D)
    "coarsen_outer_4": {"transpose"}, "coarsen_outer_8": {"transpose"},
    # vectorize_x: an access at base + x along the x index (bias_gelu's x and y at i; transpose's read of x)
    "vectorize_x": {"bias_gelu", "transpose"},
    # lane-strided row loops: the block-per-row examples (transpose has no row loop, gemv's loop is serial per thread)
    "vector_loops": {"rowsum", "softmax", "layernorm", "rmsnorm"},
    "vectorize": set(),  # bias_gelu reads b[col] and its grid is cdiv(M * N, 256); the others are not elementwise
    "fast_math": {"softmax", "layernorm", "rmsnorm", "bias_gelu"},  # rtol 1e-2; rowsum, gemv (1e-4), transpose (0) refuse
    # one thread per row with a loop over the row: only gemv (the others already use a block per row or an element per thread)
    # (rowpar_cluster* needs the GPU's facts, which these units have not)
    **{p.name: {"gemv"} for p in PASSES if p.name.startswith("rowpar_") and not p.name.startswith("rowpar_cluster")},
    # one block per row with shared-memory tree reductions
    # (blockrow_cluster* needs the GPU's facts, which these units have not)
    **{p.name: {"rowsum", "softmax", "layernorm", "rmsnorm"} for p in PASSES
       if p.name.startswith("blockrow_") and not p.name.startswith("blockrow_cluster")},
    # a row read by two or more blockDim-strided loops (rowsum reads it once)
    **{p.name: {"softmax", "layernorm", "rmsnorm"} for p in PASSES if p.name.startswith("hold_row")},
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
    assert 5 <= len(cands) <= MAX_CANDIDATES
    for c in cands:
        r = compiled[c.key]
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        res = r.resources
        if "pass:launch_bounds" not in c.params:  # under a bound, ptxas may trade a few bytes of spill for occupancy
            assert res.spill_stores == 0 and res.spill_loads == 0 and res.local_bytes == 0, f"{c.description}: {res.summary()}"
        else:
            # (softmax's exact blockrow_lanes128 + hold_row chain, expf as written, keeps 32 B of its held row local)
            assert res.spill_stores <= 16 and res.local_bytes <= 32, f"{c.description}: {res.summary()}"
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
        for size in sizes:
            threads = 1
            for b in c.launch.block:  # an expression of the sizes for rowpar_auto
                threads *= int(evaluate(b, size))
            assert 1 <= threads <= 1024, (c.description, size, threads)
            if bounds:
                assert int(bounds.group(1)) == threads
            grid = [evaluate(g, size) for g in c.launch.grid]
            assert all(1 <= g <= m for g, m in zip(grid, MAX_GRID_DIMS)), (c.description, size, grid)
        if "pass:grid_stride" in c.params:
            cap = c.params.get("grid_cap")  # none without the GPU's facts
            assert c.launch.grid[0] == (f"min({ctx.original.launch.grid[0]}, {cap})" if cap else ctx.original.launch.grid[0])


def test_example_expected_rewrites():
    # each pass alone on the example (the singles may come after MAX_CANDIDATES chains in the proposals)
    def single(example: str, name: str):
        return run_chain(unit_from_context(example_ctx(example)), [next(p for p in PASSES if p.name == name)])

    rowsum = single("rowsum", "shuffle_reduce").text
    assert "__shfl_down_sync" in rowsum and "for (int stride" not in rowsum and "s[row] = partial[0];" in rowsum
    softmax = single("softmax", "shuffle_reduce").text
    assert softmax.count("ptxf_v = fmaxf(ptxf_v, ptxf_u);") == 1 and softmax.count("ptxf_v = ptxf_v + ptxf_u;") == 1
    gelu = single("bias_gelu", "grid_stride")
    assert "for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < ((size_t)M * N); i += (size_t)gridDim.x * (size_t)blockDim.x)" in gelu.text
    assert gelu.launch.grid == ["cdiv(M * N, 256)"]  # no GPU facts here: uncapped
    assert "ptxf_tanh_approx(inner)" in single("bias_gelu", "fast_math").text
    assert "rsqrtf(__fdividef(partial[0], N) + eps)" in single("layernorm", "fast_math").text


def test_transform_of_a_transformed_or_family_parent(proposals):
    """A later best as the parent: helpers are not defined twice, the family's helpers stay, all compiles."""
    ctx, cands, _ = proposals["bias_gelu"]
    parent = next(c for c in cands if "pass:ldg_na" in c.params and len([k for k in c.params if k.startswith("pass:")]) > 2)
    child_ctx = make_ctx(ctx.source, ctx.spec, original=parent)
    assert not any(p.applies(unit_from_context(child_ctx)) for p in PASSES if f"pass:{p.name}" in parent.params)
    children = TransformGenerator().propose(child_ctx)
    # fast_math follows a best alone (never in a chain); the bias (re-read by every row: no read-once hint took it) is
    # left to read through __ldg, and the grid-stride loop's i % N to carry (divmod); the parent's vector_loops moved
    # x and y 16 bytes at a time in its grid-stride loop (since 2026-12-05), so no scalar store is left to stream
    assert "pass:vector_loops" in parent.params
    assert sorted(c.description for c in children) == [
        "transform divmod", "transform fast_math (fast_math: tanhf)", "transform ldg", "transform ldg+divmod"]
    fast = next(c for c in children if "pass:fast_math" in c.params)
    grandchildren = TransformGenerator().propose(make_ctx(ctx.source, ctx.spec, original=fast))
    assert sorted(c.description for c in grandchildren) == ["transform divmod", "transform ldg", "transform ldg+divmod"]
    for c in children + grandchildren:
        tanh = 1 if (c in grandchildren or c is fast) else 0
        assert c.kernel_text.count("ptxf_ldna_bf16(const") == 1 and c.kernel_text.count("ptxf_tanh_approx(float") == tanh
        assert c.kernel_text.count("// Launch:") == 1 and ("__stcs(y + i" in c.kernel_text) == ("stream" in c.description)
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


# ---------------------------------------------------------------- vectorize

VEC_F32 = """
extern "C" __global__ void fma2(const float* x, const float* b, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = x[i] * 2.0f + b[i];
}
"""
VEC_BF16 = """#include <cuda_bf16.h>
extern "C" __global__ void fma2(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = __float2bfloat16(__bfloat162float(x[i]) * 2.0f + __bfloat162float(b[i]));
    }
}
"""
VEC_ARGS = """
  {{ name = "x", role = "in", dtype = "{t}", shape = ["N"] }},
  {{ name = "b", role = "in", dtype = "{t}", shape = ["N"] }},
  {{ name = "y", role = "out", dtype = "{t}", shape = ["N"] }},
  {{ name = "n", role = "scalar", dtype = "i32", value = "N" }},
"""
VEC_KERNELS = {"f32": (VEC_F32, 4), "bf16": (VEC_BF16, 8)}


def vec_spec(dtype: str, **kw):
    return spec_for("fma2", VEC_ARGS.format(t=dtype), **kw)


def _checked_compile(c: Candidate, spec) -> str:
    """Compiles without spills, passes the static checks; returns the PTX."""
    r = compile_candidate(c, "sm_90a")
    assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
    assert r.resources.spill_stores == 0 and r.resources.spill_loads == 0 and r.resources.local_bytes == 0, r.resources.summary()
    assert static_check(c, spec, r.resources, r.cubin) is None, c.description
    assert r.lowered_name == spec.name
    return compile_ptx(c, "sm_90a")


@pytest.mark.parametrize("dtype", sorted(VEC_KERNELS))
def test_vectorize_rewrites_elementwise_kernels(dtype):
    src, vec = VEC_KERNELS[dtype]
    spec = vec_spec(dtype)
    u = unit(src, spec)
    assert VectorizePass().applies(u)
    v = VectorizePass().apply(u)
    assert v.launch.grid == [f"cdiv(N, {128 * vec})"] and v.launch.block == [128]
    assert v.notes["vec"] == 16
    assert f"(int)(blockIdx.x * blockDim.x + threadIdx.x) * {vec};" in v.text
    assert "const uint4 ptxf_x = *reinterpret_cast<const uint4*>(x + ptxf_v0);" in v.text
    assert "*reinterpret_cast<uint4*>(y + ptxf_v0) = make_uint4(" in v.text
    assert v.text.count("// element ") == vec
    assert f"for (int i = ptxf_v0; i < ptxf_v0 + {vec} && i < n; ++i) {{" in v.text  # the scalar tail keeps the original body
    assert "y[i] = x[i] * 2.0f + b[i];" in v.text if dtype == "f32" else "y[i] = __float2bfloat16(__bfloat162float(x[i])" in v.text
    compiles(src.replace(u.text, v.text), spec, "fma2")
    assert not VectorizePass().applies(v) and not GridStridePass().applies(v)  # not twice, and not with grid_stride


def test_vectorize_reads_a_compound_store_and_a_buffer_named_v():
    """``p[i] -= e;`` is ``p[i] = p[i] - (e);`` (an Adam step's update), and a buffer named ``v`` gets element registers
    that do not hide the thread's first index ``ptxf_v0`` (its stores went to ``p + <v's element bits>``)."""
    args = """
  { name = "p", role = "inout", dtype = "f32", shape = ["N"] },
  { name = "g", role = "in", dtype = "f32", shape = ["N"] },
  { name = "v", role = "inout", dtype = "f32", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },"""
    spec = spec_for("step", args)
    src = """extern "C" __global__ void step(float* p, const float* g, float* v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float vi = 0.9f * v[i] + g[i] * g[i];
    v[i] = vi;
    p[i] -= 0.01f * g[i] / (sqrtf(vi) + 1e-8f);
}
"""
    u = unit(src, spec)
    assert VectorizePass().applies(u)
    out = VectorizePass().apply(u).text
    assert "p[i] = p[i] - (0.01f * g[i] / (sqrtf(vi) + 1e-8f));" in out  # the scalar tail, as the store reads
    assert "*reinterpret_cast<uint4*>(p + ptxf_v0) = make_uint4(ptxf_p_0, ptxf_p_1, ptxf_p_2, ptxf_p_3);" in out
    assert "*reinterpret_cast<uint4*>(v + ptxf_v0) = make_uint4(ptxf_v_0, ptxf_v_1, ptxf_v_2, ptxf_v_3);" in out
    assert "unsigned ptxf_p_0" in out and " ptxf_v0," not in out
    compiles(out, spec, "step")


def test_vectorize_keeps_locals_index_uses_and_hints():
    spec = elementwise_spec()
    src = ELEMENTWISE.replace("b[i] = v / 3.0f;", "b[i] = v / 3.0f + (float)i;")
    v = VectorizePass().apply(unit(src, spec))
    assert v.text.count("const int i = ptxf_v0 + ") == 4  # i is a value in the body: defined per element
    assert "float v = __uint_as_float(ptxf_a.w) * 2.0f + __uint_as_float(ptxf_c.w);" in v.text
    compiles(v.text, spec, "axpy")
    s = VectorizePass().apply(StreamPass().apply(unit(ELEMENTWISE, spec)))
    assert "const uint4 ptxf_a = __ldcs(reinterpret_cast<const uint4*>(a + ptxf_v0));" in s.text
    assert "__stcs(reinterpret_cast<uint4*>(b + ptxf_v0), make_uint4(ptxf_b_0, ptxf_b_1, ptxf_b_2, ptxf_b_3));" in s.text
    compiles(s.text, spec, "axpy")
    na = VectorizePass().apply(LdgNoAllocatePass().apply(unit(ELEMENTWISE, spec)))
    assert [n for n, _ in na.helpers] == ["ptxf_ldna_f32", "ptxf_ldna_v4u32"]
    compiles('extern "C++" {\n' + "\n".join(h for _, h in na.helpers) + "\n}\n" + na.text, spec, "axpy")


SPEC_2D = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "m", role = "scalar", dtype = "i32", value = "M" },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
"""
KERNEL_2D = """
extern "C" __global__ void k2(const float* x, float* y, int m, int n)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < m && col < n) {
        y[(size_t)row * n + col] = x[(size_t)row * n + col] * 2.0f;
    }
}
"""


@pytest.mark.parametrize("change, reason", [
    ("y[i] = x[i + 1] * 2.0f + b[i];", "x[i + 1] is not x[i] at the thread's index (vectorize_x may take it)"),
    ("y[i] = x[i] * 2.0f; y[i] = y[i] + b[i];", "y is stored twice in the element's code (line 5: y[i] = y[i] + b[i];)"),
    ("y[i] = x[i]; y[i + 1] = b[i];", "y[i + 1] is not y[i] at the thread's index"),  # a neighbour's element
    ("if (x[i] > 0.0f) y[i] = b[i];", "line 5: a branch in the element's code ('if (x[i] > 0.0f) y[i] = b[i];')"),
    ("y[i] = x[i] * 2.0f + b[threadIdx.x];", "line 5: the element's code reads threadIdx"),  # thread builtins in the body
    ("y[i] = x[i] * 2.0f + *b;", "*b is not b[i] at the thread's index"),  # another access form
    ("for (int k = 0; k < 2; ++k) y[i] = x[i] + b[i];", "line 5: a loop in the element's code"),
])
def test_vectorize_refuses_other_patterns(change, reason):
    """Each refusal says what it saw (``why_not``, for the report), in the kernel text's lines."""
    assert VectorizePass().applies(unit(VEC_F32, vec_spec("f32"))) and VectorizePass().why_not(unit(VEC_F32, vec_spec("f32"))) is None
    changed = unit(VEC_F32.replace("y[i] = x[i] * 2.0f + b[i];", change), vec_spec("f32"))
    assert not VectorizePass().applies(changed) and reason in VectorizePass().why_not(changed)


def test_vectorize_refuses_other_kernels_and_launches():
    why = VectorizePass().why_not
    assert "no one-thread-per-element opening" in why(unit_from_context(example_ctx("rowsum")))
    assert why(unit_from_context(example_ctx("transpose"))) == "the launch ['cdiv(N, 32)', 'cdiv(M, 8)'] x [32, 8] is not 1-D"
    spec_2d = spec_for("k2", SPEC_2D, grid='["cdiv(N, 32)", "cdiv(M, 8)"]', block="[32, 8]", sizes="[{ M = 7, N = 1000 }]")
    assert not VectorizePass().applies(unit(KERNEL_2D, spec_2d))
    assert 'the launch policy is "fixed"' in why(unit(VEC_F32, vec_spec("f32", policy="fixed")))
    assert why(unit(VEC_F32, vec_spec("f32", grid='["cdiv(N, 256)"]'))) == (  # grid not over the block
        "the grid 'cdiv(N, 256)' is not cdiv(N, 128) over the block's threads")
    assert not VectorizePass().applies(unit(VEC_F32, vec_spec("f32", grid='["N"]')))
    mixed = VEC_ARGS.format(t="f32").replace('name = "b", role = "in", dtype = "f32"', 'name = "b", role = "in", dtype = "bf16"')
    mixed_src = "#include <cuda_bf16.h>\n" + VEC_F32.replace("const float* b", "const __nv_bfloat16* b").replace("+ b[i]", "+ __bfloat162float(b[i])")
    assert VectorizePass().applies(unit(mixed_src, spec_for("fma2", mixed)))  # mixed precision: tests below
    short = VEC_ARGS.format(t="f32").replace('shape = ["N"] },\n  {{ name = "y"'.replace("{{", "{"), 'shape = ["N - 1"] },\n  { name = "y"')
    assert short != VEC_ARGS.format(t="f32")
    assert why(unit(VEC_F32, spec_for("fma2", short, sizes="[{ N = 1000 }]"))) == "b holds fewer than N elements at the size {'N': 1000}"


PRODUCT_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["B", "D"] },
  { name = "y", role = "out", dtype = "f32", shape = ["B", "D"] },
  { name = "batch", role = "scalar", dtype = "i32", value = "B" },
  { name = "dim", role = "scalar", dtype = "i32", value = "D" },
"""
PRODUCT = """
extern "C" __global__ void scale2(const float* x, float* y, int batch, int dim)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < batch * dim) y[i] = x[i] * 2.0f;
}
"""


def test_vectorize_takes_a_flat_length_that_is_a_product_of_sizes():
    """A flat kernel over ``batch * dim`` elements (grid ``cdiv(B * D, 256)``): the guard's bound, read through the
    spec's values, gives the grid's extent at every size, so the pass applies and the grid keeps the product; a guard
    that bounds something else is refused with the reason."""
    spec = spec_for("scale2", PRODUCT_ARGS, grid='["cdiv(B * D, 128)"]', sizes="[{ B = 3, D = 333 }, { B = 1, D = 5 }]")
    out = VectorizePass().apply(unit(PRODUCT, spec))
    assert out.launch.grid == ["cdiv((B * D), 512)"] and "uint4" in out.text
    compiles(out.text, spec, "scale2")
    wrong = spec_for("scale2", PRODUCT_ARGS, grid='["cdiv(B * D, 128)"]', sizes="[{ B = 3, D = 333 }]")
    why = VectorizePass().why_not(unit(PRODUCT.replace("i < batch * dim", "i < batch * dim - 1"), wrong))
    assert "whose spec values give (B * D) at every size" in why


@pytest.mark.parametrize("dtype", sorted(VEC_KERNELS))
def test_vectorize_in_the_generator(dtype):
    src, vec = VEC_KERNELS[dtype]
    spec = vec_spec(dtype)
    ctx = make_ctx(src, spec)
    cands = TransformGenerator().propose(ctx)
    vcands = [c for c in cands if "pass:vectorize" in c.params]
    assert any(c.description == "transform vectorize" for c in vcands)
    assert any("pass:ldg" in c.params for c in vcands) and any("pass:stream" in c.params for c in vcands)
    assert any("pass:grid_stride" in c.params for c in cands)
    for c in cands:
        assert not ("pass:vectorize" in c.params and "pass:grid_stride" in c.params)  # alternatives (group "grid")
    for c in vcands:
        assert c.params["vec"] == 16 and c.launch.grid == [f"cdiv(N, {128 * vec})"]
        ptx = _checked_compile(c, spec)
        assert re.search(r"\bld\.global(\.nc|\.cs)?(\.L1::no_allocate)?\.v4\.(u32|b32|f32)", ptx), c.description
        assert re.search(r"\bst\.global(\.cs)?\.v4\.(u32|b32|f32)", ptx), c.description
        plan = make_plan(spec, secret=7)
        for size in plan.verify_sizes + plan.heldout_sizes + plan.bench_sizes:
            g = evaluate(c.launch.grid[0], size)
            assert 1 <= g <= MAX_GRID_DIMS[0] and g * 128 * vec >= size["N"]


# Host emulation: the kernels as plain C++, one CUDA thread after another (no barriers in these kernels).
VEC_SHIM = r"""
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
struct uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
struct ptxf_dim { unsigned x; };
ptxf_dim threadIdx, blockIdx, blockDim;
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline unsigned short ptxf_f2bf(float f) {  // round to nearest even, as __float2bfloat16
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
struct __nv_bfloat16 { unsigned short u; __nv_bfloat16() = default; __nv_bfloat16(float f) : u(ptxf_f2bf(f)) {} };
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.u << 16); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { __nv_bfloat16 h; h.u = s; return h; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.u; }
const char* g_range[3][2];  // the elements x, b and y hold
long g_vec_loads, g_vec_stores;
template <class T> T* checked(T* p) {
    const char* c = (const char*)p;
    bool in = false;
    for (auto& r : g_range) in = in || (c >= r[0] && c + sizeof(T) <= r[1]);
    if ((uintptr_t)c % sizeof(T) || !in) { printf("bad %zu-byte access\n", sizeof(T)); std::exit(2); }
    return p;
}
template <class T> T __ldg(const T* p) { g_vec_loads += sizeof(T) == 16; return *checked(p); }
template <class T> T __ldcs(const T* p) { g_vec_loads += sizeof(T) == 16; return *checked(p); }
template <class T> void __stcs(T* p, T v) { g_vec_stores += sizeof(T) == 16; *checked(p) = v; }
template <class F> void launch(long grid, unsigned block, F f) {
    blockDim.x = block;
    for (long b = 0; b < grid; ++b)
        for (unsigned t = 0; t < block; ++t) { blockIdx.x = (unsigned)b; threadIdx.x = t; f(); }
}
"""
VEC_MAIN = r"""
int main() {
    const long sizes[] = {1, 7, 8, 9, 1000, 1001};
    const long offsets[][3] = {{0, 0, 0}, {1, 1, 1}, {0, 0, 1}};  // elements past a 256-byte boundary: x, b, y
    const long E = sizeof(ELEM), GUARD = 64;
    unsigned s = 12345;
    for (long n : sizes)
        for (auto& off : offsets) {
            const long total = (n + 1 + 2 * GUARD) * E;
            char* mem[5];
            for (auto& m : mem) m = (char*)aligned_alloc(256, (total + 255) / 256 * 256);
            for (long k = 0; k < total; ++k) { s = s * 1664525u + 1013904223u; mem[0][k] = (char)(s >> 13); mem[1][k] = (char)(s >> 5); }
            for (long k = E - 1; k < total; k += E)  // finite inputs of magnitude ~1: keep the sign, exponent 0x3f..
                for (int j = 0; j < 2; ++j) mem[j][k] = (char)(0x3f | (mem[j][k] & 0x80));
            for (int k = 2; k < 5; ++k) std::memset(mem[k], 0x5a, total);
            ELEM* x = (ELEM*)(mem[0] + (GUARD + off[0]) * E);
            ELEM* b = (ELEM*)(mem[1] + (GUARD + off[1]) * E);
            ELEM* y[3];
            for (int k = 0; k < 3; ++k) y[k] = (ELEM*)(mem[2 + k] + (GUARD + off[2]) * E);
            const bool aligned = !(off[0] || off[1] || off[2]);
            for (int k = 0; k < 3; ++k) {
                g_range[0][0] = (const char*)x; g_range[0][1] = (const char*)(x + n);
                g_range[1][0] = (const char*)b; g_range[1][1] = (const char*)(b + n);
                g_range[2][0] = (const char*)y[k]; g_range[2][1] = (const char*)(y[k] + n);
                g_vec_loads = g_vec_stores = 0;
                if (k == 0) launch((n + BLOCK - 1) / BLOCK, BLOCK, [&] { orig::fma2(x, b, y[0], (int)n); });
                if (k == 1) launch((n + BLOCK * VEC - 1) / (BLOCK * VEC), BLOCK, [&] { vec::fma2(x, b, y[1], (int)n); });
                if (k == 2) launch((n + BLOCK * VEC - 1) / (BLOCK * VEC), BLOCK, [&] { vecs::fma2(x, b, y[2], (int)n); });
                long want = k == 2 && aligned ? n / VEC : 0;  // only the streamed variant's 16-byte accesses are counted
                if (g_vec_loads != 2 * want || g_vec_stores != want) { printf("n=%ld: %ld vector loads, %ld stores\n", n, g_vec_loads, g_vec_stores); return 1; }
            }
            for (int k = 3; k < 5; ++k)
                if (std::memcmp(mem[2], mem[k], total)) { printf("n=%ld off=%ld,%ld,%ld: variant %d differs\n", n, off[0], off[1], off[2], k - 2); return 1; }
            for (long k = 0; k < n * E; ++k)
                if (((char*)y[0])[k] == 0x5a && ((char*)y[0])[k ^ 1] == 0x5a) { printf("n=%ld: element %ld not written\n", n, k / E); return 1; }
            for (long k = 0; k < GUARD * E; ++k)
                if (mem[2][k] != 0x5a || mem[2][total - 1 - k] != 0x5a) { printf("n=%ld: guard written\n", n); return 1; }
            for (auto& m : mem) free(m);
        }
    printf("ok\n");
    return 0;
}
"""


def _emulate(program: str, tmp_path) -> str:
    """``program`` (C++17) built with g++ (no fp contraction, as the kernels' exact order) and run; its stdout, stripped."""
    cpp, exe = tmp_path / "emu.cpp", tmp_path / "emu"
    cpp.write_text(program)
    build = subprocess.run(["g++", "-std=c++17", "-O1", "-w", "-ffp-contract=off", str(cpp), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout.strip()


def _host(text: str) -> str:
    return text.replace('extern "C" ', "").replace("#include <cuda_bf16.h>", "")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the host emulation")
@pytest.mark.parametrize("dtype", sorted(VEC_KERNELS))
def test_vectorize_bit_identical_on_host_emulation(dtype, tmp_path):
    """Original, vectorize, and restrict+stream+vectorize agree bit for bit (and leave the guards alone) at n in {1, 7, 8, 9, 1000, 1001}, aligned and misaligned."""
    src, vec = VEC_KERNELS[dtype]
    spec = vec_spec(dtype)
    u = unit(src, spec)
    plain = VectorizePass().apply(u)
    streamed = VectorizePass().apply(StreamPass().apply(RestrictPass().apply(u)))
    assert "__ldcs(reinterpret_cast<const uint4*>" in streamed.text and "__stcs(reinterpret_cast<uint4*>" in streamed.text
    elem = "float" if dtype == "f32" else "__nv_bfloat16"
    program = (VEC_SHIM + "".join(f"namespace {ns} {{\n{_host(t)}\n}}\n" for ns, t in (("orig", src), ("vec", plain.text), ("vecs", streamed.text)))
               + VEC_MAIN.replace("ELEM", elem).replace("BLOCK", "128L").replace("VEC", f"{vec}L"))
    assert _emulate(program, tmp_path) == "ok"


# Mixed precision: float and bf16 buffers in one elementwise kernel (a bf16 bias added in fp32; a float result
# rounded to bf16). Four elements a thread: the float buffers move 16 bytes (uint4), the bf16 ones 8 (uint2).
MIXED = {
    "f32_bf16_to_f32": ("""#include <cuda_bf16.h>
extern "C" __global__ void fma2(const float* x, const __nv_bfloat16* b, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f + __bfloat162float(b[i]);
}
""", ("f32", "bf16", "f32")),
    "f32_f32_to_bf16": ("""#include <cuda_bf16.h>
extern "C" __global__ void fma2(const float* x, const float* b, __nv_bfloat16* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(x[i] * 2.0f + b[i]);
}
""", ("f32", "f32", "bf16")),
}


def _mixed_spec(dtypes):
    args = "".join(f'  {{ name = "{n}", role = "{r}", dtype = "{t}", shape = ["N"] }},\n'
                   for n, r, t in zip("xby", ("in", "in", "out"), dtypes))
    return spec_for("fma2", args + '  { name = "n", role = "scalar", dtype = "i32", value = "N" },\n')


@pytest.mark.parametrize("name", sorted(MIXED))
def test_vectorize_takes_mixed_precision_with_16_and_8_byte_accesses(name):
    src, dtypes = MIXED[name]
    spec = _mixed_spec(dtypes)
    v = VectorizePass().apply(unit(src, spec))
    assert v.launch.grid == ["cdiv(N, 512)"] and "* 4;" in v.text and v.text.count("// element ") == 4
    for b, t in zip("xby", dtypes):
        vt = "uint4" if t == "f32" else "uint2"
        assert (f"const {vt} ptxf_{b} = *reinterpret_cast<const {vt}*>({b} + ptxf_v0);" in v.text if b != "y"
                else f"*reinterpret_cast<{vt}*>(y + ptxf_v0) = make_{vt}(" in v.text)
    assert "& 15ull) == 0ull && ((" in v.text and "& 7ull) == 0ull" in v.text  # each buffer aligned to its own width
    for c in TransformGenerator().propose(make_ctx(src, spec)):
        if "pass:vectorize" in c.params:
            ptx = _checked_compile(c, spec)
            assert re.search(r"\bld\.global(\.nc|\.cs)?(\.L1::no_allocate)?\.v4\.(u32|b32|f32)", ptx) and re.search(r"\bld\.global(\.nc|\.cs)?\.v2\.(u32|b32)|\bst\.global(\.cs)?\.v2\.(u32|b32)", ptx), c.description
    # the no-allocate hint has only a 16-byte vector form: a bf16 buffer read through it is refused
    if dtypes[1] == "bf16":
        assert not VectorizePass().applies(LdgNoAllocatePass().apply(unit(src, spec)))


MIXED_MAIN = r"""
int main() {
    const long sizes[] = {1, 3, 4, 5, 1000, 1003};
    unsigned s = 777;
    for (long n : sizes)
        for (long off = 0; off < 3; ++off) {  // 0: aligned; 1, 2: every buffer off its vector boundary
            TX* x = (TX*)aligned_alloc(256, 4096 * 8) + off;
            TB* b = (TB*)aligned_alloc(256, 4096 * 8) + off;
            TY* y0 = (TY*)aligned_alloc(256, 4096 * 8) + off;
            TY* y1 = (TY*)aligned_alloc(256, 4096 * 8) + off;
            for (long k = 0; k < n; ++k) {
                s = s * 1664525u + 1013904223u; x[k] = TX((float)(int)(s >> 20) / 512.0f - 1.0f);
                s = s * 1664525u + 1013904223u; b[k] = TB((float)(int)(s >> 20) / 512.0f - 1.0f);
            }
            std::memset((void*)y0, 0x5a, (n + 8) * sizeof(TY));
            std::memset((void*)y1, 0x5a, (n + 8) * sizeof(TY));
            launch((n + 127) / 128, 128, [&] { orig::fma2(x, b, y0, (int)n); });
            launch((n + 511) / 512, 128, [&] { vec::fma2(x, b, y1, (int)n); });
            if (std::memcmp((void*)y0, (void*)y1, (n + 8) * sizeof(TY))) { printf("n=%ld off=%ld differs\n", n, off); return 1; }
        }
    printf("ok\n");
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the host emulation")
@pytest.mark.parametrize("name", sorted(MIXED))
def test_vectorize_mixed_precision_bit_identical_on_host_emulation(name, tmp_path):
    """The original and the vectorized mixed-precision kernel write the same bits (and nothing past n), aligned and
    not, at sizes inside, on and past a thread's four elements."""
    src, dtypes = MIXED[name]
    v = VectorizePass().apply(unit(src, _mixed_spec(dtypes)))
    ctype = {"f32": "float", "bf16": "__nv_bfloat16"}
    shim = VEC_SHIM.replace("struct uint4 {", "struct uint2 { unsigned x, y; };\ninline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }\nstruct uint4 {")
    shim = shim.replace("template <class T> T* checked(T* p) {", "template <class T> T* checked(T* p) { return p;")
    program = (shim + "".join(f"namespace {ns} {{\n{_host(t)}\n}}\n" for ns, t in (("orig", src), ("vec", v.text)))
               + MIXED_MAIN.replace("TX", ctype[dtypes[0]]).replace("TB", ctype[dtypes[1]]).replace("TY", ctype[dtypes[2]]))
    assert _emulate(program, tmp_path) == "ok"
    # the emulation must see a difference: a vectorized kernel that mixes up two elements fails it
    broken = v.text.replace("ptxf_x.x", "ptxf_x.TMP").replace("ptxf_x.y", "ptxf_x.x").replace("ptxf_x.TMP", "ptxf_x.y")
    assert broken != v.text
    assert _emulate(program.replace(_host(v.text), _host(broken)), tmp_path) != "ok"


def test_where_a_restructuring_pass_applies_it_and_its_chains_are_proposed_first():
    """A thread-per-row kernel (l2norm_rows): its first candidate is rowpar's first variant, the next ones chains
    holding rowpar, and the cosmetic singles (restrict, stream) come after; a kernel no restructuring pass takes
    (an elementwise stencil) keeps the plain order, singles first."""
    rowwise = [c.params for c in TransformGenerator().propose(example_ctx("l2norm_rows"))]
    assert {k for k in rowwise[0] if k.startswith("pass:")} == {"pass:rowpar_auto"}
    assert all(any(k.startswith("pass:rowpar_") for k in p) and len([k for k in p if k.startswith("pass:")]) > 1 for p in rowwise[1:4])
    # (the cosmetic singles may not come at all: the chains fill MAX_CANDIDATES)
    cosmetic = next((i for i, p in enumerate(rowwise) if set(k for k in p if k.startswith("pass:")) == {"pass:restrict"}), len(rowwise))
    assert cosmetic > 4
    plain = [c.params for c in TransformGenerator().propose(example_ctx("stencil5"))]
    assert set(k for k in plain[0] if k.startswith("pass:")) == {"pass:restrict"}


def test_fast_math_is_proposed_alone_and_follows_each_best():
    """fast_math (an approximation that may fail verification) never rides in a chain: on l2norm_rows (rtol allows
    __fdividef) no proposal holds it beside another pass, so the first generation is not doubled by exact twins; a
    best (rowpar_auto) proposes it as its child, alone. Without the rule, the chains came with and without it."""
    ctx = example_ctx("l2norm_rows")
    first = TransformGenerator().propose(ctx)
    passes = lambda c: {k for k in c.params if k.startswith("pass:")}  # noqa: E731
    assert first and all(passes(c) == {"pass:fast_math"} for c in first if "pass:fast_math" in c.params)
    best = next(c for c in first if passes(c) == {"pass:rowpar_auto"})
    children = TransformGenerator().propose(make_ctx(ctx.source, ctx.spec, original=best))
    fast = [c for c in children if "pass:fast_math" in c.params]
    assert [passes(c) for c in fast] == [{"pass:fast_math"}] and "__fdividef(" in fast[0].kernel_text
    assert FastMathPass().group in FOLLOW_UP_GROUPS and FastMathPass().group not in OPTIONAL_GROUPS


def test_a_chain_drops_a_cosmetic_pass_that_would_take_the_chosen_restructuring_pass_s_pattern():
    """standardize_rows (one block per row, shared-memory trees): shuffle_reduce, earlier in PASSES, rewrites the
    trees blockrow replaces; the greedy chains built around blockrow leave shuffle_reduce out and keep the rest
    (hold_row, vector_loops), and every candidate compiles."""
    ctx = example_ctx("standardize_rows")
    cands = TransformGenerator().propose(ctx)
    chains = [{k[5:] for k in c.params if k.startswith("pass:")} for c in cands]
    with_blockrow = [c for c in chains if len(c) > 1 and any(n.startswith("blockrow_") for n in c)]
    assert with_blockrow and all("shuffle_reduce" not in c for c in with_blockrow)
    assert any({"hold_row_auto", "vector_loops"} <= c for c in with_blockrow)
    for c in cands:
        compiles(c.source, ctx.spec, ctx.spec.name)


def test_a_pass_that_widens_the_block_drops_a_launch_bounds_it_would_exceed():
    """A one-thread-per-row kernel bounded at 128 threads: rowpar's 256-thread blocks would not launch under
    ``__launch_bounds__(128)``, so the bound goes with the block change; a pass that keeps the block keeps it."""
    from ptxfactory.search.generators.transform import run_chain
    from ptxfactory.search.generators.transform.rowpar import RowParallelPass

    path = ROOT / "examples" / "rowsum_seq" / "rowsum_seq.cu"
    src = path.read_text().replace('extern "C" __global__ void', 'extern "C" __global__ void __launch_bounds__(128)', 1)
    unit = unit_from_context(make_ctx(src, load_spec(str(path) + ".toml").kernels["rowsum_seq"]))
    assert "__launch_bounds__(128)" in unit.text
    wide = run_chain(unit, [RowParallelPass(256)])
    assert wide.launch.block != unit.launch.block and "__launch_bounds__" not in wide.text
    kept = run_chain(unit, [RestrictPass()])
    assert "__launch_bounds__(128)" in kept.text
