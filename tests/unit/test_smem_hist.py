"""CPU tests of the ``smem_hist`` pass (a histogram's global atomics -> a shared-memory copy per block, merged once per bin).

Histograms written the way a first version is: what the pass rewrites (the block's copy zeroed, the atomics
redirected to it, the merge of nonzero bins, dynamic shared memory in the launch for a bin count known at
launch, a static array for a literal one), how it composes with ``grid_stride``, what it refuses and why,
and every output compiled with NVRTC through the transform generator's candidate.
"""
from __future__ import annotations

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import evaluate
from ptxfactory.search.generators.transform import TransformGenerator, run_chain
from ptxfactory.search.generators.transform.grid_stride import GridStridePass
from ptxfactory.search.generators.transform.smem_hist import MAX_BYTES, SmemHistPass

from test_atomic_agg import kernel_part, spec
from test_transform import example_ctx, make_ctx, unit, unit_from_context

HIST = SmemHistPass()
GS = GridStridePass()

ARGS = """
  { name = "x", role = "in", dtype = "i32", shape = ["N"], init = "randint(0, B)" },
  { name = "hist", role = "inout", dtype = "i32", shape = ["B"], init = "zeros" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "B", role = "scalar", dtype = "i32", value = "B" },
"""
SRC = """extern "C" __global__ void hist(const int* x, int* hist, int N, int B)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) atomicAdd(&hist[x[i]], 1);
}
"""
SIZES = "[{ N = 1000, B = 64 }]"
BENCH = "[{ N = 16777216, B = 256 }]"


def hist_spec(args=ARGS, **kw):
    kw.setdefault("sizes", SIZES)
    kw.setdefault("bench", BENCH)
    return spec("hist", args, rtol=0, atol=0, deterministic=True, **kw)


def candidate(source: str, sp, chain) -> tuple[str, object]:
    """The generator's candidate for ``chain``, compiled with NVRTC; (its kernel text, its launch)."""
    ctx = make_ctx(source, sp)
    cand = TransformGenerator().candidate(ctx, run_chain(unit(source, sp), chain), chain)
    assert cand is not None and all(cand.params[f"pass:{p.name}"] == 1 for p in chain)
    r = compile_candidate(cand, sp.arch)
    assert not isinstance(r, CompileFailed), r.log
    return kernel_part(cand.kernel_text), cand.launch


def test_after_grid_stride_a_block_copy_in_dynamic_shared_memory():
    sp = hist_spec()
    assert "grid_stride first" in HIST.why_not(unit(SRC, sp))  # 256 threads, 256 bins at the bench size: no gain alone
    text, launch = candidate(SRC, sp, [GS, HIST])
    assert "extern __shared__ int ptxf_hist[];" in text
    assert "atomicAdd(&ptxf_hist[x[i]], 1);" in text
    assert text.index("ptxf_hist[ptxf_b] = (int)0;") < text.index("__syncthreads();") < text.index("for (int i = ")
    merge = text[text.index("for (int i = "):]
    assert "__syncthreads();" in merge and "if (ptxf_c != (int)0) atomicAdd(&hist[ptxf_b], ptxf_c);" in merge
    assert text.count("atomicAdd(&hist[") == 1
    assert evaluate(launch.shared_mem, {"N": 5, "B": 100}) == 400


def test_a_literal_bin_count_is_a_static_array_and_a_big_block_pays_alone():
    args = ARGS.replace('shape = ["B"]', "shape = [16]").replace('init = "randint(0, B)"', 'init = "randint(0, 16)"')
    src = SRC.replace(", int B)", ")")
    args = args.replace('  { name = "B", role = "scalar", dtype = "i32", value = "B" },\n', "")
    sp = hist_spec(args, sizes="[{ N = 1000 }]", bench="[{ N = 16777216 }]")
    assert HIST.why_not(unit(src, sp)) is None  # 256 threads per block for 16 bins
    text, launch = candidate(src, sp, [HIST])
    assert "__shared__ int ptxf_hist[16];" in text and "extern" not in text.split("void", 1)[1]
    assert launch == unit(src, sp).launch


def test_an_early_return_is_turned_around_so_every_thread_meets_the_barriers():
    src = """extern "C" __global__ void hist(const int* x, int* hist, int N, int B)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) {
        if (x[i] < 0) continue;
        atomicAdd(hist + x[i], 1);
    }
}
"""
    text, _ = candidate(src, hist_spec(), [HIST])
    assert "atomicAdd(ptxf_hist + x[i], 1);" in text
    guarded = """extern "C" __global__ void hist(const int* x, int* hist, int N, int B)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    atomicAdd(&hist[x[i]], 1);
}
"""
    text, _ = candidate(guarded, hist_spec(), [GS, HIST])  # grid_stride takes the guard; then no return is left
    assert "return;" not in text


