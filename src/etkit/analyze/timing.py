"""Where the times come from: the trace's own timestamps, a simulation, or the durations alone.

:func:`resolve_schedule` picks, in this order: a schedule the caller passes (e.g. a simulator's),
the recorded timestamps when the traces carry them (converted profiles), else
:func:`schedule_from_durations`: every node starts as soon as its dependencies allow, collectives
start when their last member is ready, a receive ends no earlier than its send. That last one has no
resource contention, so it is a lower bound; ``--simulate`` gives a realistic one.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from ..arrays import distinct
from ..errors import DependencyError
from ..gcpause import gc_paused
from ..model.edges import ctrl_parent, edges
from ..model.job import Job
from ..model.schedule import RankSchedule, Schedule, has_timestamps, measured_times, schedule_from_timestamps
from ..model.trace import Trace
from .crossrank import CrossRank, match_cross_rank
from .kinds import COMM, node_kinds

try:  # the walks in C (optional: the Python loops below give the same results)
    from . import _walks as KERNEL
except ImportError:  # pragma: no cover - not built
    KERNEL = None

__all__ = ["resolve_schedule", "schedule_from_trace", "schedule_from_durations", "schedule_from_simulation", "SOURCE_TEXT",
           "dependency_rows", "topological_order", "KERNEL"]

#: How each ``Schedule.source`` is described to users.
SOURCE_TEXT = {
    "trace": "trace timestamps",
    "simulation": "simulation",
    "durations": "node durations and dependencies only (no timestamps; no resource contention)",
}


def resolve_schedule(job: Job, schedule: Schedule | None = None, *, cross: CrossRank | None = None,
                     rows: dict[int, tuple[np.ndarray, np.ndarray]] | None = None) -> Schedule:
    """The schedule to analyse ``job`` with (see the module docstring for the order). ``rows``: each rank's
    :func:`dependency_rows` where known, and where this computes them (for the analyses after it)."""
    if schedule is not None:
        return schedule
    if any(has_timestamps(t) for t in job.traces.values()):
        return schedule_from_trace(job)
    return schedule_from_durations(job, cross=cross, rows=rows)


def schedule_from_trace(job: Job) -> Schedule:
    """The recorded timestamps, with callers stretched over their callees where only self time is known.

    Converters write a host op's *exclusive* time as its duration, so a caller's ``[start, start +
    duration)`` does not cover the ops it called. etkit's converters also write the measured start and
    inclusive duration in ns (``ts_ns``/``dur_ns``, :func:`etkit.model.schedule.measured_times`), which
    are used as they are. For rows without them (other converters' files), a caller (the ``ctrl_deps``
    parent) whose interval ends before its callees do gets ``duration + callees' inclusive time`` (and at
    least up to its last callee's end), which is its inclusive time again; exclusive time is then
    recovered from nesting. Communication nodes run on the backend's thread and do not stretch their caller.
    """
    schedule = schedule_from_timestamps(job)
    for rank, trace in job.traces.items():
        _stretch_callers(trace, schedule.ranks[rank])
    return schedule


def _stretch_callers(trace: Trace, sched: RankSchedule) -> None:
    if not len(trace.ctrl_deps):
        return
    n = len(trace)
    precise = measured_times(trace)[2]
    if precise.all():
        return
    parent = ctrl_parent(trace)
    counted = sched.ran & (node_kinds(trace) != COMM)
    parent[~counted] = -1
    depth = np.zeros(n, dtype=np.int64)
    cur = parent.copy()
    for _ in range(10_000):  # a ctrl cycle would loop forever; depth past this is not a call stack
        live = cur >= 0
        if not live.any():
            break
        depth[live] += 1
        cur[live] = parent[cur[live]]
    start, end = sched.start_ns, sched.end_ns
    last_end = int(end[sched.ran].max()) if sched.ran.any() else 0
    child_sum = np.zeros(n, dtype=np.int64)
    child_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    for level in range(int(depth.max()), 0, -1):
        rows = np.flatnonzero((depth == level) & (parent >= 0))
        # a callee ends before its next sibling starts: the sum below over-stretches a caller whose
        # callees were themselves misplaced by an async op (pytorch-traces.md 7.1)
        order = rows[np.lexsort((start[rows], parent[rows]))]
        same = (parent[order[1:]] == parent[order[:-1]]) & ~precise[order[:-1]]
        end[order[:-1][same]] = np.minimum(end[order[:-1][same]], start[order[1:][same]])
        np.add.at(child_sum, parent[rows], end[rows] - start[rows])
        np.maximum.at(child_end, parent[rows], end[rows])
        callers = distinct(parent[rows])
        short = callers[sched.ran[callers] & (end[callers] < child_end[callers]) & ~precise[callers]]
        end[short] = np.minimum(np.maximum(end[short] + child_sum[short], child_end[short]), last_end)


def schedule_from_simulation(job: Job, network: Any = None, system: Any = None, *, preset: str | None = None,
                             knobs: Any = None) -> Schedule:
    """Simulate ``job`` and return its schedule.

    ``network``/``system``: ASTRA-sim network YAML and system JSON, or an etkit system YAML (or loaded
    :class:`~etkit.simulate.NetworkConfig`/``SystemConfig``); ``preset`` an etkit system preset (see
    ``etkit simulate --help``); ``knobs`` the what-if :class:`~etkit.simulate.Knobs`.
    """
    from ..simulate import NetworkConfig, load_config, simulate  # lazy: a sibling tool, only needed on this path

    if isinstance(network, NetworkConfig):
        net, sys_cfg = network, system
    else:
        net, sys_cfg, _ = load_config(network, system, preset=preset)
    schedule = simulate(job, net, sys_cfg, knobs).schedule
    schedule.source = schedule.source or "simulation"
    return schedule


def dependency_rows(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Dependencies as rows: ``(dst_rows, src_rows)`` per edge, i.e. (child, parent) of
    :func:`etkit.model.edges.edges`, data deps then ctrl deps (ASTRA-sim's feeder honours both), edges to
    unknown ids and to the node itself dropped."""
    found = edges(trace).resolved()
    return found.child, found.parent


