"""The kernel spec: a TOML file beside the source (``rmsnorm.cu`` -> ``rmsnorm.cu.toml``).

One ``[kernel.NAME]`` table per ``__global__`` function, validated by pydantic. Every error is a
:class:`SpecError` naming the file, the line and the dotted key, e.g.
``rmsnorm.cu.toml:7: kernel.rmsnorm.args[2].dtype: Input should be 'bf16', 'f16', ...``.
"""
from __future__ import annotations

import re
import tomllib
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .expr import ExprError, evaluate, holds, symbols_in


class Dtype(str, Enum):
    """Element types a buffer or scalar argument may have."""

    bf16 = "bf16"
    f16 = "f16"
    f32 = "f32"
    f64 = "f64"
    i8 = "i8"
    i32 = "i32"
    i64 = "i64"
    u8 = "u8"
    u32 = "u32"
    u64 = "u64"

    @property
    def itemsize(self) -> int:
        """Size of one element in bytes."""
        return _ITEMSIZE[self.value]

    @property
    def is_float(self) -> bool:
        return self.value in ("bf16", "f16", "f32", "f64")

    @property
    def c_types(self) -> tuple[str, ...]:
        """C/CUDA spellings accepted for this dtype in a kernel signature."""
        return _C_TYPES[self.value]


_ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i8": 1, "i32": 4, "i64": 8, "u8": 1, "u32": 4, "u64": 8}
_C_TYPES = {
    "bf16": ("__nv_bfloat16", "nv_bfloat16", "bfloat16"),
    "f16": ("__half", "half"),
    "f32": ("float",),
    "f64": ("double",),
    "i8": ("int8_t", "char", "signed char"),
    "i32": ("int", "int32_t", "signed", "signed int"),
    "i64": ("long long", "int64_t", "long", "long long int"),
    "u8": ("uint8_t", "unsigned char", "bool"),  # (a bool buffer holds 0 or 1: its spec's init must say so)
    "u32": ("unsigned", "unsigned int", "uint32_t"),
    "u64": ("size_t", "unsigned long long", "uint64_t", "unsigned long", "unsigned long long int"),
}

_INIT_KINDS = ("normal", "uniform", "zeros", "ones", "randint", "offsets")
_REAL_BOUNDS = ("normal", "uniform")  # distributions whose bounds are real numbers: '/' divides as reals there
_INIT_DEFAULTS = {"normal": (0.0, 1.0), "uniform": (-1.0, 1.0), "randint": (0, 100), "offsets": (0, 100)}
_INIT_HELP = ("use normal, normal(mean, std), uniform(lo, hi), zeros, ones, randint(lo, hi) or offsets(lo, hi) (bounds: "
              "numbers or size expressions; normal's and uniform's may divide as reals, 1 / D)")
# the largest value of each integer dtype: an offsets buffer's last element must fit
_INT_MAX = {"i8": 2**7 - 1, "u8": 2**8 - 1, "i32": 2**31 - 1, "u32": 2**32 - 1, "i64": 2**63 - 1, "u64": 2**64 - 1}


