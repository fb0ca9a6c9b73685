"""Benchmark: the main job on examples/rmsnorm against the naive kernel, torch and the copy bandwidth.

Run on the GPU machine (``python3 bench/rmsnorm_main_job.py --out bench/results``). Writes
``rmsnorm-main-job-<date>.json`` and ``.md`` with the date, GPU, driver and library versions.
Speedups are ratios measured in the same run: each candidate is timed interleaved with the naive
kernel by the worker; torch's ``rms_norm`` is timed here with CUDA events, inputs rotated through
more than 3x L2, as a context anchor (not a gate).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import platform
import sys
from pathlib import Path

from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.protocol import JobSummary, Measured
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import optimise

EXAMPLE = Path(__file__).parents[1] / "examples" / "rmsnorm" / "rmsnorm.cu"


def torch_gbps(sizes: list[dict[str, int]], l2_bytes: int, reps: int = 50) -> dict[str, float]:
    """GB/s of ``torch.nn.functional.rms_norm`` (bf16, eps 1e-6) per size; {} when torch is missing."""
    try:
        import torch
    except ImportError:
        return {}
    out = {}
    for size in sizes:
        m, n = size["M"], size["N"]
        per_set = 2 * m * n * 2
        sets = max(1, math.ceil(3 * l2_bytes / per_set))
        xs = [torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for x in xs[:2]:
            torch.nn.functional.rms_norm(x, (n,), w, 1e-6)
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for i, (s, e) in enumerate(ev):
            s.record()
            torch.nn.functional.rms_norm(xs[i % sets], (n,), w, 1e-6)
            e.record()
        torch.cuda.synchronize()
        times = sorted(s.elapsed_time(e) * 1e3 for s, e in ev)
        out[f"{m}x{n}"] = (2 * m * n * 2 + 2 * n) / (times[len(times) // 2] * 1e3)
        del xs
    return out


async def run(store_path: Path):
    backend, store = GpuBackend(), await LessonStore.open(store_path)
    try:
        summary = await optimise(EXAMPLE, "rmsnorm", backend=backend, store=store)
    finally:
        await backend.close()
        await store.close()
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--store", type=Path, default=Path("/tmp/ptxfactory-bench.sqlite"))
    ap.add_argument("--report", type=Path, help="report.json of a job already run (e.g. by `ptxfactory optimise`): reuse it")
    args = ap.parse_args()
    summary = JobSummary.model_validate_json(args.report.read_text()) if args.report else asyncio.run(run(args.store))
    best = summary.row(summary.best_key)
    facts = summary.gpu
    versions = {"python": platform.python_version()}
    for mod in ("cupy", "torch", "pydantic"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            pass
    rows = []
    for r in summary.rows:
        res = r.result
        rows.append({
            "candidate": r.candidate.key, "generator": r.candidate.generator, "description": r.candidate.description,
            "outcome": res.outcome, "reason": r.reason,
            "speedup": res.speedup if isinstance(res, Measured) else None,
            "timings": [t.model_dump() for t in res.timings] if isinstance(res, Measured) else None,
        })
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": facts.model_dump() if facts else None, "versions": versions,
        "best": rows[[r.candidate.key for r in summary.rows].index(best.candidate.key)] if best else None,
        "torch_rms_norm_gbps": torch_gbps([t.size for t in best.result.timings] if best else [],
                                          facts.l2_bytes if facts else 60 << 20),
        "candidates": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"rmsnorm-main-job-{report['date'][:10]}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
    lines = [f"# Main job on examples/rmsnorm — {report['date']}", "",
             f"GPU: {facts.name if facts else '?'}, driver {facts.driver if facts else '?'}, "
             f"measured copy {facts.copy_gbps:.0f} GB/s, NVML peak {facts.peak_gbps:.0f} GB/s; versions {versions}", "",
             f"Candidates: {len(rows)}, verified: {sum(r['outcome'] == 'measured' for r in rows)}", ""]
    if best:
        lines += [f"Best: `{best.candidate.description}` — geomean speedup **{best.result.speedup:.2f}x** over the naive kernel (interleaved, same run)", "",
                  "| M×N | naive µs | best µs | speedup | best GB/s | % of copy | torch GB/s |", "|---|---:|---:|---:|---:|---:|---:|"]
        for t in best.result.timings:
            key = f"{t.size['M']}x{t.size['N']}"
            tg = report["torch_rms_norm_gbps"].get(key)
            lines.append(f"| {key} | {t.baseline_median_us:.1f} | {t.median_us:.1f} | {t.speedup:.2f} | {t.gbps:.0f} | {t.pct_of_copy:.0f}% | {tg:.0f} |" if tg else
                         f"| {key} | {t.baseline_median_us:.1f} | {t.median_us:.1f} | {t.speedup:.2f} | {t.gbps:.0f} | {t.pct_of_copy:.0f}% | — |")
    lines += ["", "| candidate | outcome | speedup / reason |", "|---|---|---|"]
    for r in rows:
        detail = f"{r['speedup']:.2f}x" if r["speedup"] else r["reason"][:120]
        lines.append(f"| {r['description']} | {r['outcome']} | {detail} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if best else 2


if __name__ == "__main__":
    sys.exit(main())
