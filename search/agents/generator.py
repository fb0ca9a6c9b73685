"""The ``agent`` generator: a planner, coders and a reviewer (language models) that write candidates.

It proposes nothing from a parent alone (``propose`` returns ``[]``); it works from results, as an arm
(:mod:`.arm`): when the original's row arrives the planner reads the evidence (:mod:`.evidence`) and
proposes a few ideas, a coder writes one candidate per idea; when one of its candidates fails, the
reviewer reads the failure and either fixes it (one more turn) or writes a one-line lesson; when a new
best appears (any generator's), the planner plans again from it, up to ``rounds`` times. Each idea's
outcome is stored as a lesson (:meth:`LessonStore.record_agent_lesson`); every call is charged to the
job's budget (:mod:`.budget`) and stored with the job (:meth:`LessonStore.record_agent_call`); at the
budget the agents stop and the job carries on with the other generators.

A kernel written in PTX (a ``.ptx`` module's ``.entry``) gets the same roles with its own templates
(``prompts/*_ptx.md``: the entry's PTX, its ``.param`` list, the module's header); a reply's new entry
(:func:`.parse.ptx_entry`, checked against the parent's entry) replaces the old one in the module, as the PTX passes'
candidates do, and goes through ptxas (or the driver's JIT) and the same verifier.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from ptxfactory.harness.ptx import PtxSyntaxError, entry_of, is_ptx
from ptxfactory.harness.source import KernelDef, check_signature, find_kernel, replace_kernel
from ptxfactory.protocol import Candidate, CandidateRow, KernelSpec, LaunchConfig, Measured
from ptxfactory.protocol.agent import AgentCall, AgentSpend

from . import evidence, parse, prompts
from .arm import JobView
from .budget import Budget
from .config import AgentConfig, ConfigError, config_path, load_config
from .providers import Provider, ProviderError, RecordingProvider, Request, make_provider
from .redact import redact

log = logging.getLogger(__name__)

MAX_FAILED_CALLS = 3  # consecutive failed calls (after the SDK's own retries) before the agents give up on the job
FASTER = 1.01  # a verified candidate at least this much faster than its parent counts as "faster"
_said_off = False


def planner_prompt(kernel: KernelDef, source: str, spec: KernelSpec, arch: str, ideas: int, *, resources: str, roofline: str,
                   sass: str, counters: str, rejected: str, kernel_class: str, lessons: str) -> str:
    """The planner's request for ``kernel`` (the parent's, found in its ``source``), with the evidence given as text."""
    return prompts.render(
        prompts.named("planner", kernel.language), ideas=ideas, arch=arch, kernel_name=spec.name,
        kernel=evidence.kernel_listing(kernel), spec=evidence.spec_text(spec), resources=resources, roofline=roofline,
        sass=sass, counters=counters, rejected=rejected, kernel_class=kernel_class, lessons=lessons,
        header=evidence.ptx_header(source) if kernel.language == "ptx" else "")


def coder_prompt(parent: Candidate, spec: KernelSpec, arch: str, idea: str) -> str:
    """The coder's request: implement ``idea`` as a new definition of the kernel of ``parent`` (its ``.entry`` for PTX)."""
    kernel = find_kernel(parent.source, spec.name)
    launch = f"grid={list(parent.launch.grid)} block={list(parent.launch.block)} shared_mem={parent.launch.shared_mem}"
    if spec.launch.policy == "free":
        symbols = ", ".join(sorted({str(a.value) for a in spec.args if not a.is_buffer and isinstance(a.value, str)}))
        rule = prompts.render("coder_launch_free", launch=launch, symbols=symbols)
    else:
        rule = prompts.render("coder_launch_fixed", launch=launch)
    if kernel.language == "ptx":
        return prompts.render("coder_ptx", kernel_name=spec.name, arch=arch, idea=idea, launch_rule=rule,
                              params=evidence.ptx_params(kernel.text), header=evidence.ptx_header(parent.source),
                              kernel=kernel.text, spec=evidence.spec_text(spec))
    return prompts.render("coder", kernel_name=spec.name, arch=arch, idea=idea, launch_rule=rule,
                          signature=evidence.signature(kernel.text, spec.name), kernel=kernel.text,
                          spec=evidence.spec_text(spec))


