"""The LSP surface's custom shapes: command names, command arguments and results, the progress notification.

Editors send ``workspace/executeCommand`` with ``command`` one of :data:`COMMANDS` and ``arguments``
a one-element list holding the command's argument object (e.g. ``[{"uri": ..., "kernel": ...}]``).
:func:`json_schemas` exports every model as JSON Schema for the editor plugins.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

OPTIMISE = "ptxfactory.optimise"
CANCEL = "ptxfactory.cancel"
COMMANDS = (OPTIMISE, CANCEL)

PROGRESS_NOTIFICATION = "ptxfactory/progress"
"""Sent instead of ``$/progress`` to clients that do not declare ``window.workDoneProgress``."""

CODE_ACTION_KIND = "refactor.rewrite.ptxfactory"
"""Kind of the "Apply candidate" code actions."""

JobState = Literal["running", "finished", "compile_only", "cancelled", "failed"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OptimiseArgs(_Model):
    """Arguments of ``ptxfactory.optimise``: the document and the ``__global__`` kernel to optimise."""

    uri: str = Field(min_length=1, description="file: URI of the .cu/.cuh document; its spec is <file>.toml")
    kernel: str = Field(min_length=1, description="name of the __global__ function (a [kernel.NAME] table of the spec)")


class OptimiseResult(_Model):
    """Result of ``ptxfactory.optimise``, returned at once; the job runs in the background."""

    job_id: str
    token: str = Field(description="the work-done progress token (or the token field of ptxfactory/progress)")
    already_running: bool = Field(default=False, description="a job for this kernel was running; this is its id")


class CancelArgs(_Model):
    """Arguments of ``ptxfactory.cancel``."""

    job_id: str = Field(min_length=1)


class CancelResult(_Model):
    """Result of ``ptxfactory.cancel``: ``cancelled`` is false when the job had already ended."""

    job_id: str
    cancelled: bool
    state: JobState


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


def json_schemas() -> dict[str, dict]:
    """JSON Schema of every custom shape, by name (for the editor plugins)."""
    models = (OptimiseArgs, OptimiseResult, CancelArgs, CancelResult, ProgressNotification)
    return {m.__name__: m.model_json_schema() for m in models}
