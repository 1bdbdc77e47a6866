"""Analyses of a job: one module per question, each a function from a Job (and an optional Schedule)
to a result dataclass that the CLI, the JSON output and the HTML report all render.

- :mod:`.breakdown`: compute / exposed and overlapped comm / memory / host / idle per rank
- :mod:`.top_ops`: operators by total and exclusive time, by kind
- :mod:`.comm`: volume and time by type, group, size; rank x rank traffic matrix
- :mod:`.critical_path`: the chain of nodes across ranks that sets the end time
- :mod:`.imbalance`: per-rank load, lateness (who made whom wait) and stragglers
- :mod:`.gpu`: HTA's GPU questions (temporal and idle breakdown, kernels, overlap, launches, sequences, annotations)
- :mod:`.roles`: classes of ranks that do the same work
- :mod:`.tables`: every result as tables (CSV, pandas)
- :mod:`.diff`: what changed between two jobs
- :mod:`.timing`: where times come from (timestamps, simulation, durations)
- :mod:`.job_analysis`: all of the above at once (``analyze_job``)
- :mod:`.summary`: ``etkit info``'s per-rank counts

Functions share their module's name (``critical_path.critical_path``); they are imported here eagerly so
``from etkit.analyze import critical_path`` always gives the function, never the module.
"""

from .breakdown import BreakdownResult, TimeBreakdown, breakdown
from .comm import CommSummary, comm_summary, traffic_matrix
from .context import AnalysisContext, prepare
from .critical_path import CriticalPath, critical_path
from .diff import JobDiff, diff_analyses, diff_jobs
from .imbalance import Imbalance, imbalance
from .job_analysis import JobAnalysis, analyze_job
from .timing import resolve_schedule, schedule_from_durations, schedule_from_simulation, schedule_from_trace
from .top_ops import TopOps, top_ops

__all__ = [
    "AnalysisContext", "BreakdownResult", "CommSummary", "CriticalPath", "Imbalance", "JobAnalysis", "JobDiff",
    "TimeBreakdown", "TopOps", "analyze_job", "breakdown", "comm_summary", "critical_path", "diff_analyses",
    "diff_jobs", "imbalance", "prepare", "resolve_schedule", "schedule_from_durations", "schedule_from_simulation",
    "schedule_from_trace", "top_ops", "traffic_matrix",
]
