"""Benchmark: every example through the search, cold and warm; speedups, roofline, throughput, self-improvement.

Run on the GPU machine (after ``source .ci/device-setup.sh``)::

    python3 bench/self_improvement.py --out bench/results [--examples softmax gemv ...] [--max-candidates 40]

1. **Cold**: each example's job with an empty lesson store (``use_lessons=False``, a fresh store).
2. **Warm, leave one out**: each example again, with a lesson store holding the cold experiments of
   every *other* example. A candidate the cold run already evaluated (same key: same normalised
   source, options and launch) takes its cold result instead of running again, exactly as a resumed
   job does; new candidates run on the GPU. The two runs differ only in the order the search takes.
3. Per example: the best verified speedup over the naive kernel (timed interleaved with it in the
   same run), its fraction of the memory roofline at every bench size (bytes moved over the
   measured device-to-device copy bandwidth, i.e. ``pct_of_copy``), and for each run the number of
   candidates evaluated (not counting the original kernel) until the search first reached 95% of the best
   speedup found by either run. Throughput of the cold runs: verified-and-timed candidates per
   minute of wall time, and the fraction of the job's wall time the GPU worker spent evaluating.

Writes ``self-improvement-<date>.json`` (every row of every job) and ``.md`` (the tables) to ``--out``.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import platform
import shutil
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.protocol import JobSummary, Measured
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import optimise

ROOT = Path(__file__).resolve().parents[1]
REACH = 0.95


def candidates_to_reach(summary: JobSummary, target: float) -> int | None:
    """How many candidates the search evaluated (the original kernel, the reference, not counted) until
    one was verified with speedup >= ``target``, that one included. None: never reached."""
    generated = [row for row in summary.rows if row.key != summary.baseline_key]
    for i, row in enumerate(generated, 1):
        if isinstance(row.result, Measured) and row.result.speedup >= target:
            return i
    return None


def best_row(summary: JobSummary):
    return summary.row(summary.best_key)


async def leave_one_out_store(all_cold: Path, path: Path, kernel: str) -> LessonStore:
    """A store holding every cold experiment except those of ``kernel``'s job."""
    shutil.copy(all_cold, path)
    store = await LessonStore.open(path)
    await store._db.execute("DELETE FROM experiments WHERE kernel = ?", (kernel,))
    await store._db.commit()
    return store


async def run(args) -> dict:
    if args.backend == "gpu":
        backend = GpuBackend()
    elif args.backend == "replay":
        backend = ReplayBackend(json.loads(args.replay_from.read_text()))
    else:  # a dry run of this script on a machine without a GPU: nothing is verified, no lesson counts
        from ptxfactory.harness.simulated import SimulatedDevice
        backend = SimulatedDevice(0)
    work = Path(tempfile.mkdtemp(prefix="ptxf-bench-"))
    names = args.examples or sorted(p.name for p in (ROOT / "examples").iterdir() if p.is_dir())
    out: dict = {"examples": {}, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                 "versions": {"python": platform.python_version(), **{p: _version(p) for p in ("cupy", "pydantic", "ptxfactory")}}}
    try:
        all_cold = work / "cold-all.sqlite"
        store = await LessonStore.open(all_cold)
        cold: dict[str, JobSummary] = {}
        for name in names:
            t = time.monotonic()
            cold[name] = await optimise(ROOT / "examples" / name / f"{name}.cu", name, backend=backend, store=store,
                                        use_lessons=False, max_candidates=args.max_candidates, patience=args.patience,
                                        max_seconds=args.max_seconds)
            out["examples"][name] = {"cold": cold[name].model_dump(mode="json")}
            _save_raw(args, out)
            print(f"cold {name}: {len(cold[name].rows)} candidates, {cold[name].message} ({time.monotonic() - t:.0f} s)", flush=True)
        await store.close()
        warm: dict[str, JobSummary] = {}
        for name in names:
            store = await leave_one_out_store(all_cold, work / f"warm-{name}.sqlite", name)
            known = {r.key: r.result for r in cold[name].rows}
            t = time.monotonic()
            try:
                warm[name] = await optimise(ROOT / "examples" / name / f"{name}.cu", name, backend=backend, store=store,
                                            max_candidates=args.max_candidates, patience=args.patience, known=known,
                                            job_id=f"warm-{name}", max_seconds=args.max_seconds)
            finally:
                await store.close()
            fresh = sum(r.key not in known for r in warm[name].rows)
            print(f"warm {name}: {len(warm[name].rows)} candidates ({fresh} new), {warm[name].message} "
                  f"({time.monotonic() - t:.0f} s)", flush=True)
            out["examples"][name]["warm"] = warm[name].model_dump(mode="json")
            out["gpu"] = cold[name].gpu.model_dump() if cold[name].gpu else None
            _save_raw(args, out)
    finally:
        await backend.close()
        shutil.rmtree(work, ignore_errors=True)
    return out


