"""CPU tests of the ``unflatten`` pass (a flat index taken apart by ``/`` and ``%`` -> a 2-D/3-D launch over its
digits), and of ``smem_tile`` reading a batched GEMM written that way (attention scores, one thread per flat output).

Each kernel is written the way a first version is: the index decomposed in declarations (either order, through a
remainder of a remainder, in a ``size_t``), a 4-D NCHW index whose outer digits share ``z``. What the pass writes, what
it refuses and why, NVRTC compiles, and g++ host runs whose outputs equal the original's bits.
"""
from __future__ import annotations

import re
import shutil

import pytest

from ptxfactory.harness.compile import CompileFailed, compile_candidate
from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import PASSES, TransformGenerator, refusals
from ptxfactory.search.generators.transform.smem_tile import CONFIGS, SmemTilePass
from ptxfactory.search.generators.transform.unflatten import UnflattenPass

from test_smem_tile import host_agree
from test_transform import make_ctx, unit


def sizes_args(*names: str) -> str:
    """Spec lines for i32 scalar arguments that are size symbols of the same name."""
    return "".join(f'  {{ name = "{n}", role = "scalar", dtype = "i32", value = "{n}" }},\n' for n in names)


ATTN_ARGS = """
  { name = "Q", role = "in", dtype = "f32", shape = ["B", "T", "D"] },
  { name = "Kmat", role = "in", dtype = "f32", shape = ["B", "T", "D"] },
  { name = "S", role = "out", dtype = "f32", shape = ["B", "T", "T"] },
  { name = "B", role = "scalar", dtype = "i32", value = "B" },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
  { name = "D", role = "scalar", dtype = "i32", value = "D" },
  { name = "scale", role = "scalar", dtype = "f32", value = 0.125 },
"""
# S[b, i, j] = scale * sum_d Q[b, i, d] * K[b, j, d], one thread per flat output, the total declared between the
# index and the guard
ATTN = """
extern "C" __global__ void attn(const float* Q, const float* Kmat, float* S, int B, int T, int D, float scale)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = B * T * T;
    if (idx >= total) return;
    int j = idx % T;
    int i = (idx / T) % T;
    int b = idx / (T * T);
    const float* q = Q + (b * T + i) * D;
    const float* k = Kmat + (b * T + j) * D;
    float acc = 0.0f;
    for (int d = 0; d < D; d++) {
        acc += q[d] * k[d];
    }
    S[idx] = acc * scale;
}
"""
ATTN_GRID = '["cdiv(B * T * T, 256)"]'

# the same operation through a remainder of a remainder, the guarded-block form, and inline indexing
ATTN_REM = """
extern "C" __global__ void attn(const float* Q, const float* Kmat, float* S, int B, int T, int D, float scale)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * T * T) {
        int b = idx / (T * T);
        int rem = idx % (T * T);
        int i = rem / T;
        int j = rem % T;
        float acc = 0.0f;
        for (int d = 0; d < D; d++)
            acc += Q[(b * T + i) * D + d] * Kmat[(b * T + j) * D + d];
        S[(b * T + i) * T + j] = scale * acc;
    }
}
"""

