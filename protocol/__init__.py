"""Every shape that crosses a boundary: kernel spec, candidate, evaluation result, job, lesson.

This package imports nothing else of ptxfactory's, so editors, workers and the daemon can share it.
"""
from .candidate import Candidate, LaunchConfig
from .job import PASSES_SILENT, CandidateRow, JobSummary
from .expr import ExprError, evaluate, symbols_in, to_c
from .result import (
    CompileFailed,
    Crashed,
    EvalResult,
    GpuFacts,
    Measured,
    NotRun,
    RefError,
    Rejected,
    Resources,
    SizeTiming,
    TimedOut,
)
from .spec import (
    ArgSpec,
    BenchSpec,
    CheckSpec,
    KernelSpec,
    LaunchSpec,
    SpecError,
    SpecFile,
    TuneSpec,
    load_spec,
    parse_spec,
    spec_path_for,
)

__all__ = [name for name in dir() if not name.startswith("_")]
