"""A job's agent budget: tokens and money spent so far, what the next call may use, when to stop."""
from __future__ import annotations

from ptxfactory.protocol.agent import AgentCall, AgentSpend

from .config import ProviderConfig


def estimate_tokens(text: str) -> int:
    """A rough token count for budgeting before a call (four characters a token)."""
    return len(text) // 4 + 1


class Budget:
    """Per-job limits in tokens (input + output) and USD; every call is charged through :meth:`charge`.

    Calls in flight are reserved for (their estimated input and their output cap) so that concurrent
    calls cannot together run far past the budget. Input tokens are estimated from the prompt's length at
    the ratio the endpoint has charged so far in the job; the first call's estimate (four characters a
    token) is the only one that can be far off, so a job can overrun its token budget by at most that.
    """

    def __init__(self, tokens: int | None, usd: float | None):
        self.spend = AgentSpend(budget_tokens=tokens, budget_usd=usd)
        self._reserved_tokens = 0
        self._reserved_usd = 0.0
        self._prompt_chars = 0  # characters sent and input tokens charged so far: the endpoint's own ratio
        self._prompt_tokens = 0

    def estimate(self, prompt: str) -> int:
        """Input tokens a prompt will cost: four characters a token, or more when the endpoint has charged more."""
        guess = estimate_tokens(prompt)
        if self._prompt_chars and self._prompt_tokens:
            guess = max(guess, int(len(prompt) * self._prompt_tokens / self._prompt_chars) + 1)
        return guess

    def allowance(self, provider: ProviderConfig, prompt: str) -> int:
        """The most output tokens the next call may ask for (0: the budget cannot afford it)."""
        want = provider.max_output_tokens
        est_in = self.estimate(prompt)
        if self.spend.budget_tokens is not None:
            left = self.spend.budget_tokens - self.spend.tokens - self._reserved_tokens - est_in
            want = min(want, left)
        if self.spend.budget_usd is not None and provider.usd_per_mtok_out > 0:
            left_usd = self.spend.budget_usd - self.spend.cost_usd - self._reserved_usd - provider.cost(est_in, 0)
            want = min(want, int(left_usd * 1e6 / provider.usd_per_mtok_out))
        elif self.spend.budget_usd is not None and self.spend.cost_usd + self._reserved_usd >= self.spend.budget_usd > 0:
            want = 0
        return max(0, want) if want >= 64 else 0

    def reserve(self, provider: ProviderConfig, prompt: str, max_tokens: int) -> tuple[int, float]:
        """Hold back a call's worst case until it is charged; returns the reservation for :meth:`charge`."""
        est_in = self.estimate(prompt)
        tokens, usd = est_in + max_tokens, provider.cost(est_in, max_tokens)
        self._reserved_tokens += tokens
        self._reserved_usd += usd
        return tokens, usd

    def charge(self, call: AgentCall, reservation: tuple[int, float] = (0, 0.0), prompt: str = "") -> None:
        """Record a finished (or failed) call and release its reservation; ``prompt`` calibrates :meth:`estimate`."""
        if call.ok and prompt and call.input_tokens:
            self._prompt_chars += len(prompt)
            self._prompt_tokens += call.input_tokens
        self._reserved_tokens -= reservation[0]
        self._reserved_usd -= reservation[1]
        self.spend.calls.append(call)

    @property
    def exhausted(self) -> bool:
        """True once the tokens or the money spent reach the budget."""
        s = self.spend
        return ((s.budget_tokens is not None and s.tokens >= s.budget_tokens)
                or (s.budget_usd is not None and s.cost_usd >= s.budget_usd))
