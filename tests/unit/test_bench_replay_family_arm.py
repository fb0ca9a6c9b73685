"""CPU test of bench/replay_family_arm.py on the H200 job recorded in bench/results/h200-2026-12-04-e (call 5): today's
rowwise proposals picked by the search and answered from the recording by description."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import replay_family_arm  # noqa: E402

from ptxfactory.protocol.job import JobSummary  # noqa: E402

RECORDED = Path(__file__).resolve().parents[2] / "bench" / "results" / "h200-2026-12-04-e" / "call5-job-summary.json"


def test_a_recorded_job_replays_through_todays_search():
    """Most of today's proposals are in the recording (the descriptions name the configurations); the replay's best %
    of copy per bench size never falls as picks go on and reaches the recording's own best at the long rows (the cluster
    configurations lead the covering order); the marked configurations are found where they were picked."""
    summary = JobSummary.model_validate(json.loads(RECORDED.read_text()))
    queue = replay_family_arm.proposals(summary, "rmsnorm", "rowwise", matrix=True)
    recorded = {r.candidate.description for r in summary.rows}
    assert sum(c.description in recorded for c in queue) >= len(queue) // 3
    lines, found = replay_family_arm.replay(summary, queue, "rowwise", picks=30, every=10, marks=["cluster=8$", "nothing"])
    sizes, rows = lines[0].split()[2:], [[float(v) for v in line.split(":")[1].split()] for line in lines[1:]]
    assert len(sizes) == 11 and len(rows) == 3 and all(len(r) == 11 for r in rows)
    assert all(a <= b for r0, r1 in zip(rows, rows[1:]) for a, b in zip(r0, r1))
    recorded_best = max(t.pct_of_copy for r in summary.rows if r.candidate.generator == "rowwise"
                        for t in getattr(r.result, "timings", []) if t.size == {"M": 8192, "N": 262144})
    assert rows[0][-1] == round(recorded_best, 1)  # 8192 x 262144 after 10 picks (printed to 0.1)
    assert found[0].startswith("'cluster=8$': picks [0") and found[1] == "'nothing': picks []"
