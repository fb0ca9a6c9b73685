"""What a job reports: one row per candidate, and the job's summary. Shared by the CLI, the report and the LSP."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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

    def row(self, key: str | None) -> CandidateRow | None:
        return next((r for r in self.rows if r.key == key), None) if key else None

    @property
    def noise_hi(self) -> float | None:
        """The upper end of the 95% interval of the original timed against itself (its own row, A/A), or None."""
        base = self.row(self.baseline_key)
        return base.result.speedup_hi if base is not None and isinstance(base.result, Measured) else None

    def faster(self) -> list[CandidateRow]:
        """Verified candidates significantly faster than the original (:meth:`Measured.significant` against
        this job's A/A spread), best first."""
        noise = self.noise_hi
        rows = [r for r in self.rows if isinstance(r.result, Measured) and r.key != self.baseline_key and r.result.significant(noise)]
        return sorted(rows, key=lambda r: -r.result.speedup)
