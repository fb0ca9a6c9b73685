"""A Python function as the oracle: ``[kernel.NAME.check] reference = "python:ref.py:rowsum"``.

NumPy only (no CuPy, no GPU): the job validates the reference on the CPU before any GPU work, and
the GPU worker asks the same child process for the reference outputs of the inputs it generated.

**Where it runs.** The reference is user code. It never runs in the daemon or in the GPU worker:
:class:`ReferenceProcess` starts a child Python process (``cwd`` = the spec's folder, stdout sent to
stderr) that imports the function once and answers one call at a time over a pipe; a call that takes
longer than ``timeout_s`` (30 s) gets the child killed. The child dies with its parent (Linux
``PR_SET_PDEATHSIG``), so a hanging reference never outlives a killed worker.

**Calling convention** (:func:`call_reference`), for a spec whose args are ``x (in), w (in), y (out),
M, N, eps (scalars)`` at sizes ``{M, N}``::

    def rmsnorm(x, w, y, *, M, N, eps): ...     # returns y (or a tuple / dict of outputs), or fills y and returns None

- Positional: every buffer argument (``in``, ``out`` and ``inout``), in the spec's argument order, as a
  C-contiguous NumPy array of the buffer's shape. Float inputs hold exactly the values the kernel gets
  (bf16/f16 widened exactly) in ``float64`` (``check.reference_dtype = "f32"``: ``float32``; an ``f64``
  buffer is always ``float64``); integer inputs are arrays of their own dtype (``int32``, ...), exact.
  ``out`` arrays arrive pre-allocated (float: NaN-filled, integer: zeros); ``inout`` arrays hold the input.
  Every call gets fresh arrays: the function may overwrite them.
- Keywords: every size symbol (``int``) and every scalar argument by its name (the value the kernel
  gets, as a Python ``float``/``int``; a scalar named like a symbol wins). Only the names the function
  accepts are passed, unless it takes ``**kwargs``.
- Result: either the outputs, returned: one array when the kernel has one ``out``/``inout`` buffer, else
  a tuple/list in argument order or a dict by name; or ``None``, having filled the ``out``/``inout``
  arrays in place. Each output must have the buffer's exact shape and a numeric dtype (integers for an
  integer output). A float output returned as ``None`` and still all NaN is an error (never filled).

**Acceptance** (:func:`judge`, per output, size and seed): the candidate passes when every element is
within ``atol + rtol * |ref|`` of the reference (NaN and inf only where the reference has the same),
**or** when it is no less accurate than the original kernel on the same inputs: no element is
NaN/inf/never-written where the reference is finite unless the original's is too, and its max
``|err|`` (over elements where candidate and reference are finite) is at most
:data:`ACCURACY_FACTOR` x the original's plus :data:`ULP_SLACK` ulp of the output dtype at the largest
``|ref|``. A more accurate candidate is never rejected for disagreeing with a less accurate original.

A reference that cannot be loaded, raises, returns the wrong outputs (count, shapes, dtypes) or is
slow raises :class:`ReferenceFailed`, a :class:`~ptxfactory.protocol.SpecError` naming the spec's
file, line and ``kernel.NAME.check.reference``: the job fails, nothing is judged against it.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from ptxfactory.protocol import KernelSpec, RefError, SpecError
from ptxfactory.protocol.expr import evaluate
from ptxfactory.protocol.spec import _locate, parse_reference

REFERENCE_TIMEOUT_S = 30.0  # the longest one call of the reference may take, at any size
ACCURACY_FACTOR = 2.0  # "no less accurate": max |err| at most this x the original's ...
ULP_SLACK = 4  # ... plus this many ulp of the output dtype at the largest |reference| value

STORAGE = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32, "f64": np.float64,
           "i8": np.int8, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u32": np.uint32, "u64": np.uint64}
FLOATS = ("bf16", "f16", "f32", "f64")


class ReferenceFailed(SpecError):
    """The spec's Python reference cannot be used: it cannot be loaded, raised, returned the wrong outputs or
    was too slow (``timed_out``). ``str()`` reads ``SPEC:LINE: kernel.NAME.check.reference: message``."""

    timed_out = False


class ReferenceProblem(Exception):
    """What went wrong in one load or call, without the spec's location (a verb phrase: ``raised ...``)."""


