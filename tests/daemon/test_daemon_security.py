"""The unix socket is owner-only; TCP binds to loopback; beyond loopback a token is required, and a daemon
with a token refuses an ``initialize`` without it. Simulated backend; no job runs here."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from pytest_lsp import client_capabilities

from _daemon_support import close, execute, initialize, run_cli, tcp_client, unix_client, until

pytestmark = pytest.mark.timeout(60)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_default_socket_is_owner_only(start_daemon, sockdir: Path, tmp_path: Path):
    """Without --socket: $XDG_RUNTIME_DIR/ptxfactory/daemon.sock, folder 0700, socket 0600, lock 0600."""
    runtime = sockdir / "run"
    runtime.mkdir(mode=0o755)
    daemon = start_daemon(socket=runtime / "ptxfactory" / "daemon.sock", pass_socket=False, env={"XDG_RUNTIME_DIR": str(runtime)})
    assert "--socket" not in daemon.command()
    assert mode(runtime / "ptxfactory") == 0o700
    assert mode(daemon.socket) == 0o600 and stat.S_ISSOCK(os.stat(daemon.socket).st_mode)
    assert mode(daemon.socket.with_name("daemon.sock.lock")) == 0o600
    client = await unix_client(daemon.socket, "visual-studio-code", tmp_path)
    assert (await execute(client, "ptxfactory.jobs", {}))["jobs"] == []
    await close(client)
    # A second daemon on the same socket refuses to start.
    second = run_cli("serve", "--backend", "simulated", env={"XDG_RUNTIME_DIR": str(runtime)})
    assert second.returncode == 1 and "already serves" in second.stderr


def test_non_loopback_tcp_without_token_is_refused(sockdir: Path):
    proc = run_cli("serve", "--socket", sockdir / "d.sock", "--backend", "simulated", "--tcp", "0", "--host", "0.0.0.0")
    assert proc.returncode == 1 and "--token" in proc.stderr
    assert not (sockdir / "d.sock").exists()


async def test_token_is_required_at_initialize(start_daemon, tmp_path: Path):
    daemon = start_daemon(tcp=True, extra=("--token", "s3cret"))
    refused = await tcp_client(daemon.port, "neovim", tmp_path, init=False)
    with pytest.raises(Exception, match="token"):
        await initialize(refused, client_capabilities("neovim"), tmp_path, token="wrong")
    await until(lambda: refused.ptx_writer.transport.is_closing() or refused._async_tasks[0].done(), what="the daemon to hang up")
    await close(refused, polite=False)

    accepted = await tcp_client(daemon.port, "neovim", tmp_path, token="s3cret")
    assert (await execute(accepted, "ptxfactory.jobs", {}))["jobs"] == []
    await close(accepted)
    assert daemon.running
