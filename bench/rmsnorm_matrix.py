"""Benchmark (GPU machine): RMSNorm forward in bf16 on QuACK's 11-shape matrix (issue 13).

For each shape (M, N) of :data:`MATRIX`: the factory's best verified candidate for ``examples/rmsnorm`` (a main job
whose bench sizes are the matrix and whose check sizes include every row length of it, so the worker verifies the
candidate at each full-size shape while timing it), torch's ``rms_norm``, QuACK's ``rmsnorm_fwd`` and its autotuned
``rmsnorm_fwd_tuned``, timed here one launch per CUDA event pair:

- median time with its 10th-90th percentile spread (µs), GB/s with bytes = 2*M*N*2 + 2*N (x read, y written, w
  read), % of the worker's measured device-to-device copy, and the factory's ratio against each baseline;
- a geomean row: each column's geomean over the shapes where it has a value (``<column>_n`` of them: a baseline that
  failed at some shapes is averaged over fewer, so compare the per-shape ratios there);
- both orders of running (the implementations in order, then reversed, each ``--reps`` launches a pass);
- inputs rotated through enough sets to exceed 3x the L2 cache (one set where a set already does); every
  implementation writes one output buffer again and again (torch and QuACK's untuned entry allocate theirs, which
  the caching allocator hands back each call: the factory and the tuned entry get the same, ``ys[0]``);
- the factory's output compared against torch's at each shape (max |difference|, bf16);
- a baseline that fails at a shape (QuACK 0.6.x's tuned forward asks sm_90 for more shared memory than it has from
  N = 32768 up) is recorded with its error, not a crash.

Writes ``<out>.json`` (raw timings, versions, GPU facts with clocks, date), ``<out>.md`` and ``<out>.png`` (GB/s per
shape per implementation, the copy bandwidth drawn). QuACK comes from ``../shared/device/quack-wheels.sh``; without it
the QuACK columns say "not installed".

Usage: ``python3 bench/rmsnorm_matrix.py --max-seconds 240 --out bench/results/rmsnorm-matrix-<date>``; in two calls
(the job, then the timing): ``--job-only /root/job/summary.json``, then ``--from-job /root/job/summary.json``.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rmsnorm"
MATRIX = ((32768, 256), (32768, 512), (32768, 1024), (32768, 2048), (32768, 4096), (32768, 8192), (32768, 16384),
          (32768, 32768), (32768, 65536), (16384, 131072), (8192, 262144))
EPS = 1e-6  # the example's eps (its spec's value); the baselines get the same
FACTORY = "factory"  # the job's best: one kernel for every shape
PER_SHAPE = "factory_per_shape"  # at each shape the job's fastest verified candidate there (QuACK compiles one kernel per N)
FACTORIES = (FACTORY, PER_SHAPE)
BASELINES = ("torch", "quack", "quack_tuned")

SLEEP_CYCLES = 40_000_000  # ~20 ms at 2 GHz ahead of each pass: more than the host needs to queue --reps launches


def ratio_key(factory: str, baseline: str) -> str:
    """The table's column of ``factory``'s speedup over ``baseline``: ``vs_<baseline>`` for the one kernel,
    ``per_shape_vs_<baseline>`` for the per-shape pick."""
    return f"vs_{baseline}" if factory == FACTORY else f"per_shape_vs_{baseline}"


def bytes_moved(m: int, n: int) -> int:
    """Bytes an RMSNorm forward must move at (M, N) in bf16: x read and y written (2*M*N*2) plus the weight (2*N)."""
    return 2 * m * n * 2 + 2 * n


def matrix_spec(text: str, kernel: str = "rmsnorm", matrix=MATRIX) -> str:
    """The example's spec ``text`` with ``[kernel.<kernel>.bench]`` sizes set to ``matrix`` and three-row check sizes of
    every row length of it added to ``[kernel.<kernel>.check]``. Raises ValueError when a section has no one-line
    ``sizes = [...]`` to replace."""
    bench = ", ".join(f"{{ M = {m}, N = {n} }}" for m, n in matrix)
    text = _replace_sizes(text, f"kernel.{kernel}.bench", lambda old: f"[{bench}]")
    rows = ", ".join(f"{{ M = 3, N = {n} }}" for n in sorted({n for _, n in matrix}))
    return _replace_sizes(text, f"kernel.{kernel}.check", lambda old: f"[{old.strip()[1:-1].strip()}, {rows}]")


def _replace_sizes(text: str, section: str, new) -> str:
    head = re.search(rf"^\[{re.escape(section)}\]\s*$", text, re.M)
    if head is None:
        raise ValueError(f"no [{section}] section")
    end = re.search(r"^\[", text[head.end():], re.M)
    stop = head.end() + (end.start() if end else len(text) - head.end())
    line = re.search(r"^sizes\s*=\s*(\[.*\])\s*$", text[head.end():stop], re.M)
    if line is None:
        raise ValueError(f"[{section}] has no one-line sizes = [...]")
    a, b = head.end() + line.start(1), head.end() + line.end(1)
    return text[:a] + new(text[a:b]) + text[b:]


@dataclass
class Timing:
    """One implementation at one shape: the median and the 10th/90th percentiles of per-launch times (µs), or the
    error that stopped it (``error`` set, times NaN)."""

    median_us: float = math.nan
    p10_us: float = math.nan
    p90_us: float = math.nan
    error: str | None = None

    @classmethod
    def of(cls, samples_us: list[float]) -> "Timing":
        s = sorted(samples_us)
        if not s:
            raise ValueError("no samples")
        q = lambda f: s[min(len(s) - 1, int(f * len(s)))]  # noqa: E731
        return cls(median_us=q(0.5), p10_us=q(0.1), p90_us=q(0.9))


def geomean(xs: list[float]) -> float:
    """The geometric mean of positive numbers (NaN for none)."""
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def table(times: dict[str, dict[str, Timing]], copy_gbps: float, matrix=MATRIX) -> list[dict]:
    """Rows of the report, one per shape plus a last ``geomean`` row: per implementation GB/s and % of copy, the
    factory's speedup over each baseline (the baseline's median time over the factory's: > 1, the factory is faster)
    and over the faster of QuACK's two entry points at that shape (``vs_best_quack``, the issue's target); the same
    for the per-shape pick (``per_shape_vs_...``) where ``times`` has it. A failed
    side leaves its cells None; the geomean row covers the shapes where a cell has a value (``<key>_n`` of them)."""
    rows = []
    for m, n in matrix:
        key = f"{m}x{n}"
        ok = {impl: per[key] for impl, per in times.items() if key in per and per[key].error is None}
        row: dict = {"shape": key, "bytes": bytes_moved(m, n)}
        for impl in times:
            gbps = bytes_moved(m, n) / (ok[impl].median_us * 1e3) if impl in ok else None
            row[f"{impl}_gbps"] = gbps
            row[f"{impl}_pct_copy"] = None if gbps is None else 100 * gbps / copy_gbps
        for fac in (f for f in FACTORIES if f in times):
            for b in BASELINES:
                row[ratio_key(fac, b)] = ok[b].median_us / ok[fac].median_us if b in ok and fac in ok else None
            quack = [row[ratio_key(fac, b)] for b in ("quack", "quack_tuned") if row[ratio_key(fac, b)] is not None]
            row[ratio_key(fac, "best_quack")] = min(quack) if quack else None
        rows.append(row)
    mean: dict = {"shape": "geomean", "bytes": None}
    for k in (rows[0] if rows else {}):
        if k not in ("shape", "bytes"):
            vals = [r[k] for r in rows if r[k] is not None]
            mean[k] = geomean(vals) if vals else None
            mean[f"{k}_n"] = len(vals)
    return rows + [mean]


def render_markdown(doc: dict) -> str:
    """The report's Markdown: header (date, GPU, clocks, versions, command) and the table of :func:`table`."""
    impls = [i for i in (*FACTORIES, *BASELINES) if i in doc.get("times", {}) or i != PER_SHAPE]
    facs = [i for i in FACTORIES if i in impls]
    f = lambda v, spec=".2f": "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)  # noqa: E731
    gpu = doc.get("gpu", {})
    lines = [f"# RMSNorm forward (bf16) on QuACK's matrix, {doc.get('date', '')}", "",
             f"- GPU: {gpu.get('name', '?')}, driver {gpu.get('driver', '?')}, clocks at the start {gpu.get('clocks_mhz', {})}, "
             f"measured copy {f(doc.get('copy_gbps'), '.0f')} GB/s",
             f"- versions: {', '.join(f'{k} {v}' for k, v in doc.get('versions', {}).items())}",
             f"- factory (one kernel, the job's best): {doc.get('factory', {}).get('description', '—')} (job {doc.get('factory', {}).get('job_id', '—')})",
             *([f"- factory_per_shape: at each shape the job's fastest verified candidate there: "
                + "; ".join(f"{k}: {v}" for k, v in doc[PER_SHAPE].items())] if PER_SHAPE in facs and doc.get(PER_SHAPE) else []),
             f"- command: `{doc.get('command', '')}`", "",
             "| shape | " + " | ".join(f"{i} GB/s (% copy)" for i in impls) + " | "
             + " | ".join(f"{'' if fac == FACTORY else 'per shape '}vs {b}" for fac in facs for b in (*BASELINES, "best quack")) + " |",
             "|---|" + "---:|" * (len(impls) + 4 * len(facs))]
    for r in doc["table"]:
        cells = [f"{f(r.get(f'{i}_gbps'), '.0f')} ({f(r.get(f'{i}_pct_copy'), '.0f')}%)" for i in impls]
        ratios = [f(r.get(ratio_key(fac, b)), ".3f") for fac in facs for b in (*BASELINES, "best_quack")]
        lines.append(f"| {r['shape']} | " + " | ".join(cells + ratios) + " |")
    errors = [(impl, shape, t["error"]) for impl, per in doc["times"].items() for shape, t in per.items() if t.get("error")]
    if errors:
        lines += ["", "Failed (recorded, not timed):", ""] + [f"- {i} at {s}: {e}" for i, s, e in errors]
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: Path) -> None:
    """GB/s per shape per implementation (log-spaced shapes on x), the measured copy bandwidth as a line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in doc["table"] if r["shape"] != "geomean"]
    fig, ax = plt.subplots(figsize=(11, 5))
    for impl in (i for i in (*FACTORIES, *BASELINES) if f"{i}_gbps" in rows[0]):
        ax.plot(range(len(rows)), [r.get(f"{impl}_gbps") or float("nan") for r in rows], marker="o", label=impl)
    ax.axhline(doc["copy_gbps"], color="gray", linestyle="--", label="device-to-device copy")
    ax.set_xticks(range(len(rows)), [r["shape"] for r in rows], rotation=45, ha="right")
    ax.set_ylabel("GB/s (2*M*N*2 + 2*N bytes)")
    ax.set_title(f"RMSNorm forward, bf16, {doc.get('gpu', {}).get('name', '')}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def per_shape_best(summary) -> dict[str, object]:
    """Shape key (``"MxN"``) -> the job row (``JobSummary.rows``) whose candidate had the least median time at that
    bench size among the verified ones (verified at every check size, so at every row length of the matrix): the
    report's :func:`~ptxfactory.daemon.report.fastest_at_each_size`. Shapes no verified row was timed at are left out."""
    from ptxfactory.daemon.report import fastest_at_each_size

    return {f"{size['M']}x{size['N']}": row for size, row, _ in fastest_at_each_size(summary)}