def parse_init(init: str) -> tuple[str, tuple[str, str] | None]:
    """Split an ``init`` string into its distribution and its two bound expressions (None: the defaults).

    ``"randint(0, V)"`` -> ``("randint", ("0", "V"))``; ``"normal"`` -> ``("normal", None)``.

    Raises:
        ValueError: an unknown distribution, a wrong number of bounds, or bounds on zeros/ones.
    """
    text = init.strip()
    m = re.fullmatch(r"([a-z]+)\s*(?:\((.*)\))?", text, re.S)
    if not m or m.group(1) not in _INIT_KINDS:
        raise ValueError(f"unknown init {init!r}: {_INIT_HELP}")
    kind, inner = m.group(1), m.group(2)
    if inner is None:
        return kind, None
    depth, parts, start = 0, [], 0
    for i, ch in enumerate(inner):  # split at top-level commas: "randint(0, max(V, 2))"
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    parts = [p.strip() for p in parts]
    if kind in ("zeros", "ones") or len(parts) != 2 or not all(parts):
        raise ValueError(f"init {init!r}: {kind} takes {'no bounds' if kind in ('zeros', 'ones') else 'two bounds'}; {_INIT_HELP}")
    return kind, (parts[0], parts[1])


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArgSpec(_Model):
    """One kernel argument, in signature order.

    A buffer (``role`` in/out/inout) has a ``dtype``, a ``shape`` (expressions over size symbols)
    and for inputs an ``init`` distribution: ``normal``, ``normal(mean, std)``, ``uniform(lo, hi)``,
    ``zeros``, ``ones``, ``randint(lo, hi)`` (integers ``lo <= v < hi``, generated exactly in the
    buffer's dtype) or ``offsets(lo, hi)`` (an integer buffer of range starts, CSR row pointers: 0, then
    each element the previous one plus a step ``randint(lo, hi)``, ``lo >= 0``); the bounds are numbers
    or expressions over the size symbols (``randint(0, V)``).
    ``align`` (bytes, a power of two) says the caller guarantees that alignment of the buffer's
    address; candidates may rely on it. A scalar (``role = "scalar"``) has a ``dtype`` and a
    ``value``: a number or an expression over size symbols.
    """

    name: str
    role: Literal["in", "out", "inout", "scalar"]
    dtype: Dtype
    shape: list[str | int] | None = None
    init: str | None = None
    value: str | int | float | None = None
    align: int | None = Field(default=None, ge=1, le=4096)

    @model_validator(mode="after")
    def _role_fields(self) -> "ArgSpec":
        if self.role == "scalar":
            if self.value is None:
                raise ValueError(f"scalar argument {self.name!r} needs a 'value'")
            if self.shape is not None:
                raise ValueError(f"scalar argument {self.name!r} takes no 'shape'")
        else:
            if not self.shape:
                raise ValueError(f"buffer argument {self.name!r} needs a 'shape'")
            if self.value is not None:
                raise ValueError(f"buffer argument {self.name!r} takes no 'value'")
        if self.init is not None and parse_init(self.init)[0] == "offsets" and (self.role == "scalar" or self.dtype.value not in _INT_MAX):
            raise ValueError(f"init {self.init!r}: offsets are the starts of consecutive ranges (CSR row pointers), an "
                             f"integer buffer's; {self.name!r} is {self.dtype.value}")
        if self.align is not None:
            if self.role == "scalar":
                raise ValueError(f"scalar argument {self.name!r} takes no 'align'")
            if self.align & (self.align - 1) or self.align < self.dtype.itemsize:
                raise ValueError(f"align = {self.align}: a power of two of at least the element size ({self.dtype.itemsize} bytes)")
        return self

    @field_validator("init")
    @classmethod
    def _init_known(cls, v: str | None) -> str | None:
        if v is not None:
            parse_init(v)
        return v

    @property
    def is_buffer(self) -> bool:
        return self.role != "scalar"

    def distribution(self, size: dict[str, int] | None = None) -> tuple[str, float | int, float | int]:
        """(kind, a, b) of the input distribution at ``size`` (bounds evaluated there); defaults to normal(0, 1).

        ``randint`` bounds are integers (``a <= v < b``); ``normal`` gives (mean, std), ``uniform`` (lo, hi).

        Raises:
            ExprError: a bound names a symbol ``size`` lacks, or cannot be evaluated.
        """
        kind, bounds = parse_init(self.init or "normal")
        if bounds is None:
            a, b = _INIT_DEFAULTS.get(kind, (0, 0))
        else:  # a float distribution's bounds may divide as reals (normal(0, 1 / D))
            a, b = (evaluate(x, size or {}, real=kind in _REAL_BOUNDS) for x in bounds)
        if kind in ("randint", "offsets"):
            return kind, int(a), int(b)
        return kind, float(a), float(b)

    def init_exprs(self) -> list[str]:
        """The bound expressions of ``init`` (empty for the defaults)."""
        return list(parse_init(self.init)[1] or ()) if self.init else []

    def numel(self, size: dict[str, int]) -> int:
        """Number of elements of a buffer at the given sizes."""
        n = 1
        for dim in self.shape or []:
            n *= int(evaluate(dim, size))
        return n


