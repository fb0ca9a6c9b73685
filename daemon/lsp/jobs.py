"""Per-session job state: one :class:`Job` per ``ptxfactory.optimise``, the latest one per (uri, kernel).

Plain data, no LSP: the optimise command fills it in, the code actions read it.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ptxfactory.protocol import JobSummary
from ptxfactory.protocol.lsp import JobState


@dataclass
class Job:
    """One optimisation job started from the editor. ``summary`` is set when the search returned."""

    job_id: str
    uri: str
    kernel: str
    token: str
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    state: JobState = "running"
    summary: JobSummary | None = None
    error: str | None = None

    @property
    def running(self) -> bool:
        return self.state == "running"


class JobTable:
    """Jobs by id, and the latest job of each (uri, kernel). A new job replaces the previous one's results."""

    def __init__(self) -> None:
        self._by_id: dict[str, Job] = {}
        self._latest: dict[tuple[str, str], Job] = {}

    def add(self, job: Job) -> None:
        self._by_id[job.job_id] = job
        self._latest[(job.uri, job.kernel)] = job

    def get(self, job_id: str) -> Job | None:
        return self._by_id.get(job_id)

    def latest(self, uri: str, kernel: str) -> Job | None:
        return self._latest.get((uri, kernel))

    def by_token(self, token: str | int) -> Job | None:
        return next((j for j in self._by_id.values() if j.token == token), None)

    def running(self) -> list[Job]:
        return [j for j in self._by_id.values() if j.running]
