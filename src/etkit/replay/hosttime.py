"""How much of a host op's own time was spent blocked on communication, from a trace's timestamps.

A converted profile records a container's *exclusive* time: the framework's work around its child ops
(Python, the autograd engine, hooks), but also any time the thread sat in ``work.wait()`` for a
collective, which is no op of its own. The replay reproduces such waits by itself (a node that depends
on a collective waits for it), so spinning the whole exclusive time would count them twice.

For every gap of a container's own time (before, between and after its child ops on the same thread)
the gap is taken as a wait when a communication node of the rank ended inside it and the thread went on
soon after (within ``WAKE_US``, or a fifth of the gap): the waiting part is from the later of the gap's
start and the communication's start, to the communication's end. All of it is vectorised over the
columns; traces without timestamps give zeros.
"""

from __future__ import annotations

import numpy as np

from ..model.edges import ctrl_parent
from ..model.trace import COMM_NODE_TYPES, Trace

__all__ = ["blocked_us", "WAKE_US"]

#: Longest delay between a collective's end and the waiting thread's next op that still counts as a wait.
WAKE_US = 200.0


def _inclusive_end(parent: np.ndarray, start: np.ndarray, end: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """End of each node's subtree (itself and its ``keep`` descendants), walking ancestors level by level."""
    incl = end.copy()
    rows = np.flatnonzero(keep & (parent >= 0))
    cur = parent[rows]
    for _ in range(4096):
        if not len(rows):
            break
        np.maximum.at(incl, cur, end[rows])
        live = parent[cur] >= 0
        rows, cur = rows[live], parent[cur[live]]
    return incl


def blocked_us(trace: Trace) -> np.ndarray:
    """Per row, the µs of its exclusive time spent waiting for communication (0 without timestamps)."""
    n = len(trace)
    blocked = np.zeros(n, dtype=np.float64)
    timed = trace.start > 0
    comm = np.isin(trace.types, np.asarray(COMM_NODE_TYPES, dtype=trace.types.dtype)) & timed
    if not comm.any() or not timed.any():
        return blocked
    parent = ctrl_parent(trace)
    start = trace.start.astype(np.float64)
    end = start + trace.duration.astype(np.float64)
    on_thread = timed & ~comm  # communication runs on the backend's thread: not a child interval
    incl = _inclusive_end(parent, start, end, on_thread)

    # gaps between consecutive children of each parent, plus before the first and after the last
    kids = np.flatnonzero(on_thread & (parent >= 0))
    kids = kids[np.lexsort((start[kids], parent[kids]))]
    par = parent[kids]
    first = np.ones(len(kids), dtype=bool)
    first[1:] = par[1:] != par[:-1]
    last = np.ones(len(kids), dtype=bool)
    last[:-1] = par[:-1] != par[1:]
    prev_end = np.where(first, start[par], np.roll(incl[kids], 1))
    leaves = np.flatnonzero(on_thread & ~np.isin(np.arange(n), par))
    gap_owner = np.concatenate([par, par[last], leaves])
    gap_start = np.concatenate([prev_end, incl[kids[last]], start[leaves]])
    gap_end = np.concatenate([start[kids], incl[par[last]], end[leaves]])

    # the latest communication that ended inside each gap, and whether the thread resumed soon after
    order = np.argsort(end[comm], kind="stable")
    comm_end, comm_start = end[comm][order], start[comm][order]
    j = np.searchsorted(comm_end, gap_end, side="right") - 1
    has = j >= 0
    j = np.maximum(j, 0)
    ce, cs = comm_end[j], comm_start[j]
    length = gap_end - gap_start
    waited = has & (ce > gap_start) & (gap_end - ce <= np.maximum(WAKE_US, 0.2 * length))
    wait = np.where(waited, np.clip(ce - np.maximum(gap_start, cs), 0.0, np.maximum(length, 0.0)), 0.0)
    np.add.at(blocked, gap_owner, wait)
    return np.minimum(blocked, trace.duration.astype(np.float64))
