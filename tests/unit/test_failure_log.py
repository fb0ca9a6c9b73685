"""The suite's failure log (tests/_failure_log.py, hooked in by tests/conftest.py): with PTXFACTORY_FAILURE_LOG set, a failed report's id and traceback
reach the file at once; passes, and reports seen in an xdist worker, write nothing."""
from __future__ import annotations

import pytest

import _failure_log as conftest


def _report(outcome: str) -> pytest.TestReport:
    return pytest.TestReport("tests/x.py::test_y", ("tests/x.py", 1, "test_y"), {}, outcome,
                             "AssertionError: got 1.00206, expected 1.0016" if outcome == "failed" else None, "call")


def test_a_failure_is_written_with_its_reason(tmp_path, monkeypatch):
    log = tmp_path / "failures.txt"
    monkeypatch.setenv(conftest.FAILURE_LOG, str(log))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    conftest.pytest_runtest_logreport(_report("passed"))
    assert not log.exists()
    conftest.pytest_runtest_logreport(_report("failed"))
    text = log.read_text()
    assert "tests/x.py::test_y (call)" in text and "expected 1.0016" in text


def test_a_worker_leaves_it_to_the_controller(tmp_path, monkeypatch):
    log = tmp_path / "failures.txt"
    monkeypatch.setenv(conftest.FAILURE_LOG, str(log))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    conftest.pytest_runtest_logreport(_report("failed"))
    assert not log.exists()
