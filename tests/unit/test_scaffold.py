"""``harness/scaffold.py``: a spec scaffolded from a kernel's signature (roles, dtypes, size symbols, the launch)
loads as written, marks its guesses TODO, and is appended to an existing spec without touching it."""
from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from ptxfactory.harness.scaffold import (
    ScaffoldError, init_spec, is_size_name, plan_spec, scaffold_kernel, write_spec,
)
from ptxfactory.harness.source import check_signature, find_kernel, find_kernels
from ptxfactory.protocol import load_spec, parse_spec, spec_path_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def scaffold(source: str, kernel: str):
    """The scaffold's tables parsed (they must load) and the raw scaffold."""
    s = scaffold_kernel(source, kernel, "k.cu")
    spec = parse_spec(s.table, "k.cu.toml").kernels[kernel]
    return spec, s


def args(spec) -> dict:
    return {a.name: a for a in spec.args}


def line_comment(s, needle: str) -> str:
    return next(line for line in s.table.splitlines() if f"name = {needle}" in line)


# --- roles and dtypes --------------------------------------------------------------------------------

ROLES = """
#include <cuda_bf16.h>
__global__ void k(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* y, float* acc, float* state,
                  float* lut, float* unused, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = x[i];
    state[i] += 1.0f;
    *(lut + i) = lut[0] * 2.0f;
    atomicAdd(&acc[0], 1.0f);
}
"""


def test_roles_from_const_and_from_how_the_body_uses_each_pointer():
    spec, s = scaffold(ROLES, "k")
    a = args(spec)
    assert a["x"].role == "in" and a["x"].dtype.value == "bf16" and a["x"].init == "normal"
    assert a["y"].role == "out" and a["y"].dtype.value == "bf16" and a["y"].init is None
    assert a["state"].role == "inout"  # +=: read and written
    assert a["lut"].role == "inout"  # *(lut + i) = ... and lut[0]
    assert a["acc"].role == "inout" and "TODO" in line_comment(s, '"acc"') and "address taken" in line_comment(s, '"acc"')
    assert a["unused"].role == "out" and "never uses it" in line_comment(s, '"unused"')
    assert "TODO" not in line_comment(s, '"y"').split("; ", 1)[1]  # only the shape is a guess there
    # a float atomicAdd: the sum's last bits depend on the threads' order, so runs are judged by the tolerances
    assert spec.check.deterministic is False and "float atomics on acc (k.cu:10)" in s.table
    check_signature(spec, find_kernel(ROLES, "k"))  # what the scaffold says, the signature check accepts


def test_integer_atomics_and_float_max_keep_runs_deterministic():
    src = """__global__ void k(const float* x, int* hist, float* m, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n) return;
        atomicAdd(&hist[(int)x[i] & 15], 1);
        atomicMax((int*)m, __float_as_int(x[i]));
    }"""
    spec, s = scaffold(src, "k")
    assert spec.check.deterministic is True and "deterministic" not in s.table
    spec, s = scaffold(src.replace("atomicAdd(&hist[(int)x[i] & 15], 1);", "atomicAdd(m + 1, x[i]);"), "k")
    assert spec.check.deterministic is False and "float atomics on m (k.cu:" in s.table


def test_a_pointer_only_read_is_in_and_one_passed_on_is_a_todo():
    src = """__device__ void helper(float* p, int i) { p[i] = 0; }
    __global__ void k(float* table, float* out, float* scratch, int N) {
        int i = threadIdx.x;
        out[i] = table[i];
        helper(scratch, i);
    }"""
    spec, s = scaffold(src, "k")
    a = args(spec)
    assert a["table"].role == "in" and "could be const" in line_comment(s, '"table"')
    assert a["out"].role == "out"
    assert a["scratch"].role == "out" and "passed on at k.cu:5" in line_comment(s, '"scratch"')


@pytest.mark.parametrize("ctype, dtype", [
    ("float", "f32"), ("double", "f64"), ("__nv_bfloat16", "bf16"), ("__half", "f16"), ("half", "f16"),
    ("int", "i32"), ("int64_t", "i64"), ("long long", "i64"), ("uint8_t", "u8"), ("unsigned int", "u32"), ("int8_t", "i8"),
])
def test_dtypes_from_c_types(ctype, dtype):
    src = f"__global__ void k(const {ctype}* x, {ctype}* y, int n) {{ y[0] = x[0]; }}"
    spec, _ = scaffold(src, "k")
    assert args(spec)["x"].dtype.value == dtype and args(spec)["y"].dtype.value == dtype
    check_signature(spec, find_kernel(src, "k"))


def test_a_type_without_a_dtype_gets_the_nearest_and_a_todo():
    spec, s = scaffold("__global__ void k(float* y, ptrdiff_t n) { y[0] = 1; }", "k")
    assert args(spec)["n"].dtype.value == "i64" and args(spec)["n"].value == "n"
    assert "TODO dtype: ptrdiff_t has no spec dtype" in line_comment(s, '"n"')


def test_a_size_t_length_is_a_u64_scalar_and_the_spec_checks_against_the_signature():
    """A new user's ``size_t n`` (the trial's MSE kernel): ``u64``, no TODO, and the signature check accepts it."""
    src = "__global__ void k(const float* x, float* y, size_t n) { size_t i = blockIdx.x; if (i < n) y[i] = x[i]; }"
    spec, s = scaffold(src, "k")
    assert args(spec)["n"].dtype.value == "u64" and "TODO dtype" not in line_comment(s, '"n"')
    check_signature(spec, find_kernel(src, "k"))


def test_integer_inputs_get_randint_and_index_buffers_range_over_a_size():
    src = """__global__ void k(const int* idx, const int* counts, const int8_t* q, const uint8_t* b, float* y, int T) {
        y[0] = idx[0] + counts[0] + q[0] + b[0]; }"""
    spec, _ = scaffold(src, "k")
    assert args(spec)["idx"].init == "randint(0, T)"
    assert args(spec)["counts"].init == "randint(0, 100)"
    assert args(spec)["q"].init == "randint(-128, 128)" and args(spec)["b"].init == "randint(0, 256)"


def test_an_integer_buffer_whose_values_divide_starts_at_one():
    """A PageRank's out-degrees divide each neighbour's rank (directly, or through a local): init from 1, not 0."""
    src = """__global__ void k(const int* deg, const int* cnt, const int* other, const float* r, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n) return;
        int c = cnt[i];
        y[i] = r[i] / deg[i] + (float)(i % c) + other[i]; }"""
    spec, s = scaffold(src, "k")
    assert args(spec)["deg"].init == "randint(1, 100)" and "its values divide at k.cu:5" in line_comment(s, '"deg"')
    assert args(spec)["cnt"].init == "randint(1, 100)"
    assert args(spec)["other"].init == "randint(0, 100)"


# --- scalars and sizes -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["n", "N", "M", "K", "D", "rows", "cols", "len", "size", "num_tokens", "nElems",
                                  "hidden_size", "seq_len", "batch", "n_heads", "vocab", "nTokens", "numRows", "total_len"])
def test_size_names(name):
    assert is_size_name(name)


@pytest.mark.parametrize("name", ["i", "x", "stride", "alpha", "eps", "seed", "offset", "ld", "max", "lambda", "nothing",
                                  "normalize", "lengthy_flag"])
def test_not_size_names(name):
    assert not is_size_name(name)


def test_integer_size_scalars_become_size_symbols_and_other_scalars_todo_values():
    src = """__global__ void k(const float* x, float* y, int rows, int64_t cols, int stride, float alpha,
                               float eps, float n) { y[stride] = x[stride]; }"""
    spec, s = scaffold(src, "k")
    a = args(spec)
    assert spec.symbols == ["rows", "cols"]
    assert a["rows"].value == "rows" and a["cols"].value == "cols" and a["cols"].dtype.value == "i64"
    assert a["x"].shape == ["rows", "cols"] and "TODO shape" in line_comment(s, '"x"')
    assert a["stride"].value == 1 and "TODO value of stride" in line_comment(s, '"stride"')
    # a float is never a size; float scalars get distinct values, none 0 or 1 (a dropped or swapped scalar shows)
    assert a["alpha"].value == 0.75 and a["eps"].value == 1e-5 and a["n"].value == 0.5
    assert "TODO sizes: placeholders" in s.table
    # placeholder sizes: odd check sizes, oblong one way then the other (swapped sizes show), a bench size of 2**24
    assert all(v % 2 for size in spec.check.sizes for v in size.values())
    (small, large) = spec.check.sizes
    assert small["rows"] < small["cols"] and large["rows"] > large["cols"]
    assert spec.bench.sizes == [{"rows": 4096, "cols": 4096}]


