"""CPU tests of the ``vector_loops`` pass (lane-strided row loops -> 16-byte loads and stores).

On small hand-written kernels: rowpar's split loops and block-per-row loops are widened (text, launch
kept, every output compiled with NVRTC and its PTX holding 16-byte loads and stores); the spec's
``align`` and ``constraints`` remove the runtime check; the loops it must refuse are left alone; and a
host emulation (g++, one thread after another) checks element for element that the original and the
rewritten kernels write the same outputs and the same per-row max and integer sum, at row lengths
around multiples of VEC, aligned and misaligned, with 16-byte accesses checked for range and alignment.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate, compile_ptx
from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import PASSES, TransformGenerator
from ptxfactory.search.generators.transform.ldg import LdgPass, StreamPass
from ptxfactory.search.generators.transform.restrict import RestrictPass
from ptxfactory.search.generators.transform.rowpar import RowParallelPass
from ptxfactory.search.generators.transform.unroll import UnrollPass
from ptxfactory.search.generators.transform.vector_loops import VectorLoopsPass

from test_rowpar import ARGMAX, ARGMAX_ARGS, L2NORM, ROW_ARGS, row_spec
from test_transform import make_ctx, spec_for, unit

VL = VectorLoopsPass()
V4_LOAD = re.compile(r"\bld\.global(\.nc|\.cs)?(\.L1::no_allocate)?\.v4\.(u32|b32|f32)")
V4_STORE = re.compile(r"\bst\.global(\.cs)?\.v4\.(u32|b32|f32)")


def rowpar(lanes):
    return next(p for p in PASSES if isinstance(p, RowParallelPass) and p.lanes == lanes)


def compiled_ptx(source: str, spec, out, chain) -> str:
    """The generator's candidate for ``out`` compiles with NVRTC (no spills); returns its PTX."""
    cand = TransformGenerator().candidate(make_ctx(source, spec), out, chain)
    assert cand is not None and cand.params["pass:vector_loops"] == 1 and cand.params["vec"] == 16
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.resources.spill_stores == 0 and r.resources.local_bytes == 0
    return compile_ptx(cand, "sm_90a")


@pytest.mark.parametrize("lanes", [32, 8, 256])
def test_rowpar_split_loops_are_widened(lanes):
    spec = row_spec()
    u = rowpar(lanes).apply(unit(L2NORM, spec))
    assert VL.why_not(u) is None
    out = VL.apply(u)
    text = out.text
    assert text.count("(transform vector_loops)") == 2  # the sum of squares and the map
    assert f"ptxf_vl_v += {lanes * 4})" in text and "(int)(ptxf_lane) * 4" in text
    assert "*reinterpret_cast<const uint4*>(&x[r * N + ptxf_vl_v]);" in text
    assert "*reinterpret_cast<uint4*>(&y[r * N + ptxf_vl_v]) = make_uint4(" in text
    # the runtime check compares the two buffers' offsets within 16 bytes; the original loop is the fallback
    assert "(reinterpret_cast<unsigned long long>(&x[r * N + ptxf_vl_a]) & 15ull) == ptxf_vl_m" in text
    assert text.count(f"for (int j = (0) + ptxf_lane; j < N; j += {lanes})") == 2
    # elements in order of j within a lane: element 0..3 of each chunk
    assert text.index("ptxf_vl_c0.x") < text.index("ptxf_vl_c0.y") < text.index("ptxf_vl_c0.z") < text.index("ptxf_vl_c0.w")
    assert out.launch == u.launch and out.helpers == u.helpers
    assert not VL.applies(out)  # not twice
    ptx = compiled_ptx(L2NORM, spec, out, [rowpar(lanes), VL])
    assert V4_LOAD.search(ptx) and V4_STORE.search(ptx)


BF16_ARGS = """
  { name = "x", role = "in", dtype = "bf16", shape = ["M", "N"] },
  { name = "w", role = "in", dtype = "bf16", shape = ["N"] },
  { name = "y", role = "out", dtype = "bf16", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
BF16_BLOCK_ROW = """#include <cuda_bf16.h>
extern "C" __global__ void k(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int M, int N)
{
    __shared__ float part[256];
    int row = blockIdx.x;
    if (row >= M) return;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        sum += v * v;
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x == 0) { float t = 0.0f; for (int k = 0; k < 256; ++k) t += part[k]; part[0] = rsqrtf(t / N + 1e-6f); }
    __syncthreads();
    float inv = part[0];
    for (int i = threadIdx.x; i < N; i += blockDim.x)
        y[(size_t)row * N + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * N + i]) * inv * __bfloat162float(w[i]));
}
"""


def test_block_per_row_bf16_eight_elements_per_lane():
    spec = row_spec(args=BF16_ARGS, grid='["M"]', block="[256]")
    u = unit(BF16_BLOCK_ROW, spec)
    assert VL.why_not(u) is None
    out = VL.apply(u)
    text = out.text
    assert text.count("(transform vector_loops)") == 2 and "// element 7" in text
    assert "ptxf_vl_v += (int)(blockDim.x) * 8)" in text
    assert "__ushort_as_bfloat16((unsigned short)(ptxf_vl_c0.w >> 16))" in text  # element 7 = the high half of word 3
    assert "(unsigned)__bfloat16_as_ushort((__nv_bfloat16)(ptxf_vl_c0_0)) | ((unsigned)__bfloat16_as_ushort" in text
    assert "/ 2u)" in text  # the head counts 2-byte elements
    assert "for (int k = 0; k < 256; ++k)" in text  # the first lane's serial loop is not lane-strided: left alone
    ptx = compiled_ptx(BF16_BLOCK_ROW, spec, out, [VL])
    assert V4_LOAD.search(ptx) and V4_STORE.search(ptx)
    # the literal block size as the step is the same group
    lit = BF16_BLOCK_ROW.replace("i += blockDim.x", "i += 256")
    assert VL.apply(unit(lit, spec)).text.count("ptxf_vl_v += 2048)") == 2
    # a step that is not the block: not the lanes' group
    assert not VL.applies(unit(BF16_BLOCK_ROW.replace("i += blockDim.x", "i += 128"), spec))


def test_spec_alignment_and_constraints_remove_the_check():
    aligned = ROW_ARGS.replace('shape = ["M", "N"] }', 'shape = ["M", "N"], align = 16 }')
    proven = spec_for("k", aligned, grid='["cdiv(M, 128)"]', sizes="[{ M = 7, N = 100 }]")
    proven = proven.model_copy(update={"constraints": ["N % 4 == 0"]})
    u = rowpar(32).apply(unit(L2NORM, proven))
    text = VL.apply(u).text
    assert "15ull" not in text and "else" not in text and "every buffer 16-byte aligned" in text
    assert "the head" not in text
    compiled_ptx(L2NORM, proven, VL.apply(u), [rowpar(32), VL])
    # no constraint on N (rows of odd length), or no align on a buffer: the runtime check stays
    for spec in (proven.model_copy(update={"constraints": ["N % 2 == 0"]}),
                 spec_for("k", ROW_ARGS, grid='["cdiv(M, 128)"]', sizes="[{ M = 7, N = 100 }]").model_copy(update={"constraints": ["N % 4 == 0"]})):
        assert "15ull" in VL.apply(rowpar(32).apply(unit(L2NORM, spec))).text
    # a loop starting at 1 is not on a 16-byte boundary even when the rows are
    start1 = L2NORM.replace("for (int j = 0; j < N; j++) {", "for (int j = 1; j < N; j++) {")
    assert VL.apply(rowpar(32).apply(unit(start1, proven))).text.count("15ull") == 1


EMBED_ARGS = """
  { name = "ids", role = "in", dtype = "i32", shape = ["T"], init = "randint(0, 8)" },
  { name = "table", role = "in", dtype = "f32", shape = ["8", "C"] },
  { name = "out", role = "out", dtype = "f32", shape = ["T", "C"] },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "C", role = "scalar", dtype = "i32", value = "C" },
