"""Converting a whole PyTorch job: find every rank's files, convert all ranks in parallel, write the groups.

A job is, per rank, a host execution trace and (usually) a Kineto trace, in one directory or named by
glob patterns, under any names (ours ``rank-<r>.et.json[.gz]`` + ``rank-<r>.kineto.json[.gz]``, the reference
tools' ``host.<r>.json`` + ``device.<r>.json``, param's ``dlrm_eg_<r>.json`` + ``worker<r>_step_12.*.pt.trace.json``):
:mod:`etkit.pytorch.pairing` tells host from Kineto traces by content, pairs them and finds each pair's rank,
and refuses a job whose files come from different runs. Ranks without a Kineto file are converted from the
host trace alone (durations unknown, reported). Each rank is one executor task.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..executor import Executor, default_executor
from ..fileio import JobOutput, comm_groups_path, job_output
from ..gcpause import paused_gc
from ..records import record
from .convert import RankReport, convert_linked
from .link import link_files
from .pairing import Pairing, check_pair, job_files, pair_traces
from .peers import match_p2p_peers

if TYPE_CHECKING:  # pragma: no cover - the model (and its trace reader) is imported where a job has groups
    from ..model.groups import ProcessGroups
    from ..model.trace import Trace

__all__ = ["RankPair", "JobReport", "find_rank_pairs", "convert_job", "convert_traces", "convert_rank",
           "convert_files", "convert_ranks", "convert_ranks_in_memory"]

R = TypeVar("R")
_HOST = re.compile(r"^(?:rank-(?P<a>\d+)\.et|host\.(?P<b>\d+))\.json(?:\.gz)?$")

#: One rank's input files and how they were paired (:class:`etkit.pytorch.pairing.Pairing`).
RankPair = Pairing


@record
class JobReport:
    """What :func:`convert_job` wrote: per-rank reports, files and the job's process groups."""

    prefix: str
    ranks: list[RankReport]
    files: list[str]
    comm_groups: str | None
    groups: dict[str, list[int]] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)  # stale files of an older job under the prefix
    pairs: list[Pairing] = field(default_factory=list)  # which files made each rank, and how they were paired

    @property
    def nodes(self) -> int:
        return sum(r.nodes for r in self.ranks)

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "files": self.files, "comm_groups": self.comm_groups, "groups": self.groups,
                "removed": self.removed, "nodes": self.nodes, "pairs": [p.to_json() for p in self.pairs],
                "ranks": [r.to_json() for r in self.ranks]}


def _rank_of(m: re.Match[str]) -> int:
    return int(m.group("a") if m.group("a") is not None else m.group("b"))


def find_rank_pairs(job_dir: str | os.PathLike[str]) -> list[RankPair]:
    """Every rank's (host, Kineto) files in ``job_dir``, found by content; a clear error when there is none."""
    return pair_traces(*job_files(job_dir))


def convert_rank(task: tuple[Any, ...]) -> RankReport:
    """Link and convert one rank: ``(rank, host path, Kineto path or None, output .et path[, p2p_matched])``
    (``p2p_matched``: send/recv peers settled across ranks, see :mod:`etkit.pytorch.peers`)."""
    rank, host, kineto, out = task[:4]
    with paused_gc():
        linked = link_files(host, kineto, rank=rank)
        return convert_linked(linked, out, rank=rank, p2p_matched=task[4] if len(task) > 4 else None)


def _job_groups(reports: list[RankReport]) -> dict[str, list[int]]:
    world = len(reports)
    declared: dict[str, list[int]] = {}
    for rep in reports:
        for name, ranks in rep.groups.items():
            if ranks:
                declared[name] = sorted(ranks)
                world = max(world, max(ranks) + 1)
            else:
                declared.setdefault(name, [])
    return {name: (ranks or list(range(world))) for name, ranks in sorted(declared.items(), key=lambda kv: _pg_key(kv[0]))}


def _pg_key(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)


def convert_job(job_dir: str | os.PathLike[str], prefix: str | os.PathLike[str], *,
                executor: Executor | None = None, compress: bool = False) -> JobReport:
    """Convert every rank of the PyTorch job in ``job_dir`` (see :func:`convert_traces`)."""
    return convert_traces(*job_files(job_dir), prefix, executor=executor, compress=compress)


def convert_traces(hosts: list[str | os.PathLike[str]] | list[Path], kinetos: list[str | os.PathLike[str]] | list[Path],
                   prefix: str | os.PathLike[str], *, executor: Executor | None = None,
                   compress: bool = False) -> JobReport:
    """Convert a PyTorch job given as its host traces and Kineto traces (any names, paired by content:
    :func:`etkit.pytorch.pairing.pair_traces`) to ``<prefix>.<rank>.et`` (one task per rank) and write
    ``<prefix>.comm_groups.json``; ``JobReport.pairs`` says which files made each rank. A send/recv whose
    process group its rank cannot tell is settled against the other ranks' calls (:mod:`etkit.pytorch.peers`)
    and that rank converted again. Returns a per-rank report (nodes, comm nodes by type, unlinked ops, link
    statistics).

    The job is written as a unit (:func:`etkit.fileio.job_output`): interrupted or failed, an older job under
    the prefix stays as it was; done, the prefix holds this job only: rank files of the older job that this
    one lacks (extra ranks, the other compression of a rank) are deleted, and so is its comm-groups file when
    this job has no groups; ``JobReport.removed`` lists them."""
    pairs = pair_traces(hosts, kinetos)
    report = convert_ranks(convert_rank, [(p.rank, (str(p.host), str(p.kineto) if p.kineto else None)) for p in pairs],
                           prefix, executor=executor, compress=compress)
    report.pairs = pairs
    return report


