"""CPU tests of the ``coarsen_outer_K`` transform pass (search/generators/transform/coarsen_outer.py): a 2-D or 3-D
launch gives each thread K consecutive indices of its outermost grid axis, the grid's outer extent ``cdiv(G, K)``.

Kernels as first versions are written: a horizontal blur on a 2-D launch of 16 x 16 blocks (clamped taps, weights
from a buffer), a 3-D seven-point stencil written one thread per flat point (taken to a 3-D launch by ``unflatten``
first). What the pass writes, where it refuses and why, NVRTC compiles, the generator's chains, and g++ host runs
whose outputs equal the original's bits at sizes that end inside a block and inside a thread's K rows.
"""
from __future__ import annotations

import shutil

import pytest

from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform import PASSES, plan_chains, refusals, run_chain
from ptxfactory.search.generators.transform.coarsen_outer import FACTORS, OuterCoarsenPass
from ptxfactory.search.generators.transform.restrict import RestrictPass
from ptxfactory.search.generators.transform.unflatten import UnflattenPass

from test_smem_tile import host_agree
from test_transform import compiles, spec_for, unit

BLUR = """
extern "C" __global__ void k(const float* in, const float* w, float* out, int H, int W)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    float acc = 0.0f;
    for (int t = 0; t < 5; t++) {
        int xx = min(max(x + t - 2, 0), W - 1);
        acc += w[t] * in[y * W + xx];
    }
    out[y * W + x] = acc;
}
"""
BLUR_ARGS = """
  { name = "in", role = "in", dtype = "f32", shape = ["H", "W"] },
  { name = "w", role = "in", dtype = "f32", shape = [5] },
  { name = "out", role = "out", dtype = "f32", shape = ["H", "W"] },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "W", role = "scalar", dtype = "i32", value = "W" },
"""
STENCIL = """
extern "C" __global__ void k(const float* u, float* out, int Z, int Y, int X, float c0, float c1)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= Z * Y * X) return;
    int z = idx / (Y * X);
    int y = (idx / X) % Y;
    int x = idx % X;
    if (z == 0 || z == Z - 1 || y == 0 || y == Y - 1 || x == 0 || x == X - 1) {
        out[idx] = u[idx];
        return;
    }
    float nb = u[idx - 1] + u[idx + 1] + u[idx - X] + u[idx + X] + u[idx - X * Y] + u[idx + X * Y];
    out[idx] = c0 * u[idx] + c1 * nb;
}
"""
STENCIL_ARGS = """
  { name = "u", role = "in", dtype = "f32", shape = ["Z", "Y", "X"] },
  { name = "out", role = "out", dtype = "f32", shape = ["Z", "Y", "X"] },
  { name = "Z", role = "scalar", dtype = "i32", value = "Z" },
  { name = "Y", role = "scalar", dtype = "i32", value = "Y" },
  { name = "X", role = "scalar", dtype = "i32", value = "X" },
  { name = "c0", role = "scalar", dtype = "f32", value = 0.4 },
  { name = "c1", role = "scalar", dtype = "f32", value = 0.1 },
"""


def spec(args: str, grid: str, block: str, sizes: str, bench: str):
    return parse_spec(f"""
[kernel.k]
args = [{args}]
launch = {{ grid = {grid}, block = {block}, policy = "free" }}
[kernel.k.check]
rtol = 1e-5
atol = 1e-5
sizes = {sizes}
[kernel.k.bench]
sizes = [{bench}]
""").kernels["k"]


def blur_spec(grid='["cdiv(W, 16)", "cdiv(H, 16)"]', policy_sizes="[{ H = 37, W = 45 }]"):
    return spec(BLUR_ARGS, grid, "[16, 16]", policy_sizes, "{ H = 4096, W = 4096 }")


def stencil_spec():
    return spec(STENCIL_ARGS, '["cdiv(Z * Y * X, 256)"]', "[256]", "[{ Z = 9, Y = 7, X = 33 }]",
                "{ Z = 256, Y = 256, X = 256 }")