def topological_order(trace: Trace) -> np.ndarray:
    """Rows in an order where every data dependency comes first (file order when it already is)."""
    return _topological_order(trace, *dependency_rows(trace))


def _topological_order(trace: Trace, dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """:func:`topological_order` given the trace's :func:`dependency_rows`."""
    n = len(trace)
    if not len(dst) or bool((src < dst).all()):
        return np.arange(n, dtype=np.int64)
    indeg = np.bincount(dst, minlength=n)
    order_edges = np.argsort(src, kind="stable")
    succ_ptr = np.concatenate(([0], np.cumsum(np.bincount(src, minlength=n))))
    if KERNEL is not None:
        out = np.frombuffer(KERNEL.topo(np.ascontiguousarray(dst[order_edges], dtype=np.int64),
                                        succ_ptr.astype(np.int64), indeg.astype(np.int64)), dtype=np.int64)
    else:
        out = _kahn(dst[order_edges].tolist(), succ_ptr.tolist(), indeg)
    if len(out) < n:
        raise DependencyError(f"{trace.path}: {n - len(out)} node(s) are on a dependency cycle")
    return out


def _kahn(succ: list[int], ptr: list[int], indeg: np.ndarray) -> np.ndarray:
    """Kahn's order, first in first out (what ``KERNEL.topo`` gives): rows of in-degree 0 in row order, then
    each row's successors ``succ[ptr[row]:ptr[row + 1]]`` as their last dependency is placed."""
    deg = indeg.tolist()
    ready = deque(np.flatnonzero(indeg == 0).tolist())
    out: list[int] = []
    while ready:
        row = ready.popleft()
        out.append(row)
        for child in succ[ptr[row]:ptr[row + 1]]:
            deg[child] -= 1
            if deg[child] == 0:
                ready.append(child)
    return np.asarray(out, dtype=np.int64)


class _RankCursor:
    """One rank's walk in dependency order, pausing at collectives and receives that wait on others. With the
    C walk (:data:`KERNEL`) its columns are numpy arrays, else lists: the same values either way."""

    def __init__(self, rank: int, trace: Trace, dst: np.ndarray, src: np.ndarray) -> None:
        self.rank = rank
        n = len(trace)
        order = _topological_order(trace, dst, src)
        by_dst = np.argsort(dst, kind="stable")
        ptr = np.concatenate(([0], np.cumsum(np.bincount(dst, minlength=n)))).astype(np.int64)
        deps = src[by_dst].astype(np.int64)
        dur = trace.duration.astype(np.int64) * 1000
        self.start: Any
        self.end: Any
        self.done: Any
        if KERNEL is not None:
            self.order, self.ptr, self.deps, self.dur = order, ptr, deps, dur
            self.start, self.end = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
            self.done = np.zeros(n, dtype=np.uint8)
        else:
            self.order, self.ptr, self.deps, self.dur = order.tolist(), ptr.tolist(), deps.tolist(), dur.tolist()
            self.start, self.end, self.done = [0] * n, [0] * n, [False] * n
        self.pos = 0
        self.arrived: set[int] = set()
        #: rows that wait on other ranks: collective member -> instance (int), receive -> its send (tuple)
        self.special: dict[int, int | tuple[int, int]] = {}
        self.waits = np.zeros(n, dtype=np.uint8)  # (the rows of special, for the C walk)


@gc_paused
def schedule_from_durations(job: Job, *, cross: CrossRank | None = None,
                            rows: dict[int, tuple[np.ndarray, np.ndarray]] | None = None) -> Schedule:
    """Dependency-bound schedule from ``duration_micros`` (see the module docstring); ``rows`` as in
    :func:`resolve_schedule`."""
    cross = cross or match_cross_rank(job)
    rows = {} if rows is None else rows
    for rank, trace in job.traces.items():
        if rank not in rows:
            rows[rank] = dependency_rows(trace)
    cursors = {rank: _RankCursor(rank, trace, *rows[rank]) for rank, trace in job.traces.items()}
    for (rank, row), inst in cross.instance_of.items():
        cursors[rank].special[row] = inst
    for (rank, row), send in cross.send_of.items():
        cursors[rank].special[row] = send
    for cur in cursors.values():
        cur.waits[list(cur.special)] = 1
    arrivals: dict[int, dict[tuple[int, int], float]] = {}
    progress = True
    while progress:
        progress = False
        for cur in cursors.values():
            progress |= _advance(cur, cursors, cross, arrivals)
    notes = []
    stuck = sum(len(c.order) - c.pos for c in cursors.values())
    if stuck:
        notes.append(f"{stuck} node(s) wait on a collective or receive that never completes; left unscheduled")
    ranks = {r: RankSchedule(np.asarray(c.start), np.asarray(c.end), np.asarray(c.done, dtype=bool))
             for r, c in cursors.items()}
    return Schedule(ranks, source="durations", notes=notes + cross.notes)


def _advance(cur: _RankCursor, cursors: dict[int, _RankCursor], cross: CrossRank,
             arrivals: dict[int, dict[tuple[int, int], float]]) -> bool:
    """Schedule ``cur``'s rows until one must wait for another rank; whether any row was placed."""
    order, ptr, deps, end, start, dur, done = cur.order, cur.ptr, cur.deps, cur.end, cur.start, cur.dur, cur.done
    special = cur.special
    pos, n = cur.pos, len(order)
    first = pos
    while pos < n:
        if KERNEL is not None:  # the rows up to the next one that waits on another rank, in C
            pos = KERNEL.advance(order, ptr, deps, dur, start, end, done, cur.waits, pos)
            if pos >= n:
                break
        row = int(order[pos])
        if not done[row]:
            lo, hi = ptr[row], ptr[row + 1]
            ready = 0
            for dep in deps[lo:hi]:
                if end[dep] > ready:
                    ready = int(end[dep])
            link = special.get(row)
            if link is None:
                start[row] = ready
                end[row] = ready + dur[row]
                done[row] = True
            elif isinstance(link, int):  # a collective: wait until every member has arrived
                newly = row not in cur.arrived
                if newly:
                    cur.arrived.add(row)
                    arrivals.setdefault(link, {})[(cur.rank, row)] = ready
                    _maybe_start_collective(link, cursors, cross, arrivals)
                if not done[row]:
                    cur.pos = pos
                    return pos > first or newly
            else:  # a receive: its send must have been placed
                peer = cursors.get(link[0])
                if peer is None or not peer.done[link[1]]:
                    cur.pos = pos
                    return pos > first
                start[row] = max(ready, int(peer.start[link[1]]))
                end[row] = max(start[row] + dur[row], peer.end[link[1]])
                done[row] = True
        pos += 1
    cur.pos = pos
    return pos > first


def _maybe_start_collective(inst: int, cursors: dict[int, _RankCursor], cross: CrossRank,
                            arrivals: dict[int, dict[tuple[int, int], float]]) -> None:
    members = cross.collectives[inst]
    got = arrivals[inst]
    if len(got) < len(members):
        return
    begin = max(got.values())
    for rank, row in members:
        c = cursors[rank]
        c.start[row] = begin
        c.end[row] = begin + c.dur[row]
        c.done[row] = True
    del arrivals[inst]
