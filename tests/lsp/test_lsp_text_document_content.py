"""``initialize`` advertises ``workspace.textDocumentContent`` (LSP 3.18) for the ``ptxfactory`` scheme, which pygls 2.1's
capability builder leaves out (daemon/lsp/session.py: ``SessionProtocol.lsp_initialize``), and the request it announces
is served. Server: simulated backend; VS Code's and Neovim's declared capabilities."""
from __future__ import annotations

from lsprotocol import types
from pytest_lsp import LanguageClient

from ptxfactory.protocol.lsp import SHOW_SCHEME


async def test_initialize_advertises_the_ptxfactory_scheme(client: LanguageClient):
    caps = client.initialize_result.capabilities
    assert caps.workspace is not None
    content = caps.workspace.text_document_content
    assert content is not None and list(content.schemes) == [SHOW_SCHEME] == ["ptxfactory"]
    # what pygls builds for the workspace is kept
    assert caps.workspace.workspace_folders is not None and caps.workspace.workspace_folders.supported
    assert caps.execute_command_provider is not None and "ptxfactory.show" in caps.execute_command_provider.commands


async def test_the_advertised_request_is_served(client: LanguageClient):
    """A URI of the scheme that this session never made is InvalidParams naming the command that makes it."""
    try:
        await client.workspace_text_document_content_async(types.TextDocumentContentParams(uri=f"{SHOW_SCHEME}://show/x/0/k.ptx"))
    except Exception as exc:  # noqa: BLE001: pygls raises the JSON-RPC error as its own exception type
        assert "unknown here" in str(exc) and "ptxfactory.show" in str(exc)
    else:
        raise AssertionError("a URI this session never made was answered")
