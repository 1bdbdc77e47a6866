"""``etkit scale``: the ETs of the same training step at another degree of one parallel dimension.

``scale(prefix, out, dp=16)`` (or ``tp=``, ``pp=``, ``ranks=``) reads where each rank sits from its
process groups and peers (:func:`~etkit.scale.layout.infer_layout`, or ``layout="tp2,dp4,pp2"``), plans
the new ranks (:func:`~etkit.scale.plan.make_plan`: replicate or merge along the dimension, groups and
peers renamed, per-rank work rescaled) and writes them, one executor task per source rank, each source
read once and stamped into every rank that copies it (:mod:`etkit.scale.rank`). The job is written as a
unit (:func:`etkit.fileio.job_output`); the output may not be the input.

What is rescaled (``keep``: ``per-rank-batch`` or ``global-batch`` for dp) and which ``comm_size``
conventions apply is :func:`~etkit.scale.plan.rescale_for`'s docstring; ``docs/guide/share-scale.md``
shows it with examples.
"""

from __future__ import annotations

import os
import time

from ..errors import OptionError, UsageError
from ..executor import Executor, default_executor
from ..fileio import job_files, job_output, protect_inputs
from ..model.groups import ProcessGroups
from ..model.job import discover, load_groups
from ..records import record
from .layout import GridLayout, infer_layout, parse_layout
from .plan import KEEP_MODES, ScalePlan, make_plan
from .rank import SourceTask, Target, merge_stages, survey_rank, write_copies

__all__ = ["scale", "ScaleReport", "plan_scale", "GridLayout", "infer_layout", "parse_layout", "KEEP_MODES"]


@record
class ScaleReport:
    source: str
    prefix: str
    old_layout: str
    new_layout: str
    old_ranks: int
    ranks: int
    nodes: int
    groups: int
    seconds: float
    valid: bool | None  # None: not validated
    findings: list[str]

    def lines(self) -> list[str]:
        out = [f"layout {self.old_layout} ({self.old_ranks} ranks) -> {self.new_layout} ({self.ranks:,} ranks)",
               f"wrote {self.ranks:,} rank(s), {self.nodes:,} nodes, {self.groups:,} process group(s) to "
               f"{self.prefix}.<rank>.et in {self.seconds:.2f} s ({self.nodes / max(self.seconds, 1e-9):,.0f} nodes/s)"]
        if self.valid is not None:
            out.append("validation: ok" if self.valid else f"validation: {len(self.findings)} finding(s): "
                       + "; ".join(self.findings[:3]))
        return out

    def to_json(self) -> dict:
        return dict(self.__dict__)


def _which(dp: int | None, tp: int | None, pp: int | None, ranks: int | None) -> tuple[str, int]:
    given = [(k, v) for k, v in (("dp", dp), ("tp", tp), ("pp", pp), ("ranks", ranks)) if v is not None]
    if len(given) != 1:
        raise OptionError("give exactly one of {dp}, {tp}, {pp} or {ranks}", dp=..., tp=..., pp=..., ranks=...)
    return given[0]


def plan_scale(job_or_prefix: str | os.PathLike[str], *, dp: int | None = None, tp: int | None = None,
               pp: int | None = None, ranks: int | None = None, keep: str = "per-rank-batch",
               layout: str | None = None, comm_groups: str | os.PathLike[str] | None = None,
               executor: Executor | None = None) -> tuple[ScalePlan, list, list]:
    """The plan (and the surveys and rank files it was made from) without writing anything."""
    files, prefix = discover(job_or_prefix)
    executor = executor or default_executor()
    surveys = executor.map(survey_rank, [(f.rank, str(f.path)) for f in files], desc="survey")
    world = max(f.rank for f in files) + 1
    if sorted(f.rank for f in files) != list(range(world)):
        raise UsageError(f"{job_or_prefix}: ranks {sorted(set(range(world)) - {f.rank for f in files})} are missing")
    declared = ProcessGroups()
    for s in surveys:
        declared = declared.merged(ProcessGroups(s.declared))
    groups = load_groups(declared, prefix, comm_groups)
    used = set().union(*(s.pg_names for s in surveys))
    peers = {(s.rank, p) for s in surveys for p in s.peers}
    grid = parse_layout(layout, world) if layout else infer_layout(world, groups, used, peers)
    dim, size = _which(dp, tp, pp, ranks)
    if dim == "ranks":
        per_replica = grid.world_size // grid.size("dp")
        if size % per_replica:
            raise OptionError(f"{{ranks}}: not a multiple of the {per_replica} ranks of one data-parallel replica "
                              f"(layout {grid.text()})", ranks=size)
        dim, size = "dp", size // per_replica
    names = used | set(groups.groups)
    return make_plan(grid, groups, names, dim, size, keep, used=used), surveys, files


