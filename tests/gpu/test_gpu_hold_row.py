"""GPU tier: the ``hold_row`` pass (a row read by several lane-strided loops is read once, into registers) verified
for real, on examples/standardize_rows (mean, variance, write: the row read three times).

A job of the ``transform`` generator alone, judged against the example's Python reference (ref.py): every check and
held-out size, so rows short enough for the held path (at most H elements per lane) and rows too long for it (the
original loops run) both pass through the verifier. Every candidate carrying the pass must verify, and at least one
must: among them the chain blockrow -> hold_row -> vector_loops when the job gets that far.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ptxfactory.protocol import Measured

from _transform_job import describe_rows, transform_job

pytestmark = pytest.mark.gpu

EXAMPLE = Path(__file__).parents[2] / "examples" / "standardize_rows"


@pytest.mark.timeout(600)  # 40 candidates at rows of 10^5: past the default 300 s when the GPU tier runs 8 tests at once
def test_standardize_rows_hold_row_candidates_verify(tmp_path):
    (tmp_path / "ref.py").write_text((EXAMPLE / "ref.py").read_text())  # the spec's reference = "python:ref.py:..."
    summary = transform_job(tmp_path, "standardize_rows", (EXAMPLE / "standardize_rows.cu").read_text(),
                            (EXAMPLE / "standardize_rows.cu.toml").read_text(), max_candidates=40, patience=None)
    print(describe_rows(summary))  # for the closing note (pytest -s): the speedups of the held candidates
    rows = [r for r in summary.rows if any(k.startswith("pass:hold_row") for k in r.candidate.params)]
    assert rows, describe_rows(summary)
    assert all(isinstance(r.result, Measured) for r in rows), describe_rows(summary)
    assert all(r.candidate.params["held"] in (2, 4, 8, 16, 32) for r in rows)
