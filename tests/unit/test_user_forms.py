"""Ways of writing a kernel that new users wrote (2026-12-05) and that kept the passes or families away. A naive convolution's guards between its loops (``if (ih < 0 || ih >= H) continue;`` before the ``kw`` loop) moved into
the inner loop and merged (perfect_nest.py), its ``#define`` constants read as literals (expand.py), and pointers
into a buffer at a row's offset (``const float* a = A + b * M * K + i * K;``) read as loads of the buffer
(rowpar.pointer_offsets): the forms a new user wrote (2026-12-05) that kept smem_tile, mma_tile and colpar away."""
from __future__ import annotations

import shutil

import pytest

from ptxfactory.search.generators.transform import PASSES, syntax as sx
from ptxfactory.search.generators.transform.perfect_nest import perfect_nests
from ptxfactory.search.generators.transform.smem_tile import CONFIGS, SmemTilePass
from ptxfactory.protocol import parse_spec
from test_smem_tile import host_agree
from test_transform import unit


def spec_for(name: str, args: str, grid: str, block: str, rtol: float, atol: float, sizes: str, bench: str):
    return parse_spec(f"""
[kernel.{name}]
args = [{args}]
launch = {{ grid = {grid}, block = {block}, policy = "free" }}
[kernel.{name}.check]
rtol = {rtol}
atol = {atol}
sizes = {sizes}
[kernel.{name}.bench]
sizes = [{bench}]
""").kernels[name]


def _nest(src: str) -> str:
    def parse(d: bytes):
        fn = sx.kernel_function(sx.parse(d).root_node)
        return None if fn is None else fn.child_by_field_name("body")
    return perfect_nests(src.encode(), parse).decode()


NEST = """extern "C" __global__ void k(const float* x, float* y, int C, int H, int W, int oh, int ow) {
    float acc = 0;
    for (int c = 0; c < C; ++c) {
        for (int kh = 0; kh < 3; ++kh) {
            int ih = oh * 2 - 1 + kh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < 3; ++kw) {
                int iw = ow * 2 - 1 + kw;
                if (iw < 0 || iw >= W) continue;
                acc += x[(c * H + ih) * W + iw];
            }
        }
    }
    y[0] = acc;
}"""


def test_a_guard_between_loops_moves_into_the_inner_loop_and_merges_with_its_guard():
    out = _nest(NEST)
    kh = out[out.index("for (int kh"):]
    assert kh.index("for (int kw") < kh.index("int ih")  # the kh loop's only statement is the kw loop
    assert "if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;" in out and out.count("continue;") == 1
    assert out.index("int iw") < out.index("if (ih < 0")  # both declarations before the one guard


@pytest.mark.parametrize("change", [
    ("for (int kw = 0; kw < 3; ++kw) {", "for (int kw = 0; kw < ih; ++kw) {"),   # the inner header reads ih
    ("acc += x[(c * H + ih) * W + iw];", "acc += x[(c * H + ih) * W + iw]; ih++;"),  # the inner loop writes ih
    ("if (ih < 0 || ih >= H) continue;", "if (ih < 0 || ih >= H) continue; else acc += 1;"),  # not a bare guard
    ("int ih = oh * 2 - 1 + kh;", "int ih = oh * 2 - 1 + (int)x[kh];"),  # reads memory
    ("if (ih < 0 || ih >= H) continue;", "if (ih < 0 || acc > 10.0f) continue;"),  # reads what the inner loop writes
])
def test_a_guard_stays_where_moving_it_would_change_the_kernel(change):
    out = _nest(NEST.replace(*change))
    kh = out[out.index("for (int kh"):]
    assert kh.index("int ih") < kh.index("for (int kw"), out


def test_guards_stay_apart_where_a_declaration_between_them_divides():
    src = NEST.replace("int iw = ow * 2 - 1 + kw;", "int iw = (ow * 2 - 1 + kw) / W;")
    out = _nest(src)
    assert out.count("continue;") == 2  # (evaluated where the first guard holds, a division might trap)


