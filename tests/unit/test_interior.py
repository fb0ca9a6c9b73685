"""CPU tests of the ``interior`` pass (a loop nest's bounds tests decided once at the window's extremes, the nest run
without them where they hold): what it rewrites, what it leaves, NVRTC compiles the output, and the output equals the
original bit for bit on the host over sizes, strides, paddings and dilations whose outputs lie inside and on the
border."""
from __future__ import annotations

import re
import shutil

import pytest

from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import PASSES, plan_chains, refusals, run_chain
from ptxfactory.search.generators.transform.interior import InteriorPass

from _host_cuda import host_ok
from test_modstep import EMU
from test_transform import compiles, unit

# average pooling, count_include_pad = false (a helper's new user): the wrapping form, a count that becomes K * K
POOL = """
extern "C" __global__ void pool(const float* x, float* y, int NC, int H, int W, int OH, int OW, int K, int S, int P, int D)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= NC * OH * OW) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int nc = idx / (OW * OH);
    int h0 = oh * S - P;
    int w0 = ow * S - P;
    float sum = 0.0f;
    int count = 0;
    for (int i = 0; i < K; i++) {
        for (int j = 0; j < K; j++) {
            int ih = h0 + i * D;
            int iw = w0 + j * D;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
                sum += x[(nc * H + ih) * W + iw];
                count++;
            }
        }
    }
    y[idx] = count > 0 ? sum / count : 0.0f;
}
"""
# a depthwise convolution's continue form
DW = """
extern "C" __global__ void pool(const float* x, float* y, int NC, int H, int W, int OH, int OW, int K, int S, int P, int D)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= NC * OH * OW) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int nc = idx / (OW * OH);
    float acc = 0.0f;
    for (int i = 0; i < K; i++) {
        int ih = oh * S - P + i;
        if (ih < 0 || ih >= H) continue;
        for (int j = 0; j < K; j++) {
            int iw = ow * S - P + j;
            if (iw < 0 || iw >= W) continue;
            acc += x[(nc * H + ih) * W + iw] * (float)(i * K + j + D);
        }
    }
    y[idx] = acc;
}
"""
# a clamped-border stencil (replicate padding): min/max on one axis, a nested select on the other (a helper's Sobel)
CLAMP = """
extern "C" __global__ void pool(const float* x, float* y, int NC, int H, int W, int OH, int OW, int K, int S, int P, int D)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= NC * OH * OW) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int nc = idx / (OW * OH);
    float acc = 0.0f;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++) {
            int ih = min(max(oh * S - P + i * D, 0), H - 1);
            int jw = ow * S - P + j * D;
            int iw = jw < 0 ? 0 : (jw >= W ? W - 1 : jw);
            acc += x[(nc * H + ih) * W + iw] * (float)(i * K + j + 1);
        }
    y[idx] = acc;
}
"""
# zero padding written as a select (an expression: the grammar reads its condition as a template unless helped)
PADSEL = """
extern "C" __global__ void pool(const float* x, float* y, int NC, int H, int W, int OH, int OW, int K, int S, int P, int D)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= NC * OH * OW) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int nc = idx / (OW * OH);
    float acc = 0.0f;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++) {
            int ih = oh * S - P + i * D, iw = ow * S - P + j * D;
            float v = (ih < 0 || ih >= H || iw < 0 || iw >= W) ? 0.0f : x[(nc * H + ih) * W + iw];
            acc += v * (float)(i * K + j + 1);
        }
    y[idx] = acc;
}
"""
# the bounds held in a bool flag: read through in a select, and negated in a continue test
FLAGSEL = PADSEL.replace("float v = (ih < 0 || ih >= H || iw < 0 || iw >= W) ? 0.0f : x[(nc * H + ih) * W + iw];",
                         "bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;\n"
                         "            float v = inside ? x[(nc * H + ih) * W + iw] : 0.0f;")
FLAGSKIP = POOL.replace("if (ih >= 0 && ih < H && iw >= 0 && iw < W) {",
                        "bool ok = (ih >= 0 && ih < H) && (iw >= 0 && iw < W);\n            if (!ok) continue;\n            {")
