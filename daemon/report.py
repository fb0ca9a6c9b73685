"""What a finished job looks like to a person: table rows, ``report.md``, the lesson listing.

Pure functions of a :class:`~ptxfactory.protocol.JobSummary` (or of lesson-store rows), except
:func:`write_outputs`, which writes the report folder (only into real folders: no symbolic links).
The CLI renders :func:`row_views` as a rich table and writes :func:`render_markdown` to
``report.md``. Candidate numbers are positions in ``summary.rows``: the original is ``#0``.
"""
from __future__ import annotations

import re

import contextlib
import errno
import json
import os
import secrets
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from ptxfactory.protocol import CandidateRow, GpuFacts, JobSummary, Measured, SizeTiming

Status = Literal["verified", "simulated", "failed", "not_run"]

OUTCOMES = ("measured", "rejected", "compile_failed", "crashed", "timed_out", "not_run")


@dataclass(frozen=True)
class RowView:
    """One table row, already decided: what to print for candidate ``number``."""

    number: int
    generator: str
    change: str
    status: Status
    verdict: str
    resources: str
    timings: list[SizeTiming | None]
    speedup: float | None
    is_best: bool
    is_baseline: bool
    interval: tuple[float, float] | None = None
    significant: bool = False


def size_label(size: dict[str, int]) -> str:
    """``{"M": 32768, "N": 1024}`` -> ``"M=32768 N=1024"``."""
    return " ".join(f"{k}={v}" for k, v in size.items())


def bench_sizes(summary: JobSummary) -> list[dict[str, int]]:
    """The benchmark sizes in the order they were timed (the baseline's, else the first measured row's); empty when nothing ran."""
    measured = [r for r in summary.rows if isinstance(r.result, Measured)]
    measured.sort(key=lambda r: r.key != summary.baseline_key)
    return [t.size for t in measured[0].result.timings] if measured else []


def fastest_at_each_size(summary: JobSummary) -> list[tuple[dict[str, int], CandidateRow, SizeTiming]]:
    """Per bench size (in :func:`bench_sizes` order), the verified row with the least median time there and that
    timing (the first such row on a tie); simulated rows are left out (they verify nothing). One kernel serves every
    size, so the job's best is a compromise where these differ: a caller that launches by size could take each."""
    out = []
    for size in bench_sizes(summary):
        timed = [(t, row) for row in summary.rows if isinstance(row.result, Measured) and not row.result.simulated
                 for t in row.result.timings if t.size == size]
        if timed:
            t, row = min(timed, key=lambda tr: tr[0].median_us)
            out.append((size, row, t))
    return out


def per_size_lines(summary: JobSummary) -> list[str]:
    """The report's "Fastest at each bench size" section: where a candidate other than the best is the fastest at
    some size, each size's fastest, its time and % of copy, and the best's time there; [] otherwise."""
    best = summary.row(summary.best_key)
    fastest = fastest_at_each_size(summary)
    if best is None or len(fastest) < 2 or all(row.key == best.key for _, row, _ in fastest):
        return []
    best_at = {size_label(t.size): t for t in best.result.timings}
    out = ["## Fastest at each bench size", "",
           "One kernel serves every size; where another candidate is faster at a size, launching it there gains the ratio.", "",
           "| size | fastest | its time | % of copy | the best's time | ratio |", "|---|---|---:|---:|---:|---:|"]
    for size, row, t in fastest:
        b = best_at.get(size_label(size))
        ratio = f"{b.median_us / t.median_us:.3f}" if b else "—"
        out.append(f"| {size_label(size)} | #{number_of(summary, row.key)} {_md_cell(row.candidate.description)} | {us(t.median_us)} "
                   f"| {t.pct_of_copy:.0f}% | {us(b.median_us) if b else '—'} | {ratio} |")
    return out + [""]


def verdict(row: CandidateRow, summary: JobSummary) -> tuple[Status, str]:
    """(status, text) of the "verified" column: ``yes``, ``simulated``, ``compiled, not run`` or ``no: <why>``."""
    r = row.result
    if isinstance(r, Measured):
        accuracy = ref_error_text(r, with_original=row.key != summary.baseline_key)
        return ("simulated", "simulated (not verified)") if r.simulated else ("verified", "yes" + (f"; {accuracy}" if accuracy else ""))
    if r.outcome == "not_run":
        # In a compile-only job every row has the same reason; the CLI says it once.
        return "not_run", "compiled, not run" if summary.state == "compile_only" else row.reason
    return "failed", "no: " + row.reason