def test_a_kernel_without_size_arguments_gets_a_placeholder_symbol():
    spec, s = scaffold("__global__ void k(float* y) { y[threadIdx.x] = 0; }", "k")
    assert spec.symbols == ["N"] and args(spec)["y"].shape == ["N"]
    assert "no size argument" in s.table


def test_three_symbols_keep_the_buffers_small():
    spec, _ = scaffold("__global__ void k(const float* a, float* b, int B, int H, int D) { b[0] = a[0]; }", "k")
    assert spec.bench.sizes == [{"B": 256, "H": 256, "D": 256}]
    assert max(args(spec)["a"].numel(s) for s in spec.check.sizes) < 100_000


SQUARE = """
__global__ void mm(const float* A, const float* B, float* C, int N) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N && j < N) {
        float s = 0.f;
        for (int k = 0; k < N; k++) s += A[i * N + k] * B[k * N + j];
        C[i * N + j] = s;
    }
}
"""


def test_a_square_buffer_of_one_symbol_gets_sizes_that_fit():
    """[N, N] buffers of one size symbol: the placeholder sizes shrink until the largest buffer holds 2**24 elements at
    the bench size and 2**20 at a check size (a new user's matmul: the bench's N = 2**24 squared was over the buffer
    limit, and init stopped)."""
    spec, _ = scaffold(SQUARE, "mm")
    assert spec.bench.sizes == [{"N": 4096}]
    assert all(s["N"] % 2 == 1 and args(spec)["A"].numel(s) <= 1 << 20 for s in spec.check.sizes)
    assert len({s["N"] for s in spec.check.sizes}) == 2


# --- the launch --------------------------------------------------------------------------------------

LAUNCH = """
#define THREADS 128
__global__ void scale(const float* x, float* y, int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i];
}
__global__ void rows(const float* x, float* y, int M, int N) { y[blockIdx.x] = x[0]; }

void run(const float* x, float* y, int len, int m, int cols) {
    const int threads = THREADS;
    int blocks = (len + threads - 1) / threads;
    dim3 grid(blocks, 1), block(threads);
    scale<<<grid, block, threads * sizeof(float)>>>(x, y, len, 2.0f);
    rows<<<dim3(m), dim3(256, 1, 1)>>>(x, y, m, cols);
}
"""


def test_the_launch_is_read_from_the_file_and_mapped_back_to_the_size_symbols():
    spec, s = scaffold(LAUNCH, "scale")
    assert spec.launch.grid == ["cdiv(n, 128)"] and spec.launch.block == [128] and spec.launch.shared_mem == 512
    assert s.launch_from == "k.cu:13" and "from scale<<<grid, block, threads * sizeof(float)>>> at k.cu:13" in s.table
    spec, s = scaffold(LAUNCH, "rows")
    assert spec.launch.grid == ["M"] and spec.launch.block == [256] and s.launch_from == "k.cu:14"
    assert "TODO launch" not in s.table


def test_no_launch_in_the_file_gives_a_todo_default():
    spec, s = scaffold("__global__ void k(const float* x, float* y, int M, int N) { y[0] = x[0]; }", "k")
    assert spec.launch.grid == ["cdiv(M * N, 256)"] and spec.launch.block == [256] and spec.launch.policy == "free"
    assert "TODO launch: no k<<<...>>> in this file" in s.table and s.launch_from is None


def test_a_launch_that_cannot_be_followed_gives_the_default_and_says_why():
    src = """__global__ void k(float* y, int n) { y[0] = 1; }
    void run(float* y, int n) { k<<<grid_for(n), 256>>>(y, n); }"""
    spec, s = scaffold(src, "k")
    assert spec.launch.grid == ["cdiv(n, 256)"]
    assert "TODO launch: k<<<grid_for(n), 256>>> at k.cu:2: cannot follow 'grid_for(n)'" in s.table


def test_a_launch_that_does_not_fit_the_placeholder_sizes_falls_back():
    src = """__global__ void k(float* y, int M, int D) { y[0] = 1; }
    void run(float* y, int M, int D) { k<<<M, D>>>(y, M, D); }"""
    spec, s = scaffold(src, "k")  # block = [D] is over 1024 threads at the bench size D = 4096
    assert spec.launch.block == [256] and "does not fit the placeholder sizes" in s.table


def test_the_nearest_launch_is_used():
    src = """__global__ void k(float* y, int n) { y[0] = 1; }
    void near(float* y, int n) { k<<<n, 64>>>(y, n); }
    void far(float* y, int n) { int pad = 0; k<<<n, 32>>>(y, n); }"""
    spec, _ = scaffold(src, "k")
    assert spec.launch.block == [64]


# --- templates ---------------------------------------------------------------------------------------

def test_a_template_kernel_gets_a_tune_template_todo_from_the_launch_or_the_defaults():
    src = """#include <cuda_bf16.h>
    template <typename T, int VEC = 4, int BLOCK_THREADS>
    __global__ void k(const T* x, T* y, int n) { y[0] = x[0]; }
    void run(const __nv_bfloat16* x, __nv_bfloat16* y, int n) { k<__nv_bfloat16, 8, 128><<<n, 128>>>(x, y, n); }"""
    spec, s = scaffold(src, "k")
    assert spec.tune.template == {"T": ["__nv_bfloat16"], "VEC": [8], "BLOCK_THREADS": [128]}
    assert args(spec)["x"].dtype.value == "bf16" and "T = __nv_bfloat16" in line_comment(s, '"x"')
    assert "TODO template" in s.table

    no_launch = src.split("void run")[0]
    spec, s = scaffold(no_launch, "k")
    assert spec.tune.template == {"T": ["float"], "VEC": [4], "BLOCK_THREADS": [256]}
    assert "T = float is a placeholder" in s.table and "VEC from its default" in s.table
    assert args(spec)["x"].dtype.value == "f32"


# --- whole files -------------------------------------------------------------------------------------

def test_todo_lines_point_at_todo_comments(tmp_path: Path):
    src = tmp_path / "k.cu"
    src.write_text(LAUNCH)
    added = plan_spec(LAUNCH, src, None, None)
    lines = added.text.splitlines()
    assert added.create and added.kernels == ("scale", "rows")
    assert added.todos and all("TODO" in lines[n - 1] and m in lines[n - 1] for n, m in added.todos)
    assert set(parse_spec(added.text).kernels) == {"scale", "rows"}


def test_a_new_table_is_appended_and_the_existing_text_is_untouched(tmp_path: Path):
    src = tmp_path / "k.cu"
    src.write_text(LAUNCH)
    existing = scaffold_kernel(LAUNCH, "scale", "k.cu").table.replace("rtol = 0.001", "rtol = 0.5") + "# my note"  # no final newline
    spec_path_for(src).write_text(existing)
    added = init_spec(src)
    assert not added.create and added.kernels == ("rows",)
    text = spec_path_for(src).read_text()
    assert text.startswith(existing + "\n") and "# my note" in text
    loaded = load_spec(spec_path_for(src))
    assert set(loaded.kernels) == {"scale", "rows"} and loaded.kernels["scale"].check.rtol == 0.5
    lines = text.splitlines()
    assert all("TODO" in lines[n - 1] for n, _ in added.todos)


def test_an_existing_table_is_refused_and_nothing_is_written(tmp_path: Path):
    src = tmp_path / "k.cu"
    src.write_text(LAUNCH)
    spec_path_for(src).write_text("[kernel.scale]\nwhatever = 1\n")
    with pytest.raises(ScaffoldError, match=r"k.cu.toml already has \[kernel.scale\]: nothing was written"):
        init_spec(src, ["scale"])
    spec_path_for(src).write_text("[kernel.scale]\n[kernel.rows]\n")
    with pytest.raises(ScaffoldError, match="already describes every kernel of k.cu"):
        init_spec(src)
    assert spec_path_for(src).read_text() == "[kernel.scale]\n[kernel.rows]\n"


def test_a_spec_that_is_not_toml_is_refused(tmp_path: Path):
    src = tmp_path / "k.cu"
    src.write_text(LAUNCH)
    spec_path_for(src).write_text("[kernel.scale\n")
    with pytest.raises(ScaffoldError, match="k.cu.toml: not valid TOML"):
        init_spec(src, ["rows"])
    assert spec_path_for(src).read_text() == "[kernel.scale\n"


