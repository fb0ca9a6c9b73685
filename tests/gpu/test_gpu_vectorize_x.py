"""GPU tier: the ``vectorize_x`` pass (VEC consecutive x a thread, 16-byte accesses at ``base + x``) verified for real,
on the swiglu example (bf16; the gate and up halves of one [M, 2H] row, read after unflatten as two vectors) and on
the bias_gelu example (x and y at the flat index, the bias ``b[col]`` a scalar load of each element): every candidate that carries the pass must pass the verifier (spec and held-out sizes, rows that
are not multiples of VEC, misaligned views, poisoned outputs, canaries) and be measured. Speeds are printed (-s).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptxfactory.protocol import Measured

from _transform_job import describe_rows, kept_transform, transform_job

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


def _vecx(c) -> bool:
    return "pass:vectorize_x" in c.params


@pytest.mark.parametrize("name", ["swiglu", "bias_gelu"])
def test_vectorize_x_candidates_verify(name, tmp_path, monkeypatch):
    kept_transform(monkeypatch, _vecx)
    src = ROOT / "examples" / name
    if (src / "ref.py").exists():  # swiglu's spec names a Python reference; bias_gelu's oracle is the kernel
        shutil.copy(src / "ref.py", tmp_path / "ref.py")
    summary = transform_job(tmp_path, name, (src / f"{name}.cu").read_text(), (src / f"{name}.cu.toml").read_text(),
                            max_candidates=8, patience=None, use_lessons=False)
    rows = [r for r in summary.rows if _vecx(r.candidate)]
    report = describe_rows(summary)
    print("\n" + report)
    assert len(rows) >= 2, report
    assert all(isinstance(r.result, Measured) for r in rows), report
