"""Generators by name, imported lazily (a missing optional dependency names the generator)."""
from __future__ import annotations

import importlib

from ..base import Generator

REGISTRY = {
    "tune": "ptxfactory.search.generators.tune:TuneGenerator",
    "rowwise": "ptxfactory.search.generators.rowwise:RowwiseNormFamily",
    "softmax": "ptxfactory.search.generators.softmax:SoftmaxFamily",
    "rowreduce": "ptxfactory.search.generators.rowreduce:RowReduceFamily",
    "elementwise": "ptxfactory.search.generators.elementwise:ElementwiseFamily",
    "transpose": "ptxfactory.search.generators.transpose:TransposeFamily",
    "attention": "ptxfactory.search.generators.attention:AttentionFamily",
    "transform": "ptxfactory.search.generators.transform:TransformGenerator",
    "agent": "ptxfactory.search.agents.generator:AgentGenerator",
    "ptx_transform": "ptxfactory.search.generators.ptx_transform:PtxTransformGenerator",
    "ptx_tune": "ptxfactory.search.generators.ptx_tune:PtxTuneGenerator",
}


def load(name: str) -> Generator:
    """Instantiate the generator registered as ``name``. Raises ``KeyError`` listing the known names."""
    if name not in REGISTRY:
        raise KeyError(f"unknown generator {name!r} (known: {', '.join(REGISTRY)})")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)()
