"""Evaluation results: a discriminated union on ``outcome``, never a magic key."""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class Resources(BaseModel):
    """Per-thread and per-block resources of the compiled kernel (from ptxas / the loaded function)."""

    model_config = ConfigDict(extra="forbid")

    registers: int
    shared_bytes: int = Field(description="static shared memory per block, bytes")
    local_bytes: int = Field(default=0, description="local memory (stack frame) per thread, bytes")
    spill_stores: int = Field(default=0, description="bytes of spill stores per thread")
    spill_loads: int = Field(default=0, description="bytes of spill loads per thread")
    max_threads_per_block: int | None = None

    def summary(self) -> str:
        s = f"{self.registers} regs, {self.shared_bytes} B smem"
        if self.local_bytes or self.spill_stores:
            s += f", {self.local_bytes} B local, {self.spill_stores} B spilled"
        return s


# The impossible-time floor divides a spec's flops by this multiple of the fp32 peak: above every tensor-core
# rate of today's GPUs (an H200's dense fp8 rate is about 30x its fp32 rate), so a kernel that counts its
# tensor-core FLOP is never refused, and one that claims more than any unit can do is.
FLOOR_FLOPS_FACTOR = 32

# The floor is the spec's claim (bytes_moved, flops). Where the original kernel itself runs under it, the claim
# overstates the work, and the floor would refuse every faster correct candidate: it is then not applied at that
# size, and the job warns (a note on every result, a line in the job's warnings).
FLOOR_NOT_APPLIED = "impossible-time floor not applied"


def floor_not_applied(size: dict[str, int], baseline_median_us: float, floor_us: float) -> str:
    """The note (and job warning) for a bench ``size`` where the original ran in ``baseline_median_us`` µs, under the
    spec's ``floor_us`` µs: its bytes_moved (or flops) overstate what the kernel moves, and % of copy with them."""
    return (f"{FLOOR_NOT_APPLIED} at {size}: the original kernel ran in {baseline_median_us:.2f} µs, under the spec's "
            f"{floor_us:.2f} µs floor, so its bytes_moved (or flops) overstate the traffic, and % of copy with them; "
            f"state the bytes this kernel really moves")


# The smallest speedup ever reported as a win: below 1%, run-to-run drift between jobs exceeds the gain.
MIN_GAIN = 1.01


class SizeTiming(BaseModel):
    """Timing of one benchmark size: medians in µs, bandwidth in GB/s (1e9 bytes/s)."""

    model_config = ConfigDict(extra="forbid")

    size: dict[str, int]
    median_us: float
    p20_us: float
    p80_us: float
    baseline_median_us: float
    bytes_moved: int
    gbps: float = Field(description="bytes_moved / median time")
    pct_of_copy: float = Field(description="gbps / measured device-to-device copy bandwidth, percent")
    floor_us: float = Field(description="max(bytes_moved / peak memory bandwidth, flops / (FLOOR_FLOPS_FACTOR x peak FLOP rate))")
    flops: int = Field(default=0, description="the spec's flops at this size (0: not stated)")
    tflops: float = Field(default=0.0, description="flops / median time, 1e12 FLOP/s")
    pct_of_peak_flops: float = Field(default=0.0, description="tflops / the GPU's fp32 peak FLOP rate, percent")

    @property
    def speedup(self) -> float:
        return self.baseline_median_us / self.median_us


class RefError(BaseModel):
    """Error against the spec's Python reference (``check.reference = "python:..."``) at one verified size and
    output: the largest over that size's seeds, of the candidate and of the original kernel on the same inputs."""

    model_config = ConfigDict(extra="forbid")

    size: dict[str, int]
    output: str
    heldout: bool = False
    candidate_max_abs: float = Field(description="max |candidate - reference| over elements where both are finite")
    original_max_abs: float = Field(description="max |original - reference| over elements where both are finite")
    within_tol: bool = Field(description="the candidate was within rtol/atol of the reference at every seed; False: it "
                                         "passed as no less accurate than the original (harness/reference.py: judge)")


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")

    candidate_key: str
    resources: Resources | None = None
    wall_s: float = Field(default=0.0, description="wall time of the whole evaluation in the worker, seconds")
    verify_s: float = Field(default=0.0, description="wall time of verification alone, seconds")
    reference_s: float = Field(default=0.0, description="of wall_s, the seconds spent computing the spec's Python reference "
                                                        "(outputs not cached yet), seconds")
    compiler: Literal["nvrtc", "nvcc", "ptxas", "driver"] = Field(
        default="nvrtc", description="what compiled the candidate: NVRTC, nvcc for a source NVRTC cannot compile (a header it "
                                     "lacks, host code), ptxas for PTX, or the CUDA driver's JIT for PTX where no ptxas was found")