SPEC = parse_spec("""
[kernel.pool]
args = [
  { name = "x", role = "in", dtype = "f32", shape = ["NC", "H", "W"] },
  { name = "y", role = "out", dtype = "f32", shape = ["NC", "OH", "OW"] },
  { name = "NC", role = "scalar", dtype = "i32", value = "NC" },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "W", role = "scalar", dtype = "i32", value = "W" },
  { name = "OH", role = "scalar", dtype = "i32", value = "OH" },
  { name = "OW", role = "scalar", dtype = "i32", value = "OW" },
  { name = "K", role = "scalar", dtype = "i32", value = 3 },
  { name = "S", role = "scalar", dtype = "i32", value = 2 },
  { name = "P", role = "scalar", dtype = "i32", value = 1 },
  { name = "D", role = "scalar", dtype = "i32", value = 1 },
]
launch = { grid = ["cdiv(NC * OH * OW, 128)"], block = [128], policy = "free" }
[kernel.pool.check]
sizes = [{ NC = 3, H = 9, W = 7, OH = 5, OW = 4 }]
[kernel.pool.bench]
sizes = [{ NC = 256, H = 112, W = 112, OH = 56, OW = 56 }]
""").kernels["pool"]


def test_the_pooling_window_is_tested_once_and_its_taps_run_unchecked_inside():
    out = InteriorPass().apply(unit(POOL, SPEC)).text
    head = out[out.index("if ((") : out.index("{  // every tap inside")]
    # i's and j's coefficient is the runtime dilation D: its first or last tap, whichever is less (no min(): a name
    # min in the kernel would hide it)
    assert " ? " in head and "min(" not in head and "(long long)h0" in head and "(long long)W" in head
    inside = out[out.index("every tap inside") : out.index("} else {")]
    assert "ih >= 0" not in inside and "sum += x[(nc * H + ih) * W + iw];" in inside
    assert out.count("if (ih >= 0 && ih < H && iw >= 0 && iw < W)") == 1  # the border's nest as written
    compiles(out, SPEC, "pool")


def test_the_continue_form_drops_each_loops_tests():
    out = InteriorPass().apply(unit(DW, SPEC)).text
    inside = out[out.index("every tap inside") : out.index("} else {")]
    assert "continue" not in inside and inside.count(";\n") >= 2
    compiles(out, SPEC, "pool")


@pytest.mark.parametrize("change, kept", [
    (lambda t: t.replace("int ih = h0 + i * D;", "int ih = h0 + i * i;"), "ih >= 0"),          # not affine in i
    (lambda t: t.replace("int h0 = oh * S - P;", "int h0 = oh * S - P; int* hp = &h0;"), "ih >= 0"),  # h0 aliased
    (lambda t: t.replace("sum += x[(nc * H + ih) * W + iw];", "sum += x[(nc * H + ih) * W + iw]; H--;"), "ih < H"),
    (lambda t: t.replace("ih >= 0 && ih < H", "ih != -1 && ih != H"), "ih != H"),                 # no order
])
def test_terms_it_cannot_decide_once_stay_in_the_version(change, kept):
    """A term over a counter squared, an aliased local, a bound the nest writes, or no ordering stays in the
    inside version's test (the other, decidable terms go)."""
    out = InteriorPass().apply(unit(change(POOL), SPEC)).text
    inside = out[out.index("every tap inside") : out.index("} else {")]
    assert kept in inside and "iw >= 0" not in inside


def test_a_nest_with_no_term_it_can_decide_is_left():
    src = POOL.replace("ih >= 0 && ih < H && iw >= 0 && iw < W", "ih != -1 && iw != W")
    assert InteriorPass().why_not(unit(src, SPEC)).startswith("no loop nest tests its counters against bounds")
    # the report lists it with its reason (it once said nothing, and was missing from the lists)
    assert any("interior" in names.split(", ") and reason.startswith("no loop nest")
               for names, reason in refusals(unit(src, SPEC)))


