"""What the server advertises at ``initialize`` (server: simulated backend; no job runs here)."""
from __future__ import annotations

from pytest_lsp import LanguageClient

from ptxfactory.protocol.lsp import COMMANDS


async def test_capabilities_advertise_the_features(client: LanguageClient):
    """The custom commands, code lens without resolve, and code actions of our kind without resolve.

    Issue 4 added ptxfactory.jobs, .watch and .report (and hover) to the original two commands."""
    caps = client.initialize_result.capabilities
    assert client.initialize_result.server_info.name == "ptxfactory"
    assert {"ptxfactory.optimise", "ptxfactory.cancel"} <= set(caps.execute_command_provider.commands)
    assert set(caps.execute_command_provider.commands) == set(COMMANDS)
    assert caps.hover_provider
    assert caps.code_lens_provider is not None and not caps.code_lens_provider.resolve_provider
    assert list(caps.code_action_provider.code_action_kinds) == ["refactor.rewrite.ptxfactory"]
    assert not caps.code_action_provider.resolve_provider
