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
from dataclasses import asdict, field
from typing import Any

import numpy as np

from ..executor import Executor, default_executor
from ..format.attrs import attr_value
from ..format.schema import NodeType
from ..model.job import discover, map_batches
from ..model.trace import MISSING, Trace, TraceBatch, comm_type_name, node_type_name
from ..records import record
from ..units import exact_sum

__all__ = ["RankInfo", "JobInfo", "summarize_trace", "summarize_batch", "info"]


@record
class CommVolume:
    count: int = 0
    bytes: int = 0


@record
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


@record
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
        metadata=_metadata(trace.metadata),
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


#: The attribute columns :func:`summarize_trace` reads (the others are left undecoded when ``info`` loads files).
_INFO_ATTRS = ("comm_type", "comm_size")


def summarize_batch(batch: TraceBatch, ranks: list[int]) -> list[RankInfo]:
    """:func:`summarize_trace` of each file of ``batch`` (as rank ``ranks[i]``), computed on the batch's joined
    columns at once: one sort by (file, node type) and one by (file, collective type) for the whole batch
    instead of a few dozen numpy calls per rank."""
    cols, bounds = batch.columns, batch.bounds
    files = len(batch.paths)
    counts = np.diff(bounds)
    owner = np.repeat(np.arange(files, dtype=np.int64), counts)
    types = cols.types
    # rows by (file, type): the type (int32) as an unsigned 32-bit key below the file's number
    type_groups = _file_groups(owner, (owner << 32) | (types.astype(np.int64) + (1 << 31)), types, cols.duration)
    size = np.where(cols.ints["comm_size"] == MISSING, 0, cols.ints["comm_size"])
    coll = np.flatnonzero(types == NodeType.COMM_COLL_NODE)
    coll_groups = _file_groups(owner[coll], None, cols.ints["comm_type"][coll], size[coll])
    p2p = {node_type: _file_sums(owner, types == node_type, size, files) for node_type in _P2P}
    spans = _file_spans(owner, bounds, cols.start, cols.duration)
    out = []
    for i, (path, meta, rank) in enumerate(zip(batch.paths, batch.metadata, ranks, strict=True)):
        present, tallies, durations = type_groups.get(i, ([], [], []))
        names = [node_type_name(t) for t in present]
        comm: dict[str, CommVolume] = {}
        for ctype, count, volume in zip(*coll_groups.get(i, ([], [], []))):
            comm["UNKNOWN" if ctype == MISSING else comm_type_name(ctype)] = CommVolume(count, volume)
        for node_type, label in _P2P.items():
            if node_type in present:
                comm[label] = CommVolume(tallies[present.index(node_type)], p2p[node_type][i])
        timestamps, span = spans[i]
        out.append(RankInfo(
            rank=rank, path=path, nodes=int(counts[i]), by_type=dict(zip(names, tallies)),
            duration_us_by_type=dict(zip(names, durations)), duration_us_total=sum(durations), comm=comm,
            version=meta.version, metadata=_metadata(meta), timestamps=timestamps, span_us=span))
    return out


_P2P = {int(NodeType.COMM_SEND_NODE): "SEND", int(NodeType.COMM_RECV_NODE): "RECV"}


def _halves(values: np.ndarray) -> tuple[np.ndarray, Any]:
    """``values`` as the uint64 or int64 array whose high and low 32-bit halves :func:`~etkit.units.exact_sum` sums."""
    kind = np.uint64 if values.dtype.kind == "u" else np.int64
    return values.astype(kind, copy=False), kind


def _file_groups(owner: np.ndarray, key: np.ndarray | None, keys: np.ndarray,
                 values: np.ndarray) -> dict[int, tuple[list[int], list[int], list[int]]]:
    """Per file (``owner``, ascending): :func:`_grouped` of its rows' ``keys`` and ``values``. ``key`` is one
    sortable int64 per row that orders rows by file, then by ``keys``; without it, rows are ordered by
    ``lexsort``."""
    if not keys.size:
        return {}
    order = np.argsort(key, kind="stable") if key is not None else np.lexsort((keys, owner))
    k, o = keys[order], owner[order]
    starts = np.flatnonzero(np.concatenate([[True], (k[1:] != k[:-1]) | (o[1:] != o[:-1])]))
    v, kind = _halves(values[order])
    high = np.add.reduceat(v >> kind(32), starts).tolist()
    low = np.add.reduceat(v & kind(0xFFFFFFFF), starts).tolist()
    tallies = np.diff(np.append(starts, keys.size)).tolist()
    out: dict[int, tuple[list[int], list[int], list[int]]] = {}
    for file, group_key, count, h, lo in zip(o[starts].tolist(), k[starts].tolist(), tallies, high, low):
        present, counted, sums = out.setdefault(file, ([], [], []))
        present.append(group_key)
        counted.append(count)
        sums.append((h << 32) + lo)
    return out


def _file_sums(owner: np.ndarray, rows: np.ndarray, values: np.ndarray, files: int) -> list[int]:
    """Per file, the exact sum of ``values`` over its rows where ``rows`` (0 for a file without any)."""
    sums = [0] * files
    picked = np.flatnonzero(rows)
    if not picked.size:
        return sums
    o = owner[picked]
    starts = np.flatnonzero(np.concatenate([[True], o[1:] != o[:-1]]))
    v, kind = _halves(values[picked])
    for file, h, lo in zip(o[starts].tolist(), np.add.reduceat(v >> kind(32), starts).tolist(),
                           np.add.reduceat(v & kind(0xFFFFFFFF), starts).tolist()):
        sums[file] = (h << 32) + lo
    return sums


def _file_spans(owner: np.ndarray, bounds: np.ndarray, start: np.ndarray, duration: np.ndarray) -> list[tuple[bool, int]]:
    """Per file: whether any node has a timestamp (``start > 0``) and :func:`_span` of those nodes."""
    files = bounds.size - 1
    out = [(False, 0)] * files
    ran = np.flatnonzero(start > 0)
    if not ran.size:
        return out
    o = owner[ran]
    s, d = start[ran], duration[ran]
    end = s + d
    wrapped = end < s
    starts = np.flatnonzero(np.concatenate([[True], o[1:] != o[:-1]]))
    first = np.minimum.reduceat(s, starts).tolist()
    last = np.maximum.reduceat(np.where(wrapped, np.uint64(0), end), starts).tolist()  # 0: only wrapped ends
    firsts = dict(zip(o[starts].tolist(), first))
    lasts = dict(zip(o[starts].tolist(), last))
    for row in np.flatnonzero(wrapped).tolist():  # an end past 2**64: exactly, one by one (rare)
        file = int(o[row])
        lasts[file] = max(lasts[file], int(s[row]) + int(d[row]))
    for file, f in firsts.items():
        out[file] = (True, lasts[file] - f)
    return out


def _metadata(meta: Any) -> dict[str, Any]:
    return {a.name: _json_safe(attr_value(a)) for a in meta.attr if a.name != "input_file"}


def info(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
         executor: Executor | None = None) -> JobInfo:
    """Summarise every rank of the job at ``spec`` (prefix, file or files)."""
    files, _ = discover(spec)
    executor = executor or default_executor()
    # counts only: no name table, no dependencies, only the attributes it counts; a batch of files at a time
    ranks = map_batches(executor, summarize_batch, files, desc="info", names=False, attrs=_INFO_ATTRS, deps=False)
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