class ReplayBackend:
    """Answers each candidate with the result a GPU run recorded for its key (``self-improvement-raw.json``):
    the search's choices replayed without a GPU, kernel_tuner style. A candidate the recording never
    evaluated is answered ``Rejected(check="unrecorded")`` (counted against the search that picked it)."""

    def __init__(self, raw: dict):
        from pydantic import TypeAdapter

        from ptxfactory.protocol import EvalResult, GpuFacts

        adapter = TypeAdapter(EvalResult)
        self.results = {row["result"]["candidate_key"]: adapter.validate_python(row["result"])
                        for runs in raw["examples"].values() for job in runs.values() for row in job["rows"]}
        self._facts = GpuFacts.model_validate({**raw["gpu"], "name": raw["gpu"]["name"] + " (replayed)"})
        self.unrecorded = 0

    async def facts(self):
        return self._facts

    async def evaluate(self, spec, baseline, candidate, plan):
        from ptxfactory.protocol import Rejected

        key = candidate.candidate.key
        if key in self.results:
            return self.results[key]
        self.unrecorded += 1
        return Rejected(candidate_key=key, check="unrecorded", reason="not evaluated in the recorded run")

    async def close(self):
        return None


def _save_raw(args, data: dict) -> None:
    """Every finished job so far, rewritten after each one (a run cut short keeps what it measured)."""
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "self-improvement-raw.json").write_text(json.dumps(data))


