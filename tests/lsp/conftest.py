"""Fixtures of the LSP tests: the server runs as ``python -m ptxfactory.daemon.lsp --backend simulated``.

Every server gets its own lesson store (``PTXFACTORY_HOME`` in the test's tmp_path) and works on a
copy of ``examples/rmsnorm`` (source + spec).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from _lsp_support import EXAMPLE, SERVER, capabilities, make_client

CONFIG = ClientServerConfig(server_command=SERVER, client_factory=make_client)


@pytest.fixture(autouse=True)
def ptxfactory_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The server inherits this environment: its lesson store lives in tmp_path (autouse runs before the client)."""
    home = tmp_path / "home"
    monkeypatch.setenv("PTXFACTORY_HOME", str(home))
    return home


@pytest.fixture
def rmsnorm(tmp_path: Path) -> Path:
    """A copy of the rmsnorm example (``rmsnorm.cu`` and ``rmsnorm.cu.toml``); returns the source's path."""
    work = tmp_path / "src"
    work.mkdir()
    for name in ("rmsnorm.cu", "rmsnorm.cu.toml"):
        shutil.copy(EXAMPLE / name, work / name)
    return work / "rmsnorm.cu"


async def _initialize(client: LanguageClient, caps: types.ClientCapabilities, root: Path) -> None:
    client.initialize_result = await client.initialize_session(types.InitializeParams(
        capabilities=caps, root_uri=root.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
    ))


@pytest_lsp.fixture(config=CONFIG, params=["visual-studio-code", "neovim"])
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient, tmp_path: Path):
    """A session with VS Code's, then Neovim's declared capabilities (both support work-done progress)."""
    await _initialize(lsp_client, capabilities(request.param), tmp_path)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=CONFIG)
async def vscode(lsp_client: LanguageClient, tmp_path: Path):
    """A session with VS Code's capabilities only."""
    await _initialize(lsp_client, capabilities("visual-studio-code"), tmp_path)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=CONFIG)
async def plain_client(lsp_client: LanguageClient, tmp_path: Path):
    """A session whose client declares no work-done progress: the server must use ``ptxfactory/progress``."""
    await _initialize(lsp_client, capabilities("no-progress"), tmp_path)
    yield
    await lsp_client.shutdown_session()
