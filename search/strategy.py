"""The main job: parse, check, generate, compile ahead, evaluate, record, keep the best.

A bandit over the generators (:mod:`.policy`) with priors from past jobs (:mod:`.priors`) picks
each next candidate; the best verified candidate is the parent of the next proposals; the next
candidates compile in a CPU process pool while the current one is on the GPU. Duplicates (same
:attr:`Candidate.key`) are never evaluated twice. See :func:`optimise`.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import math
import re
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ptxfactory.harness.backend import EvaluationBackend
from ptxfactory.harness.compile import Compiled, source_log
from ptxfactory.harness.compile_pool import CompilePool, Prepared, shared_pool
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.ptx import is_ptx
from ptxfactory.harness.reference import PythonReference, python_reference, validate_reference
from ptxfactory.harness.shadow import shadow_compiled
from ptxfactory.harness.source import check_signature, find_kernel, spec_location
from ptxfactory.harness.static_checks import unset_constants
from ptxfactory.protocol import (
    Candidate, CandidateRow, CompileFailed, EvalResult, GpuFacts, JobSummary, KernelSpec, LaunchConfig, Measured, NotRun, Rejected,
    TimedOut,
    load_spec, spec_path_for,
)

from ptxfactory.protocol.job import best_row, noise_hi
from ptxfactory.protocol.result import FLOOR_NOT_APPLIED

from .agents.arm import JobView
from .agents.evidence import profiler
from .base import GenContext, kernel_refusal
from .generators import load as load_generator
from .lessons import LessonStore
from .policy import ArmState, make_policy
from .priors import Priors, candidate_score, generator_kind, mismatches

# Every family first (each applies only to kernels whose spec fits its skeleton), then the passes, then tuning.
# "agent" (language models, search/agents/) is inert unless a provider is configured.
DEFAULT_GENERATORS = ("rowwise", "softmax", "rowreduce", "elementwise", "transpose", "attention", "transform", "tune", "agent")
# A kernel written in PTX (a .ptx file's .entry) gets only these (the others write CUDA C++): "transform" and
# "tune" stand for their PTX counterparts there, "agent" (its PTX prompts: search/agents/) is offered too, other
# names are dropped.
PTX_GENERATORS = ("ptx_transform", "ptx_tune")
PTX_COUNTERPART = {"transform": "ptx_transform", "tune": "ptx_tune", "ptx_transform": "ptx_transform", "ptx_tune": "ptx_tune",
                   "agent": "agent"}
DEFAULT_PATIENCE = 24


class JobError(RuntimeError):
    """The job cannot start: unreadable source, unknown kernel, signature mismatch, original does not compile."""


@dataclass(frozen=True)
class Progress:
    """One step of a job: ``done`` of ``total`` candidates, a message, and the row just finished (if any)."""

    done: int
    total: int
    message: str
    row: CandidateRow | None = None


def original_candidate(spec: KernelSpec, source: str) -> Candidate:
    """The user's kernel as a candidate, with the spec's launch (a template instantiated with the first value of
    each ``tune.template`` knob). Raises ``KeyError`` when the kernel is missing."""
    kdef = find_kernel(source, spec.name)
    template_args = [values[0] for values in spec.tune.template.values()]
    instance = f" ({spec.name}<{', '.join(map(str, template_args))}>)" if template_args else ""
    return Candidate(
        kernel_name=spec.name, source=source, kernel_text=kdef.text, generator="original",
        description=f"original kernel{instance}",
        launch=LaunchConfig(grid=spec.launch.grid, block=spec.launch.block, shared_mem=spec.launch.shared_mem),
        template_args=template_args,
    )


def kernel_fingerprint(kernel_text: str) -> str:
    """Hash of the kernel's text with comments and whitespace removed (16 hex digits)."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", kernel_text, flags=re.S)
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()[:16]


OFF_LOOP_TIMEOUT_S = 60.0  # spec-derived work (parsing, checks, the plan) that takes longer is refused


async def off_loop(fn: Callable, *args, what: str, timeout_s: float | None = None):
    """``fn(*args)`` on a worker thread, so user-derived work never blocks the event loop (the daemon's LSP).

    Raises what ``fn`` raises, or JobError when it takes more than ``timeout_s`` seconds (default
    :data:`OFF_LOOP_TIMEOUT_S`); the thread is then abandoned (it cannot be interrupted), the job fails.
    """
    try:
        return await asyncio.wait_for(asyncio.to_thread(fn, *args), timeout_s or OFF_LOOP_TIMEOUT_S)
    except TimeoutError:
        raise JobError(f"{what} took more than {timeout_s or OFF_LOOP_TIMEOUT_S:.0f} s: refused") from None


def _load_original(source_path: str | Path, kernel: str, source_text: str | None) -> tuple[KernelSpec, str, Candidate]:
    spec, source = load_job(source_path, kernel, source_text)
    return spec, source, original_candidate(spec, source)


