"""Verification and timing on the GPU. Runs only inside the worker process (see :mod:`.worker`).

Order for one candidate (DESIGN.md "One evaluation"): load -> launch limits -> verify at every
spec size and held-out size, several seeds and stress variants (NaN-filled outputs, canary
bands, inputs byte-compared afterwards, a second run compared bit for bit) -> time candidate and
baseline interleaved A/B with CUDA events, inputs rotated through > 3x L2 (or L2 flushed between
launches when the working set is small) -> check the outputs of the last timed launch and of a
seeded random sample of earlier ones, the bands and the inputs -> reject any time under the floor (not applied
at a size where the original itself runs under it: the spec's bytes_moved overstate, and the result's notes say so).

What a job reuses between candidates stays on the device (:class:`~.device_cache.DeviceCache`, capped; evicted
entries are recomputed): the verification inputs per (size, seed, variant), the original's outputs on them, and
the timing input sets per bench size. Outputs are compared on the device (:mod:`.compare`); only a Python
reference's judgement (:func:`.reference.judge`, NumPy) copies them to the host.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import time

import cupy as cp
import numpy as np
from cupy.cuda import driver

from ptxfactory.protocol import GpuFacts, KernelSpec, LaunchConfig, Measured, Rejected, Resources, SizeTiming
from ptxfactory.protocol.expr import ExprError, evaluate
from ptxfactory.protocol.result import FLOOR_FLOPS_FACTOR, floor_not_applied

from . import buffers as B
from . import compare as C
from . import reference as R
from .device_cache import DeviceCache
from .elf import is_elf
from .launch_gate import LaunchGate
from .plan import EvalPlan
from .shadow import judge_against_shadow
from .static_checks import PORTABLE_CLUSTER_BLOCKS
from .stats import speedup_interval

_ATTR_MAX_THREADS, _ATTR_SHARED, _ATTR_LOCAL, _ATTR_REGS = 0, 1, 3, 4
_ATTR_MAX_DYN_SHARED = 8
_ATTR_CLUSTER_DIMS = (11, 12, 13)  # CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_{WIDTH,HEIGHT,DEPTH}: compiled-in cluster
_ATTR_NON_PORTABLE_CLUSTER = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
# sticky CUDA errors, in the driver API's spelling (CUDA_ERROR_...) and the runtime API's (cudaError...: what CuPy's
# synchronize raises)
STICKY_ERRORS = ("ILLEGAL_ADDRESS", "MISALIGNED", "ILLEGAL_INSTRUCTION", "LAUNCH_FAILED", "ASSERT", "HARDWARE_STACK",
                 "TRAP", "INVALID_PC", "INVALID_ADDRESS_SPACE", "IllegalAddress", "LaunchFailure", "MisalignedAddress",
                 "IllegalInstruction", "cudaErrorAssert", "HardwareStackError", "InvalidPc", "InvalidAddressSpace")


class CandidateCrash(RuntimeError):
    """A sticky CUDA error: the context is unusable and the worker must exit."""


class LaunchRejected(ValueError):
    """The launch configuration is invalid at some size (limits, non-positive dims)."""


def is_sticky(exc: BaseException) -> bool:
    text = str(exc)
    return any(code in text for code in STICKY_ERRORS)


class LoadedKernel:
    """A cubin loaded into the worker's context, launchable at any size of the spec. ``cubin`` may also be a PTX
    image (NUL-terminated text: no ptxas where it was compiled), which the driver JIT-compiles here; either way the
    resources are the loaded function's attributes. Raises the driver's error for a cubin it refuses, RuntimeError
    ("the CUDA driver's JIT refused the PTX: ...") for such PTX."""

    def __init__(self, cubin: bytes, lowered_name: str, launch: LaunchConfig):
        self.module = cp.cuda.function.Module()
        self.jit = not is_elf(cubin)
        try:
            self.module.load(cubin)
        except driver.CUDADriverError as exc:
            if not self.jit:
                raise
            raise RuntimeError(f"the CUDA driver's JIT refused the PTX: {exc}") from None
        self.function = self.module.get_function(lowered_name)
        self.launch = launch
        self.digest = hashlib.sha256(cubin).hexdigest()[:16]  # what this artifact is (a cache key's part)
        ptr = self.function.ptr
        self.resources = Resources(
            registers=driver.funcGetAttribute(_ATTR_REGS, ptr),
            shared_bytes=driver.funcGetAttribute(_ATTR_SHARED, ptr),
            local_bytes=driver.funcGetAttribute(_ATTR_LOCAL, ptr),
            max_threads_per_block=driver.funcGetAttribute(_ATTR_MAX_THREADS, ptr),
        )
        self._allow_large_cluster(ptr)
        self._dyn_smem_set = 0
        self._dims: dict[tuple, tuple] = {}  # size -> (grid, block, smem): evaluated once per size, not per launch

    @staticmethod
    def _allow_large_cluster(ptr: int) -> None:
        """A kernel compiled for a cluster past the portable 8 blocks (static_checks.MAX_CLUSTER_BLOCKS: 16 on sm_90)
        launches only once opted in; the driver then refuses the launch itself where the GPU cannot hold one."""
        blocks = math.prod(max(1, driver.funcGetAttribute(a, ptr)) for a in _ATTR_CLUSTER_DIMS)
        if blocks > PORTABLE_CLUSTER_BLOCKS:
            driver.funcSetAttribute(ptr, _ATTR_NON_PORTABLE_CLUSTER, 1)

    def dims(self, size: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """Grid, block and dynamic shared memory (bytes) at ``size``, evaluated once per size (a piecewise launch
        expression costs the host 0.1 ms and more; a timed launch should not wait for it). Raises :class:`LaunchRejected`."""
        key = _size_key(size)
        if key not in self._dims:
            self._dims[key] = self._evaluate_dims(size)
        return self._dims[key]

    def _evaluate_dims(self, size: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        try:
            grid = tuple(int(evaluate(g, size)) for g in self.launch.grid)
            block = tuple(int(evaluate(b, size)) for b in self.launch.block)
            smem = int(evaluate(self.launch.shared_mem, size))
        except ExprError as exc:
            raise LaunchRejected(str(exc)) from None
        threads = math.prod(block)
        if min(grid + block) < 1:
            raise LaunchRejected(f"grid {grid} / block {block} has a non-positive dimension at {size}")
        if threads > self.resources.max_threads_per_block:
            raise LaunchRejected(f"block of {threads} threads exceeds this kernel's limit of {self.resources.max_threads_per_block}")
        if grid[0] > 2**31 - 1 or any(g > 65535 for g in grid[1:]):
            raise LaunchRejected(f"grid {grid} exceeds the device limits at {size}")
        limit = cp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]
        if smem + self.resources.shared_bytes > limit:
            raise LaunchRejected(f"{smem + self.resources.shared_bytes} B of shared memory exceeds the {limit} B per block")
        if smem > 48 * 1024 and smem > self._dyn_smem_set:
            driver.funcSetAttribute(self.function.ptr, _ATTR_MAX_DYN_SHARED, smem)
            self._dyn_smem_set = smem
        return grid + (1,) * (3 - len(grid)), block + (1,) * (3 - len(block)), smem

    def __call__(self, args: tuple, size: dict[str, int]) -> None:
        grid, block, smem = self.dims(size)
        self.function(grid, block, args, shared_mem=smem)


@contextlib.contextmanager
def _held(gate: LaunchGate | None):
    """The launches queued inside wait on the GPU behind ``gate`` (None: no gate) until the block ends, however it ends
    (an exception inside would otherwise leave the GPU waiting out the gate's timeout)."""
    if gate is None:
        yield
        return
    gate.hold()
    try:
        yield
    finally:
        gate.release()


def _args(spec: KernelSpec, size: dict[str, int], buffers: dict[str, cp.ndarray]) -> tuple:
    return tuple(buffers[a.name] if a.is_buffer else B.scalar_value(a, size) for a in spec.args)


def _judge(got: cp.ndarray, want: cp.ndarray, truth: np.ndarray, dtype: str, plan: EvalPlan,
           atol: float | None = None) -> R.Judgement:
    """:func:`.reference.judge` of the candidate's output ``got`` (device, storage dtype) against the Python reference's
    ``truth`` (host, copied to the device), the original's ``want`` alongside; judged on the device (on the host it
    took ~0.1 s per million elements, most of a candidate's evaluation under a Python reference). ``atol``: the
    plan's unless given (a stress variant's, :meth:`GpuEvaluator.stress_atols`)."""
    return R.judge(R.values(cp.asarray(got), dtype), R.values(cp.asarray(want), dtype), cp.asarray(truth), dtype,
                   plan.rtol, plan.atol if atol is None else atol, B.unwritten(got, dtype))


def args_id(spec: KernelSpec) -> str:
    """A digest of ``spec``'s arguments: what the generated inputs (and so the cached outputs) depend on."""
    return hashlib.sha256(json.dumps([a.model_dump(mode="json") for a in spec.args], sort_keys=True).encode()).hexdigest()[:16]


def _reference_id(spec: KernelSpec, ref: R.PythonReference) -> int:
    """What a Python reference's outputs (and its failures) are keyed by: the reference (file digest, timeout) and the
    whole spec."""
    return hash((ref.model_dump_json(), spec.model_dump_json()))


def _size_key(size: dict[str, int]) -> tuple:
    return tuple(sorted(size.items()))


def sample_rounds(plan: EvalPlan, size: dict[str, int], reps: int, k: int) -> list[int]:
    """The timed rounds (of ``reps``; the last excluded: it is always checked) whose outputs are copied aside and
    checked: ``k`` of them (fewer when there are fewer), drawn from a generator seeded by the plan's seeds and
    ``size`` (per job, never the same sample for a fresh plan), sorted."""
    digest = hashlib.sha256(json.dumps([plan.seeds, _size_key(size)]).encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "little"))
    return sorted(rng.sample(range(max(reps - 1, 0)), min(k, max(reps - 1, 0))))


