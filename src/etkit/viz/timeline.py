"""Timelines for Perfetto: one process per rank, one thread per track, flow arrows across ranks.

Open the output in https://ui.perfetto.dev (or chrome://tracing). Slices are in time from the job's
first start; each carries the node id, type and, for communication, size and process group. Flow
arrows join the two ends of every send/recv pair and, for every collective, the member that arrived
last to each other member (it is the one they waited for).

Two formats: Chrome JSON (complete ``X`` events), which Perfetto loads up to a few hundred MB, so
output that would pass ``max_bytes`` (256 MiB by default) is split into files of whole ranks
(``out.part0.json``, ...; arrows whose ends land in different files are left out); and Perfetto's
protobuf TrackEvent format (:mod:`.perfetto`, chosen by a ``.pftrace`` name), streamed into one file
of any size. A ``.gz`` name compresses either.
"""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path

import numpy as np
import orjson

from ..analyze.context import AnalysisContext, prepare
from ..analyze.kinds import KIND_NAMES, comm_label
from ..executor import Executor
from ..fileio import atomic_output
from ..model.job import Job
from ..model.schedule import Schedule
from ..model.trace import MISSING, node_type_name
from ..records import record

__all__ = ["write_timeline", "TimelineResult", "MAX_JSON_BYTES"]

MAX_JSON_BYTES = 256 << 20
_BYTES_PER_EVENT = 190  # measured average of one serialised slice, plus its name
_MAX_FLOWS = 500_000


@record
class TimelineResult:
    paths: list[Path]
    events: int
    flows: int
    notes: list[str] = field(default_factory=list)


def _slices(ctx: AnalysisContext, rank: int, origin: float) -> Iterator[tuple[int, float, float, int, str, str, dict]]:
    """``(row, start ns, end ns, track, name, category, args)`` of every row of ``rank`` that ran."""
    v = ctx.views[rank]
    trace, sched = v.trace, v.sched
    rows = np.flatnonzero(sched.ran)
    starts = (sched.start_ns[rows] - origin).tolist()
    ends = (sched.end_ns[rows] - origin).tolist()
    tracks = v.tracks.track[rows].tolist()
    kinds = v.kinds[rows].tolist()
    ids = trace.ids[rows].tolist()
    types = trace.types[rows].tolist()
    names = trace.strings
    name_idx = trace.name_idx[rows].tolist()
    comm = set(trace.comm_rows().tolist())
    type_names = {t: node_type_name(t) for t in set(types)}
    for i, row in enumerate(rows.tolist()):
        args: dict = {"id": ids[i], "type": type_names[types[i]]}
        if row in comm:
            size = int(trace.comm_size[row])
            args["comm"] = comm_label(types[i], int(trace.comm_type[row]))
            waited = min(int(v.transfer[row]), int(sched.end_ns[row])) - int(sched.start_ns[row])
            if waited > 0:  # waiting for peers, not moving data (etkit.model.accounting)
                args["waiting_ns"] = waited
            if size != MISSING:
                args["bytes"] = size
            pg = int(trace.pg_idx[row])
            if pg >= 0:
                args["pg"] = names[pg]
        yield row, starts[i], ends[i], tracks[i], names[name_idx[i]], KIND_NAMES[kinds[i]], args


def _rank_events(ctx: AnalysisContext, rank: int, origin: float) -> list[dict]:
    """Chrome JSON events of one rank: process/thread names, then one complete (X) event per slice."""
    events: list[dict] = [{"ph": "M", "pid": rank, "name": "process_name", "args": {"name": f"rank {rank}"}},
                          {"ph": "M", "pid": rank, "name": "process_sort_index", "args": {"sort_index": rank}}]
    for t, label in enumerate(ctx.views[rank].tracks.names):
        events.append({"ph": "M", "pid": rank, "tid": t, "name": "thread_name", "args": {"name": label}})
        events.append({"ph": "M", "pid": rank, "tid": t, "name": "thread_sort_index", "args": {"sort_index": t}})
    for _, start, end, track, name, cat, args in _slices(ctx, rank, origin):
        events.append({"name": name, "cat": cat, "ph": "X", "ts": start / 1000.0, "dur": (end - start) / 1000.0,
                       "pid": rank, "tid": track, "args": args})
    return events


def _flow_pairs(ctx: AnalysisContext) -> Iterator[tuple[str, tuple[int, int], tuple[int, int]]]:
    """``(name, from (rank,row), to (rank,row))`` for every cross-rank arrow."""
    for send_rank, send_row, recv_rank, recv_row in ctx.cross.p2p:
        if send_rank in ctx.views and recv_rank in ctx.views:
            yield "send/recv", (send_rank, send_row), (recv_rank, recv_row)
    for members in ctx.cross.collectives:
        present = [m for m in members if m[0] in ctx.views and ctx.views[m[0]].sched.ran[m[1]]]
        if len(present) < 2:
            continue
        last = max(present, key=lambda m: ctx.views[m[0]].sched.start_ns[m[1]])
        trace = ctx.views[last[0]].trace
        name = comm_label(int(trace.types[last[1]]), int(trace.comm_type[last[1]]))
        for m in present:
            if m != last:
                yield name, last, m