def load_job(source_path: str | Path, kernel: str, source_text: str | None = None) -> tuple[KernelSpec, str]:
    """Read the source (or use ``source_text``, e.g. an editor buffer) and its spec; check the signature.

    Raises:
        SpecError: the spec is malformed (file, line, key).
        JobError: the source is unreadable, the kernel is missing from source or spec, or the signature differs.
    """
    path = Path(source_path)
    if source_text is None:
        try:
            source_text = path.read_text()
        except OSError as exc:
            raise JobError(f"{path}: cannot read source: {exc.strerror}") from None
    spec_file = load_spec(spec_path_for(path))
    if kernel not in spec_file.kernels:
        raise JobError(f"{spec_file.path}: no [kernel.{kernel}] table (spec has: {', '.join(spec_file.kernels)})")
    spec = spec_file.kernels[kernel]
    try:
        check_signature(spec, find_kernel(source_text, kernel))
    except KeyError as exc:
        raise JobError(f"{path}: {exc.args[0]}") from None
    except ValueError as exc:
        where = spec_location(spec_file.path, kernel, getattr(exc, "key", ""))
        raise JobError(f"{path}: {where}: does not match the kernel: {exc}") from None
    return spec, source_text


async def optimise(
    source_path: str | Path,
    kernel: str,
    *,
    backend: EvaluationBackend | None,
    store: LessonStore | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    generators: tuple[str, ...] = DEFAULT_GENERATORS,
    max_candidates: int = 64,
    max_seconds: float | None = None,
    patience: int | None = DEFAULT_PATIENCE,
    policy: str = "ucb",
    use_lessons: bool = True,
    job_id: str | None = None,
    cancel: asyncio.Event | None = None,
    source_text: str | None = None,
    known: Mapping[str, EvalResult] | None = None,
    on_row: Callable[[CandidateRow], Awaitable[None]] | None = None,
    pool: CompilePool | None = None,
) -> JobSummary:
    """Run the main job on ``kernel`` in ``source_path`` (spec at ``<source>.toml``).

    The search: every generator in ``generators`` is an arm of a bandit (``policy``: ``"ucb"`` or
    ``"thompson"``, :mod:`.policy`). Families, ``transform`` and ``tune`` propose from the original;
    whenever a verified candidate becomes the best (by more than 1%), ``transform`` and ``tune``
    propose from it too: the archive's best is the next parent. The bandit picks the arm, and within
    the arm the proposal nearest to the configurations that scored best in this job, else in past
    jobs (:func:`.priors.candidate_score`; lessons read from ``store`` unless ``use_lessons`` is
    false); a candidate that is the fastest yet at some bench size counts there as the best so far plus its
    lead at that size, so the configurations near it are tried too. The next candidates compile
    and are statically checked in ``pool`` (CPU processes) while the current one is on the GPU.
    The job stops when the proposals run out, after ``max_candidates`` candidates (the original
    included), after ``max_seconds`` of wall time, or when ``patience`` candidates in a row have neither
    improved the best by 1% nor been the fastest yet at some bench size by 3% (None: no plateau stop).

    With ``backend=None`` (no GPU) every candidate is compiled and its resources reported, none is
    run, and the summary's state is ``"compile_only"``. Every evaluated candidate is recorded in
    ``store``. Progress is reported through ``on_progress`` (called on the event loop thread).

    Resuming: ``known`` maps candidate keys to results already measured (e.g. before a daemon
    restart); those candidates are recorded with their known result and never evaluated again.
    ``on_row`` is awaited with every new row, before it counts as done: the place to persist it.

    Raises:
        SpecError, JobError: see :func:`load_job`; JobError also when the original does not compile.
        KeyError: an unknown generator or policy name.
    """
    job_id = job_id or uuid.uuid4().hex[:12]
    # the spec and the source are user input: parsed, checked and planned off the event loop, with a deadline
    spec, source, original = await off_loop(_load_original, source_path, kernel, source_text, what="reading the spec and the kernel")
    notify = on_progress or (lambda p: None)
    spec_warnings: list[str] = []
    if not is_ptx(source):  # constant memory the host sets and the spec cannot: zero in every run of the job
        for w in unset_constants(source, kernel, Path(source_path).name):
            notify(Progress(0, 1, f"warning: {w}"))
            spec_warnings.append(w)
    reference = await check_reference(spec, source_path, notify, spec_warnings)
    pool = pool or shared_pool()
    if is_ptx(source):
        generators = tuple(dict.fromkeys(PTX_COUNTERPART[n] for n in generators if n in PTX_COUNTERPART))
    gens = {name: load_generator(name) for name in generators}
    fingerprint = kernel_fingerprint(original.kernel_text)
    chooser = make_policy(policy, seed=int(fingerprint[:8], 16))
    started = time.monotonic()

    notify(Progress(0, 1, f"compiling the original {kernel}"))
    first = await pool.prepare(original, spec, static=False)
    if isinstance(first.compiled, CompileFailed):
        raise JobError(f"{source_path}: the original kernel does not compile:\n"
                       f"{source_log(first.compiled.log, kernel, Path(source_path).name)}")
    baseline = first.compiled
    if getattr(backend, "uses_shadow", False):
        # the original's float64 shadow (None where the kernel is no oracle): the GPU's verifier judges by it an
        # output that the original's own rounding moved
        shadow = await pool.run(shadow_compiled, spec, baseline)
        if shadow is not None:
            baseline = dataclasses.replace(baseline, shadow=shadow)

    facts = await backend.facts() if backend else None
    plan = await off_loop(make_plan, spec, None, reference, what="planning the sizes to verify")
    search = _Search(spec, original, gens, chooser, max_candidates, facts=facts)
    await search.expand(original, list(gens))
    kernel_class = search.kernel_class()
    search.priors = await store.search_priors(kernel_class, spec.arch, exclude_job=job_id) if (store and use_lessons) else Priors()
    known = dict(known or {})
    rows: list[CandidateRow] = []
    busy = _Busy()
    # arms: generators that also learn from results within the job (search/agents/arm.py), e.g. "agent"
    arms = {name: g for name, g in gens.items() if hasattr(g, "on_row")}
    for g in arms.values():
        await g.start_job(JobView(job_id=job_id, spec=spec, kernel_class=kernel_class, arch=spec.arch, store=store,
                                  facts=facts, baseline_key=original.key,
                                  say=lambda m: notify(Progress(len(rows), search.total_estimate(len(rows)), m)),
                                  pool=pool, profile=profiler(backend, pool, spec)))

    async def record(cand: Candidate, result: EvalResult, fresh: bool) -> CandidateRow:
        row = CandidateRow(candidate=cand, result=result)
        rows.append(row)
        if fresh and on_row is not None:
            await on_row(row)
        if fresh and store:
            await store.record(job_id=job_id, kernel_fingerprint=fingerprint, kernel_class=kernel_class, arch=spec.arch,
                               candidate=cand, result=result, gpu=facts)
        notify(Progress(len(rows), search.total_estimate(len(rows) + len(inflight)), _row_message(row), row))
        return row

    async def outcome(cand: Candidate, prepared: Prepared) -> EvalResult:
        """Cheapest refusal first: compile error, static checks (not for the original), then the GPU."""
        result = await _outcome(cand, prepared)
        compiler = getattr(prepared.compiled, "compiler", "nvrtc")
        return result if result.compiler == compiler else result.model_copy(update={"compiler": compiler})

    async def _outcome(cand: Candidate, prepared: Prepared) -> EvalResult:
        compiled = prepared.compiled
        if isinstance(compiled, CompileFailed):
            return compiled
        if prepared.finding is not None:
            f = prepared.finding
            return Rejected(candidate_key=cand.key, check=f.check, reason=f.reason, resources=compiled.resources)
        if backend is None:
            return NotRun(candidate_key=cand.key, resources=compiled.resources, reason="no NVIDIA GPU on this machine")
        with busy:
            return await _evaluate(backend, spec, baseline, compiled, plan, rows)

    def start(cand: Candidate) -> asyncio.Future | None:
        """Begin preparing ``cand`` (None when its result is known from before a restart)."""
        if cand.key in known:
            return None
        if cand.key == original.key:
            done = asyncio.get_running_loop().create_future()
            done.set_result(first)
            return done
        return asyncio.ensure_future(pool.prepare(cand, spec))

    state = "finished" if backend else "compile_only"
    inflight: deque[tuple[Candidate, asyncio.Future | None]] = deque([(original, start(original))])

    def ahead() -> int:
        """Candidates to have compiling while one is evaluated. Each is chosen before the results still in
        flight are known, so early on, when every result changes the choice most, only one; later,
        enough to keep the pool's workers busy."""
        if backend is None:
            return pool.parallel
        return 1 if len(rows) < EARLY_ROWS else pool.parallel
    begun = [1]  # candidates taken from the search so far, the original included
    measured: dict[str, Compiled] = {}  # candidate key -> the compiled artifact of each measured row
    binaries: dict[str, str] = {}  # Prepared.binary -> the key of the candidate evaluated with it
    speculative: dict[str, asyncio.Future] = {}  # compiled ahead of the choice: each arm's favourite right now

    def fill() -> None:
        while len(inflight) < ahead():
            if search.stopped(begun[0], time.monotonic() - started, max_seconds, patience):
                return
            cand = search.next()
            if cand is None:
                break
            begun[0] += 1
            inflight.append((cand, speculative.pop(cand.key, None) or start(cand)))
        busy_workers = sum(1 for _, f in inflight if f is not None and not f.done())
        busy_workers += sum(1 for f in speculative.values() if not f.done())
        if backend is None or busy_workers >= pool.parallel:
            return
        for cand in search.favourites(pool.parallel - busy_workers, exclude=speculative.keys() | known.keys()):
            speculative[cand.key] = asyncio.ensure_future(pool.prepare(cand, spec))

    try:
        while inflight:
            cand, fut = inflight.popleft()
            fill()  # the next candidates compile while this one is on the GPU
            if fut is None:
                row = await record(cand, known[cand.key], fresh=False)
            else:
                prepared = await fut
                if cancel is not None and cancel.is_set():
                    state = "cancelled"
                    break
                if prepared.binary is not None and prepared.binary in binaries:
                    search.duplicate(cand)  # the same machine code and launch as an evaluated candidate
                    begun[0] -= 1
                    fill()
                    continue
                if prepared.binary is not None:
                    binaries[prepared.binary] = cand.key
                if backend is not None and not isinstance(prepared.compiled, CompileFailed):
                    notify(Progress(len(rows), search.total_estimate(len(rows) + len(inflight) + 1),
                                    f"evaluating #{len(rows)} {cand.generator}: {cand.description}"))
                row = await record(cand, await outcome(cand, prepared), fresh=True)
                if cand.key == original.key and isinstance(row.result, Measured):
                    for w in (n for n in row.result.notes if n.startswith(FLOOR_NOT_APPLIED)):
                        notify(Progress(len(rows), len(rows) + 1, f"warning: {w}"))
                        spec_warnings.append(w)
                    if plan.reference is None:
                        # a hang costs a few originals' time. Not under a Python reference: the first candidate whose
                        # outputs differ from the original's computes the reference at the bench sizes inside its own
                        # evaluation (up to a minute on the host for GiB-sized rows), which the original never needed.
                        plan = plan.model_copy(update={"timeout_s": candidate_timeout(row.result.wall_s, plan.timeout_s)})
                if isinstance(row.result, Measured) and isinstance(prepared.compiled, Compiled):
                    measured[cand.key] = prepared.compiled  # the artifact the re-timing of the best runs again
            for name, arm in arms.items():  # an arm's answer to a result (a fix, a plan) joins its queue
                search.extend(name, await arm.on_row(row))
            if search.observe(row) and backend is not None:
                await search.expand(row.candidate, [n for n in ("transform", "tune", *PTX_GENERATORS) if n in gens])
            if cancel is not None and cancel.is_set():
                state = "cancelled"
                break
            fill()
    finally:
        for fut in [f for _, f in inflight if f is not None] + list(speculative.values()):
            fut.cancel()
        for arm in arms.values():
            await arm.close()

    best, retimed = await _vet_and_confirm(rows, original.key, measured, backend, spec, baseline, pool, busy, reference,
                                           notify, spec_warnings, state == "finished")
    summary = JobSummary(
        job_id=job_id, source_path=str(source_path), kernel=kernel, state=state, gpu=facts, rows=rows,
        baseline_key=original.key, best_key=best.candidate.key if best else None,
        message=_summary_message(state, best, search.stop_reason, retimed), best_retimed=retimed,
        kernel_class=kernel_class, wall_s=round(time.monotonic() - started, 3),
        gpu_busy_s=round(busy.seconds, 3) if backend is not None else None, duplicates=search.duplicates,
        stop_reason="cancelled" if state == "cancelled" else (search.stop_reason or "every proposal evaluated"),
        agent_spend=next((s for s in (a.spend() for a in arms.values()) if s is not None), None),
        passes_refused=never_applied(search.passes_refused, rows), families_refused=search.families_refused,
        warnings=spec_warnings,
    )
    # a cancelled job ends short of what it would have done; a finished one at 100%
    notify(Progress(len(rows), search.total_estimate(len(rows)) if state == "cancelled" else len(rows), summary.message))
    return summary


