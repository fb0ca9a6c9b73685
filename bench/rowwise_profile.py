"""Profile (GPU machine, Nsight Compute): a family's proposals at chosen sizes, one launch each.

For each proposal of ``--generator`` (default rowwise) for ``examples/<example>`` whose description matches
``--select``, and each ``--size`` (``M=32768,N=65536``), one launch under ``ncu`` (harness/ncu.py: DRAM, memory and
SM throughput, achieved occupancy, L1/L2 hit rates, the top warp stall reasons), plus the registers and the launch's
dynamic shared memory. What the timings cannot say: why one design stays under the copy bandwidth at one size (the
evidence issue 13 asks for). Where the host refuses the counters, each line says so (nothing is assumed).

Usage: ``python3 bench/rowwise_profile.py --matrix --select 'cluster=8' --size M=32768,N=32768
--size M=32768,N=65536 --out $OUT/profile.md`` (``--matrix``: the proposals the matrix job sees)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rowwise_sweep import EXAMPLES, proposals  # noqa: E402


def parse_size(text: str) -> dict[str, int]:
    """``"M=32768,N=65536"`` -> ``{"M": 32768, "N": 65536}``. Raises ValueError for another form."""
    out = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.strip().isidentifier() or not value.strip().isdigit():
            raise ValueError(f"--size {text!r}: expected NAME=INT[,NAME=INT...]")
        out[name.strip()] = int(value)
    return out


def profile(example: str, generator: str, select: str, sizes: list[dict[str, int]], limit: int,
            propose_at: list[dict[str, int]] | None = None) -> list[dict]:
    """One row per (proposal, size): description, size, registers, dynamic shared memory (bytes), counter lines.
    ``propose_at``: the bench sizes the generator sizes its proposals for (default ``sizes``)."""
    from ptxfactory.harness.compile import CompileFailed, compile_candidate
    from ptxfactory.harness.ncu import find_ncu, profile_launch
    from ptxfactory.protocol import evaluate, load_spec

    spec_path = EXAMPLES / example / f"{example}.cu.toml"
    spec = load_spec(spec_path).kernels[example]
    spec = spec.model_copy(update={"bench": spec.bench.model_copy(update={"sizes": propose_at or sizes})})
    _, cands = proposals(spec, (EXAMPLES / example / f"{example}.cu").read_text(), generator, select, limit)
    exe, rows = find_ncu(), []
    for cand in cands:
        compiled = compile_candidate(cand, spec.arch, spec.check.fast_math)
        if isinstance(compiled, CompileFailed):
            rows.append({"description": cand.description, "size": None, "lines": [f"compile failed: {compiled.log[:200]}"]})
            continue
        for size in sizes:
            counters = profile_launch(exe, spec, compiled.cubin, compiled.lowered_name, cand.launch.model_dump(), size)
            rows.append({"description": cand.description, "size": size,
                         "registers": compiled.resources.registers if compiled.resources else None,
                         "smem": int(evaluate(cand.launch.shared_mem, size)), "lines": counters.lines(),
                         "stalls": counters.stalls() if counters.ok else []})
            print(f"{cand.description} at {size}: " + "; ".join(rows[-1]["lines"]), flush=True)
    return rows


def render(rows: list[dict]) -> str:
    """Markdown: a section per proposal and size with its counter lines."""
    out = ["# Profiles (Nsight Compute, one launch each)", ""]
    for r in rows:
        size = "x".join(str(v) for v in r["size"].values()) if r["size"] else "—"
        out += [f"## {r['description']} at {size}", "",
                f"- registers {r.get('registers', '—')}, dynamic shared memory {r.get('smem', '—')} B"]
        out += [f"- {line}" for line in r["lines"]] + [""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="rmsnorm")
    ap.add_argument("--generator", default="rowwise")
    ap.add_argument("--select", default=".")
    ap.add_argument("--size", action="append", type=parse_size, required=True)
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--matrix", action="store_true", help="proposals sized for QuACK's RMSNorm matrix (as the matrix job's)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    propose_at = None
    if a.matrix:
        from rmsnorm_matrix import MATRIX
        propose_at = [{"M": m, "N": n} for m, n in MATRIX]
    rows = profile(a.example, a.generator, a.select, a.size, a.limit, propose_at)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
