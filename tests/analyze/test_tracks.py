"""Track layout: the one-lane array path of ``_lanes`` gives exactly what its lane-by-lane sweep gives."""

from __future__ import annotations

import random

import numpy as np
import pytest

from etkit.analyze import tracks


def _intervals(rng: random.Random, nested: bool) -> list[tuple[int, int]]:
    """A random tree of intervals (zero-length ones, shared starts and ends, identical twins), or any overlap."""
    if not nested:
        return [(a, a + rng.choice([0, 0, 1, 2, 5, 20])) for a in (rng.randint(0, 60) for _ in range(rng.randint(1, 25)))]

    def tree(lo: int, hi: int, depth: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        x = lo
        while x <= hi and len(out) < 5:
            a = x + rng.choice([0, 0, 1, 4])
            if a > hi:
                break
            b = min(hi, a + rng.choice([0, 0, 1, 3, 10, 40]))
            out.append((a, b))
            if rng.random() < 0.15:
                out.append((a, b))
            if depth < 4 and b > a:
                out += tree(a, b, depth + 1)
            x = b + rng.choice([0, 0, 1])
        return out
    return tree(0, 200, 0)


def _case(rng: random.Random):  # type: ignore[no-untyped-def]
    t, s, e = [], [], []
    for track in range(rng.randint(1, 3)):
        for a, b in _intervals(rng, rng.random() < 0.7):
            t.append(track)
            s.append(a)
            e.append(b)
    t_, s_, e_ = np.array(t, dtype=np.int32), np.array(s, dtype=np.int64), np.array(e, dtype=np.int64)
    order = np.lexsort((-(e_ - s_), s_, t_))  # as rank_tracks sorts: track, start, longer first
    rows = np.arange(len(t), dtype=np.int64)[::-1] + 100
    nestable = np.array([rng.random() < 0.9 for _ in t], dtype=bool) if rng.random() < 0.5 else np.ones(len(t), bool)
    return rows, t_[order], s_[order], e_[order], nestable


@pytest.mark.parametrize("seed", range(4))
def test_one_lane_tracks_by_arrays_equal_the_sweep(monkeypatch, seed):
    rng = random.Random(seed)
    cases = [_case(rng) for _ in range(300)]
    taken = [tracks._nested_track(s[t == t[0]], e[t == t[0]], n[t == t[0]]) is not None for _, t, s, e, n in cases]
    fast = [tracks._lanes(*c) for c in cases]
    monkeypatch.setattr(tracks, "_nested_track", lambda s, e, nestable: None)
    for c, got in zip(cases, fast):
        want = tracks._lanes(*c)
        for a, b in zip((got[0], got[1], *got[2]), (want[0], want[1], *want[2])):
            assert a.dtype == b.dtype and a.tolist() == b.tolist()
    assert 0.3 < sum(taken) / len(taken) < 0.95  # both paths were exercised
