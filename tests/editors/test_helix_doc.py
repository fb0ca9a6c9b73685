"""editors/helix.md: what can be checked without Helix (it cannot be installed here: not in Debian 12, PyPI or npm).

The languages.toml snippet parses and wires the ``ptxfactory lsp`` bridge to Helix's ``cpp`` language (which covers
.cu/.cuh); the ``:lsp-workspace-command`` arguments shown validate against the server's models. No server runs.
"""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from ptxfactory.protocol.lsp import CANCEL, OPTIMISE, CancelArgs, OptimiseArgs

DOC = (Path(__file__).resolve().parents[2] / "editors" / "helix.md").read_text()


def test_doc_says_it_is_untested_in_helix():
    assert "Not tested in a real Helix" in DOC


def test_languages_toml_snippet():
    blocks = re.findall(r"```toml\n(.*?)```", DOC, re.S)
    assert len(blocks) == 1
    config = tomllib.loads(blocks[0])
    assert config["language-server"]["ptxfactory"] == {"command": "ptxfactory", "args": ["lsp"]}
    [cpp] = [lang for lang in config["language"] if lang["name"] == "cpp"]
    assert "ptxfactory" in cpp["language-servers"]


def test_workspace_command_arguments_validate():
    shown = re.findall(r":lsp-workspace-command (\S+) (\{.*?\})`", DOC)
    by_command = {name: json.loads(args) for name, args in shown}
    assert {OPTIMISE, CANCEL} <= set(by_command) and all(name.startswith("ptxfactory.") for name in by_command)
    OptimiseArgs.model_validate(by_command[OPTIMISE])
    CancelArgs.model_validate(by_command[CANCEL])