NCHW_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N", "C", "H", "W"] },
  { name = "bias", role = "in", dtype = "f32", shape = ["C"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N", "C", "H", "W"] },
""" + sizes_args("N", "C", "H", "W")
# four digits: w on x, h on y, (c, n) folded into z; the channel read through a part of z
NCHW = """
extern "C" __global__ void k(const float* x, const float* bias, float* y, int N, int C, int H, int W)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * C * H * W) return;
    int w = idx % W;
    int h = (idx / W) % H;
    int c = (idx / (W * H)) % C;
    int n = idx / (C * H * W);
    float v = x[((n * C + c) * H + h) * W + w];
    y[idx] = v * 2.0f + bias[c] + (float)(h - w) + 0.5f * (float)n;
}
"""
NCHW_GRID = '["cdiv(N * C * H * W, 256)"]'

ROWS_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N", "M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""
# a transpose written flat, in size_t
ROWS = """
extern "C" __global__ void k(const float* x, float* y, int M, int N)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < (size_t)M * N) {
        size_t r = idx / N, c = idx % N;
        y[c * M + r] = x[idx];
    }
}
"""


CONV_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["Nb", "C", "H", "W"] },
  { name = "w", role = "in", dtype = "f32", shape = ["OC", "C", "KH", "KW"] },
  { name = "y", role = "out", dtype = "f32", shape = ["Nb", "OC", "H - KH + 1", "W - KW + 1"] },
""" + sizes_args("Nb", "C", "H", "W", "OC", "KH", "KW")
# a valid (unpadded) convolution: output sizes are differences of the scalars, declared and also written inline
CONV = """
extern "C" __global__ void conv(const float* x, const float* w, float* y, int Nb, int C, int H, int W, int OC, int KH, int KW)
{
    int OH = H - KH + 1;
    int OW = W - KW + 1;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= Nb * OC * OH * OW) return;
    int ow = idx % (W - KW + 1);
    int oh = (idx / OW) % OH;
    int oc = (idx / (OW * OH)) % OC;
    int n = idx / (OW * OH * OC);
    float acc = 0.0f;
    for (int ic = 0; ic < C; ic++)
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++)
                acc += x[((n * C + ic) * H + oh + kh) * W + ow + kw] * w[((oc * C + ic) * KH + kh) * KW + kw];
    y[idx] = acc;
}
"""
UP_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N", "C", "H", "W"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N", "C", "2 * H", "2 * W"] },
""" + sizes_args("N", "C", "H", "W")
# nearest 2x upsampling: ow / 2 leaves a digit of extent 2 inside the row
UPSAMPLE = """
extern "C" __global__ void up(const float* x, float* y, int N, int C, int H, int W)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * C * 4 * H * W) return;
    int ow = idx % (2 * W);
    int oh = (idx / (2 * W)) % (2 * H);
    int nc = idx / (4 * W * H);
    y[idx] = x[(nc * H + oh / 2) * W + ow / 2];
}
"""


def spec_for(name: str, args: str, grid: str, block: str, sizes: str, bench: str, policy: str = "free"):
    """A spec with its own bench size."""
    return parse_spec(f"""
