"""The critical path: the chain of nodes, across ranks, that set the job's end time.

Walked backwards from the node that finishes last. At each node the walk asks what released it:
for a collective, the member that arrived last (the others waited for it); for a receive, its send
when the send started later; otherwise the predecessor that ended latest before the node started,
among its data dependencies and the previous node on its track (the resource it waited for). Nodes
that hold other nodes on their track (profiler ranges) are skipped: their callees are on the path,
and a dependency of a caller counts for its first callee.

Measured traces miss some dependencies, so on them (schedule source "trace") two more rules apply: a
send that ended together with a receive posted after it waited for the receiver; and a node whose
recorded predecessors all ended well before it began is taken to have waited for the op of its rank
that ended last before it, and one that nothing explains (no op of its rank ended by its start) for the
op of its rank that started last before it, which was running when it began (both counted in the notes).
The path is a simple path: no node is on it twice.

Each node on the path is credited with the time from its start to the next path node's start (or its
own end); the gaps are "caller" time when an enclosing op of the same thread was running (host
overhead) and "wait" otherwise. Credits and gaps add up to the length.
"""

from __future__ import annotations

from dataclasses import field

import numpy as np

from ..arrays import distinct
from ..format.schema import NodeType
from ..gcpause import gc_paused
from ..model.job import Job
from ..model.schedule import Schedule
from ..records import record
from .context import AnalysisContext, RankView, prepare
from .kinds import KIND_NAMES
from .tables import Table
from .timing import KERNEL, dependency_rows

__all__ = ["CriticalPath", "critical_path"]

_EPS_NS = 0  # times are integer ns: a dependency ending at or before a start released it
_NEVER = int(np.iinfo(np.int64).min)


@record
class CriticalPath:
    """Nodes on the critical path, last-to-finish last (arrays are aligned, one entry per node)."""

    source: str
    length_ns: int
    rank: np.ndarray
    row: np.ndarray
    node_id: np.ndarray
    names: list[str]
    kind: np.ndarray
    start_ns: np.ndarray  # relative to the job's first start
    end_ns: np.ndarray
    on_path_ns: np.ndarray  # time credited to the node
    wait_after_ns: np.ndarray  # gap between its end and the next node on the path
    caller_ns: np.ndarray  # part of that gap a caller on the same thread ran (profiled host code)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(len(self.rank))

    @property
    def wait_ns(self) -> int:
        """Gaps on the path where nothing ran (caller self time excluded)."""
        return int((self.wait_after_ns - self.caller_ns).sum())

    def share_by_kind(self) -> dict[str, int]:
        """Nanoseconds of the path per node kind, plus "caller" (self time of enclosing host ops) and "wait"."""
        per = np.zeros(len(KIND_NAMES), dtype=np.int64)
        np.add.at(per, self.kind.astype(np.int64), self.on_path_ns)
        out = {name: int(per[i]) for i, name in enumerate(KIND_NAMES) if per[i] > 0}
        caller = int(self.caller_ns.sum())
        if caller > 0:
            out["caller"] = caller
        if self.wait_ns > 0:
            out["wait"] = self.wait_ns
        return out

    def per_rank(self) -> dict[int, int]:
        """Nanoseconds of the path spent on each rank's nodes."""
        out: dict[int, int] = {}
        for r, t in zip(self.rank.tolist(), self.on_path_ns.tolist()):
            out[r] = out.get(r, 0) + t
        return out

    def top(self, n: int = 20) -> np.ndarray:
        """Indices of the ``n`` path entries credited with most time (longest first)."""
        return np.argsort(-self.on_path_ns, kind="stable")[:n]

    def tables(self) -> list[Table]:
        return [Table("critical_path", ["rank", "node_id", "name", "kind", "start_ns", "end_ns", "on_path_ns",
                                        "wait_after_ns", "caller_ns"],
                      [list(row) for row in zip(
                          self.rank.tolist(), self.node_id.tolist(), self.names[:len(self)],
                          [KIND_NAMES[k] for k in self.kind.tolist()], self.start_ns.tolist(), self.end_ns.tolist(),
                          self.on_path_ns.tolist(), self.wait_after_ns.tolist(), self.caller_ns.tolist())])]

    def to_json(self, max_nodes: int = 10_000) -> dict:
        keep = np.arange(len(self))[-max_nodes:] if len(self) > max_nodes else np.arange(len(self))
        nodes = [{"rank": int(self.rank[i]), "id": int(self.node_id[i]), "name": self.names[i],
                  "kind": KIND_NAMES[int(self.kind[i])], "start_ns": int(self.start_ns[i]),
                  "end_ns": int(self.end_ns[i]), "on_path_ns": int(self.on_path_ns[i]),
                  "wait_after_ns": int(self.wait_after_ns[i]), "caller_ns": int(self.caller_ns[i])}
                 for i in keep.tolist()]
        return {"source": self.source, "length_ns": self.length_ns, "nodes_on_path": len(self),
                "share_ns": self.share_by_kind(), "per_rank_ns": {str(r): t for r, t in sorted(self.per_rank().items())},
                "nodes": nodes, "truncated": len(self) > max_nodes, "notes": self.notes}


