"""Nsight Compute's counters for one launch of a compiled kernel: DRAM, memory and SM throughput, achieved occupancy,
L1/L2 hit rates and the top warp stall reasons.

Each profile is ``ncu --csv --page raw --clock-control none ... python -m ptxfactory.harness.sanitize_run JOB.json``
(:mod:`.sanitize_run`: one launch on exact-size buffers, the kernel picked out by its lowered name), a subprocess with
an argument list (no shell) and a time limit, at the largest timed size (:func:`profile_size`). ``ncu`` is looked for
in ``$PTXFACTORY_NCU`` (a path; ``off`` turns profiling off), then where the other CUDA tools are
(:func:`~ptxfactory.harness.cuda_paths.tool_path`). Nothing is assumed: on many hosts the driver refuses the
performance counters to users (``ERR_NVGPUCTRPERM``), or there is no GPU; then :class:`Counters` carries the reason
(``problem``), never an exception.

The output read (:func:`parse_raw_csv`) is ncu's raw page as CSV: a header row of column names (``"ID"``,
``"Kernel Name"``, ..., one per metric), a row of units, then one row per profiled launch; ncu's own ``==PROF==``,
``==WARNING==`` and ``==ERROR==`` lines, and the program's output, are not CSV rows.
"""
from __future__ import annotations

import csv
import io
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ptxfactory.protocol import KernelSpec

NCU_TIMEOUT_S = 180.0  # one profile: python start, CuPy import, input generation, the replayed launch
# the metrics read, with what the user is shown for each
METRICS = {
    "gpu__time_duration.sum": "duration",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory throughput",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy",
    "l1tex__t_sector_hit_rate.pct": "L1 hit rate",
    "lts__t_sector_hit_rate.pct": "L2 hit rate",
}
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active"
# every stall reason ncu knows, by its full name (``..._per_issue_active.ratio``) or its base name
STALLS = "regex:^" + re.escape(STALL_PREFIX) + ".*" + re.escape(STALL_SUFFIX) + r"(\.ratio)?$"
TOP_STALLS = 3
_NOT_A_STALL = ("selected",)  # the warp issued: not a stall
_PERMISSION = "ERR_NVGPUCTRPERM"


def _is_stall(name: str) -> bool:
    """Whether a metric name is a warp stall reason's cycles per issued instruction (``.ratio``, or no suffix)."""
    return name.startswith(STALL_PREFIX) and name.split(".")[0].endswith(STALL_SUFFIX) and name.endswith((STALL_SUFFIX, ".ratio"))


@dataclass(frozen=True)
class Counters:
    """One launch's counters: ``values`` (raw metric name -> number) and ``units`` (name -> ncu's unit), or the
    ``problem`` that kept ncu from reading them (values empty); ``lasting``: a problem that trying again on this host
    will not cure (no ncu, counters refused)."""

    values: dict[str, float] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    lasting: bool = False

    @property
    def ok(self) -> bool:
        return self.problem is None and bool(self.values)

    def stalls(self, n: int = TOP_STALLS) -> list[tuple[str, float]]:
        """The ``n`` largest warp stall reasons (``long_scoreboard``...), cycles per issued instruction, largest first."""
        found = [(name[len(STALL_PREFIX):].split(STALL_SUFFIX)[0], v) for name, v in self.values.items() if _is_stall(name)]
        found = [(r, v) for r, v in found if r not in _NOT_A_STALL and v > 0]
        return sorted(found, key=lambda rv: -rv[1])[:n]

    def get(self, label: str) -> float | None:
        """The value of the metric shown as ``label`` (a value of :data:`METRICS`), or None when not read."""
        name = next((m for m, lab in METRICS.items() if lab == label), None)
        return self.values.get(name) if name else None

    def lines(self) -> list[str]:
        """The counters as short lines (a fixed number of them), or one line with the reason there are none."""
        if not self.ok:
            return [f"counters unavailable: {self.problem or 'ncu reported no metric'}"]
        out = []
        for name, label in METRICS.items():
            if name not in self.values:
                continue
            v, unit = self.values[name], self.units.get(name, "")
            if unit == "%" or name.endswith((".pct", "pct_of_peak_sustained_elapsed", "pct_of_peak_sustained_active")):
                peak = " of peak" if "pct_of_peak" in name else ""
                out.append(f"{label}: {v:.1f}%{peak}")
            elif unit in ("nsecond", "ns"):
                out.append(f"{label}: {v / 1000:.2f} us")
            else:
                out.append(f"{label}: {v:g} {unit}".rstrip())
        stalls = self.stalls()
        if stalls:
            out.append("top warp stalls (cycles per issued instruction): "
                       + ", ".join(f"{reason} {v:.2f}" for reason, v in stalls))
        return out