def test_unknown_kernel_and_a_file_that_appeared_meanwhile(tmp_path: Path):
    src = tmp_path / "k.cu"
    src.write_text(LAUNCH)
    with pytest.raises(ScaffoldError, match=r"no __global__ kernel named 'nope' \(found: scale, rows\)"):
        init_spec(src, ["nope"])
    added = plan_spec(LAUNCH, src, ["scale"], None)
    spec_path_for(src).write_text("# mine\n")
    with pytest.raises(ScaffoldError, match="appeared meanwhile"):
        write_spec(added)
    assert spec_path_for(src).read_text() == "# mine\n"


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.iterdir() if list(p.glob("*.cu"))))
def test_every_example_kernel_scaffolds_a_spec_that_loads_and_matches_its_signature(example: str, tmp_path: Path):
    """The user's check: ``ptxfactory init`` on each example's source alone (a copy without its spec)."""
    for cu in (EXAMPLES / example).glob("*.cu"):
        shutil.copy(cu, tmp_path / cu.name)
        added = init_spec(tmp_path / cu.name)
        spec = load_spec(added.path)
        source = cu.read_text()
        assert set(spec.kernels) == {k.name for k in find_kernels(source)}
        mine = tomllib.loads((cu.parent / (cu.name + ".toml")).read_text())["kernel"]
        for name, k in spec.kernels.items():
            kernel = find_kernel(source, name)
            check_signature(k, kernel)
            # the roles the example's author wrote, and the dtypes, but for a template's type parameters
            # (T = float is a placeholder the user replaces)
            typed = {p.name for p in kernel.params if p.type not in kernel.template_params}
            assert [(a.name, a.role, a.dtype.value if a.name in typed else None) for a in k.args] == [
                (a["name"], a["role"], a["dtype"] if a["name"] in typed else None) for a in mine[name]["args"]]


def test_a_kernel_indexing_with_y_gets_a_2d_default_launch():
    src = """__global__ void t(const float* x, float* y, int M, int N) {
        int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
        if (row < M && col < N) y[col * M + row] = x[row * N + col];
    }"""
    spec, s = scaffold(src, "t")
    assert spec.launch.grid == ["cdiv(N, 32)", "cdiv(M, 8)"] and spec.launch.block == [32, 8]
    assert "from the kernel's guards" in s.table and "TODO launch" in s.table  # the guards give both axes


def test_a_2d_launch_through_dim3_and_constexpr_and_a_host_template_argument_left_alone():
    src = """constexpr int TILE = 16;
    extern "C" __global__ void mm(const float* A, const float* B, float* C, int M, int N, int K) { C[0] = A[0] * B[0]; }
    template <typename T>
    __global__ void relu(const T* x, T* y, int64_t numel) { y[0] = x[0]; }
    template <typename T>
    void launch_relu(const T* x, T* y, int64_t n, cudaStream_t stream) {
        int threads = 256;
        int blocks = std::min((int)((n + threads - 1) / threads), 1024);
        relu<T><<<blocks, threads, 0, stream>>>(x, y, n);
    }
    void host(const float* a, const float* b, float* c, int m, int n, int k) {
        dim3 grid((n + TILE - 1) / TILE, (m + TILE - 1) / TILE);
        dim3 block(TILE, TILE);
        mm<<<grid, block>>>(a, b, c, m, n, k);
    }"""
    spec, _ = scaffold(src, "mm")
    assert spec.launch.grid == ["cdiv(N, 16)", "cdiv(M, 16)"] and spec.launch.block == [16, 16]
    spec, s = scaffold(src, "relu")
    assert spec.launch.grid == ["min(cdiv(numel, 256), 1024)"] and spec.launch.block == [256]
    assert spec.tune.template == {"T": ["float"]} and "T = float is a placeholder" in s.table  # not the host's "T"


def test_roles_follow_local_aliases():
    src = """__global__ void k(float* x, float* y, float* z, int M, int N) {
        int r = blockIdx.x;
        const float* xr = x + r * N;
        float* yr = y + (size_t)r * N;
        float* zr = z;
        float* zz = zr + 1;
        for (int i = threadIdx.x; i < N; i += blockDim.x) { yr[i] = xr[i]; zz[i] += 1.0f; }
    }"""
    spec, s = scaffold(src, "k")
    assert [a.role for a in spec.args[:3]] == ["in", "out", "inout"]
    assert "could be const" in line_comment(s, '"x"') and "TODO role" not in s.table


GUARDED = {
    # a new user's thread-per-row kernel without its launch: one thread per row, not per element
    "row": ("""__global__ void l2(const float* x, float* y, int M, int N) {
        int row = blockIdx.x * blockDim.x + threadIdx.x;
        if (row >= M) return;
        for (int j = 0; j < N; j++) y[row * N + j] = x[row * N + j]; }""", ["cdiv(M, 256)"], [256]),
    # batched matrix-vector, the trial's bmv: the guard is i < M, whatever the other sizes are
    "bmv": ("""__global__ void bmv(const float* A, const float* x, float* y, int B, int M, int K) {
        size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
        if (i < M) { float s = 0; for (int k = 0; k < K; k++) s += A[i * K + k] * x[k]; y[i] = s; } }""",
            ["cdiv(M, 256)"], [256]),
    # 2-D: x and y guards
    "2d": ("""__global__ void t(const float* a, float* b, int rows, int cols) {
        int c = threadIdx.x + blockIdx.x * blockDim.x; int r = blockIdx.y * blockDim.y + threadIdx.y;
        if (c < cols && r < rows) b[c * rows + r] = a[r * cols + c]; }""", ["cdiv(cols, 32)", "cdiv(rows, 8)"], [32, 8]),
    # a thread per batch element, a block row per channel (int c = blockIdx.y): the y axis is one block per channel
    "block_y": ("""__global__ void chan(const float* x, float* y, int B, int C, int HW) {
        int b = blockIdx.x * blockDim.x + threadIdx.x; int c = blockIdx.y;
        if (b >= B || c >= C) return;
        for (int i = 0; i < HW; i++) y[(b * C + c) * HW + i] = x[(b * C + c) * HW + i]; }""", ["cdiv(B, 256)", "C"], [256]),
    # and on z, under a 2-D thread grid
    "block_z": ("""__global__ void planes(const float* a, float* b, int P, int H, int W) {
        int w = blockIdx.x * blockDim.x + threadIdx.x; int h = blockIdx.y * blockDim.y + threadIdx.y;
        const int p = (int)blockIdx.z;
        if (w < W && h < H && p < P) b[(p * H + h) * W + w] = 2 * a[(p * H + h) * W + w]; }""",
                ["cdiv(W, 32)", "cdiv(H, 8)", "P"], [32, 8]),
}


@pytest.mark.parametrize("case", list(GUARDED))
def test_without_a_launch_in_the_file_the_kernel_s_guard_gives_the_grid(case):
    source, grid, block = GUARDED[case]
    name = source.split("void ")[1].split("(")[0]
    spec, s = scaffold(source, name)
    assert spec.launch.grid == grid and spec.launch.block == block, (spec.launch, s.table)
    assert "from the kernel's guard" in s.table


def test_a_guard_on_something_else_than_size_parameters_keeps_the_one_thread_per_element_guess():
    spec, s = scaffold("""__global__ void k(const float* x, float* y, const int* n, int N) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n[0]) y[i] = x[i]; }""", "k")
    assert spec.launch.grid == ["cdiv(N, 256)"] and "guessed one thread per element" in s.table


@pytest.mark.parametrize("blocks,expected", [
    ("(total + threads - 1) / threads", "cdiv(N * C * (H // 2) * (W // 2), 256)"),
    ("(total + (threads - 1)) / threads", "cdiv(N * C * (H // 2) * (W // 2), 256)"),
    ("(N * C * Ho * Wo + 255) / 256", "cdiv(N * C * (H // 2) * (W // 2), 256)"),
    ("(total + threads) / threads", "((N * C * (H // 2) * (W // 2)) + 256) // 256"),  # not a rounded-up division
])
def test_a_rounded_up_division_of_any_numerator_becomes_cdiv(blocks, expected):
    """The grid written as (a + b - 1) / b, whatever a is, becomes cdiv(a, b): a launch tune can recompute for
    another block size (a new user's max-pool kept ((...) + 256 - 1) // 256 and got no block-size candidates)."""
    src = f"""__global__ void k(const float* x, float* y, int N, int C, int H, int W) {{ y[0] = x[0]; }}
    void run(const float* x, float* y, int N, int C, int H, int W) {{
        int Ho = H / 2, Wo = W / 2;
        int total = N * C * (H / 2) * (W / 2);
        int threads = 256;
        int blocks = {blocks};
        k<<<blocks, threads>>>(x, y, N, C, H, W);
    }}"""
    spec, _ = scaffold(src, "k")
    assert spec.launch.grid == [expected] and spec.launch.block == [256]


