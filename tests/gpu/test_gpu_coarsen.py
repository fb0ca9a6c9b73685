"""GPU tier: the ``coarsen`` pass (K elements per thread, an unchecked unrolled loop for full blocks) verified for real.

The swiglu example (bf16, one thread per element, index split by a division and a modulo) through a job of the
``transform`` generator only: every candidate that carries coarsen must pass the verifier (spec and held-out sizes,
sizes that end inside a block, misaligned views, poisoned outputs, canaries), and at least one must be measured.
The speed of each is printed (run with -s); speed is judged by the benchmarks, not here.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptxfactory.protocol import Measured

from _transform_job import describe_rows, transform_job

pytestmark = pytest.mark.gpu

SWIGLU = Path(__file__).parents[2] / "examples" / "swiglu"


def test_coarsened_swiglu_candidates_verify(tmp_path):
    shutil.copy(SWIGLU / "ref.py", tmp_path / "ref.py")
    summary = transform_job(tmp_path, "swiglu", (SWIGLU / "swiglu.cu").read_text(), (SWIGLU / "swiglu.cu.toml").read_text(),
                            max_candidates=10, use_lessons=False)
    rows = [r for r in summary.rows if any(k.startswith("pass:coarsen") for k in r.candidate.params)]
    print("\n" + describe_rows(summary))
    assert rows, describe_rows(summary)
    bad = [r for r in rows if r.result.outcome not in ("measured",)]
    assert not bad, describe_rows(summary)
    assert all(isinstance(r.result, Measured) for r in rows)
