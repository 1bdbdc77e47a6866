"""Grouping rows by an integer key, as ``np.unique(keys, return_inverse=True)`` does, without its sort where the
keys are small (name indices times kinds, node types, thread ids): a count per possible key instead."""

from __future__ import annotations

import numpy as np

__all__ = ["unique_inverse"]

#: Keys up to this many times the number of rows (plus a margin) are counted densely.
_DENSE_FACTOR, _DENSE_MARGIN = 4, 1 << 16


def unique_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of a 1-D integer array: the sorted distinct keys and, per row,
    the index of its key among them (the same values and dtypes)."""
    keys = np.asarray(keys)
    if keys.ndim != 1 or keys.dtype.kind not in "iu" or not len(keys):
        return np.unique(keys, return_inverse=True)
    low, high = int(keys.min()), int(keys.max())
    if low < 0 or high >= _DENSE_FACTOR * len(keys) + _DENSE_MARGIN:
        return np.unique(keys, return_inverse=True)
    present = np.bincount(keys, minlength=high + 1) > 0
    uniq = np.flatnonzero(present).astype(keys.dtype)
    index = np.cumsum(present, dtype=np.intp) - 1
    return uniq, index[keys]