CONV_NO_LAUNCH = """__global__ void conv2d(const float* x, const float* w, float* y, int Nb, int C, int H, int W, int OC, int KH, int KW) {
    int OH = H - KH + 1;
    int OW = W - KW + 1;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = Nb * OC * OH * OW;
    if (idx >= total) return;
    int ow = idx % OW;
    int n = idx / (OW * OH * OC);
    float acc = 0.0f;
    for (int ic = 0; ic < C; ic++) acc += x[(n * C + ic) * H * W + ow];
    y[idx] = acc + w[0];
}
"""


def test_integers_used_as_extents_are_size_symbols_whatever_their_names_and_locals_reach_the_guard():
    """Nb, OC, KH, KW read as nothing like a size name, but the body compares or divides by them (directly or through
    OH = H - KH + 1): size symbols, not value = 1 TODOs; and the guard's bound, a local made of such locals, gives the
    grid (a new user's convolution once got cdiv of the product of every symbol)."""
    spec, s = scaffold(CONV_NO_LAUNCH, "conv2d")
    scalars = {a.name: a.value for a in spec.args if a.role == "scalar"}
    assert scalars == {n: n for n in ("Nb", "C", "H", "W", "OC", "KH", "KW")}, scalars
    assert spec.launch.grid == ["cdiv((Nb * OC * (H - KH + 1) * (W - KW + 1)), 256)"], spec.launch.grid


MATADD = """
__global__ void MatAdd(const float* A, const float* B, float* C, int width, int height)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col < width && row < height) C[row * width + col] = A[row * width + col] + B[row * width + col];
}
int main() {
    int w = 1000, h = 300;
    dim3 threadsPerBlock(16, 16);
    dim3 numBlocks(w / threadsPerBlock.x, h / threadsPerBlock.y);
    MatAdd<<<numBlocks, threadsPerBlock>>>(0, 0, 0, w, h);
}
"""


def test_a_launch_it_cannot_follow_takes_the_axes_from_the_kernels_guards():
    """The guide's MatAdd with a block from a helper: ``threadsPerBlock.x`` cannot be followed back to the sizes, so
    the launch is a guess; the guards (col < width on x, row < height on y) give x over width and y over height, not
    the symbols' order."""
    spec, s = scaffold(MATADD.replace("dim3 threadsPerBlock(16, 16);", "dim3 threadsPerBlock = pick_block();"), "MatAdd")
    assert spec.launch.grid == ["cdiv(width, 32)", "cdiv(height, 8)"] and spec.launch.block == [32, 8]
    assert "cannot follow" in s.table and "from the kernel's guards" in s.table


def test_a_source_that_does_not_parse_gets_a_todo_with_its_line():
    src = """__global__ void k(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x
        if (i < n) y[i] = x[i];
    }"""
    spec, s = scaffold(src, "k")
    todo = [t for _, t in s.todos if "does not parse" in t]
    assert todo and "k.cu:" in todo[0]
    spec, s = scaffold(src.replace("threadIdx.x\n", "threadIdx.x;\n"), "k")
    assert not any("does not parse" in t for _, t in s.todos)


def test_derived_extents_keep_square_check_sizes():
    """A 1-D convolution's output length N - K + 1 needs N >= K: the oblong sizes would make the guard's grid 0, so
    the scaffold falls back to equal sizes, and the spec still loads."""
    src = """__global__ void conv(const float* x, const float* w, float* y, int N, int K) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= N - K + 1) return;
        float s = 0.0f;
        for (int k = 0; k < K; ++k) s += x[i + k] * w[k];
        y[i] = s;
    }"""
    spec, s = scaffold(src, "conv")
    assert all(size["N"] >= size["K"] for size in spec.check.sizes)


FIXED_EXTENTS = """
__global__ void reduce(const float* x, float* result, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(result, s[0]);
}
__global__ void histo(const unsigned char* data, int* bins, long size) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < size) atomicAdd(&bins[data[i]], 1);
}
__global__ void stats(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { atomicAdd(&out[0], x[i]); atomicAdd(&out[1], x[i] * x[i]); out[i % 2] += 0.0f; }
}
"""


def test_buffers_reached_at_fixed_indices_get_their_own_extent():
    """An accumulator used only as ``atomicAdd(result, v)`` is one element, a histogram indexed by a byte buffer's values
    256, not the input's length (which overstated the bytes moved and hid smem_hist); any other index keeps the guess."""
    spec, s = scaffold(FIXED_EXTENTS, "reduce")
    assert args(spec)["result"].shape == [1] and "shape [1]: only element 0 used" in line_comment(s, '"result"')
    assert "TODO shape" not in line_comment(s, '"result"') and args(spec)["x"].shape == ["n"]
    spec, s = scaffold(FIXED_EXTENTS, "histo")
    assert args(spec)["bins"].shape == [256] and "byte buffer" in line_comment(s, '"bins"')
    spec, s = scaffold(FIXED_EXTENTS, "stats")  # out[i % 2]: 0 or 1, read from the index
    assert args(spec)["out"].shape == [2] and "TODO shape" not in line_comment(s, '"out"')
    spec, s = scaffold(FIXED_EXTENTS.replace("out[i % 2]", "out[(int)x[i]]"), "stats")  # an index it cannot read
    assert args(spec)["out"].shape == ["n"] and "TODO shape" in line_comment(s, '"out"')
    spec, s = scaffold(FIXED_EXTENTS.replace(" out[i % 2] += 0.0f;", ""), "stats")
    assert args(spec)["out"].shape == [2]


def test_three_size_symbols_get_a_different_value_each_one_way_then_the_other():
    """Mean pooling over tokens (B, T, C): every symbol its own value in each check size, the order reversed in the
    second, so a kernel that swaps T and C (or B and C) reads the wrong elements and fails (a helper's trial found all
    three equal, 2026-12-03)."""
    src = """__global__ void pool(const float* x, float* y, int B, int T, int C) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= B * C) return;
        int b = i / C, c = i % C;
        float s = 0.0f;
        for (int t = 0; t < T; ++t) s += x[(b * T + t) * C + c];
        y[i] = s / T;
    }"""
    spec, _ = scaffold(src, "pool")
    first, second = spec.check.sizes[:2]
    assert len({first["B"], first["T"], first["C"]}) == 3 and len({second["B"], second["T"], second["C"]}) == 3
    assert first["B"] < first["T"] < first["C"] and second["B"] > second["T"] > second["C"]
    assert all(v % 2 == 1 for size in (first, second) for v in size.values())


def test_an_output_indexed_only_by_the_thread_index_takes_the_guard_bound_as_its_shape():
    """A per-row scale written scales[row] under if (row >= M) gets [M] (read from the index: no TODO), a pooled output
    y[i] under i >= B * C gets [B, C], the guard's product in its written order (both were every size symbol: [M, N],
    [B, T, C])."""
    src = """#include <cstdint>
    __global__ void quant(const float* x, int8_t* q, float* scales, int M, int N) {
        int row = blockIdx.x * blockDim.x + threadIdx.x;
        if (row >= M) return;
        float amax = 0.0f;
        for (int j = 0; j < N; j++) amax = fmaxf(amax, fabsf(x[row * N + j]));
        for (int j = 0; j < N; j++) q[row * N + j] = (int8_t)__float2int_rn(x[row * N + j] / amax);
        scales[row] = amax;
    }"""
    spec, s = scaffold(src, "quant")
    shapes = {a.name: list(a.shape) for a in spec.args if a.is_buffer}
    assert shapes["scales"] == ["M"] and shapes["q"] == ["M", "N"] and shapes["x"] == ["M", "N"]
    assert "shape [M]: the largest index its accesses reach (scales[row] at k.cu:8)" in line_comment(s, '"scales"')
    assert "TODO shape" not in line_comment(s, '"scales"')
    pool = """__global__ void pool(const float* x, float* y, int B, int T, int C) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= B * C) return;
        float s = 0.0f;
        for (int t = 0; t < T; ++t) s += x[((i / C) * T + t) * C + i % C];
        y[i] = s / T;
    }"""
    spec, s = scaffold(pool, "pool")
    assert {a.name: list(a.shape) for a in spec.args if a.is_buffer}["y"] == ["B", "C"]
    # the kernel takes its index apart by C (i / C, i % C): the order is read, no guess
    assert "shape [B, C]: one element per thread below the guard" in line_comment(s, '"y"')
    assert "taken apart as (i / C)" in line_comment(s, '"y"') and "TODO shape" not in line_comment(s, '"y"')
    # taken apart by B instead (the guard's order is not the kernel's): the order stays a guess
    spec, s = scaffold(pool.replace("x[((i / C) * T + t) * C + i % C]", "x[((i % B) * T + t) * C + i / B]"), "pool")
    assert "TODO shape [B, C]: one element per thread below the guard" in line_comment(s, '"y"')


