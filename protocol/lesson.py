"""A lesson: what the experiments of past jobs say about one knob on one kernel class and arch."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Lesson(BaseModel):
    """Evidence for ``knob`` (``"generator:param=value"``, e.g. ``"rowwise:vecs=4"``) on ``kernel_class`` and ``arch``.

    ``tried`` experiments used the knob on ``kernels`` distinct kernels; ``verified`` passed every
    check, ``faster`` of those beat the original; ``median_speedup`` is over the verified ones
    (None when none was); ``broke`` did not compile, failed verification, crashed or hung, most often on ``top_failure``.
    ``score`` is the prior a generator sees: mean log speedup, a failure counting as log(0.5).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kernel_class: str
    arch: str
    knob: str
    tried: int
    kernels: int
    verified: int
    faster: int
    broke: int
    median_speedup: float | None = None
    top_failure: str | None = None
    score: float = Field(description="mean log(speedup), failures as log(0.5)")

    def summary(self) -> str:
        """One line, e.g. ``on sm_90a rowwise_norm, rowwise:vecs=4: median 2.7x over 3 kernels (5 tried, 0 broke)``."""
        speed = f"median {self.median_speedup:.2f}x" if self.median_speedup else "never verified"
        broke = f", {self.broke} broke" + (f" (mostly {self.top_failure})" if self.top_failure else "") if self.broke else ""
        return f"on {self.arch} {self.kernel_class}, {self.knob}: {speed} over {self.kernels} kernel(s) ({self.tried} tried{broke})"