CONV = """#define KS 3
#define PAD 1
#define STRIDE 2
extern "C" __global__ void k(const float* x, const float* w, const float* bias, float* y,
                             int N, int C, int H, int W, int OC, int OH, int OW)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * OC * OH * OW;
    if (idx >= total) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int oc = (idx / (OW * OH)) % OC;
    int n  = idx / (OW * OH * OC);
    float acc = bias[oc];
    for (int c = 0; c < C; ++c) {
        for (int kh = 0; kh < KS; ++kh) {
            int ih = oh * STRIDE - PAD + kh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < KS; ++kw) {
                int iw = ow * STRIDE - PAD + kw;
                if (iw < 0 || iw >= W) continue;
                acc += x[((n * C + c) * H + ih) * W + iw] * w[((oc * C + c) * KS + kh) * KS + kw];
            }
        }
    }
    y[idx] = acc;
}
"""
CONV_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N", "C", "H", "W"] },
  { name = "w", role = "in", dtype = "f32", shape = ["OC", "C", 3, 3] },
  { name = "bias", role = "in", dtype = "f32", shape = ["OC"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N", "OC", "(H - 1) // 2 + 1", "(W - 1) // 2 + 1"] },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "C", role = "scalar", dtype = "i32", value = "C" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "W", role = "scalar", dtype = "i32", value = "W" },
  { name = "OC", role = "scalar", dtype = "i32", value = "OC" },
  { name = "OH", role = "scalar", dtype = "i32", value = "(H - 1) // 2 + 1" },
  { name = "OW", role = "scalar", dtype = "i32", value = "(W - 1) // 2 + 1" },
"""


def conv_spec():
    return spec_for("k", CONV_ARGS, grid='["cdiv(N * OC * ((H - 1) // 2 + 1) * ((W - 1) // 2 + 1), 256)"]', block="[256]",
                    rtol=1e-4, atol=1e-3, sizes="[{ N = 2, C = 3, H = 9, W = 11, OC = 5 }]",
                    bench="{ N = 8, C = 64, H = 56, W = 56, OC = 64 }")


def test_a_padded_strided_convolution_as_written_gets_the_gemm_tiles():
    u = unit(CONV, conv_spec())
    assert "kh < 3" in u.text and "oh * 2 - 1 + kh" in u.text  # the #define constants read as literals
    took = {p.name for p in PASSES if getattr(p, "name", "").startswith(("smem_tile", "mma_tile")) and p.applies(u)}
    assert {"smem_tile_4x4", "mma_tile_64x64"} <= took, [p.why_not(u) for p in PASSES if getattr(p, "name", "") == "smem_tile_4x4"]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_the_tiled_convolution_gives_the_originals_bits_on_the_host(tmp_path):
    """Every smem_tile configuration of the padded, strided convolution written with guards between its loops equals
    the original bit for bit (the guard a zero product's mask, in the original's order)."""
    spec = conv_spec()
    literal = CONV.split("\n", 3)[3].replace("KS", "3").replace("STRIDE", "2").replace("PAD", "1")
    passes = [SmemTilePass(*c) for c in CONFIGS]
    report = host_agree(literal, spec, {"N": 2, "C": 3, "H": 9, "W": 11, "OC": 5}, passes, tmp_path)
    assert report.count("same") == len(passes) and "DIFFERENT" not in report, report


BMM = """extern "C" __global__ void k(const float* A, const float* B, float* C, int batch, int M, int N, int K)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= batch * M * N) return;
    int b = idx / (M * N);
    int i = (idx / N) % M;
    int j = idx % N;
    const float* a = A + (size_t)b * M * K + (size_t)i * K;
    const float* bb = B + (size_t)b * K * N + j;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += a[k] * bb[(size_t)k * N];
    C[idx] = acc;
}
"""
BMM_ARGS = """
  { name = "A", role = "in", dtype = "f32", shape = ["batch", "M", "K"] },
  { name = "B", role = "in", dtype = "f32", shape = ["batch", "K", "N"] },
  { name = "C", role = "out", dtype = "f32", shape = ["batch", "M", "N"] },
  { name = "batch", role = "scalar", dtype = "i32", value = "batch" },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "K", role = "scalar", dtype = "i32", value = "K" },
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_pointers_at_a_row_and_a_column_read_as_loads_of_the_buffers(tmp_path):
    spec = spec_for("k", BMM_ARGS, grid='["cdiv(batch * M * N, 256)"]', block="[256]", rtol=1e-4, atol=1e-4,
                    sizes="[{ batch = 2, M = 17, N = 30, K = 9 }]", bench="{ batch = 8, M = 512, N = 512, K = 512 }")
    u = unit(BMM, spec)
    assert SmemTilePass(4, 4, 16).why_not(u) is None
    report = host_agree(BMM, spec, {"batch": 2, "M": 17, "N": 30, "K": 9}, [SmemTilePass(4, 4, 16), SmemTilePass(8, 4, 16)], tmp_path)
    assert report.count("same") == 2, report