"""
# the stored value reads the loop index outside any vectorised access (a gather through ids, a mask by column)
EMBED = """
extern "C" __global__ void emb(const int* ids, const float* table, float* out, int T, int C)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int id = ids[t];
    for (int c = 0; c < C; c++) {
        out[t * C + c] = (c <= t) ? table[id * C + c] : 0.0f;
    }
}
"""


def test_a_store_whose_value_reads_the_index_keeps_it_declared_per_element():
    """After ``stream`` the store is a ``__stcs(p, value)`` call; the index read in its value (not in an address the
    pass widens) must still be declared in each element's copy (it once was not: "identifier c is undefined")."""
    spec = spec_for("emb", EMBED_ARGS, grid='["cdiv(T, 128)"]', sizes="[{ T = 7, C = 100 }]")
    chain = [RestrictPass(), StreamPass(), rowpar(32), VL]
    u = unit(EMBED, spec)
    for p in chain[:-1]:
        u = p.apply(u)
    out = VL.apply(u)
    assert "const int c = ptxf_vl_v + 0;" in out.text, out.text
    compiled_ptx(EMBED, spec, out, chain)


def test_hints_keep_their_16_byte_forms():
    src = L2NORM.replace("float v = x[r * N + j];", "float v = x[(size_t)r * N + j];")
    spec = row_spec()
    u = rowpar(32).apply(StreamPass().apply(RestrictPass().apply(unit(src, spec))))
    out = VL.apply(u)
    assert "__ldcs(reinterpret_cast<const uint4*>((x + ((size_t)r * N + ptxf_vl_v))))" in out.text
    assert "__stcs(reinterpret_cast<uint4*>((y + (r * N + ptxf_vl_v))), make_uint4(" in out.text
    ptx = compiled_ptx(src, spec, out, [RestrictPass(), StreamPass(), rowpar(32), VL])
    assert re.search(r"ld\.global\.cs\.v4", ptx) and re.search(r"st\.global\.cs\.v4", ptx)
    # then unroll: the main loop (a rowpar lane start and a literal step) takes #pragma unroll 4
    assert "#pragma unroll 4\n" in UnrollPass().apply(out).text


def test_neighbours_stay_scalar_beside_the_vector():
    src = L2NORM.replace("y[r * N + j] = x[r * N + j] * inv;",
                         "y[r * N + j] = x[r * N + j] * inv + (j + 1 < N ? x[r * N + j + 1] : 0.0f) - (j > 0 ? x[r * N + j - 1] : 0.0f);")
    spec = row_spec()
    out = VL.apply(rowpar(32).apply(unit(src, spec)))
    assert out.text.count("(transform vector_loops)") == 2
    assert "x[r * N + j + 1]" in out.text and "x[r * N + j - 1]" in out.text  # scalar loads, j = ptxf_vl_v + k
    assert "const int j = ptxf_vl_v + 3;" in out.text
    assert "&x[r * N + ptxf_vl_a + 1]" not in out.text  # not part of the alignment check
    compiled_ptx(src, spec, out, [rowpar(32), VL])


def test_exact_specs_keep_max_and_integer_sums_refuse_float_sums():
    exact = row_spec().model_copy(update={"check": row_spec().check.model_copy(update={"rtol": 0.0, "atol": 0.0})})
    # rowpar keeps an exact spec's float sum serial, and refuses to run it whole on every lane (2026-12-05); a max is
    # exact: both loops split, both widened
    assert rowpar(32).why_not(unit(L2NORM, exact)) is not None
    src = L2NORM.replace("ss += v * v;", "ss = fmaxf(ss, v);")
    assert VL.apply(rowpar(32).apply(unit(src, exact))).text.count("(transform vector_loops)") == 2


