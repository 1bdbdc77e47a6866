"""Discrete-event core shared by every layer of the simulator: one time-ordered queue of typed events.

An :class:`Event` is a time, an insertion number (events at the same time run in the order they were
scheduled, as in ASTRA-sim's analytical event queue) and the bound method that handles it with its
argument: the handler names the kind of event (``Link.on_free``, ``RankSys.run_tick``, ...), so no
layer dispatches on an event-type code.

:class:`RankTicks` reproduces how ASTRA-sim's system layer batches a rank's own events: everything a
rank registers for one tick runs together, in registration order, at the place in the global queue
where the first of them was scheduled (``Sys::register_event`` / ``Sys::call_events``). Keeping that
batching keeps ASTRA-sim's order of same-time events, which decides ties (which chunk gets a queue
slot or a link first).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["Event", "EventQueue", "RankTicks"]


class Event(NamedTuple):
    """One scheduled event: ``handler(arg)`` runs at ``time`` (ns); ``seq`` orders equal times."""

    time: float
    seq: int
    handler: Callable[[Any], None]
    arg: Any


class EventQueue:
    """The simulation clock and its pending events."""

    __slots__ = ("_heap", "_seq", "now", "processed")

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0
        self.now = 0.0
        self.processed = 0

    def at(self, time: float, handler: Callable[[Any], None], arg: Any = None) -> None:
        """Schedule ``handler(arg)`` at ``time`` (never before now)."""
        self._seq += 1
        heapq.heappush(self._heap, Event(time, self._seq, handler, arg))

    def after(self, delay: float, handler: Callable[[Any], None], arg: Any = None) -> None:
        self.at(self.now + delay, handler, arg)

    def __len__(self) -> int:
        return len(self._heap)

    def run(self, until: float | None = None) -> None:
        """Process events in time order (up to ``until`` inclusive when given)."""
        heap, pop = self._heap, heapq.heappop
        count = 0
        while heap:
            if until is not None and heap[0][0] > until:
                break
            time, _, handler, arg = pop(heap)
            self.now = time
            count += 1
            handler(arg)
        self.processed += count


class RankTicks:
    """One rank's batched events (ASTRA-sim's per-``Sys`` event lists keyed by tick)."""

    __slots__ = ("queue", "pending")

    def __init__(self, queue: EventQueue) -> None:
        self.queue = queue
        self.pending: dict[float, list[tuple[Callable[[Any], None], Any]]] = {}

    def register(self, delay: float, handler: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``handler(arg)`` ``delay`` ns from now, in this rank's batch of that tick."""
        when = self.queue.now + delay
        batch = self.pending.get(when)
        if batch is None:
            self.pending[when] = [(handler, arg)]
            self.queue.at(when, self._run, when)
        else:
            batch.append((handler, arg))

    def _run(self, when: float) -> None:
        batch = self.pending[when]
        i = 0
        while i < len(batch):  # handlers may register more for this very tick: they run in this batch
            handler, arg = batch[i]
            handler(arg)
            i += 1
        del self.pending[when]