async def check_reference(spec: KernelSpec, source_path: str | Path, notify: Callable[[Progress], None],
                          warnings: list[str] | None = None) -> PythonReference | None:
    """The spec's Python reference (``check.reference = "python:..."``) resolved beside the spec and called once
    at the smallest check size, in a child process (waited for on a thread, never on the event loop), before
    any GPU work; None when the original kernel is the oracle. What its outputs say about the check
    (:func:`~ptxfactory.harness.reference.output_warnings`) is appended to ``warnings`` and shown as progress.

    Raises:
        ReferenceFailed (a SpecError: file, line, ``kernel.NAME.check.reference``): missing, cannot be loaded,
        raises, returns the wrong outputs, or takes over 30 s.
    """
    reference = await off_loop(python_reference, spec, spec_path_for(source_path), what="reading the Python reference")
    if reference is not None:
        notify(Progress(0, 1, f"checking the Python reference {reference.target}"))
        found: list[str] = []
        await off_loop(validate_reference, spec, reference, found, what=f"checking the Python reference {reference.target}",
                       timeout_s=reference.timeout_s + 60)
        for w in found:
            notify(Progress(0, 1, f"warning: {w}"))
        if warnings is not None:
            warnings.extend(found)
    return reference


class _Busy:
    """Seconds spent inside the backend's ``evaluate``: the GPU worker's busy time, as the job sees it."""

    def __init__(self):
        self.seconds, self._t = 0.0, 0.0

    def __enter__(self):
        self._t = time.monotonic()

    def __exit__(self, *exc):
        self.seconds += time.monotonic() - self._t