class PythonReference(BaseModel):
    """A spec's ``python:`` reference, resolved at job start (plain data: it travels in the plan to the worker).

    ``file`` (absolute) or ``module`` names where the function ``func`` lives; ``search_path`` (the spec's
    folder) is the child's working directory and first on its ``sys.path``; ``digest`` is the SHA-256 of the
    file (empty for a module), so cached outputs of an edited file are never reused. ``timeout_s``: the
    longest one call may take. ``spec_path``, ``line``, ``key`` locate it for error messages."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str
    file: str | None = None
    module: str | None = None
    func: str
    search_path: str
    dtype: Literal["f64", "f32"] = "f64"
    digest: str = ""
    timeout_s: float = REFERENCE_TIMEOUT_S
    spec_path: str
    line: int | None = None
    key: str

    def failed(self, message: str) -> ReferenceFailed:
        """The :class:`ReferenceFailed` to raise, naming the spec's file, line and key."""
        return ReferenceFailed(self.spec_path, self.line, self.key, message)


def python_reference(spec: KernelSpec, spec_path: str | Path, timeout_s: float = REFERENCE_TIMEOUT_S) -> PythonReference | None:
    """The spec's Python reference resolved against ``spec_path`` (the spec file), or None for ``reference = "kernel"``.

    A ``.py`` location is relative to the spec's folder (or absolute); anything else is a module name.

    Raises:
        ReferenceFailed: the file does not exist or cannot be read.
    """
    parsed = parse_reference(spec.check.reference)
    if parsed is None:
        return None
    location, func = parsed
    spec_path = Path(spec_path)
    folder = spec_path.resolve().parent
    line = None
    try:
        line = _locate(spec_path.read_text(), ("kernel", spec.name, "check", "reference"))
    except OSError:
        pass
    common = dict(target=spec.check.reference, func=func, search_path=str(folder), dtype=spec.check.reference_dtype,
                  timeout_s=timeout_s, spec_path=str(spec_path), line=line, key=f"kernel.{spec.name}.check.reference")
    if not location.endswith(".py"):
        return PythonReference(module=location, **common)
    file = (folder / location).resolve()
    ref = PythonReference(file=str(file), **common)
    try:
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
    except OSError as exc:
        raise ref.failed(f"{spec.check.reference}: cannot read {file}: {exc.strerror} "
                         f"(a .py file is looked up relative to the spec's folder, {folder})") from None
    return ref.model_copy(update={"digest": digest})


# -- values ----------------------------------------------------------------------------------------------
def _module(a):
    """The array module of ``a``: CuPy for a device array (judged where it lies), else NumPy."""
    if type(a).__module__.startswith("cupy"):
        import cupy
        return cupy
    return np


def values(buf, dtype: str):
    """A buffer in storage dtype (bf16 as ``uint16`` bits) as exact values: ``float64`` for float dtypes,
    ``int64`` for integer ones. Same shape. A NumPy array stays on the host, a CuPy array on its device."""
    xp = _module(buf)
    buf = xp.asarray(buf)
    if dtype == "bf16":
        return (buf.astype(xp.uint32) << 16).view(xp.float32).astype(xp.float64)
    if dtype in FLOATS:
        return buf.astype(xp.float64)
    return buf.astype(xp.int64)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values -> bf16 bit patterns (``uint16``), rounded to nearest even (as :mod:`.buffers` does)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16).astype(np.uint16)


def _shape(arg, size: dict[str, int]) -> tuple[int, ...]:
    return tuple(int(evaluate(d, size)) for d in arg.shape or [])


def offsets_values(rng, lo: int, hi: int, n: int, largest: int, xp=np):
    """``n`` int64 range starts (an ``offsets(lo, hi)`` input: CSR row pointers): 0, then running sums of steps drawn in
    ``[lo, hi)`` by ``rng`` (a NumPy or CuPy Generator; ``xp`` its module), saturating at ``largest`` (the dtype's)."""
    steps = rng.integers(int(lo), int(hi), size=max(n - 1, 0), dtype=np.int64)
    return xp.minimum(xp.concatenate([xp.zeros(min(n, 1), dtype=np.int64), xp.cumsum(steps)]), int(largest))