[kernel.{name}]
args = [{args}]
launch = {{ grid = {grid}, block = {block}, policy = "{policy}" }}
[kernel.{name}.check]
rtol = 1e-4
atol = 1e-4
sizes = {sizes}
[kernel.{name}.bench]
sizes = [{bench}]
""").kernels[name]


def attn_spec(sizes="[{ B = 2, T = 19, D = 7 }, { B = 1, T = 1, D = 1 }]", policy="free"):
    return spec_for("attn", ATTN_ARGS, ATTN_GRID, "[256]", sizes, "{ B = 32, T = 1024, D = 64 }", policy)


def nchw_spec():
    return spec_for("k", NCHW_ARGS, NCHW_GRID, "[256]", "[{ N = 2, C = 3, H = 5, W = 7 }]", "{ N = 32, C = 64, H = 56, W = 56 }")


def rows_spec():
    return spec_for("k", ROWS_ARGS, '["cdiv(M * N, 128)"]', "[128]", "[{ M = 37, N = 45 }]", "{ M = 4096, N = 4096 }")


def flat(source: str, spec):
    return UnflattenPass().apply(unit(source, spec))


def test_registered_once_in_group_grid():
    passes = [p for p in PASSES if isinstance(p, UnflattenPass)]
    assert len(passes) == 1 and passes[0].group == "grid" and passes[0].exact


def test_attention_scores_get_three_coordinates_named_after_the_kernels_parts():
    out = flat(ATTN, attn_spec())
    text = out.text
    assert "int j = blockIdx.x * blockDim.x + threadIdx.x;" in text
    assert "int i = blockIdx.y * blockDim.y + threadIdx.y;" in text
    assert "int b = blockIdx.z;" in text
    assert "if (j >= T || i >= T) return;" in text
    assert not re.search(r"idx\s*[/%]", text)  # the divisions are gone
    assert "int idx = j + i * (T) + b * (T * T);" in text  # S[idx] still reads it
    assert out.launch.grid == ["cdiv((T), 32)", "cdiv((T), 8)", "(B)"] and out.launch.block == [32, 8]


def test_smem_tile_reads_the_flattened_batched_gemm_and_the_proposals_compile():
    spec = attn_spec()
    ctx = make_ctx(ATTN, spec)
    assert not [r for names, r in refusals(unit(ATTN, spec)) if "smem_tile" in names]
    cands = TransformGenerator().propose(ctx)
    names = [c.description for c in cands]
    assert "transform smem_tile_1x1" in names and "transform unflatten" in names, names
    tiled = next(c for c in cands if "smem_tile_4x4+" in c.description)
    mma = next(c for c in cands if "mma_tile_64x64+" in c.description)  # the tensor cores' reading of it (3xTF32)
    for c in cands:
        if c in (tiled, mma) or c.description == "transform unflatten":
            r = compile_candidate(c, "sm_90a")
            assert not isinstance(r, CompileFailed), r.log
            assert r.resources.spill_stores == 0
    assert tiled.launch.grid == ["cdiv((T), 64)", "cdiv((T), 64)", "(B)"] and tiled.launch.block == [16, 16]
    assert mma.launch.grid == tiled.launch.grid and mma.launch.block == [16, 16]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("what", ["attn", "attn_rem"])
def test_unflattened_and_tiled_attention_give_the_originals_bits_on_the_host(what, tmp_path):
    source = {"attn": ATTN, "attn_rem": ATTN_REM}[what]
    spec = attn_spec()
    passes = [UnflattenPass()] + [SmemTilePass(*c) for c in CONFIGS]
    report = host_agree(source, spec, {"B": 2, "T": 19, "D": 7}, passes, tmp_path)
    assert report.count("same") == len(passes) and "DIFFERENT" not in report, report


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_four_digits_fold_the_outer_two_into_z_and_keep_the_bits(tmp_path):
    spec = nchw_spec()
    out = flat(NCHW, spec)
    assert "int w = blockIdx.x" in out.text and "int h = blockIdx.y" in out.text and "ptxf_z = blockIdx.z;" in out.text
    assert re.search(r"int c = \(ptxf_z % \(C\)\);", out.text), out.text
    assert re.search(r"int n = \(ptxf_z / \(C\)\);", out.text), out.text
    assert out.launch.grid == ["cdiv((W), 32)", "cdiv((H), 8)", "(C) * (N)"]
    report = host_agree(NCHW, spec, {"N": 2, "C": 3, "H": 5, "W": 7}, [UnflattenPass()], tmp_path)
    assert report.strip() == "1 y same", report


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_a_size_t_index_in_a_guarded_block_keeps_its_width_and_bits(tmp_path):
    spec = rows_spec()
    out = flat(ROWS, spec)
    # two parts declared in one statement: fresh coordinates, the parts rebuilt from them in size_t
    assert "size_t idx = (size_t)ptxf_x + (size_t)ptxf_y * (size_t)(N);" in out.text, out.text
    assert "size_t r = (size_t)ptxf_y, c = (size_t)ptxf_x;" in out.text
    assert out.launch.block == [32, 4] and out.launch.grid == ["cdiv((N), 32)", "cdiv((M), 4)"]
    report = host_agree(ROWS, spec, {"M": 37, "N": 45}, [UnflattenPass()], tmp_path)
    assert report.strip() == "1 y same", report


REFUSED = {
    "extents not nested": (ATTN.replace("int total = B * T * T;", "int total = B * T * D;").replace(
        "int i = (idx / T) % T;\n    int b = idx / (T * T);", "int i = 0;\n    int b = idx / D;"), "are not nested"),
    "a float division": (ATTN.replace("int j = idx % T;\n    int i = (idx / T) % T;\n    int b = idx / (T * T);",
                                      "int j = 0, i = 0, b = (int)((float)idx / T);"), "is not taken apart"),
    "a part that does not divide the bound": (ATTN.replace("int total = B * T * T;", "int total = B * T * D;"),
                                              "does not divide the guard's bound"),
    "a divisor read from memory": (ATTN.replace("int j = idx % T;", "int j = idx % (int)Q[0];"), "is not a product"),
    "threadIdx after the index": (ATTN.replace("S[idx] = acc * scale;", "S[idx] = acc * scale + threadIdx.x;"),
                                  "reads threadIdx"),
    "a barrier": (ATTN.replace("float acc = 0.0f;", "float acc = 0.0f; __syncthreads();"), "barrier"),
    "one digit": (ATTN.replace("int total = B * T * T;", "int total = T;").replace(
        "int j = idx % T;\n    int i = (idx / T) % T;\n    int b = idx / (T * T);", "int j = idx % T, i = 0, b = 0;"),
        "one digit only"),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_refusals_say_why(what):
    source, reason = REFUSED[what]
    why = UnflattenPass().why_not(unit(source, attn_spec()))
    assert why is not None and reason in why, why


def test_a_z_over_the_hardware_range_moves_to_y_and_a_y_over_it_is_refused():
    big = attn_spec(sizes="[{ B = 70000, T = 2, D = 1 }]")  # z = B over 65535: b goes on y with i
    out = flat(ATTN, big)
    assert out.launch.grid == ["cdiv((T), 32)", "cdiv((B) * (T), 8)"], out.launch.grid
    assert "ptxf_y = blockIdx.y * blockDim.y + threadIdx.y;" in out.text and "blockIdx.z" not in out.text
    assert "int i = (ptxf_y % (T));" in out.text and "int b = (ptxf_y / (T));" in out.text, out.text
    huge = attn_spec(sizes="[{ B = 600000, T = 2, D = 1 }]")  # y = T * B / 8 over 65535 too
    assert "out of range" in UnflattenPass().why_not(unit(ATTN, huge))


def test_a_fixed_launch_is_refused():
    assert "not \"free\"" in UnflattenPass().why_not(unit(ATTN, attn_spec(policy="fixed")))


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_a_convolutions_output_sizes_are_sum_factors_matched_whatever_their_spelling(tmp_path):
    spec = spec_for("conv", CONV_ARGS, '["cdiv(Nb * OC * (H - KH + 1) * (W - KW + 1), 256)"]', "[256]",
                    "[{ Nb = 2, C = 3, H = 7, W = 6, OC = 5, KH = 3, KW = 2 }]",
                    "{ Nb = 32, C = 64, H = 56, W = 56, OC = 64, KH = 3, KW = 3 }")
    out = flat(CONV, spec)
    assert "int ow = blockIdx.x * blockDim.x + threadIdx.x;" in out.text and "int oh = blockIdx.y" in out.text
    assert "if (ow >= (W + 1 - KW) || oh >= (H + 1 - KH)) return;" in out.text, out.text
    assert out.launch.grid == ["cdiv(((W) + 1 - (KW)), 32)", "cdiv(((H) + 1 - (KH)), 8)", "(Nb) * (OC)"], out.launch.grid
    report = host_agree(CONV, spec, {"Nb": 2, "C": 3, "H": 7, "W": 6, "OC": 5, "KH": 3, "KW": 2}, [UnflattenPass()], tmp_path)
    assert report.strip() == "1 y same", report


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_a_literal_digit_under_a_warp_stays_inside_x(tmp_path):
    spec = spec_for("up", UP_ARGS, '["cdiv(4 * N * C * H * W, 256)"]', "[256]", "[{ N = 2, C = 3, H = 5, W = 7 }]",
                    "{ N = 16, C = 64, H = 128, W = 128 }")
    out = flat(UPSAMPLE, spec)
    assert out.launch.grid == ["cdiv(2 * (W), 32)", "cdiv(2 * (H), 8)", "(C) * (N)"], out.launch.grid
    assert "int ow = blockIdx.x * blockDim.x + threadIdx.x;" in out.text and "(ow / (2))" in out.text, out.text
    report = host_agree(UPSAMPLE, spec, {"N": 2, "C": 3, "H": 5, "W": 7}, [UnflattenPass()], tmp_path)
    assert report.strip() == "1 y same", report


def conv_spec():
    return spec_for("conv", CONV_ARGS, '["cdiv(Nb * OC * (H - KH + 1) * (W - KW + 1), 256)"]', "[256]",
                    "[{ Nb = 2, C = 3, H = 7, W = 6, OC = 5, KH = 3, KW = 2 }]",
                    "{ Nb = 32, C = 64, H = 56, W = 56, OC = 64, KH = 3, KW = 3 }")


def test_a_direct_convolution_becomes_an_implicit_gemm():
    """No grouping of rows and columns by adjacent digits separates the operands (the input reads the image, the
    output row and column; the weights the output channel): smem_tile groups the output channel as its row and the
    image, row and column as its column, and reads the (channel, kernel row, kernel column) nest as one k."""
    spec = conv_spec()
    u = unit(CONV, spec)
    tile = SmemTilePass(4, 4, 16)
    assert tile.why_not(u) is None
    out = tile.apply(u)
    assert out.launch.grid == ["cdiv(((H) + 1 - (KH)) * ((W) + 1 - (KW)) * (Nb), 64)", "cdiv((OC), 64)"], out.launch.grid
    text = out.text
    assert "const int oc = (int)(ptxf_y0 + ptxf_m);" in text  # the weights' side: the output channel
    assert "int n = (ptxf_x / ((H + 1 - KH) * (W + 1 - KW)));" in text  # the input's side: its pixel's digits
    assert "const int ptxf_kend = ptxf_n0 * ptxf_n1 * ptxf_n2;" in text  # k over (ic, kh, kw)
    ctx = make_ctx(CONV, spec)
    cand = TransformGenerator().candidate(ctx, out, [tile])
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    assert r.resources.spill_stores == 0


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("size", [{"Nb": 2, "C": 3, "H": 7, "W": 6, "OC": 5, "KH": 3, "KW": 2},
                                  {"Nb": 1, "C": 11, "H": 9, "W": 8, "OC": 21, "KH": 3, "KW": 5}])
def test_the_implicit_gemm_gives_the_direct_convolutions_bits_on_the_host(size, tmp_path):
    """Every configuration at sizes that are multiples of no tile, each output's (ic, kh, kw) order kept: bit-identical
    (the second size: 11 and 21 steps of k, each advancing the digits with carries at both inner levels)."""
    spec = conv_spec()
    passes = [SmemTilePass(*c) for c in CONFIGS]
    report = host_agree(CONV, spec, size, passes, tmp_path)
    assert report.count("same") == len(passes) and "DIFFERENT" not in report, report


def test_the_implicit_gemms_fetches_divide_by_nothing():
    """The nest's digits of each element's k are found once, by division, before the loop, then advanced by a step's
    digits with carries; the pixel's digits (n, oh, ow) are found once too: no division or remainder is left in the
    k loop, the staged loads the only work per element besides a few adds and compares."""
    tile = SmemTilePass(4, 4, 16)
    text = tile.apply(unit(CONV, conv_spec())).text
    loop = re.sub(r"//[^\n]*", "", text[text.index("for (int ptxf_kb"):text.rindex("__syncthreads();")])  # the k loop
    divisors = re.findall(r"[/%]\s*(\S+)", loop)
    assert divisors and all(re.match(r"\d", d) for d in divisors), divisors  # by literals only (the tile's shape)
    assert "int ow = ptxf_h0_0[0];" in text  # the pixel's digits: the same for the thread's four elements of x's tile
    assert "const int ic = (int)((0) + ptxf_d0_0[ptxf_u]);" in text  # x's elements: four k, four sets of digits
    assert "const int ic = (int)((0) + ptxf_d1_0[0]);" in text  # w's: one k (consecutive threads along k)
    assert "if (ptxf_d0_2[ptxf_u] >= ptxf_q2) { ptxf_d0_2[ptxf_u] -= ptxf_q2; ++ptxf_d0_1[ptxf_u]; }" in text


CONV_PAD_ARGS = CONV_ARGS.replace('shape = ["Nb", "OC", "H - KH + 1", "W - KW + 1"]',
                                  'shape = ["Nb", "OC", "H + 2 * P - KH + 1", "W + 2 * P - KW + 1"]') + """
  { name = "pad", role = "scalar", dtype = "i32", value = "P" },
