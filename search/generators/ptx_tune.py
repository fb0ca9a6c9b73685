"""``ptx_tune``: what a kernel written in PTX may change without touching its text: ptxas's options and the launch.

- ``-O0``..``-O2`` (ptxas's default is ``-O3``), ``-maxrregcount=32/64/128``, ``--def-load-cache=ca/cg/cs``
  (the default cache operator of the loads that have none);
- the block size (64, 128, 256, 512, 1024 threads), when the spec's launch policy is ``free``, the launch is
  1-D with the grid ``cdiv(EXPR, B)`` over the block size ``B``, and the entry reads ``%ntid.x``, declares no
  ``.shared`` memory and no ``.reqntid``/``.maxntid``: the grid is recomputed as ``cdiv(EXPR, new block)``.

Proposes nothing for a CUDA kernel (``tune`` does that). ``params``: ``O``, ``maxrreg``, ``dlcm``, ``block``.
"""
from __future__ import annotations

import re

from ptxfactory.harness.ptx import DRIVER_JIT, blank_comments, ptx_route
from ptxfactory.protocol import Candidate, KernelSpec, LaunchConfig

from ..base import GenContext

O_LEVELS = (2, 1, 0)
MAXRREG = (32, 64, 128)
LOAD_CACHE = ("ca", "cg", "cs")
BLOCKS = (64, 128, 256, 512, 1024)


def free_block_grid(spec: KernelSpec, launch: LaunchConfig, entry_text: str, source: str) -> str | None:
    """The grid expression's numerator (``EXPR`` of ``cdiv(EXPR, B)``) when the block size may change, else None
    (see the module's docstring for the conditions)."""
    if spec.launch.policy != "free" or len(launch.block) != 1 or len(launch.grid) != 1:
        return None
    code = blank_comments(entry_text)
    if "%ntid.x" not in code or re.search(r"\.(reqntid|maxntid)\b", code) or re.search(r"\.shared\b", blank_comments(source)):
        return None
    block = launch.block[0]
    m = re.fullmatch(r"\s*cdiv\((.+),\s*(\d+)\s*\)\s*", str(launch.grid[0]))
    if not m or int(m.group(2)) != int(block):
        return None
    return m.group(1).strip()


class PtxTuneGenerator:
    """ptxas options and block sizes for a PTX entry (see the module's docstring)."""

    name = "ptx_tune"

    def propose(self, ctx: GenContext) -> list[Candidate]:
        """Each knob alone, in a fixed order (the ptxas options only where ptxas runs); [] for a CUDA kernel."""
        if getattr(ctx.kernel, "language", "cuda") != "ptx":
            return []
        parent = ctx.original
        base = [o for o in parent.options if not re.match(r"-O\d|--?maxrregcount=|--def-load-cache=", o)]
        variants: list[tuple[list[str], LaunchConfig, str, dict]] = []
        options_apply = ptx_route().compiler != DRIVER_JIT  # without ptxas the driver JIT-compiles, and takes no options
        for level in (O_LEVELS if options_apply else ()):
            variants.append((base + [f"-O{level}"], parent.launch, f"ptxas -O{level}", {"O": level}))
        for regs in (MAXRREG if options_apply else ()):
            variants.append((base + [f"-maxrregcount={regs}"], parent.launch, f"ptxas -maxrregcount={regs}", {"maxrreg": regs}))
        for cop in (LOAD_CACHE if options_apply else ()):
            variants.append((base + [f"--def-load-cache={cop}"], parent.launch, f"ptxas --def-load-cache={cop}", {"dlcm": cop}))
        numerator = free_block_grid(ctx.spec, parent.launch, ctx.kernel.text, ctx.source)
        if numerator is not None:
            for block in BLOCKS:
                launch = LaunchConfig(grid=[f"cdiv({numerator}, {block})"], block=[block], shared_mem=parent.launch.shared_mem)
                variants.append((list(parent.options), launch, f"{block} threads per block", {"block": block}))
        out, keys = [], {parent.key}
        for options, launch, description, params in variants:
            cand = Candidate(kernel_name=parent.kernel_name, source=ctx.source, kernel_text=parent.kernel_text, launch=launch,
                             options=options, generator="ptx_tune", description=description, params=params, parent=parent.key)
            if cand.key not in keys:
                keys.add(cand.key)
                out.append(cand)
        return out
