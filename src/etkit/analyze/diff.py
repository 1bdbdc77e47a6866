"""What changed between two jobs: node counts, makespan, critical path, breakdown, op times, comm volume."""

from __future__ import annotations

from collections.abc import Mapping

from ..model.job import Job
from ..model.schedule import Schedule
from ..records import record
from .breakdown import CATEGORIES
from .job_analysis import JobAnalysis, analyze_job

__all__ = ["Delta", "JobDiff", "diff_jobs", "diff_analyses"]


@record
class Delta:
    key: str
    a: float
    b: float

    @property
    def delta(self) -> float:
        return self.b - self.a

    @property
    def ratio(self) -> float | None:
        """``b / a`` (None when ``a`` is 0)."""
        return self.b / self.a if self.a else None

    @property
    def ratio_text(self) -> str:
        """``1.250x``; "new" when only ``b`` has it; "-" when both are 0."""
        if self.ratio is not None:
            return f"{self.ratio:.3f}x"
        return "new" if self.b else "-"

    def to_json(self) -> dict:
        return {"key": self.key, "a": self.a, "b": self.b, "delta": self.delta, "ratio": self.ratio}


@record
class JobDiff:
    a_name: str
    b_name: str
    summary: list[Delta]  # makespan, critical path, ranks
    node_counts: list[Delta]
    breakdown: list[Delta]  # summed over ranks
    op_time: list[Delta]  # by operator name, largest |delta| first
    comm_bytes: list[Delta]  # by comm type
    comm_time: list[Delta]

    def to_json(self, limit: int = 200) -> dict:
        return {"a": self.a_name, "b": self.b_name, "summary": [d.to_json() for d in self.summary],
                "node_counts": [d.to_json() for d in self.node_counts],
                "breakdown": [d.to_json() for d in self.breakdown],
                "op_time": [d.to_json() for d in self.op_time[:limit]],
                "comm_bytes": [d.to_json() for d in self.comm_bytes],
                "comm_time": [d.to_json() for d in self.comm_time]}


def _pairs(a: Mapping[str, float], b: Mapping[str, float]) -> list[Delta]:
    return [Delta(k, float(a.get(k, 0)), float(b.get(k, 0))) for k in sorted(set(a) | set(b))]


def diff_analyses(a: JobAnalysis, b: JobAnalysis) -> JobDiff:
    """Deltas from analysis ``a`` (before) to ``b`` (after)."""
    ta, tb = a.breakdown.total, b.breakdown.total
    summary = [Delta("ranks", a.world_size, b.world_size), Delta("makespan_ns", a.makespan_ns, b.makespan_ns),
               Delta("critical_path_ns", a.critical_path.length_ns, b.critical_path.length_ns),
               Delta("critical_path_nodes", len(a.critical_path), len(b.critical_path)),
               Delta("comm_bytes", a.comm.total.bytes, b.comm.total.bytes)]
    cats = ("span",) + CATEGORIES[:2] + ("overlapped_comm",) + CATEGORIES[2:]
    breakdown = [Delta(f"{c}_ns", getattr(ta, f"{c}_ns"), getattr(tb, f"{c}_ns")) for c in cats]
    ops = _pairs({o.name: o.total_ns for o in a.top_ops.by_name}, {o.name: o.total_ns for o in b.top_ops.by_name})
    ops.sort(key=lambda d: (-abs(d.delta), d.key))
    return JobDiff(a.prefix or "A", b.prefix or "B", summary, _pairs(a.node_counts, b.node_counts), breakdown, ops,
                   _pairs({k: v.bytes for k, v in a.comm.by_type.items()}, {k: v.bytes for k, v in b.comm.by_type.items()}),
                   _pairs({k: v.time_ns for k, v in a.comm.by_type.items()},
                          {k: v.time_ns for k, v in b.comm.by_type.items()}))


def diff_jobs(a: Job, b: Job, schedule_a: Schedule | None = None, schedule_b: Schedule | None = None) -> JobDiff:
    """Analyse jobs ``a`` and ``b`` and compare them."""
    return diff_analyses(analyze_job(a, schedule_a), analyze_job(b, schedule_b))