# The largest buffer a spec may ask for at a listed size, unless check.max_buffer_bytes says otherwise:
# more than any GPU of today holds, and a bound on what a held-out size or a typo can make the worker allocate.
MAX_BUFFER_BYTES = 1 << 36  # 64 GiB

# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (every arch since sm_30).
MAX_THREADS_PER_BLOCK = 1024
MAX_GRID_YZ = 65535


def _check_value(where: str, value: int, size: dict[str, int]) -> None:
    """Raises ValueError when an expression's value at ``size`` is out of range for its key (a grid or block
    dimension under 1; negative shared memory, bytes moved or FLOP)."""
    if where in ("launch.grid", "launch.block") and value < 1:
        raise ValueError(f"{where}: {value} at {size}: every grid and block dimension must be at least 1")
    if where in ("launch.shared_mem", "bytes_moved", "flops") and value < 0:
        raise ValueError(f"{where}: {value} at {size}: must be at least 0")


class LaunchSpec(_Model):
    """Launch configuration as expressions: ``grid``/``block`` lists of 1-3 entries, dynamic shared memory in bytes.

    ``policy = "fixed"``: candidates keep this launch (drop-in for the existing host code);
    ``"free"``: candidates choose their own launch.
    """

    grid: list[str | int] = Field(min_length=1, max_length=3)
    block: list[str | int] = Field(min_length=1, max_length=3)
    shared_mem: str | int = 0
    policy: Literal["fixed", "free"] = "fixed"


_REFERENCE_HELP = 'use "kernel" (the original kernel is the oracle), "python:FILE.py:FUNC" (a file beside the spec) or "python:package.module:FUNC"'


def parse_reference(text: str) -> tuple[str, str] | None:
    """Split ``check.reference``: None for ``"kernel"``, else ``(location, function)``, where location is a
    ``.py`` file (relative to the spec's folder, or absolute) or a dotted module name.

    ``"python:ref.py:rowsum"`` -> ``("ref.py", "rowsum")``; ``"python:mypkg.refs:rowsum"`` -> ``("mypkg.refs", "rowsum")``.

    Raises:
        ValueError: anything else (no ``python:`` prefix, no function, a function that is not an identifier,
        a location that is neither a ``.py`` path nor a dotted module name).
    """
    if text == "kernel":
        return None
    if not isinstance(text, str) or not text.startswith("python:"):
        raise ValueError(f"unknown reference {text!r}: {_REFERENCE_HELP}")
    location, sep, func = text[len("python:"):].rpartition(":")
    location = location.strip()
    if not sep or not location or not re.fullmatch(r"[A-Za-z_]\w*", func.strip()):
        raise ValueError(f"reference {text!r}: give the function after the last ':', e.g. \"python:ref.py:rowsum\"; {_REFERENCE_HELP}")
    if not location.endswith(".py") and not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", location):
        raise ValueError(f"reference {text!r}: {location!r} is neither a .py file nor a dotted module name; {_REFERENCE_HELP}")
    return location, func.strip()


class CheckSpec(_Model):
    """Correctness requirements.

    ``reference = "kernel"`` uses the original source as the oracle. Element ``i`` passes when
    ``|out - ref| <= atol + rtol * |ref|``. ``sizes`` must all pass; ``seeds`` random seeds per size.
    ``fast_math`` says whether candidates may compile with ``--use_fast_math``. ``deterministic = false``
    allows results that move between runs on the same inputs (float ``atomicAdd`` reductions): each run is
    then judged by the tolerance instead of being required to repeat its bits.

    ``reference = "python:ref.py:func"`` (a file relative to the spec's folder) or
    ``"python:package.module:func"`` names a NumPy function as the oracle instead (see
    ``harness/reference.py`` for its calling convention and the acceptance rule); it computes in
    ``reference_dtype`` (``"f64"`` by default, or ``"f32"``). :func:`parse_reference` splits it.
    """

    reference: str = "kernel"
    reference_dtype: Literal["f64", "f32"] = "f64"
    rtol: float = Field(default=1e-2, ge=0)
    atol: float = Field(default=1e-2, ge=0)
    sizes: list[dict[str, int]] = Field(min_length=1)
    seeds: int = Field(default=3, ge=1, le=32)
    fast_math: bool = False
    deterministic: bool = True
    max_heldout_elements: int = Field(default=1 << 22, ge=1)
    max_buffer_bytes: int = Field(default=MAX_BUFFER_BYTES, ge=1)

    @field_validator("reference")
    @classmethod
    def _reference(cls, v: str) -> str:
        parse_reference(v)
        return v


