"""The worker's device cache (harness/device_cache.py) on NumPy arrays: byte cap, least recently used evicted first,
values too big never kept, nested values counted."""
from __future__ import annotations

import numpy as np
import pytest

from ptxfactory.harness.device_cache import DeviceCache, nbytes


def _mb(n: int) -> np.ndarray:
    return np.zeros(n << 20, np.uint8)


def test_nbytes_counts_nested_arrays_only():
    assert nbytes({"a": _mb(1), "b": [_mb(2), (_mb(1), "text", 7)]}) == 4 << 20
    assert nbytes("text") == 0 and nbytes(None) == 0


def test_least_recently_used_goes_first_past_the_cap():
    cache = DeviceCache(3 << 20)
    for key in "abc":
        assert cache.put(key, {"out": _mb(1)})
    assert cache.bytes == 3 << 20
    cache.get("a")  # a is now the most recently used
    cache.put("d", _mb(1))
    assert "b" not in cache and {"a", "c", "d"} <= {k for k in "abcd" if k in cache}
    assert cache.evictions == 1 and cache.bytes == 3 << 20
    cache.put("e", _mb(2))  # the two least recently used go: c, then a
    assert len(cache) == 2 and "d" in cache and "e" in cache and cache.bytes == 3 << 20


def test_a_value_over_the_cap_is_not_kept_and_replacing_frees_the_old_bytes():
    cache = DeviceCache(1 << 20)
    assert not cache.put("big", _mb(2)) and "big" not in cache and cache.bytes == 0
    cache.put("k", np.zeros(1000, np.uint8))
    cache.put("k", np.zeros(10, np.uint8))
    assert cache.bytes == 10 and len(cache) == 1


def test_get_or_make_computes_once_and_again_after_eviction():
    cache = DeviceCache(1 << 20)
    made = []

    def make():
        made.append(1)
        return np.zeros(600 << 10, np.uint8)

    first = cache.get_or_make("x", make)
    assert cache.get_or_make("x", make) is first and len(made) == 1 and cache.hits == 1
    cache.put("y", np.zeros(600 << 10, np.uint8))  # evicts x
    assert cache.get_or_make("x", make) is not first and len(made) == 2
    assert cache.drop(lambda k: k in ("x", "y")) == 1 and cache.bytes == 0  # y was evicted by x's return


def test_negative_cap_is_refused():
    with pytest.raises(ValueError):
        DeviceCache(-1)
