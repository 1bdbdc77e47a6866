"""Where each rank's time goes: compute, exposed and overlapped communication, memory, waiting, host, idle.

The accounting is :mod:`etkit.model.accounting`'s (the simulator's figures use the same function), applied
per rank over its span (first start to last end) to the exclusive segments of :mod:`.tracks`, so a
profiled caller never hides what it called. Waiting is the part of a communication node before data could
move (:func:`.context.transfer_times`): a collective before its last member arrived, a receive before its
send started. ``compute + exposed_comm + memory + waiting + host + idle == span``, in integer ns.
"""

from __future__ import annotations

from dataclasses import fields

from ..model.accounting import CATEGORIES, TimeAccount, account
from ..model.job import Job
from ..model.schedule import Schedule
from ..records import record
from .context import AnalysisContext, RankView, prepare
from .tables import Table

__all__ = ["TimeBreakdown", "BreakdownResult", "breakdown", "rank_breakdown", "CATEGORIES"]

#: One rank's (or the job's summed) figures: the model layer's :class:`~etkit.model.accounting.TimeAccount`.
TimeBreakdown = TimeAccount


@record
class BreakdownResult:
    source: str
    ranks: dict[int, TimeAccount]

    @property
    def total(self) -> TimeAccount:
        """Sum over ranks."""
        out = TimeAccount()
        for b in self.ranks.values():
            out = out + b
        return out

    def to_json(self) -> dict:
        return {"source": self.source, "total": self.total.to_json(),
                "ranks": {str(r): b.to_json() for r, b in sorted(self.ranks.items())}}

    def tables(self) -> list[Table]:
        cols = [f.name for f in fields(TimeAccount)]
        return [Table("breakdown", ["rank"] + cols,
                      [[r] + [getattr(b, c) for c in cols] for r, b in sorted(self.ranks.items())])]


def rank_breakdown(view: RankView) -> TimeAccount:
    """Breakdown of one rank (see the module docstring)."""
    tracks = view.tracks
    rows = tracks.seg_row
    return account(tracks.seg_start, tracks.seg_end, view.kinds[rows], view.transfer[rows], span=view.span)


def breakdown(job: Job, schedule: Schedule | None = None, *,
              context: AnalysisContext | None = None) -> BreakdownResult:
    """Time breakdown of every rank of ``job``."""
    ctx = prepare(job, schedule, context=context)
    return BreakdownResult(ctx.source_text, {r: rank_breakdown(v) for r, v in sorted(ctx.views.items())})