def test_a_flat_output_takes_the_launchers_simplified_extents_in_the_order_the_kernel_reads_its_index():
    """A helper's new user (2026-12-05): a transposed 1-D convolution whose launcher computes ``Lout = (L - 1) * stride
    - 2 * pad + dil * (K - 1) + 1`` from literals, written at the flat index ``idx`` and taken apart by ``% Lout`` and
    ``/ (Lout * Cout)``: Lout's value is the simplified ``2 * L + 1`` (was the literal arithmetic as written) and y is
    ``[N, Cout, 2 * L + 1]``, read from the kernel's divisions (was the flat product, a TODO)."""
    src = """
__global__ void convt1d(const float* x, const float* w, float* y, int N, int Cin, int Cout, int L, int Lout,
                        int K, int stride, int pad, int dil)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * Cout * Lout) return;
    int o = idx % Lout;
    int oc = (idx / Lout) % Cout;
    int n = idx / (Lout * Cout);
    float acc = 0.0f;
    for (int ic = 0; ic < Cin; ic++)
        for (int k = 0; k < K; k++) {
            int t = o + pad - k * dil;
            if (t < 0 || t % stride != 0) continue;
            int i = t / stride;
            if (i >= L) continue;
            acc += x[(n * Cin + ic) * L + i] * w[(ic * Cout + oc) * K + k];
        }
    y[idx] = acc;
}
void launch(const float* x, const float* w, float* y, int N, int Cin, int Cout, int L)
{
    int K = 3, stride = 2, pad = 1, dil = 2;
    int Lout = (L - 1) * stride - 2 * pad + dil * (K - 1) + 1;
    convt1d<<<(N * Cout * Lout + 255) / 256, 256>>>(x, w, y, N, Cin, Cout, L, Lout, K, stride, pad, dil);
}
"""
    spec, s = scaffold(src, "convt1d")
    assert args(spec)["Lout"].value == "(2 * L + 1)"
    assert list(args(spec)["y"].shape) == ["N", "Cout", "2 * L + 1"]
    assert "taken apart as idx % Lout, idx / (Lout * Cout)" in line_comment(s, '"y"')
    assert "TODO shape" not in line_comment(s, '"y"')


# --- what the accesses reach: shapes and index values --------------------------------------------------------------

XENT = """#include <cstdint>
__global__ void xent(const float* logits, const int64_t* labels, float* loss, int M, int V) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float* row = logits + (size_t)r * V;
    float mx = -INFINITY;
    for (int j = 0; j < V; ++j) mx = fmaxf(mx, row[j]);
    float s = 0.f;
    for (int j = 0; j < V; ++j) s += expf(row[j] - mx);
    float lse = mx + logf(s);
    loss[r] = lse - row[labels[r]];
}
"""


def test_an_index_buffer_is_drawn_below_the_dimension_its_values_index():
    """Cross-entropy's labels index a logits row (``row[labels[r]]``, row = logits + r * V): their values are drawn
    below V, the row's length, not below M (the first size symbol: reads out of bounds); through a local too. Where
    the use cannot be read (a 1-based label, ``- 1``), the guess stays, marked TODO."""
    spec, s = scaffold(XENT, "xent")
    assert args(spec)["labels"].init == "randint(0, V)" and args(spec)["logits"].shape == ["M", "V"]
    assert "init randint(0, V): its values index logits's dimension of V (row[labels[r]] at k.cu:11)" in line_comment(s, '"labels"')
    assert "TODO" not in line_comment(s, '"labels"') and "TODO" not in line_comment(s, '"logits"')
    local = XENT.replace("loss[r] = lse - row[labels[r]];", "const long t = labels[r];\n    loss[r] = lse - row[t];")
    assert args(scaffold(local, "xent")[0])["labels"].init == "randint(0, V)"
    spec, s = scaffold(XENT.replace("row[labels[r]]", "row[labels[r] - 1]"), "xent")
    assert args(spec)["labels"].init == "randint(0, M)"
    assert "TODO init: legal values of labels (no use of its values as an index could be read" in line_comment(s, '"labels"')


SWIGLU = """#include <cuda_bf16.h>
__global__ void swiglu(const __nv_bfloat16* xin, __nv_bfloat16* out, int M, int H) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= M * H) return;
    int m = idx / H;
    int j = idx % H;
    float a = __bfloat162float(xin[m * 2 * H + j]);
    float b = __bfloat162float(xin[m * 2 * H + H + j]);
    out[idx] = __float2bfloat16(a / (1.0f + expf(-a)) * b);
}
"""

BLUR = """__constant__ float c_w[5];
__global__ void blur5(const float* in, const float* w, float* out, int H, int W) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    float acc = 0.f;
    for (int k = 0; k < 5; ++k) {
        int xx = min(max(x + k - 2, 0), W - 1);
        acc += w[k] * c_w[k] * in[y * W + xx];
    }
    out[y * W + x] = acc;
}
void run(const float* in, const float* w, float* out, int H, int W) {
    float hw[5] = {1, 4, 6, 4, 1};
    cudaMemcpyToSymbol(c_w, hw, sizeof(hw));
    dim3 block(16, 16);
    dim3 grid((W + block.x - 1) / block.x, (H + block.y - 1) / block.y);
    blur5<<<grid, block>>>(in, w, out, H, W);
}
"""


def test_shapes_come_from_the_largest_index_the_accesses_reach():
    """SwiGLU's input is read at ``m * 2 * H + H + j`` (m < M, j < H from the guard's ``idx / H``, ``idx % H``): [M,
    2 * H], not [M, H] (every run read past it); a 5-tap filter ``w[k]`` under ``k < 5``: [5]; the image through a
    clamped column ``min(max(x + k - 2, 0), W - 1)``: [H, W]; each a note, no TODO. An index with a scalar that is no
    size (a pitch) cannot be read: the guess stays, marked TODO."""
    spec, s = scaffold(SWIGLU, "swiglu")
    assert args(spec)["xin"].shape == ["M", "2 * H"]
    assert "shape [M, 2 * H]: the largest index its accesses reach (xin[m * 2 * H + H + j] at k.cu:8)" in line_comment(s, '"xin"')
    assert "TODO" not in line_comment(s, '"xin"')
    spec, s = scaffold(BLUR, "blur5")
    assert args(spec)["w"].shape == [5] and args(spec)["in"].shape == ["H", "W"] and args(spec)["out"].shape == ["H", "W"]
    assert not any("shape" in t for _, t in s.todos)
    pitch = """__global__ void k(const float* x, float* y, int M, int N, int pitch) {
        int r = blockIdx.x * blockDim.x + threadIdx.x;
        if (r >= M) return;
        for (int j = 0; j < N; ++j) y[r * N + j] = x[r * pitch + j];
    }"""
    spec, s = scaffold(pitch, "k")
    assert args(spec)["y"].shape == ["M", "N"] and args(spec)["x"].shape == ["M", "N"]
    assert "TODO shape (a guess: every size symbol)" in line_comment(s, '"x"')


HEADS = """#define D 64
__global__ void scale_q(const float* q, float* out, int B, int H, int T) {
    int b = blockIdx.z, h = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T) return;
    for (int d = 0; d < D; ++d) {
        out[((b*H + h)*T + i)*D + d] = 2.0f * q[((b*H + h)*T + i)*D + d];
    }
}
void run(const float* q, float* out, int B, int H, int T) {
    dim3 grid((T + 127) / 128, H, B);
    scale_q<<<grid, 128>>>(q, out, B, H, T);
}
"""


def test_an_integer_define_in_an_index_is_a_literal_dimension():
    """A head dimension written ``#define D 64`` (``q[((b*H + h)*T + i)*D + d]``, ``d < D``) is read as 64, as the
    transform passes read it (:func:`.cmacros.integer_constants`): q is [B, H, T, 64], a note, and the header says
    the spec runs as written; it was [B, H, T], a TODO, and every run read 64 times past the buffer. A macro the
    file ``#undef``s before the kernel is no constant: the guess stays."""
    spec, s = scaffold(HEADS, "scale_q")
    assert args(spec)["q"].shape == ["B", "H", "T", 64] and args(spec)["out"].shape == ["B", "H", "T", 64]
    assert "shape [B, H, T, 64]: the largest index its accesses reach" in line_comment(s, '"q"')
    assert "TODO" not in line_comment(s, '"q"') and "TODO" not in line_comment(s, '"out"') and not s.guesses
    assert "It loads and runs as written" in " ".join(line.removeprefix("# ") for line in plan_spec(HEADS, "k.cu").text.splitlines())
    spec, s = scaffold(HEADS.replace("#define D 64\n", "#define D 64\n#undef D\n"), "scale_q")
    assert "TODO shape (a guess: every size symbol)" in line_comment(s, '"q"')


