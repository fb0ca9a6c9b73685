"""The output comparison is exact where exactness is defined (runs on NumPy here, CuPy in the worker)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxfactory.harness.buffers import POISON_BITS
from ptxfactory.harness.compare import max_abs_error, mismatches


def test_integers_compare_exactly_in_their_dtype():
    assert mismatches(np.array([16777217], np.int32), np.array([16777216], np.int32), "i32", 1e-2, 1e-2).all()
    assert mismatches(np.array([2**40 + 1], np.int64), np.array([2**40], np.int64), "i64", 1e-2, 1e-2).all()
    assert not mismatches(np.array([2**40 + 1], np.int64), np.array([2**40 + 1], np.int64), "i64", 0, 0).any()
    assert max_abs_error(np.array([2**40 + 1], np.int64), np.array([2**40], np.int64), "i64") == 1.0


def test_f64_compares_in_f64():
    a, b = np.array([1.0 + 1e-9]), np.array([1.0])
    assert mismatches(a, b, "f64", 0, 0).all()
    assert not mismatches(a, b, "f64", 1e-8, 0).any()


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_identical_infinities_match_and_opposite_ones_do_not(dtype):
    t = np.float32 if dtype == "f32" else np.float64
    got = np.array([np.inf, -np.inf, np.inf], t)
    want = np.array([np.inf, -np.inf, -np.inf], t)
    assert list(mismatches(got, want, dtype, 1e-2, 1e-2)) == [False, False, True]


def test_bf16_bits_compare_as_values():
    one, one_and_a_bit = np.array([0x3F80], np.uint16), np.array([0x3F81], np.uint16)  # 1.0 and 1.0078125
    assert not mismatches(one_and_a_bit, one, "bf16", 1e-2, 0).any()
    assert mismatches(one_and_a_bit, one, "bf16", 1e-3, 0).all()


def test_poison_left_where_the_reference_computed_nan_is_wrong():
    bits, value = POISON_BITS["f32"]
    poison = np.array([value], bits).view(np.float32)
    computed_nan = np.array([np.nan], np.float32)
    assert mismatches(poison, computed_nan, "f32", 1e-2, 1e-2).all()  # never written
    assert not mismatches(computed_nan, computed_nan, "f32", 1e-2, 1e-2).any()  # a NaN the kernel wrote
    assert not mismatches(poison, poison.copy(), "f32", 1e-2, 1e-2).any()  # both left it unwritten
    assert mismatches(computed_nan, np.array([1.0], np.float32), "f32", 1e-2, 1e-2).all()
    assert mismatches(np.array([1.0], np.float32), computed_nan, "f32", 1e-2, 1e-2).all()


def test_tolerance_is_atol_plus_rtol_times_the_reference():
    want = np.array([100.0, 0.0], np.float32)
    assert not mismatches(np.array([100.9, 0.009], np.float32), want, "f32", 1e-2, 1e-2).any()
    assert mismatches(np.array([101.2, 0.0], np.float32), want, "f32", 1e-2, 1e-2)[0]


def test_magnitude_ratio_is_the_rms_ratio_at_least_one():
    from ptxfactory.harness.compare import magnitude_ratio

    rng = np.random.default_rng(0)
    small = rng.normal(size=10000).astype(np.float32)
    big = (4096 * rng.normal(size=10000)).astype(np.float32)
    assert 3900 < magnitude_ratio(big, small, "f32") < 4300
    assert magnitude_ratio(small, big, "f32") == 1.0  # never below 1: a tolerance is only widened
    bits = lambda v: (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731  (bf16 by truncation)
    assert 3900 < magnitude_ratio(bits(big), bits(small), "bf16") < 4300
    with_nan = big.copy()
    with_nan[::7] = np.nan  # non-finite elements left out
    assert 3900 < magnitude_ratio(with_nan, small, "f32") < 4300
    assert magnitude_ratio(big, np.zeros(4, np.float32), "f32") == 1.0
    assert magnitude_ratio(np.array([5], np.int32), np.array([1], np.int32), "i32") == 1.0
