"""The generator interface: one method, ``propose``, from a context to candidates."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ptxfactory.harness.source import KernelDef
from ptxfactory.protocol import Candidate, KernelSpec


@dataclass(frozen=True)
class GenContext:
    """What a generator may see: the spec (never the held-out sizes), the original source and kernel, and priors.

    ``priors`` maps a parameter signature (e.g. ``"rowwise:threads_per_row=128"``) to a score from the
    lesson store (higher = has won before); generators may use it to order their proposals.
    """

    spec: KernelSpec
    source: str
    kernel: KernelDef
    original: Candidate
    priors: dict[str, float] = field(default_factory=dict)


class Generator(Protocol):
    """Proposes candidates. ``name`` is recorded with every experiment it produces.

    Each candidate's ``params`` are its knob values (JSON scalars), what the lesson store learns from.
    Knobs shared by every generator, so that lessons carry over between kernel classes: ``block``
    (threads per block), ``vec`` (bytes per vector access: 4, 8, 16), ``hint`` (``"ldg"``, ``"stream"``,
    ``"plain"``), ``unroll``, ``math`` (``"fast"``: approximate intrinsics, ``"precise"``). Knobs that
    choose *which function* is computed (``norm``, ``epilogue``) are learnt per kernel class only
    (:data:`ptxfactory.search.priors.FUNCTION_KNOBS`). Families return their tuning space in its
    natural order; the search orders it.
    """

    name: str

    def propose(self, ctx: GenContext) -> list[Candidate]:
        """Candidates derived from ``ctx.original``; an empty list when the generator does not apply."""
        ...
