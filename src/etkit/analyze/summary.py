"""``etkit info``: what a job holds, per rank: node counts by type, communication volume by kind,
summed durations, and the GlobalMetadata.

The ranks are summarised in executor tasks of a batch of rank files each (:func:`~etkit.model.job.rank_batches`:
the batch's files loaded together, each rank counted, a small record returned), so a job of thousands of
ranks never sits in memory at once.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..executor import Executor, default_executor
from ..format.attrs import attr_value
from ..format.schema import NodeType
from ..model.job import discover, map_ranks
from ..model.trace import MISSING, Trace, comm_type_name, node_type_name
from ..units import exact_sum

__all__ = ["RankInfo", "JobInfo", "summarize_trace", "info"]


@dataclass
class CommVolume:
    count: int = 0
    bytes: int = 0


@dataclass
class RankInfo:
    rank: int
    path: str
    nodes: int
    by_type: dict[str, int]
    duration_us_by_type: dict[str, int]
    duration_us_total: int
    comm: dict[str, CommVolume]
    version: str
    metadata: dict[str, Any]
    timestamps: bool
    span_us: int


@dataclass
class JobInfo:
    ranks: list[RankInfo]
    nodes: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    comm: dict[str, CommVolume] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _json_safe(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value


def summarize_trace(trace: Trace, rank: int) -> RankInfo:
    """Counts, durations, communication volume and metadata of one rank."""
    types, counts, durations = _grouped(trace.types, trace.duration)
    names = [node_type_name(t) for t in types]
    comm: dict[str, CommVolume] = {}
    size = np.where(trace.comm_size == MISSING, 0, trace.comm_size)
    coll = trace.types == NodeType.COMM_COLL_NODE
    for ctype, count, volume in zip(*_grouped(trace.comm_type[coll], size[coll])):
        comm["UNKNOWN" if ctype == MISSING else comm_type_name(ctype)] = CommVolume(count, volume)
    for node_type, label in ((NodeType.COMM_SEND_NODE, "SEND"), (NodeType.COMM_RECV_NODE, "RECV")):
        if node_type in types:
            rows = trace.types == node_type
            comm[label] = CommVolume(counts[types.index(node_type)], exact_sum(size[rows]))
    ran = trace.start > 0
    span = _span(trace.start[ran], trace.duration[ran])
    return RankInfo(
        rank=rank, path=trace.path, nodes=len(trace), by_type=dict(zip(names, counts)),
        duration_us_by_type=dict(zip(names, durations)), duration_us_total=sum(durations), comm=comm,
        version=trace.metadata.version,
        metadata={a.name: _json_safe(attr_value(a)) for a in trace.metadata.attr if a.name != "input_file"},
        timestamps=bool(ran.any()), span_us=span,
    )


def _grouped(keys: np.ndarray, values: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    """The distinct ``keys`` (ascending), how many rows hold each, and the exact sum of ``values`` over those
    rows (as :func:`~etkit.units.exact_sum`: the high and low 32-bit halves summed apart), in a few numpy passes."""
    if not keys.size:
        return [], [], []
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    kind = np.uint64 if values.dtype.kind == "u" else np.int64
    v = values[order].astype(kind, copy=False)
    high = np.add.reduceat(v >> kind(32), starts)
    low = np.add.reduceat(v & kind(0xFFFFFFFF), starts)
    sums = [(h << 32) + lo for h, lo in zip(high.tolist(), low.tolist())]
    return ordered[starts].tolist(), np.diff(np.append(starts, keys.size)).tolist(), sums


def _span(start: np.ndarray, duration: np.ndarray) -> int:
    """Last end minus first start, exactly (an end past 2**64 does not wrap around)."""
    if not start.size:
        return 0
    end = start + duration
    wrapped = end < start
    last = int(end[~wrapped].max()) if (~wrapped).any() else 0
    if wrapped.any():
        last = max(last, *(int(s) + int(d) for s, d in zip(start[wrapped], duration[wrapped])))
    return last - int(start.min())


def info(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
         executor: Executor | None = None) -> JobInfo:
    """Summarise every rank of the job at ``spec`` (prefix, file or files)."""
    files, _ = discover(spec)
    executor = executor or default_executor()
    ranks = map_ranks(executor, summarize_trace, files, desc="info", names=False)  # counts only: no name table
    job = JobInfo(ranks)
    by_type: Counter[str] = Counter()
    for r in ranks:
        job.nodes += r.nodes
        by_type.update(r.by_type)
        for label, vol in r.comm.items():
            total = job.comm.setdefault(label, CommVolume())
            total.count += vol.count
            total.bytes += vol.bytes
    job.by_type = dict(by_type)
    return job
