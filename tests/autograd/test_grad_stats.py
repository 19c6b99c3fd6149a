"""grad_stats against a float64 reference: the numbers `diff` compares across ranks."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from distvlog.nodelog import grad_stats


@settings(max_examples=60, deadline=None)
@given(
    size=st.sampled_from([1, 7, 4096, (1 << 18) + 3, 600_001]),
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**32 - 1),
    n_bad=st.integers(0, 3),
)
def test_stats_match_a_float64_reference(size, dtype, seed, n_bad):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(size) * 10 ** rng.uniform(-6, 6)).astype(dtype)
    bad = rng.choice(size, min(n_bad, size), replace=False)
    a[bad] = rng.choice([np.nan, np.inf, -np.inf], bad.size)
    with np.errstate(all="ignore"):
        s = grad_stats(a)
    ref = a.astype(np.float64)
    finite = ref[np.isfinite(ref)]
    assert s["nan"] == np.isnan(ref).sum() and s["inf"] == np.isinf(ref).sum()
    assert s["checksum"] == xxhash.xxh3_64_hexdigest(a.tobytes())
    if finite.size == 0:
        assert np.isnan(s["mean"]) and np.isnan(s["min"]) and s["norm"] == 0.0
        return
    tol = 1e-4 if dtype == "float32" else 1e-10
    assert s["min"] == finite.min() and s["max"] == finite.max()
    assert s["norm"] == pytest.approx(np.sqrt((finite**2).sum()), rel=tol)
    scale = np.abs(finite).mean()  # the mean of a zero-centred sample is tiny: compare on the values' scale
    assert abs(s["mean"] - finite.mean()) <= tol * scale


def test_a_strided_gradient_is_described_in_c_order():
    a = np.arange(12, dtype=np.float64).reshape(3, 4).T  # a transposed view
    s = grad_stats(a)
    assert (s["shape"], s["mean"], s["min"], s["max"]) == ("4x3", 5.5, 0.0, 11.0)
    assert s["checksum"] == xxhash.xxh3_64_hexdigest(np.ascontiguousarray(a).tobytes())


def test_an_integer_gradient_does_not_wrap_around():
    a = np.array([50_000, 3], np.int32)  # its square wraps around in int32
    s = grad_stats(a)
    assert s["norm"] == pytest.approx(np.hypot(50_000, 3)) and (s["min"], s["max"], s["mean"]) == (3, 50_000, 25_001.5)
    assert s["dtype"] == "int32" and s["checksum"] == xxhash.xxh3_64_hexdigest(a.tobytes())


@pytest.mark.parametrize(
    "a",
    [
        np.full(1000, 20.0, np.float16),  # squares beyond float16's 65504
        np.array([1e20, -1e20, 3.0], np.float32),
        np.array([1e200, -1e200], np.float64),
        np.array([1e200, np.nan, -np.inf, 1e200], np.float64),
    ],
    ids=str,
)
def test_squares_beyond_the_dtype_range_still_give_the_finite_norm(a):
    with np.errstate(all="ignore"):
        s = grad_stats(a)
    ref = a.astype(np.float64)
    finite = ref[np.isfinite(ref)]
    assert (s["nan"], s["inf"]) == (np.isnan(ref).sum(), np.isinf(ref).sum())  # (diff said "clean": inf=0)
    assert s["norm"] == pytest.approx(
        np.abs(finite).max() * np.sqrt(((finite / np.abs(finite).max()) ** 2).sum()), rel=1e-6
    )


def test_the_mean_of_many_equal_float32_values_is_that_value():
    a = np.full(10**6, 0.1, np.float32)  # float32 partial sums drift below it: a mean < min
    s = grad_stats(a)
    assert s["min"] == s["max"] == s["mean"] == float(np.float32(0.1))


def test_level_5_has_no_descriptive_statistics():
    s = grad_stats(np.ones(3), detail=False)
    assert set(s) == {"shape", "dtype", "norm", "nan", "inf"}
