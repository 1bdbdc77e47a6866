"""Tracks (where a node ran: a thread, a stream or a simulated resource) and interval arithmetic.

A rank's nodes are laid out on tracks. Profiled traces nest on a track (a ``ProfilerStep#`` range
holds the ops it called), so each track is cut into *exclusive segments*: every instant belongs to
the innermost node running there. Breakdowns, exclusive operator time and the critical path all read
those segments, so nested parents never swallow their children's time.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..arrays import distinct, unique_inverse
from ..model.accounting import union_intervals, union_length
from ..model.kinds import RESOURCE_NAMES
from ..model.schedule import RankSchedule
from ..model.trace import MISSING, Trace
from ..records import record
from .kinds import COMM, COMPUTE, CPU, KIND_NAMES, MEMORY

__all__ = ["RankTracks", "rank_tracks", "union_intervals", "union_length"]

_KIND_RESOURCE = {COMPUTE: "compute", CPU: "cpu", COMM: "comm", MEMORY: "memory"}


@record
class RankTracks:
    """Track layout of one rank's scheduled rows."""

    track: np.ndarray  # int32 per row (-1: did not run)
    names: list[str]  # track index -> label, e.g. "cpu tid 1", "comm"
    leaf: np.ndarray  # bool per row: ran and holds no other node of its track
    seg_start: np.ndarray  # exclusive segments (int64 ns), sorted by track then time
    seg_end: np.ndarray
    seg_row: np.ndarray  # row that owns each segment
    parent: np.ndarray | None = None  # int64 per row: the node it nests in on its track (-1: none)

    def exclusive_ns(self, n_rows: int) -> np.ndarray:
        """Per row, the time (int64 ns) it ran with no nested child on its track."""
        out = np.zeros(n_rows, dtype=np.int64)
        np.add.at(out, self.seg_row, self.seg_end - self.seg_start)
        return out


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
    values, vcode = unique_inverse(np.where(on_stream, trace.stream, trace.tid)[tagged])
    # one int64 per (kind, on stream, value) in their lexicographic order: a 1-D unique, not a slow axis=0 one
    packed = (keys[tagged] * 2 + on_stream[tagged]) * len(values) + vcode.ravel()
    combos, inverse = unique_inverse(packed)
    pair, v_of = np.divmod(combos, len(values))
    index: dict[str, int] = {}
    codes = [index.setdefault(f"{labels[k] if k < len(KIND_NAMES) else ''} {'stream' if is_stream else 'tid'} {v}",
                              len(labels) + len(index))
             for k, is_stream, v in zip((pair // 2).tolist(), (pair % 2).tolist(), values[v_of].tolist(), strict=True)]
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
    used = distinct(keys[ran_rows]).tolist()
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
    # per track: exact integer keys (track, time) keep one track's maximum from leaking into the next
    start_key, end_key = _track_time_keys(t, s, e)
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
    uniq, new_index = unique_inverse(pair)
    width = int(lane.max()) + 1
    names = [labels[u // width] + (f" #{u % width + 1}" if u % width else "") for u in uniq.tolist()]
    track[rows] = new_index
    seg_s, seg_e, seg_r = seg
    by_time = np.lexsort((seg_s, track[seg_r]))
    return RankTracks(track, names, leaf, seg_s[by_time], seg_e[by_time], seg_r[by_time], parent=parent)


def _track_time_keys(t: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 keys of the starts and ends, ordered by (track, time): each track's times offset into a range of
    their own (a time code, the time's rank among all of them, where the offsets would not fit 64 bits)."""
    if not len(t):
        return s.astype(np.int64), e.astype(np.int64)
    lo, hi = min(int(s.min()), int(e.min())), max(int(s.max()), int(e.max()))
    width = hi - lo + 1
    if (int(t.max()) + 1) * width < 1 << 62:
        base = t.astype(np.int64) * width - lo
        return base + s, base + e
    codes, inverse = np.unique(np.concatenate((s, e)), return_inverse=True)
    base = t.astype(np.int64) * (len(codes) + 1)
    return base + inverse[:len(s)], base + inverse[len(s):]


def _track_sort_key(label: str) -> tuple[int, str]:
    head = label.split(" ", 1)[0]
    rank = {"cpu": 0, "compute": 1, "comm": 2, "memory": 3}.get(head, 4)
    return rank, label


_NEST_SCAN = 8  # open ops examined, latest first, for one that holds a new op


def _nested_track(s: np.ndarray, e: np.ndarray, nestable: np.ndarray) -> tuple[np.ndarray, tuple] | None:
    """:func:`_lanes` of one track whose nodes all fit in one lane, with arrays: every node either starts
    when nothing is open (it takes lane 0) or is nestable and held by the innermost open node. Returns per
    node (in the given order: by start, longer first) the index of the node it nests in (-1), and the
    exclusive segments (start, end, index of the owner); ``None`` when the track needs more lanes.

    It replays :func:`_lanes`' sweep: every node's start, its end before any later start at or after it
    (an end at a start closes first; a zero-length node closes right after it opens), ends at one instant
    inner first. With one lane the open nodes are a stack: a node's depth says where it goes, the node it
    nests in is the last one started a level up, and that must hold it (else it is not one lane)."""
    m = len(s)
    if not m or bool((e < s).any()):
        return None
    k = np.arange(m, dtype=np.int64)
    zero = e == s
    # sweep order: time, then ends of nodes with length (inner first) before starts and zero-length ends
    time = np.concatenate((s, e))
    late = np.concatenate((np.ones(m, dtype=np.int8), zero.astype(np.int8)))
    tie = np.concatenate((2 * k, np.where(zero, 2 * k + 1, -k)))
    order = np.lexsort((tie, late, time))
    del tie, late  # (a track may hold most of a rank's rows: keep the peak low)
    opens = order < m
    depth = np.cumsum(np.where(opens, 1, -1))
    level = np.empty(m, dtype=np.int64)
    level[order[opens]] = depth[opens] - 1
    del depth
    # the node it nests in: the last node started before it one level up
    key = level * m + k
    by_level = np.sort(key)
    at = np.searchsorted(by_level, key - m) - 1
    inner = np.full(m, -1, dtype=np.int64)
    up = level > 0
    cand = by_level[np.maximum(at, 0)]
    if bool((up & ((at < 0) | (cand // m != level - 1))).any()):
        return None
    inner[up] = cand[up] % m
    if not bool(nestable[up].all()) or bool((e[inner[up]] < e[up]).any()):
        return None
    # segments: between consecutive sweep events that are apart, owned by the innermost node open
    del key, by_level, at, cand
    owner = np.where(opens, order % m, inner[order % m])
    times = time[order]
    del time, order, opens
    cut = np.flatnonzero((times[1:] > times[:-1]) & (owner[:-1] >= 0))
    return inner, (times[cut], times[cut + 1], owner[cut])


def _lanes(rows: np.ndarray, t: np.ndarray, s: np.ndarray, e: np.ndarray, nestable: np.ndarray):  # type: ignore[no-untyped-def]
    """Lanes where nodes nest, plus exclusive segments, in O(n log n) (heaps of lane end times).

    Rows come sorted by track, start, longer first. Per track, in start order: every op that has ended
    by a node's start is closed first (a heap of end times, inner ops first on ties); a ``nestable``
    node (host op of a profiled thread) then nests in the latest-started open op that holds it, among
    the last :data:`_NEST_SCAN` still open, when that op is the innermost of its lane; any other node
    takes the lowest free lane (a heap of free lane numbers), or a new one. Returns per sorted row its
    lane and the row it nests in (-1), and the exclusive segments (time goes to a lane's innermost op).
    """
    n = len(rows)
    lane_of = [0] * n
    holder = [-1] * n
    seg_s: list[int] = []
    seg_e: list[int] = []
    seg_r: list[int] = []
    row_l, t_l, s_l, e_l, nest_l = rows.tolist(), t.tolist(), s.tolist(), e.tolist(), nestable.tolist()
    heappush, heappop = heapq.heappush, heapq.heappop
    # open ops in start order, a linked list over sorted-row indices (i -> previous / next open i, -1: none)
    prev = [-1] * n
    nxt = [-1] * n
    done: list[tuple[int, int, np.ndarray, int, tuple[np.ndarray, np.ndarray, np.ndarray]]] = []  # array tracks
    i = 0
    while i < n:
        track = t_l[i]
        stop = int(np.searchsorted(t, track, side="right"))
        nested = _nested_track(s[i:stop], e[i:stop], nestable[i:stop])
        if nested is not None:  # one lane: done with arrays (kept as arrays: Python ints weigh 4x more)
            inner, segs = nested
            done.append((i, stop, np.where(inner >= 0, rows[i:stop][inner], -1), len(seg_s),
                         (segs[0], segs[1], rows[i:stop][segs[2]])))
            i = stop
            continue
        stacks: list[list[int]] = []   # per lane: open sorted-row indices, innermost last
        cursor: list[int] = []         # per lane: how far its segments reach
        free: list[int] = []           # heap of empty lanes
        ends: list[tuple[int, int]] = []   # heap of (end, -i) of open ops: inner (later) ops first on ties
        tail = -1

        def close(limit: int) -> None:
            nonlocal tail
            while ends and ends[0][0] <= limit:
                end, neg = heappop(ends)
                j = -neg
                lane = lane_of[j]
                stack = stacks[lane]
                stack.pop()  # j is its lane's innermost op: inner ops end no later, and pop first
                if end > cursor[lane]:
                    seg_s.append(cursor[lane])
                    seg_e.append(end)
                    seg_r.append(row_l[j])
                    cursor[lane] = end
                if not stack:
                    heappush(free, lane)
                p, q = prev[j], nxt[j]  # unlink j from the open list
                if q >= 0:
                    prev[q] = p
                else:
                    tail = p
                if p >= 0:
                    nxt[p] = q

        while i < n and t_l[i] == track:
            start, end = s_l[i], e_l[i]
            if ends and ends[0][0] <= start:
                close(start)
            lane = -1
            if nest_l[i]:
                j, looked = tail, 0
                while j >= 0 and looked < _NEST_SCAN:
                    if e_l[j] >= end and stacks[lane_of[j]][-1] == j:
                        lane = lane_of[j]
                        holder[i] = row_l[j]
                        break
                    j = prev[j]
                    looked += 1
            if lane < 0:
                if free:
                    lane = heappop(free)
                else:
                    lane = len(stacks)
                    stacks.append([])
                    cursor.append(start)
                cursor[lane] = start
            else:
                top = stacks[lane][-1]
                if start > cursor[lane]:
                    seg_s.append(cursor[lane])
                    seg_e.append(start)
                    seg_r.append(row_l[top])
                    cursor[lane] = start
            stacks[lane].append(i)
            lane_of[i] = lane
            heappush(ends, (end, -i))
            prev[i] = tail
            if tail >= 0:
                nxt[tail] = i
            tail = i
            i += 1
        close(np.iinfo(np.int64).max)
    held = np.asarray(holder, dtype=np.int64)
    walked = [np.asarray(x, dtype=np.int64) for x in (seg_s, seg_e, seg_r)]
    pieces: list[list[np.ndarray]] = [[], [], []]  # every track's segments, in track order
    at = 0
    for first, stop, inner_rows, before, segs in done:
        held[first:stop] = inner_rows
        for k in range(3):
            pieces[k] += [walked[k][at:before], segs[k]]
        at = before
    seg = tuple(np.concatenate(pieces[k] + [walked[k][at:]]) for k in range(3))
    return np.asarray(lane_of, dtype=np.int64), held, seg
