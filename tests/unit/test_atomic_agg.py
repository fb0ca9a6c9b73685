"""CPU tests of the ``atomic_agg`` pass (an atomic per element -> a register per thread, one atomic per warp).

Small kernels written the way a first version is (a dot product, a count, an integer max, a squared-error
loss, per-block partial sums): what the pass rewrites (the accumulator where the atomics were, early
returns turned around the rest, the ballot, the warp's fold and lane 0's atomic at the end), how it
composes with ``grid_stride`` (one atomic per warp for the whole kernel), what it refuses and why
(thread-dependent addresses, used return values, non-commutative atomics, float sums under an exact or
deterministic spec, a buffer also used otherwise), and every output compiled with NVRTC through the
transform generator's candidate (helpers included).
"""
from __future__ import annotations

import re

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol.spec import parse_spec
from ptxfactory.search.generators.transform import TransformGenerator, plan_chains, run_chain
from ptxfactory.search.generators.transform.atomic_agg import AtomicAggPass
from ptxfactory.search.generators.transform.grid_stride import GridStridePass

from test_transform import example_ctx, make_ctx, unit

AGG = AtomicAggPass()


def spec(name: str, args: str, *, rtol=1e-3, atol=1e-6, deterministic=False, arch="sm_90a", block="[256]",
         grid='["cdiv(N, 256)"]', sizes="[{ N = 1000 }]", bench="[{ N = 1048576 }]"):
    return parse_spec(f"""
[kernel.{name}]
arch = "{arch}"
args = [{args}]
launch = {{ grid = {grid}, block = {block}, policy = "free" }}
[kernel.{name}.check]
rtol = {rtol}
atol = {atol}
deterministic = {str(deterministic).lower()}
sizes = {sizes}
[kernel.{name}.bench]
sizes = {bench}
""").kernels[name]


