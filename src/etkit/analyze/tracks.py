"""Tracks (where a node ran: a thread, a stream or a simulated resource) and interval arithmetic.

A rank's nodes are laid out on tracks. Profiled traces nest on a track (a ``ProfilerStep#`` range
holds the ops it called), so each track is cut into *exclusive segments*: every instant belongs to
the innermost node running there. Breakdowns, exclusive operator time and the critical path all read
those segments, so nested parents never swallow their children's time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.schedule import RankSchedule
from ..model.trace import MISSING, Trace
from .kinds import COMM, COMPUTE, CPU, KIND_NAMES, MEMORY

__all__ = ["RankTracks", "rank_tracks", "union_intervals", "union_length", "RESOURCE_NAMES"]

#: Names of the resource codes a simulated :class:`RankSchedule` may carry.
RESOURCE_NAMES = ("cpu", "compute", "comm", "memory")
_KIND_RESOURCE = {COMPUTE: "compute", CPU: "cpu", COMM: "comm", MEMORY: "memory"}


@dataclass
class RankTracks:
    """Track layout of one rank's scheduled rows."""

    track: np.ndarray  # int32 per row (-1: did not run)
    names: list[str]  # track index -> label, e.g. "cpu tid 1", "comm"
    leaf: np.ndarray  # bool per row: ran and holds no other node of its track
    seg_start: np.ndarray  # exclusive segments (ns), sorted by track then time
    seg_end: np.ndarray
    seg_row: np.ndarray  # row that owns each segment
    parent: np.ndarray | None = None  # int64 per row: the node it nests in on its track (-1: none)

    def exclusive_ns(self, n_rows: int) -> np.ndarray:
        """Per row, the time it ran with no nested child on its track."""
        return np.bincount(self.seg_row, weights=self.seg_end - self.seg_start, minlength=n_rows)


def union_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the union of ``[starts, ends)``."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], e[last]


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of the union of ``[starts, ends)``."""
    s, e = union_intervals(starts, ends)
    return float((e - s).sum())


def _track_keys(trace: Trace, sched: RankSchedule, kinds: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Per row a key into the returned labels: the simulated resource, else the kind plus thread/stream."""
    if sched.resource is not None:
        res = sched.resource.astype(np.int64)
        top = int(res.max()) + 1 if len(res) else 0
        labels = [RESOURCE_NAMES[r] if 0 <= r < len(RESOURCE_NAMES) else f"resource {r}" for r in range(top)]
        return np.maximum(res, 0), labels
    keys = kinds.astype(np.int64)
    labels = [_KIND_RESOURCE.get(k, KIND_NAMES[k]) for k in range(len(KIND_NAMES))]
    # profiled traces: one track per thread ("tid N") or device stream ("stream N", when > 0)
    on_stream = (trace.stream != MISSING) & (trace.stream > 0)
    tagged = on_stream | (trace.tid != MISSING)
    if not tagged.any():
        return keys, labels
    value = np.where(on_stream, trace.stream, trace.tid)[tagged]
    combos, inverse = np.unique(np.stack([keys[tagged], on_stream[tagged].astype(np.int64), value], axis=1),
                                axis=0, return_inverse=True)
    index: dict[str, int] = {}
    codes = [index.setdefault(f"{labels[k] if k < len(KIND_NAMES) else ''} {'stream' if is_stream else 'tid'} {v}",
                              len(labels) + len(index)) for k, is_stream, v in combos.tolist()]
    keys[tagged] = np.asarray(codes, dtype=np.int64)[inverse.ravel()]
    return keys, labels + list(index)