def _flow_events(ctx: AnalysisContext, origin: float, part_of: dict[int, int]) -> tuple[dict[int, list[dict]], int, bool]:
    out: dict[int, list[dict]] = {}
    n = 0
    for name, src, dst in _flow_pairs(ctx):
        if part_of[src[0]] != part_of[dst[0]]:
            continue
        if n >= _MAX_FLOWS:
            return out, n, True
        vs, vd = ctx.views[src[0]], ctx.views[dst[0]]
        s_start = float(vs.sched.start_ns[src[1]])
        d_start, d_end = float(vd.sched.start_ns[dst[1]]), float(vd.sched.end_ns[dst[1]])
        # the arrow must land inside the target slice for Perfetto to bind it
        land = min(max(s_start, d_start), d_end)
        common = {"name": name, "cat": "dependency", "id": n}
        events = out.setdefault(part_of[src[0]], [])
        events.append({**common, "ph": "s", "ts": (s_start - origin) / 1000.0, "pid": src[0],
                       "tid": int(vs.tracks.track[src[1]])})
        events.append({**common, "ph": "f", "bp": "e", "ts": (land - origin) / 1000.0, "pid": dst[0],
                       "tid": int(vd.tracks.track[dst[1]])})
        n += 1
    return out, n, False


def _plan_parts(ctx: AnalysisContext, max_bytes: int) -> list[list[int]]:
    """Ranks per output file, by an estimate of their JSON size."""
    parts: list[list[int]] = [[]]
    used = 0
    for rank in sorted(ctx.views):
        v = ctx.views[rank]
        rows = np.flatnonzero(v.sched.ran)
        lengths = np.fromiter((len(s) for s in v.trace.strings), dtype=np.int64, count=len(v.trace.strings))
        size = len(rows) * _BYTES_PER_EVENT + int(lengths[v.trace.name_idx[rows]].sum()) if len(rows) else 200
        if parts[-1] and used + size > max_bytes:
            parts.append([])
            used = 0
        parts[-1].append(rank)
        used += size
    return parts


def _stem_ext(out: Path) -> tuple[str, str]:
    """``t.json.gz`` -> ("t", ".json.gz"); ``t.json`` -> ("t", ".json"); a name without suffix gets ``.json``."""
    name = out.name
    return (name[:-8], ".json.gz") if name.endswith(".json.gz") else (out.stem, out.suffix or ".json")


def _part_path(out: Path, index: int, count: int) -> Path:
    if count == 1:
        return out
    stem, ext = _stem_ext(out)
    return out.with_name(f"{stem}.part{index}{ext}")


def _remove_stale_outputs(out: Path, written: list[Path]) -> list[Path]:
    """Delete the files an earlier run wrote under the same output name that this run did not rewrite:
    ``out`` itself after a split run, ``out``'s ``.part<N>`` files after an unsplit one (or extra parts
    after one split into fewer). Only names this module writes are touched, and only once every new file
    is in place: a run that fails removes nothing."""
    stem, ext = _stem_ext(out)
    part = re.compile(rf"{re.escape(stem)}\.part(?:0|[1-9][0-9]*){re.escape(ext)}")
    keep = {p.name for p in written}
    candidates = [p for p in out.parent.iterdir() if part.fullmatch(p.name)]
    removed = []
    for path in sorted([*candidates, out]):
        if path.name not in keep and path.is_file():
            path.unlink()
            removed.append(path)
    return removed


PROTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")


def timeline_format(out: Path) -> str:
    """"proto" for Perfetto protobuf names (``.pftrace``, ``.perfetto-trace``, ``.pb``), "json" for ``.json``
    (either optionally ``.gz``) or a name without suffix; any other name is refused rather than filled with
    JSON it does not announce (``x.html``)."""
    name = out.name[:-3] if out.name.endswith(".gz") else out.name
    if name.endswith(PROTO_SUFFIXES):
        return "proto"
    if name.endswith(".json") or not Path(name).suffix:
        return "json"
    from ..errors import UsageError

    hint = "; for an HTML page use `etkit report`" if name.endswith((".html", ".htm")) else ""
    raise UsageError(f"{out}: a timeline is Chrome JSON (.json, .json.gz) or Perfetto protobuf "
                     f"({', '.join(PROTO_SUFFIXES)}); name the file so, or give --format{hint}")


