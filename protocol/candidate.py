"""A candidate: a complete translation unit that defines the kernel, with its launch and compile options."""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class LaunchConfig(BaseModel):
    """Launch configuration as expressions over the spec's size symbols (grid/block 1-3 entries, bytes of dynamic shared memory)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    grid: list[str | int]
    block: list[str | int]
    shared_mem: str | int = 0

    def describe(self) -> str:
        """Human-readable form, e.g. ``grid=(cdiv(M, 4),) block=(128,) smem=0``."""
        g = ", ".join(map(str, self.grid))
        b = ", ".join(map(str, self.block))
        return f"grid=({g}) block=({b}) smem={self.shared_mem}"


class Candidate(BaseModel):
    """One implementation of the kernel to be compiled, verified and timed.

    ``source`` is the whole translation unit that is compiled; ``kernel_text`` is the text that
    replaces the original kernel's definition in the user's file (the code action's edit).
    ``template_args``: for a kernel template, the instantiation compiled and launched (``k<64, 4>``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kernel_name: str
    source: str
    kernel_text: str
    launch: LaunchConfig
    options: list[str] = Field(default_factory=list)
    generator: str = "original"
    description: str = "original kernel"
    params: dict[str, Any] = Field(default_factory=dict)
    parent: str | None = None
    template_args: list[int | str] = Field(default_factory=list)

    @property
    def name_expression(self) -> str:
        """The kernel as NVRTC names it: ``rowsum``, or ``rowsum<64, 4>`` for a template instantiation."""
        if not self.template_args:
            return self.kernel_name
        return f"{self.kernel_name}<{', '.join(map(str, self.template_args))}>"

    @property
    def key(self) -> str:
        """Content hash (16 hex digits) over normalised source, options and launch: equal keys are the same experiment."""
        normalised = re.sub(r"//[^\n]*|/\*.*?\*/", "", self.source, flags=re.S)
        normalised = re.sub(r"\s+", " ", normalised).strip()
        fields = {"src": normalised, "opt": sorted(self.options), "launch": self.launch.model_dump(), "name": self.kernel_name}
        if self.template_args:  # absent otherwise, so that every non-template candidate keeps its key
            fields["targs"] = [str(a) for a in self.template_args]
        blob = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