# -- the GPU part -------------------------------------------------------------------------------------------------

def matrix_example(work: Path):
    """A copy of examples/rmsnorm in ``work`` with :func:`matrix_spec`; returns its kernel spec."""
    from ptxfactory.protocol import load_spec

    for f in EXAMPLE.iterdir():
        if f.is_file():
            shutil.copy(f, work / f.name)
    spec_path = work / "rmsnorm.cu.toml"
    spec_path.write_text(matrix_spec(spec_path.read_text()))
    return load_spec(spec_path).kernels["rmsnorm"]


async def run_job(max_seconds: float, work: Path):
    """The main job on :func:`matrix_example` in ``work`` (empty lesson store there): its JobSummary."""
    from ptxfactory.harness.gpu_backend import GpuBackend
    from ptxfactory.search.lessons import LessonStore
    from ptxfactory.search.strategy import optimise

    matrix_example(work)
    backend, store = GpuBackend(), await LessonStore.open(work / "lessons.sqlite")
    try:
        return await optimise(work / "rmsnorm.cu", "rmsnorm", backend=backend, store=store, max_seconds=max_seconds)
    finally:
        await backend.close()
        await store.close()


def factory_best(summary, work: Path):
    """``(compiled best, spec, per-shape compiled)`` of a matrix job's ``summary`` (:func:`run_job`, or one saved by
    ``--job-only`` and read back): the best and, per row length N, the candidate of :func:`per_shape_best`, compiled
    here. Raises RuntimeError when the job found no verified best or a candidate does not compile."""
    from ptxfactory.harness.compile import CompileFailed, compile_candidate

    spec = matrix_example(work)
    best = next((r for r in summary.rows if r.candidate.key == summary.best_key), None)
    if best is None:
        raise RuntimeError(f"the job found no verified best: {summary.message}")

    def build(candidate):
        compiled = compile_candidate(candidate, spec.arch, spec.check.fast_math)
        if isinstance(compiled, CompileFailed):
            raise RuntimeError(f"{candidate.description} does not compile here: {compiled.log[:400]}")
        return compiled

    compiled = build(best.candidate)
    built = {best.candidate.key: compiled}
    per_shape = {}
    for shape, row in per_shape_best(summary).items():
        if row.candidate.key not in built:
            built[row.candidate.key] = build(row.candidate)
        per_shape[int(shape.split("x")[1])] = built[row.candidate.key]
    return compiled, spec, per_shape


