"""harness/sass.py and the cubin NVRTC gives (harness/compile.py), on the CPU.

The cubin: every byte of it, as long as its ELF headers say (CuPy's ``getCUBIN`` drops the last one). The summary: a
hand-written nvdisasm listing and a cuobjdump one (a loop of 128-bit loads, FFMAs and a shuffle; another function
after it), then the real disassembler on an NVRTC-compiled kernel where one is installed.
"""
from __future__ import annotations

import struct

import pytest

import ptxfactory.harness.cuda_paths as cuda_paths
from ptxfactory.harness import sass
from ptxfactory.harness.compile import compile_candidate
from ptxfactory.protocol import Candidate, LaunchConfig

KERNEL = r"""
extern "C" __global__ void axpy4(const float4* __restrict__ x, float4* __restrict__ y, float a, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float4 v = x[i], w = y[i];
        w.x = fmaf(a, v.x, w.x); w.y = fmaf(a, v.y, w.y); w.z = fmaf(a, v.z, w.z); w.w = fmaf(a, v.w, w.w);
        y[i] = w;
    }
}
"""

NVDISASM = """\t.target\tsm_90a
//--------------------- .text.axpy4 --------------------------
\t.section\t.text.axpy4,"ax",@progbits
axpy4:
.text.axpy4:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
.L_x_0:
        /*0020*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*0030*/                   LDG.E.128 R8, desc[UR4][R12.64] ;
        /*0040*/                   FFMA R8, R4, c[0x0][0x230], R8 ;
        /*0050*/                   FFMA R9, R5, c[0x0][0x230], R9 ;
        /*0060*/                   SHFL.BFLY PT, R3, R8, 0x1, 0x1f ;
        /*0070*/                   STG.E.128 desc[UR4][R12.64], R8 ;
        /*0080*/              @!P0 BRA `(.L_x_0) ;
        /*0090*/                   LDL.64 R2, [R1] ;
        /*00a0*/                   EXIT ;
.L_x_1:
        /*00b0*/                   BRA `(.L_x_1);
//--------------------- .text.other --------------------------
\t.section\t.text.other,"ax",@progbits
other:
        /*0000*/                   LDG.E.U8 R4, desc[UR4][R2.64] ;
        /*0010*/                   EXIT ;
"""

CUOBJDUMP = """
\tcode for sm_90a
\t\tFunction : axpy4
\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                     /* 0x00000a00ff017b82 */
        /*0010*/                   LDG.E.64 R4, desc[UR4][R2.64] ;            /* 0x0000000402047981 */
        /*0020*/                   HFMA2 R4, R4, R5, -RZ ;                    /* 0x0000000504047231 */
        /*0030*/               @P0 BRA 0x10 ;                                 /* 0x0000000000000947 */
        /*0040*/                   EXIT ;                                     /* 0x000000000000794d */
\t\t..........
\t\tFunction : other
        /*0000*/                   STG.E.U16 desc[UR4][R2.64], R4 ;           /* 0x0000000402007986 */
        /*0010*/                   EXIT ;                                     /* 0x000000000000794d */
"""


def _candidate() -> Candidate:
    return Candidate(kernel_name="axpy4", source=KERNEL, kernel_text=KERNEL,
                     launch=LaunchConfig(grid=["(n + 255) / 256"], block=[256]), description="axpy4")


def _elf_extent(cubin: bytes) -> int:
    """Where a 64-bit ELF file ends by its headers: the end of its program and section header tables and of every
    section that takes room in the file."""
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    for i in range(shnum):
        kind, = struct.unpack_from("<I", cubin, shoff + i * shentsize + 4)
        offset, size = struct.unpack_from("<QQ", cubin, shoff + i * shentsize + 0x18)
        if kind != 8:  # SHT_NOBITS
            end = max(end, offset + size)
    return end


def test_the_cubin_is_as_long_as_its_elf_headers_say():
    compiled = compile_candidate(_candidate(), "sm_90a")
    cubin = compiled.cubin
    assert cubin[:4] == b"\x7fELF"
    assert len(cubin) == _elf_extent(cubin)


def test_cupys_getcubin_is_the_one_byte_short_cause():
    """The cause of the short cubin, kept in view: CuPy's getCUBIN is the same bytes less the last one."""
    from cupy_backends.cuda.libs import nvrtc

    from ptxfactory.harness.compile import nvrtc_cubin

    prog = nvrtc.createProgram(KERNEL, "axpy4.cu", [], [])
    try:
        nvrtc.compileProgram(prog, ["-arch=sm_90a"])
        whole, cupys = nvrtc_cubin(prog), nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    assert len(whole) == _elf_extent(whole) == len(cupys) + 1 and whole[:-1] == cupys


def test_no_cubin_for_a_virtual_arch():
    from cupy_backends.cuda.libs import nvrtc

    from ptxfactory.harness.compile import nvrtc_cubin

    prog = nvrtc.createProgram(KERNEL, "axpy4.cu", [], [])
    try:
        nvrtc.compileProgram(prog, ["-arch=compute_90a"])
        with pytest.raises(ValueError, match="no cubin"):
            nvrtc_cubin(prog)
    finally:
        nvrtc.destroyProgram(prog)


def test_widths_of_loads_and_stores():
    assert sass.width_bits("LDG.E.128.CONSTANT") == 128
    assert sass.width_bits("LDG.E.U16") == 16
    assert sass.width_bits("STG.E.S8") == 8
    assert sass.width_bits("LDS.64") == 64
    assert sass.width_bits("LDG.E") == 32
    assert sass.opcode("        /*0080*/              @!P0 BRA `(.L_x_0) ;") == "BRA"
    assert sass.opcode("        /*0020*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;") == "LDG.E.128.CONSTANT"
    assert sass.opcode(".L_x_0:") is None and sass.opcode("// a comment") is None


