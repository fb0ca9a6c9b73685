"""Benchmark (GPU machine): every proposal of one family for an example, verified and timed at each bench size.

Where the main job keeps one best candidate for all bench sizes together, this sweep shows each proposal's % of
the measured copy bandwidth at each size: which design wins where (registers or a staged cache, a cluster or not,
how many threads a row), the evidence a generator's space is judged by. Every candidate goes through the worker
as in a job (verified at the spec's check sizes plus one three-row size at each bench row length, held-out sizes,
stress variants; timed A/B against the original, rotating inputs past 3x L2).

Usage (GPU machine)::

    python3 bench/rowwise_sweep.py --example rmsnorm --matrix --select 'stage|cluster' --out $OUT/sweep

``--matrix``: bench sizes set to QuACK's 11-shape matrix (bench/rmsnorm_matrix.py: MATRIX). Writes ``<out>.json``
(every result as the worker returned it) and ``<out>.md`` (a table: candidate x size, % of copy; the best per size).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rmsnorm_matrix  # noqa: E402  (matrix_spec, MATRIX)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _spec_text(example: str, matrix: bool, rows: tuple[int, ...] = ()) -> str:
    """The example's spec text; with ``matrix`` its bench sizes QuACK's matrix, only the shapes of row lengths ``rows``
    where given (the proposals are the same while the longest row is among them: they are sized from it)."""
    text = (EXAMPLES / example / f"{example}.cu.toml").read_text()
    shapes = tuple(s for s in rmsnorm_matrix.MATRIX if not rows or s[1] in rows)
    return rmsnorm_matrix.matrix_spec(text, kernel=example, matrix=shapes) if matrix else text


def proposals(spec, source: str, generator: str, select: str, limit: int, facts=None):
    """``(original, candidates)``: the original candidate of ``source``'s kernel ``spec.name`` and the proposals of
    ``generator`` for it whose description matches the regex ``select``, at most ``limit``, in proposal order;
    ``facts`` (protocol GpuFacts): the GPU's, as a job on it proposes (the configurations sized from its SM count)."""
    from ptxfactory.harness.source import find_kernel
    from ptxfactory.search.base import GenContext
    from ptxfactory.search.generators import load
    from ptxfactory.search.strategy import original_candidate

    original = original_candidate(spec, source)
    ctx = GenContext(spec=spec, source=source, kernel=find_kernel(source, spec.name), original=original, facts=facts)
    return original, [c for c in load(generator).propose(ctx) if re.search(select, c.description)][:limit]


async def sweep(example: str, generator: str, select: str, matrix: bool, limit: int, work: Path,
                rows: tuple[int, ...] = ()) -> dict:
    """Proposals of ``generator`` for ``examples/<example>`` whose description matches the regex ``select`` (at most
    ``limit``), each evaluated by a GPU worker. Returns ``{"sizes": [...], "rows": [{description, outcome, pct, ...}]}``.
    Raises RuntimeError when the original does not compile."""
    from ptxfactory.harness.compile import CompileFailed, compile_candidate
    from ptxfactory.harness.gpu_backend import GpuBackend
    from ptxfactory.harness.plan import make_plan
    from ptxfactory.harness.reference import python_reference
    from ptxfactory.protocol import Measured, load_spec

    for f in (EXAMPLES / example).iterdir():
        if f.is_file():
            shutil.copy(f, work / f.name)
    spec_path = work / f"{example}.cu.toml"
    spec_path.write_text(_spec_text(example, matrix, rows))
    spec = load_spec(spec_path).kernels[example]
    backend = GpuBackend()
    rows = []
    try:
        original, cands = proposals(spec, (work / f"{example}.cu").read_text(), generator, select, limit,
                                    facts=await backend.facts())
        base = compile_candidate(original, spec.arch, spec.check.fast_math)
        if isinstance(base, CompileFailed):
            raise RuntimeError(f"the original does not compile: {base.log[:400]}")
        plan = make_plan(spec, secret=11, reference=python_reference(spec, spec_path)).model_copy(update={"timeout_s": 300.0})
        for c in cands:
            compiled = compile_candidate(c, spec.arch, spec.check.fast_math)
            row = {"description": c.description, "params": c.params, "launch": c.launch.model_dump()}
            if isinstance(compiled, CompileFailed):
                rows.append({**row, "outcome": "compile_failed", "reason": compiled.log[:300]})
                continue
            r = await backend.evaluate(spec, base, compiled, plan)
            row.update(outcome=r.outcome, reason=getattr(r, "reason", ""), registers=compiled.resources.registers
                       if compiled.resources else None)
            if isinstance(r, Measured):
                row.update(speedup=r.speedup, pct=[t.pct_of_copy for t in r.timings],
                           us=[t.median_us for t in r.timings])
            rows.append(row)
            print(f"{c.description}: {row['outcome']} {[round(p) for p in row.get('pct', [])]} {row['reason'][:200]}", flush=True)
    finally:
        await backend.close()
    return {"sizes": [dict(s) for s in spec.bench.sizes], "rows": rows}


def render(doc: dict) -> str:
    """The sweep's Markdown: one line per candidate (% of copy at each bench size), then the best per size."""
    sizes = ["x".join(str(v) for v in s.values()) for s in doc["sizes"]]
    lines = [f"# {doc['example']}: {doc['generator']} proposals, {doc['date']}", "", f"- command: `{doc['command']}`", "",
             "| candidate | regs | outcome | " + " | ".join(sizes) + " |", "|---|---:|---|" + "---:|" * len(sizes)]
    for r in doc["rows"]:
        cells = [f"{p:.0f}" for p in r.get("pct", [])] or ["—"] * len(sizes)
        lines.append(f"| {r['description']} | {r.get('registers', '—')} | {r['outcome']} | " + " | ".join(cells) + " |")
    measured = [r for r in doc["rows"] if r.get("pct")]
    if measured:
        lines += ["", "| size | best % of copy | candidate |", "|---|---:|---|"]
        for i, s in enumerate(sizes):
            best = max(measured, key=lambda r: r["pct"][i])
            lines.append(f"| {s} | {best['pct'][i]:.0f} | {best['description']} |")
    failed = [r for r in doc["rows"] if r["outcome"] != "measured"]
    if failed:
        lines += ["", "Not measured:", ""] + [f"- {r['description']}: {r['outcome']}: {r.get('reason', '')[:300]}" for r in failed]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="rmsnorm")
    ap.add_argument("--generator", default="rowwise")
    ap.add_argument("--select", default=".", help="regex over the candidates' descriptions")
    ap.add_argument("--limit", type=int, default=64)
    ap.add_argument("--matrix", action="store_true", help="bench sizes: QuACK's RMSNorm matrix")
    ap.add_argument("--rows", default="", help="with --matrix: only its shapes of these row lengths (N1,N2,...)")
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        doc = asyncio.run(sweep(a.example, a.generator, a.select, a.matrix, a.limit, Path(tmp),
                                tuple(int(n) for n in a.rows.split(",") if n.strip())))
    doc.update(example=a.example, generator=a.generator, date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               command="python3 bench/rowwise_sweep.py " + " ".join(sys.argv[1:] if argv is None else argv))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    a.out.with_suffix(".md").write_text(render(doc))
    print(render(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
