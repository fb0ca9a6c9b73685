"""The ``ptxfactory`` command line: ``optimise`` (the main job, headless), ``serve`` (the LSP daemon), ``lessons``.

:func:`build_app` builds the typer app; :func:`main` runs it on ``argv`` and returns the exit code.
Exit codes of ``optimise`` (also in ``--help`` and README.md):

- 0: a verified candidate faster than the original was found (``best.cu`` written);
- 1: bad input: spec error, unknown kernel, signature mismatch, original does not compile, bad option;
- 2: candidates ran on the GPU but none was both verified and faster;
- 3: no NVIDIA GPU: every candidate was compiled (resources in the table), nothing was run;
- 130: interrupted (Ctrl-C); the partial report is written.
"""
from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from ptxfactory.protocol import JobSummary, Measured, SpecError

from . import report

EXIT_FASTER, EXIT_BAD_INPUT, EXIT_NOT_FASTER, EXIT_NO_GPU, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

EXIT_CODES_HELP = """\
Exit codes:

* 0: a verified candidate faster than the original was found (best.cu written)

* 1: bad input (spec error, unknown kernel, signature mismatch, original does not compile, bad option)

* 2: candidates ran on the GPU but none was both verified and faster

* 3: no NVIDIA GPU: every candidate was compiled (resources shown), nothing was run

* 130: interrupted (Ctrl-C); the partial report is written
"""


class BackendChoice(str, Enum):
    """Where candidates are evaluated (see :func:`ptxfactory.daemon.backends.make_backend`)."""

    auto = "auto"
    gpu = "gpu"
    simulated = "simulated"
    none = "none"


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
    return EXIT_FASTER if summary.best_key else EXIT_NOT_FASTER


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
            cells.append(Text(report.speedup_text(v.speedup)))
        table.add_row(*cells, style="bold" if v.is_best else None)
    return table


class _ProgressBar:
    """A rich progress bar fed by the job's ``on_progress`` callback: on stderr, only on a terminal, gone when the job ends."""

    def __init__(self, console: Console):
        self.bar = Progress(
            SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal,
        )
        self.task = self.bar.add_task("starting", total=None)

    def __enter__(self) -> "_ProgressBar":
        self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def __call__(self, p) -> None:
        if p.row is not None:
            r = p.row.result
            status = f"{r.speedup:.2f}x" if isinstance(r, Measured) else r.outcome.replace("_", " ")
            text = f"#{p.done - 1} {p.row.candidate.generator}: {p.row.candidate.description}: {status}"
        elif p.done == 0:
            text = p.message
        else:
            text = "done"
        self.bar.update(self.task, completed=p.done, total=p.total, description=text[:100])


async def run_job(
    file: Path, kernel: str, backend_name: str, store_path: Path | None, max_candidates: int, on_progress, on_interrupt=None,
) -> JobSummary:
    """Open the backend and the lesson store, run :func:`~ptxfactory.search.strategy.optimise`, close both.

    ``--backend gpu`` on a machine without a GPU falls back to compile only (exit code 3). A first
    SIGINT cancels the job after the current candidate (``on_interrupt`` is called); a second one aborts.
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

    def interrupted() -> None:
        if cancel.is_set():
            return
        cancel.set()
        loop.remove_signal_handler(signal.SIGINT)
        if on_interrupt:
            on_interrupt()

    try:
        loop.add_signal_handler(signal.SIGINT, interrupted)
        handler = True
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
        handler = False
    store = None
    try:
        store = await LessonStore.open(store_path)
        return await optimise(file, kernel, backend=backend, store=store, on_progress=on_progress,
                              max_candidates=max_candidates, cancel=cancel)
    finally:
        if handler:
            loop.remove_signal_handler(signal.SIGINT)
        if backend is not None:
            await backend.close()
        if store is not None:
            await store.close()


def _run(coro):
    """Run ``coro`` on a uvloop event loop (Python 3.11 and 3.12)."""
    import uvloop

    return uvloop.run(coro)


def write_outputs(summary: JobSummary, out_dir: Path) -> list[Path]:
    """Write ``best.cu`` (when a faster verified candidate exists; a stale one is removed), ``report.md``, ``report.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    best = summary.row(summary.best_key)
    best_path = out_dir / "best.cu"
    if best is not None:
        best_path.write_text(best.candidate.source)
        written.append(best_path)
    else:
        best_path.unlink(missing_ok=True)
    (out_dir / "report.md").write_text(report.render_markdown(summary))
    (out_dir / "report.json").write_text(summary.model_dump_json(indent=2))
    return written + [out_dir / "report.md", out_dir / "report.json"]


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