def scale(job_or_prefix: str | os.PathLike[str], out: str | os.PathLike[str], *, dp: int | None = None,
          tp: int | None = None, pp: int | None = None, ranks: int | None = None, keep: str = "per-rank-batch",
          layout: str | None = None, comm_groups: str | os.PathLike[str] | None = None, validate: bool = True,
          executor: Executor | None = None) -> ScaleReport:
    """Write the job ``job_or_prefix`` scaled along one dimension under the prefix ``out``.

    Exactly one of ``dp``, ``tp``, ``pp`` (the new degree) or ``ranks`` (the new world size, reached by
    scaling dp) is given. ``validate`` checks the new job across ranks (:func:`etkit.validate.validate`).
    """
    began = time.perf_counter()
    files, prefix = discover(job_or_prefix)
    executor = executor or default_executor()
    inputs = [f.path for f in files] + (job_files(prefix) if prefix else [])
    with protect_inputs(inputs), job_output(out) as staged:  # an output over the input is refused here
        plan, surveys, files = plan_scale(job_or_prefix, dp=dp, tp=tp, pp=pp, ranks=ranks, keep=keep, layout=layout,
                                          comm_groups=comm_groups, executor=executor)
        tasks = _tasks(plan, surveys, [str(f.path) for f in files], staged)
        merging = plan.merge > 1
        nodes = sum(executor.map(merge_stages if merging else write_copies, tasks, desc="scale"))
        if plan.groups.groups:
            plan.groups.write(staged.groups_path())
    seconds = time.perf_counter() - began
    valid, findings = None, []
    if validate:
        from ..validate import ERROR
        from ..validate import validate as check

        report = check(str(out), executor=executor)
        valid, findings = report.ok, [str(f) for f in report.findings if f.severity == ERROR]
    return ScaleReport(str(job_or_prefix), str(out), plan.old.text(), plan.new.text(), plan.old.world_size,
                       plan.new.world_size, nodes, len(plan.groups.groups), seconds, valid, findings)


def _tasks(plan: ScalePlan, surveys: list, paths: list[str], staged) -> list[SourceTask]:  # noqa: ANN001
    by_rank = {s.rank: s for s in surveys}
    tasks = []
    for _, targets in sorted(plan.targets_by_source().items()):
        sources = plan.sources(targets[0])
        specs = []
        for r in targets:
            names = set().union(*(by_rank[s].pg_names for s in sources))
            peers = set().union(*(by_rank[s].peers for s in sources)) | set(sources)
            declared = None
            old_declared = {k: v for s in sources for k, v in by_rank[s].declared.items()}
            if old_declared:
                new_names = dict.fromkeys(plan.pg_name(n, r) for n in old_declared)
                declared = {n: plan.groups.members(n, plan.new.world_size) for n in new_names}
            specs.append(Target(r, str(staged.rank_path(r)), {n: plan.pg_name(n, r) for n in names},
                                {p: plan.peer(p, r) for p in sorted(peers)}, declared))
        source_names = set().union(*(by_rank[s].pg_names for s in sources))
        collectives = {n: (plan.collective_factor(n, 2), plan.collective_factor(n, 0)) for n in source_names | {"0"}}
        tasks.append(SourceTask(tuple(paths[s] for s in sources), tuple(sources), tuple(specs), plan.rescale.compute,
                                plan.rescale.p2p, collectives))
    return tasks

