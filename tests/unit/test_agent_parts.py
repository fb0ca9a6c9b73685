"""The agents' parts on their own: reply parsing, config (file, environment, XDG), key redaction, the budget,
the replay provider and the prompt templates."""
from __future__ import annotations

import logging

import pytest

from ptxfactory.protocol.agent import AgentCall
from ptxfactory.search.agents import parse, prompts
from ptxfactory.search.agents.budget import Budget
from ptxfactory.search.agents.config import ConfigError, ProviderConfig, config_path, load_config
from ptxfactory.search.agents.providers import ProviderError, ReplayProvider, Request
from ptxfactory.search.agents.redact import RedactingFilter, redact, remember

from _agent_support import BROKEN, CHATTY, GOOD, IDEAS, KEY, LESSON

K = "rowsum_seq"


def test_kernel_code_from_fences_chatter_several_blocks_partial_and_none():
    assert parse.kernel_code(GOOD, K).startswith('extern "C" __global__ void rowsum_seq(')
    assert parse.kernel_code(BROKEN, K).rstrip().endswith("}")  # chatter before the fence is dropped
    two = "First try:\n```cuda\n__global__ void rowsum_seq(int a) { }\n```\nBetter:\n```c++\n__global__ void rowsum_seq(int b) { }\n```\n"
    assert "int b" in parse.kernel_code(two, K)  # the last block that defines it
    helper = "```cuda\n__device__ float twice(float v) { return 2 * v; }\n```\n```cuda\n__global__ void other() {}\n```"
    assert parse.kernel_code(helper, K) is None  # blocks, but none defines the kernel
    cut = "```cuda\n__global__ void rowsum_seq(const float* x) {\n    float sum = 0"
    assert parse.kernel_code(cut, K).startswith("__global__ void rowsum_seq")  # a reply cut short: compile will say
    bare = "Sure.\n__device__ float twice(float v) { return 2 * v; }\nextern \"C\" __global__ void rowsum_seq(int n) { }\n"
    assert parse.kernel_code(bare, K).startswith("__device__ float twice")  # no fences: helpers kept
    assert parse.kernel_code(CHATTY, K) is None and parse.kernel_code("", K) is None


def test_launch_ideas_and_lesson():
    assert parse.launch(GOOD).grid == ["M"] and parse.launch(GOOD).block == [256]
    fenced = '```json\n{"grid": ["cdiv(M, 8)"], "block": [256], "shared_mem": 0}\n```'
    assert parse.launch(fenced).grid == ["cdiv(M, 8)"]
    assert parse.launch('LAUNCH: {"grid": ["__import__(1)"], "block": [256]}') is None  # not a safe expression
    assert parse.launch('LAUNCH: {"grid": [1], "block": [256], "evil": 1}') is None  # unknown field
    assert parse.launch("LAUNCH: {not json}") is None and parse.launch(CHATTY) is None
    assert parse.ideas(IDEAS, 10) == ["one block per row with a shared-memory tree reduction", "unroll the sequential loop by four",
                                      "stop each row early when a timer expires", "think harder about the memory hierarchy"]
    assert parse.ideas(IDEAS, 2) == parse.ideas(IDEAS, 10)[:2]
    assert parse.ideas("1. use float4 loads everywhere\n2) a warp per row reduction\n- use float4 loads everywhere", 5) == [
        "use float4 loads everywhere", "a warp per row reduction"]
    assert parse.ideas(CHATTY, 3) == []
    assert parse.lesson(LESSON).startswith("reading the clock")
    assert parse.lesson("**LESSON:** " + "x" * 500) == "x" * 200
    assert parse.lesson(GOOD) is None