class BenchSpec(_Model):
    """What "faster" means: the benchmark sizes and the metric (geomean of median times over sizes)."""

    metric: Literal["geomean_time"] = "geomean_time"
    sizes: list[dict[str, int]] = Field(min_length=1)


class TuneSpec(_Model):
    """Knobs of the user's own kernel that the ``tune`` generator may set, each with the values it may take:

    - ``defines``: preprocessor macros, e.g. ``defines = { TILE = [16, 32, 64], UNROLL = [1, 2, 4] }``. A
      candidate compiles with ``-DTILE=32``; the kernel's source gives the default (``#ifndef TILE`` ...).
    - ``template``: the kernel's own template parameters, every one of them, in declaration order, e.g.
      ``template = { TILE = [32, 64], VEC = [4, 8] }`` for ``template <int TILE, int VEC> __global__ void k``.
      The original is instantiated with each parameter's first value (``k<32, 4>``); a candidate with
      another (``k<64, 4>``).

    Names are C identifiers; values integers or plain tokens (``[A-Za-z0-9_.+-]``), 1 to 16 each."""

    defines: dict[str, list[int | str]] = Field(default_factory=dict)
    template: dict[str, list[int | str]] = Field(default_factory=dict)

    @field_validator("defines", "template", mode="before")
    @classmethod
    def _knobs(cls, v):
        if not isinstance(v, dict):
            raise ValueError("a table of names to lists of values, e.g. { TILE = [16, 32] }")
        out = {}
        for name, values in v.items():
            if not re.fullmatch(r"[A-Za-z_]\w*", name):
                raise ValueError(f"{name!r} is not a C identifier")
            if not isinstance(values, list):
                raise ValueError(f"{name}: give a list of values, e.g. {name} = [{values!r}]")
            if not 1 <= len(values) <= 16:
                raise ValueError(f"{name}: give 1 to 16 values, got {len(values)}")
            values = [str(x).lower() if isinstance(x, bool) else x for x in values]  # C++ spells them true/false
            for value in values:
                if not re.fullmatch(r"[\w.+-]+", str(value)):
                    raise ValueError(f"{name}: value {value!r} is not an integer or a plain token")
            if len({str(x) for x in values}) != len(values):
                raise ValueError(f"{name}: a value is listed twice in {values}")
            out[name] = values
        return out

    @model_validator(mode="after")
    def _disjoint(self):
        both = sorted(set(self.defines) & set(self.template))
        if both:
            raise ValueError(f"{', '.join(both)}: a knob is either a macro (defines) or a template parameter, not both")
        return self