def _final_lines(summary: JobSummary, out_dir: Path) -> list[Text]:
    code = exit_code(summary)
    where = _shown(out_dir)
    style = {EXIT_FASTER: "bold green", EXIT_NOT_FASTER: "yellow", EXIT_NO_GPU: "yellow", EXIT_INTERRUPTED: "yellow"}[code]
    lines = [Text(report.result_line(summary), style=style)]
    if code == EXIT_FASTER:
        if summary.gpu is not None and summary.gpu.simulated:
            lines.append(Text("simulated device: nothing ran on a GPU and nothing was verified (tests only)", style="yellow"))
        lines.append(Text(f"wrote {where}/best.cu, report.md, report.json"))
    else:
        lines.append(Text(f"{'partial report' if code == EXIT_INTERRUPTED else 'report'}: {where}/report.md"))
    return lines


def optimise_command(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="CUDA source file; its spec is FILE.toml beside it", show_default=False)],
    kernel: Annotated[str, typer.Option("--kernel", "-k", help="name of the __global__ function to optimise", show_default=False)],
    backend: Annotated[BackendChoice, typer.Option(help=BACKEND_HELP)] = BackendChoice.auto,
    max_candidates: Annotated[int, typer.Option(min=1, help="evaluate at most this many candidates")] = 64,
    out: Annotated[Path | None, typer.Option(help="report folder (default: FILE's folder/ptxfactory-out/KERNEL)", show_default=False)] = None,
    store: Annotated[Path | None, typer.Option(help=STORE_HELP, show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the job summary as JSON on stdout instead of the table")] = False,
) -> None:
    """Generate, compile, verify and time candidate rewrites of KERNEL in FILE.

    Shows progress, then a table of every candidate, and writes best.cu, report.md and
    report.json to the report folder.
    """
    from ptxfactory.search.strategy import JobError  # imported here: `ptxfactory --help` stays fast

    stdout = _console()
    stderr = _console(stderr=True)
    say = stderr if as_json else stdout
    try:
        with _ProgressBar(stderr) as bar:
            summary = _run(run_job(
                file, kernel, backend.value, store, max_candidates, bar,
                on_interrupt=lambda: stderr.print("cancelling after the current candidate (Ctrl-C again to abort)"),
            ))
    except (SpecError, JobError) as exc:
        _error(stderr, exc)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    out_dir = out if out is not None else file.parent / "ptxfactory-out" / kernel
    write_outputs(summary, out_dir)
    if as_json:
        sys.stdout.write(summary.model_dump_json(indent=2) + "\n")
    else:
        stdout.print(candidate_table(summary))
    for line in _final_lines(summary, out_dir):
        say.print(line, soft_wrap=True)
    raise typer.Exit(exit_code(summary))


def serve_command(
    stdio: Annotated[bool, typer.Option("--stdio", help="speak LSP over stdin/stdout (the editor starts this process)")] = False,
    backend: Annotated[BackendChoice, typer.Option(help=BACKEND_HELP)] = BackendChoice.auto,
    store: Annotated[Path | None, typer.Option(help=STORE_HELP, show_default=False)] = None,
) -> None:
    """Run the language server for an editor (or over SSH: ssh gpu-host ptxfactory serve --stdio)."""
    if not stdio:
        _error(Console(stderr=True), RuntimeError("only --stdio is supported for now: ptxfactory serve --stdio"))
        raise typer.Exit(EXIT_BAD_INPUT)
    from ptxfactory.daemon.lsp.server import serve_stdio

    serve_stdio(backend_name=backend.value, store_path=str(store) if store else None)


def lessons_command(
    store: Annotated[Path | None, typer.Option(help=STORE_HELP, show_default=False)] = None,
) -> None:
    """List the experiments in the lesson store, grouped by generator, with outcome counts."""
    from ptxfactory.search.lessons import LessonStore, default_path

    async def load() -> list[dict]:
        db = await LessonStore.open(store)
        try:
            return await db.experiments()
        finally:
            await db.close()

    path = store or default_path()
    experiments = _run(load())
    console = _console()
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


def build_app() -> typer.Typer:
    """The ``ptxfactory`` typer app: ``optimise``, ``serve``, ``lessons``."""
    app = typer.Typer(
        cls=_Group, name="ptxfactory", no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False,
        help="Generate, verify, time and learn faster rewrites of CUDA kernels.",
    )
    app.command("optimise", epilog=EXIT_CODES_HELP)(optimise_command)
    app.command("serve")(serve_command)
    app.command("lessons")(lessons_command)
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
