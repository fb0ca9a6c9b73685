"""The worker's verification on the CPU (NumPy stand-in for CuPy, kernels written in NumPy): the misaligned-view
pass (buffers one element past a 4096-byte boundary, or at the spec's ``align``), the original kernel defining the
contract there, the backend's answer to a fault on misaligned buffers, and ``check.deterministic = false`` with a
Python reference (every rerun judged against the reference). What the H200 runs for real: tests/redteam."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ptxfactory.protocol import Crashed, Measured, Rejected, Resources

from test_reference_worker import SEQUENTIAL, TREE, _Answers, _compiled, _evaluator, _tree, gpu_eval, job  # noqa: F401


class AddressKernel:
    """A row-sum "kernel" that reads its buffers' addresses like a CUDA kernel can: ``body(x, s, aligned16)``."""

    def __init__(self, body):
        self.body = body
        self.resources = Resources(registers=16, shared_bytes=0)
        self.calls = 0

    def dims(self, size):
        return (1, 1, 1), (1, 1, 1), 0

    def __call__(self, args, size):
        from ptxfactory.harness import buffers as B

        x, s, m, n = args
        self.calls += 1
        aligned = B.address(x) % 16 == 0 and B.address(s) % 16 == 0
        self.body(np.asarray(x).reshape(int(m), int(n)), s, aligned)


def _set(s, v):
    s[...] = v


ASSUMES_ALIGNED = AddressKernel(lambda x, s, aligned: _set(s, _tree(x) if aligned else _tree(x) * np.float32(3)))
CHECKS_ALIGNMENT = AddressKernel(lambda x, s, aligned: _set(s, _tree(x)))  # any alignment: same answer


def _kernel_oracle(plan):
    return plan.model_copy(update={"reference": None})


def test_guarded_views_sit_where_asked_and_keep_their_canaries(gpu_eval):
    from ptxfactory.harness import buffers as B

    for dtype, offset in (("f32", 0), ("f32", 4), ("bf16", 2), ("f64", 16), ("u8", 1)):
        g = B.guarded_empty(1001, dtype, offset)
        assert B.address(g.view) % B.PLACEMENT == offset and g.view.size == 1001
        assert g.start >= B.GUARD_BYTES and g.raw.size - g.start - g.view.nbytes >= B.GUARD_BYTES
        assert g.canaries_intact()
        g.raw[g.start - 1] = 0  # one byte before the view: caught
        assert not g.canaries_intact()
    with pytest.raises(ValueError, match="multiple"):
        B.guarded_empty(8, "f32", 2)


def test_misaligned_offset_is_one_element_or_the_declared_align(job):
    from ptxfactory.harness.buffers import misaligned_offset

    spec = job[0]
    x, s = spec.args[0], spec.args[1]
    assert misaligned_offset(x) == 4 and misaligned_offset(s) == 4
    assert misaligned_offset(x.model_copy(update={"align": 16})) == 16
    assert misaligned_offset(x.model_copy(update={"align": 4096})) == 0


def test_a_candidate_assuming_16_byte_alignment_is_rejected_on_misaligned_views(gpu_eval, job):
    spec, plan, _ = job
    ev = _evaluator(gpu_eval)
    for p in (_kernel_oracle(plan), plan):  # the original as the oracle, then the Python reference
        try:
            rejected = ev.verify(spec, TREE, "tree", ASSUMES_ALIGNED, p, "lazy-vec")
        finally:
            if ev._python is not None:
                ev._python.close()
        assert isinstance(rejected, Rejected) and rejected.check == "misaligned_view", rejected
        assert "buffers misaligned (x +4 B, s +4 B from a 4096-byte boundary)" in rejected.reason
        assert rejected.detail["size"] == p.verify_sizes[0]  # caught at the first size already
    assert ev.verify(spec, TREE, "tree", CHECKS_ALIGNMENT, _kernel_oracle(plan), "checks") is None


def test_a_declared_align_is_honoured(gpu_eval, job):
    spec, plan, _ = job
    aligned = spec.model_copy(update={"args": [a.model_copy(update={"align": 16}) if a.is_buffer else a for a in spec.args]})
    ev = _evaluator(gpu_eval)
    assert ev.verify(aligned, TREE, "tree", ASSUMES_ALIGNED, _kernel_oracle(plan), "vec") is None


