"""What a replay found: per rank and per node kind, replayed time against trace time.

:class:`ReplayReport` gathers the ranks' results. The iteration time of the job is, per measured
iteration, the slowest rank's; the step time divides it by the number of ``ProfilerStep#N`` ranges the
trace holds (a converted PyTorch trace usually covers two steps). ``to_json`` is what ``--json`` writes,
``render_text`` what the terminal shows; ``schedule`` is the last measured iteration as a
:class:`~etkit.model.schedule.Schedule` (source "replay") that analyses accept, and ``write_timeline`` hands
it to ``etkit timeline``'s writer, so a replay opens in Perfetto exactly like a trace.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import asdict, field
from typing import Any

from ..errors import EtkitError
from ..model.job import Job
from ..model.schedule import Schedule
from ..records import record
from .engine import Deviation, KindStat, RankResult, Unreplayed
from .plan import JobPlan

__all__ = ["ReplayReport", "build_report"]


@record
class ReplayReport:
    prefix: str | None
    mode: str
    backend: str
    device: str
    world: int
    iters: int
    warmup: int
    ranks: dict[int, RankResult]
    kinds: dict[str, KindStat]
    iteration_us: list[float]
    steps: int
    trace_iteration_us: float
    notes: list[str] = field(default_factory=list)
    job: Job | None = field(default=None, repr=False, compare=False)

    @property
    def iteration_median_us(self) -> float:
        return statistics.median(self.iteration_us) if self.iteration_us else 0.0

    @property
    def step_us(self) -> float:
        return self.iteration_median_us / max(self.steps, 1)

    @property
    def best_step_us(self) -> float:
        """Step time of the fastest measured iteration (least disturbed by other load on the host)."""
        return min(self.iteration_us) / max(self.steps, 1) if self.iteration_us else 0.0

    @property
    def trace_step_us(self) -> float:
        return self.trace_iteration_us / max(self.steps, 1)

    @property
    def unreplayed(self) -> list[Unreplayed]:
        return [u for r in sorted(self.ranks) for u in self.ranks[r].unreplayed]

    @property
    def deviations(self) -> list[Deviation]:
        every = [d for r in self.ranks.values() for d in r.deviations]
        return sorted(every, key=lambda d: -abs(d.replay_us - d.trace_us))[:10]

    def to_json(self) -> dict[str, Any]:
        def kind_table(kinds: dict[str, KindStat]) -> dict[str, Any]:
            return {k: {**asdict(v), "ratio": _ratio(v.replay_us, v.trace_us)} for k, v in sorted(kinds.items())}

        return {
            "prefix": self.prefix, "mode": self.mode, "backend": self.backend, "device": self.device,
            "world": self.world, "iters": self.iters, "warmup": self.warmup, "steps_per_iteration": self.steps,
            "iteration_us": self.iteration_us, "iteration_median_us": self.iteration_median_us,
            "step_us": self.step_us, "best_step_us": self.best_step_us, "trace_iteration_us": self.trace_iteration_us, "trace_step_us": self.trace_step_us,
            "ratio": _ratio(self.iteration_median_us, self.trace_iteration_us),
            "kinds": kind_table(self.kinds),
            "top_deviations": [asdict(d) for d in self.deviations],
            "unreplayed": [asdict(u) for u in self.unreplayed],
            "notes": self.notes,
            "ranks": {
                str(rank): {
                    "nodes": r.nodes, "iteration_us": r.iteration_us, "trace_iteration_us": r.trace_iteration_us,
                    "trace_time_basis": r.trace_time_basis, "kinds": kind_table(r.kinds),
                    "top_deviations": [asdict(d) for d in r.deviations],
                    "comm_calls": len(r.calls), "pool": r.pool, "dangling_deps": r.dangling_deps,
                } for rank, r in sorted(self.ranks.items())
            },
        }

    def render_text(self) -> str:
        lines = [f"replay of {self.prefix or 'job'}: {self.world} rank(s), mode {self.mode}, {self.backend} on "
                 f"{self.device}, {self.iters} iteration(s) after {self.warmup} warm-up",
                 f"iteration: replay {_ms(self.iteration_median_us)} vs trace {_ms(self.trace_iteration_us)} "
                 f"({_ratio_text(self.iteration_median_us, self.trace_iteration_us)}); "
                 f"{self.steps} step(s) per iteration -> step {_ms(self.step_us)} vs {_ms(self.trace_step_us)}",
                 "", f"{'rank':>4}  {'iteration':>12}  {'trace':>12}  ratio"]
        for rank, r in sorted(self.ranks.items()):
            median = statistics.median(r.iteration_us) if r.iteration_us else 0.0
            lines.append(f"{rank:>4}  {_ms(median):>12}  {_ms(r.trace_iteration_us):>12}  {_ratio_text(median, r.trace_iteration_us)}")
        lines += ["", f"{'node kind':<26} {'nodes':>7} {'replay':>12} {'trace':>12}  ratio"]
        for kind, stat in sorted(self.kinds.items()):
            lines.append(f"{kind:<26} {stat.nodes:>7} {_ms(stat.replay_us):>12} {_ms(stat.trace_us):>12}  "
                         f"{_ratio_text(stat.replay_us, stat.trace_us)}")
        if self.deviations:
            lines += ["", "top deviations (replay - trace):"]
            for d in self.deviations:
                lines.append(f"  rank {d.rank} node {d.node_id} {d.name[:48]} [{d.kind}]: "
                             f"{d.replay_us - d.trace_us:+.1f} us ({d.replay_us:.1f} vs {d.trace_us:.1f})")
        skipped = [u for u in self.unreplayed if u.status == "skipped"]
        emulated = [u for u in self.unreplayed if u.status == "emulated"]
        for title, items in (("not replayed", skipped), ("emulated by a calibrated kernel", emulated)):
            if items:
                lines += ["", f"{title}: {sum(u.count for u in items)} node(s)"]
                for u in items[:15]:
                    lines.append(f"  rank {u.rank}: {u.count} x {u.name[:48]} ({u.reason})")
                if len(items) > 15:
                    lines.append(f"  ... {len(items) - 15} more groups (see --json)")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    @property
    def schedule(self) -> Schedule:
        """When each node ran in the last measured iteration, per rank (ns from that iteration's start)."""
        return Schedule({r: res.schedule for r, res in self.ranks.items() if res.schedule is not None}, source="replay")

    def write_timeline(self, path: str | os.PathLike[str]) -> list[str]:
        """The last measured iteration as the same Chrome/Perfetto JSON ``etkit timeline`` writes."""
        from ..viz.timeline import write_timeline

        if self.job is None:
            raise EtkitError("this replay report has no job attached; cannot write a timeline")
        return [str(p) for p in write_timeline(self.job, path, schedule=self.schedule).paths]


def build_report(job: Job, plan: JobPlan, options: Any, results: list[RankResult]) -> ReplayReport:
    by_rank = {r.rank: r for r in results}
    kinds: dict[str, KindStat] = {}
    for result in results:
        for name, stat in result.kinds.items():
            total = kinds.setdefault(name, KindStat())
            total.nodes += stat.nodes
            total.trace_us += stat.trace_us
            total.replay_us += stat.replay_us
    iterations = [max(r.iteration_us[i] for r in results) for i in range(min(len(r.iteration_us) for r in results))]
    notes = list(plan.notes)
    dangling = sum(r.dangling_deps for r in results)
    if dangling:
        notes.append(f"{dangling} dependency id(s) name no node and were ignored")
    return ReplayReport(job.prefix, options.mode, options.backend, options.device, plan.world, options.iters,
                        options.warmup, by_rank, kinds, iterations, max(r.steps for r in results),
                        max(r.trace_iteration_us for r in results), notes, job)


def _ratio(replay: float, trace: float) -> float | None:
    return replay / trace if trace > 0 else None


def _ratio_text(replay: float, trace: float) -> str:
    ratio = _ratio(replay, trace)
    return f"{ratio:.2f}x" if ratio is not None else "-"


def _ms(us: float) -> str:
    return f"{us / 1e3:.3f} ms"
