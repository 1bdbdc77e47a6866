"""Load imbalance and stragglers: which ranks are busiest or finish last, and by how much.

Busy time is a rank's span minus its idle time (see :mod:`.breakdown`). A straggler is a rank whose
busy time or finish time exceeds the median by more than ``threshold`` (default 5 %).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.job import Job
from ..model.schedule import Schedule
from .breakdown import BreakdownResult, rank_breakdown
from .context import AnalysisContext, prepare

__all__ = ["RankLoad", "Imbalance", "imbalance"]


@dataclass
class RankLoad:
    rank: int
    busy_ns: float
    compute_ns: float
    end_ns: float  # finish time relative to the job's first start
    busy_over_median: float  # busy_ns / median busy - 1
    end_over_median: float


@dataclass
class Imbalance:
    source: str
    ranks: list[RankLoad]  # slowest (most busy) first
    median_busy_ns: float
    mean_busy_ns: float
    max_busy_ns: float
    imbalance: float  # max busy / mean busy (1.0 = perfectly balanced)
    stragglers: list[RankLoad]
    threshold: float

    def to_json(self, max_ranks: int = 4096) -> dict:
        def load(r: RankLoad) -> dict:
            return {"rank": r.rank, "busy_ns": r.busy_ns, "compute_ns": r.compute_ns, "end_ns": r.end_ns,
                    "busy_over_median": r.busy_over_median, "end_over_median": r.end_over_median}

        return {"source": self.source, "median_busy_ns": self.median_busy_ns, "mean_busy_ns": self.mean_busy_ns,
                "max_busy_ns": self.max_busy_ns, "imbalance": self.imbalance, "threshold": self.threshold,
                "stragglers": [load(r) for r in self.stragglers],
                "ranks": [load(r) for r in self.ranks[:max_ranks]]}


def imbalance(job: Job, schedule: Schedule | None = None, *, threshold: float = 0.05,
              context: AnalysisContext | None = None, breakdown: BreakdownResult | None = None) -> Imbalance:
    """Per-rank load and stragglers of ``job`` (``breakdown``: one already computed on the same context)."""
    ctx = prepare(job, schedule, context=context)
    origin = ctx.origin_ns
    ranks = sorted(ctx.views)
    parts = [breakdown.ranks[r] if breakdown else rank_breakdown(ctx.views[r]) for r in ranks]
    busy = np.array([b.busy_ns for b in parts])
    ends = np.array([ctx.views[r].span[1] - origin if ctx.views[r].sched.ran.any() else 0.0 for r in ranks])
    med_busy = float(np.median(busy)) if len(busy) else 0.0
    med_end = float(np.median(ends)) if len(ends) else 0.0
    loads = [RankLoad(r, float(busy[i]), parts[i].compute_ns, float(ends[i]),
                      float(busy[i] / med_busy - 1) if med_busy else 0.0,
                      float(ends[i] / med_end - 1) if med_end else 0.0) for i, r in enumerate(ranks)]
    loads.sort(key=lambda x: (-x.busy_ns, x.rank))
    stragglers = [x for x in loads if x.busy_over_median > threshold or x.end_over_median > threshold]
    mean = float(busy.mean()) if len(busy) else 0.0
    return Imbalance(ctx.source_text, loads, med_busy, mean, float(busy.max()) if len(busy) else 0.0,
                     float(busy.max() / mean) if mean else 1.0, stragglers, threshold)