class KernelSpec(_Model):
    """The full description of one ``__global__`` kernel to optimise.

    Beside the arguments, the launch, the check and the bench tables:

    - ``values``: size symbols that are per-size values, not dimensions (``values = ["p"]`` with
      ``sizes = [{ n = 1000003, p = 3 }]``): held-out sizes take them from a listed size, never draw them.
    - ``constraints``: conditions over the size symbols (``["N % 8 == 0", "D <= 8192"]``) that hold at
      every listed and held-out size; candidates may rely on them. A listed size that breaks one is an error.
    - ``bytes_moved`` / ``flops``: expressions for the fewest bytes a correct kernel moves through device
      memory and the arithmetic it must do, per launch. Default: every buffer once per role; 0 FLOP.
      They drive GB/s, % of copy bandwidth, % of peak FLOP rate and the impossible-time floor.
    """

    name: str
    arch: str = "sm_90a"
    args: list[ArgSpec] = Field(min_length=1)
    launch: LaunchSpec
    check: CheckSpec
    bench: BenchSpec
    tune: TuneSpec = Field(default_factory=TuneSpec)
    values: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list, max_length=64)
    bytes_moved: str | int | None = None
    flops: str | int | None = None

    @field_validator("arch")
    @classmethod
    def _arch(cls, v: str) -> str:
        if not re.fullmatch(r"sm_\d{2,3}a?", v):
            raise ValueError(f"arch {v!r} is not of the form sm_90 / sm_90a")
        return v

    @model_validator(mode="after")
    def _symbols_consistent(self) -> "KernelSpec":
        names = [a.name for a in self.args]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"args: duplicate argument name(s): {', '.join(sorted(dup))}")
        known = set(self.check.sizes[0])
        for group, sizes in (("check.sizes", self.check.sizes), ("bench.sizes", self.bench.sizes)):
            for i, s in enumerate(sizes):
                if set(s) != known:
                    raise ValueError(f"{group}[{i}]: has symbols {sorted(s)}, expected {sorted(known)}")
        exprs: list[tuple[str, Any]] = []
        for i, a in enumerate(self.args):
            exprs += [(f"args[{i}].shape", d) for d in a.shape or []]
            if a.role == "scalar" and isinstance(a.value, str):
                exprs.append((f"args[{i}].value", a.value))
        exprs += [("launch.grid", g) for g in self.launch.grid]
        exprs += [("launch.block", b) for b in self.launch.block]
        exprs.append(("launch.shared_mem", self.launch.shared_mem))
        real = set()  # the init bounds evaluated with '/' as a real division
        for i, a in enumerate(self.args):
            exprs += [(f"args[{i}].init", b) for b in a.init_exprs()]
            if a.init_exprs() and parse_init(a.init)[0] in _REAL_BOUNDS:
                real.add(f"args[{i}].init")
        exprs += [(f"constraints[{i}]", c) for i, c in enumerate(self.constraints)]
        exprs += [(key, e) for key, e in (("bytes_moved", self.bytes_moved), ("flops", self.flops)) if e is not None]
        listed = self.check.sizes + self.bench.sizes
        for where, e in exprs:
            try:
                unknown = symbols_in(e) - known
                if not unknown:
                    for size in listed:
                        if where.startswith("constraints"):
                            if not holds(e, size):
                                raise ValueError(f"{where}: {e!r} does not hold at the listed size {size}")
                        else:
                            _check_value(where, evaluate(e, size, real=where in real), size)
            except ExprError as exc:
                raise ValueError(f"{where}: {exc}") from None
            if unknown:
                raise ValueError(f"{where}: unknown size symbol(s) {', '.join(sorted(unknown))} (sizes define {', '.join(sorted(known))})")
        for i, v in enumerate(self.values):
            if v not in known:
                raise ValueError(f"values[{i}]: {v!r} is not a size symbol (sizes define {', '.join(sorted(known))})")
        for i, a in enumerate(self.args):
            if not a.is_buffer:
                continue
            for size in listed:
                nbytes = a.numel(size) * a.dtype.itemsize
                if nbytes > self.check.max_buffer_bytes:
                    raise ValueError(f"args[{i}].shape: {a.name} takes {nbytes} bytes at {size}, over the limit of "
                                     f"{self.check.max_buffer_bytes} (check.max_buffer_bytes)")
                if a.init_exprs():
                    kind, lo, hi = a.distribution(size)
                    if kind in ("randint", "uniform", "offsets") and not lo < hi:
                        raise ValueError(f"args[{i}].init: {a.init!r} is empty at {size} ({lo} >= {hi})")
                    if kind == "offsets" and lo < 0:
                        raise ValueError(f"args[{i}].init: {a.init!r}: offsets never decrease, so steps of at least 0 "
                                         f"(lo = {lo} at {size})")
                    if kind == "offsets" and (a.numel(size) - 1) * (hi - 1) > _INT_MAX[a.dtype.value]:
                        raise ValueError(f"args[{i}].init: {a.init!r}: the last offset may reach {(a.numel(size) - 1) * (hi - 1)} "
                                         f"at {size}, over {a.dtype.value}'s largest value")
        for size in self.check.sizes + self.bench.sizes:
            threads = 1
            for b in self.launch.block:
                threads *= evaluate(b, size)
            if threads > MAX_THREADS_PER_BLOCK:
                raise ValueError(f"launch.block: {threads} threads per block at {size} (at most {MAX_THREADS_PER_BLOCK})")
            for i, g in enumerate(self.launch.grid[1:], 1):
                if evaluate(g, size) > MAX_GRID_YZ:
                    raise ValueError(f"launch.grid: dimension {i} is {evaluate(g, size)} at {size} (at most {MAX_GRID_YZ})")
        return self

    @property
    def symbols(self) -> list[str]:
        """Size symbols, e.g. ``["M", "N"]``."""
        return list(self.check.sizes[0])

    @property
    def dims(self) -> list[str]:
        """Size symbols that are dimensions (drawn for held-out sizes): :attr:`symbols` less ``values``."""
        return [s for s in self.symbols if s not in self.values]

    def satisfies(self, size: dict[str, int]) -> bool:
        """Whether every ``constraints`` entry holds at ``size`` (False when one cannot be evaluated there)."""
        try:
            return all(holds(c, size) for c in self.constraints)
        except ExprError:
            return False

    def bytes_moved_at(self, size: dict[str, int]) -> int:
        """Fewest bytes a correct kernel moves through device memory at ``size``: the spec's ``bytes_moved``
        expression, else each ``in`` buffer read once, each ``out`` buffer written once, each ``inout`` both.

        Raises:
            ExprError: the expression cannot be evaluated at ``size``.
        """
        if self.bytes_moved is not None:
            return int(evaluate(self.bytes_moved, size))
        total = 0
        for a in self.args:
            if a.is_buffer:
                nbytes = a.numel(size) * a.dtype.itemsize
                total += 2 * nbytes if a.role == "inout" else nbytes
        return total

    def flops_at(self, size: dict[str, int]) -> int:
        """Floating-point operations a correct kernel must do at ``size`` (the spec's ``flops``; 0 when not given)."""
        return int(evaluate(self.flops, size)) if self.flops is not None else 0

    def floor_us(self, size: dict[str, int], peak_gbps: float, peak_tflops: float = 0.0) -> float:
        """The fastest any correct kernel can run at ``size``, in µs:
        max(:meth:`bytes_moved_at` / peak bandwidth, :meth:`flops_at` / peak FLOP rate).

        ``peak_gbps`` is in GB/s (1e9 bytes/s), ``peak_tflops`` in 1e12 FLOP/s (0: no FLOP term); a measured
        time under this floor is impossible (GPU MODE PR #159's physics floor, without its 1e-3 slack).
        """
        floor = self.bytes_moved_at(size) / (peak_gbps * 1e3)
        if peak_tflops > 0:
            floor = max(floor, self.flops_at(size) / (peak_tflops * 1e6))
        return floor


