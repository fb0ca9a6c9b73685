"""Job sessions and the one launch path, on the CPU (NumPy stand-in for CuPy, kernels written in NumPy):

- ``GpuBackend`` against ``worker_main`` on a thread: a job is opened once, candidates go alone, a restarted worker
  or one that lost the session gets it again, a fresh plan is another session;
- the evaluator's device cache: a second candidate regenerates no inputs; a cache too small to keep anything gives
  the same verdicts;
- timed launches: a seeded sample of rounds (not only the last) is checked, inputs are checked unchanged, L2 is
  flushed between launches when the working set is small.
What the H200 runs for real: tests/gpu/test_harness.py, tests/redteam."""
from __future__ import annotations

import asyncio
import threading
from multiprocessing import Pipe

import numpy as np
import pytest

from ptxfactory.harness.compile import Compiled
from ptxfactory.harness.session import JobSession, SessionTable, session_id
from ptxfactory.protocol import Measured, Rejected, Resources

from test_reference_worker import ROWSUM, SEQUENTIAL, TREE, WRONG, NumpyKernel, _evaluator, _tree, gpu_eval, job  # noqa: F401

KERNELS = {b"tree": TREE, b"seq": SEQUENTIAL, b"wrong": WRONG}
SIZE = {"M": 8, "N": 2001}


@pytest.fixture
def small(job):
    """(spec, plan): the rowsum_seq job at small sizes, the original kernel as the oracle."""
    spec, plan, _ = job
    return spec, plan.model_copy(update={"reference": None, "verify_sizes": [{"M": 3, "N": 8}, {"M": 4, "N": 3001}],
                                         "heldout_sizes": [{"M": 5, "N": 1003}], "bench_sizes": [SIZE]})


@pytest.fixture
def worker_eval(gpu_eval, monkeypatch):
    """gpu_eval with ``Evaluator.load`` mapping the cubins ``b"tree"``, ``b"seq"``, ``b"wrong"`` to NumPy kernels and
    made-up GPU facts, so ``worker_main`` serves a job on the CPU."""
    facts = _evaluator(gpu_eval)._facts
    monkeypatch.setattr(gpu_eval.Evaluator, "load", lambda self, cubin, name, launch, key: KERNELS[bytes(cubin)])
    monkeypatch.setattr(gpu_eval.Evaluator, "facts", lambda self: facts)
    return gpu_eval


def _artifact(spec, which: str) -> Compiled:
    from ptxfactory.search.strategy import original_candidate

    source = (ROWSUM / "rowsum_seq.cu").read_text()
    cand = original_candidate(spec, f"// {which}\n" + source).model_copy(update={"description": which})
    return Compiled(candidate=cand, cubin=which.encode(), lowered_name="rowsum_seq", resources=None, log="")


