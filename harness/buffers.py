"""Device buffers for one launch: inputs from seeded distributions, NaN-filled outputs, canary bands.

Runs inside the GPU worker (imports CuPy). bf16 buffers are stored as ``uint16`` bit patterns;
(:mod:`.compare` reads them as values for comparison).
"""
from __future__ import annotations

from dataclasses import dataclass

import cupy as cp
import numpy as np

from ptxfactory.protocol.expr import evaluate
from ptxfactory.protocol.spec import ArgSpec, KernelSpec

from .reference import offsets_values

GUARD_BYTES = 64 * 1024  # the least canary band before and after every buffer
BAND_SCALE_MAX = 16 << 20  # each band also grows by the buffer's own size, up to this: a write a whole buffer too far lands in it
CANARY = 0xA5

STORAGE = {
    "bf16": np.uint16, "f16": np.float16, "f32": np.float32, "f64": np.float64,
    "i8": np.int8, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u32": np.uint32, "u64": np.uint64,
}
SCALAR = {"bf16": np.float32, "f16": np.float16, "f32": np.float32, "f64": np.float64,
          "i8": np.int8, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u32": np.uint32, "u64": np.uint64}
# Output poison: quiet NaNs with payloads that CUDA's own NaN results (0x7FFF..., canonical) never carry,
# so an element still holding them was never written.
POISON_BITS = {"bf16": (np.uint16, 0x7FC1), "f16": (np.uint16, 0x7E5A), "f32": (np.uint32, 0x7FC0DEAD),
               "f64": (np.uint64, 0x7FF8DEADDEADDEAD)}

# Stress variants applied per seed (index % len): name, distribution override, scale of float inputs,
# special rows (row 0 all zeros, row 1 constant) in 2-D float inputs.
VARIANTS = (
    ("spec distribution", None, 1.0, False),
    ("uniform(-1, 1) with special rows", ("uniform", -1.0, 1.0), 1.0, True),
    ("large magnitude x64", None, 64.0, True),
    ("tiny magnitude x1e-3", None, 1e-3, False),
)


PLACEMENT = 4096  # every view starts at a chosen offset modulo this (the largest ``align`` a spec may declare)


@dataclass
class Guarded:
    """A buffer with canary bands: ``view`` is what the kernel gets, ``raw`` includes the bands (at least
    :func:`band_bytes` before and after the view, every byte :data:`CANARY`)."""

    raw: cp.ndarray
    view: cp.ndarray
    start: int  # byte offset of ``view`` in ``raw``

    @property
    def nbytes(self) -> int:
        """Device bytes held, bands included (what a cache of guarded buffers counts)."""
        return int(self.raw.nbytes)

    def canaries_intact(self) -> bool:
        head = self.raw[: self.start]
        tail = self.raw[self.start + self.view.nbytes :]
        return bool(cp.all(head == CANARY)) and bool(cp.all(tail == CANARY))


def address(buf) -> int:
    """The device (CuPy) or host (NumPy) address of ``buf``'s first byte."""
    data = getattr(buf, "data", None)
    ptr = getattr(data, "ptr", None)
    return int(ptr) if ptr is not None else int(buf.__array_interface__["data"][0])


def guarded_empty(n: int, dtype: str, offset: int = 0) -> Guarded:
    """A buffer of ``n`` elements of spec dtype ``dtype`` between two canary bands, whose first element's
    address is ``offset`` bytes past a multiple of :data:`PLACEMENT` (4096): 0 gives every alignment a spec
    can declare; a misaligned view (:func:`misaligned_offset`) gives the least alignment the spec allows.
    ``offset`` must be a multiple of the element size (CuPy's own copies into the view need it)."""
    storage = np.dtype(STORAGE[dtype])
    if offset % storage.itemsize:
        raise ValueError(f"offset {offset} is not a multiple of the {storage.itemsize}-byte element of {dtype}")
    nbytes = n * storage.itemsize
    band = band_bytes(nbytes)
    raw = cp.full(band * 2 + PLACEMENT + nbytes + (-nbytes % 16), CANARY, dtype=cp.uint8)
    start = band + (offset - (address(raw) + band)) % PLACEMENT
    view = raw[start : start + nbytes].view(storage)
    return Guarded(raw=raw, view=view, start=start)


def band_bytes(nbytes: int) -> int:
    """The canary band on each side of a buffer of ``nbytes`` bytes: :data:`GUARD_BYTES` plus the buffer's own size
    (at most :data:`BAND_SCALE_MAX`), so a write 64 KiB or a whole buffer past either end still lands in a band."""
    return GUARD_BYTES + (min(nbytes, BAND_SCALE_MAX) + 4095) // 4096 * 4096


def misaligned_offset(arg: ArgSpec) -> int:
    """The byte offset (modulo :data:`PLACEMENT`) of ``arg``'s buffer in the misaligned verification pass: its
    declared ``align`` (the caller guarantees that much and no more), else one element (natural alignment only,
    so a kernel that assumes 16-byte alignment for vector loads meets an address that is not)."""
    return (arg.align if arg.align else np.dtype(STORAGE[arg.dtype.value]).itemsize) % PLACEMENT


def fill_nan(buf: cp.ndarray, dtype: str) -> None:
    """Poison an output: a NaN with a distinctive payload for floats, an unlikely value for integers."""
    if dtype in POISON_BITS:
        bits, value = POISON_BITS[dtype]
        buf.view(bits).fill(value)
    else:
        buf.fill(np.iinfo(STORAGE[dtype]).max - 7)


def unwritten(buf: cp.ndarray, dtype: str) -> cp.ndarray:
    """Mask of elements that still hold the poison of :func:`fill_nan`."""
    if dtype in POISON_BITS:
        bits, value = POISON_BITS[dtype]
        return buf.view(bits) == bits(value)
    return buf == np.iinfo(STORAGE[dtype]).max - 7


def to_bf16_bits(x: cp.ndarray) -> cp.ndarray:
    """float32 -> bf16 bit patterns (uint16), round to nearest even."""
    bits = cp.ascontiguousarray(x, dtype=cp.float32).view(cp.uint32)
    rounded = bits + (cp.uint32(0x7FFF) + ((bits >> 16) & cp.uint32(1)))
    return (rounded >> 16).astype(cp.uint16)


def random_values(arg: ArgSpec, n: int, rng: cp.random.Generator, variant: int, shape: tuple[int, ...],
                  size: dict[str, int] | None = None) -> cp.ndarray:
    """``n`` values of ``arg``'s distribution at ``size`` (its bounds are expressions over the size symbols),
    under stress ``variant``: float64 for f64 buffers, float32 for the other float types, and int64 for
    integer buffers, drawn exactly (never through a float, so values above 2**24 are what they say)."""
    name, override, scale, special_rows = VARIANTS[variant % len(VARIANTS)]
    kind, a, b = arg.distribution(size)
    if not arg.dtype.is_float:
        return integer_values(kind, a, b, n, rng, arg.dtype.value)
    ftype = cp.float64 if arg.dtype.value == "f64" else cp.float32
    if override is not None and kind in ("normal", "uniform"):
        kind, a, b = override
    if kind == "normal":
        v = rng.standard_normal(n, dtype=ftype) * ftype(b) + ftype(a)
    elif kind == "uniform":
        v = rng.random(n, dtype=ftype) * ftype(b - a) + ftype(a)
    elif kind == "randint":
        v = rng.integers(int(a), int(b), size=n, dtype=np.int64).astype(ftype)
    elif kind == "ones":
        v = cp.ones(n, dtype=ftype)
    else:
        v = cp.zeros(n, dtype=ftype)
    if kind in ("normal", "uniform") and scale != 1.0:
        v *= ftype(scale)
    if special_rows and len(shape) >= 2 and kind in ("normal", "uniform"):
        rows = v.reshape(shape[0], -1)
        rows[0] = 0  # all zeros
        if shape[0] > 1:
            rows[1] = ftype(0.5)  # constant
    return v


def integer_values(kind: str, a, b, n: int, rng: cp.random.Generator, dtype: str) -> cp.ndarray:
    """``n`` int64 values for an integer buffer of spec dtype ``dtype``: ``randint`` exactly in [a, b),
    ``offsets`` 0 and then running sums of steps drawn in [a, b), ``normal``/``uniform`` rounded to the nearest
    integer, all clipped to the dtype's range."""
    info = np.iinfo(STORAGE[dtype])
    if kind == "offsets":
        return offsets_values(rng, a, b, n, info.max, cp)
    if kind == "randint":  # exclusive upper bound; the dtype's largest value itself is never drawn
        lo, hi = max(int(a), int(info.min)), min(int(b), int(info.max))
        return rng.integers(lo, max(hi, lo + 1), size=n, dtype=np.int64)
    if kind == "normal":
        v = cp.rint(rng.standard_normal(n, dtype=cp.float64) * b + a)
    elif kind == "uniform":
        v = cp.floor(rng.random(n, dtype=cp.float64) * (b - a) + a)
    elif kind == "ones":
        return cp.ones(n, dtype=np.int64)
    else:
        return cp.zeros(n, dtype=np.int64)
    lo, hi = max(float(info.min), -2.0**62), min(float(info.max), 2.0**62)
    return cp.clip(v, lo, hi).astype(np.int64)


def write_values(dst: cp.ndarray, values: cp.ndarray, dtype: str) -> None:
    """Store float/integer ``values`` into a buffer of spec dtype ``dtype`` (integers exactly, in their dtype)."""
    if dtype == "bf16":
        dst[...] = to_bf16_bits(values.astype(cp.float32))
    else:
        dst[...] = values.astype(dst.dtype)


def scalar_value(arg: ArgSpec, size: dict[str, int]):
    """A scalar argument's value at ``size`` as a NumPy scalar of its dtype."""
    return SCALAR[arg.dtype.value](evaluate(arg.value, size))


def shape_of(arg: ArgSpec, size: dict[str, int]) -> tuple[int, ...]:
    return tuple(int(evaluate(d, size)) for d in arg.shape or [])


def make_inputs(spec: KernelSpec, size: dict[str, int], seed: int, variant: int) -> dict[str, cp.ndarray]:
    """Fresh input values (contiguous device arrays in storage dtype) for every in/inout buffer."""
    rng = cp.random.default_rng(seed)
    out = {}
    for arg in spec.args:
        if arg.role in ("in", "inout"):
            shape = shape_of(arg, size)
            n = int(np.prod(shape))
            buf = cp.empty(n, dtype=STORAGE[arg.dtype.value])
            write_values(buf, random_values(arg, n, rng, variant, shape, size), arg.dtype.value)
            out[arg.name] = buf
    return out
