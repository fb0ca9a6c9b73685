"""The suite's failure log: a pytest hook that tests/conftest.py imports (so that tests can import it by name)."""
from __future__ import annotations

import os

import pytest

FAILURE_LOG = "PTXFACTORY_FAILURE_LOG"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``PTXFACTORY_FAILURE_LOG`` set (bench/gpu_tier.sh sets it), each failure's test id and traceback are
    appended to that file the moment the failure is reported, so a run cut off by a device call's time limit still
    says why its tests failed (pytest's own summary comes only at the end). Under xdist the controller writes."""
    path = os.environ.get(FAILURE_LOG)
    if not path or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext[-6000:]}\n\n")