class Chain:
    """Passes applied in order, as one pass (host_agree applies each of its passes to the original)."""

    def __init__(self, *passes):
        self.passes = passes

    def apply(self, u):
        return run_chain(u, list(self.passes))


def test_registry_holds_both_factors_of_both_axes():
    assert [p.name for p in PASSES if isinstance(p, OuterCoarsenPass)] == \
        [f"coarsen_outer_{k}" for k in FACTORS] + [f"coarsen_y_{k}" for k in FACTORS]


@pytest.mark.parametrize("k", FACTORS)
def test_a_2d_blur_takes_k_consecutive_rows_a_thread(k):
    """The row index's declaration becomes a loop over K consecutive rows; the guard's return ends one row
    (``continue``) where it is still tested; the column index stays outside the loop; the grid's y is ``cdiv(G, K)``;
    NVRTC compiles it."""
    s = blur_spec()
    out = OuterCoarsenPass(k).apply(unit(BLUR, s))
    assert out.launch.grid == ["cdiv(W, 16)", f"cdiv(cdiv(H, 16), {k})"] and out.launch.block == s.launch.block
    text = out.text
    # the guard, an upper bound on the row plus a column test, is tested once for the thread's last row: its full
    # path runs the K rows without it, the checked path keeps it as each row's continue
    assert "return" not in text and text.count("continue;") == 1
    assert f"!((x >= W || ((int)(ptxf_ob + {k - 1})) >= H))" in text
    assert text.index("int x = blockIdx.x") < text.index("for (int ptxf_o")
    assert f"((long long)blockIdx.y * blockDim.y + threadIdx.y) * {k}" in text
    compiles(out.text, s, "k")


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_the_blur_and_the_stencil_give_the_originals_bits_on_the_host(tmp_path):
    """At sizes that end inside a block and inside a thread's K rows (37 rows: 16-row blocks, 4 and 8 rows a thread;
    Z = 9 planes: 4 and 8 a thread), every point is computed once with the original's code: the same bytes, and no
    point left at the NaN poison."""
    b = blur_spec()
    report = host_agree(BLUR, b, {"H": 37, "W": 45}, [OuterCoarsenPass(4), OuterCoarsenPass(8)], tmp_path)
    assert report.split() == ["1", "out", "same", "2", "out", "same"], report
    s = stencil_spec()
    chains = [Chain(UnflattenPass(), OuterCoarsenPass(4)), Chain(RestrictPass(), UnflattenPass(), OuterCoarsenPass(8))]
    report = host_agree(STENCIL, s, {"Z": 9, "Y": 7, "X": 33}, chains, tmp_path)
    assert report.split() == ["1", "out", "same", "2", "out", "same"], report


def test_after_unflatten_the_stencils_planes_are_marched():
    """The flat original has a 1-D grid (coarsen's); after unflatten, z = blockIdx.z is the outer index: each thread
    takes K consecutive planes, bounded by the original grid's z extent in the kernel's own scalars."""
    s = stencil_spec()
    u = unit(STENCIL, s)
    assert OuterCoarsenPass(4).why_not(u) == "the grid is 1-D (coarsen's, not coarsen_outer's)"
    flat = UnflattenPass().apply(u)
    out = OuterCoarsenPass(4).apply(flat)
    assert out.launch.grid[:2] == flat.launch.grid[:2] and out.launch.grid[2] == f"cdiv({flat.launch.grid[2]}, 4)"
    assert "(long long)blockIdx.z * 4" in out.text and "ptxf_on = ((long long)(Z))" in out.text
    compiles(out.text, s, "k")
    chains = [[p.name for p in c] for c in plan_chains(u)]
    assert any(c[-3:] == ["unflatten", "coarsen_outer_4", "launch_bounds"] for c in chains)
    # its chains follow the ones without it (not yet timed on a GPU)
    first = next(i for i, c in enumerate(chains) if "coarsen_outer_4" in c)
    assert any("unflatten" in c and "coarsen_outer_4" not in c for c in chains[:first])