def write_timeline(job: Job, out: str | os.PathLike[str], *, schedule: Schedule | None = None,
                   max_bytes: int = MAX_JSON_BYTES, flows: bool = True, fmt: str | None = None,
                   context: AnalysisContext | None = None, executor: Executor | None = None) -> TimelineResult:
    """Write ``job``'s timeline: Chrome JSON (split into parts past ``max_bytes``) or, with ``fmt="proto"``
    or a ``.pftrace`` name, one Perfetto protobuf trace of any size. ``executor`` runs the per-rank
    preparation (:func:`etkit.analyze.context.prepare`; default: in this process)."""
    ctx = prepare(job, schedule, context=context, executor=executor)
    out = Path(out)
    fmt = fmt or timeline_format(out)
    if fmt not in ("json", "proto"):
        from ..errors import UsageError

        raise UsageError(f"{out}: unknown timeline format {fmt!r} (json or proto)")
    result = _write_proto(ctx, out, flows) if fmt == "proto" else _write_json(ctx, out, max_bytes, flows)
    for stale in _remove_stale_outputs(out, result.paths):
        result.notes.append(f"removed {stale} (left by an earlier run under this name)")
    return result


def _write_json(ctx: AnalysisContext, out: Path, max_bytes: int, flows: bool) -> TimelineResult:
    origin = ctx.origin_ns
    parts = _plan_parts(ctx, max_bytes)
    part_of = {r: i for i, ranks in enumerate(parts) for r in ranks}
    flow_events, n_flows, capped = _flow_events(ctx, origin, part_of) if flows else ({}, 0, False)
    result = TimelineResult([], 0, n_flows, [f"times from: {ctx.source_text}"])
    if capped:
        result.notes.append(f"flow arrows capped at {_MAX_FLOWS}")
    if len(parts) > 1:
        result.notes.append(f"split into {len(parts)} files of whole ranks (over {max_bytes} bytes as one; "
                            "a .pftrace name writes one Perfetto protobuf file instead)")
    other = orjson.dumps({"source": ctx.source_text, "prefix": ctx.job.prefix, "ranks": len(ctx.views)})
    for i, ranks in enumerate(parts):
        path = _part_path(out, i, len(parts))
        with atomic_output(path) as f:
            f.write(b'{"displayTimeUnit":"ns","otherData":' + other + b',"traceEvents":[')
            first = True
            for rank in ranks:
                events = _rank_events(ctx, rank, origin)
                result.events += sum(1 for e in events if e["ph"] == "X")
                chunk = b",".join(orjson.dumps(e) for e in events)
                f.write(chunk if first else b"," + chunk)
                first = False
            for e in flow_events.get(i, []):
                f.write(b"," + orjson.dumps(e) if not first else orjson.dumps(e))
                first = False
            f.write(b"]}\n")
        result.paths.append(path)
    return result


def _track_stream(uuid: int, items: list[tuple]) -> Iterator[tuple]:
    """Begin/end events of one track in time order: ``(ts, track, n, uuid, (row, ts, name, cat, args) | None)``.

    Parents come before the slices they hold; an end at the same time as a begin comes first.
    """
    items.sort(key=lambda it: (it[1], -(it[2] - it[1])))
    open_ends: list[int] = []  # end times of open slices, innermost last
    n = 0
    for row, start, end, _, name, cat, args in items:
        begin_ns, end_ns = round(start), round(end)
        while open_ends and open_ends[-1] <= begin_ns:
            n += 1
            yield open_ends.pop(), uuid, n, uuid, None
        n += 1
        yield begin_ns, uuid, n, uuid, (row, begin_ns, name, cat, args)
        open_ends.append(min(end_ns, open_ends[-1]) if open_ends else end_ns)
    while open_ends:
        n += 1
        yield open_ends.pop(), uuid, n, uuid, None


def _write_proto(ctx: AnalysisContext, out: Path, flows: bool) -> TimelineResult:
    """One Perfetto protobuf file: per rank a process track, per track a thread track, begin/end events."""
    from .perfetto import PacketWriter

    origin = ctx.origin_ns
    flows_out: dict[tuple[int, int], list[int]] = {}
    flows_in: dict[tuple[int, int], list[int]] = {}
    n_flows = 0
    if flows:
        for n_flows, (_, src, dst) in enumerate(_flow_pairs(ctx), start=1):
            flows_out.setdefault(src, []).append(n_flows)
            flows_in.setdefault(dst, []).append(n_flows)
    result = TimelineResult([out], 0, n_flows, [f"times from: {ctx.source_text}"])
    with atomic_output(out) as f:
        writer = PacketWriter(f)
        for rank in sorted(ctx.views):
            process = (rank + 1) << 24
            writer.sequence = rank + 1
            writer.process(process, rank, f"rank {rank}")
            names = ctx.views[rank].tracks.names
            for t, label in enumerate(names):
                writer.thread(process + t + 1, process, rank, t + 1, label)
            by_track: dict[int, list[tuple]] = {}
            for item in _slices(ctx, rank, origin):
                by_track.setdefault(item[3], []).append(item)
            streams = [_track_stream(process + t + 1, items) for t, items in sorted(by_track.items())]
            for ts, _, _, uuid, item in heapq.merge(*streams):  # one time-ordered sequence per rank
                if item is None:
                    writer.end(ts, uuid)
                    continue
                row, begin_ns, name, cat, args = item
                writer.begin(begin_ns, uuid, name, cat, args, flows_out.get((rank, row), ()),
                             flows_in.get((rank, row), ()))
                result.events += 1
    return result
