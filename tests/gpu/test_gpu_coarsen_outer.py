"""GPU tier: the ``coarsen_outer`` pass (4 or 8 consecutive outer-axis indices a thread of a 2-D/3-D launch) verified
for real, on the 2-D stencil example (stencil5: 16 x 16 blocks, boundary copied) and the 3-D seven-point stencil
trial written one thread per flat point (unflatten's 3-D launch first): every candidate that carries the pass must
pass the verifier (spec and held-out sizes, sizes that end inside a block and inside a thread's rows or planes,
misaligned views, poisoned outputs, canaries) and be measured. Speeds are printed (-s); the benchmarks judge them.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptxfactory.protocol import Measured

from _transform_job import describe_rows, kept_transform, transform_job

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


def _outer(c) -> bool:
    return any(k.startswith("pass:coarsen_outer_") for k in c.params)


@pytest.mark.parametrize("folder, name", [("examples/stencil5", "stencil5"), ("bench/trials/stencil3d7", "stencil3d7")])
def test_coarsen_outer_candidates_verify(folder, name, tmp_path, monkeypatch):
    kept_transform(monkeypatch, _outer)
    src = ROOT / folder
    shutil.copy(src / "ref.py", tmp_path / "ref.py")
    summary = transform_job(tmp_path, name, (src / f"{name}.cu").read_text(), (src / f"{name}.cu.toml").read_text(),
                            max_candidates=8, patience=None, use_lessons=False)
    rows = [r for r in summary.rows if _outer(r.candidate)]
    report = describe_rows(summary)
    print("\n" + report)
    assert len(rows) >= 2, report
    assert all(isinstance(r.result, Measured) for r in rows), report