def test_it_is_an_unproven_optional_group():
    chains = ["+".join(p.name for p in c) for c in plan_chains(unit(POOL, SPEC))]
    with_it = [c for c in chains if "+interior" in c]
    assert with_it and all(c.replace("+interior", "") in chains and chains.index(c.replace("+interior", "")) < chains.index(c)
                           for c in with_it)
    assert [p.name for p in PASSES].index("interior") == [p.name for p in PASSES].index("modstep") + 1


def test_clamps_are_their_value_inside():
    out = InteriorPass().apply(unit(CLAMP, SPEC)).text
    head = out[: out.index("{  // every tap inside")]
    inside = out[out.index("every tap inside") : out.index("} else {")]
    assert "int ih = (oh * S - P + i * D);" in inside and "int iw = jw;" in inside
    assert "min(" not in inside and "?" not in inside.replace("? (", "")  # (the version's own extremes are in its if)
    assert head.count(">= 0)") + head.count(">= 1)") == 4  # the four edges, each once
    compiles(out, SPEC, "pool")


def test_a_padding_select_is_its_load_inside():
    out = InteriorPass().apply(unit(PADSEL, SPEC)).text
    inside = out[out.index("every tap inside") : out.index("} else {")]
    assert "float v = (x[(nc * H + ih) * W + iw]);" in inside
    compiles(out, SPEC, "pool")


@pytest.mark.parametrize("helper", [
    "__device__ int min(int a, int b) { if (a < b) return a; return b + 1; }",   # (two statements: not expanded)
    "__device__ int max(int a, int b) { if (a > b) return a; return b - 1; }",
])
def test_a_min_or_max_of_the_files_own_is_not_cudas(helper):
    out = InteriorPass().apply(unit(helper + "\n" + CLAMP, SPEC)).text
    inside = out[out.index("every tap inside") : out.index("} else {")]
    name = helper.split("int ")[1].split("(")[0]
    line = next(ln for ln in inside.splitlines() if "int ih =" in ln)
    assert f"{name}(" in line  # the file's own function kept (CUDA's other one may be decided)
    assert "int iw = jw;" in inside  # (the select on the other axis still decided)


@pytest.mark.parametrize("source, gone", [(FLAGSEL, "inside ?"), (FLAGSKIP, "continue")])
def test_a_bool_flag_of_the_bounds_is_read_through(source, gone):
    """``bool inside = ih >= 0 && ...; v = inside ? x[...] : 0.0f`` and ``if (!ok) continue;``: the flag's condition
    decided like the test itself (the flag stays declared, unread)."""
    out = InteriorPass().apply(unit(source, SPEC)).text
    inside = out[out.index("every tap inside") : out.index("} else {")]
    assert gone not in inside and gone in out
    compiles(out, SPEC, "pool")

@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("pre, body", [
    # the red team (2026-12-05, the flags): a name the flag reads meant another variable where it is tested
    ("int j = o;", "bool ok = j >= 0 && j < W; for (int j = 0; j < 3; j++) { if (ok && ih >= 0 && ih < H) "
                   "acc += x[ih] * (float)(j + 1); }"),                                          # a counter's name
    ("int q = o - 5;", "{ bool ok = q >= 0 && q < H; int q = ih; if (!ok) continue; acc += x[q]; }"),  # a local's
    ("bool b = o > 2;", "bool a = b && ih >= 0; bool b = ih < H; if (a && b) acc += x[ih];"),      # a flag's
    ("bool b = o > 2;", "bool a = b && ih >= 0 && ih < H; bool b = a && kh < 100; if (a) acc += x[ih];"),  # a cycle
    ("", "bool ok = ok && ih >= 0; if (ok) acc += x[ih];"),                                     # itself (UB)
])
def test_a_flag_whose_names_mean_other_variables_where_it_is_tested_is_not_read(pre, body, tmp_path):
    src = RT.replace("PRE", pre).replace("BODY", body)
    u = unit(src, SPEC)
    refusals(u)  # (no RecursionError: the search asks every pass why not)
    if InteriorPass().applies(u) and "ok = ok" not in body:
        _same_on_host(src, InteriorPass().apply(u).text, tmp_path, unwritten=-1.0)


