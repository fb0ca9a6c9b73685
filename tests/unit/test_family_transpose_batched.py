"""CPU tests of the "transpose" family on permutations of more than two axes and on other element types.

The reduction of a permutation to a batched transpose (merged axes, batch strides), the readings of an ambiguous
shape, the source's copy check and its reasons, NVRTC compilation without spills for 1-, 2-, 4- and 8-byte
elements, and the kernel text run on the host (blocks of std::threads, tests/unit/_host_cuda.py) against NumPy's
``transpose`` at sizes that take the vector paths, the scalar paths and partial tiles, aligned and not.
"""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.harness.static_checks import static_check
from ptxfactory.protocol import evaluate, parse_spec
from ptxfactory.search.generators.transpose import (TransposeConfig, TransposeFamily, copy_refusal, match_spec,
                                                    reduce_permutation, tuning_space)
from _generator_support import example_ctx
from _host_cuda import HOST_BLOCKS

ROOT = Path(__file__).resolve().parents[2]
NCHW = ROOT / "bench" / "trials" / "nchw_to_nhwc" / "nchw_to_nhwc.cu"
_C = {"u8": "unsigned char", "bf16": "__nv_bfloat16", "f32": "float", "i32": "int", "f64": "double", "i64": "long long"}
_NP = {"u8": np.uint8, "bf16": np.uint16, "f32": np.uint32, "i32": np.uint32, "f64": np.uint64, "i64": np.uint64}


def case(name: str, dtype: str, xs: list[str], ys: list[str], body: str, scalars: list[str] | None = None,
         extra: str = "") -> tuple:
    """A spec and a naive source for ``y[ys] = x[xs]`` of ``dtype``, one int scalar per size symbol (in ``scalars``
    order, default sorted), ``body`` the kernel's loop body over the flat output index ``i``."""
    syms = scalars or sorted({s for s in xs if not s.isdigit()})
    q = lambda d: d if d.isdigit() else f'"{d}"'  # noqa: E731
    toml = f"""
[kernel.{name}]
args = [
  {{ name = "x", role = "in", dtype = "{dtype}", shape = [{", ".join(q(d) for d in xs)}] }},
  {{ name = "y", role = "out", dtype = "{dtype}", shape = [{", ".join(q(d) for d in ys)}] }},
""" + "".join(f'  {{ name = "{s.lower()}", role = "scalar", dtype = "i32", value = "{s}" }},\n' for s in syms) + extra + f"""]
launch = {{ grid = ["{" * ".join(xs)}"], block = [1], policy = "free" }}
[kernel.{name}.check]
sizes = [{{ {", ".join(f"{s} = 3" for s in syms)} }}]
[kernel.{name}.bench]
sizes = [{{ {", ".join(f"{s} = 64" for s in syms)} }}]
"""
    spec = parse_spec(toml).kernels[name]
    params = ", ".join([f"const {_C[dtype]}* x", f"{_C[dtype]}* y"] + [f"int {s.lower()}" for s in syms])
    inc = "#include <cuda_bf16.h>\n" if dtype == "bf16" else ""
    src = inc + f'extern "C" __global__ void {name}({params})\n{{\n    long long i = blockIdx.x;\n{body}\n}}\n'
    return spec, src


# the flat index's digits as a newcomer takes them apart
PQRS_BODY = """    int s_ = i % s, r_ = (i / s) % r, q_ = (i / (s * r)) % q, p_ = i / (s * r * q);
    y[((s_ * p + p_) * r + r_) * q + q_] = x[((p_ * q + q_) * r + r_) * s + s_];"""
ABC_BODY = """    int c_ = i % c, b_ = (i / c) % b, a_ = i / (c * b);
    y[(c_ * b + b_) * a + a_] = x[(a_ * b + b_) * c + c_];"""
NCHW_BODY = """    int c_ = i % c, w_ = (i / c) % w, h_ = (i / (c * w)) % h, n_ = i / (c * w * h);
    y[i] = x[((n_ * c + c_) * h + h_) * w + w_];"""
