"""The agent generator end to end against real HTTP servers on loopback (OpenAI chat completions, Anthropic
messages) serving scripted replies, with the simulated backend: accepted, fixed, cheating, no code, slow,
429/500, a budget that runs out; token and cost accounting; no key anywhere."""
from __future__ import annotations

import asyncio
import json
import logging
import sqlite3

import pytest

from ptxfactory.daemon.report import write_outputs
from ptxfactory.harness.simulated import SimulatedDevice
from ptxfactory.protocol import CompileFailed, Measured, Rejected
from ptxfactory.search.agents.loopback import Rule, ScriptedServer, Step
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import optimise

from _agent_support import CODER, GOOD, IDEAS, KEY, PLANNER, ROWSUM, script, write_config


@pytest.fixture
def server():
    srv = ScriptedServer(script()).start()
    yield srv
    srv.close()


@pytest.fixture
def agent_env(monkeypatch, tmp_path):
    """A function that writes the config for a server and points the factory at it, the key in the environment."""
    monkeypatch.setenv("PTXF_TEST_KEY", KEY)

    def configure(kind: str, url: str, **agents):
        monkeypatch.setenv("PTXFACTORY_CONFIG", str(write_config(tmp_path / f"{kind}.toml", kind, url, **agents)))
    return configure


async def run_job(tmp_path, generators=("agent",), job_id="job-a"):
    store = await LessonStore.open(tmp_path / "lessons.sqlite")
    messages: list[str] = []
    try:
        summary = await optimise(ROWSUM, "rowsum_seq", backend=SimulatedDevice(delay_s=0), store=store, generators=generators,
                                 job_id=job_id, on_progress=lambda p: messages.append(p.message), max_candidates=40)
        lessons = await store.agent_lessons("generic/in2d,out1d,i32,i32", "sm_90a")
        calls = await store.agent_calls(job_id)
    finally:
        await store.close()
    return summary, messages, lessons, calls


