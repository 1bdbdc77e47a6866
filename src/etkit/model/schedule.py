"""When each node ran: the schedule that analyses read, from trace timestamps or from a simulation.

A :class:`Schedule` holds, per rank, start and end times in nanoseconds for every row of that rank's
:class:`~etkit.model.trace.Trace` (NaN-free; rows that never ran are marked in ``ran``). Converted
traces give one through :func:`schedule_from_timestamps`; the simulator returns one too, so every
analysis works the same on measured and simulated jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .job import Job
from .trace import Trace

__all__ = ["RankSchedule", "Schedule", "schedule_from_timestamps"]


@dataclass
class RankSchedule:
    start_ns: np.ndarray  # float64 per trace row
    end_ns: np.ndarray  # float64 per trace row
    ran: np.ndarray  # bool per trace row
    resource: np.ndarray | None = None  # optional int8 per row: 0 cpu, 1 compute, 2 comm, 3 memory


@dataclass
class Schedule:
    """Per-rank node times; ``source`` says where they came from ("trace" or "simulation")."""

    ranks: dict[int, RankSchedule]
    source: str
    notes: list[str] = field(default_factory=list)

    @property
    def makespan_ns(self) -> float:
        ends = [float(s.end_ns[s.ran].max()) for s in self.ranks.values() if s.ran.any()]
        starts = [float(s.start_ns[s.ran].min()) for s in self.ranks.values() if s.ran.any()]
        return max(ends) - min(starts) if ends else 0.0


def _rank_from_timestamps(trace: Trace) -> RankSchedule:
    start = trace.start.astype(np.float64) * 1000.0
    end = start + trace.duration.astype(np.float64) * 1000.0
    ran = trace.start > 0
    return RankSchedule(start, end, ran)


def has_timestamps(trace: Trace) -> bool:
    """Whether the trace carries real start times (producers other than converters leave them 0)."""
    return bool(len(trace)) and bool((trace.start > 0).any())


def schedule_from_timestamps(job: Job) -> Schedule:
    """The schedule recorded in the traces' ``start_time_micros`` / ``duration_micros``."""
    return Schedule({rank: _rank_from_timestamps(t) for rank, t in job.traces.items()}, source="trace")
