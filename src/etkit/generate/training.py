"""Building blocks shared by the training-job generators (:mod:`~etkit.generate.llm`, :mod:`~etkit.generate.dlrm`).

- :class:`ComputeChain`: one rank's graph under construction, a chain of compute nodes with roofline
  durations, collectives that block the chain or run beside it.
- :class:`GradientBuckets`: gradient bucketing, so reduction overlaps the rest of backward.
- :class:`GeneratedJob`: a job made of one encoded template per role plus a plan per rank; it writes
  ranks streaming (bounded memory) or materialises them as a :class:`~etkit.model.job.Job`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ..executor import Executor, SerialExecutor, default_executor
from ..format.schema import CommType, NodeType
from ..model.devices import Device
from ..model.groups import ProcessGroups
from ..model.job import Job
from ..model.template import Param, RankPlan, TraceTemplate, build_job, write_job
from ..model.trace import Trace
from ..records import record
from ..units import exact_sum

__all__ = ["ComputeChain", "GeneratedJob", "GradientBuckets", "JobSummary", "summarize",
           "ADAM_BYTES_PER_PARAM", "ADAM_FLOPS_PER_PARAM", "DTYPE_BYTES"]

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
#: Adam: FLOPs and bytes per parameter of one update (fp32 master, grad, two moments; low-precision copy).
ADAM_FLOPS_PER_PARAM = 10
ADAM_BYTES_PER_PARAM = 28
#: From this many ranks on, writing uses a process pool by default (below, starting workers costs more).
PARALLEL_WRITE_RANKS = 4096


class ComputeChain:
    """One rank's graph under construction: compute nodes form a chain (a device runs one kernel at a time).

    A compute node depends on the previous compute node and on whatever it waits for (``waits``: a
    received activation, a blocking collective, gathered parameters). A blocking collective
    (:meth:`coll` without ``deps``) consumes the chain's output and is waited for by the next compute
    node; a collective with explicit ``deps`` runs beside the chain (overlap) until someone waits for it.
    Durations come from the device roofline, cached per (FLOPs, bytes).
    """

    def __init__(self, tpl: TraceTemplate, device: Device) -> None:
        self.tpl = tpl
        self.device = device
        self.last_comp: int | None = None
        self.waits: list[int] = []
        self._durations: dict[tuple[int, int], int] = {}

    def chain_deps(self) -> list[int]:
        """The previous compute node and everything waited for, each once (feeders hang on duplicates)."""
        deps = ([self.last_comp] if self.last_comp is not None else []) + self.waits
        return list(dict.fromkeys(deps))

    def duration(self, flops: int, nbytes: int) -> int:
        key = (flops, nbytes)
        if key not in self._durations:
            self._durations[key] = int(self.device.time_us(flops, nbytes))
        return self._durations[key]

    def comp(self, name: str, flops: int, nbytes: int) -> int:
        node = self.tpl.comp(name, self.duration(flops, nbytes), num_ops=flops, tensor_size=nbytes,
                             deps=self.chain_deps())
        self.last_comp, self.waits = node, []
        return node

    def coll(self, name: str, comm_type: CommType, size: int, group: str, *, deps: list[int] | None = None) -> int:
        """A collective over the rank's ``group`` (a stamped param); without ``deps`` it blocks the chain."""
        blocking = deps is None
        node = self.tpl.coll(name, comm_type, int(size), pg_name=Param(group),
                             deps=self.chain_deps() if blocking else list(dict.fromkeys(deps or ())))
        if blocking:
            self.waits = [node]
        return node


class GradientBuckets:
    """Accumulates gradients (in parameters) as backward produces them; a bucket closes once it is full.

    ``add(params, producer)`` returns the closed bucket ``(params, producer)`` or None; ``flush()``
    returns what is left. The producer of a bucket is the node after which all its gradients exist.
    """

    def __init__(self, bucket_params: int) -> None:
        self.bucket_params = bucket_params
        self.pending = 0
        self.last_producer = -1

    def add(self, params: int, producer: int) -> tuple[int, int] | None:
        self.pending += params
        self.last_producer = producer
        if self.pending >= self.bucket_params:
            return self.flush()
        return None

    def flush(self) -> tuple[int, int] | None:
        if self.pending == 0:
            return None
        closed = (self.pending, self.last_producer)
        self.pending = 0
        return closed