def test_summary_of_an_nvdisasm_listing_reads_the_kernels_function_and_its_loop():
    summary = sass.summarise(NVDISASM, "axpy4")
    assert summary.function == "axpy4"
    whole = summary.whole
    assert whole.counts["global loads"] == 3 - 1  # the other function's 8-bit load is not counted
    assert whole.widths["global loads"] == {128: 2}
    assert whole.counts["global stores"] == 1 and whole.widths["global stores"] == {128: 1}
    assert whole.counts["FFMA"] == 2 and whole.counts["shuffles"] == 1
    assert whole.counts["local loads"] == 1 and whole.widths["local loads"] == {64: 1}
    [(label, loop)] = summary.loops  # the spin after EXIT is no loop
    assert label == ".L_x_0" and loop.instructions == 7 and "local loads" not in loop.counts
    text = summary.text()
    assert "innermost loop .L_x_0: 7 instructions: 2 global loads (128-bit x2), 1 global stores (128-bit x1)" in text
    assert "LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;" in text and "/*0020*/" not in text


def test_summary_of_a_cuobjdump_listing():
    summary = sass.summarise(CUOBJDUMP, "axpy4")
    assert summary.function == "axpy4"
    assert summary.whole.counts["global loads"] == 1 and summary.whole.widths["global loads"] == {64: 1}
    assert "global stores" not in summary.whole.counts  # the other function's
    assert summary.whole.counts["half FMA"] == 1
    [(label, loop)] = summary.loops
    assert label == "0x10" and loop.counts["branches"] == 1


def test_summary_without_the_function_reads_the_whole_listing():
    summary = sass.summarise(NVDISASM, "missing")
    assert summary.function is None and summary.whole.widths["global loads"] == {128: 2, 8: 1}


def test_summary_text_is_bounded():
    body = "".join(f"        /*{i:04x}*/                   FFMA R{i % 200}, R1, R2, R3 ;\n" for i in range(16, 4000))
    listing = f".L_x_0:\n        /*0000*/ LDG.E R1, desc[UR4][R2.64] ;\n{body}        /*ffff*/ @P0 BRA `(.L_x_0) ;\n"
    for i in range(12):  # more innermost loops than are listed one by one
        listing += f".L_x_{i + 1}:\n        /*1{i:03x}0*/ NOP ;\n        /*1{i:03x}1*/ NOP ;\n        /*1{i:03x}2*/ @P0 BRA `(.L_x_{i + 1}) ;\n"
    summary = sass.summarise(listing)
    assert len(summary.loops) == 13
    text = summary.text()
    assert len(text) <= sass.MAX_TEXT
    assert f"... and {13 - sass.MAX_LOOPS} more innermost loops" in text
    assert len(summary.loop_text.splitlines()) == sass.MAX_LOOP_LINES + 1


def test_no_disassembler_is_a_reason(monkeypatch):
    monkeypatch.setattr(cuda_paths, "tool_path", lambda name: None)
    with pytest.raises(sass.SassError, match="no nvdisasm or cuobjdump found"):
        sass.disassemble(b"\x7fELF")
    text = sass.candidate_summary(_candidate(), "sm_90a")
    assert text.startswith("SASS unavailable: no nvdisasm or cuobjdump found")


def test_a_candidate_that_does_not_compile_is_a_reason():
    bad = _candidate().model_copy(update={"source": KERNEL.replace("fmaf(a, v.x, w.x)", "fmaf(a, v.x)")})
    assert sass.candidate_summary(bad, "sm_90a").startswith("SASS unavailable: axpy4 does not compile:")


@pytest.mark.skipif(cuda_paths.tool_path("nvdisasm") is None and cuda_paths.tool_path("cuobjdump") is None,
                    reason="no nvdisasm or cuobjdump here")
def test_summary_of_a_real_kernel():
    text = sass.candidate_summary(_candidate(), "sm_90a")
    assert text.startswith("- whole kernel: ")
    assert "innermost loop" in text and "global loads (128-bit" in text and "global stores (128-bit x1)" in text
    assert "FFMA" in text and len(text) <= sass.MAX_TEXT + 200


def test_show_compiles_in_the_compile_pool(monkeypatch):
    """``ptxfactory show``'s compilations (the cubin for SASS, the PTX) go through the compile pool, whose workers are
    processes in the daemon (never NVRTC on a daemon thread)."""
    import ptxfactory.harness.compile_pool as compile_pool
    from ptxfactory.daemon import show

    ran = []

    class Recording(compile_pool.CompilePool):
        def run_blocking(self, fn, *args):
            ran.append(fn.__name__)
            return super().run_blocking(fn, *args)

    pool = Recording(0)
    monkeypatch.setattr(compile_pool, "_SHARED", pool)
    try:
        cubin = show.cubin_of(_candidate(), "sm_90a")
        ptx = show.ptx_of(_candidate(), "sm_90a")
        with pytest.raises(show.ShowError, match="does not compile"):
            show.cubin_of(_candidate().model_copy(update={"source": "not C++"}), "sm_90a")
    finally:
        pool.close()
    assert ran == ["compiled_for", "kernel_ptx_of", "compiled_for"]
    assert len(cubin) == _elf_extent(cubin) and ".visible .entry axpy4(" in ptx