ARGMAX_MID = """extern "C" __global__ void k(const float* x, int* out, int B, int D, int N)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * N) return;
    int b = idx / N;
    int n = idx % N;
    const float* p = x + (size_t)b * D * N + n;
    float best = p[0];
    int besti = 0;
    for (int d = 1; d < D; ++d) {
        float v = p[(size_t)d * N];
        if (v > best) { best = v; besti = d; }
    }
    out[idx] = besti;
}
"""


def test_a_column_walked_through_a_pointer_at_its_offset_gets_colpar():
    spec = spec_for("k", """
  { name = "x", role = "in", dtype = "f32", shape = ["B", "D", "N"] },
  { name = "out", role = "out", dtype = "i32", shape = ["B", "N"] },
  { name = "B", role = "scalar", dtype = "i32", value = "B" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
""", grid='["cdiv(B * N, 256)"]', block="[256]", rtol=0, atol=0, sizes="[{ B = 3, D = 17, N = 70 }]",
                    bench="{ B = 16, D = 512, N = 4096 }")
    u = unit(ARGMAX_MID, spec)
    colpar = next(p for p in PASSES if getattr(p, "name", "") == "colpar_auto")
    assert colpar.why_not(u) is None


LAYERNORM = """__global__ void layernorm_rows(const float* x, const float* gamma, const float* beta, float* y, int M, int N, float eps)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M) {
        const float* xr = x + (size_t)row * N;
        float* yr = y + (size_t)row * N;
        float mean = 0.0f;
        for (int j = 0; j < N; ++j) mean += xr[j];
        mean /= N;
        float var = 0.0f;
        for (int j = 0; j < N; ++j) { float d = xr[j] - mean; var += d * d; }
        var /= N;
        float rstd = 1.0f / sqrtf(var + eps);
        for (int j = 0; j < N; ++j) yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
    }
}
"""


def test_a_mean_taken_by_compound_division_gets_the_layernorm_family():
    """``mean /= N;`` is a division by the row length (the family once looked for ``/ N`` only: "never divides")."""
    from ptxfactory.search.generators.rowwise import RowwiseNormFamily
    from _generator_support import example_ctx
    from pathlib import Path

    spec = parse_spec("""
[kernel.layernorm_rows]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "gamma", role = "in", dtype = "f32", shape = ["N"] },
  { name = "beta", role = "in", dtype = "f32", shape = ["N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["M", "N"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
  { name = "eps", role = "scalar", dtype = "f32", value = 1e-5 },
]
launch = { grid = ["cdiv(M, 256)"], block = [256], policy = "free" }
[kernel.layernorm_rows.check]
rtol = 1e-4
atol = 1e-5
sizes = [{ M = 7, N = 45 }]
[kernel.layernorm_rows.bench]
sizes = [{ M = 4096, N = 4096 }]
""").kernels["layernorm_rows"]
    root = Path(__file__).resolve().parents[2]
    ctx = example_ctx(root / "examples" / "rmsnorm" / "rmsnorm.cu", "layernorm_rows", spec, LAYERNORM)
    fam = RowwiseNormFamily()
    assert fam.why_not(ctx) is None
    assert {c.params.get("norm") for c in fam.propose(ctx)} == {"layer"}
    assert fam.why_not(example_ctx(root / "examples" / "rmsnorm" / "rmsnorm.cu", "layernorm_rows", spec,
                                   LAYERNORM.replace("mean /= N;", "mean *= 0.5f;").replace("var /= N;", "var *= 0.5f;")))


CAUSAL = """extern "C" __global__ void causal_softmax(const float* scores, float* probs, int R, int T)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= R) return;
    int i = idx % T;
    const float* row = scores + (size_t)idx * T;
    float m = -INFINITY;
    for (int j = 0; j < T; j++) {
        float v = (j > i) ? -INFINITY : row[j];
        m = fmaxf(m, v);
    }
    float s = 0.0f;
    for (int j = 0; j < T; j++) {
        float v = (j > i) ? -INFINITY : row[j];
        s += expf(v - m);
    }
    for (int j = 0; j < T; j++) {
        float v = (j > i) ? -INFINITY : row[j];
        probs[(size_t)idx * T + j] = expf(v - m) / s;
    }
}
"""