def test_a_pass_that_raises_costs_its_entry_in_the_report_not_the_job(monkeypatch):
    from ptxfactory.search.generators.transform import FAILED

    def boom(self, unit):
        raise RecursionError("a pass's bug")
    monkeypatch.setattr(InteriorPass, "why_not", boom)
    got = dict((r, n) for n, r in refusals(unit(POOL, SPEC)))
    assert got[FAILED] == "interior"


def test_a_flag_over_a_bound_the_nest_writes_is_kept():
    src = FLAGSEL.replace("float acc = 0.0f;", "float acc = 0.0f; int Wm = W;").replace("iw < W;", "iw < Wm;").replace(
        "acc += v * (float)(i * K + j + 1);", "acc += v * (float)(i * K + j + 1); Wm -= (K > 99);")
    assert not InteriorPass().applies(unit(src, SPEC))


@pytest.mark.parametrize("hint", ["ldg", "ldg_na", "stream"])
def test_a_padding_select_after_a_cache_hint_is_its_load_inside(hint):
    """The hints come first in every chain: ``c ? 0.0f : __ldg(x + i)`` is still a float load against a float (a new
    user's zero-padded convolution got interior only alone)."""
    chain = [next(p for p in PASSES if p.name == n) for n in ("restrict", hint)]
    hinted = run_chain(unit(PADSEL, SPEC), chain)
    assert "? 0.0f : x[" not in hinted.text  # (the hint rewrote the load)
    out = InteriorPass().apply(hinted).text
    inside = out[out.index("every tap inside") : out.index("} else {")]
    assert "?" not in inside.replace("? (", "") and "float v = (" in inside
    chains = ["+".join(p.name for p in c) for c in plan_chains(unit(PADSEL, SPEC))]
    assert any(c.startswith(f"restrict+{hint}+") and "+interior" in c for c in chains)


def test_a_select_whose_branches_differ_in_type_is_kept():
    """``c ? 0.0 : x[i]`` is a double: its load alone would be a float."""
    out = InteriorPass().apply(unit(PADSEL.replace("? 0.0f :", "? 0.0 :"), SPEC)).text if InteriorPass().applies(
        unit(PADSEL.replace("? 0.0f :", "? 0.0 :"), SPEC)) else None
    assert out is None


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("source", [POOL, DW, CLAMP, PADSEL, FLAGSEL, FLAGSKIP])
def test_equal_to_the_original_bit_for_bit_inside_and_on_the_border(source, tmp_path):
    """Strides 1-3, paddings 0-2, windows 1-4, dilations 1-2, over outputs inside and on every border."""
    _same_on_host(source, InteriorPass().apply(unit(source, SPEC)).text, tmp_path)


