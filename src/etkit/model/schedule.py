"""When each node ran: the schedule that analyses read, from trace timestamps or from a simulation.

A :class:`Schedule` holds, per rank, start and end times in integer nanoseconds for every row of that
rank's :class:`~etkit.model.trace.Trace` (rows that never ran are marked in ``ran``). Converted traces
give one through :func:`schedule_from_timestamps`; the simulator returns one too, so every analysis
works the same on measured and simulated jobs. Times are ``int64`` end to end: Unix-epoch nanoseconds
do not fit a float64 exactly (they would round to multiples of 256 ns).
"""

from __future__ import annotations

from dataclasses import field

import numpy as np

from ..records import record
from .job import Job
from .trace import MISSING, Trace

__all__ = ["RankSchedule", "Schedule", "schedule_from_timestamps", "has_timestamps", "as_ns"]


def as_ns(values: np.ndarray) -> np.ndarray:
    """Integer nanoseconds from any numeric array (floats rounded to the nearest ns, NaN as 0)."""
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        return values.astype(np.int64, copy=False)
    return np.rint(np.nan_to_num(values.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)).astype(np.int64)


@record
class RankSchedule:
    """Per trace row: start and end (int64 ns), whether it ran, and optionally the resource a simulator
    put it on (int8: 0 cpu, 1 compute, 2 comm, 3 memory) and, for communication rows, when data began
    to move (``transfer_ns``; before it the row was waiting for a peer, see :mod:`etkit.model.accounting`).
    Float arrays given by a producer are rounded to whole nanoseconds."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    ran: np.ndarray
    resource: np.ndarray | None = None
    transfer_ns: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.start_ns = as_ns(self.start_ns)
        self.end_ns = as_ns(self.end_ns)
        self.ran = np.asarray(self.ran, dtype=bool)
        if self.transfer_ns is not None:
            self.transfer_ns = as_ns(self.transfer_ns)

    @property
    def span(self) -> tuple[int, int]:
        """First start and last end of the rows that ran ((0, 0) when none ran)."""
        if not self.ran.any():
            return 0, 0
        return int(self.start_ns[self.ran].min()), int(self.end_ns[self.ran].max())


@record
class Schedule:
    """Per-rank node times; ``source`` says where they came from ("trace" or "simulation")."""

    ranks: dict[int, RankSchedule]
    source: str
    notes: list[str] = field(default_factory=list)

    @property
    def makespan_ns(self) -> int:
        spans = [s.span for s in self.ranks.values() if s.ran.any()]
        return max(e for _, e in spans) - min(s for s, _ in spans) if spans else 0


def measured_times(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(start_ns, end_ns, precise)`` per row from the recorded times.

    ``start_time_micros``/``duration_micros`` give whole microseconds (and, in converted host ops, self
    time only). Where a converter also wrote ``ts_ns``/``dur_ns`` (the measured start and inclusive
    duration in ns) and they agree with the microsecond fields (a tool that moved the node without
    updating them leaves them stale), those are used; ``precise`` marks those rows.
    """
    start = trace.start.astype(np.int64) * 1000
    end = start + trace.duration.astype(np.int64) * 1000
    ts, dur = trace.ts_ns, trace.dur_ns
    precise = (ts != MISSING) & (dur != MISSING) & (dur >= 0)
    if precise.any():
        precise &= np.abs(ts - start) < 1000
        precise &= dur + 1000 > end - start  # inclusive, never shorter than the self time written
    if precise.any():
        start = np.where(precise, ts, start)
        end = np.where(precise, ts + dur, end)
    return start, end, precise


def _rank_from_timestamps(trace: Trace) -> RankSchedule:
    start, end, _ = measured_times(trace)
    return RankSchedule(start, end, trace.start > 0)


def has_timestamps(trace: Trace) -> bool:
    """Whether the trace carries real start times (producers other than converters leave them 0)."""
    return bool(len(trace)) and bool((trace.start > 0).any())


def schedule_from_timestamps(job: Job) -> Schedule:
    """The schedule recorded in the traces' ``start_time_micros`` / ``duration_micros`` (``ts_ns``/``dur_ns``
    where a converter wrote them)."""
    return Schedule({rank: _rank_from_timestamps(t) for rank, t in job.traces.items()}, source="trace")