@pytest.mark.parametrize("change, reason", [
    (lambda t: t.replace("for (int t = 0; t < 5; t++)", "for (int t = 0; t < W; t++)"),
     "a loop that is not a short one between literal bounds"),
    (lambda t: t.replace("float acc = 0.0f;", "float acc = 0.0f; __syncthreads();"), "a barrier (__syncthreads)"),
    (lambda t: t.replace("out[y * W + x] = acc;", "out[y * W + x] = acc + blockIdx.y;"), "blockIdx.y is read past"),
    (lambda t: t.replace("int y = blockIdx.y * blockDim.y + threadIdx.y;", "int ty = threadIdx.y; int y = blockIdx.y * blockDim.y + ty;"),
     "no top-level declaration of the outer index"),
    (lambda t: t.replace("acc += w[t] * in[y * W + xx];", "if (xx < 0) return; acc += w[t] * in[y * W + xx];"),
     "a return inside a loop or switch"),
    (lambda t: t.replace("float acc = 0.0f;", "float acc = 0.0f; y += 0;"), "the outer index 'y' is written"),
    # found by a red team (2026-12-05): a row pointer bumped once per row would move K times; a lambda's return
    (lambda t: t.replace("float acc = 0.0f;", "in += (size_t)y * W; float acc = 0.0f;").replace("in[y * W + xx]", "in[xx]"),
     "the code after the outer index writes in, declared before it"),
    (lambda t: t.replace("float acc = 0.0f;", "auto sq = [](float v) { return v * v; }; float acc = 0.0f;"), "a lambda"),
    # a third red team (2026-12-05): state before the index written through a field, an element, a pointer to a
    # local or a reference (a guard tested once for the last row read the value before the write)
    (lambda t: t.replace("int y = blockIdx.y", "struct { int h; } st; st.h = H;\n    int y = blockIdx.y").replace(
        "float acc = 0.0f;", "st.h = 13; float acc = 0.0f;"), "writes st, declared before it"),
    (lambda t: t.replace("int y = blockIdx.y", "float keep[1]; keep[0] = 0.0f;\n    int y = blockIdx.y").replace(
        "out[y * W + x] = acc;", "keep[0] += acc; out[y * W + x] = keep[0];"), "writes keep, declared before it"),
    (lambda t: t.replace("int y = blockIdx.y", "int lim = H; int* lp = &lim;\n    int y = blockIdx.y").replace(
        "float acc = 0.0f;", "*lp = 13; float acc = 0.0f;"), "writes lp, declared before it"),
    (lambda t: t.replace("float acc = 0.0f;", "int& HH = H; HH = 14; float acc = 0.0f;"), "a reference declared after"),
])
def test_refusals_say_why(change, reason):
    u = unit(change(BLUR), blur_spec())
    why = OuterCoarsenPass(4).why_not(u)
    assert why is not None and reason in why, why
    assert ("coarsen_outer_4", why) in [(n, r) for n, r in refusals(u)] or any(reason in r for _, r in refusals(u))


def test_a_grid_extent_with_no_c_form_is_refused():
    """The bound on the outer index is the original grid's extent, computed in the kernel from its scalars: a size
    symbol no scalar passes cannot be written there."""
    args = BLUR_ARGS.replace('{ name = "H", role = "scalar", dtype = "i32", value = "H" }',
                             '{ name = "H", role = "scalar", dtype = "i32", value = "Hs - 1" }').replace('["H", "W"]', '["Hs", "W"]')
    s = spec(args, '["cdiv(W, 16)", "cdiv(Hs, 16)"]', "[16, 16]", "[{ Hs = 38, W = 45 }]", "{ Hs = 4097, W = 4096 }")
    why = OuterCoarsenPass(4).why_not(unit(BLUR, s))
    assert why is not None and "has no C form" in why, why


