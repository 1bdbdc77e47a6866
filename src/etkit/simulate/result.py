"""What a simulation returns: per-rank figures, the makespan and the per-node :class:`Schedule`.

Per rank, in integer ns, by the accounting every verb shares (:mod:`etkit.model.accounting`):
``finish_ns`` (end of its last node), ``compute_ns``, ``comm_ns`` (time any of its communication was
moving data: a collective from the moment its last member issued it, a message from its send),
``exposed_comm_ns`` (that communication not hidden under compute, ASTRA-sim's "exposed communication"),
``memory_ns``, ``waiting_ns`` (blocked on a peer: in a collective before its last member joined, a
receive posted before its send), ``host_ns`` and ``idle_ns`` (nothing ran: pipeline bubbles, dependency
stalls); ``cpu_ns`` is the time any CPU op ran.
"""

from __future__ import annotations

from dataclasses import field

import numpy as np

from ..model import accounting
from ..model.schedule import RankSchedule, Schedule, as_ns
from ..records import record
from .workload import K_COLL, K_CPU, K_GPU, K_MEM, K_RECV, K_SEND, SCHEDULE_RESOURCE, RankClass

__all__ = ["RankFigures", "SimulationResult", "figures_for"]


@record(frozen=True)
class RankFigures:
    finish_ns: int
    compute_ns: int
    cpu_ns: int
    comm_ns: int
    exposed_comm_ns: int
    idle_ns: int
    start_ns: int = 0  # when the rank entered (its recorded start in a measured trace, else 0)
    waiting_ns: int = 0
    memory_ns: int = 0
    host_ns: int = 0

    @property
    def span_ns(self) -> int:
        """The rank's own run time: finish minus start (what Kineto's ProfilerStep spans add up to)."""
        return self.finish_ns - self.start_ns


#: The accounting kind of each program kind (instant nodes take no time).
_ACCOUNT_KIND = np.full(K_MEM + 1, accounting.OTHER, dtype=np.int8)
_ACCOUNT_KIND[[K_CPU, K_GPU, K_COLL, K_SEND, K_RECV, K_MEM]] = [accounting.CPU, accounting.COMPUTE, accounting.COMM,
                                                               accounting.COMM, accounting.COMM, accounting.MEMORY]


def figures_for(cls: RankClass, start: np.ndarray, end: np.ndarray, transfer: np.ndarray) -> RankFigures:
    kind = np.asarray(cls.program.kind)
    ran = ~np.isnan(end)
    finish = int(as_ns(end[ran]).max()) if ran.any() else 0
    what = _ACCOUNT_KIND[kind[ran]]
    if accounting.host_counts_as_compute(what):
        what = np.where(what == accounting.CPU, accounting.COMPUTE, what)
    s, e = as_ns(start[ran]), as_ns(end[ran])
    moving = as_ns(np.where(np.isnan(transfer[ran]), end[ran], transfer[ran]))  # waiting is not communicating
    entered = int(round(cls.program.release_ns))
    acc = accounting.account(s, e, what, moving, span=(entered, max(finish, entered)))
    cpu = kind[ran] == K_CPU
    return RankFigures(finish, acc.compute_ns, accounting.union_length(s[cpu], e[cpu]), acc.comm_ns,
                       acc.exposed_comm_ns, acc.idle_ns, entered, acc.waiting_ns, acc.memory_ns, acc.host_ns)


@record
class SimulationResult:
    """Outcome of :func:`etkit.simulate.simulate`."""

    ranks: dict[int, RankFigures]
    schedule: Schedule
    events: int
    nodes: int  # nodes of every rank (what the simulation represents)
    simulated_nodes: int  # nodes actually walked (rank classes exploit symmetry)
    classes: int
    wall_s: float
    warnings: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    step_samples_ns: list[float] = field(default_factory=list)  # Monte Carlo: each run's step time (the result is the median run)
    # a system calibrated with held-out errors (etkit-prediction-errors): (low ns, high ns, coverage) of the
    # measured step time this prediction stands for (SystemConfig.prediction_interval)
    step_interval_ns: tuple[float, float, float] | None = None

    @property
    def makespan_ns(self) -> int:
        """End of the last rank, from the earliest rank's start."""
        return max((f.finish_ns for f in self.ranks.values()), default=0)

    @property
    def step_ns(self) -> int:
        """The longest rank's own run time (finish minus its start): a measured trace's step time as
        Kineto reports it (per rank the ProfilerStep spans, the slowest rank's). Equals the makespan
        when every rank starts at 0."""
        return max((f.span_ns for f in self.ranks.values()), default=0)

    def to_dict(self) -> dict:
        return {
            "makespan_ns": self.makespan_ns, "step_ns": self.step_ns,
            "ranks": {r: f.__dict__ for r, f in sorted(self.ranks.items())},
            "nodes": self.nodes, "simulated_nodes": self.simulated_nodes, "rank_classes": self.classes,
            "events": self.events, "wall_s": self.wall_s, "step_samples_ns": self.step_samples_ns, "warnings": self.warnings, "config": self.config,
            "step_interval": None if self.step_interval_ns is None else dict(
                zip(("low_ns", "high_ns", "coverage"), self.step_interval_ns)),
        }

    def table(self, limit: int = 64) -> list[str]:
        head = (f"{'rank':>5} {'finish ns':>16} {'compute ns':>16} {'cpu ns':>14} {'exposed comm ns':>16} "
                f"{'waiting ns':>16} {'idle ns':>16}")
        rows = [head]
        items = sorted(self.ranks.items())
        shown = items if len(items) <= limit else items[:limit // 2] + items[-limit // 2:]
        for i, (r, f) in enumerate(shown):
            if len(items) > limit and i == limit // 2:
                rows.append(f"{'...':>5}")
            rows.append(f"{r:>5} {f.finish_ns:>16,.0f} {f.compute_ns:>16,.0f} {f.cpu_ns:>14,.0f} {f.exposed_comm_ns:>16,.0f} "
                        f"{f.waiting_ns:>16,.0f} {f.idle_ns:>16,.0f}")
        rows.append(f"makespan {self.makespan_ns:,.0f} ns ({self.makespan_ns / 1e6:,.3f} ms) over {len(items)} rank(s)")
        return rows


def build_schedule(classes: list[RankClass], starts: list[np.ndarray], ends: list[np.ndarray],
                   transfers: list[np.ndarray] | None = None) -> Schedule:
    """The per-node schedule of every rank (``transfers``: when each comm row began moving data; without
    them, analyses derive it from the members' starts, which gives the same times)."""
    ranks = {}
    for i, (cls, s, e) in enumerate(zip(classes, starts, ends)):
        ran = ~np.isnan(e)
        moving = None
        if transfers is not None:
            x = transfers[i]
            moving = np.where(ran & ~np.isnan(x), x, np.where(ran, e, 0.0))
            moving = np.where(np.isin(np.asarray(cls.program.kind), (K_COLL, K_SEND, K_RECV)), moving,
                              np.where(ran, s, 0.0))
        sched = RankSchedule(np.where(ran, s, 0.0), np.where(ran, e, 0.0), ran,
                             SCHEDULE_RESOURCE[np.asarray(cls.program.kind, dtype=np.int64)], moving)
        for r in cls.ranks:
            ranks[r] = sched
    return Schedule(ranks, source="simulation")
