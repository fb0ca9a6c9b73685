"""The LSP surface's custom shapes: command names, command arguments and results, notifications.

Editors send ``workspace/executeCommand`` with ``command`` one of :data:`COMMANDS` and ``arguments``
a one-element list holding the command's argument object (e.g. ``[{"uri": ..., "kernel": ...}]``).
:func:`schema_document` exports every shape as one JSON Schema document for the editor plugins;
``python -m ptxfactory.protocol.lsp`` writes it to ``protocol/schema/lsp.schema.json`` (committed;
a test checks that the file matches these models).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

OPTIMISE = "ptxfactory.optimise"
CANCEL = "ptxfactory.cancel"
JOBS = "ptxfactory.jobs"
WATCH = "ptxfactory.watch"
REPORT = "ptxfactory.report"
SHOW = "ptxfactory.show"
COMMANDS = (OPTIMISE, CANCEL, JOBS, WATCH, REPORT, SHOW)

SHOW_SCHEME = "ptxfactory"
"""URI scheme of the read-only documents ``ptxfactory.show`` opens (served by ``workspace/textDocumentContent``)."""

PROGRESS_NOTIFICATION = "ptxfactory/progress"
"""Sent instead of ``$/progress`` to clients that do not declare ``window.workDoneProgress``."""

CODE_ACTION_KIND = "refactor.rewrite.ptxfactory"
"""Kind of the "Apply candidate" code actions."""

DIAGNOSTIC_SOURCE = "ptxfactory"
"""``source`` of the diagnostics the server publishes (compile errors, spills, spec errors)."""

JobState = Literal["queued", "running", "finished", "compile_only", "cancelled", "failed"]
FINAL_STATES = ("finished", "compile_only", "cancelled", "failed")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InitializationOptions(BaseModel):
    """``initializationOptions`` of ``initialize``. ``token``: required when the daemon listens on a
    non-loopback address (``ptxfactory serve --host ... --token T``); unknown keys are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    token: str | None = Field(default=None, description="the daemon's --token, for a TCP listener bound beyond loopback")


class OptimiseArgs(_Model):
    """Arguments of ``ptxfactory.optimise``: the document and the ``__global__`` kernel to optimise."""

    uri: str = Field(min_length=1, description="file: URI of the .cu/.cuh document; its spec is <file>.toml")
    kernel: str = Field(min_length=1, description="name of the __global__ function (a [kernel.NAME] table of the spec)")
    wait: bool = Field(default=False, description=(
        "keep the request open until the job ends and answer with its JobInfo; $/cancelRequest on it cancels the job"))


class OptimiseResult(_Model):
    """Result of ``ptxfactory.optimise``, returned at once; the job runs in the background (queued behind others)."""

    job_id: str
    token: str = Field(description="the work-done progress token (or the token field of ptxfactory/progress)")
    already_running: bool = Field(default=False, description="a job for this kernel was queued or running; this is its id")


class CancelArgs(_Model):
    """Arguments of ``ptxfactory.cancel``."""

    job_id: str = Field(min_length=1)


class CancelResult(_Model):
    """Result of ``ptxfactory.cancel``: ``cancelled`` is false when the job had already ended."""

    job_id: str
    cancelled: bool
    state: JobState


class JobInfo(_Model):
    """One job as listed by ``ptxfactory.jobs`` and answered by ``ptxfactory.watch``."""

    job_id: str
    uri: str
    path: str
    kernel: str
    state: JobState
    created: float = Field(description="seconds since the epoch")
    updated: float = Field(description="seconds since the epoch")
    done: int = Field(default=0, description="candidates evaluated so far")
    total: int = Field(default=0, description="candidates planned so far (grows when a tuning round is added)")
    percentage: int = Field(default=0, ge=0, le=100)
    message: str = ""
    best_speedup: float | None = Field(default=None, description="best speedup over the original so far (verified, or simulated)")
    best_candidate: str | None = Field(default=None, description="the best candidate's description")
    simulated: bool = Field(default=False, description="results come from the tests' SimulatedDevice: nothing was verified")
    error: str | None = None


class JobsArgs(_Model):
    """Arguments of ``ptxfactory.jobs`` (all optional): filter by document, only queued/running jobs, at most ``limit``."""

    uri: str | None = None
    active: bool = Field(default=False, description="only queued and running jobs")
    limit: int = Field(default=50, ge=1, le=1000)


class JobsResult(_Model):
    """Result of ``ptxfactory.jobs``: newest first."""

    jobs: list[JobInfo]


class WatchArgs(_Model):
    """Arguments of ``ptxfactory.watch``: send this session the job's progress (as for a session with its file open)."""

    job_id: str = Field(min_length=1)