def find_ncu(env: dict[str, str] | None = None) -> str | None:
    """The ``ncu`` executable to use, or None (none found, or ``PTXFACTORY_NCU=off``)."""
    from .cuda_paths import tool_path

    env = os.environ if env is None else env
    chosen = env.get("PTXFACTORY_NCU")
    if chosen:
        return None if chosen.lower() == "off" else (chosen if os.access(chosen, os.X_OK) else None)
    return tool_path("ncu")


def not_found_reason(env: dict[str, str] | None = None) -> str:
    """Why :func:`find_ncu` found none, in words."""
    env = os.environ if env is None else env
    chosen = env.get("PTXFACTORY_NCU")
    if chosen and chosen.lower() == "off":
        return "Nsight Compute is turned off (PTXFACTORY_NCU=off)"
    if chosen:
        return f"PTXFACTORY_NCU={chosen} is not an executable"
    return "Nsight Compute (ncu) is not installed here (CUDA_PATH, CUDA_HOME, PATH, /usr/local/cuda/bin; or set PTXFACTORY_NCU)"


def ncu_command(exe: str, job_file: str, lowered_name: str, python: str = sys.executable, stalls: bool = True) -> list[str]:
    """The argument list of one profile of the launch described by ``job_file`` (kernel ``lowered_name`` only);
    ``stalls``: the warp stall reasons too (:data:`STALLS`)."""
    return program_command(exe, lowered_name, [python, "-m", "ptxfactory.harness.sanitize_run", job_file], stalls)


def program_command(exe: str, kernel: str, program: list[str], stalls: bool = True, mangled: bool = True) -> list[str]:
    """The argument list of one profile, under the counters of :data:`METRICS` (``stalls``: and the warp stall reasons,
    :data:`STALLS`), of the first launch of ``kernel`` (a name, or ncu's ``regex:...``; matched against mangled names
    with ``mangled``, else ncu's default, the function's name) by ``program`` (an argument list, no shell)."""
    names = ["--kernel-name-base", "mangled", "--print-kernel-base", "mangled"] if mangled else []
    return [exe, "--csv", "--page", "raw", "--print-units", "base", "--clock-control", "none",
            "--target-processes", "all", *names, "--kernel-name", kernel,
            "--launch-count", "1", "--metrics", ",".join([*METRICS, *([STALLS] if stalls else [])]), *program]


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def parse_raw_csv(text: str) -> list[dict[str, tuple[str, str]]]:
    """The launches in ncu's ``--csv --page raw`` output: one dict per launch, column name -> (value, unit). Lines that
    are not CSV rows (ncu's ``==...==`` lines, the program's output) are skipped; [] when there is no header."""
    rows = list(csv.reader(io.StringIO("\n".join(ln for ln in text.splitlines() if ln.startswith('"')))))
    head = next((i for i, r in enumerate(rows) if "ID" in r and "Kernel Name" in r), None)
    if head is None:
        return []
    names = rows[head]
    units = rows[head + 1] if head + 1 < len(rows) and not (rows[head + 1][:1] and rows[head + 1][0].strip().isdigit()) else []
    out = []
    for row in rows[head + 1 + (1 if units else 0):]:
        if row and row[0].strip().isdigit():
            out.append({n: (v, units[i] if i < len(units) else "") for i, (n, v) in enumerate(zip(names, row))})
    return out


