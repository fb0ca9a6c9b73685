"""Diagnostic: where the daemon's resident memory goes while a job runs (top mappings by RSS).

Starts ``ptxfactory serve --backend BACKEND`` in a temporary home, submits the rmsnorm example, and
after ``--after`` seconds prints VmRSS and the largest mappings from /proc/PID/smaps (file-backed
libraries vs anonymous heap), then stops the daemon.

    python3 bench/daemon_memory.py [--backend gpu] [--after 20]
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def smaps_top(pid: int, n: int = 15) -> list[tuple[str, int]]:
    """(mapping name, RSS KiB) summed per name, largest first."""
    rss: Counter[str] = Counter()
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
            name = parts[5] if len(parts) > 5 else "[anon]"
        elif parts and parts[0] == "Rss:":
            rss[name] += int(parts[1])
    return rss.most_common(n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="simulated")
    parser.add_argument("--after", type=float, default=20.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ptxf-mem-"))
    shutil.copytree(ROOT / "examples" / "rmsnorm", work / "src")
    env = {**os.environ, "PTXFACTORY_HOME": str(work / "home")}
    sock = work / "d.sock"
    daemon = subprocess.Popen(["ptxfactory", "serve", "--socket", str(sock), "--backend", args.backend], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            if sock.exists():
                break
            time.sleep(0.1)
        subprocess.run(["ptxfactory", "submit", str(work / "src" / "rmsnorm.cu"), "-k", "rmsnorm", "--socket", str(sock)],
                       env=env, check=True)
        time.sleep(args.after)
        status = Path(f"/proc/{daemon.pid}/status").read_text()
        print(next(line for line in status.splitlines() if line.startswith("VmRSS")))
        print("threads:", next(line for line in status.splitlines() if line.startswith("Threads")))
        for mapping, kib in smaps_top(daemon.pid):
            print(f"{kib / 1024:8.1f} MiB  {mapping}")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