class WatchResult(_Model):
    """Result of ``ptxfactory.watch``: the job now, and the progress token its reports will carry (none when it has ended)."""

    job: JobInfo
    token: str | None = None


class ReportArgs(_Model):
    """Arguments of ``ptxfactory.report``: write the ended job's report; ``show`` opens it with ``window/showDocument``."""

    job_id: str = Field(min_length=1)
    show: bool = True


class ReportResult(_Model):
    """Result of ``ptxfactory.report``: where ``report.md`` was written, its text, and whether the editor showed it."""

    job_id: str
    path: str
    uri: str
    markdown: str
    shown: bool = False


class ShowArgs(_Model):
    """Arguments of ``ptxfactory.show``: the PTX or SASS of a job's candidate beside the original's."""

    job_id: str = Field(min_length=1)
    candidate: int | None = Field(default=None, ge=0, description="candidate number as in the report (0: the original; default: the best)")
    view: Literal["ptx", "sass"] = "ptx"
    show: bool = Field(default=True, description="open both with window/showDocument (original first, then the candidate)")


class ShowResult(_Model):
    """Result of ``ptxfactory.show``: the ptxfactory: URIs and texts of the original's and the candidate's view
    (innermost loops marked with comment lines), and whether the editor showed them."""

    job_id: str
    candidate: int
    view: Literal["ptx", "sass"]
    original_uri: str
    original_text: str
    uri: str
    text: str
    shown: bool = False


class ProgressNotification(_Model):
    """Params of ``ptxfactory/progress``: one begin, reports, one end per job, as with work-done progress."""

    token: str
    job_id: str
    uri: str
    kernel: str
    kind: Literal["begin", "report", "end"]
    title: str | None = None
    message: str | None = None
    percentage: int | None = Field(default=None, ge=0, le=100)
    done: int | None = Field(default=None, description="candidates evaluated so far")
    total: int | None = Field(default=None, description="candidates planned so far")
    state: JobState | None = Field(default=None, description="the job's state (on end: how it ended)")


COMMAND_SHAPES: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    OPTIMISE: (OptimiseArgs, OptimiseResult),
    CANCEL: (CancelArgs, CancelResult),
    JOBS: (JobsArgs, JobsResult),
    WATCH: (WatchArgs, WatchResult),
    REPORT: (ReportArgs, ReportResult),
    SHOW: (ShowArgs, ShowResult),
}
"""Each command's argument object and result (``ptxfactory.optimise`` with ``wait`` answers a :class:`JobInfo`)."""

NOTIFICATION_SHAPES: dict[str, type[BaseModel]] = {PROGRESS_NOTIFICATION: ProgressNotification}

MODELS: tuple[type[BaseModel], ...] = (
    InitializationOptions, OptimiseArgs, OptimiseResult, CancelArgs, CancelResult, JobInfo, JobsArgs, JobsResult,
    WatchArgs, WatchResult, ReportArgs, ReportResult, ShowArgs, ShowResult, ProgressNotification,
)

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "lsp.schema.json"


def json_schemas() -> dict[str, dict]:
    """JSON Schema of every custom shape, by name (for the editor plugins)."""
    return {m.__name__: m.model_json_schema() for m in MODELS}


def schema_document() -> dict:
    """One JSON Schema document: every shape under ``$defs``, plus which command and notification uses which."""
    defs: dict[str, dict] = {}
    for model in MODELS:
        schema = model.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        defs[model.__name__] = schema
    ref = lambda m: {"$ref": f"#/$defs/{m.__name__}"}  # noqa: E731
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://ptxfactory.dev/schema/lsp.schema.json",
        "title": "ptxfactory LSP custom commands and notifications",
        "description": (
            "workspace/executeCommand: command is one of x-commands, arguments is [ARGS]; the result is RESULT. "
            f"ptxfactory.optimise with wait=true answers a JobInfo when the job ends. Code actions have kind {CODE_ACTION_KIND}; "
            f"diagnostics have source {DIAGNOSTIC_SOURCE}. Generated from protocol/lsp.py: do not edit."
        ),
        "x-commands": {name: {"arguments": ref(a), "result": ref(r)} for name, (a, r) in COMMAND_SHAPES.items()},
        "x-notifications": {name: {"params": ref(m)} for name, m in NOTIFICATION_SHAPES.items()},
        "x-initializationOptions": ref(InitializationOptions),
        "x-codeActionKind": CODE_ACTION_KIND,
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    """:func:`schema_document` as the committed file's text (sorted keys, two-space indent, final newline)."""
    return json.dumps(schema_document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m ptxfactory.protocol.lsp [PATH|-]``: write the schema (default: protocol/schema/lsp.schema.json)."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "-":
        sys.stdout.write(schema_text())
        return 0
    path = Path(args[0]) if args else SCHEMA_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(schema_text())
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