class SpecFile(_Model):
    """A whole spec file: kernels by name, plus the path it came from."""

    path: str
    kernels: dict[str, KernelSpec]


class SpecError(ValueError):
    """A malformed spec. ``str()`` reads ``FILE:LINE: KEY: message``."""

    def __init__(self, path: str, line: int | None, key: str, message: str):
        self.path, self.line, self.key, self.message = path, line, key, message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")


def spec_path_for(source: str | Path) -> Path:
    """``rmsnorm.cu`` -> ``rmsnorm.cu.toml``."""
    source = Path(source)
    return source.with_name(source.name + ".toml")


def load_spec(path: str | Path) -> SpecFile:
    """Read and validate a spec file.

    Raises:
        SpecError: the file is missing, is not TOML, or fails validation (with file, line and key).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(str(path), None, "", f"cannot read spec: {exc.strerror}") from None
    return parse_spec(text, str(path))


def sole_kernel(source: str | Path) -> str:
    """The one kernel ``source``'s spec (``SOURCE.toml``) describes: what a command uses when no ``--kernel`` is given.

    Raises:
        SpecError: the spec is missing or malformed, or describes several kernels (their names listed).
    """
    path = spec_path_for(source)
    if not path.exists():
        raise SpecError(str(path), None, "", f"no spec beside {Path(source).name}: write one with `ptxfactory init {source}`, "
                        "or name the kernel with --kernel")
    kernels = list(load_spec(path).kernels)
    if len(kernels) != 1:
        raise SpecError(str(path), None, "kernel", f"describes {len(kernels)} kernels ({', '.join(kernels)}): "
                        "name one with --kernel")
    return kernels[0]


def parse_spec(text: str, path: str = "<spec>") -> SpecFile:
    """Validate spec text; ``path`` is only used in error messages. Raises :class:`SpecError`."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise SpecError(path, int(m.group(1)) if m else None, "", f"not valid TOML: {exc}") from None
    tables = raw.get("kernel")
    if not isinstance(tables, dict) or not tables:
        raise SpecError(path, 1, "kernel", "no [kernel.NAME] table: add one per __global__ function")
    unknown_top = set(raw) - {"kernel"}
    if unknown_top:
        key = sorted(unknown_top)[0]
        raise SpecError(path, _locate(text, (key,)), key, "unknown top-level key (only [kernel.NAME] tables are allowed)")
    kernels = {}
    for name, body in tables.items():
        if not isinstance(body, dict):
            raise SpecError(path, _locate(text, ("kernel", name)), f"kernel.{name}", "must be a table")
        try:
            kernels[name] = KernelSpec.model_validate({"name": name, **body})
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = tuple(err["loc"])
            key = _dotted(("kernel", name) + loc)
            msg = err["msg"].removeprefix("Value error, ")
            if not loc:
                m = re.match(r"([a-z_]+(?:\[\d+\])?(?:\.[a-z_]+)*(?:\[\d+\])?): ", msg)
                if m:
                    loc, msg = _undot(m.group(1)), msg[m.end():]
                    key = _dotted(("kernel", name) + loc)
            if err["type"] == "missing":
                loc = loc[:-1]  # the key is absent: point at the table that should hold it
            raise SpecError(path, _locate(text, ("kernel", name) + loc), key, msg) from None
    return SpecFile(path=path, kernels=kernels)


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _undot(key: str) -> tuple:
    parts: list[Any] = []
    for m in re.finditer(r"([a-z_]+)|\[(\d+)\]", key):
        parts.append(m.group(1) if m.group(1) else int(m.group(2)))
    return tuple(parts)


