"""Load imbalance and stragglers: who is late, and how much waiting that lateness costs the others.

For every collective instance the member that arrived (started) last is the one the others waited for;
each other member waited from its own start until that arrival (or its own end, whichever is first: the
same waiting :mod:`etkit.model.accounting` counts). For every send/recv pair, a receive posted before its
send waited for the sender. Per rank, **caused** is the waiting it imposed on others (the sum over the
instances and pairs where it was the one waited for) and **waited** what it spent waiting itself.

Lateness is judged against the ranks that do the same work (its role class, :mod:`.roles`): in a
pipeline every stage makes the next one wait by design, so what singles a rank out is the waiting it
causes beyond the median of its class (``excess``). A **straggler** is a rank whose excess exceeds
``threshold`` (default 5 %) of the median rank span; a rank alone in its class is never one. The table
is ranked by caused waiting. Busy time (span minus waiting and idle) is reported beside it, with
max/mean busy as the imbalance figure.
"""

from __future__ import annotations

from dataclasses import field

import numpy as np

from ..model.job import Job
from ..model.schedule import Schedule
from ..records import record
from .breakdown import BreakdownResult, rank_breakdown
from .context import AnalysisContext, collective_members, last_arrival, prepare
from .crossrank import pg_name_of
from .kinds import comm_label
from .tables import Table

__all__ = ["RankLoad", "Imbalance", "LateEvent", "imbalance"]

#: The longest waits kept per job, with who caused them (the report and --json list them).
MAX_EVENTS = 50


@record
class RankLoad:
    rank: int
    busy_ns: int
    compute_ns: int
    end_ns: int  # finish time relative to the job's first start
    caused_ns: int  # waiting this rank imposed on others by arriving last
    waited_ns: int  # waiting this rank did itself
    excess_ns: int  # caused_ns minus the median of its role class
    late_count: int  # collectives and receives it was the one waited for
    busy_over_median: float  # busy_ns / median busy - 1
    end_over_median: float
    role: int = 0  # its role class (etkit.analyze.roles)

    def to_json(self) -> dict:
        return dict(self.__dict__)


@record
class LateEvent:
    """One collective instance or send/recv pair where members waited for the last one to arrive."""

    what: str  # "ALL_REDUCE", "SEND->RECV", ...
    group: str  # process group ("" for point-to-point)
    late_rank: int  # the member that arrived last (waited for)
    node_id: int  # its node
    name: str
    start_ns: int  # its arrival, relative to the job's first start
    waits: dict[int, int]  # rank -> how long it waited for the late member

    @property
    def total_ns(self) -> int:
        return sum(self.waits.values())

    def to_json(self) -> dict:
        return {"what": self.what, "group": self.group, "late_rank": self.late_rank, "node_id": self.node_id,
                "name": self.name, "start_ns": self.start_ns, "total_wait_ns": self.total_ns,
                "waits_ns": {str(r): w for r, w in sorted(self.waits.items())}}


@record
class Imbalance:
    source: str
    ranks: list[RankLoad]  # most waiting caused first
    median_busy_ns: float
    mean_busy_ns: float
    max_busy_ns: int
    imbalance: float  # max busy / mean busy (1.0 = perfectly balanced)
    stragglers: list[RankLoad]
    threshold: float
    median_span_ns: float = 0.0
    events: list[LateEvent] = field(default_factory=list)  # the longest waits, longest first

    def tables(self) -> list[Table]:
        cols = list(RankLoad.__dataclass_fields__)
        straggler = {r.rank for r in self.stragglers}
        return [Table("ranks", cols + ["straggler"], [[getattr(r, c) for c in cols] + [r.rank in straggler]
                                                      for r in self.ranks]),
                Table("late_arrivals", ["what", "group", "late_rank", "node_id", "name", "start_ns", "waiting_rank",
                                        "wait_ns"],
                      [[e.what, e.group, e.late_rank, e.node_id, e.name, e.start_ns, w, t]
                       for e in self.events for w, t in sorted(e.waits.items())])]

    def to_json(self, max_ranks: int = 4096) -> dict:
        return {"source": self.source, "median_busy_ns": self.median_busy_ns, "mean_busy_ns": self.mean_busy_ns,
                "max_busy_ns": self.max_busy_ns, "imbalance": self.imbalance, "threshold": self.threshold,
                "median_span_ns": self.median_span_ns,
                "stragglers": [r.to_json() for r in self.stragglers],
                "ranks": [r.to_json() for r in self.ranks[:max_ranks]],
                "events": [e.to_json() for e in self.events]}


@record
class _Waits:
    """Per waiting member (flattened): who waited, for whom, how long, in which event."""

    waiter: np.ndarray
    late: np.ndarray
    wait: np.ndarray
    event: np.ndarray  # index into the event descriptions
    descr: list[tuple[str, str, int, int, int]]  # (what, group, late rank, late row, arrival)


def _collective_waits(ctx: AnalysisContext) -> _Waits:
    cross = ctx.cross
    scheds = {r: v.sched for r, v in ctx.views.items()}
    m = collective_members(cross, scheds)
    last = last_arrival(m, len(cross.collectives))
    ran = m.ran
    # the late member of each instance: latest start, ties to the member listed first
    order = np.lexsort((-np.arange(len(m.inst)), m.start, m.inst))
    order = order[ran[order]]
    is_last = np.ones(len(order), dtype=bool)
    is_last[:-1] = m.inst[order[1:]] != m.inst[order[:-1]]
    late_of = np.full(len(cross.collectives), -1, dtype=np.int64)
    late_of[m.inst[order[is_last]]] = order[is_last]
    wait = np.where(ran, np.minimum(last[m.inst], m.end) - m.start, 0)
    wait = np.maximum(wait, 0)
    keep = ran & (wait > 0) & (late_of[m.inst] >= 0)
    late_member = late_of[m.inst[keep]]
    insts, event = np.unique(m.inst[keep], return_inverse=True)
    descr = []
    for i in insts.tolist():
        j = int(late_of[i])
        r, row = int(m.rank[j]), int(m.row[j])
        trace = ctx.views[r].trace
        descr.append((comm_label(int(trace.types[row]), int(trace.comm_type[row])), pg_name_of(trace, row), r, row,
                      int(m.start[j])))
    return _Waits(m.rank[keep], m.rank[late_member], wait[keep], event.astype(np.int64), descr)