SQ_BODY = """    int j = i % n, k = i / n;
    y[j * n + k] = x[k * n + j];"""

CASES = {
    # two batch axes (P, R), no merges: a = S, b = Q
    "pqrs": ("f32", ["P", "Q", "R", "S"], ["S", "P", "R", "Q"], PQRS_BODY, (3, 0, 2, 1)),
    # merged axes (H, W) and a batch N, as bench/trials/nchw_to_nhwc
    "nchw": ("i32", ["N", "C", "H", "W"], ["N", "H", "W", "C"], NCHW_BODY, (0, 2, 3, 1)),
    # one batch axis B in the middle, bytes
    "abc_u8": ("u8", ["A", "B", "C"], ["C", "B", "A"], ABC_BODY, (2, 1, 0)),
    # 2-byte elements
    "abc_bf16": ("bf16", ["A", "B", "C"], ["C", "B", "A"], ABC_BODY, (2, 1, 0)),
    # a square transpose of 8-byte elements: one symbol for both sides
    "square_f64": ("f64", ["N", "N"], ["N", "N"], SQ_BODY, (1, 0)),
}


def _case(name):
    dtype, xs, ys, body, _ = CASES[name]
    return case(name, dtype, xs, ys, body)


def test_reduce_permutation_merges_axes_that_stay_adjacent():
    assert reduce_permutation((0, 2, 3, 1)) == ([[0], [1], [2, 3]], [0, 2, 1])  # NCHW -> NHWC: [N, C, HW] -> [N, HW, C]
    assert reduce_permutation((1, 0)) == ([[0], [1]], [1, 0])
    assert reduce_permutation((2, 0, 1)) == ([[0, 1], [2]], [1, 0])  # [A, B, C] -> [C, A, B]: a 2-D transpose
    assert reduce_permutation((3, 0, 2, 1)) == ([[0], [1], [2], [3]], [3, 0, 2, 1])