def tables(data: dict, args) -> tuple[str, dict]:
    rows, si, thr = [], [], []
    metrics: dict = {}
    for name, runs in data["examples"].items():
        if "warm" not in runs:
            continue
        cold, warm = JobSummary.model_validate(runs["cold"]), JobSummary.model_validate(runs["warm"])
        bests = [b for b in (best_row(cold), best_row(warm)) if b is not None]
        best = max(bests, key=lambda r: r.result.speedup, default=None)
        speedup = best.result.speedup if best else 1.0
        timings = best.result.timings if best else []
        pcts = [t.pct_of_copy for t in timings]
        orig = cold.row(cold.baseline_key)
        orig_pcts = [t.pct_of_copy for t in orig.result.timings] if isinstance(orig.result, Measured) else []
        # the measure: 95% of the run's own final best; and the stricter one: of the best either run found
        n_cold = candidates_to_reach(cold, REACH * _best_speedup(cold))
        n_warm = candidates_to_reach(warm, REACH * _best_speedup(warm))
        c_cold, c_warm = candidates_to_reach(cold, REACH * speedup), candidates_to_reach(warm, REACH * speedup)
        measured = sum(isinstance(r.result, Measured) for r in cold.rows)
        busy = (cold.gpu_busy_s or 0) / cold.wall_s if cold.wall_s else None
        metrics[name] = {"speedup": speedup, "best": best.candidate.description if best else None,
                         "pct_of_copy": pcts, "original_pct_of_copy": orig_pcts,
                         "cold_to_95": n_cold, "warm_to_95": n_warm, "cold_to_95_common": c_cold, "warm_to_95_common": c_warm, "cold_candidates": len(cold.rows),  # the original + the search's candidates
                         "warm_candidates": len(warm.rows), "measured_per_min": measured / (cold.wall_s / 60),
                         "busy_fraction": busy, "cold_stop": cold.stop_reason, "warm_stop": warm.stop_reason,
                         "kernel_class": cold.kernel_class}
        per_size = ", ".join(f"{'x'.join(str(v) for v in t.size.values())}: {t.pct_of_copy:.0f}%" for t in timings)
        rows.append(f"| {name} | {best.candidate.description if best else 'none faster'} | {speedup:.2f}x | "
                    f"{min(orig_pcts, default=0):.0f}–{max(orig_pcts, default=0):.0f}% | "
                    f"{min(pcts, default=0):.0f}–{max(pcts, default=0):.0f}% | {_gmean(pcts):.0f}% | {per_size} |")
        si.append(f"| {name} | {cold.kernel_class} | {_n(n_cold)} of {len(cold.rows) - 1} | {_n(n_warm)} of {len(warm.rows) - 1} | "
                  f"{_n(c_cold)} | {_n(c_warm)} | {_reacher(cold, n_cold)} | {_reacher(warm, n_warm)} |")
        thr.append(f"| {name} | {measured} | {cold.wall_s:.1f} | {cold.gpu_busy_s:.1f} | {measured / (cold.wall_s / 60):.0f} | "
                   f"{100 * busy:.0f}% | {cold.stop_reason} |")
    speedups = [m["speedup"] for m in metrics.values()]
    # a run that never reached it counts as all its candidates plus one (censored: it would have needed more)
    cold_n = [m["cold_to_95"] or m["cold_candidates"] for m in metrics.values()]
    warm_n = [m["warm_to_95"] or m["warm_candidates"] for m in metrics.values()]
    summary = {
        "geomean_speedup": _gmean(speedups),
        "median_cold_to_95": statistics.median(cold_n),
        "median_warm_to_95": statistics.median(warm_n),
        # the other reading of "as a median over the examples": the median of each example's warm/cold ratio
        "median_warm_over_cold": statistics.median(w / c for w, c in zip(warm_n, cold_n)),
        "median_cold_to_95_common": statistics.median(m["cold_to_95_common"] or m["cold_candidates"] for m in metrics.values()),
        "median_warm_to_95_common": statistics.median(m["warm_to_95_common"] or m["warm_candidates"] for m in metrics.values()),
        "min_best_pct_of_copy_gmean": min(_gmean(m["pct_of_copy"]) for m in metrics.values()),
        "median_busy_fraction": statistics.median(m["busy_fraction"] for m in metrics.values()),
    }
    gpu = data.get("gpu") or {}
    md = [
        f"# Examples through the search: cold and warm — {gpu.get('name', '?')}, {data['date']}",
        "",
        f"Command: `python3 bench/self_improvement.py --max-candidates {args.max_candidates} --patience {args.patience}`. "
        f"GPU: {gpu.get('name')}, driver {gpu.get('driver')}, measured copy {gpu.get('copy_gbps', 0):.0f} GB/s. "
        f"Versions: {data['versions']}.",
        "",
        "## Best verified candidate per example",
        "",
        "Speedup: geomean over the spec's bench sizes of the naive kernel's time over the candidate's, timed interleaved in the",
        "same run. Roofline: bytes moved (every input and output once) over the measured device-to-device copy bandwidth,",
        "as a percentage of the candidate's time (100% = copy speed).",
        "",
        "| example | best candidate | speedup | naive % of copy | best % of copy (min–max) | best, geomean | per size |",
        "|---|---|---:|---:|---:|---:|---|",
        *rows,
        "",
        f"Geomean speedup over the examples: **{summary['geomean_speedup']:.2f}x**.",
        "",
        "## Self-improvement: candidates until 95% of the best",
        "",
        "Cold: empty lesson store. Warm: the cold experiments of every other example (leave one out). Counted: candidates",
        "the search evaluated (the original kernel, evaluated first as the reference, not counted) until a verified",
        "candidate reached 95% of that run's final best, that candidate included (the issue's measure), and, stricter,",
        "95% of the best either run found (columns \"common\"). A candidate the cold run had evaluated keeps its cold",
        "result in the warm run (same key), as a resumed job does.",
        "",
        "| example | kernel class | cold | warm | cold, common | warm, common | cold reached it with | warm reached it with |",
        "|---|---|---:|---:|---:|---:|---|---|",
        *si,
        "",
        f"Median: cold **{summary['median_cold_to_95']}**, warm **{summary['median_warm_to_95']}** candidates "
        f"(common target: cold {summary['median_cold_to_95_common']}, warm {summary['median_warm_to_95_common']}). "
        f"Median over the examples of warm / cold: **{summary['median_warm_over_cold']:.2f}** "
        f"(per example: {', '.join(f'{w}/{c}' for w, c in zip(warm_n, cold_n))}).",
        "",
        "## Throughput of the cold jobs",
        "",
        "| example | verified and timed | wall s | GPU worker busy s | per minute | busy fraction | stopped by |",
        "|---|---:|---:|---:|---:|---:|---|",
        *thr,
        "",
        f"Median busy fraction: **{100 * summary['median_busy_fraction']:.0f}%**.",
    ]
    return "\n".join(md) + "\n", {"summary": summary, "per_example": metrics}


