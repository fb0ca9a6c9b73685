"""The ``ptxfactory`` command line: ``optimise`` (the main job, headless), ``serve`` (the daemon), ``lsp`` (an
editor's stdio bridge to it), ``jobs``/``watch``/``cancel``/``report``/``submit`` (the daemon's jobs), ``lessons``,
``init`` (a spec scaffolded for a kernel that has none), ``show`` (the PTX or SASS of a job's candidate), ``profile``
(a kernel's resources, SASS summary and Nsight Compute counters).

:func:`build_app` builds the typer app; :func:`main` runs it on ``argv`` and returns the exit code.
Exit codes of ``optimise`` (also in ``--help`` and README.md):

- 0: a verified candidate significantly faster than the original was found (``best.cu`` written); never
  with ``--backend simulated``, which verifies nothing;
- 1: bad input: spec error, unknown kernel, signature mismatch, original does not compile, bad option;
- 2: candidates ran but none was both verified and significantly faster (or the backend was simulated);
- 3: no NVIDIA GPU: every candidate was compiled (resources in the table), nothing was run;
- 130: interrupted (Ctrl-C); the partial report is written.

``watch`` and ``submit --watch`` use the same codes for the job's end (1 when it failed), and 75
(:data:`EXIT_DAEMON_STOPPED`, EX_TEMPFAIL) when the daemon stopped or died while the job was followed:
"the daemon stopped; the job will resume when it restarts".
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from ptxfactory.protocol import PASSES_SILENT, JobSummary, Measured, SpecError

from . import report
from .report import write_outputs  # noqa: F401  (re-exported: the CLI's report folder)

EXIT_FASTER, EXIT_BAD_INPUT, EXIT_NOT_FASTER, EXIT_NO_GPU, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

EXIT_CODES_HELP = """\
Exit codes:

* 0: a verified candidate significantly faster than the original was found (best.cu written; never with
  --backend simulated)

* 1: bad input (spec error, unknown kernel, signature mismatch, original does not compile, bad option)

* 2: candidates ran but none was both verified and significantly faster (or the backend was simulated)

* 3: no NVIDIA GPU: every candidate was compiled (resources shown), nothing was run

* 130: interrupted (Ctrl-C); the partial report is written
"""


class BackendChoice(str, Enum):
    """Where candidates are evaluated (see :func:`ptxfactory.daemon.backends.make_backend`)."""

    auto = "auto"
    gpu = "gpu"
    simulated = "simulated"
    none = "none"


class PolicyChoice(str, Enum):
    """The bandit that picks the next generator (see :mod:`ptxfactory.search.policy`)."""

    ucb = "ucb"
    thompson = "thompson"


BACKEND_HELP = ("auto: the GPU when NVML sees one, else compile only; gpu: require a GPU; none: compile only; "
                "simulated: a fake device for tests (verifies nothing)")
STORE_HELP = "lesson store, SQLite (default: $PTXFACTORY_HOME/lessons.sqlite, else ~/.local/share/ptxfactory/lessons.sqlite)"


# typer >= 0.2x vendors click as ``typer._click``; older versions use click itself. Either way
# ``typer.BadParameter`` derives from the UsageError class in use.
_UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


@contextmanager
def _usage_errors_exit_1() -> Iterator[None]:
    try:
        yield
    except _UsageError as exc:
        exc.exit_code = EXIT_BAD_INPUT
        raise


class _Group(TyperGroup):
    """Command-line usage errors exit 1 (bad input), not click's 2, which ``optimise`` uses for "nothing faster"."""

    def make_context(self, *args, **kwargs):
        with _usage_errors_exit_1():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with _usage_errors_exit_1():
            return super().invoke(ctx)


def exit_code(summary: JobSummary) -> int:
    """0 faster verified candidate, 2 none faster, 3 compile only (no GPU), 130 cancelled."""
    if summary.state == "compile_only":
        return EXIT_NO_GPU
    if summary.state == "cancelled":
        return EXIT_INTERRUPTED
    best = summary.row(summary.best_key)
    if best is None or getattr(best.result, "simulated", False):  # a simulated backend verifies nothing
        return EXIT_NOT_FASTER
    return EXIT_FASTER