@record(frozen=True)
class JobSummary:
    """Totals of a generated job, computed from one stamped rank per role times the role's rank count."""

    world_size: int
    roles: int
    groups: int
    nodes: int
    comp_flops: int
    comm_bytes: int

    def lines(self) -> list[str]:
        return [f"ranks {self.world_size:,}, roles (distinct templates) {self.roles}, process groups {self.groups:,}",
                f"nodes {self.nodes:,} ({self.nodes / max(self.world_size, 1):,.0f} per rank)",
                f"compute {self.comp_flops:.4g} FLOP per step, collective + send volume {self.comm_bytes:.4g} bytes"]


def summarize(templates: dict[str, TraceTemplate], plans: Iterator[RankPlan], groups: ProcessGroups) -> JobSummary:
    """Sum nodes, FLOPs and communication bytes over ranks (each role's figures are rank-independent)."""
    counts: dict[str, int] = {}
    sample: dict[str, RankPlan] = {}
    for plan in plans:
        counts[plan.role] = counts.get(plan.role, 0) + 1
        sample.setdefault(plan.role, plan)
    nodes = flops = comm = 0
    for role, n in counts.items():
        trace = templates[role].trace(sample[role].params)
        comp = trace.types == NodeType.COMP_NODE
        sent = (trace.types == NodeType.COMM_COLL_NODE) | (trace.types == NodeType.COMM_SEND_NODE)
        nodes += n * len(trace)
        flops += n * exact_sum(trace.num_ops[comp])
        comm += n * exact_sum(trace.comm_size[sent])
    return JobSummary(sum(counts.values()), len(counts), len(groups.groups), nodes, flops, comm)


class GeneratedJob:
    """A generated job, built lazily: role templates on first use, ranks only when written or materialised.

    Subclasses give ``world_size``, ``groups``, :meth:`build_template` (one role's graph) and
    :meth:`plan` (a rank's role and stamped values). ``write(prefix)`` streams ``PREFIX.<rank>.et`` +
    ``PREFIX.comm_groups.json`` with bounded memory; ``trace(rank)`` / ``to_job()`` materialise ranks.
    """

    world_size: int
    groups: ProcessGroups

    def __init__(self) -> None:
        self._templates: dict[str, TraceTemplate] = {}

    def roles(self) -> list[str]:
        """Every role, in rank order of first appearance."""
        return list(dict.fromkeys(plan.role for plan in self.plans()))

    def build_template(self, role: str) -> TraceTemplate:
        raise NotImplementedError

    def plan(self, rank: int) -> RankPlan:
        raise NotImplementedError

    def template(self, role: str) -> TraceTemplate:
        if role not in self._templates:
            self._templates[role] = self.build_template(role)
        return self._templates[role]

    def templates(self) -> dict[str, TraceTemplate]:
        return {role: self.template(role) for role in self.roles()}

    def plans(self) -> Iterator[RankPlan]:
        return (self.plan(rank) for rank in range(self.world_size))

    def trace(self, rank: int) -> Trace:
        plan = self.plan(rank)
        return self.template(plan.role).trace(plan.params, path=f"<generated rank {rank}>")

    def to_job(self) -> Job:
        """Every rank in memory as a :class:`~etkit.model.job.Job` (fine up to a few thousand small ranks)."""
        return build_job(self.plans(), self.templates(), groups=self.groups)

    def write(self, prefix: str | os.PathLike[str], *, executor: Executor | None = None,
              quiet: bool = True) -> list[Path]:
        """Write every rank and the comm groups; returns the rank files in rank order.

        Without ``executor``, jobs of :data:`PARALLEL_WRITE_RANKS` ranks or more are written by a local
        process pool and smaller ones in-process (starting workers costs more than it saves there).
        """
        if executor is None:
            big = self.world_size >= PARALLEL_WRITE_RANKS
            executor = default_executor(quiet=quiet) if big else SerialExecutor(quiet=quiet)
        return write_job(prefix, self.plans(), self.templates(), groups=self.groups, executor=executor)

    def summary(self) -> JobSummary:
        return summarize(self.templates(), self.plans(), self.groups)
