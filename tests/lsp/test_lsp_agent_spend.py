"""The job's agent spend in the editor: the progress end message says how many calls, tokens and dollars the
language-model agents cost, and says nothing of agents when they are off.

The server runs with ``--backend simulated`` (nothing is verified or timed for real) and its agents talk to a
scripted OpenAI-compatible server on loopback: one plan of two ideas, then two coder replies without code, so
three calls of 100 input and 50 output tokens at $2 / $10 per million tokens.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from ptxfactory.search.agents.loopback import Rule, ScriptedServer, Step

from _lsp_support import open_document, progress_ended, until

KEY = "sk-lsp-test-NOT-A-KEY-0b1c2d3e4f"
IDEAS = "IDEA: one warp per row with shuffles\nIDEA: vector loads of eight bf16\nIDEA: a third idea\n"


@pytest.fixture(autouse=True)
def agent_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    """A loopback endpoint and a config naming it, in the environment the server is started with (autouse runs
    before the client fixture starts the server); ``off`` in the test's name turns the agents off instead."""
    if "off" in request.node.name:
        monkeypatch.setenv("PTXFACTORY_AGENTS", "off")
        yield None
        return
    with ScriptedServer([Rule("Propose", [Step(IDEAS)])], fallback=Step("No code from me today.")) as srv:
        config = tmp_path / "agents.toml"
        config.write_text(
            "[agents]\nconcurrency = 1\nbudget_tokens = 100000\nideas = 2\nrounds = 1\n"
            f'[agents.providers.loop]\nkind = "openai"\nmodel = "scripted-model"\nbase_url = "{srv.openai_url}"\n'
            'api_key_env = "PTXF_LSP_TEST_KEY"\nusd_per_mtok_in = 2.0\nusd_per_mtok_out = 10.0\nmax_retries = 0\n')
        monkeypatch.setenv("PTXFACTORY_CONFIG", str(config))
        monkeypatch.setenv("PTXF_LSP_TEST_KEY", KEY)
        for var in ("PTXFACTORY_AGENTS", "PTXFACTORY_AGENT_KIND", "PTXFACTORY_AGENT_MODEL", "PTXFACTORY_AGENT_RECORD"):
            monkeypatch.delenv(var, raising=False)
        yield srv


async def _job_end(client: LanguageClient, rmsnorm: Path) -> types.WorkDoneProgressEnd:
    uri = open_document(client, rmsnorm, rmsnorm.read_text())
    started = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="ptxfactory.optimise", arguments=[{"uri": uri, "kernel": "rmsnorm"}]))
    *_, end = await until(lambda: progress_ended(client, started["token"]), what="the job's progress to end")
    assert isinstance(end, types.WorkDoneProgressEnd)
    return end


async def test_the_end_message_carries_the_agents_spend(vscode: LanguageClient, rmsnorm: Path, agent_endpoint):
    end = await _job_end(vscode, rmsnorm)

    assert "agents: 3 calls, 450 tokens, $0.0021" in end.message, end.message
    assert end.message.startswith("best: ")  # the job's own line comes first, the spend after it
    assert len(agent_endpoint.requests) == 3 and agent_endpoint.saw_credential(KEY)
    assert KEY not in end.message


async def test_with_agents_off_the_end_message_says_nothing_of_them(vscode: LanguageClient, rmsnorm: Path):
    end = await _job_end(vscode, rmsnorm)

    assert end.message.startswith("best: ") and "agents" not in end.message, end.message
