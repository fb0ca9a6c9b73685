"""The VS Code extension (editors/vscode) builds: ``build.sh`` runs ``npm ci``, ``tsc --noEmit``, the unit tests
of the settings → server options logic (node's test runner), the esbuild bundle and ``vsce package``.

No VS Code runs here (its end-to-end tests need the VS Code executable, which CI cannot fetch); the
server side of the extension's flow is what tests/lsp covers with VS Code's declared capabilities. No
server and no backend run in this file.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from ptxfactory.protocol.lsp import CANCEL, CODE_ACTION_KIND, COMMANDS, OPTIMISE, PROGRESS_NOTIFICATION, SHOW, SHOW_SCHEME

VSCODE = Path(__file__).resolve().parents[2] / "editors" / "vscode"
PACKAGE = json.loads((VSCODE / "package.json").read_text())


def test_commands_do_not_clash_with_the_servers():
    """vscode-languageclient registers the server's executeCommandProvider commands as VS Code commands;
    the extension's own must differ, and every one it registers must be contributed (and vice versa)."""
    contributed = {c["command"] for c in PACKAGE["contributes"]["commands"]}
    source = (VSCODE / "src" / "extension.ts").read_text()
    registered = set(re.findall(r'"(ptxfactory-vscode\.\w+)"', source))
    assert contributed == registered
    assert not contributed & set(COMMANDS)
    assert all(c.startswith("ptxfactory-vscode.") for c in contributed)


def test_protocol_names_match_the_server():
    """The names src/config.ts sends are protocol/lsp.py's."""
    config = (VSCODE / "src" / "config.ts").read_text()
    for name, value in {"OPTIMISE": OPTIMISE, "CANCEL": CANCEL, "PROGRESS_NOTIFICATION": PROGRESS_NOTIFICATION,
                        "CODE_ACTION_KIND": CODE_ACTION_KIND, "SHOW": SHOW, "SHOW_SCHEME": SHOW_SCHEME}.items():
        assert f'export const {name} = "{value}";' in config


def test_ptxfactory_documents_are_served_and_opened_side_by_side():
    """The extension serves the ptxfactory: scheme (the server's views) and has Show PTX/SASS commands."""
    source = (VSCODE / "src" / "extension.ts").read_text()
    assert "registerTextDocumentContentProvider(SHOW_SCHEME" in source
    assert "TEXT_DOCUMENT_CONTENT" in source and '"vscode.diff"' in source
    contributed = {c["command"] for c in PACKAGE["contributes"]["commands"]}
    assert {"ptxfactory-vscode.showPtx", "ptxfactory-vscode.showSass"} <= contributed


def test_settings_declared():
    props = PACKAGE["contributes"]["configuration"]["properties"]
    assert set(props) == {f"ptxfactory.server.{k}" for k in ("mode", "command", "sshHost", "sshArgs", "tcpAddress", "token")}
    assert props["ptxfactory.server.mode"]["enum"] == ["command", "ssh", "tcp"]
    assert props["ptxfactory.server.command"]["default"] == ["ptxfactory", "lsp"]
    assert PACKAGE["engines"]["vscode"] == "^1.82.0"  # vscode-languageclient 9.0.1's floor
    assert PACKAGE["dependencies"] == {"vscode-languageclient": "9.0.1"}


@pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None, reason="node and npm are not installed")
def test_build_script_makes_a_small_vsix():
    """build.sh type-checks, runs the unit tests, bundles and packages; the .vsix holds the bundle and the manifest."""
    proc = subprocess.run(["bash", str(VSCODE / "build.sh")], cwd=VSCODE, capture_output=True, text=True, timeout=280, stdin=subprocess.DEVNULL)
    log = proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.returncode == 0, log
    assert re.search(r"^# pass (\d+)$", proc.stdout, re.M) and re.search(r"^# fail 0$", proc.stdout, re.M), log
    vsix = VSCODE / f"ptxfactory-{PACKAGE['version']}.vsix"
    assert vsix.is_file(), log
    assert vsix.stat().st_size < 2 * 1024 * 1024, f"{vsix.stat().st_size} bytes: node_modules got packaged?"
    with zipfile.ZipFile(vsix) as z:
        names = set(z.namelist())
        manifest = json.loads(z.read("extension/package.json"))
    assert "extension/dist/extension.js" in names and manifest["main"] == "./dist/extension.js"
    assert not any("node_modules" in n or n.endswith(".ts") for n in names), sorted(names)
