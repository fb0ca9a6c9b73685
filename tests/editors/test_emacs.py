"""editors/emacs.md's eglot snippet, extracted from the document, in a batch GNU Emacs against the real server.

Emacs and eglot come from Debian (``emacs-nox``, ``elpa-eglot``; ``.ci/run`` installs them). The server is
``python -m ptxfactory.daemon.lsp --backend simulated``: **the simulated backend ran** (no GPU in CI; it
never runs or verifies a kernel and its speedups are modelled, which the end message says). The applied
candidate is compiled for real with NVRTC.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.source import find_kernel, find_kernels
from ptxfactory.protocol import Candidate, LaunchConfig

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "editors" / "emacs.md"
E2E = Path(__file__).with_name("emacs_e2e.el")
EXAMPLE = ROOT / "examples" / "rmsnorm"
SERVER = [sys.executable, "-m", "ptxfactory.daemon.lsp", "--backend", "simulated"]
BACKEND = "simulated (SimulatedDevice: no GPU in CI; never runs or verifies kernels, speedups are modelled)"


def _emacs_with_eglot() -> str | None:
    emacs = shutil.which("emacs")
    if emacs is None:
        return None
    probe = subprocess.run([emacs, "--batch", "-q", "--eval", "(require 'eglot)"], capture_output=True, timeout=60)
    return emacs if probe.returncode == 0 else None


EMACS = _emacs_with_eglot()
pytestmark = pytest.mark.skipif(
    EMACS is None, reason="no Emacs with eglot (Debian: apt-get install emacs-nox elpa-eglot; .ci/run does)",
)


def snippet() -> str:
    blocks = re.findall(r"```elisp\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "editors/emacs.md should hold exactly one elisp block (the tested snippet)"
    return blocks[0]


def test_snippet_optimise_then_apply_best(tmp_path: Path):
    """Open the example (cuda-mode, eglot-ensure), ptxfactory-optimise with point in the kernel, wait for the
    ptxfactory/progress end, ptxfactory-apply-best, save: the file holds the candidate and compiles. Backend: simulated."""
    print(f"backend: {BACKEND}")
    for name in ("rmsnorm.cu", "rmsnorm.cu.toml"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    (tmp_path / "ptxfactory.el").write_text(snippet())
    out, result = tmp_path / "applied.cu", tmp_path / "result.json"
    env = {**os.environ, "PTX_SNIPPET": str(tmp_path / "ptxfactory.el"), "PTX_SERVER": json.dumps(SERVER),
           "PTX_FILE": str(tmp_path / "rmsnorm.cu"), "PTX_OUT": str(out), "PTX_RESULT": str(result), "PTX_TIMEOUT": "180"}

    proc = subprocess.run([EMACS, "--batch", "-q", "-l", str(E2E)], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=400)

    assert proc.returncode == 0, proc.stderr[-6000:] + proc.stdout[-2000:]
    summary = json.loads(result.read_text())
    assert "(simulated)" in summary["end_message"] and summary["end_message"].startswith("best: ")  # the simulated backend ran
    original, applied = (EXAMPLE / "rmsnorm.cu").read_text(), out.read_text()
    assert applied != original and applied.startswith(original[: original.index('extern "C"')])
    assert [k.name for k in find_kernels(applied)] == ["rmsnorm"]
    kernel = find_kernel(applied, "rmsnorm").text
    assert kernel != find_kernel(original, "rmsnorm").text
    compiled = compile_candidate(
        Candidate(kernel_name="rmsnorm", source=applied, kernel_text=kernel, launch=LaunchConfig(grid=["M"], block=[256])), "sm_90a",
    )
    assert isinstance(compiled, Compiled), getattr(compiled, "log", "")
