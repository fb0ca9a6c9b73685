"""What a job reports: one row per candidate, and the job's summary. Shared by the CLI, the report and the LSP."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .agent import AgentSpend
from .candidate import Candidate
from .result import EvalResult, GpuFacts, Measured, Resources


class CandidateRow(BaseModel):
    """One evaluated candidate as shown in the table, the report and the code actions."""

    model_config = ConfigDict(extra="forbid")

    candidate: Candidate
    result: EvalResult

    @property
    def key(self) -> str:
        """The candidate's key, as its result records it (every result is made with ``candidate_key=candidate.key``;
        reading it here avoids re-hashing the source, ~0.3 ms a call)."""
        return self.result.candidate_key

    @property
    def verified(self) -> bool:
        return isinstance(self.result, Measured)

    @property
    def reason(self) -> str:
        """Why it was not verified (one line), or '' when it was."""
        r = self.result
        if r.outcome == "measured":
            return ""
        if r.outcome == "rejected":
            return f"{r.check}: {r.reason}"
        if r.outcome == "compile_failed":
            return "compile failed: " + (r.log.strip().splitlines() or [""])[0][:160]
        if r.outcome == "not_run":
            return f"not run: {r.reason}"
        if r.outcome == "crashed":
            return f"crashed: {r.reason}"
        return f"timed out after {r.seconds:.0f} s"

    @property
    def resources(self) -> Resources | None:
        return self.result.resources


PASSES_SILENT = "did not apply (these passes match a pattern and record no reason when it is absent)"  # passes_refused


class JobSummary(BaseModel):
    """A finished (or compile-only) job: every candidate's row, the baseline's key and the best verified candidate's key."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    source_path: str
    kernel: str
    state: Literal["finished", "compile_only", "failed", "cancelled"]
    gpu: GpuFacts | None = None
    rows: list[CandidateRow] = Field(default_factory=list)
    baseline_key: str
    best_key: str | None = None
    message: str = ""
    kernel_class: str | None = Field(None, description="the families whose skeleton fits the kernel, or 'generic'")
    wall_s: float | None = Field(None, description="seconds from the job's start to its end")
    gpu_busy_s: float | None = Field(None, description="seconds the GPU worker spent evaluating (None without a GPU)")
    stop_reason: str | None = Field(None, description="why the search stopped: budget, wall time, plateau, proposals exhausted")
    duplicates: int = Field(0, description="candidates dropped after compiling: the same machine code and launch as one evaluated")
    best_retimed: Measured | None = Field(None, description="the best candidate verified and timed again on a fresh plan "
                                          "(new seeds, held-out sizes and inputs) before it was reported: the speedup to quote")
    agent_spend: AgentSpend | None = Field(None, description="what the job's language-model agents spent (None: agents off)")
    passes_refused: list[tuple[str, str]] = Field(default_factory=list, description="(passes, reason): the passes that "
                                                  "left the original kernel alone, and why (the restructuring ones, "
                                                  "vectorize, the read-only hints); then the other passes that did not "
                                                  "apply, reason PASSES_SILENT")
    families_refused: list[tuple[str, str]] = Field(default_factory=list, description="(family, reason): when no expert "
                                                    "family's skeleton fits the kernel, why each one does not")
    warnings: list[str] = Field(default_factory=list, description="what the job found weak in the spec (a Python "
                                "reference whose outputs are mostly NaN on the spec's inputs; a bytes_moved the original "
                                "kernel beats, so the impossible-time floor is not applied at that size; __constant__ "
                                "memory the kernel reads, which the spec cannot set and so is zero in every run)")

    def row(self, key: str | None) -> CandidateRow | None:
        return next((r for r in self.rows if r.key == key), None) if key else None

    @property
    def noise_hi(self) -> float | None:
        """The upper end of the 95% interval of the original timed against itself (its own row, A/A), or None."""
        return noise_hi(self.rows, self.baseline_key)

    def faster(self) -> list[CandidateRow]:
        """The candidates to offer, the job's best (``best_key``, chosen by :func:`best_row` and confirmed on a fresh
        plan) first, then the other verified candidates significantly faster than the original, fastest first.
        Empty when the job named no best (nothing significant, or the best did not hold up when re-timed)."""
        return ranked_faster(self.rows, self.baseline_key, self.row(self.best_key))


TIE_FACTOR = 1.01  # candidates within 1% of the fastest are tied (run-to-run noise): the first evaluated wins


def significant_rows(rows: list[CandidateRow], baseline_key: str | None) -> list[CandidateRow]:
    """Verified candidates significantly faster than the original (:meth:`Measured.significant` against the job's
    A/A spread: the original's own row), in evaluation order."""
    noise = noise_hi(rows, baseline_key)
    return [r for r in rows if isinstance(r.result, Measured) and r.key != baseline_key and r.result.significant(noise)]


def noise_hi(rows: list[CandidateRow], baseline_key: str | None) -> float | None:
    """The upper end of the 95% interval of the original timed against itself (its own row: the job's A/A run), or None."""
    base = None
    if baseline_key:  # by the result's key (cheap); by the candidate's (hashes its source) only when that finds none
        base = next((r for r in rows if r.key == baseline_key), None) or next((r for r in rows if r.candidate.key == baseline_key), None)
    return base.result.speedup_hi if base is not None and isinstance(base.result, Measured) else None


def best_row(rows: list[CandidateRow], baseline_key: str | None) -> CandidateRow | None:
    """THE best candidate of a job's rows, the one notion used everywhere (search, summary, progress, end message,
    hover, preferred code action, report): the fastest significantly faster verified candidate, and among those
    within :data:`TIE_FACTOR` of it the first evaluated (the simpler one: a family's kernel rather than its
    ``-maxrregcount`` child that only measured a hair faster). None when no candidate is significantly faster."""
    faster = significant_rows(rows, baseline_key)
    if not faster:
        return None
    top = max(r.result.speedup for r in faster)
    return next(r for r in faster if r.result.speedup * TIE_FACTOR >= top)


def ranked_faster(rows: list[CandidateRow], baseline_key: str | None, best: CandidateRow | None) -> list[CandidateRow]:
    """``best`` first, then the other significantly faster candidates, fastest first; empty when ``best`` is None."""
    if best is None:
        return []
    others = sorted((r for r in significant_rows(rows, baseline_key) if r.key != best.key), key=lambda r: -r.result.speedup)
    return [best, *others]
