"""Benchmark (no GPU): a family's arm of a recorded job replayed through today's search, kernel_tuner style.

A job summary recorded on a GPU (``report.json`` / ``job-summary.json``) holds one result per candidate. This replays
only the arm of one family (``--generator``, default ``rowwise``): today's proposals for the same spec and GPU are
queued in a fresh ``_Search`` (the strategy's own picking: the kernel regression, the leader's neighbour step), each
pick answered with the recorded result of the candidate with the same description (the keys change whenever the
template's text does; the descriptions name the configuration), a proposal the recording never evaluated with a
``Rejected("unrecorded")`` (which counts against the search that picked it, as it would have cost a GPU evaluation).
It prints, after each ``--every`` picks, the best % of copy reached at each bench size, and where the proposals
matching each ``--mark`` pattern were picked; with ``--compare`` the same with the neighbour step off
(``NEIGHBOUR_MISMATCHES = -1``). What the replay cannot say: the result of what the recording lacks, and the other
arms (transform, tune) that share the job's time.

Usage::

    python3 bench/replay_family_arm.py bench/results/h200-2026-12-04-e/call5-job-summary.json --example rmsnorm \\
        --matrix --picks 40 --compare --mark 'occ=full' --mark 'vec16x2 .* wpre'
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rowwise_sweep  # noqa: E402  (the example's spec, as the matrix job's; a generator's proposals)

from ptxfactory.protocol import Candidate, CandidateRow, Measured, Rejected  # noqa: E402
from ptxfactory.protocol.job import JobSummary  # noqa: E402
from ptxfactory.protocol.spec import parse_spec  # noqa: E402
from ptxfactory.search import strategy  # noqa: E402


class _Only:
    """The bandit of a one-arm replay: always the replayed generator."""

    def __init__(self, name: str):
        self.name = name

    def choose(self, live) -> str:
        return self.name


def proposals(summary: JobSummary, example: str, generator: str, matrix: bool) -> list[Candidate]:
    """Today's proposals of ``generator`` for ``example``'s kernel, its bench sizes QuACK's matrix with ``matrix``, with
    the recorded job's GPU facts (what a job on that GPU proposes)."""
    spec = parse_spec(rowwise_sweep._spec_text(example, matrix), f"{example}.cu.toml").kernels[example]
    source = (rowwise_sweep.EXAMPLES / example / f"{example}.cu").read_text()
    return rowwise_sweep.proposals(spec, source, generator, ".", 1 << 30, facts=summary.gpu)[1]


def replay(summary: JobSummary, queue: list[Candidate], generator: str, picks: int, every: int,
           marks: list[str]) -> tuple[list[str], list[str]]:
    """Picks ``queue`` through a fresh search, each answered from ``summary`` by description. Returns the progress lines
    (best % of copy per bench size after every ``every`` picks) and, per mark, the picks that matched it."""
    recorded = {r.candidate.description: r.result for r in summary.rows if r.candidate.generator == generator}
    original = summary.row(summary.baseline_key).candidate
    search = strategy._Search(spec=None, original=original, gens={generator: None}, chooser=_Only(generator),
                              max_candidates=picks)
    search.extend(generator, queue)
    best: dict[tuple, float] = {}
    order = next(([tuple(sorted(t.size.items())) for t in r.timings] for r in recorded.values() if isinstance(r, Measured)), [])
    lines = ["bench sizes:     " + " ".join("x".join(str(v) for _, v in k) for k in order)]
    picked = []
    for i in range(picks):
        cand = search.next()
        if cand is None:
            break
        result = recorded.get(cand.description)
        result = (Rejected(candidate_key=cand.key, check="unrecorded", reason="not evaluated in the recording")
                  if result is None else result.model_copy(update={"candidate_key": cand.key}))
        search.observe(CandidateRow(candidate=cand, result=result))
        picked.append(cand.description)
        if isinstance(result, Measured):
            for t in result.timings:
                key = tuple(sorted(t.size.items()))
                best[key] = max(best.get(key, 0.0), t.pct_of_copy)
        if (i + 1) % every == 0:
            lines.append(f"after {i + 1:3d} picks: " + " ".join(f"{best[k]:5.1f}" if k in best else "    -" for k in order))
    found = [f"{m!r}: picks {[i for i, d in enumerate(picked) if re.search(m, d)]}" for m in marks]
    return lines, found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("summary", type=Path, help="a recorded job summary (report.json, job-summary.json)")
    ap.add_argument("--example", default="rmsnorm")
    ap.add_argument("--generator", default="rowwise")
    ap.add_argument("--matrix", action="store_true", help="bench sizes: QuACK's RMSNorm matrix (as the recording's job)")
    ap.add_argument("--picks", type=int, default=40)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--mark", action="append", default=[], help="regex over descriptions: where those were picked")
    ap.add_argument("--compare", action="store_true", help="also with the leader's neighbour step off")
    args = ap.parse_args()
    summary = JobSummary.model_validate(json.loads(args.summary.read_text()))
    queue = proposals(summary, args.example, args.generator, args.matrix)
    recorded = {r.candidate.description for r in summary.rows}
    print(f"{len(queue)} proposals today, {sum(c.description in recorded for c in queue)} of them in the recording")
    runs = [("today", strategy.NEIGHBOUR_MISMATCHES)] + ([("no neighbour step", -1)] if args.compare else [])
    for label, nm in runs:
        strategy.NEIGHBOUR_MISMATCHES = nm
        lines, found = replay(summary, list(queue), args.generator, args.picks, args.every, args.mark)
        print(f"\n{label} (best % of copy per bench size so far):")
        print("\n".join(lines + found))


if __name__ == "__main__":
    main()