def candidate_table(summary: JobSummary) -> Table:
    """The rich table of every candidate: #, generator, change, verified, resources, timing per bench size, speedup."""
    styles = {"verified": "green", "simulated": "yellow", "failed": "red", "not_run": "dim"}
    where = summary.gpu.name if summary.gpu else "no GPU: compiled only"
    table = Table(title=Text(f"{summary.kernel} ({where})"), title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("generator", no_wrap=True)
    table.add_column("change", overflow="fold", max_width=48)
    table.add_column("verified", overflow="fold", max_width=48)
    table.add_column("resources")
    sizes = report.bench_sizes(summary)
    for s in sizes:
        table.add_column(Text(report.size_label(s).replace(" ", "\n")), justify="right")
    if sizes:
        table.add_column("speedup", justify="right", no_wrap=True)
    for v in report.row_views(summary):
        cells = [
            Text(f"★{v.number}" if v.is_best else str(v.number)),
            Text(v.generator),
            Text(v.change),
            Text(v.verdict, style=styles[v.status]),
            Text(v.resources),
            *(Text(report.timing_text(t, sep="\n")) for t in v.timings),
        ]
        if sizes:
            cells.append(Text(report.speedup_text(v.speedup, v.interval, None if v.is_baseline else v.significant)))
        table.add_row(*cells, style="bold" if v.is_best else None)
    return table


class _ProgressBar:
    """The job's progress, fed by its ``on_progress`` callback, on stderr: a rich progress bar on a terminal (gone
    when the job ends); elsewhere (a pipe, a CI log, a file) one plain line per notification, seconds since the
    start first, so a headless run that is cut off still says how far it got and what it was doing."""

    def __init__(self, console: Console):
        self.console = console
        self.bar = Progress(
            SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal,
        )
        self.task = self.bar.add_task("starting", total=None)
        self.started = time.monotonic()

    def show(self, done: int | None, total: int | None, text: str) -> None:
        """The bar's state on a terminal; a plain line ``  12.3 s  [done/total] text`` elsewhere."""
        self.bar.update(self.task, completed=done or 0, total=total or None, description=text[:100])
        if not self.console.is_terminal:
            count = f"[{done}/{total}] " if total else ""
            self.console.print(Text(f"{time.monotonic() - self.started:7.1f} s  {count}{text}"), soft_wrap=True)
            self.console.file.flush()

    def __enter__(self) -> "_ProgressBar":
        self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def __call__(self, p) -> None:
        if p.row is not None:
            r = p.row.result
            status = f"{r.speedup:.2f}x" if isinstance(r, Measured) else r.outcome.replace("_", " ")
            took = getattr(r, "wall_s", None)  # the GPU worker's seconds on it (verification and timing)
            text = f"#{p.done - 1} {p.row.candidate.generator}: {p.row.candidate.description}: {status}"
            if took:
                parts = [f"verify {r.verify_s:.1f} s"] if r.verify_s else []
                parts += [f"Python reference {r.reference_s:.1f} s"] if r.reference_s >= 0.05 else []
                text += f" ({took:.1f} s{': ' + ', '.join(parts) if parts else ''})"
        elif p.done == 0:
            text = p.message
        elif p.done == p.total:  # the job's end: its message is the final line, printed once after the table
            self.bar.update(self.task, completed=p.done, total=p.total, description="done")
            return
        else:
            text = p.message
        self.show(p.done, p.total, text)


async def run_job(
    file: Path, kernel: str, backend_name: str, store_path: Path | None, max_candidates: int, on_progress, on_interrupt=None,
    **search,
) -> JobSummary:
    """Open the backend and the lesson store, run :func:`~ptxfactory.search.strategy.optimise`, close both.

    ``search`` passes the search's other limits and choices through (``patience``, ``max_seconds``,
    ``policy``, ``use_lessons``).

    ``--backend gpu`` on a machine without a GPU falls back to compile only (exit code 3). A first
    SIGINT or SIGTERM (``timeout``, a CI runner) cancels the job after the current candidate (``on_interrupt``
    is called), and the partial report is written; a second one aborts.
    """
    from ptxfactory.harness.backend import NoGpu
    from ptxfactory.search.lessons import LessonStore
    from ptxfactory.search.strategy import optimise

    from .backends import make_backend

    try:
        backend = make_backend(backend_name)  # type: ignore[arg-type]
    except NoGpu:
        backend = None
    cancel = asyncio.Event()
    loop = asyncio.get_running_loop()

    signals = (signal.SIGINT, signal.SIGTERM)

    def interrupted() -> None:
        if cancel.is_set():
            return
        cancel.set()
        for sig in signals:  # the second one takes its default action: abort
            loop.remove_signal_handler(sig)
        if on_interrupt:
            on_interrupt()

    try:
        for sig in signals:
            loop.add_signal_handler(sig, interrupted)
        handler = True
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
        handler = False
    store = None
    try:
        store = await LessonStore.open(store_path)
        return await optimise(file, kernel, backend=backend, store=store, on_progress=on_progress,
                              max_candidates=max_candidates, cancel=cancel, **search)
    finally:
        if handler:
            for sig in signals:
                loop.remove_signal_handler(sig)
        if backend is not None:
            await backend.close()
        if store is not None:
            await store.close()


def _run(coro):
    """Run ``coro`` on a uvloop event loop (Python 3.11 and 3.12)."""
    import uvloop

    return uvloop.run(coro)


def _console(stderr: bool = False) -> Console:
    """A rich console; 160 columns when not a terminal (CI logs, pipes), so the table is not squeezed to 80."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 160)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _error(console: Console, exc: BaseException) -> None:
    """``FILE:LINE: KEY: message`` in red on one line; any further lines (a compiler log) plain below."""
    first, *rest = str(exc).splitlines() or [type(exc).__name__]
    console.print(Text(first, style="bold red"), soft_wrap=True)
    for line in rest:
        console.print(Text(line), soft_wrap=True)


def _kernel_for(file: Path, kernel: str | None) -> str:
    """``--kernel``, or the one kernel FILE.toml describes; exits with code 1 (the spec's error shown) otherwise."""
    if kernel is not None:
        return kernel
    from ptxfactory.protocol.spec import sole_kernel
    try:
        return sole_kernel(file)
    except SpecError as exc:
        _error(_console(stderr=True), exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def _pass_kind(name: str) -> str:
    """A pass variant's pass (``rowpar_lanes32`` -> ``rowpar``): the priors' rule, imported here so that `ptxfactory
    --help` stays fast."""
    from ptxfactory.search.priors import pass_kind
    return pass_kind(name)


def _final_lines(summary: JobSummary, out_dir: Path) -> list[Text]:
    code = exit_code(summary)
    where = _shown(out_dir)
    style = {EXIT_FASTER: "bold green", EXIT_NOT_FASTER: "yellow", EXIT_NO_GPU: "yellow", EXIT_INTERRUPTED: "yellow"}[code]
    lines = [Text(report.result_line(summary), style=style)]
    if summary.agent_spend is not None:
        lines.append(Text(summary.agent_spend.describe()))
    if summary.families_refused:
        lines.append(Text(f"no expert family fits this kernel ({', '.join(n for n, _ in summary.families_refused)}): why, in report.md"))
    if summary.passes_refused:
        n = len({_pass_kind(name) for passes, why in summary.passes_refused if why != PASSES_SILENT for name in passes.split(", ")})
        lines.append(Text(f"{n} transform passes never applied: why, in report.md"))
    if summary.gpu is not None and summary.gpu.simulated:
        lines.append(Text(f"simulated device: nothing ran on a GPU and nothing was verified (tests only): no {report.best_name(summary)}", style="yellow"))
    if code == EXIT_FASTER:
        lines.append(Text(f"wrote {where}/{report.best_name(summary)}, report.md, report.json"))
    else:
        lines.append(Text(f"{'partial report' if code == EXIT_INTERRUPTED else 'report'}: {where}/report.md"))
    return lines


def _out_base(out: Path) -> Path:
    """Where ``--out``'s trust ends: its parent, or the nearest ancestor that exists when the parent is missing
    (the folders below it are then created 0700, each opened without following a link)."""
    base = Path(os.path.abspath(out)).parent
    while not os.path.lexists(base) and base.parent != base:
        base = base.parent
    return base


def _missing_folders(out_dir: Path, base: Path) -> list[Path]:
    """The folders of ``out_dir`` below ``base`` that do not exist yet, deepest first."""
    missing, path = [], Path(os.path.abspath(out_dir))
    base = Path(os.path.abspath(base))
    while path != base and path.parent != path and not os.path.lexists(path):
        missing.append(path)
        path = path.parent
    return missing


def optimise_command(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="CUDA source file; its spec is FILE.toml beside it", show_default=False)],
    kernel: Annotated[str | None, typer.Option("--kernel", "-k", help="name of the __global__ function to optimise (default: the one kernel FILE.toml describes)", show_default=False)] = None,
    backend: Annotated[BackendChoice, typer.Option(help=BACKEND_HELP)] = BackendChoice.auto,
    max_candidates: Annotated[int, typer.Option(min=1, help="evaluate at most this many candidates")] = 64,
    max_seconds: Annotated[float | None, typer.Option(min=1, help="stop starting new candidates after this many seconds", show_default=False)] = None,
    patience: Annotated[int, typer.Option(min=0, help="stop after this many candidates in a row without a 1% gain (nor a 3% lead at one bench size) (0: never)")] = 24,
    policy: Annotated[PolicyChoice, typer.Option(help="how the search picks the next generator")] = PolicyChoice.ucb,
    lessons: Annotated[bool, typer.Option("--lessons/--no-lessons", help="order the search by lessons from past jobs")] = True,
    out: Annotated[Path | None, typer.Option(help="report folder (default: FILE's folder/ptxfactory-out/KERNEL)", show_default=False)] = None,
    store: Annotated[Path | None, typer.Option(help=STORE_HELP, show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the job summary as JSON on stdout instead of the table")] = False,
) -> None:
    """Generate, compile, verify and time candidate rewrites of KERNEL in FILE.

    Shows progress, then a table of every candidate, and writes best.cu, report.md and
    report.json to the report folder.
    """
    from ptxfactory.search.strategy import JobError  # imported here: `ptxfactory --help` stays fast

    kernel = _kernel_for(file, kernel)
    stdout = _console()
    stderr = _console(stderr=True)
    say = stderr if as_json else stdout
    out_dir = out if out is not None else file.parent / "ptxfactory-out" / kernel
    out_base = _out_base(out) if out is not None else file.parent
    made = _missing_folders(out_dir, out_base)
    try:  # the report folder is made (or refused) before the job, not after it
        os.close(report.open_output_dir(out_dir, out_base))
    except OSError as exc:
        what = f"--out {out}" if out is not None else f"report folder {out_dir}"
        _error(stderr, OSError(f"cannot use {what}: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")))
        raise typer.Exit(EXIT_BAD_INPUT) from None
    try:
        with _ProgressBar(stderr) as bar:
            summary = _run(run_job(
                file, kernel, backend.value, store, max_candidates, bar,
                on_interrupt=lambda: stderr.print("cancelling after the current candidate (Ctrl-C again to abort)"),
                max_seconds=max_seconds, patience=patience or None, policy=policy.value, use_lessons=lessons,
            ))
    except (SpecError, JobError) as exc:
        for folder in made:  # bad input leaves no empty report folder behind
            with suppress(OSError):
                os.rmdir(folder)
        _error(stderr, exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    try:  # only into real folders: ptxfactory-out/KERNEL (or --out itself) must not be a symbolic link
        write_outputs(summary, out_dir, out_base)
    except OSError as exc:
        _error(stderr, exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if as_json:
        sys.stdout.write(summary.model_dump_json(indent=2) + "\n")
    else:
        stdout.print(candidate_table(summary))
    for line in _final_lines(summary, out_dir):
        say.print(line, soft_wrap=True)
    raise typer.Exit(exit_code(summary))


SOCKET_HELP = "the daemon's unix socket (default: $XDG_RUNTIME_DIR/ptxfactory/daemon.sock, else /tmp/ptxfactory-$UID/daemon.sock)"
JOBS_HELP = "the job store, SQLite (default: jobs.sqlite beside the lesson store)"


def _socket(path: Path | None) -> Path:
    from .paths import default_socket

    return path if path is not None else default_socket()


def serve_command(
    stdio: Annotated[bool, typer.Option("--stdio", help="one session on stdin/stdout with an in-process engine (the editor starts this process)")] = False,
    socket: Annotated[Path | None, typer.Option("--socket", help=SOCKET_HELP, show_default=False)] = None,
    tcp: Annotated[int | None, typer.Option("--tcp", metavar="PORT", help="also listen on this TCP port (0: any free port; it is logged)", show_default=False)] = None,
    host: Annotated[str, typer.Option("--host", help="address of the TCP listener (prefer loopback and an SSH tunnel)")] = "127.0.0.1",
    token_file: Annotated[Path | None, typer.Option("--token-file", help="TCP clients must send the token in this file (yours, mode 0600) as initializationOptions.token; default: $PTXFACTORY_TOKEN, else a new random token; either way it is written to <socket>.token (0600) for your clients", show_default=False)] = None,
    token: Annotated[str | None, typer.Option("--token", hidden=True, help="deprecated: every user sees it in ps; use --token-file or $PTXFACTORY_TOKEN", show_default=False)] = None,
    backend: Annotated[BackendChoice, typer.Option(help=BACKEND_HELP)] = BackendChoice.auto,
    store: Annotated[Path | None, typer.Option(help=STORE_HELP, show_default=False)] = None,
    jobs: Annotated[Path | None, typer.Option("--jobs", help=JOBS_HELP, show_default=False)] = None,
    max_candidates: Annotated[int, typer.Option(min=1, help="evaluate at most this many candidates per job")] = 64,
) -> None:
    """Run the daemon: the GPU worker, the job queue and the stores, for every editor and CLI on this host.

    Listens on a unix socket (owner-only) and, with --tcp, on a loopback TCP port that serves only
    clients sending the daemon's token (see --token-file). Editors run `ptxfactory lsp` (a stdio
    bridge to this daemon), or connect to the TCP port directly.
    With --stdio: the language server for one editor on stdin/stdout instead (no daemon).
    """
    if stdio:
        if socket is not None or tcp is not None or token is not None or token_file is not None or jobs is not None:
            _error(Console(stderr=True), RuntimeError("--stdio takes no --socket, --tcp, --token-file or --jobs"))
            raise typer.Exit(EXIT_BAD_INPUT)
        from ptxfactory.daemon.lsp.server import serve_stdio

        serve_stdio(backend_name=backend.value, store_path=str(store) if store else None)
        return
    from .engine import StoreBusy
    from .paths import TokenError, UnsafePath
    from .serve import AlreadyRunning, serve_daemon

    if token is not None:
        Console(stderr=True).print(Text("warning: --token is visible to every user of this host (ps); "
                                        "use --token-file FILE (mode 0600) or $PTXFACTORY_TOKEN", style="yellow"), soft_wrap=True)
    try:
        serve_daemon(_socket(socket), tcp_port=tcp, host=host, token=token, token_file=token_file, backend_name=backend.value,
                     store_path=store, jobs_path=jobs, max_candidates=max_candidates)
    except (AlreadyRunning, StoreBusy, UnsafePath, TokenError, ValueError, OSError) as exc:
        _error(Console(stderr=True), exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def lsp_command(
    socket: Annotated[Path | None, typer.Option("--socket", help=SOCKET_HELP, show_default=False)] = None,
    backend: Annotated[BackendChoice, typer.Option(help="backend of the daemon, when this command has to start it")] = BackendChoice.auto,
    store: Annotated[Path | None, typer.Option(help=STORE_HELP + "; when this command has to start the daemon", show_default=False)] = None,
    stdio: Annotated[bool, typer.Option("--stdio", hidden=True, help="accepted for editors that pass it")] = False,
) -> None:
    """What an editor runs: relay LSP on stdin/stdout to the daemon, starting the daemon if none runs.

    Over SSH this is the whole remote setup: make the editor's server command `ssh gpu-host ptxfactory lsp`.
    """
    from .bridge import run_bridge

    raise typer.Exit(run_bridge(_socket(socket), backend.value, str(store) if store else None))


EXIT_DAEMON_STOPPED = 75

WATCH_EXIT_CODES_HELP = EXIT_CODES_HELP + """
* 1: the job failed (or no daemon answers, or no such job)

* 75: the daemon stopped (or died) while the job was followed; the job resumes when the daemon restarts
"""


def _remote(coro):
    """Run a coroutine against the daemon; connection problems exit 1 with one line; a daemon that goes away while
    a job is followed exits 75 (:data:`EXIT_DAEMON_STOPPED`) saying the job will resume."""
    from .client import DaemonError, NoDaemon
    from .remote import DaemonStopped, NoSuchJob

    try:
        return _run(coro)
    except DaemonStopped as exc:
        _error(_console(stderr=True), exc)
        raise typer.Exit(EXIT_DAEMON_STOPPED) from None
    except (NoDaemon, NoSuchJob, DaemonError, ConnectionError) as exc:
        _error(_console(stderr=True), exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def _jobs_path(store: Path | None, jobs: Path | None) -> Path:
    from .paths import default_jobs_path

    return jobs or default_jobs_path(store)


def _when(t: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def jobs_command(
    socket: Annotated[Path | None, typer.Option("--socket", help=SOCKET_HELP, show_default=False)] = None,
    active: Annotated[bool, typer.Option("--active", help="only queued and running jobs")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="at most this many (newest first)")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON list of jobs")] = False,
    store: Annotated[Path | None, typer.Option(help=STORE_HELP + "; read when no daemon runs", show_default=False)] = None,
    jobs: Annotated[Path | None, typer.Option("--jobs", help=JOBS_HELP, show_default=False)] = None,
) -> None:
    """List the daemon's jobs, newest first (from the job store when no daemon runs)."""
    from .remote import list_jobs

    found, source = _remote(list_jobs(_socket(socket), _jobs_path(store, jobs), active=active, limit=limit))
    if as_json:
        sys.stdout.write(json.dumps([j.model_dump() for j in found], indent=2) + "\n")
        return
    console = _console()
    if not found:
        console.print(Text(f"no jobs ({source})"), soft_wrap=True)
        return
    table = Table(title=Text(f"{len(found)} job(s) ({source})"), title_justify="left")
    for name in ("job", "state", "kernel", "file", "progress", "best", "updated"):
        table.add_column(name, justify="right" if name in ("progress", "best") else "left", overflow="fold")
    for j in found:
        best = report.speedup_text(j.best_speedup) + (" (simulated)" if j.simulated else "") if j.best_speedup else ""
        table.add_row(j.job_id, j.state, j.kernel, _shown(Path(j.path)), f"{j.done}/{j.total}" if j.total else str(j.done),
                      best, _when(j.updated))
    console.print(table)


class _Watcher:
    """Prints progress notifications: JSON lines with --json, else as :class:`_ProgressBar` does."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.bar = _ProgressBar(_console(stderr=True)) if not as_json else None

    def __enter__(self):
        if self.bar:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.__exit__(*exc)

    def __call__(self, note) -> None:
        if self.as_json:
            sys.stdout.write(note.model_dump_json(exclude_none=True) + "\n")
            sys.stdout.flush()
        elif self.bar is not None:
            self.bar.show(note.done, note.total, note.message or note.kind)


def _final(info, as_json: bool) -> None:
    from .remote import job_exit_code

    if as_json:  # one line: the last of the JSON lines (progress notifications before it)
        sys.stdout.write(info.model_dump_json() + "\n")
    else:
        best = f"; best {info.best_speedup:.2f}x{' (simulated, not verified)' if info.simulated else ''}" if info.best_speedup else ""
        _console().print(Text(f"job {info.job_id} ({info.kernel}): {info.state}: {info.message}{best}"), soft_wrap=True)
    raise typer.Exit(job_exit_code(info))


def watch_command(
    job: Annotated[str, typer.Argument(metavar="JOB", help="the job's id (see `ptxfactory jobs`)", show_default=False)],
    socket: Annotated[Path | None, typer.Option("--socket", help=SOCKET_HELP, show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines: each progress notification, then the final job (JobInfo)")] = False,
) -> None:
    """Follow a job's progress until it ends (exit codes as for optimise; 1 when it failed; 75 when the daemon
    stopped meanwhile: the job resumes when it restarts)."""
    from .remote import watch_job

    with _Watcher(as_json) as w:
        info = _remote(watch_job(_socket(socket), job, w))
    _final(info, as_json)


def cancel_command(
    job: Annotated[str, typer.Argument(metavar="JOB", help="the job's id (see `ptxfactory jobs`)", show_default=False)],
    socket: Annotated[Path | None, typer.Option("--socket", help=SOCKET_HELP, show_default=False)] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="wait until the job has stopped")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print the answer (and the final job) as JSON")] = False,
) -> None:
    """Cancel a job: it stops after the candidate in flight; what was measured is kept."""
    from .remote import cancel_job

    result, final = _remote(cancel_job(_socket(socket), job, wait=wait))
    if as_json:
        sys.stdout.write(json.dumps({"cancel": result.model_dump(), "job": final.model_dump() if final else None}, indent=2) + "\n")
        return
    said = "cancelled" if result.cancelled else f"not running (it is {result.state})"
    line = f"job {job}: {said}"
    if final is not None and result.cancelled:
        line += f"; stopped: {final.state}, {final.done} candidate(s) kept"
    _console().print(Text(line), soft_wrap=True)


def report_command(
    job: Annotated[str, typer.Argument(metavar="JOB", help="the job's id (see `ptxfactory jobs`)", show_default=False)],
    socket: Annotated[Path | None, typer.Option("--socket", help=SOCKET_HELP, show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the job summary (report.json) instead")] = False,
    store: Annotated[Path | None, typer.Option(help=STORE_HELP + "; read when no daemon runs", show_default=False)] = None,
    jobs: Annotated[Path | None, typer.Option("--jobs", help=JOBS_HELP, show_default=False)] = None,
) -> None:
    """Print an ended job's report (Markdown); the daemon also writes it beside the source (ptxfactory-out/KERNEL/)."""
    from .remote import report_job

    markdown, summary_json, where = _remote(report_job(_socket(socket), _jobs_path(store, jobs), job))
    if as_json:
        sys.stdout.write((summary_json or "null") + "\n")
    else:
        sys.stdout.write(markdown if markdown.endswith("\n") else markdown + "\n")
        _console(stderr=True).print(Text(f"({where})"), soft_wrap=True)


def submit_command(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="CUDA source file; its spec is FILE.toml beside it", show_default=False)],
    kernel: Annotated[str | None, typer.Option("--kernel", "-k", help="name of the __global__ function to optimise (default: the one kernel FILE.toml describes)", show_default=False)] = None,
    socket: Annotated[Path | None, typer.Option("--socket", help=SOCKET_HELP, show_default=False)] = None,
    watch: Annotated[bool, typer.Option("--watch", help="follow the job until it ends (exit codes as for optimise)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (with --watch: JSON lines, as watch --json)")] = False,
) -> None:
    """Queue a job on the daemon (the file as saved on disk); prints its id at once unless --watch."""
    from .remote import submit_job

    kernel = _kernel_for(file, kernel)
    with _Watcher(as_json) as w:
        started, final = _remote(submit_job(_socket(socket), file, kernel, watch=watch, on_event=w if watch else None))
    if final is not None:
        _final(final, as_json)
    if as_json:
        sys.stdout.write(started.model_dump_json() + "\n")
    else:
        _console().print(Text(f"job {started.job_id}" + (" (already running)" if started.already_running else " queued")), soft_wrap=True)


def lessons_command(
    store: Annotated[Path | None, typer.Option(help=STORE_HELP, show_default=False)] = None,
) -> None:
    """List the experiments in the lesson store grouped by generator, then the distilled lessons (one per knob,
    kernel class and arch) with their evidence counts."""
    from ptxfactory.search.lessons import LessonStore, default_path

    async def load():
        db = await LessonStore.open(store)
        try:
            return await db.experiments(), await db.lessons(), await db.agent_lessons(limit=200)
        finally:
            await db.close()

    path = store or default_path()
    experiments, lessons, agent_lessons = _run(load())
    console = _console()
    if agent_lessons:  # the agents' ideas in words (search/agents/): class first, then by measured effect
        ideas = Table(title=Text(f"{len(agent_lessons)} agent lessons, by kernel class and measured effect"), title_justify="left")
        for name in ("class / arch", "idea", "outcome", "effect", "lesson"):
            ideas.add_column(name, justify="right" if name == "effect" else "left")
        for a in sorted(agent_lessons, key=lambda a: (a["kernel_class"], a["effect"] is None, -(a["effect"] or 0))):
            ideas.add_row(Text(f"{a['kernel_class']} / {a['arch']}"), Text(a["idea"]), Text(a["outcome"]),
                          report.speedup_text(a["effect"]), Text(a["lesson"] or ""))
        console.print(ideas)
    if not experiments:
        console.print(Text(f"no experiments in {path}"), soft_wrap=True)
        return
    groups = report.lesson_groups(experiments)
    jobs = len({e["job_id"] for e in experiments})
    table = Table(title=Text(f"{len(experiments)} experiments from {jobs} jobs in {path}"), title_justify="left")
    for name in ("generator", "experiments", *(o.replace("_", " ") for o in report.OUTCOMES), "kernels", "best", "median"):
        table.add_column(name, justify="left" if name == "generator" else "right")
    for g in groups:
        table.add_row(
            Text(g.generator), str(g.total), *(str(g.counts.get(o, 0)) for o in report.OUTCOMES), str(len(g.kernels)),
            report.speedup_text(g.best), report.speedup_text(g.median),
        )
    console.print(table)
    if lessons:
        distilled = Table(title=Text(f"{len(lessons)} lessons (GPU runs and refusals made before any run; simulated runs left out), most evidence first"), title_justify="left")
        for name in ("class / arch", "knob", "tried", "kernels", "verified", "faster", "broke", "median", "mostly broke on"):
            distilled.add_column(name, justify="left" if name in ("class / arch", "knob", "mostly broke on") else "right")
        for lesson in lessons:
            distilled.add_row(
                Text(f"{lesson.kernel_class} / {lesson.arch}"), Text(lesson.knob), str(lesson.tried), str(lesson.kernels),
                str(lesson.verified), str(lesson.faster), str(lesson.broke), report.speedup_text(lesson.median_speedup),
                Text(lesson.top_failure or ""),
            )
        console.print(distilled)


def init_command(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="CUDA source file; the spec is written to FILE.toml beside it", show_default=False)],
    kernel: Annotated[list[str] | None, typer.Option("--kernel", "-k", help="the __global__ function to describe (repeatable; default: every kernel the spec lacks)", show_default=False)] = None,
) -> None:
    """Write a spec for a kernel that has none, from its signature: roles, dtypes, size symbols, the launch.

    FILE.toml is created; when it exists, the new \\[kernel.NAME] tables are appended and nothing in it
    changes (a kernel it already describes is refused). Every guess is marked TODO. Exit code 1: bad input.
    """
    from ptxfactory.harness.scaffold import ScaffoldError, init_spec

    console = _console()
    try:
        added = init_spec(file, kernel or None)
    except ScaffoldError as exc:
        _error(_console(stderr=True), exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    verb = "wrote" if added.create else "appended to"
    tables = ", ".join(f"[kernel.{k}]" for k in added.kernels)
    console.print(Text(f"{verb} {_shown(added.path)}: {tables}; {len(added.todos)} TODOs to check:", style="bold green"), soft_wrap=True)
    for line, message in added.todos:
        console.print(Text(f"{_shown(added.path)}:{line}: {message}"), soft_wrap=True)
    errors = _console(stderr=True)
    for warning in added.warnings:  # what the tool runs otherwise than the program (constant memory it cannot set)
        errors.print(Text(f"warning: {warning}", style="bold yellow"), soft_wrap=True)


def show_command(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="the .cu or .ptx file a job ran on", show_default=False)],
    kernel: Annotated[str | None, typer.Option("--kernel", "-k", help="the kernel (__global__ function or .entry; default: the one kernel FILE.toml describes)", show_default=False)] = None,
    candidate: Annotated[int | None, typer.Option("--candidate", "-n", min=0, help="candidate number as in the report (0: the original; default: the best)", show_default=False)] = None,
    sass: Annotated[bool, typer.Option("--sass/--ptx", help="SASS (nvdisasm or cuobjdump of the cubin) or PTX")] = False,
    report_json: Annotated[Path | None, typer.Option("--report", help="a job's report.json (default: the job store, then FILE's ptxfactory-out/KERNEL/report.json)", show_default=False)] = None,
    store: Annotated[Path | None, typer.Option(help=STORE_HELP, show_default=False)] = None,
) -> None:
    """Print the PTX or SASS of a job's candidate, its innermost loops marked. Needs no GPU. Exit code 1: bad input."""
    from .paths import default_jobs_path
    from .show import ShowError, find_summary, listing

    kernel = _kernel_for(file, kernel)
    try:
        summary = find_summary(file.resolve(), kernel, report_json, default_jobs_path(store))
        shown = listing(summary, candidate, "sass" if sass else "ptx")
    except ShowError as exc:
        _error(_console(stderr=True), exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    sys.stdout.write(shown.text)


def profile_command(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="the .cu or .ptx file with the kernel (and FILE.toml)", show_default=False)],
    kernel: Annotated[str | None, typer.Option("--kernel", "-k", help="the kernel (__global__ function or .entry; default: the one kernel FILE.toml describes)", show_default=False)] = None,
    candidate: Annotated[int | None, typer.Option("--candidate", "-n", min=0, help="a job's candidate, numbered as in the report (0: the original; default: the kernel as written in FILE)", show_default=False)] = None,
    counters: Annotated[bool, typer.Option("--counters/--no-counters", help="run Nsight Compute (ncu) for the hardware counters, where a GPU and ncu are")] = True,
    report_json: Annotated[Path | None, typer.Option("--report", help="a job's report.json, for --candidate (default: the job store, then FILE's ptxfactory-out/KERNEL/report.json)", show_default=False)] = None,
    store: Annotated[Path | None, typer.Option(help=STORE_HELP, show_default=False)] = None,
) -> None:
    """Print a kernel's resources (registers, spills, shared memory, occupancy), its SASS summary and Nsight Compute's
    counters (or why there are none): what the agents' planner is shown. Exit code 1: bad input."""
    from .paths import default_jobs_path
    from .profile import ProfileError, profile

    kernel = _kernel_for(file, kernel)
    try:
        found = profile(file.resolve(), kernel, candidate, report_json, default_jobs_path(store) if candidate is not None else None,
                        counters=counters)
    except ProfileError as exc:
        _error(_console(stderr=True), exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    console = _console()
    console.print(Text(f"{found.what}, {found.arch}; launch {found.candidate.launch.describe()}", style="bold"), soft_wrap=True)
    table = Table(title=Text("resources (ptxas)"), title_justify="left", show_header=False)
    r = found.resources
    for name, value in (("registers/thread", r.registers if r else "?"), ("spills (stored / loaded)", f"{r.spill_stores} B / {r.spill_loads} B" if r else "?"),
                        ("static shared memory/block", f"{r.shared_bytes} B" if r else "?"), ("local memory (stack)/thread", f"{r.local_bytes} B" if r else "?"),
                        ("theoretical occupancy", found.occupancy)):
        table.add_row(Text(name), Text(str(value)))
    console.print(table)
    console.print(Text("SASS", style="bold"))
    console.print(Text(found.sass), soft_wrap=True)
    size = " ".join(f"{k}={v}" for k, v in found.size.items())
    console.print(Text(f"Nsight Compute, one launch at {size}", style="bold"))
    for line in found.counters.lines():
        console.print(Text(f"- {line}"), soft_wrap=True)


def build_app() -> typer.Typer:
    """The ``ptxfactory`` typer app: ``optimise``, ``serve``, ``lsp``, ``jobs``, ``watch``, ``cancel``, ``report``, ``submit``, ``lessons``, ``init``."""
    app = typer.Typer(
        cls=_Group, name="ptxfactory", no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False,
        help="Generate, verify, time and learn faster rewrites of CUDA kernels.",
    )
    app.command("optimise", epilog=EXIT_CODES_HELP)(optimise_command)
    app.command("serve")(serve_command)
    app.command("lsp")(lsp_command)
    app.command("jobs")(jobs_command)
    app.command("watch", epilog=WATCH_EXIT_CODES_HELP)(watch_command)
    app.command("cancel")(cancel_command)
    app.command("report")(report_command)
    app.command("submit", epilog=WATCH_EXIT_CODES_HELP)(submit_command)
    app.command("lessons")(lessons_command)
    app.command("init")(init_command)
    app.command("show")(show_command)
    app.command("profile")(profile_command)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default: ``sys.argv[1:]``) and return its exit code."""
    try:
        build_app()(args=list(argv) if argv is not None else None, prog_name="ptxfactory")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0