BOX = """
extern "C" __global__ void k(const float* in, float* out, int H, int W)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    float acc = 0.0f;
    for (int dy = -1; dy <= 1; dy++) {
        int yy = min(max(y + dy, 0), H - 1);
        for (int dx = -1; dx <= 1; dx++) {
            int xx = min(max(x + dx, 0), W - 1);
            acc += in[yy * W + xx];
        }
    }
    out[y * W + x] = acc * (1.0f / 9.0f);
}
"""
BOX_ARGS = """
  { name = "in", role = "in", dtype = "f32", shape = ["H", "W"] },
  { name = "out", role = "out", dtype = "f32", shape = ["H", "W"] },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "W", role = "scalar", dtype = "i32", value = "W" },
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_a_window_counted_from_minus_one_is_a_short_loop(tmp_path):
    """A 3 x 3 box blur's ``for (int dy = -1; dy <= 1; dy++)``: three iterations (a negative literal start was read as
    no literal, and the loop refused the pass: a new user's kernel, 2026-12-05); the rows taken 4 and 8 a thread give
    the original's bits."""
    s = spec(BOX_ARGS, '["cdiv(W, 16)", "cdiv(H, 16)"]', "[16, 16]", "[{ H = 37, W = 45 }]", "{ H = 4096, W = 4096 }")
    u = unit(BOX, s)
    assert OuterCoarsenPass(4).why_not(u) is None
    r = host_agree(BOX, s, {"H": 37, "W": 45}, [OuterCoarsenPass(4), OuterCoarsenPass(8)], tmp_path)
    assert r.split() == ["1", "out", "same", "2", "out", "same"], r


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_a_guard_on_a_local_stays_in_the_full_path(tmp_path):
    """A guard reading a local computed from the row (``idx``) cannot be tested once for the last row: it stays in
    both paths, and the rows still give the original's bits."""
    src = BLUR.replace("    if (x >= W || y >= H) return;\n", "    int idx = y * W + x;\n    if (x >= W || idx >= H * W) return;\n")
    s = blur_spec()
    text = OuterCoarsenPass(4).apply(unit(src, s)).text
    assert text.count("continue;") == 2 and "!((x >= W" not in text
    r = host_agree(src, s, {"H": 37, "W": 45}, [OuterCoarsenPass(4)], tmp_path)
    assert r.split() == ["1", "out", "same"], r


JACOBI = """
extern "C" __global__ void k(const float* u, const float* rhs, float* u_new, int H, int W)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= H || j >= W) return;
    if (i == 0 || j == 0 || i == H - 1 || j == W - 1) {
        u_new[i * W + j] = u[i * W + j];
        return;
    }
    u_new[i * W + j] = 0.25f * (u[(i - 1) * W + j] + u[(i + 1) * W + j] + u[i * W + j - 1] + u[i * W + j + 1] - rhs[i * W + j]);
}
"""
JACOBI_ARGS = """
  { name = "u", role = "in", dtype = "f32", shape = ["H", "W"] },
  { name = "rhs", role = "in", dtype = "f32", shape = ["H", "W"] },
  { name = "u_new", role = "out", dtype = "f32", shape = ["H", "W"] },
  { name = "H", role = "scalar", dtype = "i32", value = "H" },
  { name = "W", role = "scalar", dtype = "i32", value = "W" },
"""
# the same border written as an if/else with other comparisons (v <= 0, H - 1 <= v), kept as a statement
JACOBI_IF = JACOBI.replace("""    if (i == 0 || j == 0 || i == H - 1 || j == W - 1) {
        u_new[i * W + j] = u[i * W + j];
        return;
    }
    u_new[i * W + j] = 0.25f""", """    float v;
    if (i <= 0 || j == 0 || H - 1 <= i || j == W - 1) {
        v = u[i * W + j];
    } else {
        v = 0.25f""").replace("- rhs[i * W + j]);\n}", "- rhs[i * W + j]);\n        v += 0.0f;\n    }\n    u_new[i * W + j] = v;\n}")


def jacobi_spec():
    return spec_for("k", JACOBI_ARGS, grid='["cdiv(W, 16)", "cdiv(H, 16)"]', block="[16, 16]", sizes="[{ H = 37, W = 45 }]")