def host_inputs(spec: KernelSpec, size: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for every ``in``/``inout`` buffer at ``size``, generated with NumPy on the host (flat arrays in
    storage dtype, from each argument's ``init`` distribution; not the GPU's values): what the job-start
    check of the reference calls it on."""
    rng = np.random.default_rng(seed)
    out = {}
    for arg in spec.args:
        if arg.role not in ("in", "inout"):
            continue
        n = arg.numel(size)
        kind, a, b = arg.distribution(size)
        dtype = arg.dtype.value
        if dtype in FLOATS:
            v = {"normal": lambda: rng.standard_normal(n) * b + a, "uniform": lambda: rng.random(n) * (b - a) + a,
                 "randint": lambda: rng.integers(int(a), max(int(b), int(a) + 1), n).astype(np.float64),
                 "ones": lambda: np.ones(n), "zeros": lambda: np.zeros(n)}[kind]()
            out[arg.name] = to_bf16_bits(v.astype(np.float32)) if dtype == "bf16" else v.astype(STORAGE[dtype])
        else:
            info = np.iinfo(STORAGE[dtype])
            if kind == "offsets":
                v = offsets_values(rng, a, b, n, info.max)
            elif kind == "randint":
                lo, hi = max(int(a), int(info.min)), min(int(b), int(info.max))
                v = rng.integers(lo, max(hi, lo + 1), n)
            elif kind in ("normal", "uniform"):
                raw = rng.standard_normal(n) * b + a if kind == "normal" else rng.random(n) * (b - a) + a
                v = np.clip(np.rint(raw), max(float(info.min), -2.0**62), min(float(info.max), 2.0**62)).astype(np.int64)
            else:
                v = np.full(n, 1 if kind == "ones" else 0, dtype=np.int64)
            out[arg.name] = v.astype(STORAGE[dtype])
    return out


def smallest_check_size(spec: KernelSpec) -> dict[str, int]:
    """The check size with the fewest buffer elements."""
    return min(spec.check.sizes, key=lambda s: sum(a.numel(s) for a in spec.args if a.is_buffer))


def telling_check_size(spec: KernelSpec) -> dict[str, int]:
    """What the job-start check runs the reference at: the smallest check size at which the size symbols take
    pairwise distinct values other than 1, else the smallest at which the most do, else the smallest. At
    ``{B = 1, T = 1, D = 1}`` a shape written ``[B, T, D]`` where the reference returns ``[B, T, T]`` would pass."""
    def distinct(s: dict[str, int]) -> int:
        values = [v for v in s.values() if v != 1]
        return len(set(values)) - (len(s) - len(values))
    most = max(distinct(s) for s in spec.check.sizes)
    return min((s for s in spec.check.sizes if distinct(s) == most),
               key=lambda s: sum(a.numel(s) for a in spec.args if a.is_buffer))


def size_label(size: dict[str, int]) -> str:
    """``{"M": 3, "N": 8}`` -> ``"M=3 N=8"``."""
    return " ".join(f"{k}={v}" for k, v in size.items())


# -- the calling convention ------------------------------------------------------------------------------
def _scalar(arg, size: dict[str, int]):
    v = evaluate(arg.value, size)
    dtype = arg.dtype.value
    if dtype == "f16":
        return float(np.float16(v))
    if dtype in ("f32", "bf16"):  # a bf16 scalar reaches the kernel as a float (harness/buffers.py: SCALAR)
        return float(np.float32(v))
    if dtype == "f64":
        return float(v)
    return int(v)


def _accepted(fn, kwargs: dict, n_positional: int) -> dict:
    """The keyword arguments ``fn`` can take (all of them when it has ``**kwargs`` or no signature)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return kwargs
    names = {p.name for i, p in enumerate(params)
             if p.kind is p.KEYWORD_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and i >= n_positional)}
    return {k: v for k, v in kwargs.items() if k in names}