def reviewer_prompt(candidate: Candidate, spec: KernelSpec, arch: str, idea: str, failure: str) -> str:
    """The reviewer's request: ``candidate`` (written for ``idea``) failed with ``failure``; fix it or give a lesson."""
    note = ", then the LAUNCH line" if spec.launch.policy == "free" else ""
    if is_ptx(candidate.source):
        return prompts.render("reviewer_ptx", kernel_name=spec.name, arch=arch, idea=idea, failure=failure,
                              candidate=candidate.kernel_text, params=evidence.ptx_params(candidate.kernel_text),
                              header=evidence.ptx_header(candidate.source), launch_note=note)
    return prompts.render("reviewer", kernel_name=spec.name, arch=arch, idea=idea, failure=failure,
                          candidate=candidate.kernel_text, signature=evidence.signature(candidate.kernel_text, spec.name)
                          if spec.name in candidate.kernel_text else "as the original", launch_note=note)


@dataclass
class _Attempt:
    """One idea's candidate in flight: the idea, its turn (1: coder, 2: reviewer's fix), the parent's speed."""

    idea: str
    turn: int
    parent: Candidate
    parent_speedup: float


class AgentGenerator:
    """The ``agent`` generator (see the module's docstring). ``config`` and ``provider`` default to the user's
    config file and environment (:func:`.config.load_config`), read when the job starts."""

    name = "agent"

    def __init__(self, config: AgentConfig | None = None, provider: Provider | None = None):
        self._config, self._provider = config, provider
        self.job: JobView | None = None
        self.budget: Budget | None = None
        self.rows: list[CandidateRow] = []
        self.attempts: dict[str, _Attempt] = {}
        self.tried: set[str] = set()  # the ideas (lower case) coded in this job
        self.rounds_done = 0
        self.best_speedup = 1.0
        self.best: CandidateRow | None = None
        self.original: Candidate | None = None
        self.failed_calls = 0
        self.stopped: str | None = None
        self.language = "cuda"  # the original's: "ptx" for an .entry of a PTX module (its prompts: prompts/*_ptx.md)
        self._sem: asyncio.Semaphore | None = None

    # -- the generator interface -------------------------------------------------------------------------
    def propose(self, ctx) -> list[Candidate]:
        """Nothing from a parent alone: the agent proposes once results arrive (:meth:`on_row`)."""
        return []

    # -- the arm interface -------------------------------------------------------------------------------
    async def start_job(self, job: JobView) -> None:
        """Read the config (unless given), make the provider, set the budget; say once when agents are off."""
        global _said_off
        self.job = job
        try:
            config = self._config or load_config()
        except ConfigError as exc:
            config, why = None, f"agents off: {redact(exc)}"
        else:
            why = None if config.enabled else (f"agents off: no provider configured ({config_path()} or "
                                               f"PTXFACTORY_AGENT_KIND/MODEL; see README, 'Agents')")
        if config is not None and config.enabled and self._provider is None:
            try:
                self._provider = make_provider(config.provider)
            except ProviderError as exc:
                why = f"agents off: {redact(exc)}"
        if why is not None:
            self.stopped = why
            job.say(why)
            if not _said_off:
                _said_off = True
                log.info(why)
            return
        self._config = config
        if config.record and not isinstance(self._provider, RecordingProvider) and config.provider.kind != "replay":
            self._provider = RecordingProvider(self._provider, config.record)
            job.say(f"agents: recording replies to {self._provider.path} (replay it with kind = \"replay\", "
                    f"transcript = that file)")
        self.budget = Budget(config.budget_tokens, config.budget_usd)
        self._sem = asyncio.Semaphore(config.concurrency)
        job.say(f"agents on: {config.provider.kind} {config.provider.model} ({config.provider.name}); {self.budget.spend.describe()}")

    async def on_row(self, row: CandidateRow) -> list[Candidate]:
        """Learn from one finished row; the candidates it leads to (a plan, a fix), possibly none."""
        self.rows.append(row)
        if self.job is None:
            return []
        if row.key == self.job.baseline_key:
            self.original = row.candidate
            self.language = "ptx" if is_ptx(row.candidate.source) else "cuda"
        attempt = self.attempts.pop(row.key, None)
        out: list[Candidate] = []
        if attempt is not None:
            out += await self._after_own(row, attempt)
        new_best = isinstance(row.result, Measured) and row.key != self.job.baseline_key and row.result.speedup > self.best_speedup * FASTER
        if new_best:
            self.best_speedup, self.best = row.result.speedup, row
        if self.active and self.original is not None and (
                (self.rounds_done == 0 and row.key == self.job.baseline_key)
                or (new_best and 0 < self.rounds_done < self._config.rounds)):
            out += await self._plan_round()
        return out

    def spend(self) -> AgentSpend | None:
        """What the agents spent in this job (None when they were off)."""
        if self.budget is None:
            return None
        self.budget.spend.stopped = self.stopped
        return self.budget.spend

    async def close(self) -> None:
        if self._provider is not None:
            await self._provider.close()

    # -- the roles ---------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.stopped is None and self.budget is not None

    def _parent(self) -> tuple[Candidate, float]:
        best = self.best
        return (best.candidate, best.result.speedup) if best is not None else (self.original, 1.0)

    async def _plan_round(self) -> list[Candidate]:
        self.rounds_done += 1
        parent, speedup = self._parent()
        spec, job = self.job.spec, self.job
        kernel = find_kernel(parent.source, spec.name)
        lessons = await job.store.agent_lessons(job.kernel_class, job.arch) if job.store is not None else []
        base_row = next((r for r in self.rows if r.key == job.baseline_key), None)
        best_row = self.best or base_row
        user = planner_prompt(
            kernel, parent.source, spec, job.arch, self._config.ideas, resources=evidence.resources_text(best_row),
            roofline=evidence.roofline_text(best_row, job.facts), sass=await evidence.sass_text(parent, job.arch, job.pool),
            counters=await evidence.counters_text(job.profile, parent),
            rejected=evidence.rejected_text(self.rows, job.baseline_key), kernel_class=job.kernel_class,
            lessons=evidence.lessons_text(lessons))
        reply = await self._call("planner", user)
        if reply is None:
            return []
        proposed = parse.ideas(reply, self._config.ideas)
        ideas = [i for i in proposed if i.lower() not in self.tried]  # an idea is tried once per job
        self.tried.update(i.lower() for i in ideas)
        if not ideas:
            job.say("agent: the planner proposed no new idea" + (" (only ideas already tried)" if proposed else ""))
            return []
        job.say(f"agent: planner proposed {len(ideas)} idea(s) from {parent.description}")
        made = await asyncio.gather(*(self._code(idea, parent, speedup) for idea in ideas))
        return [c for c in made if c is not None]

    async def _code(self, idea: str, parent: Candidate, parent_speedup: float) -> Candidate | None:
        user = coder_prompt(parent, self.job.spec, self.job.arch, idea)
        reply = await self._call("coder", user)
        return await self._candidate(reply, idea, parent, parent_speedup, turn=1)

    async def _candidate(self, reply: str | None, idea: str, parent: Candidate, parent_speedup: float, turn: int) -> Candidate | None:
        """The candidate a reply's code makes from ``parent``; None (and a lesson-free failure stored) without one."""
        if reply is None:
            return None  # the call failed or the budget ran out: nothing learnt about the idea
        spec = self.job.spec
        code, why, outcome = self._code_of(reply, parent)
        if code is not None:
            try:
                source = replace_kernel(parent.source, find_kernel(parent.source, spec.name), code)
                check_signature(spec, find_kernel(source, spec.name))
            except (KeyError, ValueError) as exc:
                why, outcome = f"the code does not define the kernel with its signature: {exc}", "bad_signature"
        if why is not None:
            self.job.say(f"agent: {why} (idea: {idea[:80]})")
            await self._lesson(idea, outcome, None, None, None)
            return None
        launch = parent.launch
        if spec.launch.policy == "free":
            launch = parse.launch(reply) or parent.launch
        cand = Candidate(
            kernel_name=spec.name, source=source, kernel_text=code, launch=LaunchConfig.model_validate(launch.model_dump()),
            options=list(parent.options), generator=self.name,
            description=f"agent{' fix' if turn > 1 else ''}: {idea[:90]}", params={}, parent=parent.key,
            template_args=list(parent.template_args))
        self.attempts[cand.key] = _Attempt(idea=idea, turn=turn, parent=parent, parent_speedup=parent_speedup)
        return cand

    def _code_of(self, reply: str, parent: Candidate) -> tuple[str | None, str | None, str]:
        """The kernel code of a reply for ``parent``'s kernel: (code, None, "") or (None, why, outcome to record).
        A PTX kernel's is a new ``.entry`` with the parent entry's name and ``.param`` list (:func:`.parse.ptx_entry`)."""
        name = self.job.spec.name
        kernel = find_kernel(parent.source, name)
        if kernel.language == "ptx":
            try:
                found = parse.ptx_entry(reply, entry_of(kernel))
            except (PtxSyntaxError, KeyError) as exc:  # the parent's own entry unreadable: not the reply's fault
                return None, f"the parent's entry cannot be read: {exc}", "no_code"
            return found.code, found.why, found.outcome or ""
        code = parse.kernel_code(reply, name)
        return (code, None, "") if code is not None else (None, "the reply had no definition of the kernel", "no_code")

    async def _after_own(self, row: CandidateRow, attempt: _Attempt) -> list[Candidate]:
        """One of the agent's candidates finished: store its outcome, or send its failure to the reviewer."""
        result = row.result
        if isinstance(result, Measured):
            effect = result.speedup
            outcome = "faster" if effect > attempt.parent_speedup * FASTER else "slower"
            await self._lesson(attempt.idea, outcome, effect, None, row.key)
            return []
        if result.outcome == "not_run":
            await self._lesson(attempt.idea, "compiled", None, None, row.key)
            return []
        if attempt.turn > 1 or not self.active:
            await self._lesson(attempt.idea, result.outcome, None, f"fix failed too: {row.reason}"[:200], row.key)
            return []
        return await self._review(row, attempt)

    async def _review(self, row: CandidateRow, attempt: _Attempt) -> list[Candidate]:
        failure = row.reason
        log_text = getattr(row.result, "log", None)
        if log_text:
            failure = "compile error:\n" + "\n".join(log_text.strip().splitlines()[:30])
        user = reviewer_prompt(row.candidate, self.job.spec, self.job.arch, attempt.idea, failure)
        reply = await self._call("reviewer", user)
        if reply is None:
            await self._lesson(attempt.idea, row.result.outcome, None, None, row.key)
            return []
        code, _, outcome = self._code_of(reply, attempt.parent)
        if code is not None or outcome == "bad_signature":  # a fix (a wrong one is refused, and recorded, as the coder's)
            fixed = await self._candidate(reply, attempt.idea, attempt.parent, attempt.parent_speedup, turn=2)
            if fixed is not None:
                self.job.say(f"agent: reviewer fixed {attempt.idea[:60]!r} ({row.result.outcome})")
                return [fixed]
            return []
        lesson = parse.lesson(reply)
        await self._lesson(attempt.idea, row.result.outcome, None, lesson, row.key)
        if lesson:
            self.job.say(f"agent lesson: {lesson}")
        return []

    # -- calls, budget and records -----------------------------------------------------------------------
    async def _call(self, role: str, user: str) -> str | None:
        """One call through the provider, within the budget; the reply's text, or None (budget, failure)."""
        if not self.active:
            return None
        provider = self._config.provider
        system = prompts.system(self.language)
        async with self._sem:  # the budget is checked when the call can go, after the calls ahead of it are charged
            if not self.active:
                return None
            max_tokens = self.budget.allowance(provider, system + user)
            if max_tokens <= 0:
                self._stop(f"budget reached ({self.budget.spend.describe()})")
                return None
            reservation = self.budget.reserve(provider, system + user, max_tokens)
            t0 = time.monotonic()
            reply, error = None, None
            try:
                reply = await self._provider.complete(Request(role=role, system=system, user=user, max_tokens=max_tokens))
            except ProviderError as exc:
                error = redact(exc)[:300]
            except Exception as exc:  # noqa: BLE001 - an SDK's unexpected error must not end the job
                error = redact(f"{type(exc).__name__}: {exc}")[:300]
            if reply is None:
                call = AgentCall(role=role, provider=provider.name, model=provider.model, ok=False, error=error,
                                 latency_s=round(time.monotonic() - t0, 3))
            else:
                call = AgentCall(role=role, provider=provider.name, model=provider.model, input_tokens=reply.input_tokens,
                                 output_tokens=reply.output_tokens, latency_s=round(reply.latency_s, 3),
                                 cost_usd=provider.cost(reply.input_tokens, reply.output_tokens))
            # accounted before the next call may go (it waits on the semaphore)
            self.budget.charge(call, reservation, system + user)
            self.failed_calls = 0 if call.ok else self.failed_calls + 1
            if not call.ok:
                self.job.say(f"agent: {role} call failed: {call.error}")
                if self.failed_calls >= MAX_FAILED_CALLS:
                    self._stop(f"{MAX_FAILED_CALLS} calls failed in a row (last: {call.error})")
            elif self.budget.exhausted:
                self._stop(f"budget reached ({self.budget.spend.describe()})")
        if self.job.store is not None:
            await self.job.store.record_agent_call(self.job.job_id, call)
        return reply.text if reply is not None else None

    def _stop(self, why: str) -> None:
        if self.stopped is None:
            self.stopped = why
            self.job.say(f"agents stopped, the job carries on: {why}")

    async def _lesson(self, idea: str, outcome: str, effect: float | None, lesson: str | None, key: str | None) -> None:
        if self.job.store is not None:
            await self.job.store.record_agent_lesson(job_id=self.job.job_id, kernel_class=self.job.kernel_class,
                                                     arch=self.job.arch, idea=idea, outcome=outcome, effect=effect,
                                                     lesson=redact(lesson) if lesson else None, candidate_key=key)
