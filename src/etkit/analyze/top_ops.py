"""Top operators: where time goes by operator name and by node kind, inclusive and exclusive.

Inclusive time is a node's scheduled duration; exclusive time leaves out the time of nodes nested
inside it on its track (see :mod:`.tracks`) and, for a communication node, the time it waited for its
peers (a receive posted long before its send: :mod:`etkit.model.accounting`). Operators are grouped by name over all ranks.
"""

from __future__ import annotations

import numpy as np

from ..arrays import unique_inverse
from ..model.job import Job
from ..model.schedule import Schedule, measured_times
from ..model.trace import node_type_name
from ..records import record
from .context import AnalysisContext, prepare
from .kinds import COMM, KIND_NAMES
from .tables import Table

__all__ = ["OpStats", "TopOps", "top_ops"]


@record
class OpStats:
    name: str
    kind: str
    count: int
    total_ns: int
    exclusive_ns: int

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "count": self.count, "total_ns": self.total_ns,
                "exclusive_ns": self.exclusive_ns}


@record
class TopOps:
    source: str
    by_name: list[OpStats]  # every operator name, largest total first
    by_kind: list[OpStats]  # per kind ("compute", "comm", ...), name = the node types seen
    by_type: list[OpStats]  # per NodeType

    def by_exclusive(self, n: int = 20) -> list[OpStats]:
        return sorted(self.by_name, key=lambda o: (-o.exclusive_ns, o.name))[:n]

    def tables(self) -> list[Table]:
        head = ["name", "kind", "count", "total_ns", "exclusive_ns"]
        return [Table("top_ops", head, [[o.name, o.kind, o.count, o.total_ns, o.exclusive_ns] for o in self.by_name]),
                Table("time_by_kind", head, [[o.name, o.kind, o.count, o.total_ns, o.exclusive_ns] for o in self.by_kind])]

    def to_json(self, limit: int = 200) -> dict:
        return {"source": self.source, "operators": len(self.by_name),
                "by_total": [o.to_json() for o in self.by_name[:limit]],
                "by_exclusive": [o.to_json() for o in self.by_exclusive(limit)],
                "by_kind": [o.to_json() for o in self.by_kind], "by_type": [o.to_json() for o in self.by_type]}


def _sum_by(index: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Integer sums of ``values`` per ``index`` (bincount would go through float64)."""
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, index, values.astype(np.int64, copy=False))
    return out


def top_ops(job: Job, schedule: Schedule | None = None, *, context: AnalysisContext | None = None) -> TopOps:
    """Operator time of ``job`` grouped by name, kind and node type."""
    ctx = prepare(job, schedule, context=context)
    names: dict[tuple[str, int], list[int]] = {}
    kinds = np.zeros((len(KIND_NAMES), 3), dtype=np.int64)
    types: dict[int, list[int]] = {}
    for view in ctx.views.values():
        trace = view.trace
        ran = view.sched.ran
        n = len(trace)
        dur = view.durations()
        excl = view.tracks.exclusive_ns(n)
        if ctx.schedule.source == "trace":
            # The trace records a host op's self time as the duration, as the profiler nested its thread
            # (an async collective's range holds what ran meanwhile): host ops take it as written. Device rows
            # with measured ns times (ts_ns/dur_ns) take the tracks' exclusive time, to the ns. Without ns
            # times, callers stretched over their callees (timing.schedule_from_trace) take the recorded
            # self time, the others at most it.
            recorded = trace.duration.astype(np.int64) * 1000
            precise = measured_times(trace)[2]
            self_time = recorded if ((dur > recorded) & ~precise).any() else np.minimum(excl, recorded)
            excl = np.where(precise, np.where(trace.is_cpu_op == 1, recorded, excl), self_time)
            excl = np.where(ran, excl, 0)
        # a communication node's own time leaves out its waiting for peers (etkit.model.accounting)
        waited = np.where(ran & (view.kinds == COMM), np.clip(np.minimum(view.transfer, view.sched.end_ns)
                                                              - view.sched.start_ns, 0, None), 0)
        excl = np.maximum(excl - waited, 0)
        # key = (name index, kind): one operator name can appear as two kinds (e.g. cpu and compute)
        key = trace.name_idx.astype(np.int64) * len(KIND_NAMES) + view.kinds
        uniq, inverse = unique_inverse(key[ran])
        count = np.bincount(inverse, minlength=len(uniq))
        total = _sum_by(inverse, dur[ran], len(uniq))
        exclusive = _sum_by(inverse, excl[ran], len(uniq))
        for k, c, t, x in zip(uniq.tolist(), count.tolist(), total.tolist(), exclusive.tolist()):
            entry = names.setdefault((trace.strings[k // len(KIND_NAMES)], k % len(KIND_NAMES)), [0, 0, 0])
            entry[0] += c
            entry[1] += t
            entry[2] += x
        kinds[:, 0] += np.bincount(view.kinds[ran], minlength=len(KIND_NAMES))
        kinds[:, 1] += _sum_by(view.kinds[ran], dur[ran], len(KIND_NAMES))
        kinds[:, 2] += _sum_by(view.kinds[ran], excl[ran], len(KIND_NAMES))
        tu, ti = unique_inverse(trace.types[ran])
        for t, c, d, x in zip(tu.tolist(), np.bincount(ti).tolist(), _sum_by(ti, dur[ran], len(tu)).tolist(),
                              _sum_by(ti, excl[ran], len(tu)).tolist()):
            entry = types.setdefault(t, [0, 0, 0])
            entry[0] += c
            entry[1] += d
            entry[2] += x
    by_name = [OpStats(name, KIND_NAMES[k], int(v[0]), v[1], v[2]) for (name, k), v in names.items()]
    by_name.sort(key=lambda o: (-o.total_ns, o.name))
    by_kind = [OpStats(KIND_NAMES[i], KIND_NAMES[i], int(kinds[i, 0]), int(kinds[i, 1]), int(kinds[i, 2]))
               for i in range(len(KIND_NAMES)) if kinds[i, 0]]
    by_type = [OpStats(node_type_name(t), "", int(v[0]), v[1], v[2]) for t, v in sorted(types.items())]
    return TopOps(ctx.source_text, by_name, by_kind, by_type)