def test_config_file_then_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("PTXFACTORY_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config_path() == tmp_path / "ptxfactory" / "config.toml"
    assert not load_config(env={}).enabled  # no file, no variables: agents off
    path = tmp_path / "ptxfactory" / "config.toml"
    path.parent.mkdir()
    path.write_text('[agents]\nprovider = "claude"\nbudget_usd = 0.25\nconcurrency = 4\n'
                    '[agents.providers.local]\nkind = "openai"\nmodel = "qwen"\nbase_url = "http://127.0.0.1:8000/v1"\n'
                    '[agents.providers.claude]\nkind = "anthropic"\nmodel = "claude-x"\nusd_per_mtok_in = 3\nusd_per_mtok_out = 15\n')
    cfg = load_config(env={})
    assert cfg.provider.name == "claude" and cfg.provider.api_key_env == "ANTHROPIC_API_KEY"
    assert cfg.budget_usd == 0.25 and cfg.concurrency == 4 and cfg.provider.cost(1_000_000, 100_000) == pytest.approx(4.5)
    env = {"PTXFACTORY_AGENT_KIND": "openai", "PTXFACTORY_AGENT_MODEL": "gpt-x", "PTXFACTORY_AGENT_KEY_ENV": "MY_KEY",
           "PTXFACTORY_AGENT_BUDGET_TOKENS": "5000"}
    cfg = load_config(env=env)
    assert (cfg.provider.kind, cfg.provider.model, cfg.provider.api_key_env, cfg.budget_tokens) == ("openai", "gpt-x", "MY_KEY", 5000)
    assert not load_config(env={"PTXFACTORY_AGENTS": "off"}).enabled
    monkeypatch.setenv("PTXFACTORY_CONFIG", str(tmp_path / "other.toml"))
    assert config_path() == tmp_path / "other.toml"


def test_a_key_in_the_config_file_is_refused_without_showing_it(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f'[agents.providers.x]\nkind = "openai"\nmodel = "m"\napi_key = "{KEY}"\n')
    with pytest.raises(ConfigError, match="api_key_env") as err:
        load_config(path, env={})
    assert KEY not in str(err.value)
    path.write_text('[agents.providers.x]\nkind = "grpc"\nmodel = "m"\n')
    with pytest.raises(ConfigError, match="kind"):
        load_config(path, env={})


def test_redaction_of_keys_and_bearer_tokens_in_text_and_log_records():
    remember(KEY)
    assert KEY not in redact(f"error: Authorization: Bearer {KEY} refused") and "[redacted]" in redact(KEY)
    assert redact("x-api-key: abcdefghijklmnop") == "x-api-key: [redacted]"
    record = logging.LogRecord("openai._base_client", logging.DEBUG, __file__, 1, "headers %s", ({"api-key": KEY},), None)
    RedactingFilter().filter(record)
    assert KEY not in record.getMessage()


def test_budget_allowance_reservation_and_exhaustion():
    provider = ProviderConfig(name="p", kind="openai", model="m", usd_per_mtok_in=1.0, usd_per_mtok_out=10.0, max_output_tokens=1000)
    budget = Budget(tokens=2000, usd=None)
    assert budget.allowance(provider, "x" * 400) == 1000  # 101 estimated in, capped by max_output_tokens
    held = budget.reserve(provider, "x" * 400, 1000)
    assert budget.allowance(provider, "x" * 400) == 2000 - 1101 - 101  # what is left after the call in flight
    budget.charge(AgentCall(role="coder", provider="p", model="m", input_tokens=1000, output_tokens=1000), held, "x" * 400)
    assert budget.exhausted and budget.allowance(provider, "x" * 400) == 0
    assert budget.estimate("x" * 400) == 1001  # this endpoint charges 2.5 tokens a character
    money = Budget(tokens=None, usd=0.02)
    assert money.allowance(provider, "") == 1000
    money.charge(AgentCall(role="coder", provider="p", model="m", cost_usd=0.0195))
    assert money.allowance(provider, "") == 0 and not money.exhausted  # $0.0005 left buys under 64 output tokens


async def test_replay_serves_recorded_replies_by_request_hash():
    request = Request(role="planner", system="s", user="u", max_tokens=100)
    provider = ReplayProvider(ProviderConfig(name="r", kind="replay", model="replay"),
                              {request.digest(): {"text": IDEAS, "input_tokens": 7, "output_tokens": 3}})
    reply = await provider.complete(request)
    assert (reply.text, reply.input_tokens, reply.output_tokens) == (IDEAS, 7, 3)
    assert Request(role="planner", system="s", user="u", max_tokens=5).digest() == request.digest()
    with pytest.raises(ProviderError, match="no recorded reply for coder request"):
        await provider.complete(Request(role="coder", system="s", user="other", max_tokens=100))
    assert provider.missed == [(Request(role="coder", system="s", user="other", max_tokens=1).digest(), "coder")]


def test_every_prompt_template_renders():
    assert "IDEA:" in prompts.render("planner", ideas=3, arch="sm_90a", kernel_name=K, kernel="k", spec="s", resources="r",
                                     roofline="rf", sass="-", counters="-", rejected="none", kernel_class="c", lessons="none")
    assert "LAUNCH:" in prompts.render("coder_launch_free", launch="l", symbols="M, N")
    assert "LESSON:" in prompts.render("reviewer", kernel_name=K, arch="a", idea="i", failure="f", candidate="c",
                                       signature="int n", launch_note="")
    with pytest.raises(KeyError):
        prompts.render("coder", kernel_name=K)


def test_record_from_the_file_or_the_environment(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[agents]\nrecord = "~/t.json"\n[agents.providers.x]\nkind = "openai"\nmodel = "m"\n')
    assert load_config(path, env={}).record == "~/t.json"
    assert load_config(path, env={"PTXFACTORY_AGENT_RECORD": "/tmp/r.json"}).record == "/tmp/r.json"
    assert load_config(tmp_path / "missing.toml", env={}).record is None
    path.write_text('[agents]\nrecord = 3\n')
    with pytest.raises(ConfigError, match="agents.record: expected a file path"):
        load_config(path, env={})


async def test_recording_provider_keeps_answers_only_and_adds_to_a_transcript(tmp_path):
    from ptxfactory.search.agents.providers import RecordingProvider

    cfg = ProviderConfig(name="r", kind="replay", model="replay")
    path = tmp_path / "t.json"
    one = Request(role="planner", system="s", user="u1", max_tokens=100)
    two = Request(role="coder", system="s", user="u2", max_tokens=100)
    rec = RecordingProvider(ReplayProvider(cfg, {one.digest(): {"text": IDEAS, "input_tokens": 7, "output_tokens": 3}}), path)
    assert (await rec.complete(one)).text == IDEAS
    with pytest.raises(ProviderError):
        await rec.complete(two)  # a failed call records nothing
    again = RecordingProvider(ReplayProvider(cfg, {two.digest(): "LESSON: x"}), path)
    await again.complete(two)
    replay = ReplayProvider(ProviderConfig(name="r", kind="replay", model="replay", transcript=str(path)))
    first = await replay.complete(one)
    assert (first.text, first.input_tokens, first.output_tokens) == (IDEAS, 7, 3)
    assert (await replay.complete(two)).text == "LESSON: x"
    assert path.stat().st_mode & 0o777 == 0o600 and not list(tmp_path.glob(".transcript-*"))
