"""Validation of Chakra ETs: per-file rules (``rank_rules``) and cross-rank rules (``job_rules``).

``validate(spec)`` checks files on disk, one executor task per batch of rank files (each task loads its
files together, checks each rank and returns only its findings and a compact communication record); ``validate_job(job)`` checks a job
already in memory. Both return a :class:`ValidationReport`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..executor import Executor, default_executor
from ..model.groups import ProcessGroups
from ..model.job import Job, discover, groups_from_batch, groups_from_trace, load_groups, map_batches
from ..model.matching import CommRecord, comm_record, comm_records
from ..model.trace import Trace, TraceBatch
from .findings import ERROR, WARNING, Finding, FindingSink, ValidationReport
from .job_rules import check_job
from .rank_rules import check_trace, quiet_files

__all__ = ["validate", "validate_job", "validate_trace", "Finding", "ValidationReport", "ERROR", "WARNING"]


#: The attribute columns the rules and the cross-rank matcher read (``validate`` decodes only these).
RULE_ATTRS = ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "is_cpu_op", "pg_name")


def validate_trace(trace: Trace, rank: int = 0) -> list[Finding]:
    """Single-file findings of ``trace`` (as rank ``rank``)."""
    sink = FindingSink(rank)
    check_trace(trace, sink)
    return sink.done()


_RankResult = tuple[int, list[Finding], CommRecord, ProcessGroups]


def _rank_result(trace: Trace, rank: int) -> _RankResult:
    return len(trace), validate_trace(trace, rank), comm_record(trace, rank), groups_from_trace(trace)


def _batch_results(batch: TraceBatch, ranks: list[int]) -> list[_RankResult]:
    """:func:`_rank_result` of each file of ``batch``: on the joined columns at once where the files were decoded
    together, the rules themselves only for the files :func:`~.rank_rules.quiet_files` cannot clear."""
    if not batch.joint:
        return [_rank_result(trace, rank) for trace, rank in zip(batch.traces(), ranks, strict=True)]
    quiet = quiet_files(batch, ranks).tolist()
    traces = [] if all(quiet) else batch.traces()
    findings = [[] if ok else validate_trace(traces[i], rank) for i, (ok, rank) in enumerate(zip(quiet, ranks))]
    return list(zip(np.diff(batch.bounds).tolist(), findings, comm_records(batch, ranks), groups_from_batch(batch),
                    strict=True))


def _assemble(results: dict[int, _RankResult],
              groups: ProcessGroups | None, prefix: str | None, comm_groups: str | os.PathLike[str] | None,
              files: list[str]) -> ValidationReport:
    declared = ProcessGroups()
    for _, _, _, g in results.values():
        declared = declared.merged(g)
    world = max(results) + 1 if results else 0
    groups = load_groups(declared, prefix, comm_groups, world_size=world).merged(groups or ProcessGroups())
    findings: list[Finding] = []
    for rank in sorted(results):
        findings.extend(results[rank][1])
    records = {rank: r[2] for rank, r in results.items()}
    findings.extend(check_job(records, groups, world))
    return ValidationReport(findings, len(results), sum(r[0] for r in results.values()), files)


def validate(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
             comm_groups: str | os.PathLike[str] | None = None, executor: Executor | None = None) -> ValidationReport:
    """Validate the job at ``spec`` (prefix, file, or list of files).

    Raises :class:`~etkit.errors.TraceFormatError` when a file cannot be read at all.
    """
    files, prefix = discover(spec)
    executor = executor or default_executor()
    # the rules read no names, and of the attributes only those of communication (and is_cpu_op)
    out = map_batches(executor, _batch_results, files, desc="validate", allow_empty=True, names=False,
                      attrs=RULE_ATTRS)
    results = {f.rank: res for f, res in zip(files, out, strict=True)}
    return _assemble(results, None, prefix, comm_groups, [str(Path(f.path)) for f in files])


def validate_job(job: Job) -> ValidationReport:
    """Validate a job held in memory (e.g. what a converter or generator just built)."""
    results = {rank: _rank_result(trace, rank) for rank, trace in job.traces.items()}
    return _assemble(results, job.groups, None, None, [t.path for _, t in sorted(job.traces.items())])
