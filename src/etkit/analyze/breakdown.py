"""Where each rank's time goes: compute, exposed and overlapped communication, memory, host, idle.

Per rank, over its span (first start to last end), with time taken from exclusive segments (see
:mod:`.tracks`): ``compute`` is time any compute runs; ``overlapped_comm`` is communication hidden
under compute; ``exposed_comm`` is communication with no compute; ``memory`` is memory traffic with
neither; ``host`` is host-only (CPU op) time on ranks that also have device compute; ``idle`` is the
rest. ``compute + exposed_comm + memory + host + idle == span``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from ..model.job import Job
from ..model.schedule import Schedule
from .context import AnalysisContext, RankView, prepare
from .kinds import COMM, COMPUTE, CPU, MEMORY
from .tracks import union_length

__all__ = ["TimeBreakdown", "BreakdownResult", "breakdown", "rank_breakdown", "CATEGORIES"]

#: The categories that add up to the span, in display order.
CATEGORIES = ("compute", "exposed_comm", "memory", "host", "idle")


@dataclass
class TimeBreakdown:
    """Nanoseconds per category for one rank (or summed over ranks)."""

    span_ns: float = 0.0
    compute_ns: float = 0.0
    exposed_comm_ns: float = 0.0
    overlapped_comm_ns: float = 0.0
    memory_ns: float = 0.0
    host_ns: float = 0.0
    idle_ns: float = 0.0

    @property
    def comm_ns(self) -> float:
        return self.exposed_comm_ns + self.overlapped_comm_ns

    @property
    def busy_ns(self) -> float:
        return self.span_ns - self.idle_ns

    def share(self, category: str) -> float:
        """Fraction of the span spent in ``category`` (one of :data:`CATEGORIES` or "overlapped_comm")."""
        return getattr(self, f"{category}_ns") / self.span_ns if self.span_ns else 0.0

    def __add__(self, other: TimeBreakdown) -> TimeBreakdown:
        return TimeBreakdown(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def to_json(self) -> dict[str, float]:
        return asdict(self)


@dataclass
class BreakdownResult:
    source: str
    ranks: dict[int, TimeBreakdown]

    @property
    def total(self) -> TimeBreakdown:
        """Sum over ranks."""
        out = TimeBreakdown()
        for b in self.ranks.values():
            out = out + b
        return out

    def to_json(self) -> dict:
        return {"source": self.source, "total": self.total.to_json(),
                "ranks": {str(r): b.to_json() for r, b in sorted(self.ranks.items())}}


def rank_breakdown(view: RankView) -> TimeBreakdown:
    """Breakdown of one rank (see the module docstring)."""
    first, last = view.span
    tracks = view.tracks
    seg_kind = view.kinds[tracks.seg_row]
    s, e = tracks.seg_start, tracks.seg_end

    def of(*kinds: int) -> tuple[np.ndarray, np.ndarray]:
        mask = np.isin(seg_kind, kinds)
        return s[mask], e[mask]

    compute = union_length(*of(COMPUTE))
    with_comm = union_length(*of(COMPUTE, COMM))
    comm = union_length(*of(COMM))
    with_memory = union_length(*of(COMPUTE, COMM, MEMORY))
    busy = union_length(*of(COMPUTE, COMM, MEMORY, CPU))
    return TimeBreakdown(
        span_ns=last - first,
        compute_ns=compute,
        exposed_comm_ns=with_comm - compute,
        overlapped_comm_ns=compute + comm - with_comm,
        memory_ns=with_memory - with_comm,
        host_ns=busy - with_memory,
        idle_ns=(last - first) - busy,
    )


def breakdown(job: Job, schedule: Schedule | None = None, *,
              context: AnalysisContext | None = None) -> BreakdownResult:
    """Time breakdown of every rank of ``job``."""
    ctx = prepare(job, schedule, context=context)
    return BreakdownResult(ctx.source_text, {r: rank_breakdown(v) for r, v in sorted(ctx.views.items())})