DOT_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N"] },
  { name = "y", role = "in", dtype = "f32", shape = ["N"] },
  { name = "out", role = "inout", dtype = "f32", shape = [1], init = "zeros" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
DOT = """extern "C" __global__ void dot(const float* x, const float* y, float* out, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) atomicAdd(out, x[i] * y[i]);
}
"""
LOSS = """extern "C" __global__ void dot(const float* x, const float* y, float* out, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float d = x[i] - y[i];
    atomicAdd(&out[0], d * d);
}
"""
COUNT_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N"] },
  { name = "cnt", role = "inout", dtype = "i32", shape = [1], init = "zeros" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "t", role = "scalar", dtype = "f32", value = 0.5 },
"""
COUNT = """extern "C" __global__ void count(const float* x, int* cnt, int N, float t)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        if (x[i] > t) atomicAdd(cnt, 1);
    }
}
"""
IMAX_ARGS = """
  { name = "v", role = "in", dtype = "i32", shape = ["N"] },
  { name = "best", role = "inout", dtype = "i32", shape = [1], init = "zeros" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
IMAX = """extern "C" __global__ void imax(const int* v, int* best, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) atomicMax(best, v[i]);
}
"""
HIST_ARGS = """
  { name = "x", role = "in", dtype = "i32", shape = ["N"], init = "randint(0, 64)" },
  { name = "hist", role = "inout", dtype = "i32", shape = [64], init = "zeros" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""


def dot_spec(**kw):
    return spec("dot", DOT_ARGS, **kw)


def candidate(source: str, sp, chain) -> str:
    """The transform generator's candidate for ``chain`` on ``source``: compiled with NVRTC for the spec's arch
    (helpers and all); returns its kernel text."""
    ctx = make_ctx(source, sp)
    out = run_chain(unit(source, sp), chain)
    cand = TransformGenerator().candidate(ctx, out, chain)
    assert cand is not None and all(cand.params[f"pass:{p.name}"] == 1 for p in chain)
    r = compile_candidate(cand, sp.arch)
    assert not isinstance(r, CompileFailed), r.log
    assert r.resources.spill_stores == 0 and r.resources.local_bytes == 0
    return cand.kernel_text


def kernel_part(text: str) -> str:
    """The kernel definition of a candidate's text (its helpers left out)."""
    return text[text.index("__global__"):]


# ---------------------------------------------------------------- rewrites


def test_dot_product_accumulates_in_a_register_and_lane_0_adds_the_warps_sum():
    sp = dot_spec()
    u = unit(DOT, sp)
    assert AGG.why_not(u) is None
    text = kernel_part(candidate(DOT, sp, [AGG]))
    assert "float ptxf_acc0 = 0.0f;" in text and "bool ptxf_hit0 = false;" in text
    assert "if (i < N) { ptxf_acc0 += x[i] * y[i]; ptxf_hit0 = true; }" in text
    assert text.count("atomicAdd(") == 1 and "if (ptxf_warp_lane() == 0u) atomicAdd(out, ptxf_acc0);" in text
    assert "__ballot_sync(ptxf_lanes, ptxf_hit0)" in text and "ptxf_warp_fold(ptxf_acc0, ptxf_lanes" in text
    # the combine is the last thing the kernel does, outside the bounds check: every lane reaches it
    assert text.index("if (i < N)") < text.index("ptxf_warp_lanes()")
    assert AGG.apply(u).launch == u.launch


def test_chained_after_grid_stride_one_atomic_per_warp_for_the_whole_kernel():
    sp = dot_spec()
    gs = GridStridePass()
    assert gs.applies(unit(DOT, sp))  # the braceless 'if (i < N) stmt;' guard is grid_stride's too
    text = kernel_part(candidate(DOT, sp, [gs, AGG]))
    loop = text.index("for (int i = ")
    loop_end = text.index("ptxf_hit0 = true;") + len("ptxf_hit0 = true;")
    assert text.index("float ptxf_acc0") < loop < loop_end < text.index("atomicAdd(")
    assert text.count("atomicAdd(") == 1  # after the loop, once per warp
    # the generator proposes the chain
    ctx = make_ctx(DOT, sp)
    names = [[p.name for p in c] for c in plan_chains(unit(DOT, sp))]
    assert ["atomic_agg"] in names
    assert any("grid_stride" in c and "atomic_agg" in c and c.index("grid_stride") < c.index("atomic_agg") for c in names)
    cands = TransformGenerator().propose(ctx)
    assert any("pass:grid_stride" in c.params and "pass:atomic_agg" in c.params for c in cands)


def test_an_early_return_becomes_a_block_around_the_rest():
    sp = dot_spec()
    text = kernel_part(candidate(LOSS, sp, [AGG]))
    assert "return;" not in text
    assert "if (!(i >= N)) {" in text
    assert "ptxf_acc0 += d * d; ptxf_hit0 = true;" in text
    assert "atomicAdd(&out[0], ptxf_acc0);" in text
    # the combine sits after the turned-around block, at the top level
    assert text.index("if (!(i >= N))") < text.index("float d") < text.index("const unsigned ptxf_lanes")


def test_an_integer_count_uses_reduce_add_sync_and_stays_exact():
    sp = spec("count", COUNT_ARGS, rtol=0, atol=0, deterministic=True)
    assert AGG.why_not(unit(COUNT, sp)) is None  # integer sums are exact in any order
    text = kernel_part(candidate(COUNT, sp, [AGG]))
    assert "unsigned ptxf_acc0 = 0u;" in text  # no signed overflow in the register
    assert "ptxf_acc0 += (unsigned)(int)(1);" in text
    assert "__reduce_add_sync(ptxf_lanes, ptxf_acc0)" in text and "atomicAdd(cnt, (int)ptxf_acc0);" in text
    assert "ptxf_warp_fold" not in text  # not needed, so not emitted


@pytest.mark.parametrize("arch,reduce", [("sm_90a", True), ("sm_75", False)])
def test_integer_max_starts_from_the_lowest_int_and_folds_by_arch(arch, reduce):
    sp = spec("imax", IMAX_ARGS, rtol=0, atol=0, deterministic=True, arch=arch)
    text = kernel_part(candidate(IMAX, sp, [AGG]))
    assert "int ptxf_acc0 = (-2147483647 - 1);" in text
    assert "if (ptxf_v > ptxf_acc0) ptxf_acc0 = ptxf_v;" in text
    assert ("__reduce_max_sync(ptxf_lanes, ptxf_acc0)" in text) == reduce
    assert ("ptxf_warp_fold(" in text) == (not reduce)
    assert "atomicMax(best, ptxf_acc0);" in text


def test_64_bit_max_bitwise_ops_and_subtraction():
    args = """
  { name = "v", role = "in", dtype = "i32", shape = ["N"] },
  { name = "top", role = "inout", dtype = "i64", shape = [1], init = "zeros" },
  { name = "bits", role = "inout", dtype = "u32", shape = [2], init = "zeros" },
  { name = "left", role = "inout", dtype = "i32", shape = [1], init = "zeros" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
    src = """extern "C" __global__ void mix(const int* v, long long* top, unsigned* bits, int* left, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        atomicMax(top, 3000000000LL * v[i]);
        atomicOr(&bits[1], 1u << (v[i] & 31));
        atomicSub(left, v[i]);
    }
}
"""
    sp = spec("mix", args, rtol=0, atol=0, deterministic=True)
    text = kernel_part(candidate(src, sp, [AGG]))
    assert "long long ptxf_acc0 = (-9223372036854775807LL - 1);" in text and "ptxf_warp_fold(ptxf_acc0" in text
    assert ("[](long long ptxf_a, long long ptxf_b) { return (long long)(ptxf_a > ptxf_b ? ptxf_a : ptxf_b); }" in text
            and "atomicMax(top, ptxf_acc0);" in text)
    assert "unsigned ptxf_acc1 = 0u;" in text and "ptxf_acc1 |= (unsigned)(1u << (v[i] & 31));" in text
    assert "__reduce_or_sync(ptxf_lanes, ptxf_acc1)" in text and "atomicOr(&bits[1], ptxf_acc1);" in text
    assert "ptxf_acc2 += (unsigned)(int)(v[i]);" in text and "atomicSub(left, (int)ptxf_acc2);" in text
    assert text.count("__ballot_sync") == 3


def test_block_uniform_addresses_per_block_partial_sums_and_two_slots():
    args = """
  { name = "x", role = "in", dtype = "f32", shape = ["N"] },
  { name = "part", role = "inout", dtype = "f32", shape = ["G", 2], init = "zeros" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "G", role = "scalar", dtype = "i32", value = "G" },
