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

Functions share their module's name (``critical_path.critical_path``): ``from etkit.analyze import critical_path``
always gives the function, never the module. The names are imported when first used (``etkit info`` needs only
:mod:`.summary`, not every analysis): a submodule imported on its own does not take its function's name.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from ..lazy import lazy_names

if TYPE_CHECKING:  # pragma: no cover
    from .breakdown import BreakdownResult, TimeBreakdown, breakdown
    from .comm import CommSummary, comm_summary, traffic_matrix
    from .context import AnalysisContext, prepare
    from .critical_path import CriticalPath, critical_path
    from .diff import JobDiff, diff_analyses, diff_jobs
    from .imbalance import Imbalance, imbalance
    from .job_analysis import JobAnalysis, analyze_job
    from .timing import resolve_schedule, schedule_from_durations, schedule_from_simulation, schedule_from_trace
    from .top_ops import TopOps, top_ops

#: Public names -> the module that defines them.
_LAZY = {
    **dict.fromkeys(("BreakdownResult", "TimeBreakdown", "breakdown"), ".breakdown"),
    **dict.fromkeys(("CommSummary", "comm_summary", "traffic_matrix"), ".comm"),
    **dict.fromkeys(("AnalysisContext", "prepare"), ".context"),
    **dict.fromkeys(("CriticalPath", "critical_path"), ".critical_path"),
    **dict.fromkeys(("JobDiff", "diff_analyses", "diff_jobs"), ".diff"),
    **dict.fromkeys(("Imbalance", "imbalance"), ".imbalance"),
    **dict.fromkeys(("JobAnalysis", "analyze_job"), ".job_analysis"),
    **dict.fromkeys(("resolve_schedule", "schedule_from_durations", "schedule_from_simulation",
                     "schedule_from_trace"), ".timing"),
    **dict.fromkeys(("TopOps", "top_ops"), ".top_ops"),
}

__all__ = [
    "AnalysisContext", "BreakdownResult", "CommSummary", "CriticalPath", "Imbalance", "JobAnalysis", "JobDiff",
    "TimeBreakdown", "TopOps", "analyze_job", "breakdown", "comm_summary", "critical_path", "diff_analyses",
    "diff_jobs", "imbalance", "prepare", "resolve_schedule", "schedule_from_durations", "schedule_from_simulation",
    "schedule_from_trace", "top_ops", "traffic_matrix",
]

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


class _Package(types.ModuleType):
    """This package's module type: the import system binds each submodule imported to its name here; a submodule
    whose name is one of its functions' (``breakdown``, ``critical_path``, ...) leaves that name to the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _LAZY.get(name) == "." + name:
            return  # (the submodule stays in sys.modules)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