PLATEAU_GAIN = 1.01  # a new best must beat the old one by 1%: smaller gains are within run-to-run noise
# the fastest yet at one bench size must beat that size's best by 3%, at the slow end of its own spread (p80): with many
# sizes, the largest of their 1% noises is often over 1%
FRONTIER_GAIN = 1.03
# a candidate that leads at some bench size (or is the new best) has its generator's next NEIGHBOUR_TRIES picks taken from
# its proposals at most NEIGHBOUR_MISMATCHES knob values away, best-scoring first: a local step around each size's
# leader (one knob and the one it drags along, a block size and the rows a block holds), which the kernel regression
# alone ranks behind the best's neighbours when the leader is slow at the other sizes
NEIGHBOUR_MISMATCHES = 2
NEIGHBOUR_TRIES = 3
EARLY_ROWS = 8  # rows before the search compiles more than one candidate ahead


class _Search:
    """The job's search state: one bandit arm per generator with its queue of proposals, the best
    verified candidate (the next parent), this job's evidence per knob value, and the stopping rules."""

    def __init__(self, spec: KernelSpec, original: Candidate, gens: dict, chooser, max_candidates: int,
                 facts: GpuFacts | None = None):
        self.spec, self.original, self.gens, self.chooser = spec, original, gens, chooser
        self.facts = facts  # the GPU's, for the generators (GenContext.facts); None without a backend
        self.max_candidates = max_candidates
        self.arms = {name: ArmState(name) for name in gens}
        self.queues: dict[str, list[Candidate]] = {name: [] for name in gens}
        self.seen: set[str] = {original.key}
        self.expanded: set[tuple[str, str]] = set()
        self.family_hits: list[str] = []
        self.priors = Priors()
        self.job_knobs: dict[str, list[float | None]] = {}  # "gen:knob=value" -> log speedups (None: failed)
        self.evaluated: dict[str, list[tuple[dict, float | None]]] = {}  # generator -> (params, log speedup or None)
        # candidate key -> log speedup, the verified ones (not the original: what its proposals score without
        # evidence is the generator's average, which is about them)
        self.log_speedups: dict[str, float] = {}
        self.vocabulary: dict[str, frozenset[str]] = {}  # generator -> every knob it proposed
        self.best_speedup = 1.0  # the best that counted as a gain (> 1% over the previous one)
        # bench size -> the best speedup over the original measured there: a candidate fastest at one size is progress
        # (a bench of short and long rows is rarely won everywhere by one configuration; the report shows each size's)
        self.frontier: dict[tuple, float] = {}
        # generator -> (a leader's knobs, neighbour picks left): the latest candidate of that generator fastest at a size
        self.leaders: dict[str, tuple[dict, int]] = {}
        self.best_seen = 1.0  # the best verified speedup so far
        self.since_best = 0
        self.duplicates = 0
        self.passes_refused: list[tuple[str, str]] = []  # (passes, reason), for the original kernel
        self.families_refused: list[tuple[str, str]] = []  # (family, reason), when no family fits the original
        self.stop_reason: str | None = None

    async def expand(self, parent: Candidate, names: list[str]) -> None:
        """Ask ``names`` for proposals from ``parent`` (each generator once per parent), off the event loop."""
        todo = [n for n in names if (n, parent.key) not in self.expanded]
        self.expanded.update((n, parent.key) for n in todo)
        if not todo:
            return
        proposals = await asyncio.to_thread(self._propose, parent, todo)
        for name in todo:
            fresh = self.extend(name, proposals[name])
            self.vocabulary[name] = self.vocabulary.get(name, frozenset()).union(*(c.params for c in fresh))
            if parent.key == self.original.key and fresh and generator_kind(name) == "family":
                self.family_hits.append(name)

    def extend(self, name: str, candidates: list[Candidate]) -> list[Candidate]:
        """Queue ``name``'s candidates not seen in this job; returns those queued."""
        fresh = []
        for cand in candidates:
            if cand.key not in self.seen:
                self.seen.add(cand.key)
                fresh.append(cand)
        self.queues[name].extend(fresh)
        return fresh

    def _propose(self, parent: Candidate, names: list[str]) -> dict[str, list[Candidate]]:
        ctx = GenContext(spec=self.spec, source=parent.source, kernel=find_kernel(parent.source, self.spec.name), original=parent,
                         facts=self.facts)
        if parent.key == self.original.key:  # why each restructuring pass leaves the user's kernel alone (the report says)
            self.passes_refused = [r for n in names for r in getattr(self.gens[n], "refusals", lambda _: [])(ctx)]
        proposals = {name: self.gens[name].propose(ctx) for name in names}
        families = [n for n in names if hasattr(self.gens[n], "why_not")]  # the expert skeletons (not agent: an arm)
        if parent.key == self.original.key and families and not any(proposals[n] for n in families):
            # no skeleton fits: why each does not, in the report's families section (rowreduce's store evidence, one of
            # the passes' refusals where another family fits, moves there)
            self.families_refused = [(n, _why_not(self.gens[n], ctx)) for n in families]
            self.passes_refused = [(p, why) for p, why in self.passes_refused if p not in families]
        if parent.key != self.original.key:  # a child names its lineage: "transform rowpar_auto → transform vector_loops"
            proposals = {name: [c.model_copy(update={"description": f"{parent.description} → {c.description}"}) for c in cs]
                         for name, cs in proposals.items()}
        return proposals

    def kernel_class(self) -> str:
        """The families whose skeleton fits the kernel (``generic`` when none does) and the shape of its
        signature, e.g. ``rowwise/in2d,in1d,out2d,i32,i32,f32`` (RMSNorm with a weight): LayerNorm with a
        bias (another 1-D input) is another class, so lessons about which function fits do not mix."""
        families = "+".join(sorted(self.family_hits)) or "generic"
        shape = ",".join(f"{a.role}{len(a.shape or ())}d" if a.is_buffer else a.dtype.value for a in self.spec.args)
        return f"{families}/{shape}"

    def next(self) -> Candidate | None:
        """The next candidate: the policy picks an arm with proposals left, the arm its best-scoring proposal."""
        live = [arm for name, arm in self.arms.items() if self.queues[name]]
        if not live:
            return None
        for arm in live:
            if arm.prior is None:
                arm.prior = self.priors.arm(arm.name)
        name = self.chooser.choose(live)
        self.arms[name].pending += 1
        order = self._order(name, math.log(self.best_seen))
        lead = self.leaders.get(name)
        if lead is not None:  # this pick is one of the leader's neighbours (the first in the order) or the step is over
            if order[0][1] and lead[1] > 1:
                self.leaders[name] = (lead[0], lead[1] - 1)
            else:
                del self.leaders[name]
        return self.queues[name].pop(order[0][0])

    def _order(self, name: str, best_log: float) -> list[tuple[int, bool]]:
        """``name``'s queue in the order :meth:`next` takes it, as ``(index, near)`` pairs: the proposals near its
        leader (:data:`NEIGHBOUR_MISMATCHES`; ``near`` True) first while its step lasts, each part best-scoring first,
        ties in the generator's order."""
        queue = self.queues[name]
        lead = self.leaders.get(name)
        near = [bool(lead and c.params and mismatches(c.params, lead[0]) <= NEIGHBOUR_MISMATCHES) for c in queue]
        scores = [self._score(c, best_log) for c in queue]
        order = sorted(range(len(queue)), key=lambda i: (not near[i], -scores[i], i))
        return [(i, near[i]) for i in order]

    def _score(self, cand: Candidate, best_log: float) -> float:
        parent = self.log_speedups.get(cand.parent) if cand.parent else None
        return candidate_score(cand, self.priors, self.job_knobs, best_log, self.vocabulary.get(cand.generator),
                               self.evaluated.get(cand.generator), None if parent is None else parent - best_log)

    def favourites(self, n: int, exclude: set[str] | frozenset[str] = frozenset()) -> list[Candidate]:
        """What :meth:`next` would most likely pick soon, without picking, at most ``n``, none whose key is in
        ``exclude`` (already compiling): round by round, each arm's next-best proposal, arms by their
        posterior mean, so idle workers always have the likeliest next candidates to compile."""
        best_log = math.log(self.best_seen)
        arms = sorted((a for name, a in self.arms.items() if self.queues[name]), key=lambda a: -a.mean)
        ranked = []
        for arm in arms:
            queue = self.queues[arm.name]
            ranked.append([queue[i] for i, _ in self._order(arm.name, best_log) if queue[i].key not in exclude])
        out: list[Candidate] = []
        for depth in range(max((len(r) for r in ranked), default=0)):
            for proposals in ranked:
                if depth < len(proposals) and len(out) < n:
                    out.append(proposals[depth])
        return out

    def duplicate(self, cand: Candidate) -> None:
        """``cand`` compiled to a binary already evaluated: it is dropped, and its arm learns nothing."""
        self.duplicates += 1
        arm = self.arms.get(cand.generator)
        if arm is not None:
            arm.pending = max(0, arm.pending - 1)

    def observe(self, row: CandidateRow) -> bool:
        """Learn from one finished row; True when it is the new best verified candidate (by more than 1%)."""
        cand, result = row.candidate, row.result
        if cand.key == self.original.key:
            return False
        arm = self.arms.get(cand.generator)
        if arm is not None:
            arm.pending = max(0, arm.pending - 1)
        if result.outcome == "not_run":
            return False
        reward = _reward(result, self.best_seen)
        if arm is not None:
            arm.rewards.append(reward)
        log = math.log(result.speedup) if isinstance(result, Measured) and result.speedup > 0 else None  # None: failed
        ahead = self.frontier_gain(result) if isinstance(result, Measured) else 0.0
        leads = ahead > math.log(FRONTIER_GAIN)  # the fastest yet at some bench size, by more than the noise
        new_best = isinstance(result, Measured) and result.speedup > self.best_speedup * PLATEAU_GAIN
        # what the knobs learn: the candidate's log speedup, or where it leads at a size, as promising as the best so
        # far plus that lead (its neighbours may win that size outright)
        promise = max(log, math.log(self.best_seen) + ahead) if leads and log is not None else log
        for key, value in cand.params.items():
            self.job_knobs.setdefault(f"{cand.generator}:{key}={value}", []).append(promise)
        if cand.params:
            self.evaluated.setdefault(cand.generator, []).append((dict(cand.params), promise))
            if leads or new_best:
                self.leaders[cand.generator] = (dict(cand.params), NEIGHBOUR_TRIES)
        if log is not None:
            self.best_seen = max(self.best_seen, result.speedup)
            self.log_speedups[cand.key] = log
        if new_best:
            self.best_speedup, self.since_best = result.speedup, 0
            return True
        self.since_best = 0 if leads else self.since_best + 1  # the fastest at a size: progress
        return False

    def frontier_gain(self, result: Measured) -> float:
        """The log of the largest factor by which ``result`` beats the best speedup another candidate measured at one
        of its bench sizes, and the original's there (0.0 when it beats none; a size's first measurement only starts
        its frontier), taking its own at the slow end of its spread (the original's median over its p80 time); the
        frontier (medians) updated. Per-size speedups, not times: each is against the original timed beside it (A/B)."""
        gain = 0.0
        for t in result.timings:
            if t.median_us <= 0:
                continue
            key = tuple(sorted(t.size.items()))
            before = self.frontier.get(key)
            if before is not None and t.p80_us > 0:  # (never ahead where the original is faster: speedup 1)
                gain = max(gain, math.log(t.baseline_median_us / max(t.p80_us, t.median_us) / max(before, 1.0)))
            self.frontier[key] = t.speedup if before is None else max(before, t.speedup)
        return gain

    def stopped(self, started: int, elapsed_s: float, max_seconds: float | None, patience: int | None) -> bool:
        """True once a stopping rule holds (``started``: candidates begun so far); records the reason."""
        reason = None
        if started >= self.max_candidates:
            reason = f"budget of {self.max_candidates} candidates"
        elif max_seconds is not None and elapsed_s >= max_seconds:
            reason = f"wall-time budget of {max_seconds:g} s"
        elif patience is not None and self.since_best >= patience:
            reason = f"plateau: {patience} candidates without a 1% gain"  # (nor a 3% lead at a bench size)
        if reason is not None:
            self.stop_reason = reason
        return reason is not None

    def total_estimate(self, begun: int) -> int:
        """Candidates this job will evaluate at most, as known now (for progress bars)."""
        left = sum(len(q) for q in self.queues.values())
        return max(begun, min(self.max_candidates, begun + left))