def dump_store(path) -> str:
    """Every row of every table of an SQLite store, as text."""
    with sqlite3.connect(path) as db:
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return "\n".join(repr(row) for t in tables for row in db.execute(f"SELECT * FROM {t}"))


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_the_whole_loop_against_a_loopback_endpoint(kind, server, agent_env, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    agent_env(kind, server.openai_url if kind == "openai" else server.anthropic_url)
    summary, messages, lessons, calls = await run_job(tmp_path)

    assert summary.state == "finished"
    assert server.saw_credential(KEY)  # the key went to the endpoint, and nowhere else (below)
    paths = {p for p, _ in server.requests}
    assert paths == ({"/v1/chat/completions"} if kind == "openai" else {"/v1/messages"})
    rows = {r.candidate.description: r for r in summary.rows if r.candidate.generator == "agent"}
    good = rows["agent: one block per row with a shared-memory tree reduction"]
    assert isinstance(good.result, Measured)  # accepted: compiled, passed the static checks, got a result row
    assert good.candidate.launch.grid == ["M"] and good.candidate.launch.block == [256]  # the launch it asked for (policy free)
    broken = rows["agent: unroll the sequential loop by four"]
    assert isinstance(broken.result, CompileFailed) and "expected a \";\"" in broken.result.log
    fixed = rows["agent fix: unroll the sequential loop by four"]
    assert isinstance(fixed.result, Measured) and fixed.candidate.parent == summary.baseline_key
    cheat = rows["agent: stop each row early when a timer expires"]
    assert isinstance(cheat.result, Rejected) and cheat.result.check.startswith("static") and "clock" in cheat.result.reason
    assert len(rows) == 4  # the reply without code made no candidate
    assert summary.best_key == good.candidate.key

    by_idea = {lesson["idea"]: lesson for lesson in lessons}
    assert by_idea["one block per row with a shared-memory tree reduction"]["outcome"] == "faster"
    assert by_idea["one block per row with a shared-memory tree reduction"]["effect"] == pytest.approx(good.result.speedup)
    assert by_idea["stop each row early when a timer expires"]["outcome"] == "rejected"
    assert by_idea["stop each row early when a timer expires"]["lesson"].startswith("reading the clock to cut work short")
    assert by_idea["think harder about the memory hierarchy"]["outcome"] == "no_code"
    assert by_idea["think harder about the memory hierarchy"]["lesson"] is None  # a lesson-free failure
    assert by_idea["unroll the sequential loop by four"]["outcome"] == "faster"  # the fix counts for the idea

    # accounting: planner + 4 coders + 2 reviewers, 100 in / 50 out each, at $2 / $10 per million tokens
    spend = summary.agent_spend
    assert [c.role for c in spend.calls].count("coder") == 4 and len(spend.calls) == 7 == len(calls)
    assert spend.input_tokens == 700 and spend.output_tokens == 350 and spend.tokens == 1050
    assert spend.cost_usd == pytest.approx((700 * 2.0 + 350 * 10.0) / 1e6)
    assert sum(c["input_tokens"] for c in calls) == 700 and sum(c["cost_usd"] for c in calls) == pytest.approx(spend.cost_usd)
    assert all(c.latency_s >= 0 and c.ok for c in spend.calls)

    # the report says what the agents spent, and no text anywhere holds the key
    out = tmp_path / "report"
    write_outputs(summary, out)
    report = (out / "report.md").read_text()
    assert "agents: 7 calls, 1,050 tokens" in report
    texts = [report, (out / "report.json").read_text(), summary.model_dump_json(), dump_store(tmp_path / "lessons.sqlite"),
             *messages, *(r.getMessage() for r in caplog.records), *(u for _, u in server.requests)]
    assert not [t for t in texts if KEY in t]


async def test_retries_429_and_500_then_gives_up_without_losing_the_job(agent_env, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    rules = [Rule(PLANNER, [Step(status=429), Step(status=429), Step(IDEAS)]),  # retried, then answered
             Rule((CODER, "IDEA: one block per row"), [Step(status=500)]),  # retried, then given up
             Rule(CODER, [Step(status=500)])]
    with ScriptedServer(rules) as srv:
        agent_env("openai", srv.openai_url, max_retries=2, ideas=2)
        summary, messages, lessons, calls = await run_job(tmp_path, generators=("agent", "tune"))
        planner_requests = sum(1 for _, u in srv.requests if PLANNER in u)
        coder_requests = sum(1 for _, u in srv.requests if CODER in u)
    assert summary.state == "finished" and summary.rows[0].candidate.generator == "original"
    assert planner_requests == 3  # two 429s retried with backoff, the third answered
    assert coder_requests == 2 * 3  # each coder call: first try and two retries, then given up
    spend = summary.agent_spend
    assert [c.ok for c in spend.calls] == [True, False, False]
    assert all("HTTP 500" in c.error for c in spend.calls[1:])
    assert [c["ok"] for c in calls] == [1, 0, 0]
    assert any("coder call failed" in m for m in messages)
    assert not [r for r in summary.rows if r.candidate.generator == "agent"]
    assert not [m for m in [*messages, *(r.getMessage() for r in caplog.records)] if KEY in m]


async def test_a_slow_reply_times_out_and_three_failures_stop_the_agents(agent_env, tmp_path):
    # the timeout leaves a loaded CI machine room for the planner's prompt reply (0.3 s timed it out there);
    # the coder's reply would come long after it (closing the server wakes the delayed answers)
    rules = [Rule(PLANNER, [Step(IDEAS)]), Rule(CODER, [Step(GOOD, delay_s=60)])]
    with ScriptedServer(rules) as srv:
        agent_env("anthropic", srv.anthropic_url, timeout_s=3, max_retries=0, ideas=4, concurrency=1)
        summary, messages, _, calls = await run_job(tmp_path)
    spend = summary.agent_spend
    assert [c.ok for c in spend.calls] == [True, False, False, False]  # the fourth coder never called
    assert "Timeout" in spend.calls[1].error
    assert spend.stopped.startswith("3 calls failed in a row")
    assert any(m.startswith("agents stopped, the job carries on") for m in messages)
    assert summary.state == "finished" and len(calls) == 4


async def test_a_budget_that_runs_out_mid_job_stops_the_agents_not_the_job(agent_env, tmp_path):
    with ScriptedServer(script(tokens=(900, 300))) as srv:
        # the planner (1,200 tokens) and one coder fit; the budget then refuses the next call
        agent_env("openai", srv.openai_url, budget_tokens=3000, max_output_tokens=300, concurrency=1)
        summary, messages, _, calls = await run_job(tmp_path, generators=("agent", "tune"))
    spend = summary.agent_spend
    assert spend.stopped.startswith("budget reached") and spend.tokens <= 3000
    assert 2 <= len(spend.calls) < 5 and len(calls) == len(spend.calls)
    assert any("agents stopped, the job carries on: budget reached" in m for m in messages)
    gens = [r.candidate.generator for r in summary.rows]
    assert "tune" in gens and summary.state == "finished"  # the other generators carried on
    assert gens.count("agent") < 4


async def test_no_provider_configured_says_once_that_agents_are_off(monkeypatch, tmp_path):
    monkeypatch.setenv("PTXFACTORY_CONFIG", str(tmp_path / "missing.toml"))
    for var in ("PTXFACTORY_AGENT_KIND", "PTXFACTORY_AGENT_MODEL"):
        monkeypatch.delenv(var, raising=False)
    summary, messages, lessons, calls = await run_job(tmp_path, generators=("agent", "tune"))
    assert summary.state == "finished" and summary.agent_spend is None and not calls and not lessons
    assert [m for m in messages if m.startswith("agents off")] == [messages[[i for i, m in enumerate(messages) if "agents off" in m][0]]]
    assert any(r.candidate.generator == "tune" for r in summary.rows)
    assert json.loads(summary.model_dump_json())["agent_spend"] is None


def test_ptxfactory_lessons_lists_the_agents_lessons_class_first_then_by_effect(tmp_path):
    from typer.testing import CliRunner

    from ptxfactory.daemon.cli import build_app

    path = tmp_path / "lessons.sqlite"

    async def fill():
        store = await LessonStore.open(path)
        try:
            for idea, cls, outcome, effect, lesson in [("warp per row", "generic/a", "faster", 3.5, None),
                                                       ("read the clock", "generic/a", "rejected", None, "clocks are refused"),
                                                       ("float4 loads", "generic/a", "faster", 7.0, None),
                                                       ("block per row", "rowreduce/b", "faster", 9.0, None)]:
                await store.record_agent_lesson(job_id="j", kernel_class=cls, arch="sm_90a", idea=idea, outcome=outcome,
                                                effect=effect, lesson=lesson, candidate_key=None)
            relevant = await store.agent_lessons("generic/a", "sm_90a")
            assert [r["idea"] for r in relevant] == ["float4 loads", "warp per row", "read the clock", "block per row"]
            assert [r["same_class"] for r in relevant] == [True, True, True, False]
            assert await store.agent_lessons("generic/a", "sm_100a") == []
        finally:
            await store.close()

    asyncio.run(fill())
    res = CliRunner().invoke(build_app(), ["lessons", "--store", str(path)])
    assert res.exit_code == 0, res.output
    assert "4 agent lessons" in res.stdout and "clocks are refused" in res.stdout and "7.00x" in res.stdout


async def test_a_recorded_job_replays_with_the_endpoint_gone(agent_env, monkeypatch, tmp_path):
    """Record a job's replies (``PTXFACTORY_AGENT_RECORD``) against the loopback endpoint, stop it, then replay the
    transcript: the same candidates and the same token counts, no request anywhere; the transcript is 0600 and
    holds no key and no header."""
    transcript = tmp_path / "rec" / "transcript.json"
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    with ScriptedServer(script()) as srv:
        url = srv.openai_url
        agent_env("openai", url)
        monkeypatch.setenv("PTXFACTORY_AGENT_RECORD", str(transcript))
        recorded, messages, _, _ = await run_job(first)
        assert srv.saw_credential(KEY) and len(srv.requests) == 7
    monkeypatch.delenv("PTXFACTORY_AGENT_RECORD")
    assert any("recording replies to" in m for m in messages)

    assert transcript.stat().st_mode & 0o777 == 0o600
    text = transcript.read_text()
    assert KEY not in text and "authorization" not in text.lower() and "x-api-key" not in text.lower()
    data = json.loads(text)
    assert len(data["replies"]) == 7 and data["recorded_from"]["model"] == "scripted-model"
    assert "base_url" not in text and url not in text

    # the endpoint is gone (a request to it would fail): only the transcript answers
    (tmp_path / "replay.toml").write_text(
        "[agents]\nconcurrency = 2\nbudget_tokens = 100000\nideas = 4\nrounds = 1\n"
        f'[agents.providers.rec]\nkind = "replay"\ntranscript = "{transcript}"\n'
        "usd_per_mtok_in = 2.0\nusd_per_mtok_out = 10.0\n")
    monkeypatch.setenv("PTXFACTORY_CONFIG", str(tmp_path / "replay.toml"))
    replayed, messages, _, _ = await run_job(second)

    def agent_rows(summary):
        return sorted((r.candidate.key, r.candidate.description, r.result.outcome) for r in summary.rows
                      if r.candidate.generator == "agent")

    assert len(agent_rows(recorded)) == 4 and agent_rows(replayed) == agent_rows(recorded)
    assert replayed.best_key == recorded.best_key
    assert all(c.ok for c in replayed.agent_spend.calls) and len(replayed.agent_spend.calls) == 7
    assert (replayed.agent_spend.input_tokens, replayed.agent_spend.output_tokens) == (700, 350)
    assert replayed.agent_spend.cost_usd == pytest.approx(recorded.agent_spend.cost_usd)
    assert not any("recording replies" in m for m in messages)
