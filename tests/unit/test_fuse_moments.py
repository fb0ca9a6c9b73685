"""CPU tests of ``fuse_moments``: a sum loop then a squared-deviation loop -> one Welford loop.

What the rewrite writes (the loop rowpar's recogniser reads as a Welford tuple), what it refuses and why, the chains
it joins (rowpar, vector_loops, rowpar_cluster), and g++ runs of the rewritten kernels against the originals: a
thread per row, and a row over a cluster's blocks (test_rowpar_cluster's emulation), within a float32 Welford's error.
"""
from __future__ import annotations

import dataclasses
import subprocess

import pytest

from ptxfactory.search.generators.transform import TransformGenerator
from ptxfactory.search.generators.transform import rowpar_cluster as rc
from ptxfactory.search.generators.transform.fuse_moments import FuseMomentsPass
from ptxfactory.search.generators.transform.reductions import loop_accumulators
from ptxfactory.search.generators.transform.rowpar import RowParallelPass
from ptxfactory.search.generators.transform.rowpar_cluster import RowClusterPass
from ptxfactory.search.generators.transform import syntax as sx

from test_rowpar_cluster import _program, few_rows_spec, with_facts
from test_transform import compiles, unit

FM = FuseMomentsPass()

STATS = """
extern "C" __global__ void stats(const float* x, float* mean, float* var, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float* xr = x + (size_t)r * N;
    float s = 0.0f;
    for (int j = 0; j < N; j++) s += xr[j];
    float m = s / N;
    float q = 0.0f;
    for (int k = 0; k < N; k++) {
        float d = xr[k] - m;
        q += d * d;
    }
    mean[r] = m;
    var[r] = q / N;
}
"""
STATS_ARGS = """
  { name = "x", role = "in", dtype = "f32", shape = ["M", "N"] },
  { name = "mean", role = "out", dtype = "f32", shape = ["M"] },
  { name = "var", role = "out", dtype = "f32", shape = ["M"] },
  { name = "M", role = "scalar", dtype = "i32", value = "M" },
  { name = "N", role = "scalar", dtype = "i32", value = "N" },
"""


def spec():
    return few_rows_spec(STATS_ARGS, rows=64, n=1 << 20, src=STATS)


def test_the_two_loops_become_one_welford_loop_rowpar_reads_as_a_tuple():
    out = FM.apply(unit(STATS, spec()))
    t = out.text
    assert t.count("for (") == 1 and "ptxf_wmu += ptxf_wd / ptxf_wn;" in t
    assert "s += ptxf_wmu * (float)ptxf_wn;" in t
    assert "q += ptxf_wm2 + (float)ptxf_wn * (ptxf_wmu - m) * (ptxf_wmu - m);" in t
    loop = next(n for n in sx.walk(out.fn) if n.type == "for_statement")
    accs = loop_accumulators(loop.child_by_field_name("body"), {"ptxf_wn", "ptxf_wmu", "ptxf_wm2"}, "j", tuples=True)
    assert accs is not None and [a.kind for a in accs.values()] == ["welford"]
    compiles(out.text, spec(), "stats")
    split = RowParallelPass(256).apply(out)
    assert "ptxf_welford" in split.text and "ptxf_block_merge" in " ".join(n for n, _ in split.helpers)


@pytest.mark.parametrize("change, reason", [
    (lambda t: t.replace("float d = xr[k] - m;", "float d = xr[k + 1] - m;"), "read different elements"),
    (lambda t: t.replace("for (int k = 0; k < N; k++) {", "for (int k = 1; k < N; k++) {"), "different bounds"),
    (lambda t: t.replace("    float q = 0.0f;\n", "    float q = 0.0f;\n    for (int z = 0; z < 2; z++) m += 0.0f;\n"),
     "the next loop is another"),
    (lambda t: t.replace("float m = s / N;", "float m = s / N; q = 1.0f;").replace("    float q = 0.0f;\n", "").replace(
        "    float s = 0.0f;\n", "    float s = 0.0f, q = 0.0f;\n"), "q is used between the loops"),
    (lambda t: t.replace("s += xr[j];", "s += xr[j] * var[0];").replace("float d = xr[k] - m;", "float d = xr[k] * var[0] - m;"),
     "reads var"),
])
def test_refusals_say_why(change, reason):
    src = change(STATS)
    assert src != STATS
    why = FM.why_not(unit(src, spec()))
    assert why is not None and reason in why, why


