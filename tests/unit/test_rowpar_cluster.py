"""CPU tests of ``rowpar_cluster*`` (one thread per row -> a thread block cluster of C blocks per row).

When it is proposed (the GPU's facts, sm_90, few rows), what the rewrite writes (the cluster attribute, the lane, the
combines and barriers made cluster-wide, the launch), every output compiled with NVRTC for a cluster the harness reads
back from the PTX, and a g++ emulation: the rewritten kernels run with a cluster's blocks as concurrent threads (the
helpers replaced by host models with the same contract: every thread of the cluster gets the combined value), against
the original kernel run one thread per row, on rows shorter and longer than the cluster's lanes.
"""
from __future__ import annotations

import dataclasses
import re

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate, compile_ptx
from ptxfactory.harness.static_checks import cluster_dims, kernel_ptx
from ptxfactory.protocol import GpuFacts, evaluate
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, refusals
from ptxfactory.search.generators.transform import rowpar_cluster as rc
from ptxfactory.search.generators.transform.grid_stride import FACTS_NOTE
from ptxfactory.search.generators.transform.rowpar_cluster import RowClusterPass

from _host_cuda import run_host
from test_rowpar import ARGMAX, ARGMAX_ARGS, L2NORM, ROW_ARGS, XENT, XENT_ARGS
from test_transform import make_ctx, spec_for, unit

H200 = GpuFacts(name="test H200", arch="sm_90a", sm_count=132, l2_bytes=50 << 20, copy_gbps=4000.0, peak_gbps=4800.0)

