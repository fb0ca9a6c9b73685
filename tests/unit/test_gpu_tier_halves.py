"""``bench/gpu_tier.sh`` splits the GPU tier into two device calls: every GPU test file is in exactly one half."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_gpu_test_file_is_in_exactly_one_half():
    listed = subprocess.run(["bash", str(ROOT / "bench" / "gpu_tier.sh"), "list"], capture_output=True, text=True,
                            cwd=ROOT, timeout=30).stdout.split()
    assert len(listed) == len(set(listed)), "a file in both halves"
    files = {str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "gpu").glob("test_*.py")}
    covered = {f for f in listed if f.endswith(".py")}
    assert files == covered, (files - covered, covered - files)
    assert "tests/redteam" in listed and all((ROOT / f).exists() for f in listed)
