"""The interface between the search and a generator that learns from results within the job (an "arm").

A plain generator only proposes from a parent (:class:`ptxfactory.search.base.Generator`). An arm also
implements the optional coroutines below, which :func:`ptxfactory.search.strategy.optimise` calls when a
generator has them (duck-typed, so the search needs no import of this package):

- ``await arm.start_job(job: JobView)`` once, before the first candidate is evaluated;
- ``await arm.on_row(row: CandidateRow) -> list[Candidate]`` with every finished row (the original's first,
  every generator's, in the order they are recorded); the candidates returned join the arm's queue (those
  already seen in the job are dropped) and go through the same compile, static checks and verifier;
- ``arm.spend() -> AgentSpend | None``, what the arm spent (put in the job's summary);
- ``await arm.close()`` at the end of the job, whatever happened.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ptxfactory.protocol import Candidate, CandidateRow, GpuFacts, KernelSpec
from ptxfactory.protocol.agent import AgentSpend


@dataclass(frozen=True)
class JobView:
    """What an arm sees of the job: its id, spec, kernel class and architecture, the lesson store (None: no
    store), the GPU's facts (None: no GPU), the original's key, ``say`` (a progress message to the user), the job's
    compile ``pool`` (None: the shared one) and ``profile`` (a candidate's Nsight Compute counters, a worker-side run:
    :func:`.evidence.profiler`; None: the backend cannot profile)."""

    job_id: str
    spec: KernelSpec
    kernel_class: str
    arch: str
    store: Any | None
    facts: GpuFacts | None
    baseline_key: str
    say: Callable[[str], None]
    pool: Any | None = None
    profile: Callable[[Candidate], Awaitable[Any]] | None = None


class Arm(Protocol):
    name: str

    async def start_job(self, job: JobView) -> None: ...

    async def on_row(self, row: CandidateRow) -> list[Candidate]: ...

    def spend(self) -> AgentSpend | None: ...

    async def close(self) -> None: ...
