"""What every analysis of one job needs, computed once: schedule, node kinds, tracks, cross-rank links,
and when each communication node could start moving data (before that it waited for a peer).

Each analysis function takes a :class:`~etkit.model.job.Job` and an optional schedule; when several
run on the same job (``etkit analyze``, the report) they share one :class:`AnalysisContext`.
"""

from __future__ import annotations

import os
from dataclasses import field

import numpy as np

from ..arrays import distinct
from ..executor import Executor, SerialExecutor, in_client
from ..model.job import Job
from ..model.schedule import RankSchedule, Schedule
from ..model.trace import Trace
from ..records import record
from .crossrank import CrossRank, match_cross_rank
from .kinds import node_kinds, time_kinds
from .roles import RoleClass, role_classes
from .timing import SOURCE_TEXT, dependency_rows, resolve_schedule
from .tracks import RankTracks, rank_tracks

__all__ = ["AnalysisContext", "RankView", "prepare"]

#: ``AnalysisContext.cache`` key of every rank's dependency rows.
DEPENDENCY_ROWS = "dependency_rows"


@record
class RankView:
    """One rank's trace with its schedule, kinds and tracks."""

    rank: int
    trace: Trace
    sched: RankSchedule
    kinds: np.ndarray
    tracks: RankTracks
    # int64 per row: when data could move (= start for non-comm rows); set by prepare() for every view
    transfer: np.ndarray = None  # type: ignore[assignment]

    @property
    def span(self) -> tuple[int, int]:
        """First start and last end of the rows that ran (0, 0 when none ran)."""
        return self.sched.span

    def durations(self) -> np.ndarray:
        """Scheduled duration per row in int64 ns (0 for rows that did not run)."""
        return np.where(self.sched.ran, self.sched.end_ns - self.sched.start_ns, 0)