"""
# a padded convolution: the input read only inside the image (a bounds check in the loop body)
CONV_PAD = """
extern "C" __global__ void conv(const float* x, const float* w, float* y, int Nb, int C, int H, int W, int OC, int KH, int KW, int pad)
{
    int OH = H + 2 * pad - KH + 1;
    int OW = W + 2 * pad - KW + 1;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= Nb * OC * OH * OW) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int oc = (idx / (OW * OH)) % OC;
    int n = idx / (OW * OH * OC);
    float acc = 0.0f;
    for (int ic = 0; ic < C; ic++)
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                int ih = oh - pad + kh;
                int iw = ow - pad + kw;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                    acc += x[((n * C + ic) * H + ih) * W + iw] * w[((oc * C + ic) * KH + kh) * KW + kw];
            }
    y[idx] = acc;
}
"""


def conv_pad_spec(rtol=1e-4):
    return spec_for("conv", CONV_PAD_ARGS, '["cdiv(Nb * OC * (H + 2 * P - KH + 1) * (W + 2 * P - KW + 1), 256)"]', "[256]",
                    "[{ Nb = 2, C = 3, H = 7, W = 6, OC = 5, KH = 3, KW = 2, P = 1 }]",
                    "{ Nb = 32, C = 64, H = 56, W = 56, OC = 64, KH = 3, KW = 3, P = 1 }")


CONV_CONTINUE = CONV_PAD.replace("""                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                    acc +=""", """                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc +=""")


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("form", ["if", "continue"])
def test_a_padded_convolution_masks_the_inputs_tile_and_agrees_on_the_host(form, tmp_path):
    """The bounds check reads the input's side (the output pixel) and k: the input's tile holds zeros where the original
    skips the term, so each output adds a zero product there (the same value for finite weights)."""
    spec = conv_pad_spec()
    source = CONV_PAD if form == "if" else CONV_CONTINUE
    u = unit(source, spec)
    tile = SmemTilePass(4, 4, 16)
    assert tile.why_not(u) is None, tile.why_not(u)
    out = tile.apply(u)
    fetches = [ln for ln in out.text.splitlines() if "] : float();" in ln]
    masked = [ln for ln in fetches if (">= 0)" if form == "if" else "< 0)") in ln]
    assert len(fetches) == 4 and len(masked) == 2 and all("? x[" in ln for ln in masked), fetches  # the input's, not w's
    cand = TransformGenerator().candidate(make_ctx(source, spec), out, [tile])
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log
    passes = [SmemTilePass(*c) for c in CONFIGS]
    report = host_agree(source, spec, {"Nb": 2, "C": 3, "H": 7, "W": 6, "OC": 5, "KH": 3, "KW": 2, "P": 1}, passes, tmp_path)
    assert report.count("same") == len(passes) and "DIFFERENT" not in report, report


ARGS_S = """
  { name = "x", role = "in", dtype = "f32", shape = ["Nb", "C", "H", "W"] },
  { name = "w", role = "in", dtype = "f32", shape = ["OC", "C", "K", "K"] },
  { name = "bias", role = "in", dtype = "f32", shape = ["OC"] },
  { name = "y", role = "out", dtype = "f32", shape = ["Nb", "OC", "(H - K) // 2 + 1", "(W - K) // 2 + 1"] },
  { name = "Nb", role = "scalar", dtype = "i32", value = "Nb" },
  { name = "C", role = "scalar", dtype = "i32", value = "C" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "W", role = "scalar", dtype = "i32", value = "W" },
  { name = "OC", role = "scalar", dtype = "i32", value = "OC" },
  { name = "K", role = "scalar", dtype = "i32", value = "K" },
  { name = "OH", role = "scalar", dtype = "i32", value = "(H - K) // 2 + 1" },
  { name = "OW", role = "scalar", dtype = "i32", value = "(W - K) // 2 + 1" },
