"""The red team's attacks on ``modstep`` (2026-12-05), each a regression test: the pass either leaves the kernel
alone or its rewrite gives the original's results on the host (one thread, ``-fwrapv`` as the GPU wraps signed
integers, a timeout for the loops that ran away). Found: a target negated or scaled past int's range, 64-bit,
narrow, unsigned and ``sizeof`` operands, a step overflowing at a bound near INT_MAX, a divisor of INT_MIN, huge
literal divisors, writes through references, pointers and lambdas, a tested local written later, names shadowed in
the loop, a loop test with a side effect, direct initialisation of the counter, an unbraced test, and two loops'
terms in one condition (overlapping edits: every transform candidate lost)."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ptxfactory.protocol import parse_spec
from ptxfactory.search.generators.transform.modstep import HELPERS, ModStepPass

from test_modstep import EMU  # the host's stand-ins for CUDA's names, shared
from test_transform import compiles, unit

KERNEL = """extern "C" __global__ void k(int* y, int K, int c, int s, int J)
{
    int acc = 0, cnt = 0;
    for (int v = 0; v < K; v++) { BODY  acc = acc * 31 + v; cnt++; }
    y[0] = acc; y[1] = cnt;
}
"""
SPEC = parse_spec("""
[kernel.k]
args = [
  { name = "y", role = "out", dtype = "i32", shape = ["M"] },
  { name = "K", role = "scalar", dtype = "i32", value = 10 },
  { name = "c", role = "scalar", dtype = "i32", value = 1 },
  { name = "s", role = "scalar", dtype = "i32", value = 2 },
  { name = "J", role = "scalar", dtype = "i32", value = 4 },
]
launch = { grid = [1], block = [1], policy = "free" }
[kernel.k.check]
sizes = [{ M = 64 }]
[kernel.k.bench]
sizes = [{ M = 64 }]
""").kernels["k"]


def run_both(source: str, cases: list[tuple[int, int, int, int]], tmp_path) -> str:
    """The original and the rewrite on the host at each ``(K, c, s, J)``; "same"/"DIFF" a line (or the pass's
    refusal, "refused: ...")."""
    u = unit(source, SPEC)
    why = ModStepPass().why_not(u)
    if why is not None:
        return f"refused: {why}"
    out = ModStepPass().apply(u)  # (must not raise once why_not said None)
    compiles("\n\n".join(d for _, d in out.helpers) + "\n\n" + out.text, SPEC, "k")
    prog = [EMU, "namespace A {", source.replace('extern "C" ', "").replace("void k(", "void k0("), "}", "namespace B {"]
    prog += [d for _, d in out.helpers] + [out.text.replace('extern "C" ', "").replace("void k(", "void k1("), "}"]
    main = ["int main() { static int y0[64], y1[64];"]
    for K, c, s, J in cases:
        main.append(f"""{{ memset(y0, 0, sizeof y0); memset(y1, 0, sizeof y1);
  A::k0(y0, {K}, (int){c}LL, (int){s}LL, {J}); B::k1(y1, {K}, (int){c}LL, (int){s}LL, {J});
  std::printf("%s\\n", memcmp(y0, y1, sizeof y0) ? "DIFF" : "same"); }}""")
    main.append("return 0; }")
    cpp, exe = tmp_path / "emu.cpp", tmp_path / "emu"
    cpp.write_text("\n".join(prog + main))
    build = subprocess.run(["g++", "-std=c++17", "-O0", "-fwrapv", "-w", str(cpp), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return run.stdout


INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("body, cases", [
    # the target -c at c = INT_MIN, and (-c) * inv past int: computed in 64 bits
    # (c = INT_MAX would overflow the original's own v + c: undefined, the GPU's wrap not the polynomial's value)
    ("int t = v + c; if (t % 3 != 0) continue;", [(10, INT_MIN, 0, 0), (10, INT_MAX - 10, 0, 0), (10, -7, 0, 0)]),
    ("int t = c - 3 * v; if (t % 7 != 0) continue;", [(30, 2000000000, 0, 0), (30, -2000000000, 0, 0)]),
    # a runtime divisor of INT_MIN (no |s|), of 0 (undefined in the original: any result, but no endless loop) skipped
    ("if (v % s != 0) continue;", [(10, 0, INT_MIN, 0), (10, 0, -3, 0), (10, 0, 3, 0), (10, 0, 1, 0)]),
    # an unbraced test as the loop's only test, and a test under an if
    ("if ((v + c) % 3 != 0) continue;", [(10, 1, 0, 0), (10, INT_MIN, 0, 0)]),
])
def test_rewrites_that_apply_give_the_originals_results(body, cases, tmp_path):
    report = run_both(KERNEL.replace("BODY", body), cases, tmp_path)
    assert not report.startswith("refused"), report
    assert report.split() == ["same"] * len(cases), report


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_an_unbraced_test_as_the_loop_body_is_replaced_by_an_empty_statement(tmp_path):
    """``for (...) if (... % 3) continue; cnt++;``: the dropped test leaves ``;`` (a comment alone made the next
    statement the loop's body)."""
    src = KERNEL.replace("for (int v = 0; v < K; v++) { BODY  acc = acc * 31 + v; cnt++; }",
                         "for (int v = 0; v < K; v++) if ((v + c) % 3 != 0) continue;\n    cnt++;")
    report = run_both(src, [(10, 1, 0, 0), (10, 5, 0, 0)], tmp_path)
    assert report.split() == ["same", "same"], report


@pytest.mark.parametrize("body, why", [
    ("long long t = (long long)v + c; if (t % 3 != 0) continue;", "32-bit int"),   # 64-bit values through int helpers
    ("short t = v + c; if (t % 3 != 0) continue;", "32-bit int"),                  # a narrowing conversion
    ("if ((short)(v + c) % 3 != 0) continue;", "32-bit int"),
    ("if ((v + 0xFFFFFFFF) % 3 != 0) continue;", "32-bit int"),                    # unsigned operands
    ("if ((c - v - sizeof(float)) % 3 != 0) continue;", "32-bit int"),
    ("if ((v + c) % 4294967296 != 0) continue;", "no int name or literal"),        # a divisor past int
    ("if ((v + c) % 2147483648 != 0) continue;", "no int name or literal"),
    ("int t = v + c; for (int j = 0; j < J; j++) { if (t % 2 != 0) continue; acc += j; t += 1; }", "written in the loop"),
    ("int t = v + c; if (int t = J) { if (t % s != 0) continue; acc += t; }", "declared twice"),
])
def test_attacks_that_are_refused_with_a_reason(body, why):
    # (the attack as the loop's whole body: the tested loop's last statement leads to the test)
    src = KERNEL.replace("{ BODY  acc = acc * 31 + v; cnt++; }", "{ BODY }")
    reason = ModStepPass().why_not(unit(src.replace("BODY", body), SPEC))
    assert reason and why in reason, reason


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_a_name_shadowed_in_an_inner_loop_is_the_inner_loops(tmp_path):
    """``int t = v + c; for (int t = 0; ...) { if (t % s) continue; ... }``: the test is the inner loop's own (its
    counter), which it steps; the outer loop, whose t the inner one hides, is left (it read as v + c before)."""
    src = KERNEL.replace("{ BODY  acc = acc * 31 + v; cnt++; }",
                         "{ int t = v + c; for (int t = 0; t < J; t++) { if (t % s != 0) continue; acc = acc * 31 + t; cnt++; } }")
    out = ModStepPass().apply(unit(src, SPEC)).text
    assert "for (int v = 0; v < K; v++)" in out and "t = ptxf_mod_next(t, ptxf_mod_step(s), J)" in out
    report = run_both(src, [(6, 0, 2, 4), (6, 1, 3, 7), (3, 5, -2, 9)], tmp_path)
    assert report.split() == ["same"] * 3, report


@pytest.mark.parametrize("before, body", [
    ("int& r = c;", "if ((v + c) % 3 != 0) continue; r += 1;"),                    # a write through a reference
    ("int* p = &c;", "if ((v + c) % 3 != 0) continue; *p += 1;"),                  # ... through a pointer
    ("auto bump = [&] { c += 1; };", "if ((v + c) % 3 != 0) continue; bump();"),   # ... through a lambda's capture
    ("int n = 0;", "if ((v + c) % 3 != 0) continue;"),                             # (with the loop test below)
    ("int rows = s; int& lim = rows;", "if ((v + c) % lim != 0) continue; rows += 1;"),  # a reference's referent moves
    ("", "if ((v + c) % s != 0) continue; asm volatile(\"add.s32 %0, %0, 1;\" : \"+r\"(s));"),  # an asm output
])
def test_writes_the_loop_cannot_see_leave_it_alone(before, body):
    src = KERNEL.replace("    for (int v = 0; v < K; v++) { BODY", f"    {before}\n    for (int v = 0; v < K; v++) {{ {body}")
    if before == "int n = 0;":
        src = src.replace("v < K; v++)", "v < (n++, K); v++)")
    assert not ModStepPass().applies(unit(src, SPEC))


@pytest.mark.parametrize("header", ["for (int v(0); v < K; v++)", "for (int v{0}; v < K; v++)", "for (long long v = 0; v < K; v++)",
                                    "for (char v = 0; v < K; v++)", "for (int v = c; v < K; v++)"])
def test_counters_it_does_not_read_are_left(header):
    """Direct and brace initialisation (the rewrite had no ``=``), 64-bit and narrow counters (a step past their
    range), a start that is not a literal at least 0 (the clamp reads v >= 0)."""
    src = KERNEL.replace("for (int v = 0; v < K; v++)", header).replace("BODY", "if ((v + c) % 3 != 0) continue;")
    assert not ModStepPass().applies(unit(src, SPEC))


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_the_helpers_neither_overflow_nor_stall(tmp_path):
    """ptxf_mod_next clamps at the bound near INT_MAX (v += 7 wrapped and ran on); ptxf_mod_first finds the residue
    in 64 bits and gives INT_MAX where the first accepted value is past int; ptxf_mod_step of INT_MIN and 0 is 1."""
    prog = EMU + "\n".join(HELPERS.values()) + r"""
int main() {
    int ok = ptxf_mod_next(2147483640, 7, 2147483647) == 2147483647 && ptxf_mod_next(5, 7, 100) == 12
          && ptxf_mod_next(95, 7, 100) == 100 && ptxf_mod_step(-2147483647 - 1) == 1 && ptxf_mod_step(0) == 1
          && ptxf_mod_step(-3) == 3 && ptxf_mod_first(0, 2147483648LL + 5, 7) == (int)((2147483648LL + 5) % 7)
          && ptxf_mod_first(3, -1, 4) == 3 && ptxf_mod_first(4, -1, 4) == 7 && ptxf_mod_first(2147483600, 0, 1000) == 2147483647;
    std::printf(ok ? "ok\n" : "BAD\n");
    return !ok;
}
"""
    cpp, exe = tmp_path / "h.cpp", tmp_path / "h"
    cpp.write_text(prog)
    assert subprocess.run(["g++", "-std=c++17", "-O1", "-w", str(cpp), "-o", str(exe)]).returncode == 0
    assert subprocess.run([str(exe)], capture_output=True, text=True).stdout.strip() == "ok"


CONVT_ONE_TEST = """
#define STRIDE 2
extern "C" __global__ void k(int* y, int K, int c, int s, int J)
{
    int oh = c, ow = J, pad = 1, acc = 0, cnt = 0;
    for (int kh = 0; kh < K; kh++) {
        for (int kw = 0; kw < K; kw++) {
            int th = oh + pad - kh, tw = ow + pad - kw;
            if (th < 0 || tw < 0 || th % STRIDE != 0 || tw % STRIDE != 0) continue;
            acc = acc * 31 + kh * 7 + kw; cnt++;
        }
    }
    y[0] = acc; y[1] = cnt;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_two_loops_terms_in_one_test_are_dropped_in_one_edit(tmp_path):
    """kh's and kw's divisibility terms in one condition (the perfect nest): both loops stepped, both terms dropped in
    one edit (two overlapping edits raised, and the exception took every transform candidate with it)."""
    out = ModStepPass().apply(unit(CONVT_ONE_TEST, SPEC)).text
    assert "if ((th < 0) || (tw < 0)) continue;" in out and "% 2" not in out
    report = run_both(CONVT_ONE_TEST, [(3, oh, 0, ow) for oh in range(0, 6) for ow in range(0, 5)] + [(4, 7, 0, 2)], tmp_path)
    assert set(report.split()) == {"same"}, report


def test_a_pass_that_raises_leaves_the_other_passes_candidates(monkeypatch, caplog):
    """One pass's bug (its precondition held, its rewrite raised) is logged and read as not applying: the transform
    generator still proposes the other passes' candidates (an overlapping edit lost all of them)."""
    from ptxfactory.search.generators.transform import PASSES, TransformGenerator
    from test_modstep import CONVT, convt_spec
    from test_transform import make_ctx

    def broken(self, unit):
        raise ValueError("overlapping edits at byte 1")
    monkeypatch.setattr(ModStepPass, "apply", broken)
    assert any(p.name == "modstep" for p in PASSES)
    cands = TransformGenerator().propose(make_ctx(CONVT, convt_spec()))
    assert cands and not any("modstep" in c.description for c in cands)
    assert "transform pass modstep failed" in caplog.text
