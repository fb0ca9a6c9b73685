"""Profile (GPU machine, Nsight Compute): a family's proposals at chosen sizes, one launch each.

For each proposal of ``--generator`` (default rowwise) for ``examples/<example>`` whose description matches
``--select``, and each ``--size`` (``M=32768,N=65536``), one launch under ``ncu`` (harness/ncu.py: DRAM, memory and
SM throughput, achieved occupancy, L1/L2 hit rates, the top warp stall reasons), plus the registers and the launch's
dynamic shared memory. What the timings cannot say: why one design stays under the copy bandwidth at one size (the
evidence issue 13 asks for). Where the host refuses the counters, each line says so (nothing is assumed).

Usage: ``python3 bench/rowwise_profile.py --matrix --select 'cluster=8' --size M=32768,N=32768
--size M=32768,N=65536 --out $OUT/profile.md`` (``--matrix``: the proposals the matrix job sees, sized from this GPU's
facts as a job on it proposes them). ``--quack``: QuACK's ``rmsnorm_fwd`` at each size too, one launch under the same
counters (its kernel picked out by name: ``QUACK_KERNEL``), the baseline issue 13 measures against.
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
    facts = None
    try:
        from ptxfactory.harness.facts import read_facts
        facts = read_facts()  # (the GPU's: proposals sized from its SM count, as in a job on it)
    except Exception as exc:  # noqa: BLE001  (no GPU here: the proposals of a compile-only job)
        print(f"no GPU facts ({type(exc).__name__}: {exc}): proposing as a compile-only job", flush=True)
    _, cands = proposals(spec, (EXAMPLES / example / f"{example}.cu").read_text(), generator, select, limit, facts)
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


# QuACK's RMSNorm forward kernel (CuTe DSL names it after the class): its launch among the program's, by name
QUACK_KERNEL = "regex:(?i)rmsnorm"
QUACK_PROGRAM = """
import sys, torch
from quack.rmsnorm import rmsnorm_fwd
M, N = int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator().manual_seed(0)  # inputs made on the host: no kernel of torch's before QuACK's
x = torch.randn(M, N, generator=g).to(torch.bfloat16).cuda()
w = torch.randn(N, generator=g).to(torch.bfloat16).cuda()
rmsnorm_fwd(x, w, eps=1e-6)
torch.cuda.synchronize()
"""


def profile_quack(sizes: list[dict[str, int]], timeout_s: float = 240.0) -> list[dict]:
    """One row per size (``{"M": .., "N": ..}``): QuACK's ``rmsnorm_fwd`` (bf16, weight bf16) launched once under the
    counters of :mod:`ptxfactory.harness.ncu`; the reason instead where ncu, QuACK or the counters are missing."""
    import tempfile

    from ptxfactory.harness.ncu import find_ncu, not_found_reason, program_command, run_ncu

    exe, rows = find_ncu(), []
    for size in sizes:
        if exe is None:
            lines = [f"counters unavailable: {not_found_reason()}"]
        else:
            with tempfile.TemporaryDirectory(prefix="ptxf-ncu-quack-") as tmp:
                prog = Path(tmp) / "quack_once.py"
                prog.write_text(QUACK_PROGRAM)
                args = program_command(exe, QUACK_KERNEL, [sys.executable, str(prog), str(size["M"]), str(size["N"])],
                                       mangled=False)
                lines = run_ncu(args, "", timeout_s, None, tmp).lines()
        rows.append({"description": "QuACK rmsnorm_fwd", "size": size, "lines": lines})
        print(f"QuACK rmsnorm_fwd at {size}: " + "; ".join(lines), flush=True)
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
    ap.add_argument("--quack", action="store_true", help="QuACK's rmsnorm_fwd at each size too (installed: quack-kernels)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    propose_at = None
    if a.matrix:
        from rmsnorm_matrix import MATRIX
        propose_at = [{"M": m, "N": n} for m, n in MATRIX]
    rows = (profile_quack(a.size) if a.quack else []) + profile(a.example, a.generator, a.select, a.size, a.limit, propose_at)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