"""
    src = """extern "C" __global__ void parts(const float* x, float* part, int N, int G)
{
    const int slot = 2 * (blockIdx.x % G);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float v = x[i];
    atomicAdd(&part[slot], v);
    atomicAdd(part + slot + 1, v * v);
}
"""
    sp = spec("parts", args, sizes="[{ N = 1000, G = 3 }]", bench="[{ N = 1048576, G = 3 }]")
    assert AGG.why_not(unit(src, sp)) is None
    text = kernel_part(candidate(src, sp, [AGG]))
    assert "atomicAdd(&part[slot], ptxf_acc0);" in text and "atomicAdd(part + slot + 1, ptxf_acc1);" in text
    assert "ptxf_acc0 += v; ptxf_hit0 = true;" in text and "ptxf_acc1 += v * v; ptxf_hit1 = true;" in text


def test_two_sites_on_one_address_share_one_accumulator():
    src = """extern "C" __global__ void dot(const float* x, const float* y, float* out, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        if (x[i] > 0.0f) atomicAdd(out, x[i]);
        else atomicAdd(out + 0, -y[i]);
    }
}
"""
    text = kernel_part(candidate(src, dot_spec(), [AGG]))
    assert "ptxf_acc1" not in text and text.count("ptxf_acc0 += ") == 2
    assert text.count("atomicAdd(") == 1


def test_a_histogram_is_left_alone_while_its_total_is_aggregated():
    args = HIST_ARGS + '  { name = "seen", role = "inout", dtype = "i32", shape = [1], init = "zeros" },\n'
    src = """extern "C" __global__ void hist(const int* x, int* hist, int N, int* seen)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        atomicAdd(&hist[x[i]], 1);
        atomicAdd(seen, 1);
    }
}
"""
    sp = spec("hist", args, rtol=0, atol=0, deterministic=True)
    text = kernel_part(candidate(src, sp, [AGG]))
    assert "atomicAdd(&hist[x[i]], 1);" in text  # untouched: its address differs between lanes
    assert "atomicAdd(seen, (int)ptxf_acc0);" in text and "ptxf_acc1" not in text


def test_not_applied_twice():
    sp = dot_spec()
    once = AGG.apply(unit(DOT, sp))
    assert "already aggregated" in AGG.why_not(once)


# ---------------------------------------------------------------- refusals


def _why(src: str, sp) -> str:
    why = AGG.why_not(unit(src, sp))
    assert why is not None and not AGG.applies(unit(src, sp))
    return why


def test_refuses_a_histogram_whose_address_depends_on_the_thread():
    src = """extern "C" __global__ void hist(const int* x, int* hist, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) atomicAdd(&hist[x[i]], 1);
}
"""
    assert "may differ between the lanes of a warp" in _why(src, spec("hist", HIST_ARGS))


@pytest.mark.parametrize("address", ["&out[threadIdx.x % 4]", "out + i / 1000000", "&out[k]"])
def test_refuses_addresses_built_from_thread_varying_values(address):
    src = f"""extern "C" __global__ void dot(const float* x, const float* y, float* out, int N)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int k = 0;
    if (i < N) {{
        atomicAdd({address}, x[i] * y[i]);
        k = k + 1;
    }}
}}
"""
    assert "may differ between the lanes" in _why(src, dot_spec())


def test_refuses_a_used_return_value():
    src = """extern "C" __global__ void count(const float* x, int* cnt, int N, float t)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        int slot = atomicAdd(cnt, 1);
        if (slot > 3) t = 0.0f;
    }
}
"""
    assert "return value is used" in _why(src, spec("count", COUNT_ARGS, rtol=0, atol=0))


@pytest.mark.parametrize("call", ["atomicExch(cnt, 1)", "atomicCAS(cnt, 0, 1)", "atomicInc((unsigned*)cnt, 7u)"])
def test_refuses_atomics_that_are_not_commutative_reductions(call):
    src = f"""extern "C" __global__ void count(const float* x, int* cnt, int N, float t)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N && x[i] > t) {call};
}}
"""
    why = _why(src, spec("count", COUNT_ARGS, rtol=0, atol=0))
    assert "not a commutative reduction" in why or "not p, p + e or &p[e]" in why


def test_refuses_a_float_sum_under_an_exact_spec():
    assert "exact results (rtol = atol = 0)" in _why(DOT, dot_spec(rtol=0, atol=0))


def test_refuses_a_float_sum_when_the_spec_wants_repeatable_bits():
    assert "deterministic" in _why(DOT, dot_spec(deterministic=True))


def test_refuses_a_buffer_also_read_in_the_kernel():
    src = """extern "C" __global__ void dot(const float* x, const float* y, float* out, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N && out[0] < 1e30f) atomicAdd(out, x[i] * y[i]);
}
"""
    assert "also used outside its atomics" in _why(src, dot_spec())


def test_refuses_two_kinds_of_atomic_on_one_buffer():
    src = """extern "C" __global__ void imax(const int* v, int* best, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { atomicMax(best, v[i]); atomicAdd(best + 1, 1); }
}
"""
    assert "more than one kind of atomic" in _why(src, spec("imax", IMAX_ARGS))


def test_refuses_a_return_that_is_not_a_top_level_guard():
    src = """extern "C" __global__ void dot(const float* x, const float* y, float* out, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = i; k < N; k += gridDim.x * blockDim.x) {
        if (x[k] != x[k]) return;
        atomicAdd(out, x[k] * y[k]);
    }
}
"""
    assert "a return other than a top-level" in _why(src, dot_spec())


def test_refuses_a_kernel_without_atomics():
    src = """extern "C" __global__ void dot(const float* x, const float* y, float* out, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[0] = x[i] * y[i];
}
"""
    assert _why(src, dot_spec()) == "no atomic in the kernel"


# ---------------------------------------------------------------- the example


def test_the_dot_atomic_example_gets_atomic_agg_alone_and_after_grid_stride():
    ctx = example_ctx("dot_atomic")
    cands = TransformGenerator().propose(ctx)
    agg = [c for c in cands if "pass:atomic_agg" in c.params]
    assert any(len([k for k in c.params if k.startswith("pass:")]) == 1 for c in agg)
    chained = [c for c in agg if "pass:grid_stride" in c.params]
    assert chained
    for c in agg:
        r = compile_candidate(c, ctx.spec.arch)
        assert not isinstance(r, CompileFailed), r.log
        kernel = kernel_part(c.kernel_text)
        assert len(re.findall(r"\batomicAdd\(", kernel)) == 1 and "ptxf_warp_fold(" in kernel
    assert all("for (int i = " in c.kernel_text for c in chained)


def test_two_early_returns_nest_and_a_uniform_local_may_build_the_address():
    src = """extern "C" __global__ void dot(const float* x, const float* y, float* out, int N)
{
    const int base = blockIdx.y * N;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float a = x[i];
    if (a != a) { return; }
    float b = y[i];
    atomicAdd(out + 0 * base, a * b);
}
"""
    text = kernel_part(candidate(src, dot_spec(), [AGG]))
    assert "return;" not in text
    outer, inner = text.index("if (!(i >= N)) {"), text.index("if (!(a != a)) {")
    assert outer < text.index("float a = x[i];") < inner < text.index("ptxf_acc0 += a * b;") < text.index("ptxf_warp_lanes()")
    assert "atomicAdd(out + 0 * base, ptxf_acc0);" in text
    # declared after the first early return, the same local is not visible at the end: refused
    late = src.replace("    const int base = blockIdx.y * N;\n", "").replace("    float b = y[i];", "    const int base = blockIdx.y * N;\n    float b = y[i];")
    assert "may differ between the lanes" in AGG.why_not(unit(late, dot_spec()))


@pytest.mark.parametrize("lanes", ["auto", 32, 8])
def test_after_rowpar_the_first_lanes_row_values_are_added_once_per_warp(lanes):
    """A row's sum added to a total: rowpar leaves the atomic to each row's first lane, atomic_agg folds those per warp
    (a warp a row: one atomic a warp already, nothing to fold)."""
    from ptxfactory.search.generators.transform import PASSES
    from ptxfactory.search.generators.transform.rowpar import RowParallelPass

    args = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "total", role = "inout", dtype = "f32", shape = [1], init = "zeros" },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
    src = """extern "C" __global__ void sumsq(const float* x, float* total, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float s = 0.0f;
    for (int j = 0; j < N; j++) s += x[(size_t)r * N + j] * x[(size_t)r * N + j];
    atomicAdd(total, s);
}
"""
    sp = spec("sumsq", args, grid='["cdiv(M, 128)"]', block="[128]", sizes="[{ M = 7, N = 100 }]",
              bench="[{ M = 4096, N = 4096 }]")
    rowpar = next(p for p in PASSES if isinstance(p, RowParallelPass) and p.lanes == lanes)
    if lanes == 32:
        assert "once per block or warp already" in AGG.why_not(rowpar.apply(unit(src, sp)))
        return
    text = kernel_part(candidate(src, sp, [rowpar, AGG]))
    assert "if (ptxf_lane == 0u) {" in text and "ptxf_acc0 += s; ptxf_hit0 = true;" in text
    assert text.count("atomicAdd(") == 1 and "return;" not in text


def test_the_one_statement_guard_is_also_read_by_grid_stride_and_vectorize():
    """grid_stride.element_guard takes ``if (i < n) stmt;`` as it takes ``if (i < n) { stmt; }`` (the naive
    reductions' form); the passes that read it rewrite and compile it alike."""
    from ptxfactory.search.generators.transform.vectorize import VectorizePass

    from test_transform import elementwise_spec

    src = """extern "C" __global__ void axpy(const float* a, float* c, float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i] * 2.0f + c[i];
}
"""
    sp = elementwise_spec()
    text = kernel_part(candidate(src, sp, [GridStridePass()]))
    assert "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += " in text and "if (i < n)" not in text
    text = kernel_part(candidate(src, sp, [VectorizePass()]))
    assert "reinterpret_cast<uint4*>(b + ptxf_v0)" in text


@pytest.mark.parametrize("guard", ["tid == 0", "threadIdx.x == 0", "0 == lane && tid < 64", "(threadIdx.x & 31) == 0"])
def test_refuses_an_atomic_one_thread_of_a_block_or_warp_issues(guard):
    """A shared-memory reduction's last step is already one atomic per block (or warp): a register and a ballot
    per warp there would only add work (found by a new user's block-sum kernel)."""
    src = f"""extern "C" __global__ void dot(const float* x, const float* y, float* out, int N)
{{
    __shared__ float cache[256];
    int tid = threadIdx.x;
    int lane = threadIdx.x % 32;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    cache[tid] = (i < N) ? x[i] * y[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (tid < s) cache[tid] += cache[tid + s];
        __syncthreads();
    }}
    if ({guard}) atomicAdd(out, cache[0]);
}}
"""
    assert "once per block or warp already" in _why(src, dot_spec())
    # a guard on the element, on a lane of a sub-warp group (several atomics a warp), or where the thread test is not
    # a conjunct of its own (negated, or'd, compared), is not one thread's (the last three: a review's false refusals)
    for other in ("i == 0", "threadIdx.x % 8 == 0", "i < N && !(threadIdx.x == 0)",
                  "i < N && (threadIdx.x == 0 || x[i] > 0.0f)", "i < N && (threadIdx.x == 0) == false"):
        assert "once per block or warp" not in (AGG.why_not(unit(src.replace(f"if ({guard})", f"if ({other})"), dot_spec())) or "")


AMAX_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N"] },
  { name = "amax", role = "inout", dtype = "f32", shape = [1], init = "zeros" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
AMAX = """extern "C" __global__ void amax(const float* x, float* amax, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float v = fabsf(x[i]);
        atomicMax((int*)amax, __float_as_int(v));
    }
}
"""


@pytest.mark.parametrize("view", ["(int*)amax", "reinterpret_cast<int*>(amax)", "(unsigned int*)amax"])
def test_a_float_max_through_the_int_atomic_is_aggregated_on_the_view(view):
    """A helper's new user (2026-12-05): max |x| into a float through ``atomicMax((int*)amax, __float_as_int(v))``
    (an FP8/int8 scale's amax). The address is a view of amax's elements as int: the register and the shuffles are
    int (the same order as the atomics': exact), one atomic per warp on the same view (it was refused: "the address
    is not p, p + e or &p[e]"); after grid_stride one per warp in all."""
    src = AMAX.replace("(int*)amax", view)
    sp = spec("amax", AMAX_ARGS, rtol=0, atol=0)
    assert AtomicAggPass().applies(unit(src, sp))
    text = kernel_part(candidate(src, sp, [GridStridePass(), AtomicAggPass()]))
    ctype = "unsigned int" if "unsigned" in view else "int"
    assert f"{ctype} ptxf_acc0 = " in text and f"atomicMax({view}, ptxf_acc0);" in text
    assert "__reduce_max_sync(" in text


@pytest.mark.parametrize("view, why", [
    ("(long long*)amax", "of another width or kind"),   # 8-byte elements over a float buffer
    ("(float**)amax", "the address is not"),            # no element view
])
def test_a_view_of_another_width_is_refused(view, why):
    sp = spec("amax", AMAX_ARGS, rtol=0, atol=0)
    reason = AtomicAggPass().why_not(unit(AMAX.replace("(int*)amax", view), sp))
    assert reason is not None and why in reason, reason


def test_a_buffer_updated_through_views_of_two_types_is_refused():
    """The red team (2026-12-05): ``atomicMax(m, v)`` beside ``atomicMax((unsigned int*)m, u)`` on an int buffer were one
    accumulator of the first site's type (a signed max of an unsigned one: 0 where the original ends at 0xffffffff)."""
    args = """
  { name = "x", role = "in", dtype = "i32", shape = ["N"] },
  { name = "m", role = "inout", dtype = "i32", shape = [1], init = "zeros" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
    src = """extern "C" __global__ void mx(const int* x, int* m, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { atomicMax(m, x[i]); atomicMax((unsigned int*)m, (unsigned int)x[i] - 16u); }
}
"""
    sp = spec("mx", args, rtol=0, atol=0)
    reason = AtomicAggPass().why_not(unit(src, sp))
    assert reason is not None and "more than one element type" in reason, reason
