"""harness/ncu.py on the CPU: ncu's ``--csv --page raw`` output (a hand-written recording in ``fixtures/``, in the
format ncu documents: a header row, a units row, one row per launch, its ``==PROF==`` lines around them), the refusal
of the counters (``ERR_NVGPUCTRPERM``), and stand-in ``ncu`` scripts: one printing the recording, one failing, one
too slow, and none at all."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ptxfactory.harness import ncu
from ptxfactory.protocol import load_spec

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RAW = (FIXTURES / "ncu_raw_rmsnorm.csv").read_text()
REFUSED = (FIXTURES / "ncu_refused.txt").read_text()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rmsnorm" / "rmsnorm.cu.toml"


def _spec():
    return load_spec(EXAMPLE).kernels["rmsnorm"]


def _script(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "ncu"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def test_the_raw_page_is_read_by_column_with_its_units():
    [launch] = ncu.parse_raw_csv(RAW)
    assert launch["Kernel Name"] == ("rmsnorm", "")
    assert launch["dram__throughput.avg.pct_of_peak_sustained_elapsed"] == ("61.84", "%")
    assert launch["gpu__time_duration.sum"] == ("41,312", "nsecond")
    assert ncu.parse_raw_csv("==PROF== Connected\nno csv here\n") == []


def test_counters_from_a_recording():
    c = ncu.read_output(RAW, "rmsnorm")
    assert c.ok and c.problem is None
    assert c.get("DRAM throughput") == pytest.approx(61.84)
    assert c.get("achieved occupancy") == pytest.approx(86.71)
    assert c.get("duration") == pytest.approx(41312.0)  # thousands separators read
    assert c.stalls() == [("long_scoreboard", 24.62), ("lg_throttle", 3.87), ("wait", 2.14)]  # "selected" is no stall
    lines = c.lines()
    assert "DRAM throughput: 61.8% of peak" in lines and "duration: 41.31 us" in lines
    assert "achieved occupancy: 86.7% of peak" in lines and "L2 hit rate: 50.1%" in lines
    assert lines[-1] == "top warp stalls (cycles per issued instruction): long_scoreboard 24.62, lg_throttle 3.87, wait 2.14"
    assert len(lines) == len(ncu.METRICS) + 1


def test_refused_counters_are_a_reason():
    c = ncu.read_output(REFUSED, "rmsnorm")
    assert not c.ok and "ERR_NVGPUCTRPERM" in c.problem and "admin" in c.problem and c.lasting
    assert c.lines() == [f"counters unavailable: {c.problem}"]


def test_no_launch_profiled_is_a_reason():
    c = ncu.read_output("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n", "rmsnorm")
    assert not c.ok and c.problem == "No kernels were profiled."


def test_missing_or_turned_off_ncu(monkeypatch):
    import ptxfactory.harness.cuda_paths as cuda_paths

    monkeypatch.setattr(cuda_paths, "tool_path", lambda name: None)
    assert ncu.find_ncu({}) is None
    assert "not installed" in ncu.not_found_reason({})
    assert ncu.find_ncu({"PTXFACTORY_NCU": "off"}) is None
    assert ncu.not_found_reason({"PTXFACTORY_NCU": "off"}) == "Nsight Compute is turned off (PTXFACTORY_NCU=off)"
    c = ncu.profile_launch(None, _spec(), b"\x7fELF", "rmsnorm", {}, {"M": 1, "N": 1}, env={})
    assert not c.ok and "not installed" in c.problem and c.lasting


def test_a_stand_in_ncu_is_given_one_launch_of_the_kernel(tmp_path):
    seen = tmp_path / "args"
    exe = _script(tmp_path, f"echo \"$@\" > {seen}\ncat {FIXTURES / 'ncu_raw_rmsnorm.csv'}\n")
    spec = _spec()
    size = ncu.profile_size(spec)
    c = ncu.profile_launch(exe, spec, b"\x7fELF fake", "rmsnorm", {"grid": ["M"], "block": [256]}, size)
    assert c.ok and c.get("SM throughput") == pytest.approx(18.45)
    args = seen.read_text().split()
    assert args[:4] == ["--csv", "--page", "raw", "--print-units"]
    assert "--clock-control" in args and args[args.index("--clock-control") + 1] == "none"
    assert args[args.index("--kernel-name") + 1] == "rmsnorm" and args[args.index("--launch-count") + 1] == "1"
    assert args[-3:-1] == ["-m", "ptxfactory.harness.sanitize_run"] and args[-1].endswith("job.json")
    assert any(m.startswith("regex:^smsp__average_warps_issue_stalled_") for m in args[args.index("--metrics") + 1].split(","))


def test_the_profiled_size_is_the_largest_timed_one():
    spec = _spec()
    size = ncu.profile_size(spec)
    assert size in spec.bench.sizes
    weight = lambda s: sum(a.numel(s) for a in spec.args if a.is_buffer)  # noqa: E731
    assert all(weight(size) >= weight(s) for s in spec.bench.sizes)


def test_a_failing_ncu_says_why(tmp_path):
    exe = _script(tmp_path, "echo '==ERROR== Failed to prepare kernel for profiling' >&2\nexit 1\n")
    c = ncu.profile_launch(exe, _spec(), b"x", "rmsnorm", {}, {"M": 1, "N": 1})
    assert not c.ok and c.problem == "Failed to prepare kernel for profiling (ncu exit code 1)"


def test_a_slow_ncu_is_stopped(tmp_path):
    exe = _script(tmp_path, "sleep 30\n")
    c = ncu.profile_launch(exe, _spec(), b"x", "rmsnorm", {}, {"M": 1, "N": 1}, timeout_s=0.5)
    assert not c.ok and c.problem == "ncu took more than 0.5 s" and not c.lasting


def test_an_ncu_that_knows_no_stall_metric_is_asked_again_without(tmp_path):
    calls = tmp_path / "calls"
    exe = _script(tmp_path, f"echo x >> {calls}\ncase \"$*\" in *regex:*) echo '==ERROR== Failed to find metric regex:^smsp__average_warps' >&2; exit 1;; esac\n"
                            f"cat {FIXTURES / 'ncu_raw_rmsnorm.csv'}\n")
    c = ncu.profile_launch(exe, _spec(), b"x", "rmsnorm", {}, {"M": 1, "N": 1})
    assert c.ok and c.get("DRAM throughput") == pytest.approx(61.84)
    assert len(calls.read_text().split()) == 2