def convert_ranks(worker: Callable[[tuple[Any, ...]], RankReport], inputs: list[tuple[int, tuple[Any, ...]]],
                  prefix: str | os.PathLike[str], *, executor: Executor | None = None,
                  compress: bool = False) -> JobReport:
    """Convert every rank of a job, one executor task each, and write the job as a unit (see
    :func:`convert_traces`): ``worker((rank, *rank_inputs, out_path[, p2p_matched]))`` converts one rank.
    A send/recv whose process group its rank cannot tell is settled against the other ranks' calls and
    that rank converted again. Shared by every converter of profiles (host traces, Kineto traces alone)."""
    executor = executor or default_executor()
    with job_output(prefix) as out:
        tasks = [(rank, *args, str(out.rank_path(rank, compress=compress))) for rank, args in inputs]
        reports = _settled(worker, tasks, executor, lambda rep: rep)
        report = _finish(str(prefix), reports, out)
    report.removed = [str(path) for path in out.removed]
    return report


def convert_ranks_in_memory(worker: Callable[[tuple[Any, ...]], tuple[RankReport, Trace]],
                            inputs: list[tuple[int, tuple[Any, ...]]], *, executor: Executor | None = None
                            ) -> tuple[list[RankReport], dict[int, Trace], ProcessGroups]:
    """:func:`convert_ranks` without files: ``worker((rank, *rank_inputs[, p2p_matched]))`` returns one rank's
    report and :class:`etkit.model.trace.Trace`; returns the reports, the traces by rank and the job's process
    groups (what ``<prefix>.comm_groups.json`` would hold). Send/recv peers are settled the same way."""
    results = _settled(worker, [(rank, *args) for rank, args in inputs], executor or default_executor(),
                       lambda result: result[0])
    reports = [rep for rep, _ in results]
    groups = _job_groups(reports)
    from ..model.groups import ProcessGroups

    return reports, {rep.rank: trace for rep, trace in results}, ProcessGroups.from_mapping(groups)


def _settled(worker: Callable[[tuple[Any, ...]], R], tasks: list[tuple[Any, ...]], executor: Executor,
             report_of: Callable[[R], RankReport]) -> list[R]:
    """``worker`` on every task; then the send/recv whose group a rank could not tell are settled against the
    other ranks' calls (:func:`etkit.pytorch.peers.match_p2p_peers`) and those ranks converted again (their
    task with the settled peers appended)."""
    results = executor.map(worker, tasks, desc="convert")
    matched = match_p2p_peers([report_of(r) for r in results])
    if matched:
        again = [task + (matched[task[0]],) for task in tasks if task[0] in matched]
        redone = {report_of(r).rank: r for r in executor.map(worker, again, desc="convert (p2p peers)")}
        results = [redone.get(report_of(r).rank, r) for r in results]
    return results


def convert_files(host: str | os.PathLike[str], prefix: str | os.PathLike[str], *,
                  kineto: str | os.PathLike[str] | None = None, rank: int | None = None,
                  compress: bool = False) -> JobReport:
    """Single-file form: a host trace (or a linked JSON), with its Kineto trace when given.

    The rank is ``rank``, else the one in the host file's name; a Kineto trace of another rank is refused.
    Without either, the rank is the Kineto trace's (``distributedInfo``), else 0."""
    check_pair(host, kineto)
    if rank is None:
        m = _HOST.match(Path(host).name)
        rank = _rank_of(m) if m else None
    with paused_gc():
        linked = link_files(host, kineto, rank=rank)
        if rank is None:
            rank = linked.kineto.rank if linked.kineto is not None and linked.kineto.rank is not None else 0
        with job_output(prefix, replace=False) as out:  # one rank added to whatever the prefix holds
            report = convert_linked(linked, out.rank_path(rank, compress=compress), rank=rank)
            return _finish(str(prefix), [report], out)


def _finish(prefix: str, reports: list[RankReport], out: JobOutput) -> JobReport:
    """The job's report; writes its comm groups into ``out``; the reports name the files' final paths."""
    for rep in reports:
        rep.path = str(out.final(rep.path))
    groups = _job_groups(reports)
    groups_path = None
    if groups:
        from ..model.groups import ProcessGroups

        groups_path = str(comm_groups_path(prefix))
        ProcessGroups.from_mapping(groups).write(out.groups_path())
    return JobReport(prefix, reports, [r.path for r in reports], groups_path, groups)