class _RankWalk:
    """Per-rank lookups for the walk, built the first time the walk reaches the rank.

    ``pred[row]`` is the row that released ``row`` on this rank (-1: none): among its leaf data
    dependencies and the previous leaf on its track, the one that ended last, no later than ``row``
    began; ties go to a data dependency, then to the earlier-listed one. Computed for all rows at once.
    """

    def __init__(self, view: RankView, measured: bool = False,
                 deps: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        sched = view.sched
        n = len(view.trace)
        start, end = sched.start_ns, sched.end_ns
        leaf = view.tracks.leaf
        dst, src = deps if deps is not None else dependency_rows(view.trace)
        if view.tracks.parent is not None:
            # a dependency of a caller holds for the first op it calls; a caller as a dependency
            # ends with the last op it called (callers are not on the path, their callees are)
            first, last = _heirs(view.tracks.parent, start, leaf)
            dst, src = first[dst], last[src]
        # previous leaf on the same track, in start order
        rows = np.flatnonzero(leaf)
        by_track = rows[np.lexsort((start[rows], view.tracks.track[rows]))]
        same = view.tracks.track[by_track[1:]] == view.tracks.track[by_track[:-1]]
        prev_dst, prev_src = by_track[1:][same], by_track[:-1][same]
        del rows, by_track, same
        # the candidates that could have released each row, data dependencies first (kept apart: no concatenated
        # copies of them, whose fresh pages were much of the walk's system time)
        parts = []
        for d, s in ((dst, src), (prev_dst, prev_src)):
            ok = leaf[s] & _precedes(s, d, start, end)
            parts.append((d[ok], s[ok]))
        del prev_dst, prev_src
        pred = _latest(n, parts, end)
        self.implicit = 0
        if measured:
            pred = self._wait_on_latest(pred, start, end, leaf)
            pred = self._started_before(pred, start, leaf)
        # (arrays: the walk reads them a row at a time, as Python ints, or in C)
        self.pred = np.ascontiguousarray(pred, dtype=np.int64)
        self.start = np.ascontiguousarray(start, dtype=np.int64)
        self.end = end
        self.leaf = leaf
        self.linked: set[int] = set()  # rows tied to other ranks (collective members, receives)
        self.tied = np.zeros(n, dtype=np.uint8)  # the same, as flags
        self.on_path: set[int] = set()  # rows already on the path (it is a simple path)
        self.seen = np.zeros(n, dtype=np.uint8)  # the same, as flags (for the C walk)

    def tie(self, rows: set[int]) -> None:
        """``rows`` are tied to other ranks: the walk along pred stops at them."""
        self.linked = rows
        self.tied[list(rows)] = 1

    def put(self, row: int) -> None:
        """``row`` is on the path."""
        self.on_path.add(row)
        self.seen[row] = 1

    def chase(self, pred: int, limit: int, rows: list[int], limits: list[int]) -> tuple[int, int]:
        """Follow ``pred`` while it is a row that neither ties the path to another rank nor is on it: each
        such row goes on the path (``rows``, with the ``limits`` its credit ends at) and the limit becomes its
        start. Returns the pred and limit it stopped at."""
        if KERNEL is not None:
            got, got_limits, pred, limit = KERNEL.chase(self.pred, self.start, self.tied, self.seen, pred, limit)
            chased = np.frombuffer(got, dtype=np.int64).tolist()
            rows.extend(chased)
            limits.extend(np.frombuffer(got_limits, dtype=np.int64).tolist())
            self.on_path.update(chased)
            return pred, limit
        start, pred_of, tied, on_path = self.start.tolist(), self.pred.tolist(), self.linked, self.on_path
        while pred >= 0 and pred not in tied and pred not in on_path:
            rows.append(pred)
            limits.append(limit)
            on_path.add(pred)
            limit = start[pred]
            pred = pred_of[pred]
        return pred, limit

    def at(self, row: int) -> tuple[int, int, bool]:
        """Row ``row``'s start, end and whether it is a leaf."""
        return int(self.start[row]), int(self.end[row]), bool(self.leaf[row])

    def _started_before(self, pred: np.ndarray, start: np.ndarray, leaf: np.ndarray) -> np.ndarray:
        out, found = _started_before_impl(pred, start, leaf)
        self.implicit += found
        return out

    def _wait_on_latest(self, pred: np.ndarray, start: np.ndarray, end: np.ndarray, leaf: np.ndarray) -> np.ndarray:  # noqa: D401
        """Measured traces miss dependencies (a blocking receive whose consumer lists only the op
        before it): when another leaf of the rank ended later than the recorded predecessor, still
        before the node began, the node is taken to have waited for it."""
        rows = np.flatnonzero(leaf)
        rows = rows[np.argsort(end[rows], kind="stable")]
        ends = end[rows]
        k = np.searchsorted(ends, start[rows] + _EPS_NS, side="right") - 1
        cand = np.where(k >= 0, rows[np.maximum(k, 0)], -1)
        # a zero-length node found itself or one at its instant that it precedes: take the one before
        for _ in range(4):
            bad = (cand >= 0) & ~_precedes(np.maximum(cand, 0), rows, start, end)
            if not bad.any():
                break
            k[bad] -= 1
            cand[bad] = np.where(k[bad] >= 0, rows[np.maximum(k[bad], 0)], -1)
        cand[(cand >= 0) & ~_precedes(np.maximum(cand, 0), rows, start, end)] = -1
        known = pred[rows]
        known_end = np.where(known >= 0, end[np.maximum(known, 0)], np.iinfo(np.int64).min)
        better = (cand >= 0) & (end[np.maximum(cand, 0)] > known_end + _EPS_NS)
        out = pred.copy()
        out[rows[better]] = cand[better]
        self.implicit = int(better.sum())
        return out


def _latest(n: int, parts: list[tuple[np.ndarray, np.ndarray]], end: np.ndarray) -> np.ndarray:
    """Per row, the candidate ``src`` of the edges ``src -> dst`` into it (``parts``: ``(dst, src)`` arrays, listed
    in their order) that ended last (-1: none); ties go to the earliest part, then to the earlier-listed edge."""
    pred = np.full(n, -1, dtype=np.int64)
    best = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    ends = [end[src] for _, src in parts]
    for (dst, _), e in zip(parts, ends):
        np.maximum.at(best, dst, e)
    taken = np.zeros(n, dtype=bool)  # rows an earlier part gives their predecessor
    for (dst, src), e in zip(parts, ends):
        keep = np.flatnonzero((e == best[dst]) & ~taken[dst])
        if not len(keep):
            continue
        first = np.full(n, len(dst), dtype=np.int64)
        np.minimum.at(first, dst[keep], keep)
        won = np.flatnonzero(first < len(dst))
        pred[won] = src[first[won]]
        taken[won] = True
    return pred


def _started_before_impl(pred: np.ndarray, start: np.ndarray, leaf: np.ndarray) -> tuple[np.ndarray, int]:
    """For a leaf that nothing before it explains (no predecessor ended by its start), the leaf of its rank
    that started last before it: it was running when this one began (the op launching a kernel, the thread
    that issued a call). Its start is earlier, so following it never comes back."""
    rows = np.flatnonzero(leaf)
    rows = rows[np.argsort(start[rows], kind="stable")]
    starts = start[rows]
    k = np.searchsorted(starts, start[rows], side="left") - 1
    missing = (pred[rows] < 0) & (k >= 0)
    out = pred.copy()
    out[rows[missing]] = rows[k[missing]]
    return out, int(missing.sum())


def _precedes(src: np.ndarray, dst: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether row ``src`` can have released row ``dst``: it ended by ``dst``'s start; two zero-length
    rows at one instant only in row order (so the relation has no cycle and the path no repeated node)."""
    src_start, src_end, dst_start = start[src], end[src], start[dst]
    ok = src_end <= dst_start + _EPS_NS
    tie = (src_start == src_end) & (dst_start == end[dst]) & (src_start == dst_start)
    return ok & ~(tie & (src >= dst))


def _heirs(parent: np.ndarray, start: np.ndarray, leaf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, its first and last leaf descendant on its track (itself for leaves)."""
    n = len(parent)
    first = np.arange(n)
    last = np.arange(n)
    children = np.flatnonzero(parent >= 0)
    if len(children):
        by_start = children[np.lexsort((start[children], parent[children]))]
        group = parent[by_start]
        head = np.ones(len(by_start), dtype=bool)
        head[1:] = group[1:] != group[:-1]
        tail = np.ones(len(by_start), dtype=bool)
        tail[:-1] = group[1:] != group[:-1]
        first[group[head]] = by_start[head]
        last[group[tail]] = by_start[tail]
        for _ in range(64):  # call depth; pointer jumping converges in log(depth) rounds
            done_first = leaf[first] | (first == first[first])
            done_last = leaf[last] | (last == last[last])
            if done_first.all() and done_last.all():
                break
            first = first[first]
            last = last[last]
    return first, last


def _last_leaf(ctx: AnalysisContext) -> tuple[int, int] | None:
    best: tuple[int, int, int, int] | None = None
    for rank, view in ctx.views.items():
        rows = np.flatnonzero(view.tracks.leaf)
        if not len(rows):
            continue
        ends = view.sched.end_ns[rows]
        i = int(np.lexsort((view.sched.start_ns[rows], ends))[-1])
        key = (int(ends[i]), int(view.sched.start_ns[rows[i]]), rank, int(rows[i]))
        if best is None or key[:2] > best[:2]:
            best = key
    return None if best is None else (best[2], best[3])


@gc_paused
def critical_path(job: Job, schedule: Schedule | None = None, *,
                  context: AnalysisContext | None = None) -> CriticalPath:
    """The critical path of ``job`` (see the module docstring)."""
    ctx = prepare(job, schedule, context=context)
    walks: dict[int, _RankWalk] = {}
    measured = ctx.schedule.source == "trace"
    linked: dict[int, set[int]] = {}
    # a measured send may also wait for its receiver (rendezvous); modelled sends never do
    for rank, row in [*ctx.cross.instance_of, *ctx.cross.send_of, *(ctx.cross.recv_of if measured else ())]:
        linked.setdefault(rank, set()).add(row)

    def walk_of(rank: int) -> _RankWalk:
        w = walks.get(rank)
        if w is None:
            w = walks[rank] = _RankWalk(ctx.views[rank], measured=measured, deps=ctx.dependency_rows(rank))
            w.tie(linked.get(rank, set()))
        return w

    path_rank: list[int] = []  # the path, last node first: rank, row, and where its credit ends
    path_row: list[int] = []
    path_limit: list[int] = []
    cur = _last_leaf(ctx)
    limit = walk_of(cur[0]).at(cur[1])[1] if cur is not None else 0
    while cur is not None:
        if cur[1] in walk_of(cur[0]).linked:
            cur, pred = _released_by(ctx, cur, walk_of)
        else:
            pred = _best_pred(walk_of(cur[0]), cur[1])[0]
        rank, row = cur
        w = walk_of(rank)
        if row in w.on_path:
            break
        path_rank.append(rank)
        path_row.append(row)
        path_limit.append(limit)
        w.put(row)
        # stay on this rank while nothing ties the path to another one (the common, fast case)
        first = len(path_row)
        pred, limit = w.chase(pred, w.at(row)[0], path_row, path_limit)
        path_rank.extend([rank] * (len(path_row) - first))
        cur = (rank, pred) if pred >= 0 and pred not in w.on_path else None
    result = _build(ctx, path_rank[::-1], path_row[::-1], path_limit[::-1])
    implicit = sum(w.implicit for w in walks.values())
    if implicit:
        result.notes.append(f"{implicit} node(s) had no recorded dependency explaining their start; the walk "
                            "took the op of the same rank that ended last before them (none ended: the one that started last)")
    return result


def _best_pred(w: _RankWalk, row: int) -> tuple[int, int]:
    """The predecessor that released ``row`` on its rank and when it ended (-1, int64 min: none)."""
    pred = int(w.pred[row])
    return pred, (w.at(pred)[1] if pred >= 0 else _NEVER)


def _released_by(ctx: AnalysisContext, node: tuple[int, int], walk_of) -> tuple[tuple[int, int], int]:  # type: ignore[no-untyped-def]
    """The node that stands for ``node`` on the path and its predecessor row (-1: the path starts here).

    For a collective or a receive, that is the member (or the send) that started last; among those that
    started together, the one whose own predecessor ended last: the others were waiting for it. On
    measured traces a send likewise stands for a receive that was posted after it.
    """
    inst = ctx.cross.instance_of.get(node)
    if inst is not None:
        candidates = [m for m in ctx.cross.collectives[inst] if m[0] in ctx.views]
    else:
        peer = ctx.cross.send_of.get(node)
        if peer is None and ctx.schedule.source == "trace":
            peer = ctx.cross.recv_of.get(node)
            if peer is not None and peer[0] in ctx.views and not _send_waited(walk_of(node[0]), node[1],
                                                                           walk_of(peer[0]), peer[1]):
                peer = None
        candidates = [node, peer] if peer is not None and peer[0] in ctx.views else [node]
    if len(candidates) == 1:
        return node, _best_pred(walk_of(node[0]), node[1])[0]
    # a partner that began only after this node ended cannot be what it waited for
    own_end = walk_of(node[0]).at(node[1])[1]
    candidates = [(r, row) for r, row in candidates if walk_of(r).at(row)[0] <= own_end + _EPS_NS]
    latest = max(walk_of(r).at(row)[0] for r, row in candidates)
    best: tuple[int, bool, tuple[int, int], int] | None = None
    for r, row in candidates:
        w = walk_of(r)
        start, _, is_leaf = w.at(row)
        if start < latest - _EPS_NS or not is_leaf:
            continue
        pred, pred_end = _best_pred(w, row)
        key = (pred_end, (r, row) == node, (r, row), pred)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:
        return node, _best_pred(walk_of(node[0]), node[1])[0]
    return best[2], best[3]


def _send_waited(ws: _RankWalk, send: int, wr: _RankWalk, recv: int) -> bool:
    """Whether a measured send ended with its receive (it waited for the receiver), not long before or after."""
    send_start, send_end, _ = ws.at(send)
    slack = max(_EPS_NS, (send_end - send_start) // 20)
    return abs(wr.at(recv)[1] - send_end) <= slack


def _build(ctx: AnalysisContext, ranks: list[int], rows: list[int], limits: list[int]) -> CriticalPath:
    origin = ctx.origin_ns
    n = len(rows)
    rank = np.array(ranks, dtype=np.int64)
    row = np.array(rows, dtype=np.int64)
    limit = np.array(limits, dtype=np.int64)
    start = np.empty(n, dtype=np.int64)
    end = np.empty(n, dtype=np.int64)
    kind = np.empty(n, dtype=np.int8)
    node_id = np.empty(n, dtype=np.uint64)
    name_arr = np.empty(n, dtype=object)
    for r in distinct(rank).tolist():
        idx = np.flatnonzero(rank == r)
        v = ctx.views[r]
        picked = row[idx]
        start[idx] = v.sched.start_ns[picked]
        end[idx] = v.sched.end_ns[picked]
        kind[idx] = v.kinds[picked]
        node_id[idx] = v.trace.ids[picked]
        name_arr[idx] = np.asarray(v.trace.strings, dtype=object)[v.trace.name_idx[picked]]
    names = name_arr.tolist()
    credited_end = np.minimum(end, limit)
    on_path = np.maximum(credited_end - start, 0)
    wait = np.maximum(limit - np.maximum(credited_end, start), 0)
    caller = _caller_time(ctx, rank, row, np.maximum(credited_end, start), limit)
    length = int(limit[-1] - start[0]) if n else 0
    notes = []
    if any(v.trace.types.size and (v.trace.types == NodeType.COMM_COLL_NODE).any() for v in ctx.views.values()) \
            and ctx.schedule.source == "durations":
        notes.append("collective durations come from the traces as written; simulate for network-bound times")
    return CriticalPath(ctx.source_text, length, rank, row, node_id, names, kind, start - origin, end - origin,
                        on_path, wait, np.minimum(caller, wait), notes)


def _caller_time(ctx: AnalysisContext, rank: np.ndarray, row: np.ndarray, gap_start: np.ndarray,
                 gap_end: np.ndarray) -> np.ndarray:
    """Per path entry, how much of the gap after it an enclosing op on its track ran (its self time)."""
    out = np.zeros(len(rank), dtype=np.int64)
    gaps = np.flatnonzero(gap_end > gap_start)
    for r in distinct(rank[gaps]).tolist():
        v = ctx.views[r]
        tr = v.tracks
        owner_is_caller = ~tr.leaf[tr.seg_row]
        if not owner_is_caller.any():
            continue
        idx = gaps[rank[gaps] == r]
        seg_track = tr.track[tr.seg_row]
        for t in distinct(tr.track[row[idx]]).tolist():
            mask = owner_is_caller & (seg_track == t)
            s, e = tr.seg_start[mask], tr.seg_end[mask]
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
            sel = idx[tr.track[row[idx]] == t]
            out[sel] = _covered(s, e, gap_start[sel], gap_end[sel])
    return out


def _covered(s: np.ndarray, e: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of ``[a, b)`` covered by the disjoint sorted intervals ``[s, e)`` (vectorised over a, b)."""
    if not len(s):
        return np.zeros(len(a), dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(e - s)))

    def before(x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(s, x, side="right")  # intervals starting at or before x
        inside = np.where(k > 0, np.clip(x - s[np.maximum(k - 1, 0)], 0, (e - s)[np.maximum(k - 1, 0)]), 0)
        return cum[np.maximum(k - 1, 0)] * (k > 0) + inside

    return before(b) - before(a)