def test_a_border_false_for_all_of_a_threads_rows_leaves_them_the_interior_alone():
    """Jacobi's border (first and last row and column: an early return, then a select once canonical) is tested for the
    thread's first and last row: where it is false for all of them, the rows run the interior's expression with no
    choice between them (their vertical taps one expression each, for the compiler to share)."""
    u = unit(JACOBI, jacobi_spec())
    out = OuterCoarsenPass(4).apply(u)
    head, rest = out.text.split("// every index inside the border", 1)
    fast = rest.split("} else", 1)[0]
    assert "((0) < (int)(ptxf_ob) || (0) > (int)(ptxf_ob + 3))" in head and "!(j == 0)" in head
    assert "((H - 1) < (int)(ptxf_ob) || (H - 1) > (int)(ptxf_ob + 3))" in head
    assert "?" not in fast and "u[(i - 1) * W + j]" in fast
    compiles(out.text, jacobi_spec(), "k")
    iff = OuterCoarsenPass(4).apply(unit(JACOBI_IF, jacobi_spec()))
    head = iff.text.split("// every index inside the border", 1)[0]
    assert "!((int)(ptxf_ob) <= (0))" in head and "!((int)(ptxf_ob + 3) >= (H - 1))" in head


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("size", [{"H": 37, "W": 45}, {"H": 66, "W": 18}, {"H": 5, "W": 3}])
def test_the_interior_path_gives_the_originals_bits_on_the_host(size, tmp_path):
    """Heights whose threads' rows start inside, straddle and end at the border (37 and 66 rows, 4 and 8 a thread; 5
    rows: no thread inside), both spellings of the border: every point the original's bits."""
    s = jacobi_spec()
    for src in (JACOBI, JACOBI_IF):
        report = host_agree(src, s, size, [OuterCoarsenPass(4), OuterCoarsenPass(8)], tmp_path)
        assert report.split() == ["1", "u_new", "same", "2", "u_new", "same"], report


# the border as one select whose condition the grammar reads as a template (i < 1 || ... || i >= H - 1)
JACOBI_SEL = """
extern "C" __global__ void k(const float* u, const float* rhs, float* u_new, int H, int W)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= H || j >= W) return;
    u_new[i * W + j] = (i < 1 || j < 1 || i >= H - 1 || j >= W - 1) ? u[i * W + j] :
        0.25f * (u[(i - 1) * W + j] + u[(i + 1) * W + j] + u[i * W + j - 1] + u[i * W + j + 1] - rhs[i * W + j]);
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_a_border_select_the_grammar_misreads_is_read_as_comparisons(tmp_path):
    out = OuterCoarsenPass(4).apply(unit(JACOBI_SEL, jacobi_spec())).text
    assert "every index inside the border" in out
    report = host_agree(JACOBI_SEL, jacobi_spec(), {"H": 37, "W": 45}, [OuterCoarsenPass(4)], tmp_path)
    assert report.split() == ["1", "u_new", "same"], report


def test_a_border_reading_memory_or_a_row_local_is_not_hoisted():
    """A condition that reads a buffer, or a local computed from the row, is the rows' own: no interior path."""
    mem = JACOBI.replace("if (i == 0 || j == 0", "if (rhs[0] > 1e30f || i == 0 || j == 0")
    assert "every index inside the border" not in OuterCoarsenPass(4).apply(unit(mem, jacobi_spec())).text
    local = JACOBI.replace("    if (i == 0 || j == 0", "    int top = i - 1;\n    if (top < 0 || j == 0")
    assert "every index inside the border" not in OuterCoarsenPass(4).apply(unit(local, jacobi_spec())).text


@pytest.mark.parametrize("border", [
    "(unsigned char)i == 0 || j == 0 || i == H - 1 || j == W - 1",      # a narrowing cast wraps: row 256 is 0
    "(short)i < 0 || i == 0 || j == 0 || i == H - 1 || j == W - 1",
])
def test_a_narrowing_cast_of_the_index_is_not_hoisted(border):
    """Found by a red team (2026-12-05): the index under a narrowing cast is no monotone function of it, so a border
    row between a thread's first and last escaped the test; only its own type or a 64-bit one is read through."""
    src = JACOBI.replace("i == 0 || j == 0 || i == H - 1 || j == W - 1", border)
    assert src != JACOBI
    assert "every index inside the border" not in OuterCoarsenPass(4).apply(unit(src, jacobi_spec())).text
    wide = JACOBI.replace("i == 0 ||", "(long long)i == 0 ||")
    assert "every index inside the border" in OuterCoarsenPass(4).apply(unit(wide, jacobi_spec())).text


