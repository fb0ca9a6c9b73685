"""The evaluation worker: a child process that owns the GPU and answers requests over a pipe.

Requests are dicts:

- ``{"op": "facts"}``;
- ``{"op": "open", "session": id, "spec", "plan", "baseline"}``: open a job session (:mod:`.session`): the spec
  and plan validated, the baseline (``{"key", "cubin", "lowered_name", "launch"}``) loaded, once per job; answers
  ``{"ok": {"session": id}}``. The worker keeps the last few sessions (:class:`~.session.SessionTable`);
- ``{"op": "evaluate", "session": id, "candidate"}``: evaluate the candidate (same payload as the baseline) in
  that session; ``{"no_session": id}`` when this worker does not have it (it restarted, or dropped it): the
  backend opens it again. An ``evaluate`` that carries ``"spec"``, ``"plan"`` and ``"baseline"`` itself opens
  (or reuses) their session first (the whole job in one request);
- ``{"op": "close", "session": id}``;
- ``{"op": "reference", "spec", "plan"}`` or ``{"op": "reference", "session": id}``: compute and cache the spec's
  Python reference outputs for the plan (``no_session`` as for ``evaluate``).

Answers are ``{"ok": <result dict>}``, ``{"reference_failed": message}`` (the Python reference failed: the job's
error, not the candidate's) or ``{"crashed": reason}`` (after which the worker exits: its CUDA
context is unusable; ``"phase"`` says what was running: ``"verify"``, ``"time"``, ``"misaligned_view"`` (the
candidate on misaligned buffers), ``"original_misaligned"`` (the original on them) or ``"shadow"`` (the original's
float64 shadow, :mod:`.shadow`)). An ``evaluate`` request may carry ``"skip_misaligned": why`` (the original faulted
on misaligned buffers before) and ``"skip_shadow": true`` (the shadow faulted before). A baseline payload may carry
``"shadow": {"cubin", "lowered_name"}`` (loaded with the session, the baseline's launch). Candidate kernels run only here, never in the daemon; the Python reference runs
in a child process of this worker (:mod:`.reference`).
"""
from __future__ import annotations

import os
import traceback
from multiprocessing.connection import Connection


def worker_main(conn: Connection, parent_pid: int | None = None) -> None:
    """Serve requests until the pipe closes. Exits with status 70 after a sticky CUDA error; ends at once when
    ``parent_pid`` (the process that started it) ends (:func:`~.lifeline.die_with_parent`)."""
    if parent_pid is not None:
        import signal

        from .lifeline import die_with_parent

        die_with_parent(parent_pid)
        # a terminal's Ctrl-C and a `timeout`'s SIGTERM reach the whole process group: the worker finishes the request
        # in hand (the job cancels after it), and ends when its parent kills it (SIGKILL) or dies (the lifeline)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from ptxfactory.protocol import KernelSpec, LaunchConfig

    from .gpu_eval import CandidateCrash, Evaluator, is_sticky
    from .plan import EvalPlan
    from .reference import ReferenceFailed
    from .session import JobSession, SessionTable, session_id

    ev = Evaluator()
    sessions = SessionTable()

    def open_session(sid: str, spec: dict, plan: dict, baseline: dict) -> JobSession:
        ev.phase = "load"
        launch = LaunchConfig.model_validate(baseline["launch"])
        shadow = baseline.get("shadow")
        if shadow is not None:  # the original's float64 shadow (harness/shadow.py); one the driver refuses is none
            try:
                shadow = ev.load(shadow["cubin"], shadow["lowered_name"], launch, baseline["key"] + "#shadow")
            except Exception:  # noqa: BLE001 - the job goes on without it
                shadow = None
        session = JobSession(id=sid, spec=KernelSpec.model_validate(spec), plan=EvalPlan.model_validate(plan),
                             base=ev.load(baseline["cubin"], baseline["lowered_name"], launch, baseline["key"]),
                             base_key=baseline["key"], shadow=shadow)
        sessions.add(session)
        return session

    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            ev.close()
            return
        try:
            if req["op"] == "facts":
                conn.send({"ok": ev.facts().model_dump()})
            elif req["op"] == "reference":
                if "spec" in req:
                    spec, plan = KernelSpec.model_validate(req["spec"]), EvalPlan.model_validate(req["plan"])
                else:  # an open session's
                    session = sessions.get(req["session"])
                    if session is None:
                        conn.send({"no_session": req["session"]})
                        continue
                    spec, plan = session.spec, session.plan
                conn.send({"ok": {"pairs": ev.prepare_reference(spec, plan)}})
            elif req["op"] == "open":
                open_session(req["session"], req["spec"], req["plan"], req["baseline"])
                conn.send({"ok": {"session": req["session"]}})
            elif req["op"] == "close":
                sessions.close(req["session"])
                conn.send({"ok": {}})
            elif req["op"] == "evaluate":
                if "spec" in req:  # the whole job in the request: its session, opened here when new
                    sid = req.get("session") or session_id(req["spec"], req["plan"], req["baseline"])
                    session = sessions.get(sid) or open_session(sid, req["spec"], req["plan"], req["baseline"])
                else:
                    session = sessions.get(req["session"])
                    if session is None:
                        conn.send({"no_session": req["session"]})
                        continue
                c = req["candidate"]
                ev.phase = "load"
                try:
                    cand = ev.load(c["cubin"], c["lowered_name"], LaunchConfig.model_validate(c["launch"]), c["key"])
                except Exception as exc:  # a cubin the driver refuses
                    conn.send({"ok": {"outcome": "rejected", "candidate_key": c["key"], "check": "load", "reason": str(exc)}})
                    continue
                session.evaluations += 1
                result = ev.evaluate(session.spec, session.base, session.base_key, cand, session.plan, c["key"],
                                     req.get("skip_misaligned"), None if req.get("skip_shadow") else session.shadow)
                conn.send({"ok": result.model_dump()})
            else:
                conn.send({"error": f"unknown op {req.get('op')!r}"})
        except ReferenceFailed as exc:
            conn.send({"reference_failed": exc.message})
        except CandidateCrash as exc:
            conn.send({"crashed": str(exc), "phase": ev.phase})
            os._exit(70)
        except Exception as exc:
            if is_sticky(exc):
                conn.send({"crashed": str(exc), "phase": ev.phase})
                os._exit(70)
            conn.send({"error": "".join(traceback.format_exception(exc))[-4000:]})