def call_reference(fn, spec: KernelSpec, size: dict[str, int], inputs: dict[str, np.ndarray],
                   compute: str = "f64") -> dict[str, np.ndarray]:
    """Call the reference ``fn`` once, by the module's calling convention, and return its outputs by name.

    ``inputs``: every ``in``/``inout`` buffer as a flat array in storage dtype (bf16 as ``uint16`` bits).
    Returns a C-contiguous array of the buffer's shape per ``out``/``inout`` argument: ``float64`` for float
    outputs, ``int64`` for integer ones.

    Raises:
        ReferenceProblem: ``fn`` raised (with the exception and where), or returned outputs of the wrong
        count, names, shapes or dtypes, or left a float output unfilled.
    """
    ftype = np.float64 if compute == "f64" else np.float32
    positional, filled, shapes = [], {}, {}
    for arg in spec.args:
        if not arg.is_buffer:
            continue
        shape = _shape(arg, size)
        dtype = arg.dtype.value
        cast = (np.float64 if dtype == "f64" else ftype) if dtype in FLOATS else STORAGE[dtype]
        if arg.role in ("in", "inout"):
            arr = np.ascontiguousarray(values(inputs[arg.name], dtype).astype(cast).reshape(shape))
        else:
            arr = np.full(shape, np.nan, dtype=cast) if dtype in FLOATS else np.zeros(shape, dtype=cast)
        if arg.role in ("out", "inout"):
            filled[arg.name], shapes[arg.name] = arr, shape
        positional.append(arr)
    kwargs = {s: int(v) for s, v in size.items()}
    kwargs.update({a.name: _scalar(a, size) for a in spec.args if a.role == "scalar"})
    try:
        result = fn(*positional, **_accepted(fn, kwargs, len(positional)))
    except BaseException as exc:  # user code: SystemExit and KeyboardInterrupt included
        text = f"raised {_exception_text(exc)}"
        if isinstance(exc, TypeError) and len(traceback.extract_tb(exc.__traceback__)) == 1:  # the call itself failed
            buffers = ", ".join(a.name for a in spec.args if a.is_buffer)
            text += (f"; it is called as {getattr(fn, '__name__', 'f')}({buffers}, *, {', '.join(kwargs)}): every buffer "
                     "positionally in the spec's order, size symbols and scalars by keyword")
        raise ReferenceProblem(text) from None
    return collect_outputs(spec, size, result, filled)


def collect_outputs(spec: KernelSpec, size: dict[str, int], result, filled: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs by name from what the reference returned (``result``) or filled (``filled``, by name, in
    argument order); see :func:`call_reference`. Raises :class:`ReferenceProblem`."""
    names = list(filled)
    outs = {a.name: a for a in spec.args if a.role in ("out", "inout")}
    listing = ", ".join(names)
    if result is None:
        got = dict(filled)
        for name, arr in got.items():
            if outs[name].dtype.is_float and arr.size and np.isnan(arr).all():
                raise ReferenceProblem(f"returned None and left output {name!r} unfilled (all NaN): fill it in place "
                                       f"({name}[...] = ...) or return it")
    elif isinstance(result, dict):
        missing = [n for n in names if n not in result]
        extra = [str(k) for k in result if k not in outs]
        if missing or extra:
            what = (f"without output(s) {', '.join(missing)}" if missing else "") + ("; " if missing and extra else "") + \
                   (f"with unknown key(s) {', '.join(extra)}" if extra else "")
            raise ReferenceProblem(f"returned a dict {what} (the outputs are: {listing})")
        got = {n: result[n] for n in names}
    elif isinstance(result, tuple) or (isinstance(result, list) and len(names) > 1):
        if len(result) != len(names):
            raise ReferenceProblem(f"returned {len(result)} values for {len(names)} output(s) ({listing}): return them "
                                   "in argument order, as a dict by name, or fill them")
        got = dict(zip(names, result))
    elif len(names) == 1:
        got = {names[0]: result}
    else:
        raise ReferenceProblem(f"returned one {type(result).__name__} for {len(names)} outputs ({listing}): return a "
                               "tuple in argument order, a dict by name, or fill them and return None")
    out = {}
    for name in names:
        arg, want = outs[name], tuple(filled[name].shape)
        try:
            arr = np.asarray(got[name])
        except Exception as exc:
            raise ReferenceProblem(f"returned {type(got[name]).__name__} for output {name!r}, not an array ({exc})") from None
        if arr.dtype.kind not in "fiub":
            raise ReferenceProblem(f"returned dtype {arr.dtype} for output {name!r}: give numbers")
        if not arg.dtype.is_float and arr.dtype.kind == "f":
            raise ReferenceProblem(f"returned {arr.dtype} for the {arg.dtype.value} output {name!r}: return integers")
        if arr.shape != want:
            raise ReferenceProblem(f"returned shape {arr.shape} for output {name!r}, expected {want} "
                                   f"(shape {list(arg.shape)} at {size_label(size)})")
        out[name] = np.ascontiguousarray(arr, dtype=np.float64 if arg.dtype.is_float else np.int64)
    return out


def _exception_text(exc: BaseException) -> str:
    """``ZeroDivisionError: division by zero (ref.py:12, in rowsum)``: the exception and the innermost frame
    outside this module, NumPy and the standard library, where the user's code went wrong."""
    text = f"{type(exc).__name__}: {exc}".rstrip(": ")
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename != __file__ and "site-packages" not in f.filename and "/lib/python" not in f.filename]
    if frames:
        f = frames[-1]
        text += f" ({Path(f.filename).name}:{f.lineno}, in {f.name})"
    return text


