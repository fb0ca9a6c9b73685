"""Read section names and sizes from a cubin (ELF64), without a GPU or cuobjdump."""
from __future__ import annotations

import hashlib
import struct

_NOBITS = 8  # SHT_NOBITS: a section with a size and no bytes in the file (shared memory, .bss)


def _headers(cubin: bytes) -> list[tuple[str, int, int, int]]:
    """(name, type, offset, size) of every section. Raises ``ValueError`` for data that is not a little-endian ELF64 file."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a little-endian ELF64 cubin")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    str_off, str_size = headers[shstrndx][4], headers[shstrndx][5]
    names = cubin[str_off : str_off + str_size]
    out = []
    for name_off, kind, _flags, _addr, offset, size in headers:
        end = names.index(b"\0", name_off)
        out.append((names[name_off:end].decode(errors="replace"), kind, offset, size))
    return out


def sections(cubin: bytes) -> dict[str, int]:
    """Section name -> size in bytes. Raises ``ValueError`` for data that is not a little-endian ELF64 file."""
    return {name: size for name, _kind, _offset, size in _headers(cubin)}


def is_elf(image: bytes) -> bool:
    """Whether ``image`` is an ELF file (a cubin), not PTX text left to the driver's JIT."""
    return image[:4] == b"\x7fELF"


def code_digest(cubin: bytes) -> str:
    """A hash of what the GPU executes: the machine code (``.text.*``), constant data, global and
    shared memory sizes. Two cubins with equal digests run the same instructions on the same data
    layout, even when their metadata differ (e.g. a ``-maxrregcount`` above what ptxas used is
    recorded in ``.nv.info`` but changes no instruction). A PTX image (no ptxas: the driver compiles
    it at load) is hashed whole. 16 hex digits.
    """
    if not is_elf(cubin):
        return hashlib.sha256(cubin).hexdigest()[:16]
    h = hashlib.sha256()
    for name, kind, offset, size in sorted(_headers(cubin)):
        if name.startswith((".text.", ".nv.constant", ".nv.global", ".nv.shared", ".nv.local")):
            h.update(f"{name}:{size}:".encode())
            if kind != _NOBITS:
                h.update(cubin[offset : offset + size])
    return h.hexdigest()[:16]


def mutable_global_bytes(cubin: bytes) -> int:
    """Bytes of writable device globals (``.nv.global`` and ``.nv.global.init`` sections) in a cubin.

    ``__device__`` variables land there whatever the source spelling (macros, ``const volatile``
    written through ``const_cast``, variable templates); ``__constant__`` data does not.
    """
    return sum(size for name, size in sections(cubin).items() if name.startswith(".nv.global"))


def entry_names(cubin: bytes) -> list[str]:
    """The (lowered) names of the kernels in a cubin: every ``.nv.info.NAME`` section, which ptxas writes
    for entry functions only. Raises ``ValueError`` for data that is not a little-endian ELF64 file."""
    return [name.removeprefix(".nv.info.") for name, _kind, _offset, _size in _headers(cubin) if name.startswith(".nv.info.")]
