"""Converting a whole PyTorch job: find every rank's files, convert all ranks in parallel, write the groups.

A job directory holds, per rank, a host execution trace and a Kineto trace under our names
(``rank-<r>.et.json[.gz]`` + ``rank-<r>.kineto.json[.gz]``) or the reference tools' names
(``host.<r>.json[.gz]`` + ``device.<r>.json[.gz]``). Ranks without a Kineto file are converted from the
host trace alone (durations unknown, reported). Each rank is one executor task.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..executor import Executor, default_executor
from ..model.groups import ProcessGroups
from ..model.job import comm_groups_path, remove_stale_files
from .convert import RankReport, convert_linked
from .jsonio import paused_gc
from .link import link_files
from .peers import match_p2p_peers

__all__ = ["RankPair", "JobReport", "find_rank_pairs", "convert_job", "convert_rank", "convert_files"]

_HOST = re.compile(r"^(?:rank-(?P<a>\d+)\.et|host\.(?P<b>\d+))\.json(?:\.gz)?$")
_KINETO = re.compile(r"^(?:rank-(?P<a>\d+)\.kineto|device\.(?P<b>\d+))\.json(?:\.gz)?$")


@dataclass(frozen=True)
class RankPair:
    """One rank's input files."""

    rank: int
    host: Path
    kineto: Path | None


@dataclass
class JobReport:
    """What :func:`convert_job` wrote: per-rank reports, files and the job's process groups."""

    prefix: str
    ranks: list[RankReport]
    files: list[str]
    comm_groups: str | None
    groups: dict[str, list[int]] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)  # stale files of an older job under the prefix

    @property
    def nodes(self) -> int:
        return sum(r.nodes for r in self.ranks)

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "files": self.files, "comm_groups": self.comm_groups, "groups": self.groups,
                "removed": self.removed, "nodes": self.nodes, "ranks": [r.to_json() for r in self.ranks]}


def _rank_of(m: re.Match[str]) -> int:
    return int(m.group("a") if m.group("a") is not None else m.group("b"))


def find_rank_pairs(job_dir: str | os.PathLike[str]) -> list[RankPair]:
    """Every rank's (host, Kineto) files in ``job_dir``; a clear error when there is none."""
    root = Path(job_dir)
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    hosts: dict[int, Path] = {}
    kinetos: dict[int, Path] = {}
    for path in sorted(root.iterdir()):
        if (m := _HOST.match(path.name)) is not None:
            hosts.setdefault(_rank_of(m), path)
        elif (m := _KINETO.match(path.name)) is not None:
            kinetos.setdefault(_rank_of(m), path)
    if not hosts:
        raise UsageError(f"{root}: no host trace found (expected rank-<r>.et.json[.gz] or host.<r>.json[.gz])")
    orphans = sorted(set(kinetos) - set(hosts))
    if orphans:
        raise UsageError(f"{root}: Kineto trace of rank {orphans[0]} has no host trace beside it")
    return [RankPair(r, hosts[r], kinetos.get(r)) for r in sorted(hosts)]


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
    """Convert every rank of the PyTorch job in ``job_dir`` to ``<prefix>.<rank>.et`` (one task per rank)
    and write ``<prefix>.comm_groups.json``. A send/recv whose process group its rank cannot tell is
    settled against the other ranks' calls (:mod:`etkit.pytorch.peers`) and that rank converted again.
    Returns a per-rank report (nodes, comm nodes by type, unlinked
    ops, link statistics).

    The prefix then holds this job only: rank files of an older job written there that this one lacks
    (extra ranks, the other compression of a rank) are deleted, and so is its comm-groups file when this
    job has no groups; ``JobReport.removed`` lists them."""
    pairs = find_rank_pairs(job_dir)
    suffix = ".et.gz" if compress else ".et"
    tasks = [(p.rank, str(p.host), str(p.kineto) if p.kineto else None, f"{prefix}.{p.rank}{suffix}")
             for p in pairs]
    executor = executor or default_executor()
    reports = executor.map(convert_rank, tasks, desc="convert")
    # send/recv whose group a rank could not tell: settle them against the other ranks, convert those again
    matched = match_p2p_peers(reports)
    if matched:
        again = [task + (matched[task[0]],) for task in tasks if task[0] in matched]
        redone = {rep.rank: rep for rep in executor.map(convert_rank, again, desc="convert (p2p peers)")}
        reports = [redone.get(rep.rank, rep) for rep in reports]
    report = _finish(str(prefix), reports)
    removed = remove_stale_files(prefix, report.files, has_groups=report.comm_groups is not None)
    report.removed = [str(path) for path in removed]
    return report


def convert_files(host: str | os.PathLike[str], prefix: str | os.PathLike[str], *,
                  kineto: str | os.PathLike[str] | None = None, rank: int | None = None,
                  compress: bool = False) -> JobReport:
    """Single-file form: a host trace (or a linked JSON), with its Kineto trace when given.

    The rank is ``rank``, else the one in the host file's name; a Kineto trace of another rank is refused.
    Without either, the rank is the Kineto trace's (``distributedInfo``), else 0."""
    if rank is None:
        m = _HOST.match(Path(host).name)
        rank = _rank_of(m) if m else None
    with paused_gc():
        linked = link_files(host, kineto, rank=rank)
        if rank is None:
            rank = linked.kineto.rank if linked.kineto is not None and linked.kineto.rank is not None else 0
        out = f"{prefix}.{rank}" + (".et.gz" if compress else ".et")
        report = convert_linked(linked, out, rank=rank)
    return _finish(str(prefix), [report])


def _finish(prefix: str, reports: list[RankReport]) -> JobReport:
    groups = _job_groups(reports)
    groups_path = None
    if groups:
        groups_path = str(comm_groups_path(prefix))
        ProcessGroups.from_mapping(groups).write(groups_path)
    return JobReport(prefix, reports, [r.path for r in reports], groups_path, groups)