def _same_on_host(source: str, new: str, tmp_path, unwritten: float = -2.0) -> None:
    """``source``'s kernel and ``new`` give the same bits on the host; outputs start at -1 and ``unwritten`` (-2: an
    output the new one leaves unwritten differs; -1: a kernel that writes only some, as RT's, compares those)."""
    prog = [EMU, "#include <algorithm>\nusing std::min; using std::max;", re.sub(r"\bvoid pool\(", "void k0(", source[source.index("extern"):]),
            re.sub(r"\bvoid pool\(", "void k1(", new)]
    main = r"""
typedef void (*F)(const float*, float*, int, int, int, int, int, int, int, int, int);
static void run(F k, const std::vector<float>& x, std::vector<float>& y, int NC, int H, int W, int OH, int OW, int K, int S, int P, int D) {
    int total = NC * OH * OW;
    blockDim = {128, 1, 1}; gridDim = {(unsigned)((total + 127) / 128), 1, 1};
    for (unsigned b = 0; b < gridDim.x; ++b) for (unsigned t = 0; t < 128; ++t) {
        blockIdx = {b, 0, 0}; threadIdx = {t, 0, 0};
        k(x.data(), y.data(), NC, H, W, OH, OW, K, S, P, D);
    }
}
int main() {
    unsigned seed = 5u;
    auto rnd = [&] { seed = seed * 1664525u + 1013904223u; return (float)((int)(seed >> 9) - (1 << 22)) / (1 << 22); };
    int cases = 0, bad = 0;
    for (int S = 1; S <= 3; ++S) for (int P = 0; P <= 2; ++P) for (int K = 1; K <= 4; ++K) for (int D = 1; D <= 2; ++D) {
        int NC = 2, H = 9, W = 7;
        int OH = (H + 2 * P - D * (K - 1) - 1) / S + 1, OW = (W + 2 * P - D * (K - 1) - 1) / S + 1;
        if (OH <= 0 || OW <= 0) continue;
        std::vector<float> x(NC * H * W);
        for (auto& v : x) v = rnd();
        std::vector<float> y0(NC * OH * OW, -1.f), y1(y0.size(), -2.f);
        run(k0, x, y0, NC, H, W, OH, OW, K, S, P, D);
        run(k1, x, y1, NC, H, W, OH, OW, K, S, P, D);
        bad += std::memcmp(y0.data(), y1.data(), y0.size() * 4) != 0; cases++;
    }
    std::printf("%s %d cases, %d different\n", bad ? "DIFFERENT" : "ok", cases, bad);
    return bad != 0;
}
"""
    host_ok("\n".join(prog) + main.replace("y1(y0.size(), -2.f)", f"y1(y0.size(), {unwritten:.1f}f)"), tmp_path)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("pre, body", [
    # the red team (2026-12-05, the clamps and selects): each once made the inside copy compute another value
    ("", "acc += x[min((o * S) + (kh - P), H - 1) * 2 + 1];"),                    # (a) + (b): parenthesised again
    ("", "acc += (ih < 0 ? 0.0 : ih) / 2;"),                                      # a double select is no int's
    ("", "acc += ((ih < 0 ? 0u : ih) - 1 < 3) ? 1.0f : 0.0f;"),                   # an unsigned one neither
    ("", "const int* xi = (const int*)x; acc += (float)((ih < 0 || ih >= H) ? 0u : xi[ih]);"),  # 0u: unsigned
    ("", "const int* xi = (const int*)x; acc += ((ih < 0 || ih >= H) ? 0L : xi[ih]) < 1u ? 1.f : 0.f;"),
    ("", "int t = min(ih, 010); if (t >= 0) acc += x[t] * (float)(kh + 1);"),     # octal
    ("", "int arr[2] = {0, 3}; auto [Q, H] = arr; acc += (float)min(ih, H - 1) + Q;"),  # a binding's second name
    ("", "int t = kh < 2, H{kh + 1}, u = 3 > (0); acc += (float)min(ih, H - 1) + t + u;"),  # read as a template
    ("", "int e = ih; int z = 0; (kh > 100 ? z : e)++; acc += (float)min(e, H - 1) + z;"),  # a select written
    ("", "int e = ih; int z = 0; (z, e) += 1; acc += (float)min(e, H - 1) + z;"),          # a comma written
])
def test_the_red_teams_clamps_and_selects_are_refused_or_exact(pre, body, tmp_path):
    src = RT.replace("PRE", pre).replace("BODY", body)
    u = unit(src, SPEC)
    if InteriorPass().applies(u):
        _same_on_host(src, InteriorPass().apply(u).text, tmp_path, unwritten=-1.0)