def test_an_original_that_fails_on_misaligned_views_turns_the_pass_off_and_says_so(gpu_eval, job):
    spec, plan, _ = job
    plan = _kernel_oracle(plan)
    ev = _evaluator(gpu_eval)
    result = ev.evaluate(spec, ASSUMES_ALIGNED, "vec-original", ASSUMES_ALIGNED, plan, "same")
    assert isinstance(result, Measured), result
    assert ev.misaligned_skip["vec-original"].startswith("the original kernel on misaligned buffers at")
    assert result.notes and result.notes[0].startswith("misaligned views not verified: the original kernel")
    plain = ev.evaluate(spec, TREE, "tree", TREE, plan, "tree-again")
    assert isinstance(plain, Measured) and plain.notes == []


def test_a_fault_is_reported_with_the_phase_it_happened_in(gpu_eval, job):
    spec, plan, _ = job

    def fault(x, s, aligned):
        if not aligned:
            raise gpu_eval.cp.cuda.driver.CUDADriverError("CUDA_ERROR_MISALIGNED_ADDRESS: misaligned address")
        _set(s, _tree(x))

    ev = _evaluator(gpu_eval)
    with pytest.raises(gpu_eval.CandidateCrash):
        ev.evaluate(spec, TREE, "tree", AddressKernel(fault), _kernel_oracle(plan), "faults")
    assert ev.phase == "misaligned_view"
    ev = _evaluator(gpu_eval)
    with pytest.raises(gpu_eval.CandidateCrash):
        ev.evaluate(spec, AddressKernel(fault), "faulting-original", TREE, _kernel_oracle(plan), "tree")
    assert ev.phase == "original_misaligned"
    # told by the backend (after the worker restarted), the evaluator skips the pass and notes it
    result = ev.evaluate(spec, AddressKernel(fault), "faulting-original", TREE, _kernel_oracle(plan), "tree",
                         skip_misaligned="the original kernel faulted on misaligned buffers: X")
    assert isinstance(result, Measured) and result.notes == ["misaligned views not verified: the original kernel faulted on misaligned buffers: X"]


def test_backend_makes_a_misaligned_fault_a_rejection_and_retries_without_the_pass_when_the_original_faults(job):
    from ptxfactory.harness.gpu_backend import GpuBackend

    spec, plan, _ = job
    plan = _kernel_oracle(plan)
    backend = GpuBackend()
    backend._call = _Answers({"crashed": "CUDA_ERROR_MISALIGNED_ADDRESS", "phase": "misaligned_view"})
    result = asyncio.run(backend.evaluate(spec, _compiled(), _compiled(), plan))
    assert isinstance(result, Rejected) and result.check == "misaligned_view" and "MISALIGNED_ADDRESS" in result.reason
    measured = Measured(candidate_key="k", timings=[], speedup=1.0).model_dump()
    backend._call = _Answers({"crashed": "CUDA_ERROR_MISALIGNED_ADDRESS", "phase": "original_misaligned"}, {"ok": measured})
    requests = []
    answers = backend._call

    async def call(request, timeout_s):
        if request["op"] == "evaluate":
            requests.append(dict(request))
        return await answers(request, timeout_s)

    backend._call = call
    assert isinstance(asyncio.run(backend.evaluate(spec, _compiled(), _compiled(), plan)), Measured)
    assert "skip_misaligned" not in requests[0] and "faulted on misaligned buffers" in requests[1]["skip_misaligned"]
    backend._call = _Answers({"crashed": "CUDA_ERROR_ILLEGAL_ADDRESS", "phase": "verify"})
    requests.clear()
    assert isinstance(asyncio.run(backend.evaluate(spec, _compiled(), _compiled(), plan)), Crashed)  # any other crash
    # later evaluations of the same original skip the pass from the start
    backend._call = call
    answers.answers = [{"ok": measured}]
    asyncio.run(backend.evaluate(spec, _compiled(), _compiled(), plan))
    assert "skip_misaligned" in requests[-1]