STATS_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "mean", role = "out", dtype = "f32", shape = ["M"] },
  { name = "var", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
WELFORD = """
extern "C" __global__ void stats(const float* x, float* mean, float* var, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    int n = 0;
    float mu = 0.0f, q = 0.0f;
    for (int j = 0; j < N; j++) {
        float v = x[(size_t)r * N + j];
        n += 1;
        float d = v - mu;
        mu += d / n;
        q += d * (v - mu);
    }
    mean[r] = mu;
    var[r] = q / N;
}
"""
# a row's sum stored, then read back by every lane (a barrier across the cluster), then a centring pass
CENTRE = """
extern "C" __global__ void centre(const float* x, float* mean, float* y, int M, int N)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < M; r += blockDim.x * gridDim.x) {
        float s = 0.0f;
        for (int j = 0; j < N; j++) s += x[(size_t)r * N + j];
        mean[r] = s / N;
        for (int j = 0; j < N; j++) y[(size_t)r * N + j] = x[(size_t)r * N + j] - mean[r];
    }
}
"""
CENTRE_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "mean", role = "out", dtype = "f32", shape = ["M"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
XENT_N = XENT.replace("xent(", "xent_n(").replace("int V)", "int N)").replace("V", "N")
XENT_N_ARGS = XENT_ARGS.replace('"V"', '"N"').replace("(0, V)", "(0, N)")

KERNELS = {  # name -> (source, args)
    "l2norm": (L2NORM, ROW_ARGS),
    "xent": (XENT_N, XENT_N_ARGS),
    "argmax": (ARGMAX, ARGMAX_ARGS),
    "welford": (WELFORD, STATS_ARGS),
    "centre": (CENTRE, CENTRE_ARGS),
}


def few_rows_spec(args: str, rows: int = 64, n: int = 1 << 20, src: str = L2NORM):
    """A spec for ``src``'s kernel with a bench size of ``rows`` rows of ``n`` elements (64 x 2^20: a BatchNorm's
    channels)."""
    s = spec_for(re.search(r"void\s+(?:__attribute__\(\(.*?\)\)\s+)?(\w+)\(", src).group(1), args, grid='["cdiv(M, 128)"]', sizes="[{ M = 7, N = 100 }]")
    return s.model_copy(update={"bench": s.bench.model_copy(update={"sizes": [{"M": rows, "N": n}]})})


def with_facts(u, facts=H200):
    return dataclasses.replace(u, notes={**u.notes, FACTS_NOTE: facts})


# -- when it is proposed ------------------------------------------------------------------------------------------


def test_proposed_only_with_the_gpus_facts_on_sm90_and_few_rows():
    spec = few_rows_spec(ROW_ARGS)
    u = unit(L2NORM, spec)
    assert "facts" in RowClusterPass(8).why_not(u)
    assert "sm_90 or later" in RowClusterPass(8).why_not(with_facts(u, H200.model_copy(update={"arch": "sm_80"})))
    # 64 rows on 132 SMs x 2 blocks of 1024: a cluster of C is proposed while rows x C / 2 < 264
    assert [c for c in rc.CLUSTER_SIZES if RowClusterPass(c).why_not(with_facts(u)) is None] == [8, 4, 2]
    many = with_facts(unit(L2NORM, few_rows_spec(ROW_ARGS, rows=4096, n=4096)))
    assert "a block a row already fills a wave" in RowClusterPass(2).why_not(many)
    assert "8 blocks a row already fill a wave" in RowClusterPass(16).why_not(with_facts(unit(L2NORM, spec)))
    # 16 rows (a LayerNorm over whole samples): every size, the largest first in the pass list
    sixteen = with_facts(unit(L2NORM, few_rows_spec(ROW_ARGS, rows=16)))
    names = [p.name for p in PASSES if isinstance(p, RowClusterPass) and p.why_not(sixteen) is None]
    assert names == ["rowpar_cluster16", "rowpar_cluster8", "rowpar_cluster4", "rowpar_cluster2"]


def test_rows_shorter_than_the_cluster_and_a_cluster_attribute_already_there_are_refused():
    short = with_facts(unit(L2NORM, few_rows_spec(ROW_ARGS, rows=16, n=4096)))
    assert "fewer than the 8192 lanes" in RowClusterPass(8).why_not(short)
    assert RowClusterPass(4).why_not(short) is None
    spec = few_rows_spec(ROW_ARGS)
    asked = L2NORM.replace("void k(", "void __attribute__((cluster_dims(2, 1, 1))) k(")
    assert "already asks for a thread block cluster" in RowClusterPass(4).why_not(with_facts(unit(asked, spec)))


def test_the_refusal_list_names_the_reason_once_per_reason():
    spec = few_rows_spec(ROW_ARGS, rows=4096, n=4096)
    reasons = refusals(with_facts(unit(L2NORM, spec)))
    (entry,) = [(names, r) for names, r in reasons if "rowpar_cluster" in names]
    assert entry[0] == "rowpar_cluster16, rowpar_cluster8, rowpar_cluster4, rowpar_cluster2"
    assert "a block a row already fills a wave of 264 blocks" in entry[1]


# -- what it writes --------------------------------------------------------------------------------------------------


def test_the_rewrite_spans_the_cluster():
    spec = few_rows_spec(ROW_ARGS)
    out = RowClusterPass(8).apply(with_facts(unit(L2NORM, spec)))
    t = out.text
    assert "__attribute__((cluster_dims(8, 1, 1))) k(" in t
    assert "int r = (int)(blockIdx.x / 8u);" in t
    assert "const unsigned ptxf_lane = (blockIdx.x % 8u) * 1024u + threadIdx.x;" in t
    assert t.count("j += 8192") == 2 and "ss = ptxf_cluster_reduce<8>(ss," in t
    assert out.launch.block == ["1024"] and evaluate(out.launch.grid[0], {"M": 64, "N": 1}) == 512
    names = [n for n, _ in out.helpers]
    assert names.index("ptxf_block_reduce") < names.index("ptxf_cluster_reduce")
    assert {"ptxf_cluster_sync", "ptxf_peer"} <= set(names)


def test_a_buffer_written_then_read_by_other_lanes_gets_a_cluster_barrier():
    spec = few_rows_spec(CENTRE_ARGS, src=CENTRE)
    out = RowClusterPass(4).apply(with_facts(unit(CENTRE, spec)))
    t = out.text
    assert "r = (int)(blockIdx.x / 4u)" in t and "r += (int)(gridDim.x / 4u)" in t
    store = t.index("mean[r] = s / N;")
    assert t.index("if (ptxf_lane == 0u)") < store < t.index("ptxf_cluster_sync();", store) < t.index("y[(size_t)r")
    assert "__syncthreads();" not in t


@pytest.mark.parametrize("name", KERNELS)
def test_every_kernel_compiles_for_the_cluster_the_harness_reads(name):
    src, args = KERNELS[name]
    spec = few_rows_spec(args, src=src)
    p = RowClusterPass(8)
    out = p.apply(with_facts(unit(src, spec)))
    cand = TransformGenerator().candidate(make_ctx(src, spec), out, [p])
    assert cand is not None and cand.params["pass:rowpar_cluster8"] == 1
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.resources.spill_stores == 0 and r.resources.registers <= 64  # 1024 threads a block: 64 registers at most
    ptx = compile_ptx(cand, "sm_90a")
    assert cluster_dims(kernel_ptx(ptx, cand.kernel_name)) == (8, 1, 1)
    assert "mapa" in ptx and "barrier.cluster.arrive" in ptx


# -- a g++ emulation of the rewritten kernels against the originals ------------------------------------------------

# Host models of the helpers: a cluster's blocks run as threads together; each combine writes every thread's value to a
# slot, waits for the cluster, folds all slots in one order (so every thread gets the same value, as on the GPU), and
# waits again before a slot is reused. The block-level helpers are never called by the rewritten kernels directly.
HOST = r"""
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__
#define __restrict__
struct Dim { unsigned x = 0, y = 0, z = 0; };
thread_local Dim threadIdx, blockIdx;
Dim blockDim, gridDim;
static unsigned g_threads;                       // threads of a cluster
static std::unique_ptr<std::barrier<>> g_cluster;
inline void ptxf_cluster_sync() { g_cluster->arrive_and_wait(); }
inline unsigned ptxf_slot() { return (blockIdx.x % CL) * blockDim.x + threadIdx.x; }
template <typename T> std::vector<T>& slots() { static std::vector<T> s(1 << 16); return s; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
template <typename T> T __shfl_xor_sync(unsigned, T v, int) { return v; }
template <int C, typename T, typename F> T ptxf_cluster_reduce(T v, F op) {
    slots<T>()[ptxf_slot()] = v;
    ptxf_cluster_sync();
    v = slots<T>()[0];
    for (unsigned i = 1; i < g_threads; ++i) v = op(v, slots<T>()[i]);
    ptxf_cluster_sync();
    return v;
}
template <int C, typename T, typename K, typename B> void ptxf_cluster_reduce_arg(T& v, K& k, B better) {
    slots<T>()[ptxf_slot()] = v;
    slots<K>()[ptxf_slot() + (1 << 15)] = k;
    ptxf_cluster_sync();
    v = slots<T>()[0];
    k = slots<K>()[1 << 15];
    for (unsigned i = 1; i < g_threads; ++i)
        if (better(slots<T>()[i], slots<K>()[i + (1 << 15)], v, k)) { v = slots<T>()[i]; k = slots<K>()[i + (1 << 15)]; }
    ptxf_cluster_sync();
}
template <int C, typename P> void ptxf_cluster_merge(P& p) {
    static std::vector<P> s(1 << 14);
    s[ptxf_slot()] = p;
    ptxf_cluster_sync();
    p = s[0];
    for (unsigned i = 1; i < g_threads; ++i) p.merge(s[i]);
    ptxf_cluster_sync();
}
"""


def _host_helpers(out) -> str:
    """The rewritten kernel's own tuple structs (ptxf_rn, ptxf_softmax, ptxf_welford), host-compiled; the rest modelled."""
    keep = [text for name, text in out.helpers if name in ("ptxf_rn", "ptxf_softmax", "ptxf_welford")]
    return "\n".join(keep).replace("static __device__", "static").replace("__device__", "")


def _program(src: str, out, args: str, cl: int) -> str:
    """A program that reads M, N and a seed, fills the inputs, runs the original (a thread per row, one at a time) and
    the rewrite (each cluster's blocks as concurrent threads), and prints the largest difference of each output."""
    names = re.findall(r'name = "(\w+)", role = "(\w+)", dtype = "(\w+)", shape = \[([^\]]*)\]', args)
    buffers = [(n, role, dtype, shape.replace('"', "").replace(",", " *")) for n, role, dtype, shape in names]
    ctype = {"f32": "float", "i32": "int"}
    fn = re.search(r"void\s+(\w+)\(", src).group(1)
    orig = src.replace('extern "C"', "").replace(f"void {fn}(", "void k_orig(")
    new = re.sub(r'extern "C"\s*', "", out.text).replace(f" {fn}(", " k_new(")
    new = re.sub(r"__attribute__\(\(cluster_dims\([^)]*\)\)\)\s*", "", new)
    lines = [f"#define CL {cl}", HOST, _host_helpers(out), orig, new, "int main(int argc, char** argv) {",
             "  int M = atoi(argv[1]), N = atoi(argv[2]); srand(atoi(argv[3]));"]
    for n, role, dtype, shape in buffers:
        t = ctype[dtype]
        lines.append(f"  std::vector<{t}> {n}_a({shape}), {n}_b({shape});")
        if role == "in":
            fill = "rand() % N" if dtype == "i32" else "(float)((rand() % 2001) - 1000) / 250.0f"
            lines.append(f"  for (auto& v : {n}_a) v = {fill}; {n}_b = {n}_a;")
        else:
            lines.append(f"  for (size_t i = 0; i < {n}_a.size(); ++i) {n}_a[i] = {n}_b[i] = ({t})-7;")
    a_args = ", ".join([f"{n}_a.data()" for n, *_ in buffers] + ["M", "N"])
    b_args = ", ".join([f"{n}_b.data()" for n, *_ in buffers] + ["M", "N"])
    lines += [
        "  blockDim = {128, 1, 1}; gridDim = {(unsigned)((M + 127) / 128), 1, 1};",
        "  for (unsigned b = 0; b < gridDim.x; ++b) for (unsigned t = 0; t < 128; ++t) {",
        f"    blockIdx.x = b; threadIdx.x = t; k_orig({a_args}); }}",
        f"  blockDim = {{{rc.CLUSTER_BLOCK}, 1, 1}}; gridDim = {{(unsigned)(M * CL), 1, 1}}; g_threads = CL * {rc.CLUSTER_BLOCK};",
        "  for (unsigned c = 0; c < (unsigned)M; ++c) {",
        "    g_cluster = std::make_unique<std::barrier<>>(g_threads);",
        "    std::vector<std::thread> ts;",
        "    for (unsigned i = 0; i < g_threads; ++i) ts.emplace_back([&, i] {",
        f"      blockIdx.x = c * CL + i / {rc.CLUSTER_BLOCK}; threadIdx.x = i % {rc.CLUSTER_BLOCK}; k_new({b_args}); }});",
        "    for (auto& th : ts) th.join();",
        "  }",
    ]
    for n, role, dtype, _ in buffers:
        if role != "in":
            lines.append(f"  {{ double d = 0; for (size_t i = 0; i < {n}_a.size(); ++i) d = fmax(d, fabs((double){n}_a[i] - (double){n}_b[i]) "
                         f"/ (1.0 + fabs((double){n}_a[i]))); printf(\"{n} %.3g\\n\", d); }}")
    lines.append("  return 0; }")
    return "\n".join(lines)


def _emulate(name: str, text: str | None, tmp_path, monkeypatch) -> list[tuple[int, int, dict[str, float]]]:
    """Builds the emulation of ``name``'s rewrite (``text``: a modified rewrite instead) with clusters of 4 blocks of 32
    threads (the pass's block size patched down, so a cluster is 128 host threads) and runs it on rows shorter and longer
    than a cluster's lanes; ``(M, N, {output: largest relative difference})`` per run."""
    import subprocess

    monkeypatch.setattr(rc, "CLUSTER_BLOCK", 32)
    src, args = KERNELS[name]
    out = RowClusterPass(4).apply(with_facts(unit(src, few_rows_spec(args, rows=4, n=1 << 12, src=src))))
    assert "* 32u + threadIdx.x" in out.text and "+= 128" in out.text
    if text is not None:
        out = dataclasses.replace(out, text=text(out.text))
    cpp, exe = tmp_path / "emu.cpp", tmp_path / "emu"
    cpp.write_text(_program(src, out, args, 4))
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", "-ffp-contract=off", "-pthread", str(cpp), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    runs = []
    for m, n, seed in ((3, 1000, 1), (2, 127, 2), (5, 1, 3), (1, 129, 4), (2, 0, 5)):
        if n == 0 and name in ("xent", "argmax"):
            continue  # the original reads the row's first element (or a label) even in an empty row
        run = subprocess.run([str(exe), str(m), str(n), str(seed)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        runs.append((m, n, {b: float(d) for b, d in (line.split() for line in run.stdout.strip().split("\n"))}))
    return runs


@pytest.mark.parametrize("name", KERNELS)
def test_host_emulation_agrees_with_the_original(name, tmp_path, monkeypatch):
    """The rewrite gives the original's outputs: exactly for an arg max, within float re-association for sums (rows up
    to 1000 elements: 1e-4 relative), every output written where the original writes it."""
    for m, n, diffs in _emulate(name, None, tmp_path, monkeypatch):
        assert diffs and all(d <= (0 if name == "argmax" else 1e-4) for d in diffs.values()), (name, m, n, diffs)


def test_the_emulation_fails_a_rewrite_whose_blocks_overlap(tmp_path, monkeypatch):
    """Every block starting its lanes at its own thread index (the cluster rank dropped) sums the row's first part four
    times: the emulation reports it."""
    runs = _emulate("l2norm", lambda t: t.replace("(blockIdx.x % 4u) * 32u + threadIdx.x", "threadIdx.x"), tmp_path, monkeypatch)
    assert any(d > 1e-2 for _, n, diffs in runs if n > 1 for d in diffs.values())


def test_vector_loops_widen_a_clusters_lanes():
    """vector_loops reads rowpar_cluster's lane (``(blockIdx.x % C) * 1024 + threadIdx.x``, the step C * 1024) as a
    group spanning the cluster's blocks, ``blockIdx.x / C`` uniform over it and ``blockIdx.x`` not: 16-byte loads a
    lane, the chain compiled (its exactness: test_vector_loops' host emulation, kind "cluster")."""
    from ptxfactory.search.generators.transform.vector_loops import VectorLoopsPass

    spec = few_rows_spec(ROW_ARGS)
    p, vl = RowClusterPass(8), VectorLoopsPass()
    split = p.apply(with_facts(unit(L2NORM, spec)))
    assert vl.why_not(split) is None
    out = vl.apply(split)
    assert "uint4" in out.text and "32768" in out.text  # 4 floats a lane, the step 8192 * 4
    cand = TransformGenerator().candidate(make_ctx(L2NORM, spec), out, [p, vl])
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    # a lane that reads blockIdx.x other than through the cluster's row is not uniform over the cluster
    odd = split.text.replace("for (int j = (0) + ptxf_lane; j < N; j += 8192) {",
                             "for (int j = (int)(blockIdx.x % 2u) + ptxf_lane; j < N; j += 8192) {", 1)
    assert odd != split.text
    widened = out.text.count("(transform vector_loops)")
    assert widened == 2 and vl.apply(dataclasses.replace(split, text=odd)).text.count("(transform vector_loops)") == 1
