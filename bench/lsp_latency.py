"""Benchmark: hover and code-action latency of the daemon while a job keeps its worker busy, and its memory.

Starts ``ptxfactory serve`` (its own socket and stores in a temporary folder), opens
``examples/rmsnorm/rmsnorm.cu`` in two sessions, starts a job from the first, waits until
candidates have results, then sends N ``textDocument/hover`` and N ``textDocument/codeAction``
requests from the second session, one at a time, while the job runs. Reports p50/p90/p99/max of
the round trip as the client sees it (socket, JSON, the handler) and resident memory sampled throughout:
the daemon process alone (VmRSS, VmHWM from /proc) and the daemon with all its children (VmRSS summed
over its process tree: compile workers, GPU worker), each labelled as such in the result. Writes ``lsp-latency-<date>.md`` to ``--out``.

``--backend simulated`` (the default, for machines without a GPU): candidates compile for real
(NVRTC, on the daemon's threads), but "evaluation" is a sleep of ``--delay`` seconds in the
SimulatedDevice; nothing runs on a GPU and nothing is verified. ``--backend gpu`` on a GPU host
measures the real worker.

    python3 bench/lsp_latency.py --out bench/results [--requests 500] [--delay 0.5] [--interval 0.02]
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from ptxfactory.daemon.client import DaemonClient
from ptxfactory.daemon.listener import socket_answers

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rmsnorm"

CAPABILITIES = {  # what the request path depends on: VS Code-like code actions (disabled ones included)
    "textDocument": {
        "hover": {"contentFormat": ["markdown", "plaintext"]},
        "codeAction": {"disabledSupport": True, "dataSupport": True, "isPreferredSupport": True,
                       "codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["refactor", "refactor.rewrite"]}}},
    },
    "workspace": {"workspaceEdit": {"documentChanges": True}},
}


def _vm(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of one process in KiB (empty when it is gone)."""
    out = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (compile workers, the GPU worker, multiprocessing's resource tracker)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def proc_status(pid: int) -> dict[str, int]:
    """Memory in MiB: the daemon's own VmRSS and VmHWM, and ``TreeRSS``, the VmRSS of the daemon plus every
    descendant at this moment (``Children``: how many), which is what the daemon costs the machine."""
    own = _vm(pid)
    kids = descendants(pid)
    tree = own.get("VmRSS", 0) + sum(_vm(c).get("VmRSS", 0) for c in kids)
    return {"VmRSS": own.get("VmRSS", 0) // 1024, "VmHWM": own.get("VmHWM", 0) // 1024, "TreeRSS": tree // 1024,
            "Children": len(kids)}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]



