"""A job: every rank's :class:`Trace` plus the process groups that tie the ranks together.

``discover`` turns what users type (a prefix such as ``out/llm``, or explicit files) into the per-rank
file list; ``rank_batches`` groups that list into executor tasks of several files (read together by
:func:`~etkit.model.trace.load_traces`); ``load_job`` reads the files through an executor, a batch per task.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ..errors import UsageError
from ..executor import Executor, in_client
from ..fileio import RANK_FILE, comm_groups_path, job_output, rank_file_path, rank_files
from ..format.schema import NodeType
from ..records import record
from .groups import ProcessGroups, parse_process_group_init
from .trace import BATCH_BYTES, Trace, TraceBatch, load_batches

if TYPE_CHECKING:
    from ..format.schema import Node

__all__ = ["Job", "RankFile", "discover", "rank_batches", "map_ranks", "map_batches", "jobs_in", "require_whole_job", "load_job", "groups_from_trace", "groups_from_batch",
           "groups_from_traces", "comm_groups_path", "groups_file", "load_groups", "remove_stale_files"]

R = TypeVar("R")
_RANK_SUFFIX = RANK_FILE


@record(frozen=True)
class RankFile:
    rank: int
    path: Path


#: :func:`rank_batches` makes at least this many batches of a job with that many files (work for a pool to share).
MIN_BATCHES = 16


def rank_batches(files: Sequence[RankFile], *, batch_bytes: int | None = None,
                 min_batches: int | None = None) -> list[list[tuple[int, str]]]:
    """``files`` (in order) as consecutive batches of ``(rank, path)``: per-batch executor tasks that read their
    files together (:func:`~etkit.model.trace.load_traces`), so a job of many small files pays its records,
    not a task and a decoder set-up per file.

    A batch holds about ``batch_bytes`` (size on disk; default :data:`~etkit.model.trace.BATCH_BYTES`), less
    where the job would otherwise make fewer than ``min_batches`` (default :data:`MIN_BATCHES`) batches; a file
    larger than that is a batch alone. A file that cannot be sized counts as empty (reading it gives its error).
    """
    batch_bytes = BATCH_BYTES if batch_bytes is None else batch_bytes
    min_batches = MIN_BATCHES if min_batches is None else min_batches
    sizes = []
    for f in files:
        try:
            sizes.append(os.stat(f.path).st_size)
        except OSError:
            sizes.append(0)
    target = max(1, min(batch_bytes, sum(sizes) // max(1, min_batches)))
    batches: list[list[tuple[int, str]]] = []
    held = 0
    for f, size in zip(files, sizes):
        if not batches or (held and held + size > target):
            batches.append([])
            held = 0
        batches[-1].append((f.rank, str(f.path)))
        held += size
    return batches


def map_ranks(executor: Executor, per_rank: Callable[[Trace, int], R], files: Sequence[RankFile], *, desc: str,
              allow_empty: bool = False, names: bool = True, attrs: Collection[str] | None = None) -> list[R]:
    """``per_rank(trace, rank)`` of every rank file, in ``files`` order, through ``executor``: one task per
    :func:`rank_batches` batch, whose files are loaded together (:func:`~etkit.model.trace.load_traces` with
    ``allow_empty``, ``names`` and ``attrs``). ``per_rank`` must be picklable (a module-level function) for a
    pool; the first unreadable file's error is raised."""
    return map_batches(executor, functools.partial(_per_rank, per_rank), files, desc=desc, allow_empty=allow_empty,
                       names=names, attrs=attrs)


def map_batches(executor: Executor, per_batch: Callable[[TraceBatch, list[int]], list[R]], files: Sequence[RankFile],
                *, desc: str, allow_empty: bool = False, names: bool = True, attrs: Collection[str] | None = None,
                deps: bool = True) -> list[R]:
    """:func:`map_ranks` for work done on a batch of files at once: ``per_batch(batch, ranks)`` gives the results
    of the ranks of one :class:`~etkit.model.trace.TraceBatch` (:func:`~etkit.model.trace.load_batches` with
    ``deps`` too), in order."""
    task = functools.partial(_batch_results, per_batch, allow_empty, names, attrs, deps)
    return [result for part in executor.map(task, rank_batches(files), desc=desc) for result in part]