class CompileFailed(_Result):
    """The candidate did not compile (or its launch exceeds device limits before any run)."""

    outcome: Literal["compile_failed"] = "compile_failed"
    log: str


class Rejected(_Result):
    """The candidate ran but failed a check: ``check`` names which (``correctness``, ``input_mutated``,
    ``race``, ``post_timing``, ``impossible_time``, ``launch``, ...), ``reason`` says how, in one line."""

    outcome: Literal["rejected"] = "rejected"
    check: str
    reason: str
    detail: dict = Field(default_factory=dict)


class Crashed(_Result):
    """The candidate crashed the worker (illegal address, trap, segfault); the worker was restarted."""

    outcome: Literal["crashed"] = "crashed"
    reason: str


class TimedOut(_Result):
    """The candidate did not finish within the worker's deadline; the worker was killed and restarted."""

    outcome: Literal["timed_out"] = "timed_out"
    seconds: float


class Measured(_Result):
    """Verified and timed. ``speedup`` is the geometric mean over bench sizes of baseline/candidate median time."""

    outcome: Literal["measured"] = "measured"
    timings: list[SizeTiming]
    speedup: float
    speedup_lo: float | None = Field(default=None, description="lower end of the 95% bootstrap interval of speedup (None: not measured)")
    speedup_hi: float | None = Field(default=None, description="upper end of the 95% bootstrap interval of speedup")
    verified_sizes: list[dict[str, int]] = Field(default_factory=list)
    ref_errors: list[RefError] = Field(default_factory=list, description="errors against the Python reference per verified "
                                       "size and output (empty when the original kernel is the oracle)")
    simulated: bool = Field(default=False, description="true when produced by a SimulatedDevice (tests), not a GPU")
    notes: list[str] = Field(default_factory=list, description="verification checks skipped for this job and why (e.g. "
                             "misaligned views, when the original kernel itself fails on them)")

    def significant(self, noise_hi: float | None = None) -> bool:
        """Whether this speedup is a win, not noise: its 95% interval lies above 1.0, it is at least
        :data:`MIN_GAIN`, and it clears ``noise_hi``, the upper end of the interval of the original timed against itself (A/A) in the same job.
        A result without an interval is never significant."""
        if self.speedup_lo is None:
            return False
        return self.speedup_lo > 1.0 and self.speedup >= MIN_GAIN and (noise_hi is None or self.speedup > noise_hi)

    @property
    def geomean_us(self) -> float:
        import math

        return math.exp(sum(math.log(t.median_us) for t in self.timings) / len(self.timings))


class NotRun(_Result):
    """Compiled (resources known) but not run: no GPU on this machine, or the job stopped first."""

    outcome: Literal["not_run"] = "not_run"
    reason: str


EvalResult = Annotated[Union[Measured, Rejected, CompileFailed, Crashed, TimedOut, NotRun], Field(discriminator="outcome")]


class GpuFacts(BaseModel):
    """What the worker measured and read about its GPU (NVML + a device-to-device copy)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arch: str
    sm_count: int
    l2_bytes: int
    copy_gbps: float = Field(description="measured device-to-device copy, bytes read + written per second / 1e9")
    peak_gbps: float = Field(description="theoretical memory bandwidth from NVML (bus width x memory clock x 2)")
    peak_tflops: float = Field(default=0.0, description="fp32 FMA peak: SMs x fp32 lanes per SM x 2 x max SM clock, 1e12 FLOP/s (0: unknown)")
    driver: str = ""
    clocks_mhz: dict[str, int] = Field(default_factory=dict)
    temperature_c: int | None = None
    simulated: bool = False
