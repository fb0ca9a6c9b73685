"""The GPU worker's side of a Python reference, on the CPU: ``harness/gpu_eval.py`` and ``harness/worker.py``
run with a NumPy stand-in for CuPy (tests/unit/_fake_cupy.py) and kernels written in NumPy, and
``GpuBackend``'s answers are faked. What the H200 runs for real is tests/gpu/test_python_reference.py."""
from __future__ import annotations

import asyncio
import shutil
import sys
import threading
from multiprocessing import Pipe
from pathlib import Path

import numpy as np
import pytest

from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.reference import ReferenceFailed, python_reference, summarise
from ptxfactory.protocol import GpuFacts, Measured, Rejected, Resources, load_spec

from _fake_cupy import make_module

ROWSUM = Path(__file__).resolve().parents[2] / "examples" / "rowsum_seq"
FAKED = ("ptxfactory.harness.gpu_eval", "ptxfactory.harness.buffers", "ptxfactory.harness.compare", "ptxfactory.harness.worker")


@pytest.fixture
def gpu_eval(monkeypatch):
    """``ptxfactory.harness.gpu_eval`` imported against the NumPy stand-in for CuPy (removed again afterwards)."""
    fake = make_module()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setitem(sys.modules, "cupy.cuda", fake.cuda)
    import ptxfactory.harness as package

    saved = {name: sys.modules.pop(name) for name in FAKED if name in sys.modules}
    attributes = {name: getattr(package, name.rsplit(".", 1)[1]) for name in FAKED if hasattr(package, name.rsplit(".", 1)[1])}
    for name in attributes:  # else ``from . import buffers`` hands back the real module, imported by an earlier test
        delattr(package, name.rsplit(".", 1)[1])
    import ptxfactory.harness.gpu_eval as module

    yield module
    for name in FAKED:  # the real modules (or none) again, in sys.modules and as the package's attributes
        sys.modules.pop(name, None)
        attr = name.rsplit(".", 1)[1]
        if name in attributes:
            setattr(package, attr, attributes[name])
        elif hasattr(package, attr):
            delattr(package, attr)
    sys.modules.update(saved)


@pytest.fixture
def job(tmp_path: Path):
    """(spec, plan with the resolved reference) of the rowsum_seq example copied to ``tmp_path``, at small sizes."""
    shutil.copytree(ROWSUM, tmp_path / "job")
    path = tmp_path / "job" / "rowsum_seq.cu.toml"
    spec = load_spec(path).kernels["rowsum_seq"]
    plan = make_plan(spec, secret=1, reference=python_reference(spec, path)).model_copy(update={
        "verify_sizes": [{"M": 3, "N": 8}, {"M": 4, "N": 300001}], "heldout_sizes": [{"M": 5, "N": 100003}],
        "bench_sizes": [{"M": 8, "N": 200001}], "timing_reps": 3})
    return spec, plan, tmp_path / "job"


def _tree(x: np.ndarray, threads: int = 256) -> np.ndarray:
    m, n = x.shape
    padded = np.concatenate([x, np.zeros((m, -n % threads), np.float32)], axis=1).reshape(m, -1, threads)
    part = np.cumsum(padded, axis=1, dtype=np.float32)[:, -1, :]
    while part.shape[1] > 1:
        half = part.shape[1] // 2
        part = (part[:, :half] + part[:, half:]).astype(np.float32)
    return part[:, 0]


class NumpyKernel:
    """A "loaded kernel" computing ``s`` from ``x`` with NumPy, launched like :class:`gpu_eval.LoadedKernel`."""

    def __init__(self, body):
        self.body = body
        self.resources = Resources(registers=16, shared_bytes=0)

    def dims(self, size):
        return (1, 1, 1), (1, 1, 1), 0

    def __call__(self, args, size):
        x, s, m, n = args
        self.body(np.asarray(x).reshape(int(m), int(n)), s)


def _assign(s, values):
    s[...] = values


SEQUENTIAL = NumpyKernel(lambda x, s: _assign(s, np.cumsum(x, axis=1, dtype=np.float32)[:, -1]))  # the naive kernel
TREE = NumpyKernel(lambda x, s: _assign(s, _tree(x)))
WRONG = NumpyKernel(lambda x, s: _assign(s, _tree(x) * np.float32(1.001)))
LAZY = NumpyKernel(lambda x, s: _assign(s[:-1], _tree(x)[:-1]))  # never writes the last row


