"""The GPU evaluation backend: one worker process per GPU, restarted after a crash or a hang.

Each job is a session in the worker (:mod:`.session`): opened once per (spec, plan, baseline) and worker process,
then each candidate is sent alone (its cubin, name and launch). A worker that restarted has no session: the
backend opens it again (with the Python reference's outputs computed first, on their own deadline) and retries.
"""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import time

from pydantic import TypeAdapter

from ptxfactory.protocol import Crashed, EvalResult, GpuFacts, KernelSpec, Rejected, TimedOut

from .compile import Compiled
from .plan import EvalPlan
from .session import session_id
from .worker import worker_main

_RESULT = TypeAdapter(EvalResult)


class WorkerError(RuntimeError):
    """The worker failed for a reason that is not the candidate's (a harness bug); the message has its traceback."""


class GpuWorker:
    """A child process owning one GPU. Blocking calls; :class:`GpuBackend` runs them off the event loop."""

    def __init__(self, device: int = 0, start_timeout_s: float = 300.0):
        self.device = device
        self.start_timeout_s = start_timeout_s
        self._proc: mp.Process | None = None
        self._conn = None
        self.generation = 0  # how many worker processes were started: a session belongs to one

    def alive(self) -> bool:
        """Whether the current worker process runs (sessions opened in it are still there)."""
        return self._proc is not None and self._proc.is_alive()

    def _ensure(self) -> None:
        if self.alive():
            return
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        import os

        env_before = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = str(self.device) if env_before is None else env_before
        try:
            self._proc = ctx.Process(target=worker_main, args=(child, os.getpid()), daemon=True, name=f"ptxfactory-gpu{self.device}")
            self._proc.start()
            self.generation += 1
        finally:
            if env_before is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        child.close()
        self._conn = parent

    def kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        self._proc, self._conn = None, None

    def call(self, request: dict, timeout_s: float) -> dict:
        """Send one request; returns the answer dict, ``{"timed_out": s}`` or ``{"crashed": reason}``."""
        self._ensure()
        try:
            self._conn.send(request)
            if not self._conn.poll(timeout_s):
                self.kill()
                return {"timed_out": timeout_s}
            answer = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            code = self._proc.exitcode if self._proc else None
            self.kill()
            return {"crashed": f"worker died (exit code {code})"}
        if "crashed" in answer:
            self.kill()
        return answer


