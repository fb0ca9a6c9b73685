"""Shared test setup: a private ``PTXFACTORY_HOME`` for every test, the GPU tier's skip, the example, a fake generator.

Tests never touch ``~/.local``: the lesson store's default path follows ``PTXFACTORY_HOME``.
Tests marked ``gpu`` are deselected by default (``addopts`` in pyproject.toml); when selected
(``pytest -m gpu``) on a machine where NVML finds no GPU they are skipped, not failed.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptxfactory.protocol import Candidate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rmsnorm" / "rmsnorm.cu"


@pytest.fixture(autouse=True)
def ptxfactory_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``PTXFACTORY_HOME`` (lesson store, caches) per test."""
    home = tmp_path_factory.mktemp("ptxfactory-home")
    monkeypatch.setenv("PTXFACTORY_HOME", str(home))
    return home


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    from ptxfactory.harness.backend import gpu_available

    if gpu_available() is None:
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (NVML finds no driver or device)")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    """``rmsnorm.cu`` and its spec copied into ``tmp_path``; returns the ``.cu`` path (edit freely)."""
    dst = tmp_path / "rmsnorm.cu"
    shutil.copy(EXAMPLE, dst)
    shutil.copy(EXAMPLE.with_name("rmsnorm.cu.toml"), tmp_path / "rmsnorm.cu.toml")
    return dst


class FakeGenerator:
    """Four proposals from the original: a "vectorised" one (it names ``uint4``, which SimulatedDevice rates
    faster), one that does not compile, and two that are the original again (equal key: never evaluated)."""

    name = "fake"

    def propose(self, ctx) -> list[Candidate]:
        src = ctx.original.source

        def variant(source: str, description: str) -> Candidate:
            return ctx.original.model_copy(update={
                "source": source, "generator": self.name, "description": description, "parent": ctx.original.key,
            })

        return [
            # another kernel in the file: other machine code, so not a duplicate of the original's binary
            variant("typedef uint4 vec16_t;  // 16-byte vectors\n" + src + '\nextern "C" __global__ void ptxf_fake_vec() {}\n',
                    "vectorised (pretend)"),
            variant(src.replace("sum += v * v;", "sum += v * v"), "missing semicolon"),
            variant(src, "the original again"),
            variant(src.replace("float eps)", "float eps) /* same key */"), "the original with a comment"),
        ]


class EmptyGenerator:
    name = "empty"

    def propose(self, ctx) -> list[Candidate]:
        return []


@pytest.fixture
def fake_generators(monkeypatch: pytest.MonkeyPatch) -> type[FakeGenerator]:
    """Every generator name loads :class:`FakeGenerator`, except ``tune`` and ``transform`` (nothing to propose).

    Keeps strategy and CLI tests independent of the real generators' output.
    """
    import ptxfactory.search.strategy as strategy

    monkeypatch.setattr(strategy, "load_generator", lambda name: EmptyGenerator() if name in ("tune", "transform") else FakeGenerator())
    return FakeGenerator
