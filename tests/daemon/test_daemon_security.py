"""The unix socket is owner-only; TCP (loopback included) serves only clients with the daemon's token, which it
keeps 0600 beside its socket; output folders that are symbolic links are refused; stores are 0600.
Simulated backend; no job runs here."""
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


def test_a_token_file_others_can_read_is_refused(sockdir: Path, tmp_path: Path):
    loose = tmp_path / "token"
    loose.write_text("s3cret\n")
    loose.chmod(0o644)
    proc = run_cli("serve", "--socket", sockdir / "d.sock", "--backend", "simulated", "--tcp", "0", "--token-file", loose)
    assert proc.returncode == 1 and "readable by others" in proc.stderr
    assert not (sockdir / "d.sock").exists()


async def test_loopback_tcp_without_the_token_is_refused(start_daemon, tmp_path: Path):
    """No --token anywhere: the daemon makes one, writes it 0600 beside its socket, and refuses a client without it."""
    daemon = start_daemon(tcp=True)
    token_file = daemon.socket.with_name("d.sock.token")
    assert mode(token_file) == 0o600 and daemon.token and len(daemon.token) >= 32
    assert daemon.token not in daemon.log()
    for token in (None, "wrong"):
        refused = await tcp_client(daemon.port, "neovim", tmp_path, init=False)
        with pytest.raises(Exception, match="token"):
            await initialize(refused, client_capabilities("neovim"), tmp_path, token=token)
        await until(lambda: refused.ptx_writer.transport.is_closing() or refused.ptx_reading.done(), what="the daemon to hang up")
        await close(refused, polite=False)
    accepted = await tcp_client(daemon.port, "neovim", tmp_path, token=daemon.token)
    assert (await execute(accepted, "ptxfactory.jobs", {}))["jobs"] == []
    await close(accepted)
    # this user's CLI client reads the token file by itself
    from ptxfactory.daemon.client import DaemonClient

    cli = await DaemonClient.connect(daemon.socket, port=daemon.port)
    assert (await cli.command("ptxfactory.jobs", {}))["jobs"] == []
    await cli.close()
    daemon.stop()
    assert not token_file.exists()


async def test_token_file_and_environment(start_daemon, tmp_path: Path):
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    secret.chmod(0o600)
    daemon = start_daemon(tcp=True, extra=("--token-file", str(secret)))
    assert daemon.token == "from-a-file"
    daemon.stop()
    second = start_daemon(tcp=True, socket=daemon.socket.with_name("e.sock"), env={"PTXFACTORY_TOKEN": "from-the-env"})
    assert second.token == "from-the-env"
    assert "--token" not in " ".join(second.command())


async def test_token_is_required_at_initialize(start_daemon, tmp_path: Path):
    daemon = start_daemon(tcp=True, extra=("--token", "s3cret"))
    assert "visible to every user" in daemon.log()
    refused = await tcp_client(daemon.port, "neovim", tmp_path, init=False)
    with pytest.raises(Exception, match="token"):
        await initialize(refused, client_capabilities("neovim"), tmp_path, token="wrong")
    await until(lambda: refused.ptx_writer.transport.is_closing() or refused.ptx_reading.done(), what="the daemon to hang up")
    await close(refused, polite=False)

    accepted = await tcp_client(daemon.port, "neovim", tmp_path, token="s3cret")
    assert (await execute(accepted, "ptxfactory.jobs", {}))["jobs"] == []
    await close(accepted)
    assert daemon.running


OTHER_USER_CLIENT = r"""
import json, socket, sys
port, sock_path, token_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
out = {}
try:
    open(token_path).read()
    out["token_file"] = "readable"
except OSError as exc:
    out["token_file"] = type(exc).__name__
u = socket.socket(socket.AF_UNIX)
try:
    u.connect(sock_path)
    out["unix"] = "connected"
except OSError as exc:
    out["unix"] = type(exc).__name__
s = socket.create_connection(("127.0.0.1", port), timeout=20)
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"processId": None, "rootUri": None, "capabilities": {}}}).encode()
s.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
data = b""
while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(data.split(b":", 1)[1].split(b"\r\n")[0]):
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
answer = json.loads(data.split(b"\r\n\r\n", 1)[1]) if b"\r\n\r\n" in data else {}
out["initialize"] = "error" if "error" in answer else ("result" if "result" in answer else "nothing")
body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "workspace/executeCommand",
                   "params": {"command": "ptxfactory.jobs", "arguments": [{}]}}).encode()
try:
    s.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    rest = s.recv(65536)
    out["jobs"] = "answered" if b'"jobs"' in rest else "refused"
except OSError:
    out["jobs"] = "refused"
print(json.dumps(out))
"""


async def test_a_second_local_account_is_refused(start_daemon, tmp_path: Path):
    """As root with useradd: a fresh account on this host connects to the loopback TCP port without the token
    (refused at initialize; no job list), cannot read the token file and cannot connect to the unix socket."""
    import shutil
    import subprocess
    import sys
    import uuid

    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("userdel"):
        pytest.skip("needs root and useradd to create a second local account")
    name = f"ptxt{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"useradd failed: {made.stderr.strip()}")
    try:
        import pwd

        other = pwd.getpwnam(name)
        daemon = start_daemon(tcp=True)

        def become_other() -> None:
            os.setgroups([])
            os.setgid(other.pw_gid)
            os.setuid(other.pw_uid)

        python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)), sys.executable)
        try:
            proc = subprocess.run(
                [python, "-I", "-c", OTHER_USER_CLIENT, str(daemon.port), str(daemon.socket), str(daemon.socket.with_name("d.sock.token"))],
                capture_output=True, text=True, timeout=60, preexec_fn=become_other, cwd="/",
            )
        except PermissionError as exc:  # the other account cannot run this python (e.g. under /root)
            pytest.skip(f"the second account cannot run {python}: {exc}")
        assert proc.returncode == 0, proc.stderr
        import json

        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        assert seen["initialize"] == "error" and seen["jobs"] == "refused", seen
        assert seen["token_file"] == "PermissionError" and seen["unix"] == "PermissionError", seen
        assert daemon.running
    finally:
        subprocess.run(["userdel", name], capture_output=True)
