"""etkit.gcpause: the collector off while the block or function runs, back on afterwards (also on error), with
what was made meanwhile counted as old: no young collection walks it, a full one still frees its cycles."""

from __future__ import annotations

import gc
import weakref

import pytest

from etkit.gcpause import gc_paused, paused_gc


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_the_collector_is_off_inside_and_back_on_after():
    seen = []
    paused = gc_paused(lambda: seen.append(gc.isenabled()) or 7)
    assert gc.isenabled()
    assert paused() == 7 and seen == [False] and gc.isenabled()


def test_it_is_back_on_after_an_error_and_stays_off_when_it_was_off():
    def fails() -> None:
        raise ValueError("x")

    with pytest.raises(ValueError):
        gc_paused(fails)()
    assert gc.isenabled()
    gc.disable()
    try:
        gc_paused(lambda: None)()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_nested_pauses_resume_once_at_the_outermost():
    inner = gc_paused(lambda: gc.isenabled())
    assert gc_paused(lambda: (inner(), gc.isenabled()))() == (False, False)
    assert gc.isenabled()


def test_what_was_made_while_paused_is_old_and_its_cycles_are_still_freed():
    freed = []

    def make() -> tuple[list[int], weakref.ref]:
        kept = [1, 2, 3]
        cycle = _Node()
        return kept, weakref.ref(cycle, lambda _: freed.append(True))

    gc.collect()
    kept, ref = gc_paused(make)()
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert id(kept) not in young and any(o is kept for o in gc.get_objects(generation=2))
    assert ref() is not None and not freed  # (a cycle: no young collection reaches it)
    gc.collect(0)
    assert ref() is not None
    gc.collect()
    assert ref() is None and freed == [True]


def test_what_a_pause_allocated_goes_to_the_oldest_generation_and_stays_collectable():
    class Node:
        pass

    gc.collect()
    with paused_gc():
        assert not gc.isenabled()
        kept = [Node() for _ in range(1000)]
        cycle = Node()
        cycle.me = cycle  # type: ignore[attr-defined]
        gone = weakref.ref(cycle)
        del cycle
    assert gc.isenabled()
    young = {id(o) for o in gc.get_objects(0)} | {id(o) for o in gc.get_objects(1)}
    assert not any(id(node) in young for node in kept)  # (no young collection walks them)
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None  # (a full collection still frees a cycle made during the pause)