@record
class AnalysisContext:
    job: Job
    schedule: Schedule
    cross: CrossRank
    views: dict[int, RankView]

    _roles: list | None = None
    cache: dict = field(default_factory=dict)  # derived per-job tables analyses share (e.g. analyze.gpu's)

    def dependency_rows(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """Rank ``rank``'s :func:`etkit.analyze.timing.dependency_rows`, computed once (the schedule without
        timestamps and the critical path both walk them)."""
        rows = self.cache.setdefault(DEPENDENCY_ROWS, {})
        if rank not in rows:
            rows[rank] = dependency_rows(self.views[rank].trace)
        return rows[rank]

    @property
    def roles(self) -> list[RoleClass]:
        """Classes of ranks that do the same work (:mod:`.roles`), computed on first use."""
        if self._roles is None:
            self._roles = role_classes(self.job)
        return self._roles

    @property
    def source_text(self) -> str:
        return SOURCE_TEXT.get(self.schedule.source, self.schedule.source)

    @property
    def origin_ns(self) -> int:
        """Earliest start over all ranks (timelines and tables count from here)."""
        starts = [v.span[0] for v in self.views.values() if v.sched.ran.any()]
        return min(starts) if starts else 0


def _view(item: tuple[int, Trace, RankSchedule, bool]) -> RankView:
    rank, trace, sched, nesting = item
    kinds = node_kinds(trace)
    tracks = rank_tracks(trace, sched, kinds, nesting=nesting)
    return RankView(rank, trace, sched, time_kinds(trace, kinds), tracks)


@record
class _ViewColumns:
    """What a remote task sends back for one rank: its time kinds and tracks, not the trace."""

    kinds: np.ndarray
    tracks: RankTracks


def _view_from_file(item: tuple[int, str, int, int, RankSchedule, bool]) -> _ViewColumns:
    """A rank's view computed where its file is (a cluster worker): ``(rank, path, rows, id sum, schedule,
    nesting)``; the file must still hold the trace the client loaded."""
    from ..errors import EtkitError
    from ..model.trace import load_trace

    rank, path, rows, id_sum, sched, nesting = item
    trace = load_trace(path)
    if len(trace) != rows or _id_sum(trace) != id_sum:
        raise EtkitError(f"{path}: rank {rank}'s file changed after it was loaded (its nodes differ): analyse it again")
    view = _view((rank, trace, sched, nesting))
    return _ViewColumns(view.kinds, view.tracks)


def _id_sum(trace: Trace) -> int:
    return int(trace.ids.sum(dtype=np.uint64))


def _from_files(job: Job) -> bool:
    """Every trace of ``job`` came from a file that is still there (so a remote worker can read it)."""
    return all(t.path and os.path.isfile(t.path) for t in job.traces.values())


def _views(job: Job, schedule: Schedule, executor: Executor) -> dict[int, RankView]:
    """Every rank's :class:`RankView`, one executor task per rank. On a remote executor (a Dask cluster) the
    task reads the rank's file there and sends back the kinds and tracks only, never the trace; a job held
    in memory (no files) is worked on in this machine's pool instead (:func:`etkit.executor.in_client`)."""
    nesting = schedule.source == "trace"  # only profiled times nest calls inside calls
    ranks = sorted(job.traces)
    if getattr(executor, "remote", False) and _from_files(job):
        items = [(r, os.path.abspath(job.traces[r].path), len(job.traces[r]), _id_sum(job.traces[r]),
                  schedule.ranks[r], nesting) for r in ranks]
        columns = executor.map(_view_from_file, items, desc="tracks")
        return {r: RankView(r, job.traces[r], schedule.ranks[r], c.kinds, c.tracks) for r, c in zip(ranks, columns)}
    local = [(r, job.traces[r], schedule.ranks[r], nesting) for r in ranks]
    return {v.rank: v for v in in_client(executor).map(_view, local, desc="tracks")}


def prepare(job: Job, schedule: Schedule | None = None, *, executor: Executor | None = None,
            context: AnalysisContext | None = None) -> AnalysisContext:
    """The shared context for analysing ``job`` (``context`` is returned as is when given).

    The per-rank part (node kinds and tracks) runs one task per rank on ``executor`` (default: in this
    process); the cross-rank parts (matching, the schedule without timestamps, transfer times) run here.
    """
    if context is not None:
        return context
    cross = match_cross_rank(job)
    rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # each rank's dependency rows, once (DEPENDENCY_ROWS)
    schedule = resolve_schedule(job, schedule, cross=cross, rows=rows)
    missing = [r for r in job.traces if r not in schedule.ranks]
    if missing:
        from ..errors import UsageError

        raise UsageError(f"schedule has no times for rank(s) {missing[:8]}")
    views = _views(job, schedule, executor or SerialExecutor())
    for rank, transfer in transfer_times(cross, {r: v.sched for r, v in views.items()}).items():
        views[rank].transfer = transfer
    return AnalysisContext(job, schedule, cross, views, cache={DEPENDENCY_ROWS: rows})


@record
class Members:
    """Every member of every collective instance, flattened: instance, rank, row, and the row's start,
    end and whether it ran (int64 ns, from the schedule)."""

    inst: np.ndarray
    rank: np.ndarray
    row: np.ndarray
    start: np.ndarray
    end: np.ndarray
    ran: np.ndarray


def collective_members(cross: CrossRank, scheds: dict[int, RankSchedule]) -> Members:
    """The members of ``cross``'s collectives on the ranks of ``scheds``, as arrays."""
    flat = [(inst, r, row) for inst, mem in enumerate(cross.collectives) for r, row in mem if r in scheds]
    inst, rank, row = (np.fromiter((m[k] for m in flat), dtype=np.int64, count=len(flat)) for k in range(3))
    start, end = np.zeros(len(flat), dtype=np.int64), np.zeros(len(flat), dtype=np.int64)
    ran = np.zeros(len(flat), dtype=bool)
    for r in distinct(rank).tolist():
        sel = rank == r
        sched = scheds[r]
        start[sel], end[sel], ran[sel] = sched.start_ns[row[sel]], sched.end_ns[row[sel]], sched.ran[row[sel]]
    return Members(inst, rank, row, start, end, ran)


def last_arrival(members: Members, instances: int) -> np.ndarray:
    """Per collective instance, the latest start among its members that ran (int64 min when none ran)."""
    last = np.full(instances, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, members.inst[members.ran], members.start[members.ran])
    return last


def transfer_times(cross: CrossRank, scheds: dict[int, RankSchedule]) -> dict[int, np.ndarray]:
    """Per rank and row, when the node could start moving data: a collective when its last member that ran
    had started, a receive when both it and its send had started, every other row at its own start. A
    schedule that says so itself (a simulator's ``transfer_ns``) is taken as it is."""
    out = {r: (s.transfer_ns.copy() if s.transfer_ns is not None else s.start_ns.copy()) for r, s in scheds.items()}
    derived = {r for r, s in scheds.items() if s.transfer_ns is None}
    if not derived:
        return out
    m = collective_members(cross, scheds)
    last = last_arrival(m, len(cross.collectives))
    for r in distinct(m.rank).tolist():
        if r in derived:
            sel = (m.rank == r) & m.ran
            out[r][m.row[sel]] = np.maximum(last[m.inst[sel]], m.start[sel])
    for send_rank, send_row, recv_rank, recv_row in cross.p2p:
        if recv_rank in derived and send_rank in scheds and scheds[send_rank].ran[send_row]:
            mine = out[recv_rank]
            mine[recv_row] = max(int(mine[recv_row]), int(scheds[send_rank].start_ns[send_row]))
    return out