def _best_speedup(summary: JobSummary) -> float:
    best = best_row(summary)
    return best.result.speedup if best else 1.0


def _gmean(xs) -> float:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else 0.0


def _n(n: int | None) -> str:
    return str(n) if n else "not reached"


def _reacher(summary: JobSummary, n: int | None) -> str:
    if not n:
        return "—"
    return [r for r in summary.rows if r.key != summary.baseline_key][n - 1].candidate.description


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--examples", nargs="*", help="example folder names (default: all)")
    parser.add_argument("--max-candidates", type=int, default=40)
    parser.add_argument("--patience", type=int, default=16)
    parser.add_argument("--max-seconds", type=float, default=90.0, help="wall-time budget of each job")
    parser.add_argument("--backend", choices=("gpu", "simulated", "replay"), default="gpu",
                        help="simulated: a dry run of the script without a GPU (its numbers mean nothing); "
                             "replay: the search replayed on the results of a recorded run (--replay-from)")
    parser.add_argument("--replay-from", type=Path, help="self-improvement-raw.json of a GPU run, for --backend replay")
    parser.add_argument("--tables-from", type=Path, help="only render the tables from a saved self-improvement-raw.json")
    args = parser.parse_args()
    if args.tables_from:
        data = json.loads(args.tables_from.read_text())
    else:
        data = asyncio.run(run(args))
        data["date"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        data["versions"] = {"python": platform.python_version(), **{p: _version(p) for p in ("cupy", "pydantic", "ptxfactory")}}
        _save_raw(args, data)
    date = dt.datetime.fromisoformat(data["date"])
    md, metrics = tables(data, args)
    data.update(metrics)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"self-improvement-{date:%Y-%m-%d}"
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1))
    stem.with_suffix(".md").write_text(md)
    print(md)
    sys.exit(0)


def _version(name: str) -> str:
    if name == "cupy":  # its distribution is cupy-cuda12x / cupy-cuda13x
        try:
            import cupy
            return cupy.__version__
        except ImportError:
            return "absent"
    try:
        return version(name)
    except Exception:  # noqa: BLE001 (a missing package is reported, not fatal)
        return "absent"


if __name__ == "__main__":
    main()