GS = """
extern "C" __global__ void pool(const float* x, float* y, int NC, int H, int W, int OH, int OW, int K, int S, int P, int D)
{
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < NC * OH * OW; o += gridDim.x * blockDim.x) {
        int ow = o % OW, oh = (o / OW) % OH, nc = o / (OW * OH);
        float acc = 0.0f;
        for (int r = 0; r < 2; r++)   // (a coarsening's loop: its counter moves the window)
            for (int i = 0; i < K; i++)
                for (int j = 0; j < K; j++) {
                    int ih = min(max(oh * S - P + i * D + r, 0), H - 1);
                    int iw = ow * S - P + j * D;
                    if (iw < 0 || iw >= W) continue;
                    acc += x[(nc * H + ih) * W + iw] * (float)(r + 1);
                }
        y[o] = acc;
    }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_a_nest_inside_a_grid_stride_loop_is_versioned_there(tmp_path):
    """The grid-stride loop's counter is no counter the pass reads (its step is the grid), so the nest below it is
    versioned, its condition evaluated each time round; the coarsening's loop r is a counter of the nest."""
    out = InteriorPass().apply(unit(GS, SPEC)).text
    assert out.index("for (int o =") < out.index("every tap inside") < out.index("for (int r = 0")
    inside = out[out.index("every tap inside") : out.index("} else {")]
    assert "min(" not in inside and "continue" not in inside
    compiles(out, SPEC, "pool")
    _same_on_host(GS, out, tmp_path)


def test_a_using_declaration_of_min_hides_cudas():
    src = ("namespace my { struct M { __device__ int operator()(int a, int b) const { return a + b; } }; "
           "__device__ const M min{}; }\n" + RT.replace("PRE", "using my::min;").replace("BODY", "acc += (float)min(ih, H + 100);"))
    assert not InteriorPass().applies(unit(src, SPEC))


RT = """
extern "C" __global__ void pool(const float* x, float* y, int NC, int H, int W, int OH, int OW, int K, int S, int P, int D)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OW) return;
    float acc = 0.0f;
    PRE
    for (int kh = 0; kh < K; kh++) {
        int ih = o * S - P + kh;
        BODY
    }
    y[o] = acc;
}
"""


@pytest.mark.parametrize("pre, body, kept", [
    # the red team (2026-12-05): names whose meaning the declaration counts did not follow, or written unseen
    ("", "int lims[1] = {H - 1}; for (int H : lims) { if (ih >= 0 && ih < H) acc += x[ih]; }", None),  # range-for
    ("", "auto tap = [x, ih, H = H - 1]() { float v = 0.f; if (ih >= 0 && ih < H) v = x[ih]; return v; }; acc += tap();",
     None),                                                                                          # init-capture
    ("int rows = H; int& lim = rows;", "if (ih < 0 || ih >= lim) continue; acc += x[ih]; rows--;", "ih >= lim"),
    ("", "if (ih < 0 || ih >= H) continue; acc += x[ih]; asm volatile(\"sub.s32 %0, %0, 1;\" : \"+r\"(H));", None),
    ("", "__shared__ float buf[128]; buf[threadIdx.x] = 0.f; if (ih >= 0 && ih < H) buf[threadIdx.x] = x[ih]; "
         "__syncthreads(); acc += buf[(threadIdx.x + 1) % 128]; __syncthreads();", None),              # barriers
    ("{ int H2 = 0; }", "if (ih < 0 || ih >= H2) continue; acc += x[ih];", "ih >= H2"),               # not in scope
])
def test_terms_whose_names_or_barriers_it_cannot_follow_stay(pre, body, kept):
    """Left alone (a nest with asm, a range-for, a lambda or a barrier), or the term over the unfollowed name kept in
    the inside version (a reference's referent written in the nest, a name no declaration in scope gives)."""
    u = unit(RT.replace("PRE", pre).replace("BODY", body), SPEC)
    if kept is None:
        assert not InteriorPass().applies(u)
    else:
        out = InteriorPass().apply(u).text
        assert kept in out[out.index("every tap inside") : out.index("} else {")]


def test_a_local_named_min_does_not_hide_the_extreme():
    src = RT.replace("PRE", "float min = 1e30f;").replace("int ih = o * S - P + kh;", "int ih = o - P + kh * S;").replace(
        "BODY", "if (ih < 0 || ih >= H) continue; acc += fminf(min, x[ih]);")
    out = InteriorPass().apply(unit(src, SPEC)).text
    compiles(out, SPEC, "pool")
