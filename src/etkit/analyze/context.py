"""What every analysis of one job needs, computed once: schedule, node kinds, tracks, cross-rank links.

Each analysis function takes a :class:`~etkit.model.job.Job` and an optional schedule; when several
run on the same job (``etkit analyze``, the report) they share one :class:`AnalysisContext`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..executor import Executor, SerialExecutor
from ..model.job import Job
from ..model.schedule import RankSchedule, Schedule
from ..model.trace import Trace
from .crossrank import CrossRank, match_cross_rank
from .kinds import node_kinds, time_kinds
from .timing import SOURCE_TEXT, resolve_schedule
from .tracks import RankTracks, rank_tracks

__all__ = ["AnalysisContext", "RankView", "prepare"]


@dataclass
class RankView:
    """One rank's trace with its schedule, kinds and tracks."""

    rank: int
    trace: Trace
    sched: RankSchedule
    kinds: np.ndarray
    tracks: RankTracks

    @property
    def span(self) -> tuple[float, float]:
        """First start and last end of the rows that ran (0, 0 when none ran)."""
        ran = self.sched.ran
        if not ran.any():
            return 0.0, 0.0
        return float(self.sched.start_ns[ran].min()), float(self.sched.end_ns[ran].max())

    def durations(self) -> np.ndarray:
        """Scheduled duration per row in ns (0 for rows that did not run)."""
        return np.where(self.sched.ran, self.sched.end_ns - self.sched.start_ns, 0.0)


@dataclass
class AnalysisContext:
    job: Job
    schedule: Schedule
    cross: CrossRank
    views: dict[int, RankView]

    @property
    def source_text(self) -> str:
        return SOURCE_TEXT.get(self.schedule.source, self.schedule.source)

    @property
    def origin_ns(self) -> float:
        """Earliest start over all ranks (timelines and tables count from here)."""
        starts = [v.span[0] for v in self.views.values() if v.sched.ran.any()]
        return min(starts) if starts else 0.0


def _view(item: tuple[int, Trace, RankSchedule, bool]) -> RankView:
    rank, trace, sched, nesting = item
    kinds = node_kinds(trace)
    tracks = rank_tracks(trace, sched, kinds, nesting=nesting)
    return RankView(rank, trace, sched, time_kinds(trace, kinds), tracks)


def prepare(job: Job, schedule: Schedule | None = None, *, executor: Executor | None = None,
            context: AnalysisContext | None = None) -> AnalysisContext:
    """The shared context for analysing ``job`` (``context`` is returned as is when given)."""
    if context is not None:
        return context
    cross = match_cross_rank(job)
    schedule = resolve_schedule(job, schedule, cross=cross)
    missing = [r for r in job.traces if r not in schedule.ranks]
    if missing:
        from ..errors import UsageError

        raise UsageError(f"schedule has no times for rank(s) {missing[:8]}")
    executor = executor or SerialExecutor()
    nesting = schedule.source == "trace"  # only profiled times nest calls inside calls
    items = [(r, job.traces[r], schedule.ranks[r], nesting) for r in sorted(job.traces)]
    views = executor.map(_view, items, desc="tracks")
    return AnalysisContext(job, schedule, cross, {v.rank: v for v in views})