def test_an_exact_spec_is_refused():
    exact = spec().model_copy(
        update={"check": spec().check.model_copy(update={"rtol": 0.0, "atol": 0.0})})
    assert "exact results" in FM.why_not(unit(STATS, exact))


HOST_MAIN = r"""
int main() {
    for (int N : {1, 2, 7, 100, 1000, 4097}) {
        const int M = 3;
        std::vector<float> x(M * N), m1(M), v1(M), m2(M), v2(M);
        unsigned s = 7u * N;
        for (auto& v : x) { s = s * 1664525u + 1013904223u; v = 3.0f + (float)((int)(s >> 9) - (1 << 22)) / (1 << 22); }
        for (int r = 0; r < M; ++r) { threadIdx.x = r; k_orig(x.data(), m1.data(), v1.data(), M, N); k_new(x.data(), m2.data(), v2.data(), M, N); }
        for (int r = 0; r < M; ++r)
            if (fabs(m1[r] - m2[r]) > 1e-5 * fabs(m1[r]) || fabs(v1[r] - v2[r]) > 2e-4 * fabs(v1[r]) + 1e-7) {
                printf("N=%d row %d: %g %g vs %g %g\n", N, r, m1[r], v1[r], m2[r], v2[r]); return 1; }
    }
    printf("close\n");
    return 0;
}
"""


def test_the_fused_loop_gives_the_two_pass_statistics_on_the_host(tmp_path):
    """A thread per row on the host, rows of 1 to 4097 values of mean 3 (where a one-pass sum of squares would lose
    digits): the mean within 1e-5 and the variance within 2e-4 of the two-pass loops (float32 rounding)."""
    out = FM.apply(unit(STATS, spec()))
    prelude = "#include <cmath>\n#include <cstdio>\n#include <vector>\nstruct D { unsigned x, y, z; } threadIdx, blockIdx, blockDim;\n"
    body = (STATS.replace('extern "C" __global__ void stats(', "void k_orig(")
            + out.text.replace('extern "C" __global__ void stats(', "void k_new("))
    cpp, exe = tmp_path / "fm.cpp", tmp_path / "fm"
    cpp.write_text(prelude.replace("blockDim;", "blockDim = {1, 1, 1};") + body + HOST_MAIN)
    build = subprocess.run(["g++", "-std=c++17", "-O1", "-w", "-ffp-contract=off", str(cpp), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "close", run.stdout


def test_fused_then_split_over_a_cluster_agrees_with_the_original(tmp_path, monkeypatch):
    """fuse_moments, then rowpar_cluster4 (blocks of 32 host threads): the Welford parts merged across the cluster give
    the original's mean and variance within float re-association (test_rowpar_cluster's emulation)."""
    monkeypatch.setattr(rc, "CLUSTER_BLOCK", 32)
    u = with_facts(unit(STATS, few_rows_spec(STATS_ARGS, rows=4, n=1 << 12, src=STATS)))
    out = RowClusterPass(4).apply(FM.apply(u))
    assert "ptxf_cluster_merge<4>" in out.text
    cpp, exe = tmp_path / "emu.cpp", tmp_path / "emu"
    cpp.write_text(_program(STATS, out, STATS_ARGS, 4))
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-w", "-ffp-contract=off", "-pthread", str(cpp), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    for m, n, seed in ((3, 1000, 1), (2, 127, 2), (5, 1, 3), (1, 129, 4)):
        run = subprocess.run([str(exe), str(m), str(n), str(seed)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        diffs = {b: float(d) for b, d in (line.split() for line in run.stdout.strip().split("\n"))}
        assert diffs and all(d <= 2e-4 for d in diffs.values()), (m, n, diffs)


def test_in_the_generator_after_the_chains_without_it():
    """Optional and unproven: its chains come after those without it, and rowpar (and vector_loops) follow it."""
    from test_transform import make_ctx

    ctx = make_ctx(STATS, spec())
    names = [c.description for c in TransformGenerator().propose(ctx)]
    first = next(i for i, d in enumerate(names) if "fuse_moments" in d)
    assert any("rowpar" in d and "fuse_moments" not in d for d in names[:first])
    assert "rowpar" in names[first]