def _compare(got: cp.ndarray, want: cp.ndarray, dtype: str, rtol: float, atol: float, shape: tuple[int, ...]) -> tuple[str, dict] | None:
    """None when ``got`` matches ``want`` (:func:`ptxfactory.harness.compare.mismatches`: integers exactly, f64 in
    f64, ``inf == inf``, NaN only where expected and written), else (why not, in one line; detail: wrong count,
    unwritten count, max |error|, first index). The comparison runs on the device."""
    bad = C.mismatches(got, want, dtype, rtol, atol)
    count = int(bad.sum())
    if count == 0:
        return None
    idx = int(cp.argmax(bad))
    where = tuple(int(i) for i in np.unravel_index(idx, shape)) if shape else (idx,)
    g, w = C.values(got, dtype, cp), C.values(want, dtype, cp)
    gv, wv = g[idx].item(), w[idx].item()
    unwritten = int((B.unwritten(got, dtype) & bad).sum())
    max_err = C.max_abs_error(got, want, dtype)
    what = f"{count} of {got.size} elements wrong"
    if unwritten:
        what += f" ({unwritten} never written, still NaN)"
    detail = {"wrong": count, "elements": int(got.size), "unwritten": unwritten, "max_abs_err": max_err, "first_index": list(where)}
    fmt = (lambda v: f"{v}") if isinstance(gv, int) else (lambda v: f"{v:.6g}")
    return f"{what}; max |err| {max_err:.3g}; first at {list(where)}: got {fmt(gv)}, expected {fmt(wv)}", detail


def _first_difference(spec: KernelSpec, size: dict[str, int], outs: dict, want: dict, plan: EvalPlan,
                      how: str = "") -> str | None:
    """The first output of ``outs`` that misses ``want`` (the spec's tolerances, :func:`_compare`), as
    ``output 'y'{how}: why``; None where every output matches."""
    for arg in spec.args:
        if arg.role in ("out", "inout"):
            bad = _compare(outs[arg.name], want[arg.name], arg.dtype.value, plan.rtol, plan.atol, B.shape_of(arg, size))
            if bad:
                return f"output {arg.name!r}{how}: {bad[0]}"
    return None


RACE_RERUNS_FIRST = 3  # reruns of a size's first seed (every other seed: one)
MISALIGNED = "misaligned_view"  # the check of a candidate that fails (or faults) on buffers at the least alignment allowed