def rank_tracks(trace: Trace, sched: RankSchedule, kinds: np.ndarray, *, nesting: bool = True) -> RankTracks:
    """Tracks, leaf flags and exclusive segments of one rank under schedule ``sched``.

    With ``nesting`` (profiled traces: a call holds its callees on its thread), a node inside another
    on its track is its child. Nodes that overlap without nesting, or any overlap when ``nesting`` is
    off (a simulated or dependency-only schedule runs independent ops at once), go to extra lanes
    ("compute #2", ...), so every track nests properly.
    """
    n = len(trace)
    keys, key_labels = _track_keys(trace, sched, kinds)
    ran_rows = np.flatnonzero(sched.ran)
    used = np.unique(keys[ran_rows]).tolist()
    labels = sorted((key_labels[k] for k in used), key=_track_sort_key)
    position = {label: i for i, label in enumerate(labels)}
    remap = np.full(len(key_labels), -1, dtype=np.int32)
    remap[used] = [position[key_labels[k]] for k in used]
    track = np.full(n, -1, dtype=np.int32)
    track[ran_rows] = remap[keys[ran_rows]]
    start, end = sched.start_ns, sched.end_ns
    # Per track by start time, longer first on ties, so a parent precedes the children it holds.
    order = np.lexsort((-(end[ran_rows] - start[ran_rows]), start[ran_rows], track[ran_rows]))
    rows = ran_rows[order]
    t, s, e = track[rows], start[rows], end[rows]
    # does a node start before some earlier node of its track ended? A running maximum of ends
    # per track: exact integer keys (track, time code) keep one track's maximum from leaking into the next
    codes, inverse = np.unique(np.concatenate((s, e)), return_inverse=True)
    base = t.astype(np.int64) * (len(codes) + 1)
    start_key, end_key = base + inverse[:len(s)], base + inverse[len(s):]
    overlaps = np.zeros(len(rows), dtype=bool)
    overlaps[1:] = (t[1:] == t[:-1]) & (start_key[1:] < np.maximum.accumulate(end_key)[:-1])
    leaf = np.zeros(n, dtype=bool)
    leaf[rows] = True
    if not overlaps.any():
        return RankTracks(track, labels, leaf, s, e, rows)
    nestable = kinds[rows] != COMM if nesting else np.zeros(len(rows), dtype=bool)
    lane, holder, seg = _lanes(rows, t, s, e, nestable)
    parent = np.full(n, -1, dtype=np.int64)
    parent[rows] = holder
    leaf[holder[holder >= 0]] = False
    # renumber (track, lane) pairs into tracks, lanes right after their base track
    pair = t.astype(np.int64) * (int(lane.max()) + 1) + lane
    uniq, new_index = np.unique(pair, return_inverse=True)
    width = int(lane.max()) + 1
    names = [labels[u // width] + (f" #{u % width + 1}" if u % width else "") for u in uniq.tolist()]
    track[rows] = new_index
    return RankTracks(track, names, leaf, *seg, parent=parent)


def _track_sort_key(label: str) -> tuple[int, str]:
    head = label.split(" ", 1)[0]
    rank = {"cpu": 0, "compute": 1, "comm": 2, "memory": 3}.get(head, 4)
    return rank, label


class _Lane:
    """Open nodes of one lane (innermost last) and how far its exclusive segments reach."""

    __slots__ = ("stack", "cursor")

    def __init__(self, cursor: float) -> None:
        self.stack: list[tuple[float, int]] = []
        self.cursor = cursor

    def close_until(self, limit: float, out: tuple[list, list, list]) -> None:
        """Emit segments up to ``limit``: time goes to the innermost open node."""
        stack = self.stack
        while stack and stack[-1][0] <= limit:
            end, row = stack.pop()
            if end > self.cursor:
                out[0].append(self.cursor)
                out[1].append(end)
                out[2].append(row)
                self.cursor = end
        if stack and limit > self.cursor:
            out[0].append(self.cursor)
            out[1].append(limit)
            out[2].append(stack[-1][1])
        self.cursor = max(self.cursor, limit)


def _lanes(rows: np.ndarray, t: np.ndarray, s: np.ndarray, e: np.ndarray, nestable: np.ndarray):  # type: ignore[no-untyped-def]
    """First-fit lanes where nodes nest, plus exclusive segments; in Python, but only on tracks that overlap.

    Returns per sorted row its lane and the row it nests in (-1), and the segments. Only ``nestable``
    rows (host ops of a profiled thread) nest; others that overlap go to a new lane.
    """
    out: tuple[list[float], list[float], list[int]] = ([], [], [])
    lane_of = np.zeros(len(rows), dtype=np.int64)
    holder = np.full(len(rows), -1, dtype=np.int64)
    lanes: list[_Lane] = []
    current = -1
    for i, (row, track, start, end, nest) in enumerate(zip(rows.tolist(), t.tolist(), s.tolist(), e.tolist(),
                                                           nestable.tolist())):
        if track != current:
            for lane in lanes:
                lane.close_until(float("inf"), out)
            lanes = []
            current = track
        for k, lane in enumerate(lanes):
            lane.close_until(start, out)
            if not lane.stack or (nest and end <= lane.stack[-1][0]):
                break
        else:
            k, lane = len(lanes), _Lane(start)
            lanes.append(lane)
        if lane.stack:
            holder[i] = lane.stack[-1][1]
        lane.stack.append((end, row))
        lane_of[i] = k
    for lane in lanes:
        lane.close_until(float("inf"), out)
    seg = (np.asarray(out[0], dtype=np.float64), np.asarray(out[1], dtype=np.float64),
           np.asarray(out[2], dtype=np.int64))
    return lane_of, holder, seg