def _evaluator(module):
    ev = module.Evaluator()
    ev._facts = GpuFacts(name="numpy", arch="sm_90a", sm_count=1, l2_bytes=1 << 20, copy_gbps=1000.0, peak_gbps=1200.0)
    return ev


def test_a_tree_candidate_is_judged_against_the_reference_not_the_sequential_original(gpu_eval, job):
    spec, plan, _ = job
    ev = _evaluator(gpu_eval)
    try:
        assert ev.prepare_reference(spec, plan) == 3 * len(plan.seeds)
        cached = len(ev._python_cache)
        errors = []
        assert ev.verify(spec, SEQUENTIAL, "seq", TREE, plan, "tree", errors) is None
        assert len(ev._python_cache) == cached  # every reference output came from the cache
        by_size = {(tuple(e.size.items()), e.output): e for e in summarise(errors)}
        big = by_size[((("M", 4), ("N", 300001)), "s")]
        assert big.within_tol and big.candidate_max_abs * 10 < big.original_max_abs and not big.heldout
        assert by_size[((("M", 5), ("N", 100003)), "s")].heldout
        # the same candidate with the original as the oracle: rejected for disagreeing with it
        rejected = ev.verify(spec, SEQUENTIAL, "seq", TREE, plan.model_copy(update={"reference": None}), "tree")
        assert isinstance(rejected, Rejected) and rejected.check == "correctness"
    finally:
        ev._python.close()


def test_wrong_and_unwritten_outputs_are_rejected_against_the_reference(gpu_eval, job):
    spec, plan, _ = job
    ev = _evaluator(gpu_eval)
    try:
        wrong = ev.verify(spec, SEQUENTIAL, "seq", WRONG, plan, "wrong")
        assert isinstance(wrong, Rejected) and wrong.check == "correctness"
        assert "outside rtol/atol of the Python reference" in wrong.reason and "less accurate than 2x the original's" in wrong.reason
        assert wrong.detail["reference"] == "python:ref.py:rowsum" and wrong.detail["candidate_max_abs"] > wrong.detail["bound"]
        lazy = ev.verify(spec, SEQUENTIAL, "seq", LAZY, plan, "lazy")
        assert isinstance(lazy, Rejected) and "never written" in lazy.reason
        assert ev.verify(spec, SEQUENTIAL, "seq", SEQUENTIAL, plan, "seq") is None  # the original passes against itself
    finally:
        ev._python.close()


def test_evaluate_records_both_errors_and_post_timing_judges_against_the_reference(gpu_eval, job):
    spec, plan, _ = job
    ev = _evaluator(gpu_eval)
    try:
        result = ev.evaluate(spec, SEQUENTIAL, "seq", TREE, plan, "tree")
        assert isinstance(result, Measured), result
        assert [e.size for e in result.ref_errors] == plan.verify_sizes + plan.heldout_sizes
        assert all(e.candidate_max_abs <= e.original_max_abs for e in result.ref_errors)
        # the bench size's timing outputs disagree with the original's beyond rtol, and were judged against
        # the reference on the same inputs (timing set seed 1000 + last, variant 0): cached under that key
        assert any(key[1] == (("M", 8), ("N", 200001)) and key[2] >= 1000 for key in ev._python_cache)
        assert 0 < result.reference_s < result.wall_s  # the reference's share of the evaluation, reported
        again = ev.evaluate(spec, SEQUENTIAL, "seq", TREE, plan, "tree")
        assert again.reference_s == 0.0  # every output it needs is cached now
        worse = ev.evaluate(spec, TREE, "tree", SEQUENTIAL, plan, "seq-vs-tree")
        assert isinstance(worse, Rejected) and worse.check == "correctness"  # a less accurate candidate than its original is refused
    finally:
        ev._python.close()


def test_a_reference_failing_at_a_larger_size_fails_verification_with_file_line_key(gpu_eval, job):
    spec, plan, folder = job
    (folder / "ref.py").write_text("def rowsum(x, s, *, N):\n    if N > 1000:\n        raise MemoryError('too big')\n"
                                   "    return x.sum(axis=1)\n")
    plan = plan.model_copy(update={"reference": python_reference(spec, folder / "rowsum_seq.cu.toml")})
    ev = _evaluator(gpu_eval)
    try:
        with pytest.raises(ReferenceFailed) as err:
            ev.verify(spec, SEQUENTIAL, "seq", TREE, plan, "tree")
        assert str(err.value).startswith(f"{folder / 'rowsum_seq.cu.toml'}:21: kernel.rowsum_seq.check.reference: "
                                         "python:ref.py:rowsum raised MemoryError: too big (ref.py:3, in rowsum) at M=4 N=300001")
    finally:
        ev._python.close()