def implementations(compiled, spec, per_shape: dict | None = None) -> dict:
    """Name -> ``f(x, w, y)`` launching one RMSNorm forward (torch bf16 tensors, y preallocated) for each
    implementation importable here; a missing one maps to its import error (a string). ``per_shape`` (row length N
    -> compiled candidate) adds :data:`PER_SHAPE`, which launches the candidate of x's row length."""
    import cupy as cp
    import torch.nn.functional as F

    from ptxfactory.harness.buffers import scalar_value
    from ptxfactory.harness.gpu_eval import LoadedKernel

    def launcher(c):
        kernel = LoadedKernel(c.cubin, c.lowered_name, c.candidate.launch)

        def run(x, w, y):
            size = {"M": x.shape[0], "N": x.shape[1]}
            bufs = {"x": cp.asarray(x), "w": cp.asarray(w), "y": cp.asarray(y)}
            kernel(tuple(bufs[a.name] if a.is_buffer else scalar_value(a, size) for a in spec.args), size)
        return run

    out = {FACTORY: launcher(compiled)}
    if per_shape:
        by_key = {c.candidate.key: launcher(c) for c in per_shape.values()}
        by_n = {n: by_key[c.candidate.key] for n, c in per_shape.items()}
        out[PER_SHAPE] = lambda x, w, y: by_n[x.shape[1]](x, w, y)
    out["torch"] = lambda x, w, y: F.rms_norm(x, (x.shape[1],), w, EPS)
    try:
        import importlib
        q = importlib.import_module("quack.rmsnorm")
        out["quack"] = lambda x, w, y: q.rmsnorm_fwd(x, w, eps=EPS)
        out["quack_tuned"] = lambda x, w, y: q.rmsnorm_fwd_tuned(x, w, y, eps=EPS)
    except Exception as exc:  # noqa: BLE001  (QuACK absent or broken: recorded)
        out["quack"] = out["quack_tuned"] = f"not installed: {type(exc).__name__}: {exc}"[:300]
    return out