def machine() -> dict[str, str]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = next((int(line.split()[1]) // (1024 * 1024) for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), 0)
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True).stdout.strip()
        commit += " (with uncommitted changes)" if dirty else ""
    except OSError:
        commit = "?"
    return {
        "host": platform.node(), "cpu": f"{cpu}, {os.cpu_count()} logical CPUs", "memory": f"{mem} GiB",
        "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
        "versions": ", ".join(f"{p} {version(p)}" for p in ("ptxfactory", "pygls", "lsprotocol", "uvloop", "aiosqlite")),
        "commit": commit,
        "load average before the run (1, 5, 15 min)": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


async def measure(sock: Path, source: Path, requests: int, pid: int, interval: float) -> dict:
    uri = source.as_uri()
    text = source.read_text()
    lines = text.split("\n")
    header = next(i for i, line in enumerate(lines) if "__global__ void rmsnorm" in line)
    body = next(i for i, line in enumerate(lines) if "float sum = 0.0f;" in line)
    doc = {"textDocument": {"uri": uri, "languageId": "cuda", "version": 1, "text": text}}

    starter = await DaemonClient.connect(sock, capabilities=CAPABILITIES)
    asker = await DaemonClient.connect(sock, capabilities=CAPABILITIES)
    memory: list[dict[str, int]] = [proc_status(pid)]
    try:
        starter.notify("textDocument/didOpen", doc)
        asker.notify("textDocument/didOpen", doc)
        started = await starter.command("ptxfactory.optimise", {"uri": uri, "kernel": "rmsnorm"})
        job_id = started["job_id"]

        async def job() -> dict:
            return next(j for j in (await asker.command("ptxfactory.jobs", {"limit": 3}))["jobs"] if j["job_id"] == job_id)

        deadline = time.monotonic() + 120
        while (await job())["done"] < 3 and time.monotonic() < deadline:  # results exist: code actions do real work
            await asyncio.sleep(0.2)
        before = await job()
        hover_ms, action_ms, actions_seen = [], [], 0
        position = {"line": body, "character": 4}
        for i in range(requests):
            t = time.perf_counter()
            answer = await asker.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": header, "character": 30}})
            hover_ms.append((time.perf_counter() - t) * 1e3)
            assert answer and "registers" in answer["contents"]["value"] or "compiling" in answer["contents"]["value"], answer
            t = time.perf_counter()
            actions = await asker.request("textDocument/codeAction", {
                "textDocument": {"uri": uri}, "range": {"start": position, "end": position}, "context": {"diagnostics": []}})
            action_ms.append((time.perf_counter() - t) * 1e3)
            actions_seen = max(actions_seen, len(actions or []))
            if i % 25 == 0:
                memory.append(proc_status(pid))
            await asyncio.sleep(interval)
        after = await job()
        memory.append(proc_status(pid))
        await starter.command("ptxfactory.cancel", {"job_id": job_id})
        return {"hover": hover_ms, "codeAction": action_ms, "before": before, "after": after, "memory": memory,
                "actions": actions_seen}
    finally:
        await starter.close()
        await asker.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--requests", type=int, default=500, help="hover requests, and as many code-action requests")
    parser.add_argument("--backend", choices=("simulated", "gpu"), default="simulated")
    parser.add_argument("--delay", type=float, default=0.5, help="simulated seconds per evaluation (keeps the job running)")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between one hover + code action pair and the next")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="ptx-bench-"))
    shutil.copy(EXAMPLE / "rmsnorm.cu", work / "rmsnorm.cu")
    shutil.copy(EXAMPLE / "rmsnorm.cu.toml", work / "rmsnorm.cu.toml")
    sock = work / "d.sock"
    env = {**os.environ, "PTXFACTORY_HOME": str(work / "home"), "PTXFACTORY_SIMULATED_DELAY_S": str(args.delay)}
    log = open(work / "daemon.log", "wb")
    daemon = subprocess.Popen([sys.executable, "-m", "ptxfactory.daemon", "serve", "--socket", str(sock), "--backend", args.backend],
                              stdout=log, stderr=log, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not socket_answers(sock):
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the daemon did not start:\n{(work / 'daemon.log').read_text()}")
            time.sleep(0.05)
        idle = proc_status(daemon.pid)
        machine_before = machine()
        result = asyncio.run(measure(sock, work / "rmsnorm.cu", args.requests, daemon.pid, args.interval))
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(20)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()

    rss = max(m["VmRSS"] for m in result["memory"])
    hwm = max(m["VmHWM"] for m in result["memory"])
    tree = max(m["TreeRSS"] for m in result["memory"])
    children = max(m["Children"] for m in result["memory"])
    busy = result["after"]["state"] == "running"
    rows = []
    for name in ("hover", "codeAction"):
        ms = result[name]
        rows.append((name, len(ms), statistics.median(ms), percentile(ms, 90), percentile(ms, 99), max(ms)))
    simulated = args.backend == "simulated"
    where = machine_before
    today = dt.date.today().isoformat()
    lines = [
        f"# LSP latency and daemon memory under load ({today})",
        "",
        ("**Simulated backend: this machine has no GPU.** Candidates were compiled for real (NVRTC, sm_90a, on the "
         f"daemon's threads) while each \"evaluation\" was a {args.delay} s sleep in the SimulatedDevice; nothing ran "
         "on a GPU and nothing was verified." if simulated else "Backend: the GPU worker."),
        "",
        f"- date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        *(f"- {k}: {v}" for k, v in where.items()),
        f"- command: `python3 bench/lsp_latency.py --requests {args.requests} --backend {args.backend} --delay {args.delay} --interval {args.interval}`",
        "",
        "Two sessions on the daemon's unix socket, both with `examples/rmsnorm/rmsnorm.cu` open. The first started a job",
        f"(`ptxfactory.optimise`); once it had results, the second sent {args.requests} hovers (on the kernel's signature)",
        f"and {args.requests} code-action requests (inside the kernel; up to {result['actions']} actions each, the faster",
        f"candidates' edits and the rejected ones), one at a time, a pair every {args.interval * 1000:.0f} ms. Times are round",
        "trips seen by the client. The job's candidates compile (NVRTC) all along, in the compile pool's processes (not counted in the daemon's memory).",
        f"The job was {'still running' if busy else 'NOT running any more'} at the end: candidates "
        f"{result['before']['done']}/{result['before']['total']} -> {result['after']['done']}/{result['after']['total']}.",
        "",
        "| request | n | p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|",
        *(f"| {n} | {c} | {p50:.2f} | {p90:.2f} | {p99:.2f} | {mx:.2f} |" for n, c, p50, p90, p99, mx in rows),
        "",
        f"Daemon resident memory (the daemon process alone): {idle['VmRSS']} MiB idle; with the job running, VmRSS max {rss} MiB, "
        f"peak (VmHWM) {hwm} MiB.",
        "",
        f"The daemon and its children (compile workers, GPU worker, resource tracker; VmRSS summed over the process tree "
        f"at each sample): {idle['TreeRSS']} MiB idle ({idle['Children']} children); with the job running, max {tree} MiB "
        f"({children} children at most). Shared pages are counted once per process, so this is an upper bound.",
        "",
        f"Targets (issue 4): p99 under 50 ms: hover {'met' if rows[0][4] < 50 else 'MISSED'}, code action "
        f"{'met' if rows[1][4] < 50 else 'MISSED'}; resident memory under 300 MB: daemon alone {'met' if hwm * 1.048576 < 300 else 'MISSED'}, "
        f"daemon and children {'met' if tree * 1.048576 < 300 else 'MISSED'}.",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"lsp-latency-{today}.md"
    path.write_text(report)
    print(f"wrote {path}", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if busy else 1


if __name__ == "__main__":
    raise SystemExit(main())