def _why_not(family, ctx: GenContext) -> str:
    """Why ``family`` proposes nothing for the kernel: its ``why_not(ctx)`` (the spec or the source), else what no family
    takes (:func:`kernel_refusal`), else a generic reason (also where ``why_not`` fails: a report line is not worth
    failing a job over)."""
    try:
        why = family.why_not(ctx) or kernel_refusal(ctx)
    except Exception:  # noqa: BLE001
        why = None
    return why or "its skeleton does not fit"


def _reward(result: EvalResult, best_before: float) -> float:
    """A generator's reward for one candidate: ``log(speedup / best so far)``, clipped to [log 0.5, 3]
    (what it added to the job; a child as fast as its parent earns 0); any failure earns log 0.5.
    The lesson store's generator priors use the same reward."""
    if isinstance(result, Measured) and result.speedup > 0:
        return max(math.log(0.5), min(math.log(result.speedup / best_before), 3.0))
    return math.log(0.5)


REVERIFY_FACTOR = 10.0
HANG_FACTOR = 5.0  # a candidate may take this many times the original's evaluation ...
HANG_FLOOR_S = 20.0  # ... and at least this long, before it is taken for a hang


def candidate_timeout(original_wall_s: float | None, default_s: float) -> float:
    """Seconds one candidate's evaluation (verification and timing) may take before the worker is killed as hung:
    HANG_FACTOR times the original's evaluation (``original_wall_s``, s), at least HANG_FLOOR_S, at most
    ``default_s`` (the plan's own limit). The original's evaluation did the same work (every size verified, every
    bench size timed against itself), so a candidate that takes five times as long is hung or of no use; without a
    measured original, ``default_s``."""
    if not original_wall_s or original_wall_s <= 0:
        return default_s
    return min(default_s, max(HANG_FLOOR_S, HANG_FACTOR * original_wall_s))