"""
STRIDED = """
extern "C" __global__ void conv(const float* x, const float* w, const float* bias, float* y, int Nb, int C, int H, int W, int OC, int K, int OH, int OW)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= Nb * OC * OH * OW) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int oc = (idx / (OW * OH)) % OC;
    int n = idx / (OW * OH * OC);
    float acc = bias[oc];
    for (int ic = 0; ic < C; ic++)
        for (int kh = 0; kh < K; kh++)
            for (int kw = 0; kw < K; kw++)
                acc += x[((n * C + ic) * H + oh * 2 + kh) * W + ow * 2 + kw] * w[((oc * C + ic) * K + kh) * K + kw];
    y[idx] = fmaxf(acc, 0.0f);
}
"""
ARGS_NHWC = """
  { name = "x", role = "in", dtype = "f32", shape = ["Nb", "H", "W", "C"] },
  { name = "w", role = "in", dtype = "f32", shape = ["K", "K", "C", "OC"] },
  { name = "y", role = "out", dtype = "f32", shape = ["Nb", "H - K + 1", "W - K + 1", "OC"] },
""" + sizes_args("Nb", "C", "H", "W", "OC", "K")
NHWC = """
extern "C" __global__ void conv(const float* x, const float* w, float* y, int Nb, int C, int H, int W, int OC, int K)
{
    int OH = H - K + 1, OW = W - K + 1;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= Nb * OH * OW * OC) return;
    int oc = idx % OC;
    int ow = (idx / OC) % OW;
    int oh = (idx / (OC * OW)) % OH;
    int n = idx / (OC * OW * OH);
    float acc = 0.0f;
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++)
            for (int ic = 0; ic < C; ic++)
                acc += x[((n * H + oh + kh) * W + ow + kw) * C + ic] * w[((kh * K + kw) * C + ic) * OC + oc];
    y[idx] = acc;
}
"""
ARGS_1D = """
  { name = "x", role = "in", dtype = "f32", shape = ["B", "C", "L"] },
  { name = "w", role = "in", dtype = "f32", shape = ["OC", "C", "K"] },
  { name = "y", role = "out", dtype = "f32", shape = ["B", "OC", "L - K + 1"] },
