"""CPU tests of bench/rowwise_sweep.py: the spec it times (the example's, or QuACK's matrix as bench sizes) and its
report on recorded results (the GPU part runs on the GPU machine only)."""
from __future__ import annotations

import re

import pytest
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import rowwise_sweep  # noqa: E402

from ptxfactory.protocol.spec import parse_spec  # noqa: E402


def test_the_spec_is_the_examples_or_its_matrix_version():
    text = (rowwise_sweep.EXAMPLES / "rmsnorm" / "rmsnorm.cu.toml").read_text()
    assert rowwise_sweep._spec_text("rmsnorm", matrix=False) == text
    spec = parse_spec(rowwise_sweep._spec_text("rmsnorm", matrix=True), "rmsnorm.cu.toml").kernels["rmsnorm"]
    assert [(s["M"], s["N"]) for s in spec.bench.sizes] == list(rowwise_sweep.rmsnorm_matrix.MATRIX)


def test_the_report_gives_each_candidate_per_size_and_the_best_per_size():
    doc = {"example": "rmsnorm", "generator": "rowwise", "date": "2026-12-04", "command": "python3 bench/rowwise_sweep.py",
           "sizes": [{"M": 32768, "N": 256}, {"M": 8192, "N": 262144}],
           "rows": [{"description": "a", "outcome": "measured", "registers": 40, "pct": [40.0, 80.0]},
                    {"description": "b stage=smem", "outcome": "measured", "registers": 32, "pct": [60.0, 70.0]},
                    {"description": "c", "outcome": "rejected", "reason": "correctness: y differs"}]}
    md = rowwise_sweep.render(doc)
    assert "| a | 40 | measured | 40 | 80 |" in md and "| b stage=smem | 32 | measured | 60 | 70 |" in md
    assert re.search(r"\| 32768x256 \| 60 \| b stage=smem \|", md) and re.search(r"\| 8192x262144 \| 80 \| a \|", md)
    assert "- c: rejected: correctness: y differs" in md


def test_the_profile_script_reads_sizes_and_says_why_there_are_no_counters(tmp_path, monkeypatch):
    import rowwise_profile

    assert rowwise_profile.parse_size("M=32768,N=65536") == {"M": 32768, "N": 65536}
    for bad in ("M=32768,N", "M:1", "=3", "M=x"):
        with pytest.raises(ValueError):
            rowwise_profile.parse_size(bad)
    monkeypatch.setenv("PTXFACTORY_NCU", "off")
    out = tmp_path / "p.md"
    assert rowwise_profile.main(["--matrix", "--select", "cluster=8 stage", "--size", "M=3,N=65536", "--limit", "1",
                                 "--out", str(out)]) == 0
    text = out.read_text()
    assert "cluster=8 stage=smem at 3x65536" in text and "counters unavailable" in text
    assert re.search(r"dynamic shared memory [1-9]\d* B", text)  # the staged cache's bytes at that row length
    # QuACK's launch too: without ncu its rows say why there are no counters (and the family's rows still follow)
    assert rowwise_profile.main(["--matrix", "--quack", "--select", "cluster=8 stage", "--size", "M=3,N=256", "--limit", "1",
                                 "--out", str(out)]) == 0
    text = out.read_text()
    assert "## QuACK rmsnorm_fwd at 3x256" in text and text.count("counters unavailable") == 2
    assert "cluster=8 stage=smem at 3x256" in text