SEGMENTS = """__global__ void seg_sum(const int* offsets, const float* values, float* out, int S) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= S) return;
    float acc = 0.0f;
    for (int j = offsets[s]; j < offsets[s + 1]; ++j) acc += values[j];
    out[s] = acc;
}
"""


def test_an_integer_buffer_whose_values_bound_a_loop_is_drawn_as_range_starts():
    """``for (int j = offsets[s]; j < offsets[s + 1]; ++j) values[j]``: offsets holds the starts of S ranges and the
    end of the last (CSR row pointers), so it is ``offsets(0, 2 * L + 1)`` over a size L of the spec's own (the mean
    range length, in the sizes with a TODO) and [S + 1] is its shape, not a guess; values holds every range at its
    longest, [2 * S * L] (it was randint(0, S) and a guessed [S]: decreasing offsets, reads past values). Through
    locals (``int start = rowptr[r], end = rowptr[r + 1];``) too."""
    spec, s = scaffold(SEGMENTS, "seg_sum")
    a = args(spec)
    assert a["offsets"].init == "offsets(0, 2 * L + 1)" and a["offsets"].shape == ["S + 1"] and a["values"].shape == ["2 * S * L"]
    assert "its values bound the loop j < offsets[s + 1] at k.cu:5, the starts of consecutive ranges" in line_comment(s, '"offsets"')
    assert "TODO" not in line_comment(s, '"offsets"') and "TODO" not in line_comment(s, '"values"')
    assert "TODO sizes: L is the mean length of the ranges offsets start" in s.table and s.guesses == ("launch",)
    for size in spec.check.sizes + spec.bench.sizes:  # the last offset, at most S ranges of 2 * L, fits in values
        assert set(size) == {"S", "L"} and a["values"].numel(size) >= size["S"] * 2 * size["L"]
    local = SEGMENTS.replace("offsets", "rowptr").replace("for (int j = rowptr[s]; j < rowptr[s + 1]; ++j)",
                                                          "int start = rowptr[s], end = rowptr[s + 1];\n    for (int j = start; j < end; ++j)")
    spec, _ = scaffold(local, "seg_sum")
    assert args(spec)["rowptr"].init == "offsets(0, 2 * L + 1)" and args(spec)["values"].shape == ["2 * S * L"]
    spec, _ = scaffold(SEGMENTS.replace("j < offsets[s + 1]", "j < offsets[s + 2]"), "seg_sum")  # no consecutive pair
    assert not args(spec)["offsets"].init.startswith("offsets")


def test_guards_that_exclude_the_edges_bound_an_interior_stencil():
    """The five-point stencil copies its boundary (``i == 0 || ... || i == H - 1``, then ``return``) and reads
    ``u[(i + 1) * W + j]`` only inside: i below H - 1 there, so u is [H, W], not one row more."""
    src = (EXAMPLES / "stencil5" / "stencil5.cu").read_text()
    spec, s = scaffold(src, "stencil5")
    assert args(spec)["u"].shape == ["H", "W"] and "TODO" not in line_comment(s, '"u"')


@pytest.mark.parametrize("cond", ["(yy >= 0 && yy < H && xx >= 0 && xx < W)", "yy >= 0 && yy < H && xx >= 0 && xx < W"])
def test_a_zero_padding_select_bounds_its_load(cond):
    """``v = (yy >= 0 && yy < H && xx >= 0 && xx < W) ? in[yy * W + xx] : 0.0f`` (a new user's convolution, 2026-12-05):
    the grammar reads the condition's ``yy < H && xx >= 0 && xx < W`` as a template; read as an ``if`` would read it,
    the select bounds the load: in is [H, W], not ``H * W + W * K - W + K - 1`` elements."""
    src = """__global__ void conv(const float* in, const float* filt, float* out, int H, int W, int K) {
        int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
        if (x >= W || y >= H) return;
        int r = K / 2;
        float acc = 0.0f;
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
                int yy = y + ky - r, xx = x + kx - r;
                float v = COND ? in[yy * W + xx] : 0.0f;
                acc += v * filt[ky * K + kx];
            }
        out[y * W + x] = acc;
    }
    """.replace("COND", cond)
    spec, s = scaffold(src, "conv")
    assert args(spec)["in"].shape == ["H", "W"] and "TODO" not in line_comment(s, '"in"')


def test_a_misread_selects_names_are_read_where_the_select_is():
    """The select's condition read again (a node of another tree) has its names looked up at the select, not at the
    other tree's small offsets: an early block's own ``Wl = 1`` once sized a ``[H * W - W + 1]`` with no TODO."""
    src = """__global__ void k(const float* a, const float* filt, float* out, int H, int W, int K) {
        { int Wl = 1; out[0] = (float)Wl; out[1] = (float)Wl; out[2] = (float)Wl; out[3] = (float)Wl; }
        int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
        if (x >= W || y >= H) return;
        int r = K / 2; int Wl = W;
        float acc = 0.0f;
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
                int yy = y + ky - r, xx = x + kx - r;
                float v = (K >= 0 && K >= 0 && K >= 0 && K >= 0 && K >= 0 && K >= 0 && yy >= 0 && yy < H && xx >= 0 && xx < Wl) ? a[yy * W + xx] : 0.0f;
                acc += v * filt[ky * K + kx];
            }
        out[y * W + x] = acc;
    }
    """
    spec, s = scaffold(src, "k")
    assert args(spec)["a"].shape == ["H", "W"]


def test_a_one_block_per_row_launch_bounds_the_block_index():
    """A kernel launched ``<<<M, 256>>>`` with ``row = blockIdx.x`` and no guard: row < M from the launch, so x is [M,
    N] (a note); with a launch it cannot read as a polynomial (``cdiv``) the guess stays."""
    src = """__global__ void rowmax(const float* x, float* y, int M, int N) {
        int row = blockIdx.x;
        float m = -INFINITY;
        for (int j = threadIdx.x; j < N; j += blockDim.x) m = fmaxf(m, x[(size_t)row * N + j]);
        if (threadIdx.x == 0) y[row] = m;
    }
    void run(const float* x, float* y, int M, int N) { rowmax<<<M, 256>>>(x, y, M, N); }
    """
    spec, s = scaffold(src, "rowmax")
    assert args(spec)["x"].shape == ["M", "N"] and args(spec)["y"].shape == ["M"] and "TODO shape" not in s.table
    spec, s = scaffold(src.replace("<<<M, 256>>>", "<<<(M + 3) / 4, 256>>>"), "rowmax")
    assert "TODO shape (a guess: every size symbol)" in line_comment(s, '"y"')


def test_a_dim3_member_in_the_launch_is_followed_back_to_its_constants():
    """``dim3 grid((W + block.x - 1) / block.x, ...)`` with ``dim3 block(16, 16)``: the launch as written, 16 x 16
    blocks over cdiv(W, 16) x cdiv(H, 16), not a TODO and a 32 x 8 replacement."""
    spec, s = scaffold(BLUR, "blur5")
    assert spec.launch.grid == ["cdiv(W, 16)", "cdiv(H, 16)"] and spec.launch.block == [16, 16]
    assert "cannot follow" not in s.table and "the original launch, from blur5<<<grid, block>>> at k.cu:18" in s.table


def test_constant_memory_the_kernel_reads_is_a_warning():
    """``__constant__ float c_w[5]`` set by the host's cudaMemcpyToSymbol is zero when the tool runs the kernel: the
    scaffold warns (file, line of the read, symbol, where the host sets it) in the spec and to init's caller; an
    initialised constant, or one only another kernel reads, is no warning."""
    _, s = scaffold(BLUR, "blur5")
    warning = ("k.cu:9: constant memory 'c_w' is read by the kernel and not set by the spec: it is zero when the tool runs "
               "the kernel; pass it as an argument (the host sets it with cudaMemcpyToSymbol at k.cu:15)")
    assert s.warnings == (warning,) and f"# warning: {warning}" in s.table
    assert plan_spec(BLUR, "k.cu").warnings == (warning,)
    assert scaffold(BLUR.replace("c_w[5];", "c_w[5] = {1, 4, 6, 4, 1};"), "blur5")[1].warnings == ()
    other = BLUR.replace("acc += w[k] * c_w[k] * in[y * W + xx];", "acc += w[k] * in[y * W + xx];") + \
        "__global__ void scale(float* y) { y[threadIdx.x] *= c_w[0]; }\n"
    assert scaffold(other, "blur5")[1].warnings == () and scaffold(other, "scale")[1].warnings != ()


