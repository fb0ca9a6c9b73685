"""The launch gate's kernel (harness/launch_gate.py) compiles with NVRTC, as CuPy's RawKernel compiles it in the worker,
and its PTX spins on a volatile read of the ticket with a timeout on the global timer."""
from __future__ import annotations

import re

import pytest

from ptxfactory.harness.launch_gate import GATE_SOURCE


def test_the_gate_kernel_compiles_and_waits_on_a_volatile_ticket_with_a_timeout():
    nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    prog = nvrtc.createProgram(GATE_SOURCE, "gate.cu", [], [])
    try:
        nvrtc.compileProgram(prog, ["-arch=compute_90"])
        ptx = nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    assert ".entry ptxf_gate(" in ptx
    assert re.search(r"ld\.volatile\.(global\.)?u32", ptx), "the ticket must be re-read from memory each spin"
    assert "%globaltimer" in ptx and "nanosleep" in ptx
    assert re.search(r"atom\.(global\.)?add\.u32|red\.(global\.)?add\.u32", ptx), "a gate that timed out is counted"