class GpuBackend:
    """:class:`~.backend.EvaluationBackend` on a real GPU through a :class:`GpuWorker`. One evaluation at a time."""

    uses_shadow = True  # the job compiles the original's float64 shadow for this backend (harness/shadow.py)
    SHADOW_RETRIES = 2  # timeouts of a job run again without the shadow, to tell a hanging shadow from a candidate

    def __init__(self, device: int = 0):
        self.worker = GpuWorker(device)
        self._lock = asyncio.Lock()
        self._facts: GpuFacts | None = None
        self.misaligned_off: dict[str, str] = {}  # originals (by key) that fault on misaligned buffers -> the fault
        self.shadow_off: dict[str, str] = {}  # originals (by key) whose float64 shadow faulted or hung -> why
        self.shadow_retries: dict[str, int] = {}  # timeouts run again without the shadow, by original
        self._sessions: dict[str, int] = {}  # session id -> the worker generation it was opened in
        self.opened = 0  # sessions opened (again after a restart included)

    async def _call(self, request: dict, timeout_s: float) -> dict:
        async with self._lock:
            return await asyncio.to_thread(self.worker.call, request, timeout_s)

    async def facts(self) -> GpuFacts:
        if self._facts is None:
            answer = await self._call({"op": "facts"}, 300.0)
            if "ok" not in answer:
                raise WorkerError(f"reading GPU facts failed: {answer}")
            self._facts = GpuFacts.model_validate(answer["ok"])
        return self._facts

    async def prepare_reference(self, spec: KernelSpec, plan: EvalPlan) -> None:
        """Have the worker compute (and cache) the Python reference's outputs for every verification size and
        seed of ``plan``, with a deadline of its own (each call may take ``timeout_s``), so a slow reference is
        never mistaken for a hanging candidate. Raises ReferenceFailed (the job's error), WorkerError."""
        request = {"op": "reference", "spec": spec.model_dump(mode="json"), "plan": plan.model_dump()}
        self._reference_answer(plan, await self._call(request, _reference_deadline(plan)))

    @staticmethod
    def _reference_answer(plan: EvalPlan, answer: dict) -> None:
        """Nothing for an ``ok`` answer to a ``reference`` request; else raises ReferenceFailed or WorkerError."""
        ref = plan.reference
        pairs = (len(plan.verify_sizes) + len(plan.heldout_sizes)) * len(plan.seeds)
        deadline = _reference_deadline(plan)
        if "ok" in answer:
            return
        if "reference_failed" in answer:
            raise ref.failed(answer["reference_failed"])
        if "timed_out" in answer:
            raise ref.failed(f"computing its outputs at {pairs} sizes x seeds took more than {deadline:.0f} s (stopped)")
        raise WorkerError(f"computing the Python reference's outputs failed: {answer.get('crashed') or answer.get('error') or answer}")

    OPEN_TIMEOUT_S = 300.0  # opening a session: validating the spec and plan, loading the baseline

    async def _open(self, sid: str, spec: KernelSpec, plan: EvalPlan, request: dict) -> None:
        """Open session ``sid`` in the worker (the Python reference's outputs first, on their own deadline).
        Raises ReferenceFailed, WorkerError."""
        if plan.reference is not None:
            await self.prepare_reference(spec, plan)
        answer = await self._call(request, self.OPEN_TIMEOUT_S)
        if "ok" not in answer:
            if "reference_failed" in answer and plan.reference is not None:
                raise plan.reference.failed(answer["reference_failed"])
            raise WorkerError(f"opening the job in the worker failed: {answer.get('crashed') or answer.get('error') or answer}")
        self._sessions[sid] = self.worker.generation
        self.opened += 1

    def session_open(self, sid: str) -> bool:
        """Whether session ``sid`` is open in the running worker process (else the next evaluation opens it)."""
        alive = getattr(self.worker, "alive", None)
        return self._sessions.get(sid) == getattr(self.worker, "generation", None) and (alive is None or alive())

    async def _in_session(self, spec: KernelSpec, plan: EvalPlan, sid: str, opener: dict, request: dict) -> dict:
        """``request`` (an evaluation in session ``sid``) answered by the worker, the session opened (again) first
        when this worker process does not have it; a worker that answers ``no_session`` anyway gets it once more."""
        for _ in range(2):
            if not self.session_open(sid):
                await self._open(sid, spec, plan, opener)
            elif plan.reference is not None:  # outputs the worker evicted are computed again on their own deadline
                answer = await self._call({"op": "reference", "session": sid}, _reference_deadline(plan))
                if "no_session" in answer:
                    self._sessions.pop(sid, None)
                    continue
                self._reference_answer(plan, answer)
            answer = await self._call(request, plan.timeout_s)
            if "no_session" not in answer:
                return answer
            self._sessions.pop(sid, None)
        raise WorkerError(f"the worker lost job session {sid} twice in a row")

    async def evaluate(self, spec: KernelSpec, baseline: Compiled, candidate: Compiled, plan: EvalPlan) -> EvalResult:
        """Verify and time ``candidate`` in the worker (see :class:`~.backend.EvaluationBackend`), in the job's session
        (opened on first use: with a Python reference, its outputs are computed first, :meth:`prepare_reference`).
        Raises ReferenceFailed, WorkerError."""
        key = candidate.candidate.key
        spec_d, plan_d, base_p = spec.model_dump(mode="json"), plan.model_dump(), _payload(baseline)
        sid = session_id(spec_d, plan_d, base_p)
        opener = {"op": "open", "session": sid, "spec": spec_d, "plan": plan_d, "baseline": base_p}
        request = {"op": "evaluate", "session": sid, "candidate": _payload(candidate)}
        base_key = baseline.candidate.key
        t0 = time.perf_counter()
        if base_key in self.misaligned_off:
            request["skip_misaligned"] = self.misaligned_off[base_key]
        if base_key in self.shadow_off:
            request["skip_shadow"] = True
        answer = await self._in_session(spec, plan, sid, opener, request)
        if answer.get("phase") == "original_misaligned" and base_key not in self.misaligned_off:
            # the user's kernel itself faults on misaligned buffers: they are not part of its contract; again without
            # (the restarted worker gets the session again, the reference's outputs on their own deadline)
            self.misaligned_off[base_key] = f"the original kernel faulted on misaligned buffers: {answer['crashed']}"
            request["skip_misaligned"] = self.misaligned_off[base_key]
            answer = await self._in_session(spec, plan, sid, opener, request)
        if answer.get("phase") == "shadow" and base_key not in self.shadow_off:
            # the original's float64 shadow faulted (a rewrite the source did not survive): again without it
            self.shadow_off[base_key] = answer["crashed"]
            request["skip_shadow"] = True
            answer = await self._in_session(spec, plan, sid, opener, request)
        if "timed_out" in answer and baseline.shadow is not None and base_key not in self.shadow_off \
                and self.shadow_retries.get(base_key, 0) < self.SHADOW_RETRIES:
            # the shadow may be what hung (float loop bounds reached in float only): once again without it; a
            # candidate that hangs again is the one that hangs, and the shadow stays on for the others (a job's
            # first SHADOW_RETRIES timeouts only: each costs the candidate's time limit again)
            self.shadow_retries[base_key] = self.shadow_retries.get(base_key, 0) + 1
            request["skip_shadow"] = True
            again = await self._in_session(spec, plan, sid, opener, request)
            if "timed_out" not in again:
                self.shadow_off[base_key] = f"a run with the shadow timed out ({answer['timed_out']} s) and ran without it"
                answer = again
            request.pop("skip_shadow")
        if answer.get("phase") == "misaligned_view":
            return Rejected(candidate_key=key, check="misaligned_view", resources=candidate.resources,
                            reason=f"faulted on buffers misaligned by one element (or to the spec's align), where the "
                                   f"original runs: {answer['crashed']}", wall_s=time.perf_counter() - t0)
        if "ok" in answer:
            result = _RESULT.validate_python(answer["ok"])
            # ptxas's report (spills, stack) is more complete than the driver's attributes
            return result.model_copy(update={"resources": candidate.resources or result.resources})
        if "timed_out" in answer:
            return TimedOut(candidate_key=key, seconds=answer["timed_out"], resources=candidate.resources, wall_s=time.perf_counter() - t0)
        if "crashed" in answer:
            return Crashed(candidate_key=key, reason=answer["crashed"], resources=candidate.resources, wall_s=time.perf_counter() - t0)
        if "reference_failed" in answer and plan.reference is not None:
            raise plan.reference.failed(answer["reference_failed"])
        raise WorkerError(answer.get("error", str(answer)))

    async def sanitize(self, spec: KernelSpec, baseline: Compiled, candidate: Compiled):
        """compute-sanitizer on ``candidate`` and the original at the smallest check size (:mod:`.sanitize`), on a thread,
        while no evaluation runs; a :class:`~.sanitize.Verdict` (never raises for the tool's absence or failure)."""
        import os

        from .reference import smallest_check_size
        from .sanitize import find_sanitizer, sanitize_pair

        env = dict(os.environ)
        env.setdefault("CUDA_VISIBLE_DEVICES", str(self.worker.device))
        async with self._lock:
            return await asyncio.to_thread(sanitize_pair, spec, baseline, candidate, smallest_check_size(spec),
                                           find_sanitizer(), env=env)

    async def profile(self, spec: KernelSpec, candidate: Compiled, timeout_s: float | None = None):
        """Nsight Compute's counters of one launch of ``candidate`` at the largest timed size (:mod:`.ncu`), on a thread,
        while no evaluation runs; a :class:`~.ncu.Counters` (never raises for the tool's absence or refusal)."""
        import os

        from .ncu import NCU_TIMEOUT_S, find_ncu, profile_launch, profile_size

        env = dict(os.environ)
        env.setdefault("CUDA_VISIBLE_DEVICES", str(self.worker.device))
        async with self._lock:
            return await asyncio.to_thread(profile_launch, find_ncu(), spec, candidate.cubin, candidate.lowered_name,
                                           candidate.candidate.launch.model_dump(), profile_size(spec),
                                           timeout_s or NCU_TIMEOUT_S, env)

    async def close(self) -> None:
        self.worker.kill()


def _reference_deadline(plan: EvalPlan) -> float:
    """Seconds allowed for computing the Python reference's outputs of ``plan``: 120 plus each (size, seed) pair's
    own limit and 10 s."""
    pairs = (len(plan.verify_sizes) + len(plan.heldout_sizes)) * len(plan.seeds)
    return 120.0 + pairs * (plan.reference.timeout_s + 10.0)


def _payload(c: Compiled) -> dict:
    """The worker's payload of ``c``: key, cubin, lowered name, launch, and the float64 shadow of an original that
    carries one (:attr:`.compile.Compiled.shadow`)."""
    out = {"key": c.candidate.key, "cubin": c.cubin, "lowered_name": c.lowered_name, "launch": c.candidate.launch.model_dump()}
    if c.shadow is not None:
        out["shadow"] = {"cubin": c.shadow.cubin, "lowered_name": c.shadow.lowered_name}
    return out