async def _evaluate(backend: EvaluationBackend, spec: KernelSpec, baseline: Compiled, compiled: Compiled, plan, rows):
    """Evaluate; a result more than 10x faster than the best so far is re-verified on new seeds and held-out sizes."""
    result = await backend.evaluate(spec, baseline, compiled, plan)
    if not isinstance(result, Measured):
        return result
    best_so_far = max((r.result.speedup for r in rows if isinstance(r.result, Measured)), default=1.0)
    if result.speedup <= REVERIFY_FACTOR * max(best_so_far, 1.0):
        return result
    again = await backend.evaluate(spec, baseline, compiled,
                                   await off_loop(make_plan, spec, None, plan.reference, what="planning the sizes to verify"))
    if isinstance(again, Measured):
        return result
    if isinstance(again, Rejected):
        return again.model_copy(update={"check": f"reverify_{again.check}",
                                        "reason": f"{result.speedup:.1f}x claimed, then failed on new seeds: {again.reason}"})
    return again


def _best(rows: list[CandidateRow], baseline_key: str) -> CandidateRow | None:
    """The job's best: :func:`ptxfactory.protocol.job.best_row`, the one notion of "best" everywhere."""
    return best_row(rows, baseline_key)


CONFIRM_TRIES = 3  # bests dropped for failing their re-timing before the job reports no best
RETIME_CHECK = "retime"  # the Rejected.check of a best that failed its re-timing on fresh inputs