def ref_error_text(result: Measured, with_original: bool = True) -> str:
    """``"max |err| vs reference 0.076 (original 5.2)"``: the largest error against the spec's Python reference
    over the verified sizes, of this candidate and (``with_original``) of the original on the same inputs;
    ``""`` without a Python reference."""
    if not result.ref_errors:
        return ""
    worst = max(e.candidate_max_abs for e in result.ref_errors)
    original = max(e.original_max_abs for e in result.ref_errors)
    return f"max |err| vs reference {worst:.2g}" + (f" (original {original:.2g})" if with_original else "")


def accuracy_lines(summary: JobSummary) -> list[str]:
    """``report.md``'s accuracy section: per verified size and output, the error against the Python reference of
    the best candidate (else the original) beside the original's; empty when the original is the oracle."""
    row = summary.row(summary.best_key)
    if row is None or not isinstance(row.result, Measured) or not row.result.ref_errors:
        row = summary.row(summary.baseline_key)
    if row is None or not isinstance(row.result, Measured) or not row.result.ref_errors:
        return []
    n = number_of(summary, row.key)
    who = "the original" if row.key == summary.baseline_key else f"#{n}"
    whose = "of the original kernel" if row.key == summary.baseline_key else f"of {who} and of the original kernel on the same inputs"
    out = ["## Accuracy against the Python reference", "",
           f"Max |error| against the spec's Python reference at each verified size (the largest over its seeds), {whose}. "
           "A candidate passes within rtol/atol, or when it is no less accurate than the original (at most 2x its error "
           "+ 4 ulp).", "",
           f"| size | output | {who} | original | within rtol/atol |", "|---|---|---|---|---|"]
    for e in row.result.ref_errors:
        size = size_label(e.size) + (" (held-out)" if e.heldout else "")
        out.append(f"| {size} | {e.output} | {e.candidate_max_abs:.3g} | {e.original_max_abs:.3g} | {'yes' if e.within_tol else 'no'} |")
    return out + [""]


def resources_text(row: CandidateRow) -> str:
    """``"16 regs, 1024 B smem"`` (+ the launch's dynamic shared memory, local memory and spills when any), or ``"—"``
    when it did not compile."""
    if not row.resources:
        return "—"
    text = row.resources.summary()
    dynamic = row.candidate.launch.shared_mem
    if dynamic not in (0, "0", ""):
        text = text.replace(" B smem", f" B smem + {dynamic}{' B' if str(dynamic).isdigit() else ''} dynamic", 1)
    return text


def us(x: float) -> str:
    """Microseconds with 3-4 significant digits: ``7.31``, ``52.1``, ``1234``."""
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def timing_text(t: SizeTiming | None, sep: str = ", ") -> str:
    """``"52.1 µs, 3216 GB/s, 80% of copy"``; ``"—"`` for a size that was not timed."""
    if t is None:
        return "—"
    return f"{us(t.median_us)} µs{sep}{t.gbps:.0f} GB/s{sep}{t.pct_of_copy:.0f}% of copy"


def speedup_text(speedup: float | None, interval: tuple[float, float] | None = None, significant: bool | None = None) -> str:
    """``1.84x``, with its 95% interval (``1.84x [1.80-1.88]``) and ``no significant change`` when it does not
    clear the job's margin (``significant`` False); ``—`` for no speedup."""
    if speedup is None:
        return "—"
    text = f"{speedup:.2f}x" + (f" [{interval[0]:.2f}-{interval[1]:.2f}]" if interval else "")
    return text + (" no significant change" if significant is False and speedup > 1.0 else "")