def load_function(ref: PythonReference):
    """Import the reference's module (a file by path, or a module on ``sys.path`` with the spec's folder first)
    and return the function. Raises :class:`ReferenceProblem`."""
    if ref.search_path not in sys.path:
        sys.path.insert(0, ref.search_path)
    try:
        if ref.file is not None:
            name = "ptxfactory_reference_" + (ref.digest[:16] or "file")
            module_spec = importlib.util.spec_from_file_location(name, ref.file)
            if module_spec is None or module_spec.loader is None:
                raise ReferenceProblem(f"could not be loaded: {ref.file} is not a Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(ref.module)
    except ReferenceProblem:
        raise
    except BaseException as exc:
        raise ReferenceProblem(f"could not be loaded: {_exception_text(exc)}") from None
    fn = getattr(module, ref.func, None)
    if fn is None:
        defined = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                         and getattr(v, "__module__", None) == module.__name__)
        raise ReferenceProblem(f"could not be loaded: {ref.file or ref.module} has no function {ref.func!r}"
                               + (f" (it defines: {', '.join(defined)})" if defined else ""))
    if not callable(fn):
        raise ReferenceProblem(f"could not be loaded: {ref.func!r} in {ref.file or ref.module} is a "
                               f"{type(fn).__name__}, not a function")
    return fn


# -- the child process -----------------------------------------------------------------------------------
_CHILD = "import sys; from ptxfactory.harness.reference import _child_main; _child_main(*map(int, sys.argv[1:4]))"