async def _vet_and_confirm(rows: list[CandidateRow], baseline_key: str, measured: dict,
                           backend: EvaluationBackend | None, spec: KernelSpec, baseline: Compiled, pool, busy,
                           reference: PythonReference | None, notify: Callable[[Progress], None], warnings: list[str],
                           finished: bool) -> tuple[CandidateRow | None, Measured | None]:
    """The job's best (:func:`_best` of ``rows``) after compute-sanitizer (:func:`~ptxfactory.harness.sanitize.vet_best`) and a re-timing on a fresh
    plan (:func:`_confirm`); ``(best, its re-timed result)``, or ``(None, ...)`` when nothing holds up.

    A best that fails its re-timing (a wrong output on the new seeds or sizes, a crash, a hang: a fragile candidate
    the first plan did not catch) becomes a ``retime`` :class:`Rejected` row in ``rows`` (in place), the job gets a
    warning naming it, and the next best is vetted and re-timed, at most :data:`CONFIRM_TRIES` bests in all. Only
    for a finished job with a backend; otherwise ``(the best, None)``."""
    best = _best(rows, baseline_key)
    if backend is None or not finished:
        return best, None
    from ptxfactory.harness.sanitize import vet_best

    for _ in range(CONFIRM_TRIES):
        if best is None:
            return None, None
        notify(Progress(len(rows), len(rows) + 1, f"checking the best (#{rows.index(best)}) under compute-sanitizer"))
        best = await vet_best(rows, lambda rs: _best(rs, baseline_key), measured, spec, baseline, backend)
        if best is None:
            return None, None
        i = rows.index(best)
        notify(Progress(len(rows), len(rows) + 1, f"re-timing the best (#{i}) on fresh inputs"))
        confirmed, retimed, failure = await _confirm(best, measured.get(best.candidate.key), rows, baseline_key, backend,
                                                     spec, baseline, pool, busy, reference)
        if failure is None:
            return confirmed, retimed
        rows[i] = best.model_copy(update={"result": Rejected(
            candidate_key=best.candidate.key, check=RETIME_CHECK, reason=f"failed when re-timed on fresh inputs: {failure}",
            resources=best.result.resources, wall_s=best.result.wall_s)})
        warning = f"the best (#{i}, {best.candidate.description}) failed when re-timed on fresh inputs: {failure}"
        notify(Progress(len(rows), len(rows) + 1, f"warning: {warning}"))
        warnings.append(warning)
        best = _best(rows, baseline_key)
    return None, None


