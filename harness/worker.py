"""The evaluation worker: a child process that owns the GPU and answers requests over a pipe.

Requests are dicts: ``{"op": "facts"}``, ``{"op": "evaluate", "spec", "baseline", "candidate", "plan"}``
where baseline/candidate are ``{"key", "cubin", "lowered_name", "launch"}``, or ``{"op": "reference", "spec",
"plan"}`` (compute and cache the spec's Python reference outputs for the plan). Answers are
``{"ok": <result dict>}``, ``{"reference_failed": message}`` (the Python reference failed: the job's
error, not the candidate's) or ``{"crashed": reason}`` (after which the worker exits: its CUDA
context is unusable; ``"phase"`` says what was running: ``"verify"``, ``"time"``, ``"misaligned_view"`` (the
candidate on misaligned buffers) or ``"original_misaligned"`` (the original on them)). An ``evaluate`` request
may carry ``"skip_misaligned": why`` (the original faulted on misaligned buffers before). Candidate kernels run only here, never in the daemon; the Python reference runs
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
        from .lifeline import die_with_parent

        die_with_parent(parent_pid)
    from ptxfactory.protocol import KernelSpec, LaunchConfig

    from .gpu_eval import CandidateCrash, Evaluator, is_sticky
    from .plan import EvalPlan
    from .reference import ReferenceFailed

    ev = Evaluator()
    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if req["op"] == "facts":
                conn.send({"ok": ev.facts().model_dump()})
            elif req["op"] == "reference":
                spec = KernelSpec.model_validate(req["spec"])
                plan = EvalPlan.model_validate(req["plan"])
                conn.send({"ok": {"pairs": ev.prepare_reference(spec, plan)}})
            elif req["op"] == "evaluate":
                spec = KernelSpec.model_validate(req["spec"])
                plan = EvalPlan.model_validate(req["plan"])
                b, c = req["baseline"], req["candidate"]
                ev.phase = "load"
                base = ev.load(b["cubin"], b["lowered_name"], LaunchConfig.model_validate(b["launch"]), b["key"])
                try:
                    cand = ev.load(c["cubin"], c["lowered_name"], LaunchConfig.model_validate(c["launch"]), c["key"])
                except Exception as exc:  # a cubin the driver refuses
                    conn.send({"ok": {"outcome": "rejected", "candidate_key": c["key"], "check": "load", "reason": str(exc)}})
                    continue
                result = ev.evaluate(spec, base, b["key"], cand, plan, c["key"], req.get("skip_misaligned"))
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