def row_views(summary: JobSummary) -> list[RowView]:
    """Every candidate in evaluation order, with one timing per :func:`bench_sizes` entry."""
    sizes = bench_sizes(summary)
    out = []
    for i, row in enumerate(summary.rows):
        status, text = verdict(row, summary)
        timings: list[SizeTiming | None] = [None] * len(sizes)
        speedup = None
        if isinstance(row.result, Measured):
            by_size = {json.dumps(t.size, sort_keys=True): t for t in row.result.timings}
            timings = [by_size.get(json.dumps(s, sort_keys=True)) for s in sizes]
            speedup = row.result.speedup
        measured = row.result if isinstance(row.result, Measured) else None
        out.append(RowView(
            number=i, generator=row.candidate.generator, change=row.candidate.description, status=status,
            verdict=text, resources=resources_text(row), timings=timings, speedup=speedup,
            is_best=row.key == summary.best_key, is_baseline=row.key == summary.baseline_key,
            interval=(measured.speedup_lo, measured.speedup_hi) if measured and measured.speedup_lo is not None else None,
            significant=bool(measured and row.key != summary.baseline_key and measured.significant(summary.noise_hi)),
        ))
    return out


def lineage(summary: JobSummary, key: str | None) -> list[CandidateRow]:
    """The rows from the original's first descendant down to ``key`` (each candidate's ``parent`` in turn): the
    steps that made a candidate, oldest first. Stops at a parent that is not among the rows (or a cycle)."""
    by_key = {r.candidate.key: r for r in summary.rows}
    out: list[CandidateRow] = []
    seen: set[str] = set()
    row = by_key.get(key) if key else None
    while row is not None and row.candidate.key != summary.baseline_key and row.candidate.key not in seen:
        seen.add(row.candidate.key)
        out.append(row)
        row = by_key.get(row.candidate.parent) if row.candidate.parent else None
    return out[::-1]


def number_of(summary: JobSummary, key: str | None) -> int | None:
    """The ``#`` of the candidate with ``key`` (its position in ``summary.rows``), or None."""
    return next((i for i, r in enumerate(summary.rows) if r.key == key), None) if key else None


def no_gpu_line(summary: JobSummary) -> str:
    """The one line a compile-only job prints: ``no NVIDIA GPU found: compiled N candidates, nothing was run``."""
    n = len(summary.rows)
    failed = sum(r.result.outcome == "compile_failed" for r in summary.rows)
    what = f"{n} candidate{'s' if n != 1 else ''}" + (f" ({failed} failed to compile)" if failed else "")
    return f"no NVIDIA GPU found: compiled {what}, nothing was run"


def result_line(summary: JobSummary) -> str:
    """One line saying how the job ended (the CLI's last words and the report's ``result``)."""
    if summary.state == "compile_only":
        return no_gpu_line(summary)
    if summary.state == "cancelled":
        return f"cancelled after {len(summary.rows)} candidates"
    best = summary.row(summary.best_key)
    if best is None or not isinstance(best.result, Measured):
        stop = summary.stop_reason
        tried = len(summary.rows) - 1
        if stop and stop != "every proposal evaluated":
            return f"no verified candidate was faster than the original ({tried} candidates; search stopped: {stop})"
        return "no verified candidate was faster than the original"
    again = summary.best_retimed  # the measurement to quote: not the one that selected the best
    retimed = (f"; re-timed on fresh inputs: {again.speedup:.2f}x [{again.speedup_lo:.2f}-{again.speedup_hi:.2f}]"
               if again is not None and again.speedup_lo is not None else "")
    return (f"best: #{number_of(summary, best.key)} {best.candidate.generator}: {best.candidate.description}, "
            f"{best.result.speedup:.2f}x faster than the original"
            + (" (simulated, not verified)" if best.result.simulated else " (verified)") + retimed)


def launch_needed(summary: JobSummary) -> list[str]:
    """What the host code must do to use the best candidate: its launch, the template instantiation it launches,
    and compile options if any."""
    best, base = summary.row(summary.best_key), summary.row(summary.baseline_key)
    if best is None:
        return []
    launch = best.candidate.launch
    other_instance = base is not None and best.candidate.template_args != base.candidate.template_args
    if base is not None and launch == base.candidate.launch:
        lines = [f"- Same grid and block as the original: `{launch.describe()}`"
                 + ("." if other_instance else " (drop-in replacement).")]
    else:
        lines = [f"- Launch it with `{launch.describe()}`"
                 + (f" instead of `{base.candidate.launch.describe()}`" if base else "")
                 + ": change the launch site (grid/block are expressions over the spec's size symbols)."]
    if other_instance:
        lines.append(f"- Launch the instantiation `{best.candidate.name_expression}` instead of "
                     f"`{base.candidate.name_expression}`: change the template arguments at the launch site.")
    if best.candidate.options:
        lines.append(f"- Compile with `{' '.join(best.candidate.options)}`.")
    return lines