""" + sizes_args("B", "C", "L", "OC", "K")
CONV1D = """
extern "C" __global__ void conv(const float* x, const float* w, float* y, int B, int C, int L, int OC, int K)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int OL = L - K + 1;
    if (idx < B * OC * OL) {
        int t = idx % OL;
        int oc = (idx / OL) % OC;
        int b = idx / (OL * OC);
        float s = 0.0f;
        for (int c = 0; c < C; ++c)
            for (int k = 0; k < K; ++k)
                s += w[(oc * C + c) * K + k] * x[(b * C + c) * L + t + k];
        y[idx] = s;
    }
}
"""
MORE_CONVS = {
  "strided_bias_relu": (STRIDED, ARGS_S, '["cdiv(Nb * OC * ((H - K) // 2 + 1) * ((W - K) // 2 + 1), 256)"]',
        {"Nb": 2, "C": 3, "H": 9, "W": 8, "OC": 5, "K": 3}, "{ Nb = 32, C = 64, H = 56, W = 56, OC = 64, K = 3 }"),
  "nhwc": (NHWC, ARGS_NHWC, '["cdiv(Nb * (H - K + 1) * (W - K + 1) * OC, 256)"]',
        {"Nb": 2, "C": 3, "H": 7, "W": 6, "OC": 5, "K": 3}, "{ Nb = 32, C = 64, H = 56, W = 56, OC = 64, K = 3 }"),
  "conv1d": (CONV1D, ARGS_1D, '["cdiv(B * OC * (L - K + 1), 256)"]',
        {"B": 2, "C": 3, "L": 20, "OC": 5, "K": 3}, "{ B = 32, C = 256, L = 4096, OC = 256, K = 3 }"),
}


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("name", sorted(MORE_CONVS))
def test_other_convolutions_become_implicit_gemms_with_the_originals_bits(name, tmp_path):
    """A strided convolution with a bias-initialised sum and a ReLU epilogue, an NHWC one (the channel innermost: the
    output channel on x), and a 1-D one (its batch on z): every tile configuration bit-identical on the host."""
    source, args, grid, size, bench = MORE_CONVS[name]
    spec = spec_for("conv", args, grid, "[256]", "[{ " + ", ".join(f"{k} = {v}" for k, v in size.items()) + " }]", bench)
    assert SmemTilePass(4, 4, 16).why_not(unit(source, spec)) is None
    passes = [SmemTilePass(*c) for c in CONFIGS]
    report = host_agree(source, spec, size, passes, tmp_path)
    assert report.count("same") == len(passes) and "DIFFERENT" not in report, report


SUM_DIM1_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["B", "N", "D"] },
  { name = "y", role = "out", dtype = "f32", shape = ["B", "D"] },
""" + sizes_args("B", "N", "D")
# a sum over the middle dimension, one thread per flat (b, d) output
SUM_DIM1 = """
extern "C" __global__ void sum_dim1(const float* x, float* y, int B, int N, int D)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * D) return;
    int b = idx / D;
    int d = idx % D;
    float s = 0.0f;
    for (int n = 0; n < N; n++) s += x[(b * N + n) * D + d];
    y[idx] = s;
}
"""