def test_a_name_a_call_may_write_or_a_nested_scope_declares_is_no_stable_bound():
    """Found by a red team (2026-12-05): a local declared before the index but set after it through a lambda's captured
    reference (or passed to a call) was read once, before; a name declared in a loop's scope before the index was
    read outside it (no such name there). Neither is hoisted; the lambda's write also refuses the pass."""
    lam = JACOBI.replace("    int j = blockIdx.x", "    int top = -1;\n    auto set_top = [&](int t) { top = t; };\n    int j = blockIdx.x").replace(
        "    if (i >= H || j >= W) return;\n", "    if (i >= H || j >= W) return;\n    set_top(8);\n").replace("i == 0 ||", "i <= top ||")
    assert "writes top" in OuterCoarsenPass(4).why_not(unit(lam, jacobi_spec()))
    call = JACOBI.replace("    int j = blockIdx.x", "    int top = -1;\n    int j = blockIdx.x").replace(
        "    if (i >= H || j >= W) return;\n", "    if (i >= H || j >= W) return;\n    setl(top, 8);\n").replace("i == 0 ||", "i <= top ||")
    # (sink moves ``int top = -1;`` after the guard: a per-row local, set by the call; never a stable bound)
    assert "every index inside the border" not in OuterCoarsenPass(4).apply(unit(call, jacobi_spec())).text
    nested = JACOBI.replace("    int j = blockIdx.x", "    float ws = 0.0f;\n    for (int up = 0; up < 2; up++) ws += 0.5f;\n    int j = blockIdx.x").replace(
        "    if (i == 0 ||", "    int up = i - 1;\n    if (up < 0 ||")
    assert "every index inside the border" not in OuterCoarsenPass(4).apply(unit(nested, jacobi_spec())).text


def test_the_y_variant_takes_a_3d_launchs_rows_and_leaves_2d_ones_to_coarsen_outer():
    """After unflatten, a 3-D stencil's y (its rows; a convolution's or a pooling's output rows, which share input
    rows) is coarsened by ``coarsen_y_K``: K consecutive rows a thread, the grid's y ``cdiv(G, K)``, z as it was
    (z holds the images and channels of a convolution, which share no taps: coarsen_outer's axis there)."""
    s = stencil_spec()
    flat = UnflattenPass().apply(unit(STENCIL, s))
    out = OuterCoarsenPass(4, middle=True).apply(flat)
    assert out.launch.grid[0] == flat.launch.grid[0] and out.launch.grid[2] == flat.launch.grid[2]
    assert out.launch.grid[1] == f"cdiv({flat.launch.grid[1]}, 4)"
    assert "((long long)blockIdx.y * blockDim.y + threadIdx.y) * 4" in out.text
    compiles(out.text, s, "k")
    assert OuterCoarsenPass(4, middle=True).why_not(unit(BLUR, blur_spec())) == \
        "the grid is not 3-D (a 2-D grid's y is coarsen_outer's)"


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_the_y_variant_gives_the_originals_bits_on_the_host(tmp_path):
    """Rows that end inside a block and inside a thread's K rows (Y = 7 and 37 rows: 8-row blocks of 4 and 8 rows a
    thread): every point once, with the original's code."""
    s = stencil_spec()
    chains = [Chain(UnflattenPass(), OuterCoarsenPass(4, middle=True)),
              Chain(RestrictPass(), UnflattenPass(), OuterCoarsenPass(8, middle=True))]
    for size in ({"Z": 5, "Y": 7, "X": 33}, {"Z": 3, "Y": 37, "X": 9}):
        report = host_agree(STENCIL, s, size, chains, tmp_path)
        assert report.split() == ["1", "out", "same", "2", "out", "same"], (size, report)