def gpu_lines(gpu: GpuFacts | None) -> list[str]:
    """Markdown bullet lines describing the device the figures come from."""
    if gpu is None:
        return ["- No NVIDIA GPU: every candidate was compiled (resources below); nothing was run or verified."]
    lines = []
    if gpu.simulated:
        lines.append("- **Simulated device (tests only)**: no kernel ran and nothing was verified; the figures are a model.")
    lines.append(f"- {gpu.name} ({gpu.arch}), {gpu.sm_count} SMs, L2 {gpu.l2_bytes / (1 << 20):.0f} MiB"
                 + (f", driver {gpu.driver}" if gpu.driver else ""))
    lines.append(f"- memory bandwidth: measured device-to-device copy {gpu.copy_gbps:.0f} GB/s, peak {gpu.peak_gbps:.0f} GB/s")
    extra = [f"{k} {v} MHz" for k, v in gpu.clocks_mhz.items()]
    if gpu.temperature_c is not None:
        extra.append(f"{gpu.temperature_c} °C")
    if extra:
        lines.append("- at the start of the job: " + ", ".join(extra))
    return lines


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(summary: JobSummary) -> str:
    """The candidate table as GitHub markdown (same columns as the CLI's table)."""
    sizes = bench_sizes(summary)
    head = ["#", "generator", "change", "verified", "resources"] + [f"{size_label(s)}" for s in sizes] + ["speedup"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in row_views(summary):
        num = f"**{v.number}** ★" if v.is_best else str(v.number)
        cells = [num, v.generator, v.change, v.verdict, v.resources] + [timing_text(t) for t in v.timings] + [speedup_text(v.speedup, v.interval, None if v.is_baseline else v.significant)]
        lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def search_lines(summary: JobSummary) -> list[str]:
    """Kernel class, why the search stopped, wall time and how busy the GPU worker was (absent in old summaries)."""
    out = []
    if summary.kernel_class:
        out.append(f"- kernel class: {summary.kernel_class}")
    if summary.stop_reason:
        out.append(f"- search stopped: {summary.stop_reason}")
    if summary.wall_s:
        busy = ""
        if summary.gpu_busy_s is not None:
            busy = f"; GPU worker busy {summary.gpu_busy_s:.1f} s ({100 * summary.gpu_busy_s / summary.wall_s:.0f}%)"
        out.append(f"- wall time: {summary.wall_s:.1f} s{busy}")
    if summary.agent_spend is not None:  # what the language-model agents cost (search/agents/)
        out.append(f"- {summary.agent_spend.describe()}")
    if summary.duplicates:  # not in the table: they were never evaluated
        out.append(f"- {summary.duplicates} candidate{'s' if summary.duplicates != 1 else ''} dropped after compiling: "
                   "the same machine code and launch as one evaluated")
    return out


def render_markdown(summary: JobSummary, now: datetime | None = None) -> str:
    """The whole ``report.md``: job, GPU facts, date, best candidate and its launch, the table, rejected candidates."""
    now = now or datetime.now(timezone.utc)
    best = summary.row(summary.best_key)
    out = [
        f"# ptxfactory: `{summary.kernel}` in `{summary.source_path}`",
        "",
        f"- date: {now.strftime('%Y-%m-%d %H:%M %Z').strip()}",
        f"- job: `{summary.job_id}`, state: {summary.state}, {len(summary.rows)} candidates",
        f"- result: {result_line(summary)}",
        *search_lines(summary),
        "",
        "## GPU",
        "",
        *gpu_lines(summary.gpu),
        "",
    ]
    if best is not None:
        r = best.result
        assert isinstance(r, Measured)
        out += [
            f"## Best: #{number_of(summary, best.key)}, {r.speedup:.2f}x faster than the original"
            + (" (simulated, not verified)" if r.simulated else ""),
            "",
            f"- {best.candidate.generator}: {best.candidate.description}",
            f"- resources: {resources_text(best)}",
        ]
        steps = lineage(summary, best.key)
        if len(steps) > 1:  # made over several generations: each step's parent was the best of its time
            out.append("- made by: " + " → ".join(f"#{number_of(summary, r.candidate.key)} {r.candidate.description}" for r in steps))
        if best.candidate.params:
            out.append("- parameters: " + ", ".join(f"`{k}={v}`" for k, v in best.candidate.params.items()))
        if r.verified_sizes:
            out.append("- verified at: " + "; ".join(size_label(s) for s in r.verified_sizes))
        for note in getattr(r, "notes", None) or []:  # checks skipped or unavailable (misaligned views, the sanitizer)
            out.append(f"- note: {note}")
        if writes_best(summary):
            out.append(f"- full source: `{best_name(summary)}` (the whole translation unit)")
        else:  # only name files that write_outputs writes
            out.append(f"- full source: not written (a simulated result verifies nothing: no `{best_name(summary)}`)")
        out += ["", "### Launch", "", *launch_needed(summary), ""]
    out += accuracy_lines(summary)
    out += per_size_lines(summary)
    if summary.warnings:  # the spec checks less than it seems to
        out += ["## Warnings", "", *(f"- {_md_cell(w)}" for w in summary.warnings), ""]
    out += ["## Candidates", "", markdown_table(summary), ""]
    if summary.families_refused:  # no expert skeleton took the kernel: which exist, and what each needs that it lacks
        out += ["## Expert families that do not fit", ""]
        out += [f"- {_md_cell(name)}: {_md_cell(reason)}" for name, reason in summary.families_refused] + [""]
    if summary.passes_refused:  # what a user asks first when a kernel got little: which rewrites were not tried, and why
        out += ["## Passes this job never applied", ""]
        out += [f"- {_md_cell(passes)}: {_md_cell(reason)}" for passes, reason in summary.passes_refused] + [""]
    if summary.state != "compile_only":
        failed = [(i, row) for i, row in enumerate(summary.rows) if not isinstance(row.result, Measured)]
        if failed:
            out += ["## Rejected", ""]
            for i, row in failed:
                out.append(f"- #{i} {row.candidate.generator}: {row.candidate.description}: {row.reason}")
                log = getattr(row.result, "log", None)
                if log and row.result.outcome == "compile_failed":
                    body = "\n".join(log.strip().splitlines()[:30])
                    out += ["", "  ```", *("  " + ln for ln in body.splitlines()), "  ```"]
            out.append("")
    return "\n".join(out)


@dataclass
class LessonGroup:
    """Experiments of one generator in the lesson store: outcome counts and speedups of verified ones."""

    generator: str
    counts: Counter = field(default_factory=Counter)
    speedups: list[float] = field(default_factory=list)
    kernels: set[str] = field(default_factory=set)
    jobs: set[str] = field(default_factory=set)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def best(self) -> float | None:
        return max(self.speedups, default=None)

    @property
    def median(self) -> float | None:
        return statistics.median(self.speedups) if self.speedups else None


def lesson_groups(experiments: list[dict]) -> list[LessonGroup]:
    """Group lesson-store rows (:meth:`LessonStore.experiments`) by generator, most experiments first."""
    groups: dict[str, LessonGroup] = {}
    for e in experiments:
        g = groups.setdefault(e["generator"], LessonGroup(e["generator"]))
        g.counts[e["outcome"]] += 1
        g.kernels.add(e["kernel_fingerprint"])
        g.jobs.add(e["job_id"])
        if e["outcome"] == "measured" and e.get("speedup"):
            g.speedups.append(float(e["speedup"]))
    return sorted(groups.values(), key=lambda g: (-g.total, g.generator))


class UnsafeOutput(OSError):
    """The report folder's path goes through a symbolic link, or a name in it is not a plain folder name."""


def open_output_dir(out_dir: Path, base: Path | None = None) -> int:
    """Open ``out_dir`` as a directory descriptor, creating the missing folders below ``base`` (0700).

    ``base`` (default: ``out_dir``'s parent) is where the caller's trust ends: it must exist, and
    every component of ``out_dir`` below it must be a real folder, never a symbolic link (each is
    opened with ``O_NOFOLLOW`` relative to its parent's descriptor, so a link swapped in meanwhile is
    refused too). The caller closes the descriptor. Raises UnsafeOutput (a link, ``..``, or
    ``out_dir`` not under ``base``) or OSError.
    """
    out_dir = Path(os.path.abspath(out_dir))
    base = Path(os.path.abspath(base)) if base is not None else out_dir.parent
    try:
        parts = out_dir.relative_to(base).parts
    except ValueError:
        raise UnsafeOutput(f"{out_dir} is not inside {base}") from None
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    fd = os.open(base, flags)
    try:
        for name in parts:
            if name in ("", ".", "..") or "/" in name:
                raise UnsafeOutput(f"{out_dir}: {name!r} is not a folder name")
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                child = os.open(name, flags | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafeOutput(f"refusing to write into {out_dir}: {base.joinpath(*parts[:parts.index(name) + 1])} "
                                       "is a symbolic link or not a folder") from None
                raise
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _write_in(dir_fd: int, name: str, text: str) -> None:
    """Write ``name`` in the folder ``dir_fd``: a fresh file (``O_EXCL|O_NOFOLLOW``, 0600) renamed over the old
    one, so a symbolic link planted at ``name`` is replaced, never followed."""
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def best_name(summary: JobSummary) -> str:
    """The best candidate's file name in the report folder: ``best.ptx`` for a job on a ``.ptx`` file, else ``best.cu``."""
    return "best.ptx" if str(summary.source_path).endswith(".ptx") else "best.cu"


def writes_best(summary: JobSummary) -> bool:
    """Whether :func:`write_outputs` writes the best candidate's file: a best exists and its result is not simulated."""
    best = summary.row(summary.best_key)
    return best is not None and not getattr(best.result, "simulated", False)  # a simulated result verified nothing


def annotate_launch_sites(source: str, kernel: str, note: str) -> str:
    """``source`` with ``// note`` on its own line above each host statement that launches ``kernel`` (``kernel<<<``,
    templated ``kernel<T><<<`` too), indented as that line: a file's launcher still passes the original's grid and
    block, which a candidate with another launch needs changed (it would compile and compute wrong results). The
    launches are read from the syntax tree (tree-sitter-cuda), so text in a string or a macro's body is left alone; a
    launch on a line that continues another (``\\``) is not annotated either."""
    from ptxfactory.harness.source import _parser

    data = source.encode()
    tree = _parser().parse(data)
    starts = set()
    stack = [tree.root_node]
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if n.type != "call_expression" or not any(c.type == "kernel_call_syntax" for c in n.children):
            continue
        fn = n.child_by_field_name("function")
        name = fn.child_by_field_name("name") if fn is not None and fn.type == "template_function" else fn
        if name is None or name.text.decode() != kernel:
            continue
        line = data.rfind(b"\n", 0, n.start_byte) + 1
        before = data[:max(line - 1, 0)].rsplit(b"\n", 1)[-1] if line else b""
        if before.rstrip().endswith(b"\\"):
            continue
        starts.add(line)
    out, pos = [], 0
    for line in sorted(starts):
        indent = re.match(rb"[ \t]*", data[line:]).group(0)
        out.append(data[pos:line] + indent + f"// {note}\n".encode())
        pos = line
    return (b"".join(out) + data[pos:]).decode()


def write_outputs(summary: JobSummary, out_dir: Path, base: Path | None = None) -> list[Path]:
    """Write ``best.cu`` (when a faster verified candidate exists; a stale one is removed), ``report.md``, ``report.json``.

    Only into a real folder: the folders of ``out_dir`` below ``base`` (default: its parent) are
    created 0700 and must not be symbolic links; files are created 0600 and never written through a
    link (see :func:`open_output_dir`). Raises UnsafeOutput or OSError.
    """
    dir_fd = open_output_dir(out_dir, base)
    written = []
    try:
        best = summary.row(summary.best_key)
        name = best_name(summary)
        best_path = out_dir / name
        if writes_best(summary):
            text, base_row = best.candidate.source, summary.row(summary.baseline_key)
            if base_row is not None and best.candidate.launch != base_row.candidate.launch:
                text = annotate_launch_sites(text, best.candidate.kernel_name, (
                    f"ptxfactory: launch {best.candidate.kernel_name} with {best.candidate.launch.describe()}, not the "
                    f"original's {base_row.candidate.launch.describe()} (the launch below is the original's)"))
            _write_in(dir_fd, name, text)
            written.append(best_path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
        _write_in(dir_fd, "report.md", render_markdown(summary))
        _write_in(dir_fd, "report.json", summary.model_dump_json(indent=2))
    finally:
        os.close(dir_fd)
    return written + [out_dir / "report.md", out_dir / "report.json"]