def _p2p_waits(ctx: AnalysisContext) -> _Waits:
    waiter, late, wait, descr = [], [], [], []
    views = ctx.views
    for send_rank, send_row, recv_rank, recv_row in ctx.cross.p2p:
        if send_rank not in views or recv_rank not in views:
            continue
        rv, sv = views[recv_rank], views[send_rank]
        if not (rv.sched.ran[recv_row] and sv.sched.ran[send_row]):
            continue
        start = int(rv.sched.start_ns[recv_row])
        w = min(int(rv.transfer[recv_row]), int(rv.sched.end_ns[recv_row])) - start
        if w <= 0:
            continue
        waiter.append(recv_rank)
        late.append(send_rank)
        wait.append(w)
        descr.append(("SEND->RECV", "", send_rank, send_row, int(sv.sched.start_ns[send_row])))
    n = len(waiter)
    return _Waits(np.asarray(waiter, dtype=np.int64), np.asarray(late, dtype=np.int64),
                  np.asarray(wait, dtype=np.int64), np.arange(n, dtype=np.int64), descr)


def _events(ctx: AnalysisContext, waits: _Waits, offset: int) -> list[LateEvent]:
    if not len(waits.wait):
        return []
    totals = np.bincount(waits.event, weights=waits.wait, minlength=len(waits.descr))
    top = np.argsort(-totals, kind="stable")[:MAX_EVENTS]
    out = []
    for e in top.tolist():
        what, group, r, row, arrival = waits.descr[e]
        sel = waits.event == e
        trace = ctx.views[r].trace
        out.append(LateEvent(what, group, r, int(trace.ids[row]), trace.name(row), arrival - ctx.origin_ns,
                             dict(zip(waits.waiter[sel].tolist(), waits.wait[sel].tolist()))))
    return out


def imbalance(job: Job, schedule: Schedule | None = None, *, threshold: float = 0.05,
              context: AnalysisContext | None = None, breakdown: BreakdownResult | None = None) -> Imbalance:
    """Per-rank load, lateness and stragglers of ``job`` (``breakdown``: one already computed on the same
    context)."""
    ctx = prepare(job, schedule, context=context)
    origin = ctx.origin_ns
    ranks = sorted(ctx.views)
    parts = [breakdown.ranks[r] if breakdown else rank_breakdown(ctx.views[r]) for r in ranks]
    index = {r: i for i, r in enumerate(ranks)}
    coll, p2p = _collective_waits(ctx), _p2p_waits(ctx)
    caused = np.zeros(len(ranks), dtype=np.int64)
    waited = np.zeros(len(ranks), dtype=np.int64)
    late_count = np.zeros(len(ranks), dtype=np.int64)
    for w in (coll, p2p):
        if len(w.wait):
            to_index = np.vectorize(index.__getitem__, otypes=[np.int64])
            np.add.at(caused, to_index(w.late), w.wait)
            np.add.at(waited, to_index(w.waiter), w.wait)
            late_ranks = np.asarray([d[2] for d in w.descr], dtype=np.int64)
            np.add.at(late_count, to_index(late_ranks), 1)
    busy = np.array([b.busy_ns for b in parts], dtype=np.int64)
    spans = np.array([b.span_ns for b in parts], dtype=np.int64)
    ends = np.array([ctx.views[r].span[1] - origin if ctx.views[r].sched.ran.any() else 0 for r in ranks],
                    dtype=np.int64)
    med_busy = float(np.median(busy)) if len(busy) else 0.0
    med_end = float(np.median(ends)) if len(ends) else 0.0
    med_span = float(np.median(spans)) if len(spans) else 0.0
    role = np.zeros(len(ranks), dtype=np.int64)
    excess = np.zeros(len(ranks), dtype=np.int64)
    alone = np.zeros(len(ranks), dtype=bool)
    for cls in ctx.roles:
        idx = np.asarray([index[r] for r in cls.ranks if r in index], dtype=np.int64)
        role[idx] = cls.index
        excess[idx] = caused[idx] - int(np.median(caused[idx])) if len(idx) else 0
        alone[idx] = len(idx) < 2
    loads = [RankLoad(r, int(busy[i]), parts[i].compute_ns, int(ends[i]), int(caused[i]), int(waited[i]),
                      int(excess[i]), int(late_count[i]), float(busy[i] / med_busy - 1) if med_busy else 0.0,
                      float(ends[i] / med_end - 1) if med_end else 0.0, int(role[i])) for i, r in enumerate(ranks)]
    loads.sort(key=lambda x: (-x.caused_ns, -x.busy_ns, x.rank))
    stragglers = [x for x in loads if x.excess_ns > threshold * med_span and not alone[index[x.rank]]]
    events = sorted(_events(ctx, coll, origin) + _events(ctx, p2p, origin), key=lambda e: -e.total_ns)[:MAX_EVENTS]
    mean = float(busy.mean()) if len(busy) else 0.0
    return Imbalance(ctx.source_text, loads, med_busy, mean, int(busy.max()) if len(busy) else 0,
                     float(busy.max() / mean) if mean else 1.0, stragglers, threshold, med_span, events)
