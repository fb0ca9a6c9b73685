"""A byte-capped, least-recently-used cache of device arrays: what a job session keeps on the GPU between candidates.

Values are anything whose device arrays :func:`nbytes` can count (an array, or a dict / list / tuple of them,
nested). Entries past the cap are evicted oldest-use first; whoever misses recomputes (the cache never decides
what is correct, it only saves work). No CuPy import: the arrays' own ``nbytes`` is all it reads, so the CPU
tests run it on NumPy arrays.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Hashable


def nbytes(value: Any) -> int:
    """The bytes of the arrays in ``value`` (an array, or a dict / list / tuple of them, nested); other values 0."""
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    n = getattr(value, "nbytes", None)
    return int(n) if isinstance(n, int) else 0


class DeviceCache:
    """LRU of values by key, at most ``cap_bytes`` in all (:func:`nbytes`). A single value larger than the cap is
    never kept (:meth:`put` returns False and the caller uses it once). ``hits``/``misses``/``evictions`` count."""

    def __init__(self, cap_bytes: int):
        if cap_bytes < 0:
            raise ValueError(f"cap_bytes must be >= 0, not {cap_bytes}")
        self.cap_bytes = int(cap_bytes)
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value under ``key`` (now the most recently used), else ``default``."""
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return default
        self.hits += 1
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: Hashable, value: Any) -> bool:
        """Keep ``value`` under ``key`` (replacing any old one), evicting the least recently used past the cap.
        Returns whether it is kept."""
        self.pop(key)
        size = nbytes(value)
        if size > self.cap_bytes:
            return False
        while self._entries and self.bytes + size > self.cap_bytes:
            _, (_, old) = self._entries.popitem(last=False)
            self.bytes -= old
            self.evictions += 1
        self._entries[key] = (value, size)
        self.bytes += size
        return True

    def pop(self, key: Hashable) -> Any:
        """Drop ``key``'s entry; its value, or None."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self.bytes -= entry[1]
        return entry[0]

    def drop(self, match: Callable[[Hashable], bool]) -> int:
        """Drop every entry whose key ``match`` accepts; how many."""
        keys = [k for k in self._entries if match(k)]
        for k in keys:
            self.pop(k)
        return len(keys)

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The cached value, else ``make()`` (kept when it fits)."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            value = make()
            self.put(key, value)
        return value


_MISSING = object()