def test_a_masked_element_read_through_a_local_in_both_loops_gets_online_softmax():
    spec = spec_for("causal_softmax", """
  { name = "scores", role = "in", dtype = "f32", shape = ["R", "T"] },
  { name = "probs", role = "out", dtype = "f32", shape = ["R", "T"] },
  { name = "R", role = "scalar", dtype = "i32", value = "R" },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
""", grid='["cdiv(R, 128)"]', block="[128]", rtol=1e-4, atol=1e-6, sizes="[{ R = 37, T = 45 }]",
                    bench="{ R = 65536, T = 1024 }")
    u = unit(CAUSAL, spec)
    p = next(q for q in PASSES if getattr(q, "name", "") == "online_softmax")
    assert p.why_not(u) is None if hasattr(p, "why_not") else p.applies(u)
    out = p.apply(u).text
    assert "float ptxf_v = (j > i) ? -INFINITY : row[j];" in out and out.count("for (int j = 0; j < T; j++)") == 2
    # a local that is not the element in the exponent: refused
    other = CAUSAL.replace("        s += expf(v - m);", "        s += expf(row[j] - m);")
    assert not p.applies(unit(other, spec))


def _walk(src: str) -> str:
    from ptxfactory.search.generators.transform.walking import walked_pointers

    def parse(d: bytes):
        fn = sx.kernel_function(sx.parse(d).root_node)
        return None if fn is None else fn.child_by_field_name("body")
    return walked_pointers(src.encode(), parse).decode()


WALK = """extern "C" __global__ void k(const float* x, float* out, int B, int D, int N)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * N) return;
    int b = idx / N;
    int n = idx % N;
    const float* p = x + (size_t)b * D * N + n;
    float acc = 0.0f;
    for (int d = START; d < D; d++) {
        acc += BODY;
        p += N;
    }
    out[idx] = acc AFTER;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("start, body, after", [("0", "*p", ""), ("2", "p[0] * 0.5f + *p", ""), ("1", "*p", "+ p[-1]")])
def test_a_walked_pointer_reads_at_the_loop_index_with_the_originals_bits(start, body, after, tmp_path):
    """``acc += *p; p += N;`` becomes ``acc += p[(d - a) * N]`` (and, where p is read after the loop, one advance
    there): the same elements read, the same sums, bit for bit on the host."""
    from _host_cuda import SERIAL_PRELUDE, run_host

    src = WALK.replace("START", start).replace("BODY", body).replace("AFTER", after)
    out = _walk(src)
    assert "p += N;" not in out and "(long long)(d - (" in out
    assert ("p += max(0LL" in out) == bool(after)
    kernels = [src.replace("void k(", "void k0("), out.replace("void k(", "void k1(")]
    main = """
int main() {
    const int B = 3, D = 7, N = 11;
    float x[B * D * N], y0[B * N], y1[B * N];
    for (int i = 0; i < B * D * N; ++i) x[i] = (float)((i * 37) % 101) / 7.0f - 3.0f;
    blockDim = {64, 1, 1};
    for (unsigned t = 0; t < 64; ++t) { threadIdx = {t, 0, 0}; blockIdx = {0, 0, 0}; k0(x, y0, B, D, N); k1(x, y1, B, D, N); }
    std::printf("%s\\n", std::memcmp(y0, y1, sizeof y0) == 0 ? "same" : "DIFFERENT");
}
"""
    program = SERIAL_PRELUDE + "using std::max;\n#define __restrict__\n" + "\n".join(k.replace('extern "C" ', "") for k in kernels) + main
    assert run_host(program, tmp_path) == "same"


@pytest.mark.parametrize("change", [
    ("        p += N;\n", "        if (acc > 100.0f) continue;\n        p += N;\n"),   # a continue skips the step
    ("        acc += BODY;", "        acc += *p; out[0] = (float)(size_t)p;"),             # p used otherwise
    ("        p += N;\n", "        p += N;\n        N = N + 1;\n"),                        # the step is not the last statement
    ("        acc += BODY;", "        acc += BODY; d += 1;"),                               # the loop variable written
])
def test_a_walked_pointer_stays_where_indexing_would_change_the_kernel(change):
    src = WALK.replace("START", "0").replace("AFTER", "").replace(*change).replace("BODY", "*p")
    assert _walk(src) == src


def test_a_column_walked_by_a_stepped_pointer_gets_colpar():
    spec = spec_for("k", """
  { name = "x", role = "in", dtype = "f32", shape = ["B", "D", "N"] },
  { name = "out", role = "out", dtype = "f32", shape = ["B", "N"] },
  { name = "B", role = "scalar", dtype = "i32", value = "B" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
""", grid='["cdiv(B * N, 256)"]', block="[256]", rtol=1e-4, atol=1e-5, sizes="[{ B = 3, D = 17, N = 70 }]",
                    bench="{ B = 16, D = 512, N = 4096 }")
    u = unit(WALK.replace("START", "0").replace("BODY", "*p").replace("AFTER", ""), spec)
    assert next(p for p in PASSES if getattr(p, "name", "") == "colpar_auto").why_not(u) is None


def _whiles(src: str) -> str:
    from ptxfactory.search.generators.transform.while_for import counted_whiles

    def parse(d: bytes):
        fn = sx.kernel_function(sx.parse(d).root_node)
        return None if fn is None else fn.child_by_field_name("body")
    return counted_whiles(src.encode(), parse).decode()


POOL = """extern "C" __global__ void pool(const float* x, float* y, int* where, int NC, int H, int W)
{
    int Ho = H / 2, Wo = W / 2;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= NC * Ho * Wo) return;
    int ow = i % Wo, oh = (i / Wo) % Ho, nc = i / (Wo * Ho);
    float best = -3.0e38f;
    int besti = 0;
    int dh = 0;
    while (dh < 2) {
        for (int dw = 0; dw < 2; dw++) {
            int at = (nc * H + oh * 2 + dh) * W + ow * 2 + dw;
            if (x[at] > best) { best = x[at]; besti = at; }
        }
        dh++;
    }
    y[i] = best;
    where[i] = besti;
}
"""


def test_a_counted_while_loop_reads_as_its_for_loop_and_the_pooling_gets_coarsened():
    out = _whiles(POOL)
    assert "for (int dh = 0; dh < 2; dh++) {" in out and "while" not in out and "dh++;" not in out
    spec = spec_for("pool", """
  { name = "x", role = "in", dtype = "f32", shape = ["NC", "H", "W"] },
  { name = "y", role = "out", dtype = "f32", shape = ["NC", "H // 2", "W // 2"] },
  { name = "where", role = "out", dtype = "i32", shape = ["NC", "H // 2", "W // 2"] },
  { name = "NC", role = "scalar", dtype = "i32", value = "NC" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "W", role = "scalar", dtype = "i32", value = "W" },
