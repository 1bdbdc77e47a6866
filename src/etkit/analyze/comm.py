"""Communication: volume and time by collective type, by process group and by message size, and the
rank x rank traffic matrix.

Volume is ``comm_size`` as written (the logical message). The traffic matrix counts bytes on the wire:
each rank's collectives are expanded into the sends the chosen algorithm makes (``comm_size`` meaning
follows ASTRA-sim: ALL_GATHER's is the per-rank shard, the others' the whole buffer); point-to-point
sends count as written (receives are not counted again).

Algorithms (members in ascending rank order, p of them, size S):

============== ===================================== ==========================================
collective     ring                                  direct
============== ===================================== ==========================================
ALL_REDUCE     2(p-1)/p*S to the next member         2*S/p to every other member
REDUCE_SCATTER (p-1)/p*S to the next member          S/p to every other member
ALL_GATHER     (p-1)*S to the next member            S to every other member
ALL_TO_ALL     S/p to every other member             S/p to every other member
BROADCAST      S from each member to the next,       S from the root (first member) to each other
               except the last
REDUCE         S from each member to the previous,   S from each other member to the root
               except the root (first member)
GATHER         S from each other member to the root  same
SCATTER        S/p from the root to each other       same
BARRIER        nothing                               nothing
============== ===================================== ==========================================
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import field

import numpy as np

from ..format.schema import CommType, NodeType
from ..model.job import Job
from ..model.schedule import Schedule
from ..model.trace import MISSING
from ..records import record
from ..units import format_bytes
from .context import AnalysisContext, RankView, prepare
from .crossrank import pg_name_of
from .kinds import comm_label
from .tables import Table

__all__ = ["CommStats", "CommSummary", "SizeHistogram", "comm_summary", "traffic_matrix",
           "collective_sends", "ALGORITHMS"]

ALGORITHMS = ("ring", "direct")


@record
class CommStats:
    count: int = 0
    bytes: float = 0.0
    time_ns: int = 0
    unknown_size: int = 0

    def add(self, count: int, nbytes: float, time_ns: int, unknown: int) -> None:
        self.count += count
        self.bytes += nbytes
        self.time_ns += time_ns
        self.unknown_size += unknown

    def to_json(self) -> dict:
        return {"count": self.count, "bytes": self.bytes, "time_ns": self.time_ns,
                "unknown_size": self.unknown_size}


@record
class SizeHistogram:
    """Message counts per power-of-two size bin: bin ``i`` holds sizes in ``[2**i, 2**(i+1))``; bin -1 holds 0."""

    counts: dict[int, int] = field(default_factory=dict)
    bytes: dict[int, float] = field(default_factory=dict)

    @staticmethod
    def bin_label(b: int) -> str:
        if b < 0:
            return "0 B"
        return f"{format_bytes(2 ** b)}-{format_bytes(2 ** (b + 1))}"

    def to_json(self) -> list[dict]:
        return [{"bin": b, "label": self.bin_label(b), "count": self.counts[b], "bytes": self.bytes[b]}
                for b in sorted(self.counts)]


@record
class CommSummary:
    source: str
    algorithm: str
    by_type: dict[str, CommStats]
    by_group: dict[str, CommStats]
    by_rank: dict[int, CommStats]
    histogram: SizeHistogram
    matrix: np.ndarray  # bytes, [src rank, dst rank]
    ranks: list[int]

    @property
    def total(self) -> CommStats:
        out = CommStats()
        for s in self.by_type.values():
            out.add(s.count, s.bytes, s.time_ns, s.unknown_size)
        return out

    def tables(self) -> list[Table]:
        head = ["count", "bytes", "time_ns", "unknown_size"]

        def rows(items):  # type: ignore[no-untyped-def]
            return [[k, s.count, s.bytes, s.time_ns, s.unknown_size] for k, s in items]

        out = [Table("comm_by_type", ["type"] + head, rows(sorted(self.by_type.items()))),
               Table("comm_by_group", ["process_group"] + head, rows(sorted(self.by_group.items()))),
               Table("comm_by_rank", ["rank"] + head, rows(sorted(self.by_rank.items()))),
               Table("message_sizes", ["bin", "label", "count", "bytes"],
                     [[b, self.histogram.bin_label(b), self.histogram.counts[b], self.histogram.bytes[b]]
                      for b in sorted(self.histogram.counts)])]
        nz = np.argwhere(self.matrix > 0)
        out.append(Table("traffic_matrix", ["src_rank", "dst_rank", "bytes"],
                         [[self.ranks[i], self.ranks[j], float(self.matrix[i, j])] for i, j in nz.tolist()]))
        return out

    def to_json(self, matrix_limit: int = 256) -> dict:
        out = {"source": self.source, "algorithm": self.algorithm, "total": self.total.to_json(),
               "by_type": {k: v.to_json() for k, v in sorted(self.by_type.items())},
               "by_group": {k: v.to_json() for k, v in sorted(self.by_group.items())},
               "by_rank": {str(k): v.to_json() for k, v in sorted(self.by_rank.items())},
               "size_histogram": self.histogram.to_json(),
               "matrix_total_bytes": float(self.matrix.sum())}
        if len(self.matrix) <= matrix_limit:
            out["matrix_bytes"] = self.matrix.tolist()
        return out



def collective_sends(comm_type: int, members: tuple[int, ...], rank: int, size: float,
                     algorithm: str = "ring") -> list[tuple[int, float]]:
    """``(destination, bytes)`` that ``rank`` sends for one collective (see the module table)."""
    p = len(members)
    if p < 2 or rank not in members or size <= 0:
        return []
    i = members.index(rank)
    nxt, prv, root = members[(i + 1) % p], members[i - 1], members[0]
    others = [m for m in members if m != rank]
    ring = algorithm == "ring"
    if comm_type == CommType.ALL_REDUCE:
        return [(nxt, 2 * (p - 1) / p * size)] if ring else [(m, 2 * size / p) for m in others]
    if comm_type in (CommType.REDUCE_SCATTER, CommType.REDUCE_SCATTER_BLOCK):
        return [(nxt, (p - 1) / p * size)] if ring else [(m, size / p) for m in others]
    if comm_type == CommType.ALL_GATHER:
        return [(nxt, (p - 1) * size)] if ring else [(m, size) for m in others]
    if comm_type == CommType.ALL_TO_ALL:
        return [(m, size / p) for m in others]
    if comm_type == CommType.BROADCAST:
        if ring:
            return [(nxt, size)] if i < p - 1 else []
        return [(m, size) for m in others] if rank == root else []
    if comm_type == CommType.REDUCE:
        if rank == root:
            return []
        return [(prv, size)] if ring else [(root, size)]
    if comm_type == CommType.GATHER:
        return [] if rank == root else [(root, size)]
    if comm_type == CommType.SCATTER:
        return [(m, size / p) for m in others] if rank == root else []
    return []


def _size_bins(sizes: np.ndarray) -> np.ndarray:
    bins = np.full(len(sizes), -1, dtype=np.int64)
    pos = sizes > 0
    bins[pos] = np.floor(np.log2(sizes[pos].astype(np.float64))).astype(np.int64)
    return bins


def _members(ctx: AnalysisContext, pg: str, cache: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    got = cache.get(pg)
    if got is None:
        try:
            got = tuple(ctx.job.members(pg))
        except KeyError:  # a group nobody declared: its members are the ranks that call it
            got = tuple(sorted({r for inst, (g, _) in zip(ctx.cross.collectives, ctx.cross.collective_groups)
                                if g == pg for r, _ in inst}))
        cache[pg] = got
    return got


def _rank_comm(view: RankView, ctx: AnalysisContext, summary: CommSummary, index: dict[int, int],
               members_cache: dict[str, tuple[int, ...]]) -> None:
    trace = view.trace
    rows = trace.comm_rows()
    if not len(rows):
        summary.by_rank[view.rank] = CommStats()
        return
    sizes_raw = trace.comm_size[rows]
    unknown = sizes_raw == MISSING
    sizes = np.where(unknown | (sizes_raw < 0), 0, sizes_raw).astype(np.float64)
    times = view.durations()[rows]
    types = trace.types[rows]
    ctypes = trace.comm_type[rows]
    pgs = [pg_name_of(trace, r) for r in rows.tolist()]
    # group identical (label, pg) keys so Python work is per distinct key, not per node
    labels = [comm_label(int(t), int(c)) for t, c in zip(types, ctypes)]
    per_key: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, key in enumerate(zip(labels, pgs)):
        per_key[key].append(i)
    for (label, pg), idx_list in per_key.items():
        idx = np.asarray(idx_list)
        args = (len(idx), float(sizes[idx].sum()), int(times[idx].sum()), int(unknown[idx].sum()))
        summary.by_type.setdefault(label, CommStats()).add(*args)
        summary.by_group.setdefault(pg, CommStats()).add(*args)
    summary.by_rank[view.rank] = CommStats(len(rows), float(sizes.sum()), int(times.sum()), int(unknown.sum()))
    known = ~unknown
    uniq, inverse = np.unique(_size_bins(sizes_raw[known]), return_inverse=True)
    counts = np.bincount(inverse, minlength=len(uniq))
    totals = np.bincount(inverse, weights=sizes[known], minlength=len(uniq))
    hist = summary.histogram
    for b, c, t in zip(uniq.tolist(), counts.tolist(), totals.tolist()):
        hist.counts[b] = hist.counts.get(b, 0) + c
        hist.bytes[b] = hist.bytes.get(b, 0.0) + t
    me = index[view.rank]
    send = types == NodeType.COMM_SEND_NODE
    if send.any():
        dst = trace.comm_dst[rows[send]]
        ok = np.isin(dst, list(index))
        np.add.at(summary.matrix[me], np.asarray([index[int(d)] for d in dst[ok]], dtype=np.int64), sizes[send][ok])
    coll = np.flatnonzero(types == NodeType.COMM_COLL_NODE)
    groups: dict[tuple[int, str], float] = defaultdict(float)
    for i in coll.tolist():
        groups[(int(ctypes[i]), pgs[i])] += sizes[i]
    for (ctype, pg), total in groups.items():
        for dst_rank, nbytes in collective_sends(ctype, _members(ctx, pg, members_cache), view.rank, total,
                                                 summary.algorithm):
            if dst_rank in index:
                summary.matrix[me, index[dst_rank]] += nbytes


def comm_summary(job: Job, schedule: Schedule | None = None, *, algorithm: str = "ring",
                 context: AnalysisContext | None = None) -> CommSummary:
    """Communication volumes, times, size histogram and traffic matrix of ``job``."""
    if algorithm not in ALGORITHMS:
        from ..errors import UsageError

        raise UsageError(f"unknown collective algorithm {algorithm!r} (choose from {', '.join(ALGORITHMS)})")
    ctx = prepare(job, schedule, context=context)
    ranks = sorted(ctx.views)
    index = {r: i for i, r in enumerate(ranks)}
    summary = CommSummary(ctx.source_text, algorithm, {}, {}, {}, SizeHistogram(),
                          np.zeros((len(ranks), len(ranks))), ranks)
    cache: dict[str, tuple[int, ...]] = {}
    for rank in ranks:
        _rank_comm(ctx.views[rank], ctx, summary, index, cache)
    return summary


def traffic_matrix(job: Job, schedule: Schedule | None = None, *, algorithm: str = "ring",
                   context: AnalysisContext | None = None) -> tuple[list[int], np.ndarray]:
    """``(ranks, bytes[src, dst])`` of ``job``'s traffic (see the module docstring)."""
    summary = comm_summary(job, schedule, algorithm=algorithm, context=context)
    return summary.ranks, summary.matrix