class ThreadWorker:
    """Stands in for :class:`GpuWorker`: ``worker_main`` on a thread over a pipe, started on the first call; ``kill``
    ends it (the next call starts a fresh one, as after a crash). ``ops`` records every request's op."""

    def __init__(self):
        self.generation, self.ops, self._thread, self._conn = 0, [], None, None

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def call(self, request: dict, timeout_s: float) -> dict:
        import ptxfactory.harness.worker as worker

        if not self.alive():
            self._conn, child = Pipe()
            self._thread = threading.Thread(target=worker.worker_main, args=(child,), daemon=True)
            self._thread.start()
            self.generation += 1
        self.ops.append(request["op"])
        self._conn.send(request)
        assert self._conn.poll(120), f"no answer to {request['op']}"
        return self._conn.recv()

    def kill(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._thread.join(30)
            assert not self._thread.is_alive()
        self._thread = self._conn = None


def _backend():
    from ptxfactory.harness.gpu_backend import GpuBackend

    backend = GpuBackend()
    backend.worker = ThreadWorker()
    return backend


def test_session_ids_name_exactly_the_spec_plan_and_baseline(small):
    spec, plan = small
    s, p = spec.model_dump(mode="json"), plan.model_dump()
    base = {"key": "k", "cubin": b"tree", "lowered_name": "rowsum_seq", "launch": {"grid": ["M"]}}
    sid = session_id(s, p, base)
    assert sid == session_id(s, p, dict(base)) and len(sid) == 32
    assert sid != session_id(s, p, {**base, "cubin": b"tre3"})  # the same key, another artifact
    assert sid != session_id(s, {**p, "seeds": [1, 2, 3, 4]}, base)
    assert sid != session_id({**s, "name": "other"}, p, base)


def test_the_session_table_drops_the_least_recently_used():
    table = SessionTable(max_sessions=2)
    for sid in "abc":
        if sid == "c":
            table.get("a")
        dropped = table.add(JobSession(id=sid, spec=None, plan=None, base=None, base_key=sid))
    assert [d.id for d in dropped] == ["b"] and "a" in table and "c" in table and table.get("b") is None
    assert table.close("a").id == "a" and len(table) == 1


def test_a_job_is_opened_once_and_candidates_go_alone(worker_eval, small):
    spec, plan = small
    backend = _backend()
    sent = []
    call = backend.worker.call
    backend.worker.call = lambda request, timeout_s: (sent.append(request), call(request, timeout_s))[1]
    try:
        base = _artifact(spec, "tree")
        results = [asyncio.run(backend.evaluate(spec, base, _artifact(spec, w), plan)) for w in ("tree", "wrong", "tree")]
    finally:
        backend.worker.kill()
    assert [type(r) for r in results] == [Measured, Rejected, Measured], results
    assert results[1].check == "correctness"
    assert backend.worker.ops == ["open", "evaluate", "evaluate", "evaluate"] and backend.opened == 1
    for request in sent[1:]:
        assert set(request) == {"op", "session", "candidate"}  # no spec, plan or baseline again


def test_a_restarted_worker_gets_the_session_again(worker_eval, small):
    spec, plan = small
    backend = _backend()
    base = _artifact(spec, "tree")
    try:
        assert isinstance(asyncio.run(backend.evaluate(spec, base, _artifact(spec, "tree"), plan)), Measured)
        backend.worker.kill()  # as after a crash: the next call starts a fresh worker, without the session
        assert isinstance(asyncio.run(backend.evaluate(spec, base, _artifact(spec, "tree"), plan)), Measured)
        assert backend.worker.ops == ["open", "evaluate", "open", "evaluate"] and backend.opened == 2
        # a worker that dropped the session (it keeps a few) answers no_session: opened again, then evaluated
        sid = next(iter(backend._sessions))
        assert backend.worker.call({"op": "close", "session": sid}, 10) == {"ok": {}}
        assert isinstance(asyncio.run(backend.evaluate(spec, base, _artifact(spec, "wrong"), plan)), Rejected)
        assert backend.worker.ops[-4:] == ["close", "evaluate", "open", "evaluate"]
        # a fresh plan (new seeds) is another session
        fresh = plan.model_copy(update={"seeds": [11, 12, 13, 14]})
        assert isinstance(asyncio.run(backend.evaluate(spec, base, _artifact(spec, "tree"), fresh)), Measured)
        assert backend.worker.ops[-2:] == ["open", "evaluate"] and len(backend._sessions) == 2
    finally:
        backend.worker.kill()


def test_with_a_python_reference_the_open_session_is_asked_for_its_outputs_by_id(worker_eval, job):
    spec, plan, _ = job
    plan = plan.model_copy(update={"verify_sizes": [{"M": 3, "N": 8}], "heldout_sizes": [{"M": 5, "N": 1003}],
                                   "bench_sizes": [SIZE]})
    backend = _backend()
    sent = []
    call = backend.worker.call
    backend.worker.call = lambda request, timeout_s: (sent.append((request, timeout_s)), call(request, timeout_s))[1]
    base = _artifact(spec, "seq")
    try:
        for which in ("tree", "tree"):
            assert isinstance(asyncio.run(backend.evaluate(spec, base, _artifact(spec, which), plan)), Measured)
    finally:
        backend.worker.kill()
    assert backend.worker.ops == ["reference", "open", "evaluate", "reference", "evaluate"]
    again, deadline = sent[3]
    assert set(again) == {"op", "session"} and deadline >= 120 + plan.reference.timeout_s  # its own deadline


def test_the_whole_job_in_one_evaluate_request_still_works(worker_eval, small):
    from ptxfactory.harness.gpu_backend import _payload

    spec, plan = small
    worker = ThreadWorker()
    try:
        request = {"op": "evaluate", "spec": spec.model_dump(mode="json"), "plan": plan.model_dump(),
                   "baseline": _payload(_artifact(spec, "tree")), "candidate": _payload(_artifact(spec, "tree"))}
        answer = worker.call(request, 60)
        assert answer["ok"]["outcome"] == "measured", answer
        assert worker.call({"op": "evaluate", "session": "nope", "candidate": request["candidate"]}, 10) == {"no_session": "nope"}
    finally:
        worker.kill()


def test_a_second_candidate_regenerates_no_inputs(gpu_eval, small, monkeypatch):
    spec, plan = small
    ev = _evaluator(gpu_eval)
    made = []
    make = gpu_eval.B.make_inputs
    monkeypatch.setattr(gpu_eval.B, "make_inputs", lambda *a: (made.append(a[1]), make(*a))[1])
    assert isinstance(ev.evaluate(spec, TREE, "tree", TREE, plan, "first"), Measured)
    first = len(made)
    assert first > 0
    assert isinstance(ev.evaluate(spec, TREE, "tree", TREE, plan, "second"), Measured)
    assert len(made) == first and ev.cache().hits > 0  # verification inputs, outputs and timing sets from the cache


def test_a_cache_that_keeps_nothing_gives_the_same_verdicts(gpu_eval, small):
    spec, plan = small
    ev = _evaluator(gpu_eval)
    ev.DEVICE_CACHE_BYTES = 0
    assert isinstance(ev.evaluate(spec, TREE, "tree", TREE, plan, "tree"), Measured)
    wrong = ev.evaluate(spec, TREE, "tree", WRONG, plan, "wrong")
    assert isinstance(wrong, Rejected) and wrong.check == "correctness"
    assert len(ev.cache()) == 0 and ev.cache().cap_bytes == 0


class WrongOnCall:
    """A tree row sum, wrong (x 1.001) on the launches whose 0-based call number is in ``bad``."""

    def __init__(self, *bad: int):
        self.bad, self.calls = set(bad), 0
        self.resources = Resources(registers=16, shared_bytes=0)

    def dims(self, size):
        return (1, 1, 1), (1, 1, 1), 0

    def __call__(self, args, size):
        x, s, m, n = args
        s[...] = _tree(np.asarray(x).reshape(int(m), int(n))) * np.float32(1.001 if self.calls in self.bad else 1.0)
        self.calls += 1


def test_a_sampled_timed_launch_is_checked_not_only_the_last(gpu_eval, small):
    spec, plan = small
    plan = plan.model_copy(update={"timing_reps": 40})
    ev = _evaluator(gpu_eval)
    sampled = gpu_eval.sample_rounds(plan, SIZE, 40, ev.SAMPLED_ROUNDS)
    assert len(sampled) == 4 and all(0 <= r < 39 for r in sampled)
    assert gpu_eval.sample_rounds(plan.model_copy(update={"seeds": [5, 6, 7, 8]}), SIZE, 40, 4) != sampled  # per job
    first_timed = plan.warmup + 1  # warm-up launches, then the probe
    r = sampled[1]
    _, _, problem = ev.time_size(spec, TREE, WrongOnCall(first_timed + r), SIZE, plan)
    assert ev.last_timing["sampled"] == sampled and ev.last_timing["reps"] == 40
    assert problem and problem.startswith(f"output 's' of timed launch {r + 1} of 40 (one sampled at random) at {SIZE}: ")
    _, _, problem = ev.time_size(spec, TREE, WrongOnCall(first_timed + 39), SIZE, plan)
    assert problem and problem.startswith(f"output 's' of the last timed launch at {SIZE}: ")
    unsampled = next(q for q in range(39) if q not in sampled)  # a sample, not every launch
    assert ev.time_size(spec, TREE, WrongOnCall(first_timed + unsampled), SIZE, plan)[2] is None


class WritesInputWhenTimed:
    """A tree row sum that, from call ``after`` on, also adds 1 to x[0] after reading it."""

    def __init__(self, after: int):
        self.after, self.calls = after, 0
        self.resources = Resources(registers=16, shared_bytes=0)

    def dims(self, size):
        return (1, 1, 1), (1, 1, 1), 0

    def __call__(self, args, size):
        x, s, m, n = args
        s[...] = _tree(np.asarray(x).reshape(int(m), int(n)))
        if self.calls >= self.after:
            x[0] += 1
        self.calls += 1


def test_an_input_written_while_timed_is_caught_and_its_set_never_reused(gpu_eval, small):
    spec, plan = small
    ev = _evaluator(gpu_eval)
    _, _, problem = ev.time_size(spec, TREE, WritesInputWhenTimed(plan.warmup + 1), SIZE, plan)
    assert problem == f"input 'x' was modified while timed at {SIZE}"
    assert not any(k[0] == "timing" for k in ev.cache()._entries)  # the broken set is dropped
    assert ev.time_size(spec, TREE, TREE, SIZE, plan)[2] is None  # fresh inputs for the next candidate


def test_l2_is_flushed_between_timed_launches_only_when_the_working_set_is_small(gpu_eval, small):
    spec, plan = small
    ev = _evaluator(gpu_eval)  # L2 of 1 MiB
    assert ev.time_size(spec, TREE, TREE, SIZE, plan)[2] is None  # 8 sets of 64 KB: under 3 MiB
    t = ev.last_timing
    assert t["n_sets"] == 8 and t["flushes"] == 2 * t["reps"]  # before every timed launch of both sides
    big = {"M": 8, "N": 200001}  # 6.4 MB per set: one set is more than 3x L2
    assert ev.time_size(spec, TREE, TREE, big, plan)[2] is None
    assert ev.last_timing["n_sets"] == 1 and ev.last_timing["flushes"] == 0


class Accumulates:
    """``s += tree row sum`` (an inout accumulator); records ``s`` as each call finds it."""

    def __init__(self):
        self.seen: list[np.ndarray] = []
        self.resources = Resources(registers=16, shared_bytes=0)

    def dims(self, size):
        return (1, 1, 1), (1, 1, 1), 0

    def __call__(self, args, size):
        x, s, m, n = args
        self.seen.append(np.array(s, copy=True))
        s[...] = s + _tree(np.asarray(x).reshape(int(m), int(n)))


def test_every_timed_launch_finds_its_inout_buffers_at_their_pristine_values(gpu_eval, small):
    spec, plan = small
    spec = spec.model_copy(update={"args": [a.model_copy(update={"role": "inout"}) if a.name == "s" else a for a in spec.args]})
    ev = _evaluator(gpu_eval)
    base, cand = Accumulates(), Accumulates()
    assert ev.time_size(spec, base, cand, SIZE, plan)[2] is None
    reps, n_sets = ev.last_timing["reps"], ev.last_timing["n_sets"]
    held, _ = ev.timing_inputs(spec, SIZE, n_sets)
    for who in (base, cand):
        timed = who.seen[-reps:]  # warm-up and probe launches first, then one per round
        assert len(timed) == reps
        for r, found in enumerate(timed):  # round r runs on set r % n_sets, from that set's pristine values
            np.testing.assert_array_equal(found.ravel(), np.asarray(held[r % n_sets]["pristine"]["s"]).ravel())


class Clocked(WrongOnCall):
    """:class:`WrongOnCall` whose every launch takes ``ms`` on a virtual clock (the test's events record the clock)."""

    def __init__(self, clock: list[float], ms: float, *bad: int):
        super().__init__(*bad)
        self.clock, self.ms = clock, ms

    def __call__(self, args, size):
        super().__call__(args, size)
        self.clock[0] += self.ms


@pytest.fixture
def clock(gpu_eval, monkeypatch) -> list[float]:
    """A virtual clock (milliseconds) that the stand-in CuPy's events record; :class:`Clocked` launches advance it."""
    now = [0.0]

    class Event:
        def record(self):
            self.t = now[0]

        def synchronize(self):
            return None

    monkeypatch.setattr(gpu_eval.cp.cuda, "Event", Event)
    monkeypatch.setattr(gpu_eval.cp.cuda, "get_elapsed_time", lambda start, end: end.t - start.t)
    return now


@pytest.mark.parametrize("base_ms, cand_ms, slow", [(1.0, 400.0, True), (1.0, 7.0, False), (0.1, 4.0, False)])
def test_a_candidate_far_slower_than_the_original_is_timed_in_few_rounds(gpu_eval, small, clock, base_ms, cand_ms, slow):
    """A probe launch at 8x the original's time and 5 ms or more: SLOW_REPS rounds and no warm-up, its outputs
    still checked; a candidate under either bound is timed the full way."""
    spec, plan = small
    ev = _evaluator(gpu_eval)
    cand = Clocked(clock, cand_ms)
    ct, bt, problem = ev.time_size(spec, Clocked(clock, base_ms), cand, SIZE, plan)
    assert problem is None and ev.last_timing["slow"] is slow
    reps = ev.last_timing["reps"]
    if slow:
        assert reps == ev.SLOW_REPS and cand.calls == 1 + reps  # the probe, then the rounds: no warm-up
    else:
        assert reps >= 5 and cand.calls == 1 + plan.warmup + reps
    assert len(ct) == len(bt) == reps and all(t == pytest.approx(cand_ms * 1e3) for t in ct)
    first_timed = 1 if slow else 1 + plan.warmup
    _, _, problem = ev.time_size(spec, Clocked(clock, base_ms), Clocked(clock, cand_ms, first_timed + reps - 1), SIZE, plan)
    assert problem and problem.startswith(f"output 's' of the last timed launch at {SIZE}: ")


class SlowFirst(Clocked):
    """:class:`Clocked` whose first launch takes ``first_ms`` (a first-use initialisation, or a probe-dodging trick)."""

    def __init__(self, clock: list[float], ms: float, first_ms: float):
        super().__init__(clock, ms)
        self.first_ms = first_ms

    def __call__(self, args, size):
        if self.calls == 0:
            self.clock[0] += self.first_ms - self.ms
        super().__call__(args, size)


def test_a_candidate_slow_only_on_its_probe_launch_is_timed_the_full_way(gpu_eval, small, clock):
    spec, plan = small
    ev = _evaluator(gpu_eval)
    ct, _, problem = ev.time_size(spec, Clocked(clock, 1.0), SlowFirst(clock, 0.5, 400.0), SIZE, plan)
    assert problem is None and ev.last_timing["slow"] is False and ev.last_timing["reps"] >= 5
    assert all(t == pytest.approx(500.0) for t in ct)  # its own time, from the full rounds
