"""Every answer about one job at once: what ``etkit analyze``, ``etkit diff`` and the report render."""

from __future__ import annotations

import numpy as np

from ..executor import Executor
from ..model.job import Job
from ..model.schedule import Schedule
from ..model.trace import node_type_name
from ..records import record
from .breakdown import BreakdownResult, breakdown
from .comm import CommSummary, comm_summary
from .context import AnalysisContext, prepare
from .critical_path import CriticalPath, critical_path
from .gpu import GpuAnalysis, gpu_analysis
from .imbalance import Imbalance, imbalance
from .tables import Table, to_pandas
from .top_ops import TopOps, top_ops

__all__ = ["JobAnalysis", "analyze_job", "node_counts"]


@record
class JobAnalysis:
    prefix: str | None
    source: str
    notes: list[str]
    world_size: int
    makespan_ns: float
    node_counts: dict[str, int]
    breakdown: BreakdownResult
    top_ops: TopOps
    comm: CommSummary
    critical_path: CriticalPath
    imbalance: Imbalance
    gpu: GpuAnalysis | None = None  # HTA's GPU questions (etkit.analyze.gpu), when the job has GPU activity

    def to_json(self) -> dict:
        return {"prefix": self.prefix, "schedule_source": self.source, "notes": self.notes,
                "ranks": self.world_size, "makespan_ns": self.makespan_ns, "node_counts": self.node_counts,
                "breakdown": self.breakdown.to_json(), "top_ops": self.top_ops.to_json(),
                "comm": self.comm.to_json(), "critical_path": self.critical_path.to_json(),
                "imbalance": self.imbalance.to_json(), "gpu": self.gpu.to_json() if self.gpu else None}

    def tables(self) -> list[Table]:
        """Every figure as tables (:mod:`.tables`): what ``etkit analyze --csv DIR`` writes."""
        out = (self.breakdown.tables() + self.top_ops.tables() + self.comm.tables() + self.critical_path.tables()
               + self.imbalance.tables())
        return out + (self.gpu.tables() if self.gpu else [])

    def to_pandas(self) -> dict:
        """``{table name: pandas.DataFrame}`` of :meth:`tables` (pandas must be installed)."""
        return to_pandas(self.tables())


def node_counts(job: Job) -> dict[str, int]:
    """Nodes per NodeType name over all ranks."""
    counts: dict[str, int] = {}
    for trace in job.traces.values():
        uniq, cnt = np.unique(trace.types, return_counts=True)
        for t, c in zip(uniq.tolist(), cnt.tolist()):
            name = node_type_name(t)
            counts[name] = counts.get(name, 0) + c
    return dict(sorted(counts.items()))


def analyze_job(job: Job, schedule: Schedule | None = None, *, algorithm: str = "ring",
                straggler_threshold: float = 0.05, executor: Executor | None = None,
                context: AnalysisContext | None = None) -> JobAnalysis:
    """Breakdown, top operators, communication, critical path, imbalance and (for a profile with GPU
    activity) HTA's GPU analyses of ``job``.

    ``schedule`` (e.g. a simulation's) is used when given; otherwise trace timestamps, otherwise
    durations (see :func:`etkit.analyze.timing.resolve_schedule`). ``algorithm`` expands collectives in
    the traffic matrix ("ring" or "direct").
    """
    ctx = prepare(job, schedule, executor=executor, context=context)
    times = breakdown(job, context=ctx)
    return JobAnalysis(
        prefix=job.prefix, source=ctx.source_text, notes=list(ctx.schedule.notes),
        world_size=len(job.traces), makespan_ns=ctx.schedule.makespan_ns, node_counts=node_counts(job),
        breakdown=times, top_ops=top_ops(job, context=ctx),
        comm=comm_summary(job, algorithm=algorithm, context=ctx), critical_path=critical_path(job, context=ctx),
        imbalance=imbalance(job, threshold=straggler_threshold, context=ctx, breakdown=times),
        gpu=gpu_analysis(job, context=ctx) if ctx.schedule.source == "trace" else None)