def test_the_worker_answers_reference_requests_and_reports_a_failing_reference(gpu_eval, job):
    import ptxfactory.harness.worker as worker

    spec, plan, folder = job
    parent, child = Pipe()
    thread = threading.Thread(target=worker.worker_main, args=(child,), daemon=True)
    thread.start()
    try:
        parent.send({"op": "reference", "spec": spec.model_dump(mode="json"), "plan": plan.model_dump()})
        assert parent.poll(120) and parent.recv() == {"ok": {"pairs": 3 * len(plan.seeds)}}
        (folder / "ref.py").write_text("def rowsum(x, s, **kw):\n    return x.sum(axis=0)\n")
        broken = plan.model_copy(update={"reference": python_reference(spec, folder / "rowsum_seq.cu.toml")})
        parent.send({"op": "reference", "spec": spec.model_dump(mode="json"), "plan": broken.model_dump()})
        assert parent.poll(120)
        answer = parent.recv()
        assert answer == {"reference_failed": "python:ref.py:rowsum returned shape (8,) for output 's', expected (3,) "
                                              "(shape ['M'] at M=3 N=8) at M=3 N=8"}
    finally:
        parent.close()
        thread.join(30)
    assert not thread.is_alive()


# -- GpuBackend: the reference's answers become the job's error, never the candidate's ------------------------
class _Answers:
    """Stands in for ``GpuBackend._call``: records each request's op and deadline, answers from a list (a session's
    ``open`` is answered ok without taking an answer)."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), []

    async def __call__(self, request, timeout_s):
        self.calls.append((request["op"], timeout_s))
        if request["op"] == "open":
            return {"ok": {"session": request["session"]}}
        return self.answers.pop(0)


def _compiled():
    from ptxfactory.harness.compile import Compiled
    from ptxfactory.search.strategy import original_candidate

    cand = original_candidate(load_spec(ROWSUM / "rowsum_seq.cu.toml").kernels["rowsum_seq"], (ROWSUM / "rowsum_seq.cu").read_text())
    return Compiled(candidate=cand, cubin=b"", lowered_name="rowsum_seq", resources=None, log="")


@pytest.mark.parametrize("answer,message", [
    ({"reference_failed": "python:ref.py:rowsum raised KeyError at M=3 N=8"}, "python:ref.py:rowsum raised KeyError at M=3 N=8"),
    ({"timed_out": 1.0}, "computing its outputs at 12 sizes x seeds took more than"),
])
def test_backend_raises_the_references_failure_with_file_line_key(job, answer, message):
    from ptxfactory.harness.gpu_backend import GpuBackend

    spec, plan, folder = job
    backend = GpuBackend()
    backend._call = _Answers(answer)
    with pytest.raises(ReferenceFailed) as err:
        asyncio.run(backend.evaluate(spec, _compiled(), _compiled(), plan))
    assert str(err.value).startswith(f"{folder / 'rowsum_seq.cu.toml'}:21: kernel.rowsum_seq.check.reference: {message}")
    assert backend._call.calls[0][0] == "reference" and backend._call.calls[0][1] >= 12 * plan.reference.timeout_s


def test_backend_computes_the_reference_when_it_opens_the_session_and_passes_a_late_failure_on(job):
    from ptxfactory.harness.gpu_backend import GpuBackend

    spec, plan, _ = job
    backend = GpuBackend()
    backend._call = _Answers({"ok": {"pairs": 12}}, {"reference_failed": "python:ref.py:rowsum raised X at M=8 N=200001"})
    with pytest.raises(ReferenceFailed, match="raised X at M=8 N=200001"):
        asyncio.run(backend.evaluate(spec, _compiled(), _compiled(), plan))
    assert [op for op, _ in backend._call.calls] == ["reference", "open", "evaluate"]
    backend._call = _Answers({"ok": Rejected(candidate_key="k", check="x", reason="y").model_dump()})
    result = asyncio.run(backend.evaluate(spec, _compiled(), _compiled(), plan.model_copy(update={"reference": None})))
    assert isinstance(result, Rejected) and [op for op, _ in backend._call.calls] == ["open", "evaluate"]


def test_a_reference_too_slow_at_a_bench_size_refuses_the_candidate_not_the_job(gpu_eval, job, monkeypatch):
    """The Python reference fails at a bench size (an O(N^2) reference at a large N): a timed output that differs from
    the original's beyond rtol/atol cannot be judged there and is refused with that reason, the job goes on (the
    error is not raised), the reference is not asked again at that size, and a candidate within rtol/atol of the
    original still passes."""
    spec, plan, _ = job
    ev = _evaluator(gpu_eval)
    bench = plan.bench_sizes[0]
    asked = []
    real = ev.python_reference

    def slow_at_bench(spec_, ref, size, seed, variant, inputs=None):
        if size == bench:
            asked.append(size)
            exc = ref.failed(f"{ref.target} took longer than {ref.timeout_s:g} s (it was stopped)")
            exc.timed_out = True
            raise exc
        return real(spec_, ref, size, seed, variant, inputs)

    monkeypatch.setattr(ev, "python_reference", slow_at_bench)
    try:
        for _ in range(2):  # the tree passes verification against the reference, then differs from the original at N = 200001
            far = ev.evaluate(spec, SEQUENTIAL, "seq", TREE, plan, "tree")
            assert isinstance(far, Rejected) and far.check == "post_timing", far
            assert "the Python reference could not judge at this size" in far.reason and "took longer" in far.reason
        assert len(asked) == 1  # once for the size, whatever the rounds and candidates
        close = NumpyKernel(lambda x, s: _assign(s, np.cumsum(x, axis=1, dtype=np.float32)[:, -1] + np.float32(1e-4)))
        assert isinstance(ev.evaluate(spec, SEQUENTIAL, "seq", close, plan, "close"), Measured)
    finally:
        if ev._python is not None:
            ev._python.close()


def test_a_timed_inout_output_that_differs_from_the_original_is_judged_by_the_reference(gpu_eval, job):
    """An accumulator (``inout``: an atomic sum's ``out``) that a candidate computes in another order differs from the
    original's at a bench size: judged against the reference from its pristine values, as an ``out`` is (once it was
    compared with the original only, and a more accurate warp-aggregated sum was refused)."""
    spec, plan, _ = job
    spec = spec.model_copy(update={"args": [a.model_copy(update={"role": "inout", "init": "zeros"}) if a.name == "s" else a
                                            for a in spec.args]})
    ev = _evaluator(gpu_eval)
    try:
        _, _, problem = ev.time_size(spec, SEQUENTIAL, TREE, plan.bench_sizes[0], plan)
        assert problem is None and ev.last_timing["judgements"] >= 1
        _, _, problem = ev.time_size(spec, SEQUENTIAL, WRONG, plan.bench_sizes[0], plan)
        assert problem and "Python reference" in problem, problem
    finally:
        if ev._python is not None:
            ev._python.close()


def _alternating(delta: float) -> NumpyKernel:
    """The sequential row sum, ``delta`` off on every second launch (its first exact): a float-atomic reduction whose
    error moves from run to run, with a lucky first run."""
    calls = [0]

    def body(x, s):
        _assign(s, np.cumsum(x, axis=1, dtype=np.float32)[:, -1] + np.float32(delta if calls[0] % 2 else 0.0))
        calls[0] += 1

    return NumpyKernel(body)


def test_a_non_deterministic_rerun_is_judged_against_the_originals_least_accurate_run_of_as_many(gpu_eval, job):
    """check.deterministic = false: each rerun of the candidate is judged as no less accurate than the original's
    least accurate run of as many, not its first (lucky) one. The original judged against itself passes (it was
    rejected as a race once on the H200: dot_atomic, 2026-12-04); a candidate whose reruns move further than the
    original's ever do is still refused."""
    spec, plan, _ = job
    spec = spec.model_copy(update={"check": spec.check.model_copy(update={"deterministic": False})})
    plan = plan.model_copy(update={"verify_sizes": [{"M": 3, "N": 8}], "heldout_sizes": [], "seeds": plan.seeds[:1]})
    ev = _evaluator(gpu_eval)
    try:
        assert ev.verify(spec, _alternating(0.1), "alt", _alternating(0.1), plan, "alt") is None
        worse = ev.verify(spec, _alternating(0.0), "exact", _alternating(0.1), plan.model_copy(update={"seeds": [plan.seeds[0] + 1]}), "alt2")
        assert isinstance(worse, Rejected) and worse.check == "race", worse
    finally:
        ev._python.close()