def _die_with_parent(parent_pid: int) -> None:
    """Have the kernel kill this process when its parent dies (Linux); exit now if the parent is already gone."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:
        pass
    if os.getppid() != parent_pid:
        os._exit(0)


def _child_main(read_fd: int, write_fd: int, parent_pid: int) -> None:
    """The reference process: ``("load", ref, spec)`` then ``("call", size, inputs)`` requests, each answered
    ``("ok", value)`` or ``("error", problem)``, until the pipe closes."""
    _die_with_parent(parent_pid)
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    fn = ref = spec = None
    while True:
        try:
            msg = inbox.recv()
        except (EOFError, OSError):
            return
        try:
            if msg[0] == "load":
                ref, spec = PythonReference.model_validate(msg[1]), KernelSpec.model_validate(msg[2])
                fn = load_function(ref)
                reply = ("ok", None)
            else:
                reply = ("ok", call_reference(fn, spec, msg[1], msg[2], ref.dtype))
        except ReferenceProblem as exc:
            reply = ("error", str(exc))
        except BaseException as exc:
            reply = ("error", f"failed: {_exception_text(exc)}")
        try:
            outbox.send(reply)
        except BaseException as exc:  # e.g. outputs that do not pickle
            outbox.send(("error", f"returned outputs that cannot be sent back: {_exception_text(exc)}"))


class ReferenceProcess:
    """One child process running the spec's reference function (see the module's docstring).

    Blocking: call it from a thread or a worker process, never on an event loop. :meth:`outputs` raises
    :class:`ReferenceFailed` (and kills the child when it timed out or died); the next call starts a fresh one.
    """

    def __init__(self, ref: PythonReference, spec: KernelSpec):
        self.ref, self.spec = ref, spec
        self._proc: subprocess.Popen | None = None
        self._send: Connection | None = None
        self._recv: Connection | None = None

    def _start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(to_child_r), str(from_child_w), str(os.getpid())],
                pass_fds=(to_child_r, from_child_w), cwd=self.ref.search_path, stdin=subprocess.DEVNULL,
                stdout=sys.stderr.fileno() if _has_fileno(sys.stderr) else subprocess.DEVNULL, close_fds=True)
        except BaseException:
            for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
                os.close(fd)
            raise
        os.close(to_child_r)
        os.close(from_child_w)
        self._send, self._recv = Connection(to_child_w, readable=False), Connection(from_child_r, writable=False)
        self._ask(("load", self.ref.model_dump(), self.spec.model_dump(mode="json")), "loading it")

    def _ask(self, request: tuple, doing: str):
        """Send one request and wait up to ``timeout_s`` (plus a few seconds for Python and NumPy to start)."""
        try:
            self._send.send(request)
            if not self._recv.poll(self.ref.timeout_s + (5.0 if request[0] == "load" else 0.0)):
                self.close()
                exc = self.ref.failed(f"{self.ref.target} took longer than {self.ref.timeout_s:g} s {doing} (it was "
                                      "stopped): make it faster (vectorise with NumPy), or check smaller sizes")
                exc.timed_out = True
                raise exc
            status, value = self._recv.recv()
        except (EOFError, OSError):
            code = None
            if self._proc is not None:
                try:
                    code = self._proc.wait(timeout=5)  # its pipe closed: it is exiting
                except subprocess.TimeoutExpired:
                    pass
            self.close()
            raise self.ref.failed(f"the process running {self.ref.target} died (exit code {code}) {doing}") from None
        if status != "ok":
            raise self.ref.failed(f"{self.ref.target} {value}" + ("" if request[0] == "load" else f" {doing}"))
        return value

    def outputs(self, size: dict[str, int], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The reference's outputs at ``size`` for ``inputs`` (flat storage-dtype arrays of the ``in``/``inout``
        buffers): by name, ``float64``/``int64`` of each output's shape. Raises :class:`ReferenceFailed`."""
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._start()
        return self._ask(("call", dict(size), {k: np.ascontiguousarray(v) for k, v in inputs.items()}),
                         f"at {size_label(size)}")

    def close(self) -> None:
        """Kill the child (if any) and close the pipes."""
        for conn in (self._send, self._recv):
            if conn is not None:
                try:
                    conn.close()
                except OSError:
                    pass
        self._send = self._recv = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None


def _has_fileno(stream) -> bool:
    try:
        stream.fileno()
        return True
    except (AttributeError, OSError, ValueError):
        return False


def validate_reference(spec: KernelSpec, ref: PythonReference, warnings: list[str] | None = None) -> float:
    """Load the reference and call it once on host-generated inputs at a small check size whose symbols differ
    (:func:`telling_check_size`: a shape that swaps two symbols shows there), in a child
    process, before any GPU work: the job's early failure for a reference that cannot be loaded, raises,
    returns the wrong outputs or takes over ``ref.timeout_s``. Returns the call's wall time in seconds; what
    :func:`output_warnings` finds in the outputs is appended to ``warnings`` (when given).

    Blocking (run it in a thread). Raises :class:`ReferenceFailed`.
    """
    size = telling_check_size(spec)
    proc = ReferenceProcess(ref, spec)
    try:
        t0 = time.perf_counter()
        outputs = proc.outputs(size, host_inputs(spec, size))
        took = time.perf_counter() - t0
    finally:
        proc.close()
    if warnings is not None:
        warnings.extend(output_warnings(spec, size, outputs))
    return took


NONFINITE_WARN = 0.5  # a float output of the reference this much NaN or inf on the spec's inputs checks little


