"""Generators by name, imported lazily (a missing optional dependency names the generator)."""
from __future__ import annotations

import importlib

from ..base import Generator

REGISTRY = {
    "tune": "ptxfactory.search.generators.tune:TuneGenerator",
    "rowwise": "ptxfactory.search.generators.rowwise:RowwiseNormFamily",
}


def load(name: str) -> Generator:
    """Instantiate the generator registered as ``name``. Raises ``KeyError`` listing the known names."""
    if name not in REGISTRY:
        raise KeyError(f"unknown generator {name!r} (known: {', '.join(REGISTRY)})")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)()
