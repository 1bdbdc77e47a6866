"""Kineto nesting: the array path for a thread whose calls nest gives exactly what the stack walk gives."""

from __future__ import annotations

import importlib
import random
import types

import numpy as np
import pytest

link = importlib.import_module("etkit.pytorch.link")


def _calls(rng: random.Random, lo: float, hi: float, depth: int, out: list) -> None:
    """A random nest of (start, duration): zero-length calls, shared starts and ends, identical twins."""
    x = lo
    while x <= hi and len(out) < 300:
        a = x + rng.choice([0, 0, 0.5, 1, 4])
        if a > hi:
            break
        b = min(hi, a + rng.choice([0, 0, 1, 3, 10, 40]))
        out.append((a, b - a))
        if rng.random() < 0.1:
            out.append((a, b - a))
        if depth < 4 and b > a and rng.random() < 0.7:
            _calls(rng, a, b, depth + 1, out)
        x = b + rng.choice([0, 0, 1])


def _trace(rng: random.Random) -> types.SimpleNamespace:
    cpu: list[tuple[float, float, int]] = []
    launch: list[tuple[float, float, int]] = []
    for tid in range(rng.randint(1, 3)):
        events: list[tuple[float, float]] = []
        _calls(rng, 0, 100, 0, events)
        if rng.random() < 0.3:  # calls that outlast their holder: the walk clips them
            events += [(rng.randint(0, 100), rng.choice([0, 5, 30])) for _ in range(3)]
        for start, dur in events:
            (launch if rng.random() < 0.3 else cpu).append((1.7e15 + start, float(dur), tid))

    def cols(events: list, k: int, dtype: type) -> np.ndarray:
        return np.array([e[k] for e in events], dtype=dtype)
    return types.SimpleNamespace(cpu_ts=cols(cpu, 0, np.float64), cpu_dur=cols(cpu, 1, np.float64),
                                 cpu_tid=cols(cpu, 2, np.int64), launch_ts=cols(launch, 0, np.float64),
                                 launch_dur=cols(launch, 1, np.float64), launch_tid=cols(launch, 2, np.int64))


@pytest.mark.parametrize("seed", range(3))
def test_nested_threads_by_arrays_equal_the_walk(monkeypatch, seed):
    rng = random.Random(seed)
    traces = [_trace(rng) for _ in range(300)]
    real = link._nested_thread
    taken: list[bool] = []
    monkeypatch.setattr(link, "_nested_thread", lambda *a: taken.append((r := real(*a)) is not None) or r)
    fast = [link._nesting(t) for t in traces]
    monkeypatch.setattr(link, "_nested_thread", lambda *a: None)
    for t, got in zip(traces, fast):
        for a, b in zip(got, link._nesting(t)):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert 0.5 < sum(taken) / len(taken) < 0.95  # both paths were exercised


def _walks_into_a_loop(parent: list[int], start: int) -> bool:
    seen, j = set(), start
    while j >= 0 and j not in seen:
        seen.add(j)
        j = parent[j]
    return j >= 0


def test_a_parent_cycle_is_found_by_pointer_doubling():
    rng = random.Random(1)
    for _ in range(2000):
        n = rng.randint(0, 40)
        parent = [rng.randrange(i) if i and rng.random() < 0.8 else -1 for i in range(n)]  # a forest
        if n and rng.random() < 0.4:
            parent[rng.randrange(n)] = rng.randrange(n)  # perhaps a cycle
        found = any(_walks_into_a_loop(parent, i) for i in range(n))
        assert link._has_cycle(np.array(parent, dtype=np.int64)) == found