def test_the_header_says_the_spec_runs_as_written_only_when_nothing_is_a_guess():
    """A spec whose shapes, value ranges and launch were all read runs as written; one with a guessed shape or launch
    only loads, and the header names the guessed keys (it said "runs as written" for both); a warning is pointed at."""
    def header(source: str) -> str:
        text = plan_spec(source, "k.cu").text
        return " ".join(line.removeprefix("# ") for line in text.split("\n[kernel.")[0].splitlines())

    read = header(BLUR.replace("c_w[k] * ", ""))
    assert "It loads and runs as written" in read and "guesses" not in read and "warning" not in read
    guessed = header(SWIGLU)
    assert "runs as written" not in guessed and "It loads as written, but these keys are guesses" in guessed
    assert "[kernel.swiglu] launch." in guessed  # (out's shape is read: the kernel takes idx apart by H)
    assert "Each warning below" in header(BLUR)


ATOMIC_ACCUMULATORS = """
__global__ void kl(const float* log_pred, const float* target, float* out, int batch, int dim) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < batch * dim) atomicAdd(out, target[i] * (logf(target[i]) - log_pred[i]) / batch);
}
__global__ void hist(const int* x, int* bins, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&bins[x[i] & 255], 1);
}
__global__ void acc(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float o = out[0]; atomicAdd(out, o); }
}
"""


@pytest.mark.parametrize("kernel, name, init", [("kl", "out", "zeros"), ("hist", "bins", "zeros"), ("acc", "out", "normal")])
def test_an_accumulator_only_atomics_update_starts_at_zero(kernel, name, init):
    """An inout buffer every use of which is an atomic's address (a loss summed by atomicAdd, histogram bins) starts at
    zeros, as its launcher's memset leaves it, with a TODO; one the kernel also reads keeps the default."""
    spec, s = scaffold(ATOMIC_ACCUMULATORS, kernel)
    assert args(spec)[name].init == init
    assert ("accumulator that only atomics update" in line_comment(s, f'"{name}"')) == (init == "zeros")


POOL = """
#define KS 3
#define STRIDE 2
#define PAD 1
__global__ void pool(const float* x, float* y, int N, int D, int OD) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * OD) return;
    int n = i / OD, o = i % OD;
    float s = 0.0f;
    for (int k = 0; k < KS; k++) { int d = o * STRIDE - PAD + k; if (d >= 0 && d < D) s += x[n * D + d]; }
    y[i] = s / KS;
}
void launch(const float* x, float* y, int N, int D) {
    int OD = (D + 2 * PAD - KS) / STRIDE + 1;
    pool<<<(N * OD + 255) / 256, 256>>>(x, y, N, D, OD);
}
"""


def test_a_size_the_launcher_computes_from_the_others_is_their_expression():
    """A new user's pooling launcher computes the output length from the input's (``OD = (D + 2 * PAD - KS) / STRIDE +
    1``): OD takes that expression as its value and is no size of its own, so no check size describes an impossible
    tensor (independent values did: D = 7 with OD = 13)."""
    spec, s = scaffold(POOL, "pool")
    assert args(spec)["OD"].value == "((D - 1) // 2 + 1)"  # (the launcher's literal arithmetic simplified)
    assert "from the launcher" in line_comment(s, '"OD"')
    assert all(set(size) == {"N", "D"} for size in spec.check.sizes + spec.bench.sizes)
    assert spec.launch.grid == ["cdiv(N * ((D - 1) // 2 + 1), 256)"]


@pytest.mark.parametrize("launcher, derived", [
    ("    int OD = (D + 2 * PAD - KS) / STRIDE + 1;\n", True),
    # found by a red team (2026-12-05): a later assignment, a second declaration in an inner scope, an input changed
    # after the extent was computed: the value at the launch is not the initializer's, so OD stays a size of its own
    ("    int OD = D; OD = (D + 2 * PAD - KS) / STRIDE + 1;\n", False),
    ("    if (N < 0) { int OD = 5 * D; }\n    int OD = (D + 2 * PAD - KS) / STRIDE + 1;\n", False),
    ("    int OD = (D + 2 * PAD - KS) / STRIDE + 1; D = D / 4;\n", False),
])
def test_a_derived_size_is_taken_only_where_its_value_at_the_launch_is_its_initializers(launcher, derived):
    src = POOL.replace("    int OD = (D + 2 * PAD - KS) / STRIDE + 1;\n", launcher)
    spec, s = scaffold(src, "pool")
    assert (args(spec)["OD"].value != "OD") == derived
    assert all(("OD" in size) != derived for size in spec.check.sizes)


def test_a_shape_read_through_a_derived_size_takes_its_expression():
    """Found by a red team (2026-12-05): x's shape read from an access through OD named OD after OD had left the
    sizes, and init stopped ("unknown size symbol(s) OD")."""
    src = POOL.replace("if (d >= 0 && d < D) s += x[n * D + d];", "s += x[n * D + o * STRIDE + k];")
    spec, _ = scaffold(src, "pool")
    assert "OD" not in args(spec)["x"].shape[0] and "((D - 1) // 2 + 1)" in args(spec)["x"].shape[0]


# --- the launcher's constants, sizes read through the kernel's locals ---------------------------------------------

POOL1D = """
__global__ void pool(const float* x, float* y, int N, int L, int OL, int ksize, int stride, int pad, float scale)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * OL) return;
    int o = i % OL, n = i / OL;
    float m = -1e30f;
    for (int k = 0; k < ksize; k++) {
        int p = o * stride - pad + k;
        if (p >= 0 && p < L) m = fmaxf(m, x[n * L + p]);
    }
    y[i] = m * scale;
}
#define PAD 1
void launch_pool(const float* x, float* y, int N, int L)
{
    int ksize = 3, stride = 2;
    int OL = (L + 2 * PAD - ksize) / stride + 1;
    pool<<<(N * OL + 255) / 256, 256>>>(x, y, N, L, OL, ksize, stride, PAD, 0.5f);
}
"""


def test_a_launchers_constants_are_values_not_sizes():
    """A window, a stride and a padding the launcher fixes (a local of one literal value, a #define, a literal
    argument) while its caller gives the sizes: values, not size symbols with placeholder values (a stride of 15
    runs the kernel at no configuration the file launches); the derived extent reads them as numbers."""
    spec, s = scaffold(POOL1D, "pool")
    a = args(spec)
    assert (a["ksize"].value, a["stride"].value, a["pad"].value, a["scale"].value) == (3, 2, 1, 0.5)
    assert "the launcher's constant (k.cu:19)" in line_comment(s, '"stride"')
    assert a["OL"].value == "((L - 1) // 2 + 1)"  # (L + 2 * 1 - 3, simplified)
    assert all(set(size) == {"N", "L"} for size in spec.check.sizes + spec.bench.sizes)
    assert spec.launch.grid == ["cdiv(N * ((L - 1) // 2 + 1), 256)"]


def test_a_test_drivers_literal_sizes_stay_sizes():
    """main's `int w = 1000, h = 300;` are one test's sizes, not constants of the kernel (no launcher parameter gives
    any size): they stay size symbols."""
    spec, _ = scaffold(MATADD, "MatAdd")
    assert args(spec)["width"].value == "width" and args(spec)["height"].value == "height"


CONV3D = """
#define KS 3
__global__ void conv3d(const float* x, const float* w, float* y, int N, int C, int D, int H, int W, int OC)
{
    int OD = D - KS + 1, OH = H - KS + 1, OW = W - KS + 1;
    int oc = blockIdx.y, n = blockIdx.z;
    int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= OD * OH * OW) return;
    int ow = v % OW, oh = (v / OW) % OH, od = v / (OW * OH);
    const float* xn = x + (size_t)n * C * D * H * W;
    float acc = 0.0f;
    for (int c = 0; c < C; c++) {
        const float* xc = xn + (size_t)c * D * H * W;
        for (int kd = 0; kd < KS; kd++)
            for (int kh = 0; kh < KS; kh++)
                for (int kw = 0; kw < KS; kw++)
                    acc += xc[((od + kd) * H + (oh + kh)) * W + (ow + kw)] * w[(((oc * C + c) * KS + kd) * KS + kh) * KS + kw];
    }
    y[(((size_t)n * OC + oc) * OD + od) * OH * OW + oh * OW + ow] = acc;
}
void launch_conv3d(const float* x, const float* w, float* y, int N, int C, int D, int H, int W, int OC)
{
    int vox = (D - KS + 1) * (H - KS + 1) * (W - KS + 1);
    dim3 grid((vox + 255) / 256, OC, N);
    conv3d<<<grid, 256>>>(x, w, y, N, C, D, H, W, OC);
}
"""