def time_shape(impls: dict, m: int, n: int, l2_bytes: int, reps: int) -> tuple[dict[str, Timing], dict[str, float]]:
    """Each implementation at (m, n): per-launch CUDA-event times over both orders, inputs rotated past 3x L2.
    Returns (name -> Timing, name -> max |y - torch's y|)."""
    import torch
    import torch.nn.functional as F

    per_set = bytes_moved(m, n)
    sets = max(1, math.ceil(3 * l2_bytes / per_set))
    g = torch.Generator(device="cuda").manual_seed(m * 1_000_003 + n)
    xs = [torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(sets)]
    w = (1.0 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(torch.bfloat16)
    ys = [torch.empty_like(xs[0])]
    want = F.rms_norm(xs[0], (n,), w, EPS)
    timings, errs, live = {}, {}, {}
    for name, fn in impls.items():
        if isinstance(fn, str):
            timings[name] = Timing(error=fn)
            continue
        try:
            ys[0].fill_(float("nan"))  # an implementation that writes nothing shows NaN, not the previous one's output
            got = fn(xs[0], w, ys[0])
            got = ys[0] if got is None else got[0] if isinstance(got, tuple) else got
            torch.cuda.synchronize()
            errs[name] = float((got.float() - want.float()).abs().max())
            live[name] = fn
        except Exception as exc:  # noqa: BLE001  (a baseline that fails at this shape: recorded)
            torch.cuda.synchronize()
            timings[name] = Timing(error=f"{type(exc).__name__}: {exc}"[:300])
    samples: dict[str, list[float]] = {k: [] for k in live}
    for order in (list(live), list(reversed(live))):
        for name in order:
            fn = live[name]
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            torch.cuda._sleep(SLEEP_CYCLES)  # the GPU waits while the host queues the launches: events time the GPU only
            for i, (s, e) in enumerate(events):
                s.record()
                fn(xs[i % sets], w, ys[0])
                e.record()
            torch.cuda.synchronize()
            samples[name] += [s.elapsed_time(e) * 1e3 for s, e in events]
    for name, s in samples.items():
        timings[name] = Timing.of(s)
    del xs, ys
    torch.cuda.empty_cache()
    return timings, errs


def versions() -> dict[str, str]:
    from importlib import metadata
    out = {}
    for pkg in ("torch", "cupy-cuda12x", "cupy-cuda13x", "cupy", "quack-kernels", "nvidia-cutlass-dsl"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-seconds", type=float, default=240.0, help="the main job's wall-time budget")
    ap.add_argument("--reps", type=int, default=30, help="launches per implementation per order")
    ap.add_argument("--out", type=Path, required=True, help="path stem of the .json, .md and .png")
    ap.add_argument("--job-only", type=Path, metavar="SUMMARY", help="run the job only and save its summary (JSON) there")
    ap.add_argument("--from-job", type=Path, metavar="SUMMARY", help="no job: the summary a --job-only run saved")
    a = ap.parse_args()
    from ptxfactory.protocol import JobSummary

    with tempfile.TemporaryDirectory() as tmp:
        # the job and the timing may take a GPU-machine call each: QuACK's compiles and autotuning per shape take ~7
        # minutes of a 10-minute call, which left the job 90 s (6 candidates of 11 bench sizes each)
        if a.from_job:
            summary = JobSummary.model_validate_json(a.from_job.read_text())
        else:
            summary = await run_job(a.max_seconds, Path(tmp))
        if a.job_only:
            a.job_only.parent.mkdir(parents=True, exist_ok=True)
            a.job_only.write_text(summary.model_dump_json())
            print(f"job {summary.job_id}: {len(summary.rows)} rows, stopped: {summary.stop_reason}; saved to {a.job_only}")
            return
        compiled, spec, per_shape = factory_best(summary, Path(tmp))
    facts = summary.gpu
    if facts is None:
        raise RuntimeError("the job ran without a GPU's facts (no GPU?): nothing to compare")
    impls = implementations(compiled, spec, per_shape)
    times: dict[str, dict[str, Timing]] = {k: {} for k in impls}
    errors: dict[str, dict[str, float]] = {k: {} for k in impls}
    best = next(r for r in summary.rows if r.candidate.key == summary.best_key)
    a.out.parent.mkdir(parents=True, exist_ok=True)

    def document(shapes) -> dict:
        return {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            # (--from-job: the job's own budget was the --job-only call's, not this command's --max-seconds)
            "command": f"python3 bench/rmsnorm_matrix.py --reps {a.reps} --out {a.out} --from-job {a.from_job}" if a.from_job
                       else f"python3 bench/rmsnorm_matrix.py --max-seconds {a.max_seconds:g} --reps {a.reps} --out {a.out}",
            "gpu": facts.model_dump(), "copy_gbps": facts.copy_gbps, "versions": versions(),
            "factory": {"job_id": summary.job_id, "description": best.candidate.description,
                        "speedup_over_naive": getattr(best.result, "speedup", None), "stop_reason": summary.stop_reason,
                        "launch": best.candidate.launch.model_dump(), "source": compiled.candidate.kernel_text},
            PER_SHAPE: {f"{m}x{n}": per_shape[n].candidate.description for m, n in MATRIX if n in per_shape},
            "job": {"wall_s": summary.wall_s, "gpu_busy_s": summary.gpu_busy_s, "rows": len(summary.rows)},
            "job_rows": [{"description": r.candidate.description, "outcome": r.result.outcome,
                          "wall_s": getattr(r.result, "wall_s", None), "verify_s": getattr(r.result, "verify_s", None),
                          "pct_of_copy": [round(t.pct_of_copy, 1) for t in getattr(r.result, "timings", [])]} for r in summary.rows],
            "times": {k: {s: asdict(t) for s, t in per.items()} for k, per in times.items()},
            "max_abs_diff_vs_torch": errors,
            "table": table(times, facts.copy_gbps, shapes),
        }

    done = []
    for m, n in MATRIX:
        t, e = time_shape(impls, m, n, facts.l2_bytes, a.reps)
        for k, v in t.items():
            times[k][f"{m}x{n}"] = v
        for k, v in e.items():
            errors[k][f"{m}x{n}"] = v
        print(f"{m}x{n}: " + ", ".join(f"{k} {v.median_us:.1f} µs" if v.error is None else f"{k} failed" for k, v in t.items()),
              flush=True)
        done.append((m, n))
        if len(done) < len(MATRIX):  # what is measured so far, kept should the run be cut off (QuACK compiles per shape)
            a.out.with_suffix(".json").write_text(json.dumps({**document(done), "partial": True}, indent=2))
    doc = document(MATRIX)
    a.out.with_suffix(".json").write_text(json.dumps(doc, indent=2))
    a.out.with_suffix(".md").write_text(render_markdown(doc))
    try:
        plot(doc, a.out.with_suffix(".png"))
    except ImportError as exc:  # the numbers are written; the plot waits for matplotlib
        print(f"no plot: {exc}")
    print(render_markdown(doc))


if __name__ == "__main__":
    asyncio.run(main())