def test_argmax_only_with_rowpars_index_aware_combine():
    spec = row_spec("argmax", ARGMAX_ARGS)
    u = rowpar(16).apply(unit(ARGMAX, spec))
    out = VL.apply(u)
    assert "(transform vector_loops)" in out.text and "const int j = ptxf_vl_v + 3;" in out.text
    compiled_ptx(ARGMAX, spec, out, [rowpar(16), VL])
    # written one block per row by hand, the combine after the loop is unknown: the arg reduction is refused
    hand = """
extern "C" __global__ void argmax(const float* x, float* best, int* where, int M, int N)
{
    int r = blockIdx.x;
    if (r >= M) return;
    float b = -1e30f;
    int w = 0;
    for (int j = threadIdx.x; j < N; j += blockDim.x) {
        float v = x[(size_t)r * N + j];
        if (v > b) { b = v; w = j; }
    }
    if (threadIdx.x == 0) { best[r] = b; where[r] = w; }
}
"""
    why = VL.why_not(unit(hand, row_spec("argmax", ARGMAX_ARGS, grid='["M"]')))
    assert why is not None and "index-aware combine" in why


LOOP_HEAD = ('extern "C" __global__ void k(const float* x, float* y, int M, int N)\n{\n'
             "    __shared__ float sh[128];\n    int r = blockIdx.x;\n    if (r >= M) return;\n")
REFUSED = {
    "a break": ("    for (int j = threadIdx.x; j < N; j += blockDim.x) { if (x[r * N + j] < 0.0f) break; y[r * N + j] = 1.0f; }\n",
                "break"),
    "a write at another index than its read": ("    for (int j = threadIdx.x; j < N; j += blockDim.x) y[r * N + j] = y[r * N + j + 1];\n",
                                               "another index"),
    "a conditional store": ("    for (int j = threadIdx.x; j < N; j += blockDim.x) if (x[r * N + j] > 0.0f) y[r * N + j] = 1.0f;\n",
                            "top-level"),
    "stride two": ("    for (int j = threadIdx.x; j < N; j += blockDim.x) y[r * N + 2 * j] = x[r * N + 2 * j];\n", "q[base + j]"),
    "a recurrence": ("    float h = 0.0f;\n    for (int j = threadIdx.x; j < N; j += blockDim.x) h = 0.5f * h + x[r * N + j];\n"
                     "    y[r] = h;\n", "accumulation"),
    "a base that differs between lanes": ("    for (int j = threadIdx.x; j < N; j += blockDim.x) y[threadIdx.x + j] = x[r * N + j];\n",
                                          "differs between the group's lanes"),
    # found by a red team (2026-12-05): widened, a lane runs other elements, so its identity in a value moves with them
    "a value of the lane's identity": ("    for (int j = threadIdx.x; j < N; j += blockDim.x) y[r * N + j] = x[r * N + j] + threadIdx.x;\n",
                                       "differs between the group's lanes"),
    "a read under a condition only": ("    for (int j = threadIdx.x; j < N; j += blockDim.x) sh[j % 128] = j < M ? x[r * N + j] : 0.0f;\n",
                                      "shared array"),
    "a straight-line store the loop reads": ("    y[r * N + threadIdx.x] = 1.0f;\n"
                                             "    for (int j = threadIdx.x; j < N; j += blockDim.x) y[r * N + j] = 2.0f * y[r * N + j];\n",
                                             "outside the loop"),
    "a lane-dependent return before the loop": ("    if (threadIdx.x >= N) return;\n"
                                               "    for (int j = threadIdx.x; j < N; j += blockDim.x) y[r * N + j] = x[r * N + j];\n",
                                               "return before the loop"),
    "a shared array written": ("    for (int j = threadIdx.x; j < N; j += blockDim.x) sh[j % 128] = x[r * N + j];\n", "shared array"),
    "a loop bound that differs between lanes": ("    for (int j = threadIdx.x; j < N - threadIdx.x; j += blockDim.x) y[r * N + j] = x[r * N + j];\n",
                                               "not the same for every lane"),
    "a pointer passed to a function": ("    for (int j = threadIdx.x; j < N; j += blockDim.x) { y[r * N + j] = x[r * N + j]; sink(y); }\n",
                                      "used otherwise"),
    "an atomic": ("    for (int j = threadIdx.x; j < N; j += blockDim.x) atomicAdd(&y[r * N + j], x[r * N + j]);\n", "atomic"),
}


def test_a_buffer_read_only_under_a_condition_stays_scalar():
    """`j < M ? x[j] : 0`: x's 16-byte chunk could pass its end (a red team's out-of-bounds read, 2026-12-05): x stays
    a scalar load, y (stored every iteration) is widened."""
    src = LOOP_HEAD + "    for (int j = threadIdx.x; j < N; j += blockDim.x) y[r * N + j] = j < M ? x[r * N + j] : 0.0f;\n}\n"
    out = VL.apply(unit(src, row_spec(grid='["M"]', block="[128]"))).text
    assert "reinterpret_cast<uint4*>(&y[" in out and "reinterpret_cast<const uint4*>(&x[" not in out


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_loops_it_cannot_prove_safe_are_left_alone(what):
    body, reason = REFUSED[what]
    src = "__device__ void sink(float* p) { p[0] = 1.0f; }\n" + LOOP_HEAD + body + "}\n"
    spec = row_spec(grid='["M"]', block="[128]")
    why = VL.why_not(unit(src, spec))
    assert why is not None and reason in why, (what, why)
    assert VL.why_not(unit(src.replace(body, "    for (int j = threadIdx.x; j < N; j += blockDim.x) y[r * N + j] = x[r * N + j];\n"), spec)) is None


