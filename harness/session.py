"""Job sessions: the worker opens a job once (spec, plan, the baseline) and evaluates candidate cubins against it.

A session is named by :func:`session_id`, a digest of what defines it (the spec, the plan, the baseline's key,
cubin, lowered name and launch), so the backend and the worker agree on it without a handshake, and a plan or
baseline that changes is another session. The worker keeps a few sessions (:class:`SessionTable`, least recently
used dropped first); a worker that restarted has none, answers ``{"no_session": id}``, and the backend opens the
session again (:mod:`.gpu_backend`). What a session saves is kept by the worker's evaluator on the device
(:mod:`.device_cache`): the baseline's verification inputs and outputs, the timing input sets.

No CuPy import: the backend (daemon side) computes the ids.
"""
from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


def session_id(spec: dict, plan: dict, baseline: dict) -> str:
    """The id (32 hex digits) of the session of ``spec`` and ``plan`` (their JSON-able dicts, as sent to the worker)
    against ``baseline`` (the worker payload: ``{"key", "cubin", "lowered_name", "launch"}``; the cubin is hashed,
    never its source key alone). Equal inputs give equal ids; any difference gives another, except the plan's
    ``timeout_s``."""
    h = hashlib.sha256()
    plan = {k: v for k, v in plan.items() if k != "timeout_s"}  # how long the caller waits changes no answer
    for part in (spec, plan, {k: v for k, v in baseline.items() if k not in ("cubin", "shadow")}):
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\0")
    h.update(hashlib.sha256(bytes(baseline.get("cubin") or b"")).digest())
    shadow = baseline.get("shadow")
    if shadow is not None:  # the original's float64 shadow: another shadow is another session
        h.update(shadow["lowered_name"].encode() + b"\0" + hashlib.sha256(bytes(shadow["cubin"])).digest())
    return h.hexdigest()[:32]


@dataclass
class JobSession:
    """One open job in the worker: the validated spec and plan, the loaded baseline and its key (and its float64
    shadow, where the payload carried one); ``evaluations`` counts the candidates evaluated in it."""

    id: str
    spec: Any  # KernelSpec
    plan: Any  # EvalPlan
    base: Any  # gpu_eval.LoadedKernel
    base_key: str
    evaluations: int = 0
    shadow: Any = None  # gpu_eval.LoadedKernel of the original's float64 shadow (harness/shadow.py), or None


class SessionTable:
    """At most ``max_sessions`` open sessions by id; opening one more drops the least recently used."""

    def __init__(self, max_sessions: int = 4):
        if max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, JobSession] = OrderedDict()

    def __contains__(self, sid: str) -> bool:
        return sid in self._sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, sid: str) -> JobSession | None:
        """The session (now the most recently used), or None when this worker never opened it (or dropped it)."""
        session = self._sessions.get(sid)
        if session is not None:
            self._sessions.move_to_end(sid)
        return session

    def add(self, session: JobSession) -> list[JobSession]:
        """Keep ``session`` (replacing one of the same id); returns the sessions dropped to make room."""
        self._sessions.pop(session.id, None)
        dropped = []
        while len(self._sessions) >= self.max_sessions:
            dropped.append(self._sessions.popitem(last=False)[1])
        self._sessions[session.id] = session
        return dropped

    def close(self, sid: str) -> JobSession | None:
        """Drop the session ``sid``; it, or None."""
        return self._sessions.pop(sid, None)
