"""format.encode.copy_spans against a slice per span, on every path it takes (one slice, a byte mask, int64 indices)."""

from __future__ import annotations

import numpy as np
import pytest

from etkit.format.encode import copy_spans


def _by_slices(out: np.ndarray, pos: np.ndarray, blob: np.ndarray, src: np.ndarray, lengths: np.ndarray) -> None:
    for p, s, k in zip(pos.tolist(), src.tolist(), lengths.tolist(), strict=True):
        out[p:p + k] = blob[s:s + k]


def _spans(rng: np.random.Generator, n: int, gap: tuple[int, int], size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Starts and lengths of ``n`` spans in order, ``gap`` bytes apart (some lengths 0)."""
    lengths = rng.integers(*size, n)
    gaps = rng.integers(*gap, n)
    return np.cumsum(gaps + lengths) - lengths, lengths


@pytest.mark.parametrize("dst_gap, src_gap, size, shuffled, indexed", [
    ((0, 1), (0, 1), (1, 9), False, 0),  # both sides one run: slices
    ((0, 4), (0, 3), (0, 30), False, 0),  # small gaps on both sides: byte masks
    ((0, 4), (200, 400), (1, 30), False, 1),  # a sparse source: indices, a dense destination: a mask
    ((100, 900), (0, 2), (0, 12), False, 1),  # a sparse destination
    ((0, 3), (0, 3), (1, 20), True, 1),  # a source in any order, spans repeated and overlapping
])
def test_copy_spans_writes_what_a_slice_per_span_writes(monkeypatch, dst_gap, src_gap, size, shuffled, indexed) -> None:
    import etkit.format.encode as encode

    calls = []
    index = encode._span_index
    monkeypatch.setattr(encode, "_span_index", lambda *a: calls.append(1) or index(*a))
    rng = np.random.default_rng(5)
    for trial in range(20):
        n = int(rng.integers(1, 300))
        pos, lengths = _spans(rng, n, dst_gap, size)
        src = np.cumsum(rng.integers(*src_gap, n) + lengths) - lengths
        if shuffled:
            src = rng.permutation(src)[rng.integers(0, n, n)]
        blob = rng.integers(0, 256, int((src + lengths).max()) + 5, dtype=np.uint8)
        expected = np.zeros(int((pos + lengths).max()) + 5, dtype=np.uint8)
        got = expected.copy()
        _by_slices(expected, pos, blob, src, lengths)
        copy_spans(got, pos, blob, src, lengths)
        assert (got == expected).all(), trial
    assert bool(calls) == bool(indexed)  # the path the case is for ran (int64 indices, or none)