class Moving:
    """A row sum whose reruns move: the first ``good`` launches give the tree sum, later ones ``later(x)``."""

    def __init__(self, later, good: int = 1):
        self.later, self.good, self.calls = later, good, {}
        self.resources = Resources(registers=16, shared_bytes=0)

    def dims(self, size):
        return (1, 1, 1), (1, 1, 1), 0

    def __call__(self, args, size):
        x, s, m, n = args
        x = np.asarray(x).reshape(int(m), int(n))
        key = x.tobytes()[:4096] + bytes(str(x.shape), "ascii")
        self.calls[key] = self.calls.get(key, 0) + 1
        s[...] = _tree(x) if self.calls[key] <= self.good else self.later(x)


def _nondeterministic(spec):
    return spec.model_copy(update={"check": spec.check.model_copy(update={"deterministic": False})})


def test_nondeterministic_reruns_are_judged_against_the_python_reference(gpu_eval, job):
    spec, plan, _ = job
    spec = _nondeterministic(spec)
    ev = _evaluator(gpu_eval)
    try:
        # reruns that move within the reference's acceptance (another summation order): accepted
        jitter = Moving(lambda x: _tree(x, threads=128))
        assert ev.verify(spec, SEQUENTIAL, "seq", jitter, plan, "jitter") is None
        # reruns that go wrong: refused as a race, though the first run of every seed was right
        drift = Moving(lambda x: _tree(x) * np.float32(1.01))
        rejected = ev.verify(spec, SEQUENTIAL, "seq", drift, plan, "drift")
        assert isinstance(rejected, Rejected) and rejected.check == "race", rejected
        assert "a result the Python reference does not accept (check.deterministic = false)" in rejected.reason
    finally:
        ev._python.close()
    # the same moving results with deterministic = true: any change of bits is a race
    ev = _evaluator(gpu_eval)
    try:
        rejected = ev.verify(job[0], SEQUENTIAL, "seq", Moving(lambda x: _tree(x) * np.float32(1 + 2e-7)), plan, "bits")
        assert isinstance(rejected, Rejected) and rejected.check == "race" and "different bits" in rejected.reason
    finally:
        ev._python.close()


def _root(a):
    while a.base is not None:
        a = a.base
    return a


class FarWrite:
    """A tree row sum that also writes one byte ``past`` bytes after the end of ``s`` (inside the raw allocation)."""

    def __init__(self, past: int):
        self.past = past
        self.resources = Resources(registers=16, shared_bytes=0)

    def dims(self, size):
        return (1, 1, 1), (1, 1, 1), 0

    def __call__(self, args, size):
        from ptxfactory.harness import buffers as B

        x, s, m, n = args
        s[...] = _tree(np.asarray(x).reshape(int(m), int(n)))
        raw = _root(s).reshape(-1).view(np.uint8)
        at = B.address(s) - B.address(raw) + s.nbytes + self.past
        if at < raw.size:
            raw[at] = 0


def test_bands_grow_with_the_buffer_so_a_far_write_lands_in_one(gpu_eval, job):
    from ptxfactory.harness import buffers as B

    assert B.band_bytes(48) == B.GUARD_BYTES + 4096 and B.band_bytes(1 << 30) == B.GUARD_BYTES + B.BAND_SCALE_MAX
    spec, plan, _ = job
    plan = _kernel_oracle(plan)
    ev = _evaluator(gpu_eval)
    far = FarWrite(B.GUARD_BYTES + 2048)  # more than 64 KiB past the end of s: past the old fixed band
    rejected = ev.verify(spec, TREE, "tree", far, plan, "far")
    assert isinstance(rejected, Rejected) and rejected.check == "out_of_bounds" and "'s'" in rejected.reason
    # while timed too: every timed buffer has its bands, checked after the timed launches
    size = {"M": 8, "N": 20001}
    cand_t, base_t, problem = ev.time_size(spec, TREE, FarWrite(16), size, plan)
    assert problem == f"out-of-bounds write while timed at {size}: the canary band around 's' changed"
    assert ev.time_size(spec, TREE, TREE, size, plan)[2] is None
