"""etkit.arrays against numpy: ``distinct`` and ``unique_inverse`` give what ``np.unique`` gives."""

import subprocess
import sys

import numpy as np

from etkit.arrays import distinct, percentile, unique_inverse


def test_distinct_is_numpys():
    rng = np.random.default_rng(5)
    cases = [rng.integers(0, 50, 1000), rng.integers(-(1 << 62), 1 << 62, 500), rng.integers(-5, 5, (10, 10)),
             np.zeros(3, dtype=int), np.array([], dtype=int), np.array([7]), np.array([3, 1, 3, 2, 1])]
    for dtype in (np.int64, np.int32, np.int8, np.uint8, np.uint64, np.bool_):
        for values in cases:
            values = values.astype(dtype)
            want, got = np.unique(values), distinct(values)
            assert want.dtype == got.dtype and np.array_equal(want, got), (dtype, values[:5])
    for values in (np.array([b"b", b"a", b"b"]), np.array(["x", "", "x", "y"]), np.array([1.5, np.nan, 1.5, np.nan]),
                   np.array([0.0, -0.0]), [4, 2, 4]):
        want, got = np.unique(values), distinct(values)
        assert want.dtype == got.dtype and np.array_equal(want, got, equal_nan=want.dtype.kind == "f")


def test_percentile_is_numpys_to_the_bit():
    rng = np.random.default_rng(9)
    arrays = [rng.integers(0, 10**9, n) for n in range(1, 60)] + [rng.integers(-(1 << 40), 1 << 40, 333)]
    arrays += [rng.standard_normal(n) * 1e6 for n in (1, 2, 3, 10, 101)] + [np.array([-0.0, 0.0]), np.array([-0.0])]
    arrays += [np.array([5], dtype=np.uint8), np.array([3, 250, 7], dtype=np.uint8), np.array([1.0, np.nan, 2.0]),
               np.arange(12, dtype=np.int32).reshape(3, 4)]
    for values in arrays:
        for q in (0, 1, 5, 25, 50, 75, 90, 95, 99, 99.9, 100, 33.3, 62.5):
            want, got = float(np.percentile(values, q)), percentile(values, q)
            assert (want == got and np.signbit(want) == np.signbit(got)) or (np.isnan(want) and np.isnan(got)), \
                (values[:4], q, want, got)


def test_they_leave_numpy_ma_unimported():
    code = ("import sys, numpy as np; from etkit.arrays import distinct, percentile; distinct(np.array([2, 1, 2])); "
            "percentile(np.array([3, 1, 2]), 95); print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_unique_inverse_is_numpys():
    rng = np.random.default_rng(11)
    cases = [rng.integers(0, 50, 1000), rng.integers(0, 10**12, 1000), rng.integers(-5, 5, 100), np.zeros(3, dtype=int),
             np.array([], dtype=int), np.array([7])]
    for dtype in (np.int64, np.int32, np.int8, np.uint8, np.uint64):
        for keys in cases:
            keys = keys.astype(dtype)
            want, got = np.unique(keys, return_inverse=True), unique_inverse(keys)
            for a, b in zip(want, got):
                assert a.dtype == b.dtype and np.array_equal(a, b), (dtype, keys[:5])