def read_output(text: str, lowered_name: str) -> Counters:
    """The :class:`Counters` of ``lowered_name``'s launch in ncu's output (stdout and stderr together), or the
    reason there are none: counters refused (``ERR_NVGPUCTRPERM``), ncu's first error, no launch profiled."""
    if _PERMISSION in text:
        return Counters(problem="the driver refuses the GPU's performance counters to this user (ERR_NVGPUCTRPERM: "
                                "profiling needs admin rights, or the nvidia module's NVreg_RestrictProfilingToAdminUsers=0)",
                        lasting=True)
    launches = [r for r in parse_raw_csv(text) if r.get("Kernel Name", ("", ""))[0] in (lowered_name, "")] or parse_raw_csv(text)
    values, units = {}, {}
    if launches:
        for name, (value, unit) in launches[-1].items():
            if name in METRICS or _is_stall(name):
                v = _number(value)
                if v is not None:
                    values[name], units[name] = v, unit
    if values:
        return Counters(values=values, units=units)
    said = [ln.strip() for ln in text.splitlines() if ln.startswith(("==ERROR==", "==WARNING=="))]
    errors = [ln for ln in said if ln.startswith("==ERROR==")]
    runner = [ln.strip() for ln in text.splitlines() if ln.startswith("sanitize_run:")]
    why = (errors or runner or said or [f"ncu profiled no launch of {lowered_name}"])[0]
    return Counters(problem=why.removeprefix("==ERROR==").removeprefix("==WARNING==").strip()[:300])


def profile_size(spec: KernelSpec) -> dict[str, int]:
    """The size profiled: the timed size (``bench.sizes``) with the most buffer elements, where the counters say what
    the timings measure."""
    return max(spec.bench.sizes, key=lambda s: sum(a.numel(s) for a in spec.args if a.is_buffer))


def profile_launch(exe: str | None, spec: KernelSpec, cubin: bytes, lowered_name: str, launch: dict, size: dict[str, int],
                   timeout_s: float = NCU_TIMEOUT_S, env: dict[str, str] | None = None) -> Counters:
    """Profile one launch of ``cubin``'s ``lowered_name`` at ``size`` (files in a private temporary folder, removed
    after). Blocking (a subprocess that uses the GPU): run it on a worker's thread while no evaluation runs, never on
    an event loop. Never raises for ncu's absence or failure: the reason is in :attr:`Counters.problem`."""
    from .sanitize_run import write_job

    if exe is None:
        return Counters(problem=not_found_reason(env), lasting=True)
    with tempfile.TemporaryDirectory(prefix="ptxf-ncu-") as tmp:
        job = write_job(Path(tmp), spec, cubin, lowered_name, launch, size)
        counters = run_ncu(ncu_command(exe, str(job), lowered_name), lowered_name, timeout_s, env, tmp)
        if not counters.ok and not counters.lasting and "metric" in (counters.problem or "").lower():
            # this ncu does not know a metric asked for (the stall reasons' pattern): once more without them
            counters = run_ncu(ncu_command(exe, str(job), lowered_name, stalls=False), lowered_name, timeout_s, env, tmp)
    return counters


def run_ncu(args: list[str], lowered_name: str, timeout_s: float, env: dict[str, str] | None, cwd: str) -> Counters:
    """One ncu run (``args``: :func:`ncu_command`, :func:`program_command`) in a session of its own (at the time limit
    ncu and the program it runs are killed together); the counters of ``lowered_name``'s launch (any launch where
    ncu names none so), or why there are none. Blocking: never on an event loop."""
    try:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                env=env, cwd=cwd, start_new_session=True)
    except OSError as exc:
        return Counters(problem=f"could not start {args[0]}: {exc}")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return Counters(problem=f"ncu took more than {timeout_s:g} s")
    counters = read_output(out + "\n" + err, lowered_name)
    if not counters.ok and proc.returncode != 0 and counters.problem and "exit code" not in counters.problem:
        counters = Counters(problem=f"{counters.problem} (ncu exit code {proc.returncode})", lasting=counters.lasting)
    return counters