def _per_rank(per_rank: Callable[[Trace, int], R], batch: TraceBatch, ranks: list[int]) -> list[R]:
    return [per_rank(trace, rank) for rank, trace in zip(ranks, batch.traces(), strict=True)]


def _batch_results(per_batch: Callable[[TraceBatch, list[int]], list[R]], allow_empty: bool, names: bool,
                   attrs: Collection[str] | None, deps: bool, batch: list[tuple[int, str]]) -> list[R]:
    """Executor task of :func:`map_batches`: ``per_batch`` of each decoded batch of one task's ``(rank, path)``."""
    out: list[R] = []
    at = 0
    for part in load_batches([path for _, path in batch], allow_empty=allow_empty, names=names, attrs=attrs,
                             deps=deps):
        ranks = [rank for rank, _ in batch[at:at + len(part.paths)]]
        out.extend(per_batch(part, ranks))
        at += len(part.paths)
    if at != len(batch):
        raise AssertionError("a batch's files and their traces do not match")
    return out


def discover(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> tuple[list[RankFile], str | None]:
    """Per-rank files of a job and its prefix (when there is one).

    ``spec`` is a prefix (``out/job`` finds ``out/job.0.et``, ``out/job.1.et.gz``, ...; ``out/job.`` is the
    same prefix), a folder holding one job (that job; a folder of several lists their prefixes), a single
    ``.et`` file, or a list of files (rank from the ``.<rank>.et`` suffix, else list position). A file that is
    not a Chakra ET (a PyTorch trace, a JSON twin, a config file) is named for what it is.
    """
    if isinstance(spec, (str, os.PathLike)):
        spec_path = Path(spec)
        if spec_path.is_file():
            _require_et(spec_path)
            return [_rank_file(spec_path, 0)], _prefix_of(spec_path)
        if spec_path.is_dir():
            prefix = _only_job_in(spec_path)
        else:
            prefix = str(spec).rstrip(".") if str(spec).rstrip(".") else str(spec)
        found: dict[int, Path] = {}
        for rank, candidate in _rank_candidates(prefix):
            if rank in found:
                raise UsageError(f"{prefix}: rank {rank} has two files, {found[rank].name} and {candidate.name}")
            found[rank] = candidate
        if not found:
            raise UsageError(f"{prefix}: no file {prefix}.<rank>.et (or .et.gz) found{_nearby_jobs(prefix)}")
        return [RankFile(r, found[r]) for r in sorted(found)], prefix
    files = [Path(p) for p in spec]
    if not files:
        raise UsageError("no trace file given")
    for f in files:
        if not f.is_file():
            raise UsageError(f"{f}: no such file")
        _require_et(f)
    ranked = [_rank_file(f, i) for i, f in enumerate(files)]
    if len({r.rank for r in ranked}) != len(ranked):
        ranked = [RankFile(i, f) for i, f in enumerate(files)]
    prefixes = {_prefix_of(f) for f in files}
    return sorted(ranked, key=lambda r: r.rank), prefixes.pop() if len(prefixes) == 1 else None


def _require_et(path: Path) -> None:
    from ..filekind import require

    require(path, {"chakra-et"}, wanted="a Chakra ET (.et) file")


def jobs_in(folder: str | os.PathLike[str]) -> list[str]:
    """The prefixes of the jobs in ``folder`` (every ``<prefix>.<rank>.et[.gz]`` name), sorted."""
    root = Path(folder)
    prefixes = {str(root / m.group("prefix")) for p in root.iterdir() if (m := _RANK_SUFFIX.match(p.name)) and p.is_file()}
    return sorted(prefixes)


def _only_job_in(folder: Path) -> str:
    """The prefix of the one job in ``folder``; a clear error listing them when there are several or none."""
    prefixes = jobs_in(folder)
    if len(prefixes) == 1:
        return prefixes[0]
    if prefixes:
        shown = ", ".join(prefixes[:12]) + (f", ... ({len(prefixes)} jobs)" if len(prefixes) > 12 else "")
        raise UsageError(f"{folder} is a folder of {len(prefixes)} jobs: give one of their prefixes: {shown}")
    from ..filekind import sniff

    kinds = {sniff(p).name for p in sorted(folder.iterdir())[:64] if p.is_file()}
    hint = (": its PyTorch traces convert with `etkit convert pytorch`" if kinds & {"host-et", "kineto", "linked"}
            else "")
    raise UsageError(f"{folder} is a folder with no job in it (no PREFIX.<rank>.et files){hint}")


def _nearby_jobs(prefix: str) -> str:
    """`` (did you mean ...?)`` naming the jobs beside a prefix that matches none."""
    parent = Path(prefix).parent
    if not parent.is_dir():
        return ""
    from ..suggest import did_you_mean

    names = jobs_in(parent)
    hint = did_you_mean(prefix, names)
    if hint:
        return hint
    return f"; jobs there: {', '.join(names[:8])}" if 0 < len(names) <= 8 else ""


def require_whole_job(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> None:
    """A clear error when ``spec`` is one rank file of a multi-rank job (``et/tp.1.et`` beside ``et/tp.0.et``,
    ...): what needs every rank (a simulation) is given the job's prefix instead."""
    if not isinstance(spec, (str, os.PathLike)) or not Path(spec).is_file():
        return
    prefix = _prefix_of(Path(spec))
    ranks = [r for r, _ in _rank_candidates(prefix)] if prefix else []
    if len(ranks) > 1:
        rank = _rank_file(Path(spec), 0).rank
        raise UsageError(f"{spec} is rank {rank} of the {len(ranks)}-rank job {prefix}: its collectives wait for the "
                         f"other ranks; give the prefix {prefix} to simulate the job")


def _rank_candidates(prefix: str) -> list[tuple[int, Path]]:
    """Every ``<prefix>.<rank>.et[.gz]`` file, sorted by name."""
    return rank_files(prefix)


def _rank_file(path: Path, default_rank: int) -> RankFile:
    m = _RANK_SUFFIX.match(path.name)
    return RankFile(int(m.group("rank")) if m else default_rank, path)


def _prefix_of(path: Path) -> str | None:
    m = _RANK_SUFFIX.match(path.name)
    return str(path.parent / m.group("prefix")) if m else None


def remove_stale_files(prefix: str | os.PathLike[str], written: Iterable[str | os.PathLike[str]], *,
                       has_groups: bool) -> list[Path]:
    """After writing a job under ``prefix``: delete the files of an older job there that this one lacks.

    Every ``<prefix>.<r>.et[.gz]`` not in ``written`` goes (older extra ranks, or the other compression of
    a rank), and so does ``<prefix>.comm_groups.json`` when the new job has no groups. Without this, a
    smaller job written over a bigger one would be read back with the old extra ranks.
    """
    keep = {Path(p).resolve() for p in written}
    removed = [path for _, path in _rank_candidates(str(prefix)) if path.resolve() not in keep]
    for path in removed:
        path.unlink(missing_ok=True)
    groups_file = comm_groups_path(prefix)
    if not has_groups and groups_file.exists():
        groups_file.unlink()
        removed.append(groups_file)
    return removed


def groups_from_trace(trace: Trace) -> ProcessGroups:
    """Process groups declared by the ``process_group:init`` METADATA nodes of one trace."""
    return _declared_groups(trace.path, (trace.node(row) for row in np.flatnonzero(trace.types == _METADATA).tolist()))


def groups_from_batch(batch: TraceBatch) -> list[ProcessGroups]:
    """:func:`groups_from_trace` of each file of ``batch`` (its METADATA nodes found in the joined columns at once)."""
    if not batch.joint:
        return [groups_from_trace(trace) for trace in batch.traces()]
    rows = np.flatnonzero(batch.columns.types == _METADATA)
    cut = np.searchsorted(rows, batch.bounds).tolist()
    return [_declared_groups(path, (batch.node(row) for row in rows[lo:hi].tolist()))
            for path, lo, hi in zip(batch.paths, cut[:-1], cut[1:])]


_METADATA = int(NodeType.METADATA_NODE)


def _declared_groups(path: str, metadata_nodes: Iterable[Node]) -> ProcessGroups:
    groups = ProcessGroups()
    for node in metadata_nodes:
        if node.HasField("inputs") and "pg_name" in node.inputs.values:
            where = f"{path}: node {node.id} process_group:init"
            groups = groups.merged(parse_process_group_init(node.inputs.values, where=where))
    return groups


def groups_from_traces(traces: Mapping[int, Trace]) -> ProcessGroups:
    """Process groups declared by ``process_group:init`` METADATA nodes of any rank."""
    groups = ProcessGroups()
    for trace in traces.values():
        groups = groups.merged(groups_from_trace(trace))
    return groups


@record
class Job:
    """Every rank's trace of one job, with its process groups."""

    traces: dict[int, Trace]
    groups: ProcessGroups = field(default_factory=ProcessGroups)
    prefix: str | None = None

    @property
    def ranks(self) -> list[int]:
        return sorted(self.traces)

    @property
    def world_size(self) -> int:
        return max(self.traces) + 1 if self.traces else 0

    def members(self, pg_name: str | None) -> tuple[int, ...]:
        return self.groups.members(pg_name, self.world_size)

    def write(self, prefix: str | os.PathLike[str], *, compress: bool = False) -> list[Path]:
        """Write ``<prefix>.<rank>.et`` for every rank and ``<prefix>.comm_groups.json`` if there are groups,
        as one unit (:func:`~etkit.fileio.job_output`): an older job's files there that this one lacks go."""
        paths = []
        with job_output(prefix) as out:
            for rank, trace in sorted(self.traces.items()):
                path = rank_file_path(prefix, rank, compress=compress)
                trace.write(out.path(path))
                paths.append(path)
            if self.groups.groups:
                self.groups.write(out.groups_path())
        return paths


def load_job(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
             comm_groups: str | os.PathLike[str] | None = None,
             executor: Executor | None = None) -> Job:
    """Load every rank of a job (see :func:`discover`) into columnar traces, one executor task per batch of
    rank files (:func:`rank_batches`).

    With a remote executor (:class:`~etkit.executor.DaskExecutor`) the files are read in this process's
    own pool: whole traces never travel through the cluster. Process groups come from ``comm_groups``
    (or ``<prefix>.comm_groups.json`` when it exists), merged over those declared by METADATA nodes.
    """
    files, prefix = discover(spec)
    # the traces end up in this process: a cluster executor's workers would send them through its scheduler,
    # so a remote executor loads in this machine's pool instead (etkit.executor.in_client)
    traces = map_ranks(in_client(executor), _trace_alone, files, desc="load")
    by_rank = {f.rank: t for f, t in zip(files, traces)}
    groups = load_groups(groups_from_traces(by_rank), prefix, comm_groups, world_size=max(by_rank) + 1)
    return Job(by_rank, groups, prefix)


def _trace_alone(trace: Trace, _rank: int) -> Trace:
    """:func:`map_ranks` task of :func:`load_job`: the trace itself."""
    return trace


def groups_file(prefix: str | os.PathLike[str] | None) -> Path | None:
    """The comm-groups file beside the job ``prefix``: ``<prefix>.comm_groups.json``, else ``<prefix>.json`` when it
    is one (STAGE writes ``workload.json`` beside ``workload.<rank>.et``); None when there is neither."""
    if prefix is None:
        return None
    ours = comm_groups_path(prefix)
    if ours.is_file():
        return ours
    theirs = Path(f"{prefix}.json")
    if theirs.is_file():
        from ..filekind import sniff

        if sniff(theirs).name == "comm-groups":
            return theirs
    return None


def load_groups(declared: ProcessGroups, prefix: str | None,
                comm_groups: str | os.PathLike[str] | None = None, *, world_size: int | None = None) -> ProcessGroups:
    """``declared`` groups overlaid with ``comm_groups`` (or the comm-groups file beside ``prefix``, see
    :func:`groups_file`). With ``world_size``, a group in the file naming a rank the job does not have is an
    error (the job being all ranks under ``prefix``, even when fewer were loaded)."""
    path = Path(comm_groups) if comm_groups else groups_file(prefix)
    if path is None:
        return declared
    from_file = ProcessGroups.load(path)
    if world_size is not None:
        world = max([world_size, *(r + 1 for r, _ in (_rank_candidates(prefix) if prefix else []))])
        for name, ranks in from_file.groups.items():
            beyond = [r for r in ranks if r >= world]
            if beyond:
                raise UsageError(f"{path}: group {name!r} names rank {beyond[0]} but the job has {world} rank(s) "
                                 f"(0..{world - 1})")
    return declared.merged(from_file)