def _available_bytes() -> int:
    """Host memory available now, in bytes (``sysconf``; 0 where the platform does not say)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0

class Evaluator:
    """Owns the worker's CUDA context: GPU facts, cached reference outputs, verification and timing."""

    def __init__(self):
        self._facts: GpuFacts | None = None
        self._device_cache: DeviceCache | None = None  # see :meth:`cache`
        self._loaded: dict[str, LoadedKernel] = {}
        self._python: R.ReferenceProcess | None = None  # the child process running the spec's Python reference
        self._python_cache: dict[tuple, dict[str, np.ndarray]] = {}
        # originals whose misaligned runs fail (base key -> why): the misaligned pass is skipped for their jobs
        self.misaligned_skip: dict[str, str] = {}
        # what the worker is doing, read when a sticky CUDA error ends it: "verify", "original_misaligned"
        # (the original faulted on misaligned buffers), "misaligned_view" (the candidate did), "time"
        self.phase = "verify"
        # the last time_size call: size, n_sets, reps, the sampled rounds, L2 flushes (for tests and benchmarks)
        self.last_timing: dict = {}
        # seconds spent in the Python reference's child process (cache misses), summed; an evaluation reports its share
        self.reference_s = 0.0
        # bench sizes whose Python reference timed out (an O(N^2) reference at N = 65536): (_reference_id, size key) -> why. A timed output there that differs from the original's beyond rtol/atol is refused
        # with that reason (it cannot be judged), not the job; the reference is not asked again at that size
        self.unjudged: dict[tuple, str] = {}
        # the original's output magnitude ratios under a scaled-up stress variant, by (original, args, size, seed,
        # variant): a property of the original's outputs, the same for every candidate (:meth:`stress_atols`)
        self._stress_ratios: dict[tuple, dict[str, float]] = {}
        self._gate: LaunchGate | None = None  # see :meth:`gate`
        self._gate_error: str | None = None
        # the original's float64 shadow (harness/shadow.py): whether it may judge, by original, shadow, tolerances and
        # check sizes (:meth:`use_shadow`: why not, or None), the note of each original's last verdict, and the
        # evaluation in hand's shadow (None where there is none, or it disagreed with the original at the check sizes)
        self._shadow_ok: dict[tuple, str | None] = {}
        self.shadow_notes: dict[str, str] = {}
        self.active_shadow: LoadedKernel | None = None
        self._active_base_key = ""
        self.shadow_accepted = 0  # judgements of the evaluation in hand that only the shadow passed
        self._gate_opened = 0  # gates that had opened by themselves at the last time_size's end

    def close(self) -> None:
        """Stop the Python reference's child process, if any, and free the launch gate (the worker's end)."""
        if self._python is not None:
            self._python.close()
            self._python = None
        if self._gate is not None:
            cp.cuda.Device().synchronize()
            self._gate.close()
            self._gate = None

    def gate(self) -> LaunchGate | None:
        """The worker's :class:`~.launch_gate.LaunchGate`, made on first use; None where it cannot be made (no mapped
        host memory, the gate does not compile, or ``PTXFACTORY_LAUNCH_GATE=off`` in the worker's environment, for an
        A/B of the gate itself: the reason is kept in ``last_timing["gate_error"]``, and launches are timed without it)."""
        if self._gate is None and self._gate_error is None and os.environ.get("PTXFACTORY_LAUNCH_GATE", "").lower() == "off":
            self._gate_error = "turned off by PTXFACTORY_LAUNCH_GATE=off"
        if self._gate is None and self._gate_error is None:
            try:
                self._gate = LaunchGate()
            except Exception as exc:  # noqa: BLE001  (any failure: time without the gate, say why)
                self._gate_error = f"{type(exc).__name__}: {exc}"[:300]
        return self._gate

    # -- facts ---------------------------------------------------------------------------------
    def facts(self) -> GpuFacts:
        """Device name, arch, SM count, L2 bytes, NVML peak bandwidth and a measured D2D copy bandwidth."""
        if self._facts is None:
            from .facts import read_facts

            self._facts = read_facts()
        return self._facts

    DEVICE_CACHE_BYTES = 8 << 30  # at most this (and an eighth of the GPU's memory) kept on the device between candidates

    def cache(self) -> DeviceCache:
        """The device cache of this worker (created on first use): verification inputs and the original's outputs
        per (size, seed, variant), timing input sets per bench size; least recently used evicted past
        min(:attr:`DEVICE_CACHE_BYTES`, an eighth of the device's memory), recomputed when needed again."""
        if self._device_cache is None:
            cap = self.DEVICE_CACHE_BYTES
            try:
                cap = min(cap, int(cp.cuda.Device().mem_info[1]) // 8)
            except Exception:  # noqa: BLE001: no memory info (the CPU stand-in): the fixed cap
                pass
            self._device_cache = DeviceCache(cap)
        return self._device_cache

    def inputs(self, spec: KernelSpec, size: dict[str, int], seed: int, variant: int) -> dict[str, cp.ndarray]:
        """The verification inputs of ``(size, seed, variant)`` (:func:`.buffers.make_inputs`, device arrays by name),
        cached on the device. Never handed to a kernel: :meth:`run_once` copies them into guarded buffers."""
        key = ("inputs", args_id(spec), _size_key(size), seed, variant)
        return self.cache().get_or_make(key, lambda: B.make_inputs(spec, size, seed, variant))

    MAX_LOADED = 64  # modules kept loaded; a long-running daemon must not grow without bound

    def load(self, cubin: bytes, lowered_name: str, launch: LaunchConfig, key: str) -> LoadedKernel:
        """The loaded kernel of this exact ``cubin`` (cached by the SHA-256 of its bytes, the lowered name and
        the launch, never by the candidate's source ``key``: the same source compiled for another arch or with
        other options is another artifact, and the benchmarked artifact is always the candidate's own cubin;
        the oldest modules are unloaded past :attr:`MAX_LOADED`)."""
        digest = hashlib.sha256(cubin).hexdigest() + "|" + lowered_name + "|" + launch.model_dump_json()
        if digest in self._loaded:
            self._loaded[digest] = self._loaded.pop(digest)  # most recently used last
        else:
            while len(self._loaded) >= self.MAX_LOADED:
                self._loaded.pop(next(iter(self._loaded)))
            self._loaded[digest] = LoadedKernel(cubin, lowered_name, launch)
        return self._loaded[digest]

    # -- one launch on fresh guarded buffers ---------------------------------------------------
    def run_once(self, spec: KernelSpec, kernel: LoadedKernel, size: dict[str, int], inputs: dict[str, cp.ndarray],
                 misaligned: bool = False):
        """Launch on private guarded copies of ``inputs`` with NaN-filled outputs; every buffer at a 4096-byte
        boundary, or with ``misaligned`` at :func:`.buffers.misaligned_offset` past one (one element, or the
        spec's ``align``).

        Returns (outputs as device arrays by name, copies in storage dtype; problem string or None): a problem is a
        broken canary band or a changed input.
        """
        guarded: dict[str, B.Guarded] = {}
        for arg in spec.args:
            if not arg.is_buffer:
                continue
            g = B.guarded_empty(arg.numel(size), arg.dtype.value, B.misaligned_offset(arg) if misaligned else 0)
            if arg.role in ("in", "inout"):
                g.view[...] = inputs[arg.name]
            else:
                B.fill_nan(g.view, arg.dtype.value)
            guarded[arg.name] = g
        kernel(_args(spec, size, {n: g.view for n, g in guarded.items()}), size)
        cp.cuda.Device().synchronize()
        for name, g in guarded.items():
            if not g.canaries_intact():
                return {}, f"out-of-bounds write: the canary band around {name!r} changed"
        for arg in spec.args:
            if arg.role == "in" and not bool(cp.array_equal(guarded[arg.name].view, inputs[arg.name])):
                return {}, f"input {arg.name!r} was modified"
        outs = {a.name: guarded[a.name].view.copy() for a in spec.args if a.role in ("out", "inout")}
        return outs, None

    def _least_accurate(self, spec: KernelSpec, base: LoadedKernel, size: dict[str, int], seed: int, variant: int, inputs,
                        plan: EvalPlan, worst: dict[str, tuple[cp.ndarray, float | None]]) -> None:
        """Run the original once more on ``inputs`` and keep, in ``worst`` (output name -> (the original's least accurate
        run so far, its max |error| against the Python reference, None until measured)), whichever run is further from
        the reference. Raises RuntimeError when the original itself breaks a band or changes an input."""
        outs, problem = self.run_once(spec, base, size, inputs)
        if problem:
            raise RuntimeError(f"the original kernel itself failed a check at {size}: {problem}")
        truths = self.python_reference(spec, plan.reference, size, seed, variant, inputs)
        dtypes = {a.name: a.dtype.value for a in spec.args}

        def error(x, name):
            values = R.values(cp.asarray(x), dtypes[name]).reshape(-1).astype(cp.float64)
            return R.max_error(values, cp.asarray(truths[name]).reshape(-1).astype(cp.float64), cp)

        for name, run in outs.items():
            kept, err = worst[name]
            err = error(kept, name) if err is None else err
            worst[name] = max((kept, err), (run, error(run, name)), key=lambda pair: pair[1])

    def reference(self, spec: KernelSpec, base: LoadedKernel, base_key: str, size: dict[str, int], seed: int, variant: int,
                  inputs) -> dict[str, cp.ndarray]:
        """The original's outputs (device arrays by name) on ``inputs`` of ``(size, seed, variant)``: run once, kept in
        the device cache (:meth:`cache`) and run again after an eviction. Raises RuntimeError when the original
        itself breaks a band or changes an input."""
        key = ("ref", base_key, args_id(spec), _size_key(size), seed, variant)
        outs = self.cache().get(key)
        if outs is None:
            outs, problem = self.run_once(spec, base, size, inputs)
            if problem:
                raise RuntimeError(f"the original kernel itself failed a check at {size}: {problem}")
            self.cache().put(key, outs)
        return outs

    # -- the spec's Python reference (check.reference = "python:...") ---------------------------
    # Reference outputs kept on the host, oldest dropped first: a quarter of the memory available when the worker
    # starts, between 2 and 32 GiB. Every candidate's timed rounds are judged against the reference at the bench
    # sizes, whose float64 outputs reach a GiB each; a cache that cannot hold them all recomputes them on the host
    # for every candidate (seconds each).
    PYTHON_CACHE_BYTES = max(2 << 30, min(32 << 30, _available_bytes() // 4))

    def python_reference(self, spec: KernelSpec, ref: R.PythonReference, size: dict[str, int], seed: int, variant: int,
                         inputs: dict[str, cp.ndarray] | None = None) -> dict[str, np.ndarray]:
        """The Python reference's outputs (host ``float64``/``int64`` arrays of each output's shape, by name) on the
        inputs of ``(size, seed, variant)`` (``inputs``, else generated again: the generation is deterministic),
        computed in a child process (:class:`.reference.ReferenceProcess`) and cached. Raises ReferenceFailed."""
        key = (_reference_id(spec, ref), tuple(sorted(size.items())), seed, variant)
        if key not in self._python_cache:
            if self._python is None or (self._python.ref, self._python.spec) != (ref, spec):
                if self._python is not None:
                    self._python.close()
                self._python = R.ReferenceProcess(ref, spec)
            if inputs is None:
                inputs = B.make_inputs(spec, size, seed, variant)
            t0 = time.perf_counter()
            outs = self._python.outputs(size, {name: buf.get() for name, buf in inputs.items()})
            self.reference_s += time.perf_counter() - t0
            while self._python_cache and sum(a.nbytes for o in self._python_cache.values() for a in o.values()) \
                    + sum(a.nbytes for a in outs.values()) > self.PYTHON_CACHE_BYTES:
                self._python_cache.pop(next(iter(self._python_cache)))
            self._python_cache[key] = outs
        return self._python_cache[key]

    def prepare_reference(self, spec: KernelSpec, plan: EvalPlan) -> int:
        """Compute (and cache) the Python reference's outputs at every verification size and seed of ``plan``
        (the worker's ``reference`` request, sent before ``evaluate`` with a deadline of its own). Returns how
        many (size, seed) pairs there are. Raises ReferenceFailed."""
        pairs = 0
        for size in plan.verify_sizes + plan.heldout_sizes:
            for i, seed in enumerate(plan.seeds):
                self.python_reference(spec, plan.reference, size, seed, i % len(B.VARIANTS))
                pairs += 1
        return pairs

    # -- the original's float64 shadow (check.reference = "kernel") -----------------------------
    def use_shadow(self, spec: KernelSpec, base: LoadedKernel, base_key: str, shadow: LoadedKernel | None,
                   plan: EvalPlan) -> LoadedKernel | None:
        """``shadow`` where it may judge this original's outputs, else None: it must run cleanly and agree with the
        original within the spec's tolerance at every check size (seed #0, the spec's distribution), where rounding
        is small; a shadow that does not computes another function (decided once per original: :attr:`shadow_notes`
        says why not)."""
        if shadow is None or plan.reference is not None:
            return None
        verdict = (base_key, shadow.digest, plan.rtol, plan.atol, json.dumps(plan.verify_sizes, sort_keys=True),
                   plan.seeds[0], args_id(spec))  # (a worker outlives jobs: another job's tolerances are another verdict)
        if verdict not in self._shadow_ok:
            why = None
            for size in plan.verify_sizes:
                seed = plan.seeds[0]
                inputs = self.inputs(spec, size, seed, 0)
                want = self.reference(spec, base, base_key, size, seed, 0, inputs)
                outs, problem = self._run_shadow(spec, shadow, size, inputs)
                problem = problem or _first_difference(spec, size, outs, want, plan)
                if problem:
                    why = f"the original's float64 shadow differs from it at {size} ({problem}): not used"
                    break
            if len(self._shadow_ok) > 256:
                self._shadow_ok.clear()
            self._shadow_ok[verdict] = why
        why = self._shadow_ok[verdict]
        if why:
            self.shadow_notes[base_key] = why
        else:
            self.shadow_notes.pop(base_key, None)
        return None if why else shadow

    def _run_shadow(self, spec: KernelSpec, shadow: LoadedKernel, size: dict[str, int], inputs):
        """:meth:`run_once` of the shadow, in :attr:`phase` ``"shadow"`` (a sticky fault there is the shadow's: the
        backend evaluates again without it); a launch error that leaves the context usable is a problem string."""
        phase, self.phase = self.phase, "shadow"
        try:
            shadow.dims(size)  # (its registers may not allow the original's block: LaunchRejected)
            out = self.run_once(spec, shadow, size, inputs)
        except Exception as exc:  # noqa: BLE001 - the shadow's failure is never the candidate's
            if is_sticky(exc):
                raise CandidateCrash(str(exc)) from None  # (phase stays "shadow": the worker reports it)
            out = {}, f"{type(exc).__name__}: {exc}"
        self.phase = phase
        return out

    def shadow_judges(self, spec: KernelSpec, plan: EvalPlan, arg, size: dict[str, int], inputs: dict[str, cp.ndarray],
                      got: cp.ndarray, want: cp.ndarray, atol: float, which: tuple) -> tuple[bool, str]:
        """Whether ``got`` (output ``arg``, which missed the tolerance against the original's ``want`` on ``inputs``)
        passes against the original's float64 shadow (:attr:`active_shadow`), element by element
        (:func:`.shadow.judge_against_shadow`: within the tolerance of the shadow, or no further from it than twice
        the original, where the original is within :data:`.shadow.SHADOW_SPAN` tolerances of it). Floating-point
        outputs only. Returns (passes, a clause for the rejection's reason). ``which`` names ``inputs`` among those of
        ``size`` (``(seed, variant)``, or ``("timed", set)``): the shadow's outputs on them are cached under it."""
        shadow = self.active_shadow
        if shadow is None or arg.dtype.value not in R.FLOATS:  # (integer outputs stay exact)
            return False, ""
        cache_key = ("shadow", self._active_base_key, shadow.digest, args_id(spec), _size_key(size), *which)
        outs = self.cache().get(cache_key)
        if outs is None:
            outs, problem = self._run_shadow(spec, shadow, size, inputs)
            if problem:
                return False, f"; the original's float64 shadow could not run here ({problem})"
            self.cache().put(cache_key, outs)
        dtype = arg.dtype.value
        ok, clause = judge_against_shadow(R.values(got, dtype), R.values(want, dtype), R.values(outs[arg.name], dtype),
                                          dtype, plan.rtol, atol, B.unwritten(got, dtype))
        self.shadow_accepted += ok
        return ok, clause

    # -- verification --------------------------------------------------------------------------
    def verify(self, spec: KernelSpec, base: LoadedKernel, base_key: str, cand: LoadedKernel, plan: EvalPlan, key: str,
               errors: list | None = None) -> Rejected | None:
        """Run every verification size x seed; the first failure becomes a :class:`Rejected`.

        With a Python reference (``plan.reference``) every output is judged against it, and so is the original's
        (:func:`.reference.judge`: within tolerance, or no less accurate than the original); each judgement's
        errors are appended to ``errors`` (:class:`.reference.ErrorRecord`). Otherwise the original is the oracle.
        """
        sizes = [(s, False) for s in plan.verify_sizes] + [(s, True) for s in plan.heldout_sizes]
        for k, (size, heldout) in enumerate(sizes):
            label = f"{'held-out ' if heldout else ''}size {size}"
            try:
                cand.dims(size)
            except LaunchRejected as exc:
                return Rejected(candidate_key=key, check="launch", reason=f"{label}: {exc}")
            for i, seed in enumerate(plan.seeds):
                variant = i % len(B.VARIANTS)
                inputs = self.inputs(spec, size, seed, variant)
                where = f"{label}, seed #{i} ({B.VARIANTS[variant][0]})"
                if i % 2 == 0:  # reference first (cached per size and seed) ...
                    want = self.reference(spec, base, base_key, size, seed, variant, inputs)
                    got, problem = self.run_once(spec, cand, size, inputs)
                else:  # ... or candidate first, then a fresh reference run on separate buffers
                    got, problem = self.run_once(spec, cand, size, inputs)
                    want, ref_problem = self.run_once(spec, base, size, inputs)
                    if ref_problem:
                        raise RuntimeError(f"the original kernel itself failed a check at {size}: {ref_problem}")
                if problem:
                    check = "input_mutated" if "modified" in problem else "out_of_bounds"
                    return Rejected(candidate_key=key, check=check, reason=f"{where}: {problem}",
                                    detail={"size": size, "seed_index": i, "heldout": heldout})
                atols = self.stress_atols(spec, base, base_key, plan, size, seed, variant, want)
                for arg in spec.args:
                    if arg.role in ("out", "inout") and plan.reference is not None:
                        truth = self.python_reference(spec, plan.reference, size, seed, variant, inputs)[arg.name]
                        dtype = arg.dtype.value
                        j = _judge(got[arg.name], want[arg.name], truth, dtype, plan, atols[arg.name])
                        if errors is not None:
                            errors.append(R.ErrorRecord(size, arg.name, heldout, j.candidate_err, j.original_err, j.within_tol))
                        if not j.ok:
                            return Rejected(candidate_key=key, check="correctness",
                                            reason=f"{where}: {R.describe(j, arg.name, B.shape_of(arg, size))}",
                                            detail={"size": size, "seed_index": i, "variant": B.VARIANTS[variant][0],
                                                    "heldout": heldout, "reference": plan.reference.target, "wrong": j.wrong,
                                                    "candidate_max_abs": j.candidate_err, "original_max_abs": j.original_err,
                                                    "bound": j.bound})
                    elif arg.role in ("out", "inout"):
                        atol = atols[arg.name]
                        bad = _compare(got[arg.name], want[arg.name], arg.dtype.value, plan.rtol, atol, B.shape_of(arg, size))
                        if bad:  # the original's own rounding may be what differs (a serial sum over a long row)
                            shadow_ok, clause = self.shadow_judges(spec, plan, arg, size, inputs, got[arg.name],
                                                                   want[arg.name], atol, (seed, variant))
                            bad = None if shadow_ok else (bad[0] + clause, bad[1])
                        if bad:
                            why, detail = bad
                            if atol != plan.atol:
                                why += f" (atol {atol:.3g}: the spec's {plan.atol:g} times the outputs' scale under this variant)"
                            return Rejected(candidate_key=key, check="correctness", reason=f"{where}: output {arg.name!r}: {why}",
                                            detail={"size": size, "seed_index": i, "variant": B.VARIANTS[variant][0],
                                                    "heldout": heldout, "atol": atol, **detail})
                # Races: every seed runs again on the same inputs (the first seed of a size three times more);
                # a result that moves is a race, unless the spec allows non-deterministic reductions
                # (check.deterministic = false): then each rerun is judged against the reference by the tolerance,
                # or as no less accurate than the original's least accurate run of as many (its error moves too: one
                # lucky run of the original, near a dot product of ~0, rejected the original itself as a race)
                judged_rerun = not spec.check.deterministic and plan.reference is not None
                worst = {name: (out, None) for name, out in want.items()}
                for rerun in range(RACE_RERUNS_FIRST if i == 0 else 1):
                    again, problem = self.run_once(spec, cand, size, inputs)
                    if judged_rerun and not problem:
                        self._least_accurate(spec, base, size, seed, variant, inputs, plan, worst)
                    for arg in spec.args:
                        if arg.role not in ("out", "inout"):
                            continue
                        name, first = arg.name, got[arg.name]
                        if problem:
                            moved = True
                        elif spec.check.deterministic:  # bit for bit, on the device
                            moved = not bool(cp.array_equal(first.view(cp.uint8), again[name].view(cp.uint8)))
                        elif plan.reference is None:
                            moved = bool(C.mismatches(again[name], want[name], arg.dtype.value, plan.rtol, atols[name]).any()) \
                                and not self.shadow_judges(spec, plan, arg, size, inputs, again[name], want[name], atols[name],
                                                           (seed, variant))[0]
                        else:  # each rerun judged against the Python reference by the same rule as the first run
                            dtype = arg.dtype.value
                            truth = self.python_reference(spec, plan.reference, size, seed, variant, inputs)[name]
                            moved = not _judge(again[name], worst[name][0], truth, dtype, plan, atols[name]).ok
                        if moved:
                            how = ("different bits" if spec.check.deterministic
                                   else "a result outside the tolerance (check.deterministic = false)" if plan.reference is None
                                   else "a result the Python reference does not accept (check.deterministic = false)")
                            return Rejected(candidate_key=key, check="race",
                                            reason=f"{where}: run {rerun + 2} on the same inputs gave {how} in {name!r}"
                                                   + (f" ({problem})" if problem else ""),
                                            detail={"size": size, "heldout": heldout, "seed_index": i})
            rejected = self.verify_misaligned(spec, base, base_key, cand, plan, key, size, k % len(plan.seeds), label, heldout)
            if rejected is not None:
                return rejected
        return None

    def stress_atols(self, spec: KernelSpec, base: LoadedKernel, base_key: str, plan: EvalPlan, size: dict[str, int],
                     seed: int, variant: int, want: dict) -> dict[str, float]:
        """The absolute tolerance per output (by name) under stress ``variant`` (against the original as the oracle,
        and in a Python reference's "within tolerance" test):
        the spec's ``atol`` where the variant keeps the inputs' scale or shrinks it; where it scales them up (``large
        magnitude x64``), ``atol`` times how much larger the original's outputs ``want`` are there than under the
        spec's distribution at the same size (:func:`.compare.magnitude_ratio`, at least 1). An absolute tolerance is
        written for outputs at the spec's scale: a sum of products 4096 times larger carries rounding 4096 times
        larger, in the original as in any candidate that sums in another order (a cancelled output of a bf16 GEMM,
        0.18 against 0.196 at x64, H200, 2026-12-05). The ratio is at most the square of the inputs' scale (a sum of
        products of two scaled inputs: a GEMM's 4096), so a plain-variant output that is small by chance (a size of
        one output) cannot widen it further. ``rtol`` is unchanged, and the variant's other checks too."""
        outputs = [a for a in spec.args if a.role in ("out", "inout")]
        scale = B.VARIANTS[variant][2]
        if scale <= 1.0:
            return {a.name: plan.atol for a in outputs}
        key = (base_key, args_id(spec), _size_key(size), seed, variant)
        if key not in self._stress_ratios:  # (computed once per original, size and seed: every candidate's the same)
            if len(self._stress_ratios) > 4096:
                self._stress_ratios.clear()
            seed0 = plan.seeds[0]
            plain = self.reference(spec, base, base_key, size, seed0, 0, self.inputs(spec, size, seed0, 0))
            self._stress_ratios[key] = {a.name: min(scale * scale, C.magnitude_ratio(want[a.name], plain[a.name], a.dtype.value))
                                        for a in outputs}
        return {name: plan.atol * ratio for name, ratio in self._stress_ratios[key].items()}

    def verify_misaligned(self, spec: KernelSpec, base: LoadedKernel, base_key: str, cand: LoadedKernel, plan: EvalPlan,
                          key: str, size: dict[str, int], i: int, label: str, heldout: bool) -> Rejected | None:
        """The candidate once more at ``size`` on seed #``i``, every buffer at :func:`.buffers.misaligned_offset`
        past a 4096-byte boundary (one element, or the spec's ``align``): a kernel that assumes more alignment than
        the spec promises fails here. A sticky fault propagates (the worker reports it with :attr:`phase`
        ``"misaligned_view"``, and the backend makes it a ``misaligned_view`` rejection).

        The original kernel runs there first (once per size, cached): if it breaks a canary, changes an input or
        disagrees with its own aligned output, the user's kernel does not support such views, and the pass is
        skipped for this original (:attr:`misaligned_skip` says why; a fault of the original is reported with
        :attr:`phase` ``"original_misaligned"``). Returns a ``misaligned_view`` :class:`Rejected` or None."""
        if base_key in self.misaligned_skip:
            return None
        seed, variant = plan.seeds[i], i % len(B.VARIANTS)
        inputs = self.inputs(spec, size, seed, variant)
        offsets = ", ".join(f"{a.name} +{B.misaligned_offset(a)} B" for a in spec.args if a.is_buffer)
        where = f"{label}, seed #{i} ({B.VARIANTS[variant][0]}), buffers misaligned ({offsets} from a 4096-byte boundary)"
        want = self.reference(spec, base, base_key, size, seed, variant, inputs)
        cache_key = ("ref", base_key, args_id(spec), _size_key(size), seed, variant, "misaligned")
        orig = self.cache().get(cache_key)
        if orig is None:
            self.phase = "original_misaligned"
            orig, problem = self.run_once(spec, base, size, inputs, misaligned=True)
            self.phase = "verify"
            problem = problem or _first_difference(spec, size, orig, want, plan, " differs from its aligned run")
            if problem:
                self.misaligned_skip[base_key] = f"the original kernel on misaligned buffers at {size}: {problem}"
                return None
            self.cache().put(cache_key, orig)
        self.phase = "misaligned_view"
        got, problem = self.run_once(spec, cand, size, inputs, misaligned=True)
        self.phase = "verify"
        detail = {"size": size, "seed_index": i, "heldout": heldout, "offsets": offsets}
        if problem:
            return Rejected(candidate_key=key, check=MISALIGNED, reason=f"{where}: {problem}", detail=detail)
        atols = self.stress_atols(spec, base, base_key, plan, size, seed, variant, want)
        for arg in spec.args:
            if arg.role not in ("out", "inout"):
                continue
            dtype = arg.dtype.value
            if plan.reference is not None:
                truth = self.python_reference(spec, plan.reference, size, seed, variant, inputs)[arg.name]
                j = _judge(got[arg.name], orig[arg.name], truth, dtype, plan, atols[arg.name])
                why = None if j.ok else R.describe(j, arg.name, B.shape_of(arg, size))
            else:
                bad = _compare(got[arg.name], want[arg.name], dtype, plan.rtol, atols[arg.name], B.shape_of(arg, size))
                if bad:
                    shadow_ok, clause = self.shadow_judges(spec, plan, arg, size, inputs, got[arg.name], want[arg.name],
                                                           atols[arg.name], (seed, variant))
                    bad = None if shadow_ok else (bad[0] + clause, bad[1])
                why = f"output {arg.name!r}: {bad[0]}" if bad else None
            if why:
                return Rejected(candidate_key=key, check=MISALIGNED, reason=f"{where}: {why}", detail=detail)
        return None

    # -- timing --------------------------------------------------------------------------------
    SAMPLED_ROUNDS = 4  # timed rounds, besides the last, whose outputs are copied aside (outside the events) and checked
    SAMPLE_BYTES = 2 << 30  # at most this many bytes of side copies: fewer rounds sampled for big outputs (at least one)
    FLUSH_FACTOR = 2  # an L2 flush writes a scratch buffer of this many times the L2 size
    # a candidate whose probe launch takes SLOW_RATIO x the original's and at least SLOW_MS is timed with SLOW_REPS
    # rounds and no warm-up: at a speedup under 1/8 the precision does not change a decision, and a 1 s launch timed
    # the full way costs ~10 s per size (a rewrite that serialises a kernel's work does that)
    SLOW_RATIO = 8.0
    SLOW_MS = 5.0
    SLOW_REPS = 2

    def timing_inputs(self, spec: KernelSpec, size: dict[str, int], n_sets: int) -> tuple[list[dict], tuple]:
        """The ``n_sets`` timing input sets at ``size`` and their cache key: set ``s`` holds ``"pristine"`` (the
        inputs of seed ``1000 + s``, variant 0, by name: every in and inout buffer, never handed to a kernel) and
        ``"shared"`` (a :class:`.buffers.Guarded` copy of each ``in`` buffer, which both sides read). Cached on the
        device across candidates; :meth:`time_size` drops the entry when a candidate broke a band or an input."""
        key = ("timing", args_id(spec), _size_key(size), n_sets)

        def make() -> list[dict]:
            sets = []
            for s in range(n_sets):
                pristine = B.make_inputs(spec, size, 1000 + s, 0)
                shared = {}
                for arg in spec.args:
                    if arg.role == "in":
                        shared[arg.name] = B.guarded_empty(arg.numel(size), arg.dtype.value)
                        shared[arg.name].view[...] = pristine[arg.name]
                sets.append({"pristine": pristine, "shared": shared})
            return sets

        return self.cache().get_or_make(key, make), key

    def time_size(self, spec: KernelSpec, base: LoadedKernel, cand: LoadedKernel, size: dict[str, int], plan: EvalPlan,
                  few_rounds: bool = True):
        """Median/p20/p80 µs of candidate and baseline at ``size``, interleaved A/B.

        Every timed buffer sits between canary bands, every ``out`` buffer is poisoned and every ``inout`` buffer
        reset to its pristine values before each timed launch (outside its events), as in verification. The launches rotate through ``n_sets`` buffer sets (more than 3x
        the L2 size of bytes, at most 8 sets); when 8 sets stay under that, a scratch buffer of
        :attr:`FLUSH_FACTOR` x L2 is written before every timed launch of either side (outside the events), so no
        launch finds its inputs in L2. Each timed launch waits behind a :class:`~.launch_gate.LaunchGate` until the
        host has queued it with its events, so the events hold GPU time only (``last_timing["gated"]``; without a gate,
        as before, ``gate_error`` says why). Afterwards: every band intact, every ``in`` buffer equal to its pristine copy,
        and the outputs of the last round and of up to :attr:`SAMPLED_ROUNDS` rounds drawn per job
        (:func:`sample_rounds`; copied aside right after their launch, outside the events) equal to the original's of
        the same round (:func:`_compare`; with a Python reference, an output that differs is judged against it, an
        ``inout`` one from its pristine values).

        A side whose probe launch takes :attr:`SLOW_RATIO` x the other's and at least :attr:`SLOW_MS` runs fewer
        rounds: a slow candidate :attr:`SLOW_REPS` rounds in all, a slow original only the first ``base_rounds``
        (:attr:`SLOW_REPS`, or one per timing set; ``last_timing["base_rounds"]``), the candidate's later rounds
        judged against the original's outputs of the same set; either is timed again the full way where the timed
        rounds contradict the probe.

        Returns (cand_times_us, base_times_us, post_timing_problem or None); the base's list is shorter where the
        original sat rounds out.
        """
        facts = self.facts()
        in_bytes = sum(a.numel(size) * a.dtype.itemsize for a in spec.args if a.is_buffer)
        n_sets = max(1, min(8, math.ceil(3 * facts.l2_bytes / max(in_bytes, 1))))
        flush = n_sets * in_bytes < 3 * facts.l2_bytes
        held, held_key = self.timing_inputs(spec, size, n_sets)
        outputs = [a for a in spec.args if a.role in ("out", "inout")]
        sets = []
        guards: list[tuple[str, B.Guarded]] = []  # the candidate's buffers and the shared inputs, checked afterwards
        for h in held:
            guards += list(h["shared"].items())
            per = {}
            for who in ("base", "cand"):
                bufs = {}
                for arg in spec.args:
                    if arg.role == "in":
                        bufs[arg.name] = h["shared"][arg.name].view
                    elif arg.role in ("inout", "out"):
                        g = B.guarded_empty(arg.numel(size), arg.dtype.value)
                        if arg.role == "inout":  # both sides start from the same values, every time
                            g.view[...] = h["pristine"][arg.name]
                        bufs[arg.name] = g.view
                        if who == "cand":
                            guards.append((arg.name, g))
                per[who] = _args(spec, size, bufs), bufs
            sets.append(per)
        kernels = {"base": base, "cand": cand}
        # one probe of each side (the same number of launches on both: inout buffers stay in step) sizes the number
        # of repetitions (~0.25 s per kernel at most); a candidate far slower than the original is timed with
        # SLOW_REPS rounds and no warm-up (its speedup is known to be tiny; the full rounds would cost seconds)
        probe = [cp.cuda.Event() for _ in range(3)]
        gate = self.gate()  # (the launches behind it run back to back: see below)
        with _held(gate):
            probe[0].record()
            kernels["base"](sets[0]["base"][0], size)
            probe[1].record()
            kernels["cand"](sets[0]["cand"][0], size)
            probe[2].record()
        probe[2].synchronize()
        base_ms, cand_ms = cp.cuda.get_elapsed_time(probe[0], probe[1]), cp.cuda.get_elapsed_time(probe[1], probe[2])
        slow = few_rounds and cand_ms >= self.SLOW_MS and cand_ms >= self.SLOW_RATIO * base_ms
        # ... and an original far slower than the candidate (a naive kernel 100x slower than its rewrite: 0.77 s a
        # launch took 19 s of every candidate's evaluation, H200, 2026-12-05) runs in the first rounds only, at least
        # once on every timing set (its outputs there judge the candidate's of every round on that set)
        slow_base = few_rounds and not slow and base_ms >= self.SLOW_MS and base_ms >= self.SLOW_RATIO * cand_ms
        if not slow:
            for _ in range(plan.warmup):
                for who in (("cand",) if slow_base else ("base", "cand")):
                    kernels[who](sets[0][who][0], size)
        cp.cuda.Device().synchronize()
        if slow:
            reps = self.SLOW_REPS
        elif slow_base:
            reps = int(max(5, min(plan.timing_reps, 250 / max(cand_ms, 1e-3))))
        else:
            reps = int(max(5, min(plan.timing_reps, 250 / max(base_ms + cand_ms, 1e-3))))
        base_rounds = min(reps, max(self.SLOW_REPS, n_sets)) if slow_base else reps
        out_bytes = sum(a.numel(size) * a.dtype.itemsize for a in outputs)
        sampled = sample_rounds(plan, size, reps, max(1, min(self.SAMPLED_ROUNDS, self.SAMPLE_BYTES // max(2 * out_bytes, 1))))
        side = {r: {who: {a.name: cp.empty_like(sets[r % n_sets][who][1][a.name]) for a in outputs} for who in kernels
                    if who == "cand" or r < base_rounds}
                for r in sampled}
        scratch = cp.empty(self.FLUSH_FACTOR * facts.l2_bytes, dtype=cp.uint8) if flush else None
        self.last_timing = {"size": size, "n_sets": n_sets, "reps": reps, "sampled": sampled, "flushes": 0, "judgements": 0,
                            "slow": slow, "base_rounds": base_rounds}
        events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(2 * reps)]
        # each timed launch queued behind a gate: its events time the GPU, never the host preparing the launch
        self.last_timing.update(gated=gate is not None, gate_error=self._gate_error)
        times = {"base": [], "cand": []}
        order = []
        for r in range(reps):
            pair = ("base", "cand") if r % 2 == 0 else ("cand", "base")
            for j, who in enumerate(pair):
                if who == "base" and r >= base_rounds:
                    continue
                bufs = sets[r % n_sets][who][1]
                # every timed launch gets poisoned outputs and its inout buffers reset to their pristine values
                # (outside its events): no launch can tell whether it is one of those checked, and each computes
                # from the inputs its round is judged on (an accumulating kernel does not drift over the rounds)
                for arg in spec.args:
                    if arg.role == "out":
                        B.fill_nan(bufs[arg.name], arg.dtype.value)
                    elif arg.role == "inout":
                        bufs[arg.name][...] = held[r % n_sets]["pristine"][arg.name]
                if scratch is not None:  # evict the inputs from L2 (outside the events; both sides alike)
                    scratch.fill(1 + r % 251)
                    self.last_timing["flushes"] += 1
                start, end = events[2 * r + j]
                with _held(gate):
                    start.record()
                    kernels[who](sets[r % n_sets][who][0], size)
                    end.record()
                if r in side and who in side[r]:  # a sampled round: its outputs, read right after the launch, outside the events
                    for arg in outputs:
                        cp.copyto(side[r][who][arg.name], bufs[arg.name])
                order.append((who, start, end))
        cp.cuda.Device().synchronize()
        if gate is not None:  # a gate that opened by itself: that launch's time may hold host time (a stalled host)
            opened = gate.timeouts()  # (cumulative: one read a size, after the synchronize above)
            self.last_timing["gate_timeouts"] = opened - self._gate_opened
            self._gate_opened = opened
        for who, start, end in order:
            times[who].append(cp.cuda.get_elapsed_time(start, end) * 1e3)
        if slow and float(np.median(times["cand"])) < self.SLOW_RATIO * float(np.median(times["base"])):
            # the timed rounds contradict the probe (slow on its first launch only): timed again the full way
            return self.time_size(spec, base, cand, size, plan, few_rounds=False)
        if slow_base and float(np.median(times["base"])) < self.SLOW_RATIO * float(np.median(times["cand"])):
            return self.time_size(spec, base, cand, size, plan, few_rounds=False)  # (the same, for the original)
        problem = next((f"out-of-bounds write while timed at {size}: the canary band around {name!r} changed"
                        for name, g in guards if not g.canaries_intact()), None)
        for h in held:
            for name, g in h["shared"].items():
                if problem is None and not bool(cp.array_equal(g.view.view(cp.uint8), h["pristine"][name].view(cp.uint8))):
                    problem = f"input {name!r} was modified while timed at {size}"
        if problem is not None:
            self.cache().pop(held_key)  # a broken band or input is never handed to the next candidate
            return times["cand"], times["base"], problem
        last = reps - 1
        checked = [(last, sets[last % n_sets]["cand"][1], sets[last % n_sets]["base"][1])]
        # (a round the original sat out: its outputs on that set are in its buffers, from its last launch there)
        checked += [(r, side[r]["cand"], side[r]["base"] if "base" in side[r] else sets[r % n_sets]["base"][1])
                    for r in sampled]
        judged: dict[int, dict[str, cp.ndarray]] = {}  # per timing set: candidate outputs already judged good
        for r, cand_out, base_out in checked:
            s = r % n_sets
            problem = self._check_timed(spec, plan, size, r, reps, s, held[s]["pristine"], cand_out, base_out, judged.get(s))
            if problem:
                break
            judged.setdefault(s, cand_out)
        return times["cand"], times["base"], problem

    def _check_timed(self, spec: KernelSpec, plan: EvalPlan, size: dict[str, int], r: int, reps: int, s: int,
                     pristine: dict[str, cp.ndarray], cand_out: dict[str, cp.ndarray], base_out: dict[str, cp.ndarray],
                     judged: dict[str, cp.ndarray] | None = None) -> str | None:
        """Why the candidate's outputs of timed round ``r`` (of ``reps``, on timing set ``s`` whose inputs are
        ``pristine``) do not match the original's of the same round, or None. With a Python reference, an output
        that differs from a possibly less accurate original is judged against the reference on the same inputs,
        unless it is bit for bit the output of an earlier round on the same set that passed (``judged``): the
        judgement runs on the host and costs seconds at bench sizes, once per set instead of once per round."""
        label = "the last timed launch" if r == reps - 1 else f"timed launch {r + 1} of {reps} (one sampled at random)"
        for arg in spec.args:
            if arg.role not in ("out", "inout"):
                continue
            dtype = arg.dtype.value
            bad = _compare(cand_out[arg.name], base_out[arg.name], dtype, plan.rtol, plan.atol, B.shape_of(arg, size))
            bad = bad and bad[0]
            if bad and judged is not None and bool(cp.array_equal(cand_out[arg.name].view(cp.uint8), judged[arg.name].view(cp.uint8))):
                bad = None  # the same bytes as a round already judged on these inputs
            if bad and plan.reference is not None:  # (an inout is judged from its pristine values)
                bad = self._judge_timed(spec, plan, size, s, pristine, arg, cand_out[arg.name], base_out[arg.name], bad)
            elif bad and self.active_shadow is not None:  # (the shadow runs on the set's pristine inputs, once per set)
                shadow_ok, clause = self.shadow_judges(spec, plan, arg, size, pristine, cand_out[arg.name],
                                                       base_out[arg.name], plan.atol, ("timed", s))
                bad = None if shadow_ok else bad + clause
            if bad:
                return f"output {arg.name!r} of {label} at {size}: {bad}"
        return None

    def _judge_timed(self, spec: KernelSpec, plan: EvalPlan, size: dict[str, int], s: int, pristine: dict[str, cp.ndarray],
                     arg, got: cp.ndarray, want: cp.ndarray, differs: str) -> str | None:
        """Why the timed output ``got`` of ``arg`` (which ``differs`` from the original's ``want``) fails against the
        Python reference on timing set ``s``, or None. A reference that timed out at this size is not asked there again
        (:attr:`unjudged`); while it cannot judge, the difference stands, with the reason."""
        where = (_reference_id(spec, plan.reference), _size_key(size))
        why = self.unjudged.get(where)
        if why is None:
            try:
                truth = self.python_reference(spec, plan.reference, size, 1000 + s, 0, pristine)[arg.name]
            except R.ReferenceFailed as exc:  # the job goes on: this candidate cannot be judged at this size
                why = exc.message
                if exc.timed_out:  # (a crash, out of memory say, may not recur: the next candidate asks again)
                    self.unjudged[where] = why
            else:
                self.last_timing["judgements"] = self.last_timing.get("judgements", 0) + 1
                j = _judge(got, want, truth, arg.dtype.value, plan)
                return None if j.ok else R.describe(j, arg.name, B.shape_of(arg, size))
        return f"{differs} (the Python reference could not judge at this size: {why})"

    def evaluate(self, spec: KernelSpec, base: LoadedKernel, base_key: str, cand: LoadedKernel, plan: EvalPlan, key: str,
                 skip_misaligned: str | None = None, shadow: LoadedKernel | None = None):
        """Verify then time; returns Measured or Rejected. Raises :class:`CandidateCrash` on a sticky CUDA error
        (:attr:`phase` says where). ``skip_misaligned``: why the misaligned pass is off for this original (it
        faulted there in an earlier worker); a Measured result's ``notes`` say so. ``shadow``: the original's float64
        shadow (:mod:`.shadow`), which judges an output that misses the tolerance against the original
        (:meth:`shadow_judges`), where :meth:`use_shadow` accepts it."""
        t0, ref0 = time.perf_counter(), self.reference_s
        if skip_misaligned:
            self.misaligned_skip[base_key] = skip_misaligned
        self._active_base_key = base_key
        self.active_shadow = None
        self.shadow_accepted = 0
        try:
            self.phase = "verify"
            self.active_shadow = self.use_shadow(spec, base, base_key, shadow, plan)
            errors: list[R.ErrorRecord] = []
            self.phase = "verify"
            rejected = self.verify(spec, base, base_key, cand, plan, key, errors)
            self.phase = "time"
            verify_s = time.perf_counter() - t0
            if rejected is not None:
                return rejected.model_copy(update={"resources": cand.resources, "wall_s": verify_s, "verify_s": verify_s,
                                                   "reference_s": self.reference_s - ref0})
            facts = self.facts()
            timings, samples, slow, slow_base, floor_notes, gate_notes = [], [], [], [], [], []
            for size in plan.bench_sizes:
                try:
                    cand.dims(size)
                except LaunchRejected as exc:
                    return Rejected(candidate_key=key, check="launch", reason=f"bench size {size}: {exc}", resources=cand.resources)
                ct, bt, problem = self.time_size(spec, base, cand, size, plan)
                samples.append((ct, bt))
                if self.last_timing.get("slow"):
                    slow.append(size)
                if self.last_timing.get("base_rounds", 0) < self.last_timing.get("reps", 0):
                    slow_base.append((size, self.last_timing["base_rounds"], self.last_timing["reps"]))
                if self.last_timing.get("gate_timeouts"):
                    gate_notes.append(f"{self.last_timing['gate_timeouts']} timed launches at {size} waited "
                                      f"{LaunchGate.TIMEOUT_NS / 1e9:g} s for the host: their times may hold host time")
                if problem:
                    return Rejected(candidate_key=key, check="post_timing", reason=problem, resources=cand.resources,
                                    wall_s=time.perf_counter() - t0)
                nbytes = spec.bytes_moved_at(size)
                med = float(np.median(ct))
                flops = spec.flops_at(size)
                floor_us = spec.floor_us(size, facts.peak_gbps, facts.peak_tflops * FLOOR_FLOPS_FACTOR)
                base_med = float(np.median(bt))
                if base_med < floor_us:  # the spec's claim is wrong here, not the candidate: nothing to hold it to
                    floor_notes.append(floor_not_applied(size, base_med, floor_us))
                elif med < floor_us:
                    return Rejected(candidate_key=key, check="impossible_time", resources=cand.resources,
                                    reason=f"{med:.2f} µs at {size} is under the {floor_us:.2f} µs floor of {nbytes} bytes at "
                                           f"{facts.peak_gbps:.0f} GB/s and {flops} FLOP at {facts.peak_tflops * FLOOR_FLOPS_FACTOR:.0f} TFLOP/s")
                gbps = nbytes / (med * 1e3)
                tflops = flops / (med * 1e6)
                timings.append(SizeTiming(
                    size=size, median_us=med, p20_us=float(np.percentile(ct, 20)), p80_us=float(np.percentile(ct, 80)),
                    baseline_median_us=base_med, bytes_moved=nbytes, gbps=gbps,
                    pct_of_copy=100 * gbps / facts.copy_gbps, floor_us=floor_us, flops=flops, tflops=tflops,
                    pct_of_peak_flops=100 * tflops / facts.peak_tflops if facts.peak_tflops else 0.0,
                ))
        except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as exc:
            if is_sticky(exc):
                raise CandidateCrash(str(exc)) from None
            check = MISALIGNED if self.phase == "misaligned_view" else "launch"
            return Rejected(candidate_key=key, check=check, reason=str(exc), resources=cand.resources)
        speedup = math.exp(sum(math.log(t.baseline_median_us / t.median_us) for t in timings) / len(timings))
        lo, hi = speedup_interval(samples)
        return Measured(candidate_key=key, resources=cand.resources, timings=timings, speedup=speedup, speedup_lo=lo, speedup_hi=hi,
                        verified_sizes=plan.verify_sizes + plan.heldout_sizes, wall_s=time.perf_counter() - t0, verify_s=verify_s, reference_s=self.reference_s - ref0,
                        ref_errors=R.summarise(errors), notes=self.notes(base_key) + floor_notes + gate_notes + (
                            [f"judged {self.shadow_accepted} times against the original's float64 shadow: outputs that "
                             f"differed from the original's beyond the tolerance, no less accurate than it there"]
                            if self.shadow_accepted else []) + (
                            [f"the original, over {self.SLOW_RATIO:g}x slower than the candidate, timed in its first "
                             f"rounds only: " + ", ".join(f"{k} of {n} at {z}" for z, k, n in slow_base)]
                            if slow_base else []) + (
                            [f"timed in {self.SLOW_REPS} rounds without warm-up at {slow}: its probe launch took "
                             f"{self.SLOW_RATIO:g}x the original's or more"] if slow else []))

    def notes(self, base_key: str) -> list[str]:
        """Checks skipped for this original, and why (a Measured result's ``notes``)."""
        skip = self.misaligned_skip.get(base_key)
        shadow = self.shadow_notes.get(base_key)
        return ([f"misaligned views not verified: {skip}"] if skip else []) + ([shadow] if shadow else [])