class _Batch:
    """unflatten's batch reading as a pass (for host_agree)."""

    name = "unflatten_batch"

    def apply(self, u):
        from ptxfactory.search.generators.transform.unflatten import unflatten
        return unflatten(u, batch=True)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_a_middle_dimension_reduction_is_read_with_a_batch_index_and_colpar_takes_it(tmp_path):
    """The outer digits as a block-uniform batch (T b = blockIdx.y; a 1-D block): the opening colpar reads, so a sum
    over a middle dimension gets columns on x and each column's rows split over y."""
    spec = spec_for("sum_dim1", SUM_DIM1_ARGS, '["cdiv(B * D, 256)"]', "[256]", "[{ B = 3, N = 37, D = 5 }]",
                    "{ B = 64, N = 4096, D = 16 }")
    u = unit(SUM_DIM1, spec)
    out = _Batch().apply(u)
    assert "int d = blockIdx.x * blockDim.x + threadIdx.x;" in out.text and "int b = blockIdx.y;" in out.text
    assert "if (d >= D) return;" in out.text and out.launch.grid == ["cdiv((D), 256)", "(B)"] and out.launch.block == [256]
    report = host_agree(SUM_DIM1, spec, {"B": 3, "N": 37, "D": 5}, [_Batch()], tmp_path)
    assert report.strip() == "1 y same", report
    colpar = next(p for p in PASSES if p.name == "colpar_auto")
    assert colpar.why_not(u) is None
    cand = TransformGenerator().candidate(make_ctx(SUM_DIM1, spec), colpar.apply(u), [colpar])
    # (since 2026-12-05 colpar reads the flat form itself, d = idx % D its column: the batch reading is its fallback)
    assert "n += blockDim.y" in cand.kernel_text
    r = compile_candidate(cand, "sm_90a")
    assert not isinstance(r, CompileFailed), r.log


EW_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["B", "T"] },
  { name = "y", role = "out", dtype = "f32", shape = ["B", "T"] },
  { name = "B", role = "scalar", dtype = "i32", value = "B" },
  { name = "T", role = "scalar", dtype = "i32", value = "T" },