async def _confirm(best: CandidateRow, compiled: Compiled | None, rows: list[CandidateRow], baseline_key: str, backend: EvaluationBackend,
                   spec: KernelSpec, baseline: Compiled, pool, busy,
                   reference: PythonReference | None = None) -> tuple[CandidateRow | None, Measured | None, str | None]:
    """The best candidate verified and timed once more on a fresh plan (new seeds, held-out sizes and inputs)
    before it is reported, so the quoted speedup is not the measurement that selected it (the winner's curse).

    Returns ``(the best, its re-timed result, None)``; ``(None, result, None)`` when the new measurement is no longer
    a significant win (then nothing is reported as faster); ``(None, None, why)`` when the candidate now fails (it
    does not compile, a check rejects it, it crashes or hangs). ``compiled`` is the artifact evaluated in this job;
    None (a row known from before a restart) compiles it again, without the static checks it passed then."""
    if compiled is None:
        prepared = await pool.prepare(best.candidate, spec, static=False)
        if isinstance(prepared.compiled, CompileFailed):
            return None, None, "it no longer compiles"
        compiled = prepared.compiled
    with busy:
        again = await backend.evaluate(spec, baseline, compiled,
                                       await off_loop(make_plan, spec, None, reference, what="planning the sizes to verify"))
    if not isinstance(again, Measured):
        return None, None, _failure(again)
    return (best if again.significant(noise_hi(rows, baseline_key)) else None), again, None


def _failure(result: EvalResult) -> str:
    """One line on why ``result`` (not a Measured) failed: the check and its reason, the crash, the hang."""
    if isinstance(result, Rejected):
        return f"{result.check}: {result.reason}"
    if isinstance(result, TimedOut):
        return f"timed out after {result.seconds:.1f} s"
    return f"{result.outcome}: {getattr(result, 'reason', None) or getattr(result, 'log', '')[:200]}".rstrip(": ")


def _row_message(row: CandidateRow) -> str:
    if isinstance(row.result, Measured):
        return f"{row.candidate.description}: {row.result.speedup:.2f}x"
    return f"{row.candidate.description}: {row.reason}"


def never_applied(refused: list[tuple[str, str]], rows: list[CandidateRow]) -> list[tuple[str, str]]:
    """``refused`` (``(passes, reason)`` on the original kernel) without the passes some candidate of the job carries
    (``pass:NAME``): hold_row refuses the original (no lane-strided loop) and applies after rowpar; listed as left
    alone, it read as never tried. An entry whose passes all applied is dropped."""
    applied = {k[len("pass:"):] for r in rows for k in r.candidate.params if k.startswith("pass:")}
    out = []
    for names, reason in refused:
        kept = [n for n in names.split(", ") if n not in applied]
        if kept:
            out.append((", ".join(kept), reason))
    return out


def _summary_message(state: str, best: CandidateRow | None, stop: str | None = None, retimed: Measured | None = None) -> str:
    if state == "compile_only":
        return "compiled every candidate; nothing was run (no NVIDIA GPU)"
    if state == "cancelled":
        return "cancelled"
    if best is None:
        if retimed is not None:
            return (f"no significant change: the fastest candidate re-timed on fresh inputs at {retimed.speedup:.2f}x "
                    f"[{retimed.speedup_lo:.2f}-{retimed.speedup_hi:.2f}], inside the noise")
        return "no verified candidate was significantly faster than the original" + (f" (search stopped: {stop})" if stop else "")
    how = "simulated, NOT verified" if best.result.simulated else "verified"
    quoted = retimed if retimed is not None else best.result
    interval = f" [{quoted.speedup_lo:.2f}-{quoted.speedup_hi:.2f}]" if quoted.speedup_lo is not None else ""
    again = ", re-timed on fresh inputs" if retimed is not None else ""
    return f"best: {best.candidate.description}, {quoted.speedup:.2f}x{interval} faster ({how}{again})"
