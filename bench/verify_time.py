"""Benchmark: wall time of verification per candidate, from a job's report.json (issue: verification < 2 s).

The worker measures each candidate's verification with ``time.perf_counter`` (``verify_s``: every
spec and held-out size, every seed and stress variant, both orders, the second run). Usage:
``python3 bench/verify_time.py bench/results/rmsnorm-main-job-2026-11-29.json``.
"""
from __future__ import annotations

import json
import statistics
import sys


def main(path: str) -> int:
    report = json.load(open(path))
    rows = report.get("rows") or report.get("candidates")
    times = []
    for row in rows:
        res = row.get("result", row)
        if res.get("outcome") in ("measured", "rejected") and res.get("verify_s"):
            times.append(res["verify_s"])
    if not times:
        print("no verification times in", path)
        return 1
    times.sort()
    print(f"{len(times)} candidates verified; verify_s median {statistics.median(times):.3f} s, "
          f"p90 {times[int(0.9 * (len(times) - 1))]:.3f} s, max {times[-1]:.3f} s (target < 2 s)")
    return 0 if times[-1] < 2.0 else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