def test_a_3d_grid_over_channels_and_output_extents_of_locals():
    """OC only sizes the grid (blockIdx.y): a size symbol, so the launch translates; y's extents are the kernel's
    locals OD = D - 2, ... (strides OH * OW): [N, OC, D - 2, H - 2, W - 2], no guess; the kernel divides by them, so
    the spec assumes them at least 1 (a TODO constraint) and the placeholder sizes satisfy it."""
    spec, s = scaffold(CONV3D, "conv3d")
    a = args(spec)
    assert a["OC"].value == "OC"
    assert spec.launch.grid == ["cdiv((D - 3 + 1) * (H - 3 + 1) * (W - 3 + 1), 256)", "OC", "N"]
    assert a["x"].shape == ["N", "C", "D", "H", "W"] and a["w"].shape == ["OC", "C", 3, 3, 3]
    assert a["y"].shape == ["N", "OC", "D - 2", "H - 2", "W - 2"] and "TODO" not in line_comment(s, '"y"')
    assert sorted(spec.constraints) == ["D - 2 >= 1", "H - 2 >= 1", "W - 2 >= 1"]
    assert all(spec.satisfies(size) for size in spec.check.sizes + spec.bench.sizes)


def test_polynomial_division_is_exact_or_none():
    from ptxfactory.harness.cexpr import divide, mul

    d, h, w = ({("D",): 1, (): -2}, {("H",): 1, (): -2}, {("W",): 1, (): -2})
    assert divide(mul(mul(d, h), w), mul(h, w)) == d
    assert divide({("H", "W"): 2}, {("H",): 2}) == {("W",): 1}
    assert divide({("H",): 1, (): 1}, {("H",): 1}) is None
    assert divide({("H", "W"): 3}, {("H",): 2}) is None
    assert divide(mul(d, h), {}) is None


def test_a_grid_capped_by_a_conditional_is_a_min():
    """`int blocks = blocks_needed > 65535 ? 65535 : (int)blocks_needed;` (a grid-stride kernel's launcher): min, not a
    guess from the guard; the other orders too."""
    src = """
__global__ void k(const float* x, float* y, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) y[i] = x[i];
}
void launch(const float* x, float* y, size_t n)
{
    size_t need = (n + 255) / 256;
    int blocks = CAP;
    k<<<blocks, 256>>>(x, y, n);
}
"""
    for cap, grid in (("need > 65535 ? 65535 : (int)need", "min(cdiv(n, 256), 65535)"),
                      ("need < 65535 ? (int)need : 65535", "min(cdiv(n, 256), 65535)"),
                      ("need > 132 ? (int)need : 132", "max(cdiv(n, 256), 132)")):
        spec, _ = scaffold(src.replace("CAP", cap), "k")
        assert spec.launch.grid == [grid], cap


@pytest.mark.parametrize("launcher", [
    # found by a red team (2026-12-05): the value at the launch is not the initializer's
    "    int ksize = 3, stride = 2;\n    stride = 4;\n",
    "    int ksize = 3, stride = 2;\n    int& r = stride; r = 4;\n",
    "    int ksize = 3, stride = 2;\n    set(stride);\n",
    "    int ksize = 3, stride = 2;\n    std::cin >> stride;\n",
])
def test_a_launcher_local_changed_before_the_launch_is_no_constant(launcher):
    src = POOL1D.replace("    int ksize = 3, stride = 2;\n", launcher)
    spec, s = scaffold(src, "pool")
    assert args(spec)["stride"].value != 2 and "the launcher's constant" not in line_comment(s, '"stride"')
    assert args(spec)["ksize"].value == 3  # (ksize itself is untouched)


def test_two_launches_or_a_lambda_give_no_constant():
    two = POOL1D.replace("    pool<<<", "    if (N > 4) pool<<<(N * OL + 255) / 256, 256>>>(x, y, N, L, OL, ksize, 3, PAD, 0.5f);\n    pool<<<")
    spec, s = scaffold(two, "pool")
    assert "the launcher's constant" not in s.table
    lam = POOL1D.replace("    pool<<<(N * OL + 255) / 256, 256>>>(x, y, N, L, OL, ksize, stride, PAD, 0.5f);",
                         "    auto go = [&](int stride) { pool<<<(N * OL + 255) / 256, 256>>>(x, y, N, L, OL, ksize, stride, PAD, 0.5f); };\n    go(5);")
    spec, s = scaffold(lam, "pool")
    assert "the launcher's constant" not in s.table


@pytest.mark.parametrize("change", ["int& t = s; t = 2 * W;", "grow(s, W);"])
def test_a_stride_local_changed_through_a_reference_is_no_extent(change):
    """A red team's kernel (2026-12-05): `int s = W;` changed through a reference before `x[r * s + c]`: the shape may
    not claim [R, W] (verification would read past it); it stays a guess."""
    src = """
__device__ void grow(int& v, int W) { v = 2 * W; }
__global__ void k(const float* x, float* y, int R, int W)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * W) return;
    int r = i / W, c = i % W;
    int s = W;
    CHANGE
    y[i] = x[r * s + c];
}
""".replace("CHANGE", change)
    spec, s = scaffold(src, "k")
    assert "the largest index its accesses reach" not in line_comment(s, '"x"') or args(spec)["x"].shape != ["R", "W"]


def test_a_bool_mask_is_u8_of_zeros_and_ones_and_its_signature_checks():
    """`const bool* mask` (what torch's `mask.data_ptr<bool>()` gives): u8 drawn 0 or 1, and optimise's signature check
    takes it (a new user had to change the kernel to unsigned char: 2026-12-05)."""
    src = """
__global__ void k(const float* x, const bool* mask, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = mask[i] ? x[i] : 0.0f;
}
"""
    spec, s = scaffold(src, "k")
    m = args(spec)["mask"]
    assert m.dtype.value == "u8" and m.init == "randint(0, 2)" and "TODO" not in line_comment(s, '"mask"')
    check_signature(spec, find_kernel(src, "k"))


def test_an_accumulator_updated_through_an_int_view_is_an_inout_scalar_zeroed():
    """A helper's new user (2026-12-05): ``atomicMax((int*)amax, __float_as_int(v))`` read the cast as an alias:
    amax came out an ``out`` of shape [n] (NaN-filled before each run: the max kept the NaN). It is one element that
    only atomics update: inout, [1], zeros."""
    src = """__global__ void absmax(const float* x, float* amax, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) atomicMax((int*)amax, __float_as_int(fabsf(x[i])));
    }"""
    spec, s = scaffold(src, "absmax")
    a = args(spec)["amax"]
    assert (a.role, list(a.shape), a.init) == ("inout", [1], "zeros"), line_comment(s, '"amax"')
    assert "aliased" not in line_comment(s, '"amax"')


FLAT = """__global__ void k(const float* x, float* y, int N, int C, int L) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * C * L) return;
    BODY
}"""


@pytest.mark.parametrize("body, guard", [
    # the red team (2026-12-05): an incidental idx % C beside idx % L says C is innermost: [N, L, C], not [N, C, L]
    ("int c = idx % C; int n = idx / (L * C); y[idx] = x[idx % L] + c + n;", None),
    # the index changed or hidden before the store
    ("int c = idx % C; int l = idx % L; idx /= C; if (c == 0) y[idx] = x[idx] + l;", None),
    ("int n = idx / (C * L), c = idx % L; float v = x[idx]; { int idx = c * N + n; y[idx] = v; }", None),
    # a guard that is a sum: no product of dimensions
    ("int c = idx % (C + 1); y[idx] = x[idx] + c;", "idx >= N * C + 1"),
])
def test_a_flat_outputs_dimensions_stay_a_guess_where_the_kernels_divisions_do_not_read_them(body, guard):
    src = FLAT.replace("BODY", body)
    if guard:
        src = src.replace("idx >= N * C * L", guard)
    spec, s = scaffold(src, "k")
    assert "TODO shape" in line_comment(s, '"y"') or "taken apart" not in line_comment(s, '"y"'), line_comment(s, '"y"')
    assert list(args(spec)["y"].shape) != ["N", "C + 1"]


def test_a_static_cast_keeps_its_grouping():
    """``static_cast<int>(D + 2 * PAD - KS) / STRIDE + 1`` is ``(D - 1) // 2 + 1`` (the parentheses were dropped: D + 2)."""
    src = POOL.replace("int OD = (D + 2 * PAD - KS) / STRIDE + 1;", "int OD = static_cast<int>(D + 2 * PAD - KS) / STRIDE + 1;")
    spec, _ = scaffold(src, "pool")
    assert args(spec)["OD"].value == "((D - 1) // 2 + 1)"
    src = POOL.replace("int OD = (D + 2 * PAD - KS) / STRIDE + 1;", "int OD = int(D + 2 * PAD - KS) / STRIDE + 1;")
    assert args(scaffold(src, "pool")[0])["OD"].value == "((D - 1) // 2 + 1)"