def _locate(text: str, loc: tuple) -> int | None:
    """Best-effort line number (1-based) of a key path in TOML text: follows headers, keys and list items
    (tables or plain values such as strings)."""
    pos, found = 0, None
    for part in loc:
        if isinstance(part, int):
            item = _list_item(text, pos, part)
            if item is not None:
                pos = found = item
            continue
        pat = re.compile(r"(?:^|[\s\[.{,])" + re.escape(str(part)) + r"\s*(?:=|\]|\.)", re.M)
        m = pat.search(text, pos)
        if not m:
            continue
        pos, found = m.end() - 1, m.start() + (1 if text[m.start()] in " \t\n[.{," else 0)
    return text.count("\n", 0, found) + 1 if found is not None else None


def _list_item(text: str, pos: int, index: int) -> int | None:
    """Offset of item ``index`` of the first TOML array at or after ``pos`` (strings and comments skipped)."""
    start = text.find("[", pos)
    if start < 0:
        return None
    depth, i, count, expect = 0, start, -1, False
    while i < len(text):
        ch = text[i]
        if ch == "#":
            i = text.find("\n", i)
            if i < 0:
                return None
            continue
        if expect and not ch.isspace() and ch not in ",]":
            count += 1
            if count == index:
                return i
            expect = False
        if ch in "\"'":
            end = i + 1
            while end < len(text) and text[end] != ch:
                end += 2 if text[end] == "\\" and ch == '"' else 1
            i = end + 1
            continue
        if ch in "[{":
            depth += 1
            expect = depth == 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                return None
        elif ch == "," and depth == 1:
            expect = True
        i += 1
    return None