""", grid='["cdiv(NC * (H // 2) * (W // 2), 256)"]', block="[256]", rtol=0, atol=0, sizes="[{ NC = 6, H = 9, W = 13 }]",
                    bench="{ NC = 2048, H = 112, W = 112 }")
    u = unit(POOL, spec)
    assert next(p for p in PASSES if getattr(p, "name", "") == "coarsen_4").applies(u)


@pytest.mark.parametrize("change", [
    ("        dh++;\n    }\n", "        dh++;\n    }\n    besti += dh;\n"),                      # dh read after the loop
    ("            int at", "            if (dw == 5) continue;\n            int at"),        # a continue would skip the step
    ("        dh++;\n", "        dh++;\n        best += 0.0f;\n"),                          # the step is not last
    ("        for (int dw", "        dh += 0;\n        for (int dw"),                        # dh written in the body
])
def test_a_while_loop_stays_where_a_for_loop_would_differ(change):
    src = POOL.replace(*change)
    assert _whiles(src) == src


SOFTPLUS_MEAN = """__global__ void rowsoftplus(const float* x, const float* w, float* out, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float* xr = x + (size_t)r * N;
    float acc = 0.0f;
    int j = 0;
    while (j < N) {
        acc += w[j] * log1pf(expf(xr[j]));
        j++;
    }
    out[r] = acc / N;
}
"""


def test_a_row_mean_of_a_function_of_the_elements_is_not_the_gemv_family():
    """sum_j w[j] * softplus(x[r, j]) / N was taken for a GEMV mean (24 candidates that could only fail, 2026-12-05)."""
    from ptxfactory.search.generators.rowreduce import RowReduceFamily
    from _generator_support import example_ctx
    from pathlib import Path

    spec = parse_spec("""
[kernel.rowsoftplus]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "w", role = "in", dtype = "f32", shape = ["N"] },
  { name = "out", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(M, 256)"], block = [256], policy = "free" }
[kernel.rowsoftplus.check]
rtol = 1e-4
atol = 1e-5
sizes = [{ M = 23, N = 45 }]
[kernel.rowsoftplus.bench]
sizes = [{ M = 16384, N = 4096 }]
""").kernels["rowsoftplus"]
    root = Path(__file__).resolve().parents[2]
    fam = RowReduceFamily()
    ctx = example_ctx(root / "examples" / "rmsnorm" / "rmsnorm.cu", "rowsoftplus", spec, SOFTPLUS_MEAN)
    assert "another function" in fam.why_not(ctx) and fam.propose(ctx) == []
    plain = example_ctx(root / "examples" / "rmsnorm" / "rmsnorm.cu", "rowsoftplus", spec,
                        SOFTPLUS_MEAN.replace("log1pf(expf(xr[j]))", "xr[j]"))
    assert fam.why_not(plain) is None  # the GEMV mean it is when the elements are summed as they are
