"""What a simulation returns: per-rank figures, the makespan and the per-node :class:`Schedule`.

Per rank: ``finish_ns`` (end of its last node), ``compute_ns`` (time its GPU compute resource was
busy), ``cpu_ns``, ``comm_ns`` (time any of its communication was moving data: a collective from the
moment its last member issued it, a message from its send), ``exposed_comm_ns`` (that communication
time not hidden under compute, ASTRA-sim's "exposed communication") and ``idle_ns`` (time nothing ran
before it finished: waiting for peers to join a collective, pipeline bubbles, dependency stalls).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.schedule import RankSchedule, Schedule
from .workload import K_COLL, K_CPU, K_GPU, K_RECV, K_SEND, SCHEDULE_RESOURCE, RankClass

__all__ = ["RankFigures", "SimulationResult", "union_length", "figures_for"]


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Total length covered by intervals [start, end) (vectorised merge)."""
    if not len(start):
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    prev = np.concatenate(([-np.inf], reach[:-1]))
    return float(np.sum(np.maximum(e - np.maximum(s, prev), 0.0) * (e > prev)))


@dataclass(frozen=True)
class RankFigures:
    finish_ns: float
    compute_ns: float
    cpu_ns: float
    comm_ns: float
    exposed_comm_ns: float
    idle_ns: float
    start_ns: float = 0.0  # when the rank entered (its recorded start in a measured trace, else 0)

    @property
    def span_ns(self) -> float:
        """The rank's own run time: finish minus start (what Kineto's ProfilerStep spans add up to)."""
        return self.finish_ns - self.start_ns


def figures_for(cls: RankClass, start: np.ndarray, end: np.ndarray, transfer: np.ndarray) -> RankFigures:
    kind = np.asarray(cls.program.kind)
    ran = ~np.isnan(end)
    finish = float(end[ran].max()) if ran.any() else 0.0
    gpu = ran & (kind == K_GPU)
    comm = ran & np.isin(kind, (K_COLL, K_SEND, K_RECV))
    cpu = ran & (kind == K_CPU)
    begin = np.where(comm, np.fmin(np.where(np.isnan(transfer), end, transfer), end), start)  # waiting is not communicating
    compute = union_length(start[gpu], end[gpu])
    comm_len = union_length(begin[comm], end[comm])
    both = gpu | comm
    exposed = union_length(begin[both], end[both]) - compute
    busy = union_length(begin[ran & (both | cpu)], end[ran & (both | cpu)])
    entered = cls.program.release_ns
    return RankFigures(finish, compute, union_length(start[cpu], end[cpu]), comm_len, exposed,
                       max(finish - entered - busy, 0.0), entered)


@dataclass
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

    @property
    def makespan_ns(self) -> float:
        """End of the last rank, from the earliest rank's start."""
        return max((f.finish_ns for f in self.ranks.values()), default=0.0)

    @property
    def step_ns(self) -> float:
        """The longest rank's own run time (finish minus its start): a measured trace's step time as
        Kineto reports it (per rank the ProfilerStep spans, the slowest rank's). Equals the makespan
        when every rank starts at 0."""
        return max((f.span_ns for f in self.ranks.values()), default=0.0)

    def to_dict(self) -> dict:
        return {
            "makespan_ns": self.makespan_ns, "step_ns": self.step_ns,
            "ranks": {r: f.__dict__ for r, f in sorted(self.ranks.items())},
            "nodes": self.nodes, "simulated_nodes": self.simulated_nodes, "rank_classes": self.classes,
            "events": self.events, "wall_s": self.wall_s, "step_samples_ns": self.step_samples_ns, "warnings": self.warnings, "config": self.config,
        }

    def table(self, limit: int = 64) -> list[str]:
        head = f"{'rank':>5} {'finish ns':>16} {'compute ns':>16} {'cpu ns':>14} {'exposed comm ns':>16} {'idle ns':>16}"
        rows = [head]
        items = sorted(self.ranks.items())
        shown = items if len(items) <= limit else items[:limit // 2] + items[-limit // 2:]
        for i, (r, f) in enumerate(shown):
            if len(items) > limit and i == limit // 2:
                rows.append(f"{'...':>5}")
            rows.append(f"{r:>5} {f.finish_ns:>16,.0f} {f.compute_ns:>16,.0f} {f.cpu_ns:>14,.0f} {f.exposed_comm_ns:>16,.0f} "
                        f"{f.idle_ns:>16,.0f}")
        rows.append(f"makespan {self.makespan_ns:,.0f} ns ({self.makespan_ns / 1e6:,.3f} ms) over {len(items)} rank(s)")
        return rows


def build_schedule(classes: list[RankClass], starts: list[np.ndarray], ends: list[np.ndarray]) -> Schedule:
    ranks = {}
    for cls, s, e in zip(classes, starts, ends):
        ran = ~np.isnan(e)
        sched = RankSchedule(np.where(ran, s, 0.0), np.where(ran, e, 0.0), ran,
                             SCHEDULE_RESOURCE[np.asarray(cls.program.kind, dtype=np.int64)])
        for r in cls.ranks:
            ranks[r] = sched
    return Schedule(ranks, source="simulation")