def output_warnings(spec: KernelSpec, size: dict[str, int], outputs: dict[str, np.ndarray]) -> list[str]:
    """What a kernel engineer should know about the reference's outputs on the spec's own inputs at ``size``: each
    float output that is at least :data:`NONFINITE_WARN` NaN or infinite (an optimizer's state from ``normal`` init
    under a square root, a log of negative inputs), where a candidate is only asked to be NaN where the reference
    is: the check then compares few elements. ``outputs``: by name, as :func:`call_reference` returns them."""
    out = []
    for arg in spec.args:
        if arg.role not in ("out", "inout") or arg.dtype.value not in FLOATS or arg.name not in outputs:
            continue
        values = np.asarray(outputs[arg.name], dtype=np.float64).reshape(-1)
        if values.size == 0:
            continue
        bad = float(np.mean(~np.isfinite(values)))
        if bad >= NONFINITE_WARN:
            out.append(f"the Python reference's output {arg.name!r} is {bad:.0%} NaN or inf at {size_label(size)} on "
                       f"the spec's inputs: the check compares only its finite elements; give the inputs an init "
                       f"that keeps it finite (kernel.{spec.name}.args, init)")
    return out


# -- judging a candidate against the reference -----------------------------------------------------------
def ulp(value: float, dtype: str) -> float:
    """The spacing of ``dtype``'s numbers at ``|value|`` (one ulp; bf16 has float32's exponent, 8 mantissa bits)."""
    value = abs(float(value))  # past the largest finite number the spacing is that of the top binade
    if dtype == "bf16":
        return float(np.spacing(np.float32(min(value, 2.0**127)))) * 65536.0
    if dtype == "f16":
        return float(np.spacing(np.float16(min(value, 2.0**15))))
    if dtype == "f32":
        return float(np.spacing(np.float32(min(value, 2.0**127))))
    if dtype == "f64":
        return float(np.spacing(np.float64(value)))
    return 0.0


@dataclass(frozen=True)
class Judgement:
    """One output at one size and seed, judged against the reference by :func:`judge`.

    ``candidate_err`` / ``original_err``: max ``|x - ref|`` over elements where both are finite; ``bound``:
    what ``candidate_err`` may reach as "no less accurate"; ``wrong``: elements outside the tolerance;
    ``new_nonfinite``: elements NaN/inf/never written (or of another infinity) where the reference is not and
    the original kernel was right; ``first_wrong``: flat index of the first element outside the tolerance."""

    ok: bool
    within_tol: bool
    candidate_err: float
    original_err: float
    bound: float
    wrong: int
    elements: int
    new_nonfinite: int
    first_wrong: int | None


def _classes(x, xp=np):
    """0 finite, 1 NaN, 2 +inf, 3 -inf."""
    return xp.where(xp.isnan(x), 1, xp.where(xp.isinf(x) & (x > 0), 2, xp.where(xp.isinf(x), 3, 0)))


def max_error(x, ref, xp=np) -> float:
    """max ``|x - ref|`` over the elements where both are finite (0 for none); ``x``, ``ref``: float64 arrays of one
    shape, both NumPy or both CuPy (``xp`` their module)."""
    both = xp.isfinite(x) & xp.isfinite(ref)
    return float(xp.max(xp.where(both, xp.abs(x - ref), 0.0))) if x.size else 0.0