"""


def ew(body: str, index: str = "int") -> str:
    return f"""
extern "C" __global__ void k(const float* x, float* y, int B, int T)
{{
    {index} idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T) return;
    {body}
}}
"""


# from an adversarial review: each once gave other bits than the original
TYPED_PARTS = {
    "a narrowing cast of the index": ew("int j = (unsigned char)idx % T;\n    int b = idx / T;\n"
                                        "    y[idx] = x[idx] + (float)j + 100.0f * (float)b;"),
    "a part declared in a narrow type": ew("unsigned char j = idx % T;\n    int b = idx / T;\n"
                                           "    y[idx] = x[idx] + (float)j + 1000.0f * (float)b;"),
    "an unsigned part": ew("unsigned j = idx % T;\n    unsigned b = idx / T;\n"
                           "    y[idx] = x[idx] + (float)(j - 1u) + 1000.0f * (float)b;", "unsigned"),
}


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("what", sorted(TYPED_PARTS))
def test_parts_keep_their_types_and_casts(what, tmp_path):
    spec = spec_for("k", EW_ARGS, '["cdiv(B * T, 256)"]', "[256]", "[{ B = 100, T = 300 }]", "{ B = 4096, T = 4096 }")
    report = host_agree(TYPED_PARTS[what], spec, {"B": 100, "T": 300}, [UnflattenPass()], tmp_path)
    assert report.strip() == "1 y same", report


@pytest.mark.parametrize("body", [
    "int j = idx % T;\n    int b = idx / T;\n    float v = x[idx];\n    if (v > 0.0f) { int j = 7; v += (float)j; }\n"
    "    y[idx] = v + (float)j + (float)b;",
    "int j = idx % T;\n    int b = idx / T;\n    float v = x[idx];\n    { int T = 5; v += (float)(idx % T); }\n"
    "    y[idx] = v + (float)j + (float)b;",
], ids=["a nested block's own part name", "a nested block's own scalar name"])
def test_a_name_declared_twice_is_refused(body):
    spec = spec_for("k", EW_ARGS, '["cdiv(B * T, 256)"]', "[256]", "[{ B = 3, T = 37 }]", "{ B = 4096, T = 4096 }")
    assert "declared more than once" in UnflattenPass().why_not(unit(ew(body), spec))


POOL_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["N", "C", "H", "W"] },
  { name = "y", role = "out", dtype = "f32", shape = ["N", "C", "(H - K) // S + 1", "(W - K) // S + 1"] },
""" + sizes_args("N", "C", "H", "W", "K", "S")
# max pooling: the output's extents are quotients of scalars ((W - K) / S + 1)
POOL = """
extern "C" __global__ void pool(const float* x, float* y, int N, int C, int H, int W, int K, int S)
{
    int OH = (H - K) / S + 1;
    int OW = (W - K) / S + 1;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * C * OH * OW) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int c = (idx / (OW * OH)) % C;
    int n = idx / (OW * OH * C);
    float mx = -INFINITY;
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++)
            mx = fmaxf(mx, x[((n * C + c) * H + oh * S + kh) * W + ow * S + kw]);
    y[idx] = mx;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_an_extent_that_is_a_quotient_of_scalars_is_a_factor(tmp_path):
    """``OW = (W - K) / S + 1`` divides the flat index: an opaque factor, inlined to the scalars in the kernel and
    written with the spec's ``//`` in the grid (the numerators are not negative at any spec size)."""
    size = {"N": 2, "C": 3, "H": 9, "W": 11, "K": 3, "S": 2}
    spec = spec_for("pool", POOL_ARGS, '["cdiv(N * C * ((H - K) // S + 1) * ((W - K) // S + 1), 256)"]', "[256]",
                    "[{ " + ", ".join(f"{k} = {v}" for k, v in size.items()) + " }]",
                    "{ N = 32, C = 64, H = 112, W = 112, K = 3, S = 2 }")
    out = flat(POOL, spec)
    assert out.launch.grid == ["cdiv((((((W) - (K)) // (S)) + 1)), 32)", "cdiv((((((H) - (K)) // (S)) + 1)), 8)",
                               "(C) * (N)"], out.launch.grid
    assert "if (ow >= (((W - K) / S) + 1) || oh >= (((H - K) / S) + 1)) return;" in out.text, out.text
    report = host_agree(POOL, spec, size, [UnflattenPass()], tmp_path)
    assert report.strip() == "1 y same", report