def test_types_without_a_packing_are_refused_and_mixed_sizes_widened():
    dbl = ROW_ARGS.replace('"f32"', '"f64"')
    src = LOOP_HEAD.replace("float", "double") + "    for (int j = threadIdx.x; j < N; j += blockDim.x) y[r * N + j] = x[r * N + j];\n}\n"
    assert "no 16-byte packing" in VL.why_not(unit(src, row_spec(args=dbl, grid='["M"]')))
    mixed = BF16_ARGS.replace('{ name = "w", role = "in", dtype = "bf16"', '{ name = "w", role = "in", dtype = "f32"')
    msrc = BF16_BLOCK_ROW.replace("const __nv_bfloat16* w", "const float* w").replace("__bfloat162float(w[i])", "w[i]")
    spec = row_spec(args=mixed, grid='["M"]', block="[256]")
    u = unit(msrc, spec)
    reasons = [r for _, r in VL.candidates(u)]  # the sum loop (bf16 alone), the serial loop over the parts, the map
    assert reasons[0] is None and reasons[-1] is None and "a + LANE" in reasons[1]
    out = VL.apply(u)
    # the map moves 4 elements a step: 16 bytes of the f32 weight, 8 of each bf16 buffer; the sum loop 8 bf16 (16 bytes)
    assert re.search(r"const uint4 ptxf_vl_c\d = \*reinterpret_cast<const uint4\*>\(&w\[", out.text)
    assert "*reinterpret_cast<uint2*>(&y[" in out.text and "/ 2ull) & 3ull)" in out.text
    ptx = compiled_ptx(msrc, spec, out, [VL])
    assert V4_LOAD.search(ptx) and re.search(r"\bld\.global(\.nc)?\.v2\.(u32|b32)", ptx) and re.search(r"\bst\.global\.v2\.(u32|b32)", ptx)


def test_in_the_generator_chains_after_rowpar():
    spec = row_spec()
    cands = TransformGenerator().propose(make_ctx(L2NORM, spec))
    vl = [c for c in cands if "pass:vector_loops" in c.params]
    assert vl and all(any(k.startswith("pass:rowpar_") for k in c.params) and c.params["vec"] == 16 for c in vl)
    for c in vl:
        names = [k[5:] for k in c.params if k.startswith("pass:")]
        assert names.index("vector_loops") > max(i for i, n in enumerate(names) if n.startswith("rowpar_"))
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"


# ---------------------------------------------------------------- host emulation