def judge(cand, orig, ref, dtype: str, rtol: float, atol: float, unwritten=None) -> Judgement:
    """Whether a candidate's output passes against the Python reference (the module's acceptance rule).

    ``cand``/``orig``: the candidate's and the original kernel's output on the same inputs, as values
    (:func:`values`: ``float64``, or ``int64`` for integer dtypes); ``ref``: the reference's output
    (same number of elements; compared flat); ``dtype``: the output's spec dtype; ``unwritten``: a mask of
    the candidate's elements that still hold the poison (never written), which are always wrong.
    All NumPy arrays (judged on the host) or all CuPy arrays (judged on their device: seconds saved per output
    of tens of millions of elements). Integer outputs are exact: within tolerance means equal, and "no less
    accurate" means max ``|err|`` at most :data:`ACCURACY_FACTOR` x the original's, no ulp slack.

    Raises:
        ValueError: the three arrays hold different numbers of elements.
    """
    xp = _module(cand)
    c, o, r = (xp.asarray(a).reshape(-1) for a in (cand, orig, ref))
    if not (c.size == o.size == r.size):
        raise ValueError(f"judge: {c.size}, {o.size} and {r.size} elements")
    unwritten = xp.zeros(c.size, bool) if unwritten is None else xp.asarray(unwritten).reshape(-1)
    if dtype not in FLOATS:
        c, o, r = c.astype(xp.int64), o.astype(xp.int64), r.astype(xp.int64)
        # an integer poison is a value a kernel may write (120 in an int8 quantisation): an element holding it is
        # wrong only where the reference's value differs (the float poisons are NaN payloads no kernel computes)
        unwritten = unwritten & (c != r)
        bad = c != r
        err_c = float(xp.max(xp.abs(c.astype(xp.float64) - r.astype(xp.float64)))) if c.size else 0.0
        err_o = float(xp.max(xp.abs(o.astype(xp.float64) - r.astype(xp.float64)))) if c.size else 0.0
        bound = ACCURACY_FACTOR * err_o
        new_bad = int(unwritten.sum())
    else:
        c, o, r = c.astype(xp.float64), o.astype(xp.float64), r.astype(xp.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            cls_c, cls_o, cls_r = _classes(c, xp), _classes(o, xp), _classes(r, xp)
            finite = (cls_c == 0) & (cls_r == 0)
            err = xp.where(finite, xp.abs(c - r), xp.inf)
            good = (finite & (err <= atol + rtol * xp.abs(xp.where(finite, r, 0.0)))) | ((cls_r != 0) & (cls_c == cls_r))
            bad = ~good | unwritten
            err_c, err_o = max_error(c, r, xp), max_error(o, r, xp)
            largest = float(xp.max(xp.where(cls_r == 0, xp.abs(r), 0.0))) if r.size else 0.0  # the largest finite |ref|
        bound = ACCURACY_FACTOR * err_o + ULP_SLACK * ulp(largest, dtype)
        mismatch_c = (cls_c != cls_r) | unwritten
        new_bad = int((mismatch_c & (cls_o == cls_r)).sum())
    wrong = int(bad.sum())
    within = wrong == 0
    ok = within or (new_bad == 0 and err_c <= bound)
    return Judgement(ok=ok, within_tol=within, candidate_err=err_c, original_err=err_o, bound=bound, wrong=wrong,
                     elements=int(c.size), new_nonfinite=new_bad, first_wrong=int(xp.argmax(bad)) if wrong else None)


def describe(j: Judgement, output: str, shape: tuple[int, ...]) -> str:
    """One line saying why a :class:`Judgement` failed (or how it passed), for a rejection's reason."""
    where = ""
    if j.first_wrong is not None:
        index = list(np.unravel_index(j.first_wrong, shape)) if shape and int(np.prod(shape)) == j.elements else [j.first_wrong]
        where = f", first at {[int(i) for i in index]}"
    head = (f"output {output!r}: {j.wrong} of {j.elements} elements outside rtol/atol of the Python reference{where}; "
            f"max |err| {j.candidate_err:.3g} against the original kernel's {j.original_err:.3g}")
    if j.ok:
        return head + (" (within tolerance)" if j.within_tol else f" (no less accurate: at most {j.bound:.3g})")
    if j.new_nonfinite:
        return head + f", and {j.new_nonfinite} element(s) NaN, inf or never written where the reference and the original are not"
    return head + f": less accurate than {ACCURACY_FACTOR:g}x the original's + {ULP_SLACK} ulp ({j.bound:.3g})"


@dataclass(frozen=True)
class ErrorRecord:
    """The errors of one output at one size and seed (collected while verifying; see :func:`summarise`)."""

    size: dict[str, int]
    output: str
    heldout: bool
    candidate_err: float
    original_err: float
    within_tol: bool


def summarise(records: list[ErrorRecord]) -> list[RefError]:
    """One :class:`~ptxfactory.protocol.RefError` per (size, output), in first-seen order: the largest
    candidate and original errors over the seeds, and whether every seed was within tolerance."""
    merged: dict[tuple[str, str], RefError] = {}
    for rec in records:
        key = (json.dumps(rec.size, sort_keys=True), rec.output)
        old = merged.get(key)
        if old is None:
            merged[key] = RefError(size=rec.size, output=rec.output, heldout=rec.heldout, candidate_max_abs=rec.candidate_err,
                                   original_max_abs=rec.original_err, within_tol=rec.within_tol)
        else:
            merged[key] = old.model_copy(update={
                "candidate_max_abs": max(old.candidate_max_abs, rec.candidate_err),
                "original_max_abs": max(old.original_max_abs, rec.original_err),
                "within_tol": old.within_tol and rec.within_tol,
            })
    return list(merged.values())
