"""Read section names and sizes from a cubin (ELF64), without a GPU or cuobjdump."""
from __future__ import annotations

import struct


def sections(cubin: bytes) -> dict[str, int]:
    """Section name -> size in bytes. Raises ``ValueError`` for data that is not a little-endian ELF64 file."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a little-endian ELF64 cubin")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    str_off, str_size = headers[shstrndx][4], headers[shstrndx][5]
    names = cubin[str_off : str_off + str_size]
    out = {}
    for name_off, _type, _flags, _addr, _offset, size in headers:
        end = names.index(b"\0", name_off)
        out[names[name_off:end].decode(errors="replace")] = size
    return out


def mutable_global_bytes(cubin: bytes) -> int:
    """Bytes of writable device globals (``.nv.global`` and ``.nv.global.init`` sections) in a cubin.

    ``__device__`` variables land there whatever the source spelling (macros, ``const volatile``
    written through ``const_cast``, variable templates); ``__constant__`` data does not.
    """
    return sum(size for name, size in sections(cubin).items() if name.startswith(".nv.global"))
