"""A daemon job in memory: :class:`JobRecord` (state, rows so far, progress, summary), and what is derived from it.

Plain data plus asyncio events, no LSP and no SQL: the engine fills it in, sessions read it.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from pygls import uris

from ptxfactory.protocol import CandidateRow, JobSummary
from ptxfactory.protocol.job import best_row, ranked_faster
from ptxfactory.protocol.lsp import FINAL_STATES, JobInfo, JobState

def path_key(uri_or_path: str | Path) -> str:
    """The key a document is known by across sessions: its normalised absolute file system path.

    Editors spell the same file's URI differently (percent-encoding, ``file://`` vs ``file:///``);
    the path is what they agree on. Non-``file:`` URIs are kept as they are.
    """
    text = str(uri_or_path)
    if text.startswith("file:"):
        text = uris.to_fs_path(text) or text
    elif "://" in text:
        return text
    return os.path.normpath(os.path.abspath(text))


@dataclass
class JobRecord:
    """One job of the engine. ``rows`` grows as candidates are evaluated; ``summary`` is set when it ends."""

    job_id: str
    path: str
    uri: str
    kernel: str
    source_text: str | None = None
    state: JobState = "queued"
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    rows: list[CandidateRow] = field(default_factory=list)
    done: int = 0
    total: int = 0
    percentage: int = 0
    message: str = "queued"
    summary: JobSummary | None = None
    error: str | None = None
    resumed: bool = False
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def token(self) -> str:
        """The progress token of this job in every session (one begin..end per session)."""
        return f"ptxfactory/job/{self.job_id}"

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def baseline_key(self) -> str | None:
        if self.summary is not None:
            return self.summary.baseline_key
        return next((r.key for r in self.rows if r.candidate.generator == "original"), None)

    def baseline(self) -> CandidateRow | None:
        key = self.baseline_key
        return next((r for r in self.rows if r.key == key), None) if key else None

    def numbers(self) -> dict[str, int]:
        """Each candidate's number (its row's index), by key."""
        return {row.key: i for i, row in enumerate(self.rows)}

    def best(self) -> CandidateRow | None:
        """The job's best candidate: the summary's (``best_key``) once it has ended, else :func:`best_row` of the
        rows so far; the same notion everywhere (progress, end message, hover, code actions, report)."""
        if self.summary is not None:
            return self.summary.row(self.summary.best_key)
        return best_row(self.rows, self.baseline_key)

    def faster(self) -> list[CandidateRow]:
        """The candidates to offer, :meth:`best` first, then the other significantly faster ones, fastest first."""
        if self.summary is not None:
            return self.summary.faster()
        return ranked_faster(self.rows, self.baseline_key, self.best())

    def progress(self, done: int, total: int, message: str) -> None:
        """Record a step; the percentage never goes down and stays below 100 until the end."""
        self.done, self.total = done, max(total, done)
        self.percentage = min(99, max(self.percentage, 100 * done // max(total, 1)))
        self.message = message
        self.updated = time.time()

    def info(self) -> JobInfo:
        best = next(iter(self.faster()), None)
        return JobInfo(
            job_id=self.job_id, uri=self.uri, path=self.path, kernel=self.kernel, state=self.state, created=self.created,
            updated=self.updated, done=self.done, total=self.total, percentage=100 if self.final else self.percentage,
            message=self.message, best_speedup=best.result.speedup if best else None,
            best_candidate=best.candidate.description if best else None,
            simulated=bool(best and best.result.simulated), error=self.error,
        )


def end_message(summary: JobSummary) -> str:
    """The progress end message: the job's best (``summary.best_key``) and how many are faster, or the reason there is
    none; then what the language-model agents spent when they ran (nothing when they were off)."""
    return _end_head(summary) + agent_spend_note(summary)


def agent_spend_note(summary: JobSummary) -> str:
    """``"; agents: 7 calls, 1,050 tokens, $0.0049"`` (and why they stopped early), or ``""`` when agents were off."""
    spend = summary.agent_spend
    if spend is None:
        return ""
    note = f"; agents: {len(spend.calls)} calls, {spend.tokens:,} tokens, ${spend.cost_usd:.4f}"
    return note + (f" (stopped: {spend.stopped})" if spend.stopped else "")


def _end_head(summary: JobSummary) -> str:
    faster = summary.faster()
    if not faster:
        return summary.message
    best = faster[0]
    simulated = " (simulated)" if best.result.simulated else ""
    head = "cancelled; best so far" if summary.state == "cancelled" else "best"
    return (f"{head}: {best.result.speedup:.2f}x faster{simulated}, {best.candidate.description}; "
            f"{len(faster)} faster candidate(s), offered as code actions on the kernel")