EMU_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "w", role = "in", dtype = "f32", shape = ["N"] },
  { name = "c", role = "in", dtype = "i32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "pm", role = "out", dtype = "f32", shape = ["M", 8] },
  { name = "ps", role = "out", dtype = "i32", shape = ["M", 8] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
LOOP = """
    float m = -1e30f;
    int s = 0;
    for (int j = START; j < N; j += STEP) {
        float v = x[(size_t)row * N + j];
        float nb = j + 1 < N ? x[(size_t)row * N + j + 1] : 0.0f;
        m = fmaxf(m, v);
        s += c[(size_t)row * N + j] * (j + 1);
        y[(size_t)row * N + j] = v * w[j] + nb;
    }
"""
EMU_BLOCK = """
extern "C" __global__ void k(const float* x, const float* w, const int* c, float* y, float* pm, int* ps, int M, int N)
{
    int row = blockIdx.x;
    if (row >= M) return;
""" + LOOP.replace("START", "threadIdx.x").replace("STEP", "blockDim.x") + """
    pm[row * 8 + threadIdx.x] = m;
    ps[row * 8 + threadIdx.x] = s;
}
"""
EMU_GROUP = """
extern "C" __global__ void k(const float* x, const float* w, const int* c, float* y, float* pm, int* ps, int M, int N)
{
    int row = (int)(((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) / 4u);
    const unsigned lane = threadIdx.x % 4u;
    if (row >= M) return;
""" + LOOP.replace("START", "1 + lane").replace("STEP", "4") + """
    pm[row * 8 + lane] = m;
    ps[row * 8 + lane] = s;
}
"""
# rowpar_cluster's lanes: a row over a cluster of 2 blocks of 4 threads (the lane counts across the blocks)
EMU_CLUSTER = """
extern "C" __global__ void k(const float* x, const float* w, const int* c, float* y, float* pm, int* ps, int M, int N)
{
    int row = (int)(blockIdx.x / 2u);
    const unsigned ptxf_lane = (blockIdx.x % 2u) * 4u + threadIdx.x;
    if (row >= M) return;
""" + LOOP.replace("START", "ptxf_lane").replace("STEP", "8") + """
    pm[row * 8 + ptxf_lane] = m;
    ps[row * 8 + ptxf_lane] = s;
}
"""
# a grid-stride loop (grid_stride's form): every thread of the grid a lane, its parts by its global index
# (a map: a thread's own parts would be outputs nothing combines, which the grid's group refuses; atomic_agg's are)
EMU_GRID = """
extern "C" __global__ void k(const float* x, const float* w, const int* c, float* y, float* pm, int* ps, int M, int N)
{
    int row = 0;
""" + "".join(line + "\n" for line in LOOP.replace("START", "blockIdx.x * blockDim.x + threadIdx.x").replace(
    "STEP", "(int)gridDim.x * (int)blockDim.x").splitlines() if "m = " not in line and "s += " not in line
    and "float m" not in line and "int s" not in line) + """
}
"""
EMU_SHIM = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
struct uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
struct ptxf_dim { unsigned x; };
ptxf_dim threadIdx, blockIdx, blockDim, gridDim;
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
const char* g_range[6][2];
long g_vec;
template <class T> T* checked(T* p) {
    const char* c = (const char*)p;
    bool in = false;
    for (auto& r : g_range) in = in || (c >= r[0] && c + sizeof(T) <= r[1]);
    if ((uintptr_t)c % sizeof(T) || !in) { printf("bad %zu-byte access\n", sizeof(T)); std::exit(2); }
    return p;
}
template <class T> T __ldg(const T* p) { g_vec += sizeof(T) == 16; return *checked(p); }
template <class T> T __ldcs(const T* p) { g_vec += sizeof(T) == 16; return *checked(p); }
template <class T> void __stcs(T* p, T v) { g_vec += sizeof(T) == 16; *checked(p) = v; }
"""
EMU_MAIN = r"""
int main() {
    const long M = MROWS, GUARD = 64;
    const long lengths[] = {1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 100};
    const long offsets[][6] = {{0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 0, 0}, {3, 3, 3, 3, 0, 0}, {0, 1, 0, 0, 0, 0}, {2, 2, 1, 2, 0, 0}};
    unsigned seed = 12345;
    long vec_total = 0;
    for (long N : lengths)
        for (auto& off : offsets) {
            const long len[6] = {M * N, N, M * N, M * N, M * 8, M * 8};
            char* mem[3][6];
            for (int v = 0; v < 3; ++v)
                for (int b = 0; b < 6; ++b) {
                    mem[v][b] = (char*)aligned_alloc(256, ((len[b] + 2 * GUARD) * 4 + 255) / 256 * 256);
                    std::memset(mem[v][b], 0x5a, (len[b] + 2 * GUARD) * 4);
                }
            for (int b = 0; b < 3; ++b)
                for (long e = 0; e < len[b]; ++e) {
                    seed = seed * 1664525u + 1013904223u;
                    int bits = b == 2 ? (int)(seed >> 20) - 2048 : (int)(0x3f000000u | (seed >> 9) | ((seed & 1u) << 31));
                    for (int v = 0; v < 3; ++v) std::memcpy(mem[v][b] + (GUARD + off[b] + e) * 4, &bits, 4);
                }
            for (int v = 0; v < 3; ++v) {
                float* x = (float*)(mem[v][0] + (GUARD + off[0]) * 4);
                float* w = (float*)(mem[v][1] + (GUARD + off[1]) * 4);
                int* c = (int*)(mem[v][2] + (GUARD + off[2]) * 4);
                float* y = (float*)(mem[v][3] + (GUARD + off[3]) * 4);
                float* pm = (float*)(mem[v][4] + (GUARD + off[4]) * 4);
                int* ps = (int*)(mem[v][5] + (GUARD + off[5]) * 4);
                const char* ptrs[6] = {(const char*)x, (const char*)w, (const char*)c, (const char*)y, (const char*)pm, (const char*)ps};
                for (int b = 0; b < 6; ++b) { g_range[b][0] = ptrs[b]; g_range[b][1] = ptrs[b] + len[b] * 4; }
                g_vec = 0;
                blockDim.x = BLOCK; gridDim.x = (unsigned)(GRID);
                for (long blk = 0; blk < GRID; ++blk)
                    for (unsigned t = 0; t < BLOCK; ++t) {
                        blockIdx.x = (unsigned)blk; threadIdx.x = t;
                        if (v == 0) orig::k(x, w, c, y, pm, ps, (int)M, (int)N);
                        if (v == 1) vec::k(x, w, c, y, pm, ps, (int)M, (int)N);
                        if (v == 2) hinted::k(x, w, c, y, pm, ps, (int)M, (int)N);
                    }
                if (v == 2) vec_total += g_vec;
            }
            for (int v = 1; v < 3; ++v) {
                if (std::memcmp(mem[0][3], mem[v][3], (len[3] + 2 * GUARD) * 4)) { printf("N=%ld off=%ld,%ld: y differs (variant %d)\n", N, off[0], off[1], v); return 1; }
                for (long r = 0; r < M; ++r) {
                    float m0 = -INFINITY, m1 = -INFINITY; int s0 = 0, s1 = 0;
                    for (long l = 0; l < LANES; ++l) {
                        float a, b; int p, q;
                        std::memcpy(&a, mem[0][4] + (GUARD + r * 8 + l) * 4, 4); std::memcpy(&b, mem[v][4] + (GUARD + r * 8 + l) * 4, 4);
                        std::memcpy(&p, mem[0][5] + (GUARD + r * 8 + l) * 4, 4); std::memcpy(&q, mem[v][5] + (GUARD + r * 8 + l) * 4, 4);
                        m0 = fmaxf(m0, a); m1 = fmaxf(m1, b); s0 += p; s1 += q;
                    }
                    if (m0 != m1 || s0 != s1) { printf("N=%ld row %ld: max %g vs %g, sum %d vs %d (variant %d)\n", N, r, m0, m1, s0, s1, v); return 1; }
                }
            }
            for (auto& vm : mem) for (auto& b : vm) free(b);
        }
    if (vec_total == 0) { printf("no 16-byte access\n"); return 1; }
    printf("ok %ld\n", vec_total);
    return 0;
}
"""


def _host(text: str) -> str:
    return text.replace('extern "C" ', "")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the host emulation")
@pytest.mark.parametrize("kind", ["block", "group", "cluster", "grid"])
def test_same_outputs_on_host_emulation(kind, tmp_path):
    """Original, vector_loops and restrict+ldg+stream+vector_loops: the same y (bit for bit, guards included), the same
    per-row max and integer sum over the lanes' partial results, at 12 row lengths and 5 alignments of the buffers
    (``cluster``: a row's lanes over two blocks, as rowpar_cluster writes them; ``grid``: a grid-stride loop, the grid's
    8 threads in two blocks its lanes)."""
    src = {"block": EMU_BLOCK, "group": EMU_GROUP, "cluster": EMU_CLUSTER, "grid": EMU_GRID}[kind]
    grid, lanes = {"block": ('["M"]', 8), "group": ('["cdiv(M * 4, 8)"]', 4), "cluster": ('["M * 2"]', 8), "grid": ('["2"]', 8)}[kind]
    spec = spec_for("k", EMU_ARGS, grid=grid, block="[4]" if kind in ("cluster", "grid") else "[8]", sizes="[{ M = 3, N = 100 }]")
    u = unit(src, spec)
    plain = VL.apply(u)
    hinted = VL.apply(StreamPass().apply(LdgPass().apply(RestrictPass().apply(u))))
    for t in (plain.text, hinted.text):
        assert t.count("(transform vector_loops)") == 1 and "x[(size_t)row * N + j + 1]" in t.replace("__ldg(x + ((size_t)row * N + j + 1))", "x[(size_t)row * N + j + 1]")
    assert "__ldg(reinterpret_cast<const uint4*>" in hinted.text and "__stcs(reinterpret_cast<uint4*>" in hinted.text
    for out, chain in ((plain, [VL]), (hinted, [RestrictPass(), LdgPass(), StreamPass(), VL])):
        compiled_ptx(src, spec, out, chain)
    program = (EMU_SHIM + "".join(f"namespace {ns} {{\n{_host(t)}\n}}\n" for ns, t in (("orig", src), ("vec", plain.text), ("hinted", hinted.text)))
               + EMU_MAIN.replace("GRID", {"block": "M", "group": "((M * 4 + 7) / 8)", "cluster": "(M * 2)", "grid": "2"}[kind])
               .replace("LANES", str(lanes)).replace("MROWS", "1" if kind == "grid" else "3")
               .replace("BLOCK", "4" if kind in ("cluster", "grid") else "8"))
    if kind == "grid":  # the grid's lanes times 4 may pass 2^31 at a large grid: the widened loop counts in 64 bits
        assert "for (long long ptxf_vl_v = (long long)ptxf_vl_s + (long long)((blockIdx.x * blockDim.x + threadIdx.x)) * 4;" in plain.text
    cpp, exe = tmp_path / "emu.cpp", tmp_path / "emu"
    cpp.write_text(program)
    build = subprocess.run(["g++", "-std=c++17", "-O1", "-w", "-ffp-contract=off", str(cpp), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stdout + run.stderr


# ------------------------------------------- mixed element sizes, two ranges of one buffer (RoPE's rotate-half)

ROPE_ARGS = """
  { name = "x", role = "in", dtype = "bf16", shape = ["T", "H", "D"] },
  { name = "cs", role = "in", dtype = "f32", shape = ["T", "D // 2"] },
  { name = "sn", role = "in", dtype = "f32", shape = ["T", "D // 2"] },
  { name = "y", role = "out", dtype = "bf16", shape = ["T", "H", "D"] },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
"""
# one group of 4 lanes per token (rowpar's shape), a serial loop over heads around the split loop; out of place
ROPE_GROUP = """#include <cuda_bf16.h>
extern "C" __global__ void k(const __nv_bfloat16* x, const float* cs, const float* sn, __nv_bfloat16* y, int T, int H, int D)
{
    int t = (int)(((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) / 4u);
    const unsigned lane = threadIdx.x % 4u;
    if (t >= T) return;
    int half = D / 2;
    for (int h = 0; h < H; ++h) {
        const __nv_bfloat16* xv = x + ((size_t)t * H + h) * D;
        __nv_bfloat16* ov = y + ((size_t)t * H + h) * D;
        for (int i = lane; i < half; i += 4) {
            float c = cs[(size_t)t * half + i], s = sn[(size_t)t * half + i];
            float x1 = __bfloat162float(xv[i]), x2 = __bfloat162float(xv[i + half]);
            ov[i] = __float2bfloat16(x1 * c - x2 * s);
            ov[i + half] = __float2bfloat16(x2 * c + x1 * s);
        }
    }
}
"""
# the same in place: y is read and written at both halves (two disjoint ranges, each read then written)
ROPE_INPLACE = (ROPE_GROUP.replace("const __nv_bfloat16* xv = x +", "__nv_bfloat16* xv = y +")
                .replace("        __nv_bfloat16* ov = y + ((size_t)t * H + h) * D;\n", "").replace("ov[", "xv["))
BF16_SHIM = r"""
struct __nv_bfloat16 { unsigned short u; };
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return {u}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.u; }
inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((unsigned)b.u << 16); }
inline __nv_bfloat16 __float2bfloat16(float f) {  // round to nearest even (no NaN here)
    unsigned u = __float_as_uint(f);
    return {(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
struct uint2 { unsigned x, y; };
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
"""
ROPE_MAIN = r"""
int main() {
    const long T = 3, H = 2, GUARD = 64;
    const long dims[] = {2, 4, 6, 8, 10, 16, 18, 34, 64, 130};
    const long offsets[][4] = {{0, 0, 0, 0}, {4, 4, 4, 4}, {1, 1, 1, 1}, {2, 2, 2, 2}, {1, 0, 0, 1}, {0, 1, 1, 0}, {3, 3, 3, 1}};
    unsigned seed = 777;
    long vec_total = 0;
    for (long D : dims)
        for (auto& off : offsets) {
            const long len[4] = {T * H * D, T * (D / 2), T * (D / 2), T * H * D};
            const long size[4] = {2, 4, 4, 2};
            char* mem[2][4];
            for (int v = 0; v < 2; ++v)
                for (int b = 0; b < 4; ++b) {
                    mem[v][b] = (char*)aligned_alloc(256, ((len[b] + 2 * GUARD) * 4 + 255) / 256 * 256);
                    std::memset(mem[v][b], 0x5a, (len[b] + 2 * GUARD) * size[b]);
                }
            for (int b = 0; b < 4; ++b)
                for (long e = 0; e < len[b]; ++e) {
                    seed = seed * 1664525u + 1013904223u;
                    unsigned bits = 0x3f000000u | (seed >> 9) | ((seed & 1u) << 31);
                    for (int v = 0; v < 2; ++v) {
                        char* at = mem[v][b] + (GUARD + off[b] + e) * size[b];
                        if (size[b] == 4) std::memcpy(at, &bits, 4); else { unsigned short h = bits >> 16; std::memcpy(at, &h, 2); }
                    }
                }
            for (int v = 0; v < 2; ++v) {
                char* ptrs[4];
                for (int b = 0; b < 4; ++b) {
                    ptrs[b] = mem[v][b] + (GUARD + off[b]) * size[b];
                    g_range[b][0] = ptrs[b]; g_range[b][1] = ptrs[b] + len[b] * size[b];
                }
                g_vec = 0;
                blockDim.x = 8;
                for (long blk = 0; blk < (T * 4 + 7) / 8; ++blk)
                    for (unsigned t = 0; t < 8; ++t) {
                        blockIdx.x = (unsigned)blk; threadIdx.x = t;
                        auto x = (__nv_bfloat16*)ptrs[0]; auto cs = (float*)ptrs[1]; auto sn = (float*)ptrs[2];
                        auto y = (__nv_bfloat16*)ptrs[3];
                        if (v == 0) orig::k(x, cs, sn, y, (int)T, (int)H, (int)D);
                        if (v == 1) vec::k(x, cs, sn, y, (int)T, (int)H, (int)D);
                    }
                if (v == 1) vec_total += g_vec;
            }
            if (std::memcmp(mem[0][3], mem[1][3], (len[3] + 2 * GUARD) * 2)) { printf("D=%ld off=%ld,%ld,%ld,%ld: y differs\n", D, off[0], off[1], off[2], off[3]); return 1; }
            for (auto& vm : mem) for (auto& b : vm) free(b);
        }
    if (vec_total == 0) { printf("no vector access\n"); return 1; }
    printf("ok %ld\n", vec_total);
    return 0;
}
"""


def rope_spec():
    """The spec of the RoPE kernels below, with small bench sizes (spec_for's 4096 of every symbol is too large here)."""
    return parse_spec(f"""
[kernel.k]
args = [{ROPE_ARGS}]
launch = {{ grid = ["cdiv(T * 4, 128)"], block = [128], policy = "free" }}
[kernel.k.check]
rtol = 1e-2
atol = 1e-2
sizes = [{{ T = 3, H = 2, D = 64 }}]
[kernel.k.bench]
sizes = [{{ T = 4096, H = 8, D = 128 }}]
""").kernels["k"]


def test_two_ranges_of_one_buffer_need_a_proof_they_are_apart():
    """``ov[i]`` and ``ov[i + half]`` over ``i < half`` are apart at any size; over ``i < half + 1`` (or ``i < D``) they
    overlap, and the loop is left alone; a read-only stream of the written buffer at an unproven range is refused too."""
    spec = rope_spec()
    assert VL.why_not(unit(ROPE_GROUP, spec)) is None
    assert VL.why_not(unit(ROPE_INPLACE, spec)) is None
    for src in (ROPE_GROUP.replace("i < half; i += 4", "i < half + 1; i += 4"),
                ROPE_INPLACE.replace("i < half; i += 4", "i < D - 1; i += 4")):
        why = VL.why_not(unit(src, spec))
        assert why is not None and "not proven apart" in why, why
    reads_ahead = ROPE_INPLACE.replace("x2 = __bfloat162float(xv[i + half])", "x2 = __bfloat162float(xv[i + half - 1])")
    assert reads_ahead != ROPE_INPLACE
    why = VL.why_not(unit(reads_ahead, spec))
    assert why is not None and ("not proven apart" in why or "another index" in why), why


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the host emulation")
@pytest.mark.parametrize("kind", ["out_of_place", "in_place"])
def test_mixed_sizes_and_two_ranges_same_outputs_on_host_emulation(kind, tmp_path):
    """RoPE's rotate-half with bf16 activations and f32 tables, one group of 4 lanes per token, a serial head loop around
    the split loop: restrict+ldg+vector_loops writes y bit for bit as the original (guards included) at 10 head
    dimensions and 7 buffer alignments (in elements; some leave no common chunk offset: the original loop), with 8-byte
    (bf16) and 16-byte (f32) accesses checked for range and alignment; its output compiles with NVRTC."""
    src = ROPE_GROUP if kind == "out_of_place" else ROPE_INPLACE
    spec = rope_spec()
    out = VL.apply(LdgPass().apply(RestrictPass().apply(unit(src, spec))))
    assert out.text.count("(transform vector_loops)") == 1
    # x's bf16 row, read through the local pointer xv: 8-byte loads, through __ldg where x is only read (the hints
    # follow local pointers since 2026-12-05), plain where it is updated in place
    xv_load = "__ldg(reinterpret_cast<const uint2*>((xv + " if kind == "out_of_place" else "*reinterpret_cast<const uint2*>(&xv["
    assert xv_load in out.text and "__ldg(reinterpret_cast<const uint4*>" in out.text
    assert "*reinterpret_cast<uint2*>(&" in out.text
    compiled_ptx(src, spec, out, [RestrictPass(), LdgPass(), VL])
    # every plain vector access goes through the shim's range and alignment check too (and is counted)
    checked = re.sub(r"\*reinterpret_cast<((?:const )?uint[24])\*>\((&\w+\[[^\]]*\])\)", r"(*checked(reinterpret_cast<\1*>(\2)))", out.text)
    assert checked.count("checked(") == (4 if kind == "in_place" else 2)  # (hinted loads: checked by the shim's __ldg)
    host = lambda t: _host(t).replace("#include <cuda_bf16.h>", "")  # noqa: E731
    shim = EMU_SHIM.replace("g_range[6][2]", "g_range[4][2]").replace("    return p;\n}", "    g_vec += sizeof(T) >= 8;\n    return p;\n}")
    program = (shim + BF16_SHIM + "".join(f"namespace {ns} {{\n{host(t)}\n}}\n" for ns, t in (("orig", src), ("vec", checked)))
               + ROPE_MAIN)
    cpp, exe = tmp_path / "emu.cpp", tmp_path / "emu"
    cpp.write_text(program)
    build = subprocess.run(["g++", "-std=c++17", "-O1", "-w", "-ffp-contract=off", str(cpp), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stdout + run.stderr


# ------------------------------------------- found by an adversarial review: casts, and loops that exchange elements

CAST_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"], align = 16 },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"], align = 16 },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
CAST_HEAD = 'extern "C" __global__ void k(const float* x, float* y, int M, int N)\n{\n    int r = blockIdx.x;\n    if (r >= M) return;\n'


def _cast_spec(block="[8]"):
    return spec_for("k", CAST_ARGS, grid='["M"]', block=block, sizes="[{ M = 3, N = 64 }]").model_copy(
        update={"constraints": ["N % 8 == 0"]})


def test_a_pointer_cast_is_no_proof_of_alignment_or_of_ranges_apart():
    """``(const float*)((const char*)x + 8)`` moves 8 bytes, not 8 floats: the spec's alignment proves nothing about it
    (the runtime check stays), and two ranges of y through a byte offset are not proven apart."""
    src = CAST_HEAD + ("    const float* xs = (const float*)((const char*)x + 8);\n"
                       "    for (int j = threadIdx.x; j < N; j += blockDim.x) y[r * N + j] = xs[r * N + j] * 2.0f;\n}\n")
    u = unit(src, _cast_spec())
    assert [p.proven for p in VL.plans(u)] == [False] and "15ull" in VL.apply(u).text
    src = CAST_HEAD + ("    float* row = y + r * N;\n    const float* ahead = (const float*)((const char*)row + 32);\n"
                       "    for (int j = threadIdx.x; j < 32; j += blockDim.x) row[j] = ahead[j] + 1.0f;\n}\n")
    why = VL.why_not(unit(src, _cast_spec()))
    assert why is not None and "not proven apart" in why, why


def test_a_narrowing_cast_in_an_index_is_no_proof_of_ranges_apart():
    src = CAST_HEAD + ("    float* row = y + r * N;\n"
                       "    for (int j = threadIdx.x; j < N; j += blockDim.x) row[j + (unsigned char)N] = row[j] + 1.0f;\n}\n")
    why = VL.why_not(unit(src, _cast_spec()))
    assert why is not None and "not proven apart" in why, why
    # the same without the cast (a gap of N over a trip of N) is apart
    assert VL.why_not(unit(src.replace("(unsigned char)N", "N"), _cast_spec())) is None


def test_two_loops_that_exchange_elements_through_memory_are_left_alone():
    """Loop 1 writes y, loop 2 reads it back: as written each lane reads what it wrote; widened, which lane owns which
    element depends on each loop's alignment check, and a lane would read another's element with no barrier."""
    src = ('extern "C" __global__ void k(const float* x, float* y, int M, int N)\n{\n    int r = blockIdx.x;\n'
           "    const unsigned lane = threadIdx.x % 4u;\n    if (r >= M) return;\n"
           "    for (int j = lane; j < N; j += 4) y[r * N + j] = x[r * N + j] * 2.0f;\n"
           "    for (int j = lane; j < N; j += 4) y[r * N + j] = y[r * N + j] + 1.0f;\n}\n")
    u = unit(src, spec_for("k", ROW_ARGS, grid='["M"]', block="[4]", sizes="[{ M = 3, N = 64 }]"))
    reasons = [r for _, r in VL.candidates(u)]
    assert len(reasons) == 2 and all(r is not None and "exchange elements" in r for r in reasons), reasons
    # both loops writing y exchange too (the last write of an element must stay the second loop's)
    two_writes = src.replace("y[r * N + j] + 1.0f", "x[r * N + j] + 1.0f")
    assert all(r is not None for _, r in VL.candidates(unit(two_writes, _cast_spec("[4]"))))
    # a sum over x, then y written from x: x is never written, y touched by one loop: both are widened
    apart = src.replace("    for (int j = lane; j < N; j += 4) y[r * N + j] = x[r * N + j] * 2.0f;\n",
                        "    float s = 0.0f;\n    for (int j = lane; j < N; j += 4) s += x[r * N + j];\n").replace(
        "y[r * N + j] + 1.0f", "x[r * N + j] * s")
    assert [r for _, r in VL.candidates(unit(apart, _cast_spec("[4]")))] == [None, None]


GRID_HEAD = ('__device__ void dbl(int& s) { s *= 2; }\nextern "C" __global__ void k(const float* x, float* y, int M, int N)\n{\n'
             "    int gid = blockIdx.x * blockDim.x + threadIdx.x;\n    int stride = gridDim.x * blockDim.x;\n")
GRID_REFUSED = {  # found by a red team (2026-12-05) on grid-stride loops, each a wrong result under emulation before
    "the thread's index in a value": ("    for (int i = gid; i < N; i += stride) y[i] = x[i] + (float)gid;\n", "differs between"),
    "a thread's partial as an output": ("    float s = 0.0f;\n    for (int i = gid; i < N; i += stride) s += x[i];\n"
                                        "    y[gid] = s;\n", "nothing combines"),
    "the stride changed through a reference": ("    dbl(stride);\n    for (int i = gid; i < N; i += stride) y[i] = x[i];\n",
                                               "a + LANE"),
    "a store outside the loop that it reads": ("    if (gid < N) y[gid] = 1.0f;\n    for (int i = gid; i < N; i += stride) y[i] = y[i] * x[i];\n",
                                               "outside the loop"),
}


@pytest.mark.parametrize("what", sorted(GRID_REFUSED))
def test_grid_stride_loops_it_cannot_prove_safe_are_left_alone(what):
    body, reason = GRID_REFUSED[what]
    why = VL.why_not(unit(GRID_HEAD + body + "}\n", row_spec(grid='["cdiv(N, 128)"]', block="[128]")))
    assert why is not None and reason in why, (what, why)
    ok = GRID_HEAD + "    for (int i = gid; i < N; i += stride) y[i] = x[i];\n}\n"
    assert VL.why_not(unit(ok, row_spec(grid='["cdiv(N, 128)"]', block="[128]"))) is None
