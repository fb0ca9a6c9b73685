"""What the LLM agents of a job spent: each call's tokens, latency and cost, and the job's totals."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AgentCall(BaseModel):
    """One call to a language model: which role asked, which provider and model answered, what it cost."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field(description="planner, coder or reviewer")
    provider: str = Field(description="the configured provider's name (never its key)")
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    ok: bool = True
    error: str | None = Field(None, description="why the call failed (keys redacted), None when it answered")


class AgentSpend(BaseModel):
    """A job's agent spend: every call, the totals and the budget they ran against."""

    model_config = ConfigDict(extra="forbid")

    calls: list[AgentCall] = Field(default_factory=list)
    budget_tokens: int | None = None
    budget_usd: float | None = None
    stopped: str | None = Field(None, description="why the agents stopped before the job did (budget, provider failures)")

    @property
    def input_tokens(self) -> int:
        return sum(c.input_tokens for c in self.calls)

    @property
    def output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.calls)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cost_usd(self) -> float:
        return sum(c.cost_usd for c in self.calls)

    @property
    def latency_s(self) -> float:
        return sum(c.latency_s for c in self.calls)

    def describe(self) -> str:
        """One line, e.g. ``agents: 7 calls, 12,345 tokens (9,000 in, 3,345 out), $0.0123, 14.2 s``."""
        line = (f"agents: {len(self.calls)} calls, {self.tokens:,} tokens ({self.input_tokens:,} in, "
                f"{self.output_tokens:,} out), ${self.cost_usd:.4f}, {self.latency_s:.1f} s")
        caps = [f"{self.budget_tokens:,} tokens" if self.budget_tokens else "",
                f"${self.budget_usd:g}" if self.budget_usd is not None else ""]
        caps = [c for c in caps if c]
        if caps:
            line += f" (budget {' / '.join(caps)})"
        if self.stopped:
            line += f"; stopped: {self.stopped}"
        return line