def test_composes_with_atomic_agg_on_a_total():
    args = ARGS + '  { name = "seen", role = "inout", dtype = "i32", shape = [1], init = "zeros" },\n'
    src = """extern "C" __global__ void hist(const int* x, int* hist, int N, int B, int* seen)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        atomicAdd(&hist[x[i]], 1);
        atomicAdd(seen, 1);
    }
}
"""
    from ptxfactory.search.generators.transform.atomic_agg import AtomicAggPass

    text, _ = candidate(src, hist_spec(args), [GS, AtomicAggPass(), HIST])
    assert "atomicAdd(&ptxf_hist[x[i]], 1);" in text and "atomicAdd(seen, (int)ptxf_acc0);" in text


def _why(src, sp) -> str:
    why = HIST.why_not(unit(src, sp))
    assert why is not None and not HIST.applies(unit(src, sp))
    return why


LOOPED = """extern "C" __global__ void hist(const int* x, int* hist, int N, int B)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) atomicAdd(&hist[x[i]], 1);
}
"""


def test_refuses_too_many_bins_for_shared_memory():
    n = MAX_BYTES // 4 + 1
    assert "of shared memory per block" in _why(LOOPED, hist_spec(bench=f"[{{ N = 16777216, B = {n} }}]"))


def test_refuses_a_bin_count_the_kernel_does_not_receive():
    src = LOOPED.replace(", int B)", ")")
    args = ARGS.replace('  { name = "B", role = "scalar", dtype = "i32", value = "B" },\n', "")
    assert "reaches the kernel as no scalar argument" in _why(src, hist_spec(args))


def test_refuses_a_histogram_also_read_and_a_used_return_value():
    read = LOOPED.replace("atomicAdd(&hist[x[i]], 1);", "{ if (hist[0] < 0) break; atomicAdd(&hist[x[i]], 1); }")
    assert "also used outside its atomicAdd" in _why(read, hist_spec())
    used = LOOPED.replace("atomicAdd(&hist[x[i]], 1);", "{ int old = atomicAdd(&hist[x[i]], 1); if (old < 0) break; }")
    assert "return value is used" in _why(used, hist_spec())


def test_refuses_a_float_histogram_under_a_deterministic_spec():
    args = ARGS.replace('{ name = "hist", role = "inout", dtype = "i32"', '{ name = "hist", role = "inout", dtype = "f32"')
    src = LOOPED.replace("int* hist", "float* hist").replace("atomicAdd(&hist[x[i]], 1);", "atomicAdd(&hist[x[i]], 0.5f);")
    assert "floating-point histogram" in _why(src, hist_spec(args))


def test_refuses_a_return_inside_the_loop_and_existing_dynamic_shared_memory():
    ret = LOOPED.replace("atomicAdd(&hist[x[i]], 1);", "{ if (x[i] < 0) return; atomicAdd(&hist[x[i]], 1); }")
    assert "block's barriers" in _why(ret, hist_spec())
    dyn = LOOPED.replace("{\n    for", "{\n    extern __shared__ int scratch[];\n    for")
    assert "dynamic shared memory" in _why(dyn, hist_spec())


def test_the_histogram_example_gets_smem_hist_after_grid_stride():
    ctx = example_ctx("histogram")
    assert "grid_stride first" in HIST.why_not(unit_from_context(ctx))
    cands = [c for c in TransformGenerator().propose(ctx) if "pass:smem_hist" in c.params]
    # each after a pass that gives every thread a loop over elements (grid_stride's, or coarsen's K per thread)
    assert cands and all("pass:grid_stride" in c.params or any(k.startswith("pass:coarsen") for k in c.params) for c in cands)
    assert any("pass:grid_stride" in c.params for c in cands)
    for c in cands:
        r = compile_candidate(c, ctx.spec.arch)
        assert not isinstance(r, CompileFailed), r.log
        for size in ctx.spec.check.sizes + ctx.spec.bench.sizes:
            assert evaluate(c.launch.shared_mem, size) == 4 * size["B"]


def test_refuses_a_reduction_to_one_address_which_is_atomic_agg_s():
    ctx = example_ctx("dot_atomic")  # out: a 1-element buffer, every thread's atomicAdd to it
    assert "atomic_agg's" in HIST.why_not(unit_from_context(ctx))
    assert not any("pass:smem_hist" in c.params for c in TransformGenerator().propose(ctx))