def test_nchw_to_nhwc_is_a_batched_transpose():
    ctx = example_ctx(NCHW, "nchw_to_nhwc")
    (m,) = match_spec(ctx.spec)
    assert (m.rows, m.cols, m.x_row_stride, m.y_row_stride) == ("C", "H * W", "H * W", "C")
    assert m.batch == (("N", "C * (H * W)", "(H * W) * C"),) and m.perm == (0, 2, 3, 1) and not m.ambiguous
    cands = TransposeFamily().propose(ctx)
    assert len(cands) == len(tuning_space(4))
    size = {"N": 3, "C": 33, "H": 7, "W": 9}
    for c in cands:
        t = c.params["tile"]
        assert evaluate(c.launch.grid[0], size) == -(-33 // t) * -(-63 // t) * 3
        assert "batch=N" in c.description


def test_ambiguous_shapes_give_each_reading():
    spec, src = case("amb", "f32", ["N", "N", "C"], ["C", "N", "N"], "")
    ms = match_spec(spec)
    assert sorted(m.perm for m in ms) == [(2, 0, 1), (2, 1, 0)] and all(m.ambiguous for m in ms)
    ctx = example_ctx(NCHW, "amb", spec, src)
    cands = TransposeFamily().propose(ctx)
    assert len(cands) == 2 * len(tuning_space(4)) and {c.params["perm"] for c in cands} == {"2,0,1", "2,1,0"}
    # three equal axes: five readings, past MAX_READINGS
    spec, _ = case("cube", "f32", ["N", "N", "N"], ["N", "N", "N"], "")
    assert match_spec(spec) is None and "at most 2 are tried" in match_spec.why(spec)


@pytest.mark.parametrize("xs, ys, why", [
    (["A", "B", "C"], ["B", "A", "C"], "last axis stays last"),       # rows copied whole
    (["A", "B"], ["A", "B"], "not a permutation"),                     # the identity
    (["A", "B"], ["B", "C"], "not a permutation"),
])
def test_refusals_say_why(xs, ys, why):
    spec, _ = case("r", "f32", xs, ys, "", scalars=sorted(set(xs) | set(ys)))
    assert match_spec(spec) is None and why in match_spec.why(spec)


def test_refuses_a_float_scalar_and_a_computed_store():
    spec, src = case("scaled", "f32", ["A", "B"], ["B", "A"], "",
                     extra='  { name = "alpha", role = "scalar", dtype = "f32", value = 2.0 },\n')
    assert match_spec(spec) is None and "alpha" in match_spec.why(spec)
    body = "    int j = i % b, k = i / b;\n    y[j * a + k] = 2.0f * x[k * b + j];"
    spec, src = case("twice", "f32", ["A", "B"], ["B", "A"], body)
    ctx = example_ctx(NCHW, "twice", spec, src)
    assert TransposeFamily().propose(ctx) == []
    assert "not a plain copy of x" in TransposeFamily().why_not(ctx)
    # through a local, a cast or __ldg: still a copy
    for store in ("float v = x[k * b + j];\n    y[j * a + k] = v;", "y[j * a + k] = (float)x[k * b + j];",
                  "y[j * a + k] = __ldg(&x[k * b + j]);"):
        src2 = src.replace("y[j * a + k] = 2.0f * x[k * b + j];", store)
        ctx2 = example_ctx(NCHW, "twice", spec, src2)
        assert copy_refusal(ctx2.kernel.text, match_spec(spec)[0], ("float",)) is None, store
        assert TransposeFamily().propose(ctx2)

    # stores through a pointer into y are y's (a user's causal softmax stored through one read as a copy, 2026-12-05)
    for store, why in (("float* out = y + j * a;\n    out[k] = 2.0f * x[k * b + j];", "not a plain copy of x"),
                       ("float* out = y + j * a;\n    *(out + k) = x[k * b + j];", "through the pointer out"),
                       ("float* out = y + j * a;\n    out[k] = x[k * b + j];", None)):
        ctx3 = example_ctx(NCHW, "twice", spec, src.replace("y[j * a + k] = 2.0f * x[k * b + j];", store))
        got = copy_refusal(ctx3.kernel.text, match_spec(spec)[0], ("float",))
        assert (got is None) if why is None else (why in got), (store, got)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_element_type_compiles_without_spills(name):
    spec, src = _case(name)
    ctx = example_ctx(NCHW, name, spec, src)
    cands = TransposeFamily().propose(ctx)
    itemsize = spec.args[0].dtype.itemsize
    assert len(cands) == len(tuning_space(itemsize)) >= 6
    assert any(c.params["vec"] == 16 and TransposeConfig(c.params["tile"], c.params["rows"], c.params["pad"], 16).elems(itemsize) > 1
               for c in cands)
    for c in cands:
        r = compile_candidate(c, "sm_90a")
        assert not isinstance(r, CompileFailed), f"{c.description}: {r.log}"
        res = r.resources
        assert res.spill_stores == 0 and res.local_bytes == 0, f"{c.description}: {res.summary()}"
        assert static_check(c, spec, res, r.cubin) is None, c.description


SHIM = r"""#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <barrier>
#include <memory>
#include <thread>
#include <vector>
struct ptxf_dim { unsigned x, y, z; };
thread_local ptxf_dim threadIdx, blockIdx;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __shared__ static
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct __nv_bfloat16 { unsigned short bits; };
template <class T> T __ldg(const T* p) { return *p; }
using std::min;
using std::max;
""" + HOST_BLOCKS


def _main(name: str, spec, itemsize: int) -> str:
    syms = [a for a in spec.args if not a.is_buffer]
    nargs = len(syms)
    args = ", ".join(f"atoi(argv[{4 + i}])" for i in range(nargs))
    return f"""
int main(int argc, char** argv) {{
    int grid = atoi(argv[1]), block = atoi(argv[2]), off = atoi(argv[3]);
    FILE* f = fopen("x.bin", "rb"); fseek(f, 0, SEEK_END); long n = ftell(f) / {itemsize}; fseek(f, 0, SEEK_SET);
    std::vector<unsigned char> xb((n + 8) * {itemsize} + 64), yb((n + 8) * {itemsize} + 64, 0xAB);
    unsigned char* xp = xb.data() + (64 - (reinterpret_cast<unsigned long long>(xb.data()) % 64)) % 64 + off * {itemsize};
    unsigned char* yp = yb.data() + (64 - (reinterpret_cast<unsigned long long>(yb.data()) % 64)) % 64 + off * {itemsize};
    if (fread(xp, {itemsize}, n, f) != (size_t)n) return 2;
    fclose(f);
    launch(grid, block, [&] {{ {name}(({_C[spec.args[0].dtype.value]}*)xp, ({_C[spec.args[0].dtype.value]}*)yp, {args}); }});
    for (long k = n * {itemsize}; k < (n + 4) * {itemsize}; ++k) if (yp[k] != 0xAB) {{ puts("wrote past y"); return 3; }}
    f = fopen("y.bin", "wb"); fwrite(yp, {itemsize}, n, f); fclose(f);
    puts("ok");
}}
"""


# sizes per case: partial tiles, vector paths (|a| and |b| multiples of 16 elements) and scalar ones
EMU_SIZES = {
    "pqrs": [{"P": 2, "Q": 33, "R": 3, "S": 40}, {"P": 1, "Q": 16, "R": 2, "S": 64}, {"P": 3, "Q": 1, "R": 1, "S": 5}],
    "nchw": [{"N": 2, "C": 33, "H": 5, "W": 7}, {"N": 3, "C": 32, "H": 4, "W": 16}, {"N": 1, "C": 1, "H": 1, "W": 1}],
    "abc_u8": [{"A": 70, "B": 2, "C": 33}, {"A": 64, "B": 3, "C": 32}],
    "abc_bf16": [{"A": 70, "B": 2, "C": 33}, {"A": 64, "B": 3, "C": 32}],
    "square_f64": [{"N": 70}, {"N": 32}, {"N": 1}],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_text_on_host_emulation(name, tmp_path):
    """Three configurations per case (the first, a vectorised unpadded one and the last) run on the host: y equals
    NumPy's transpose bit for bit at every size, with x and y 16-byte aligned and one element off, and nothing is
    written past y's end."""
    spec, src = _case(name)
    perm = CASES[name][4]
    assert [m.perm for m in match_spec(spec)] == [perm]
    ctx = example_ctx(NCHW, name, spec, src)
    cands = TransposeFamily().propose(ctx)
    itemsize = spec.args[0].dtype.itemsize
    vec = [c for c in cands if c.params["vec"] == 16 and c.params["pad"] == 0]
    picked = {c.key: c for c in (cands[0], *vec[:1], cands[-1])}.values()
    rng = np.random.default_rng(3)
    scalars = [a for a in spec.args if not a.is_buffer]
    for cand in picked:
        text = SHIM + cand.source.replace("#include <cuda_bf16.h>\n", "") + _main(name, spec, itemsize)
        cpp = tmp_path / f"emu_{hashlib.sha1(text.encode()).hexdigest()[:8]}.cpp"
        cpp.write_text(text)
        exe = tmp_path / "emu"
        build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", str(cpp), "-o", str(exe), "-pthread"],
                               capture_output=True, text=True)
        assert build.returncode == 0, build.stderr[-3000:]
        for size in EMU_SIZES[name]:
            shape = [size[d] for d in CASES[name][1]]
            x = rng.integers(0, np.iinfo(_NP[spec.args[0].dtype.value]).max, size=shape, dtype=_NP[spec.args[0].dtype.value])
            x.tofile(tmp_path / "x.bin")
            grid = evaluate(cand.launch.grid[0], size)
            for off in (0, 1):
                argv = [str(exe), str(grid), str(cand.launch.block[0]), str(off)] + [str(size[a.value]) for a in scalars]
                run = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
                assert run.returncode == 0 and run.stdout.strip() == "ok", (cand.description, size, run.stdout[-300:])
                got = np.fromfile(tmp_path / "y.bin", x.dtype)
                want = np.transpose(x, perm).ravel()
                assert np.array_equal(got, want), (cand.description, size, off, int((got != want).sum()))


BASE = "    int j = i % b, k = i / b;\n"


@pytest.mark.parametrize("store, why", [
    # copies, whatever way they are written (a red team found each refused as "not a plain copy", 2026-12-04)
    ("y[j * a + k] = (x[k * b + j]);", None),
    ("y[j * a + k] = static_cast<float>(x[k * b + j]);", None),
    ("y[j * a + k] = __ldg(x + k * b + j);", None),
    ("y[j * a + k] = __ldcs(&x[k * b + j]);", None),
    ("y[j * a + k] = *(x + k * b + j);", None),
    ("float u = x[k * b + j];\n    float v = u;\n    y[j * a + k] = v;", None),
    # not copies (accepted before the same red team)
    ("y[j * a + k] = (float)(int)x[k * b + j];", "a cast to int"),
    ("y[j * a + k] += x[k * b + j];", "in place"),
    ("y[j * a + k] = x[k * b + j];\n    y[j * a + k]++;", "in place"),
    ("float v = x[k * b + j];\n    v = fabsf(v);\n    y[j * a + k] = v;", "a call to fabsf"),
    ("y[j * a + k] = -x[k * b + j];", "the operator '-'"),
    ("y[j * a + k] = x[k * b + j] * 2.0f;", "the operator '*'"),
])
def test_what_the_copy_check_takes(store, why):
    body = BASE + "    " + store
    spec, src = case("cp", "f32", ["A", "B"], ["B", "A"], body)
    ctx = example_ctx(NCHW, "cp", spec, src)
    got = TransposeFamily().why_not(ctx)
    assert (got is None) if why is None else (got is not None and why in got), (store, got)


@pytest.mark.parametrize("xs, ys, perm", [
    (["A", "1"], ["1", "A"], None),                      # axes of extent 1 aside: a copy in memory
    (["A", "B", "1"], ["B", "A", "1"], (1, 0)),          # a real transpose with a unit row
    (["A", "B", "1", "1"], ["1", "B", "A", "1"], (1, 0)),
    (["2*H", "W"], ["W", "2 * H"], (1, 0)),              # the same expression, spaced differently
])
def test_unit_axes_and_spacing(xs, ys, perm):
    spec, _ = case("u", "f32", xs, ys, "", scalars=sorted({c for d in xs for c in d if c.isalpha()}))
    ms = match_spec(spec)
    assert (ms is None) if perm is None else [m.perm for m in ms] == [perm], (xs, ys, match_spec.why(spec))


def test_a_second_candidate_in_one_file_gets_its_own_helper_names():
    """A file that holds an applied transpose candidate already (the rewrite accepted, the job run again; or a second
    kernel rewritten): the helpers at file scope take a suffix, so the file still compiles."""
    spec, src = _case("square_f64")
    ctx = example_ctx(NCHW, "square_f64", spec, src)
    first = TransposeFamily().propose(ctx)[0]
    ctx2 = example_ctx(NCHW, "square_f64", spec, first.source)
    again = TransposeFamily().propose(ctx2)[-1]
    assert "ptxf_transpose_tile_2<" in again.source and "void ptxf_transpose_tile(" in again.source
    r = compile_candidate(again, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log[-2000:]


def test_a_macro_of_the_users_file_does_not_reach_the_template():
    spec, src = _case("nchw")
    src = "#define C 3\n#define R 4\n#define p 5\n" + src.replace("int c_ = i % c", "int c_ = i % c + 0 * C")
    ctx = example_ctx(NCHW, "nchw", spec, src)
    for cand in TransposeFamily().propose(ctx)[:3]:
        r = compile_candidate(cand, "sm_90a")
        assert not isinstance(r, CompileFailed), r.log[-2000:]
