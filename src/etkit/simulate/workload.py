"""Workload layer: turns each rank's columnar :class:`~etkit.model.trace.Trace` into a
:class:`Program` the engine walks (node kinds, durations in ns, dependency counts, children, resolved
communication fields), vectorised with numpy; and groups ranks whose programs are identical into
:class:`RankClass` es so that the engine simulates each distinct graph once (rank symmetry).

Node handling follows ASTRA-sim: COMP nodes replay ``duration_micros`` x 1000 ns (0 counts as 1 ns)
unless the roofline is on and the node is not a CPU op (then ``max(num_ops / peak, tensor_size /
local_mem_bw)``); METADATA and INVALID nodes complete at once; MEM nodes take ``tensor_size /
local_mem_bw``. Unlike ASTRA-sim, every comm type is simulated, METADATA never trips anything, and
SEND/RECV without ``comm_src``/``comm_tag`` match with wildcards.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from ..format.schema import NodeType
from ..generate.devices import Device
from ..model.job import Job
from ..model.trace import MISSING, Trace
from .config import Knobs, SystemConfig

__all__ = ["Program", "RankClass", "Problem", "build_program", "rank_classes",
           "K_INSTANT", "K_CPU", "K_GPU", "K_COLL", "K_SEND", "K_RECV", "K_MEM", "RESOURCE_OF_KIND", "KIND_NAMES"]

K_INSTANT, K_CPU, K_GPU, K_COLL, K_SEND, K_RECV, K_MEM = range(7)
KIND_NAMES = ("instant", "cpu", "compute", "collective", "send", "recv", "memory")
#: Resource a node kind holds while it runs: 0 CPU, 1 GPU compute, 2 GPU comm, -1 none (RECV is exempt).
RESOURCE_OF_KIND = (-1, 0, 1, 2, 2, -1, -1)
#: Schedule resource code per kind (etkit.model.schedule: 0 cpu, 1 compute, 2 comm, 3 memory).
SCHEDULE_RESOURCE = np.asarray([0, 0, 1, 2, 2, 2, 3], dtype=np.int8)


@dataclass(frozen=True)
class Problem:
    """Something in a trace that stops the simulation before it starts (reported, never raised as a crash)."""

    rank: int
    node_id: int
    name: str
    message: str


@dataclass
class Program:
    """One rank's graph in engine form (plain lists: the event loop indexes them one element at a time)."""

    trace: Trace
    kind: list[int]
    duration: list[float]
    ids: list[int]
    child_ptr: list[int]
    child_idx: list[int]
    indegree: list[int]
    pg: list[str | None]
    comm_type: list[int]
    comm_size: list[float]
    comm_peer: list[int]  # SEND: destination, RECV: source (-1 = any)
    comm_tag: list[int]  # -1 = any
    problems: list[Problem] = field(default_factory=list)
    release_ns: float = 0.0  # when the rank's first nodes may start (its recorded start, measured traces)

    def __len__(self) -> int:
        return len(self.kind)


@dataclass
class RankClass:
    """Ranks that run the same program (simulated once)."""

    program: Program
    ranks: tuple[int, ...]

    @property
    def rank(self) -> int:
        return self.ranks[0]


def _kinds(trace: Trace) -> np.ndarray:
    t = trace.types
    kind = np.full(len(trace), K_INSTANT, dtype=np.int64)
    comp = t == NodeType.COMP_NODE
    kind[comp & (trace.is_cpu_op == 1)] = K_CPU
    kind[comp & (trace.is_cpu_op != 1)] = K_GPU
    kind[t == NodeType.COMM_COLL_NODE] = K_COLL
    kind[t == NodeType.COMM_SEND_NODE] = K_SEND
    kind[t == NodeType.COMM_RECV_NODE] = K_RECV
    kind[(t == NodeType.MEM_LOAD_NODE) | (t == NodeType.MEM_STORE_NODE)] = K_MEM
    return kind


def _roofline_ns(ops: np.ndarray, nbytes: np.ndarray, peak_tflops: float, mem_gbps: float) -> np.ndarray:
    return np.maximum(ops / (peak_tflops * 1e3), nbytes / mem_gbps)


def compute_durations(trace: Trace, kind: np.ndarray, system: SystemConfig, knobs: Knobs, rank: int) -> np.ndarray:
    """Duration in ns of every node (0 for comm nodes, whose time the system layer decides)."""
    dur = np.maximum(trace.duration.astype(np.float64) * 1000.0, 1.0)
    ops = np.where(trace.num_ops == MISSING, 0, trace.num_ops).astype(np.float64)
    nbytes = np.where(trace.tensor_size == MISSING, 0, trace.tensor_size).astype(np.float64)
    gpu = kind == K_GPU
    has_roofline = gpu & (ops > 0) & (nbytes > 0)
    if system.roofline_enabled:
        dur = np.where(has_roofline, np.maximum(_roofline_ns(ops, nbytes, system.peak_perf_tflops, system.local_mem_bw_gbps), 1.0), dur)
    elif knobs.device is not None and knobs.trace_device is not None:
        dur = np.where(gpu, dur * _device_ratio(ops, nbytes, knobs.trace_device, knobs.device), dur)
    compute = (kind == K_GPU) | (kind == K_CPU)
    factor = knobs.scale_compute * knobs.stragglers.get(rank, 1.0)
    dur = np.where(compute, dur * factor, dur)
    dur = np.where(kind == K_MEM, np.maximum(nbytes / system.local_mem_bw_gbps, 1.0), dur)
    dur[(kind == K_INSTANT) | (kind == K_COLL) | (kind == K_SEND) | (kind == K_RECV)] = 0.0
    return dur


def _device_ratio(ops: np.ndarray, nbytes: np.ndarray, old: Device, new: Device) -> np.ndarray:
    """How much longer each node takes on ``new`` than on ``old`` (roofline ratio, peak ratio without counts)."""
    known = (ops > 0) & (nbytes > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = _roofline_ns(ops, nbytes, new.peak_tflops, new.memory_gbps) / _roofline_ns(ops, nbytes, old.peak_tflops, old.memory_gbps)
    return np.where(known, ratio, old.peak_tflops / new.peak_tflops)


def _dependency_rows(trace: Trace, deps: str, rank: int, problems: list[Problem]) -> tuple[np.ndarray, np.ndarray]:
    """(parent row, child row) of every dependency edge; a missing parent becomes a :class:`Problem`."""
    kinds = ("data", "ctrl") if deps == "both" else ("data",)
    parents, children = [], []
    for k in kinds:
        ptr, ids = (trace.data_ptr, trace.data_deps) if k == "data" else (trace.ctrl_ptr, trace.ctrl_deps)
        if not len(ids):
            continue
        prow = trace.rows_of(ids)
        crow = trace.edge_sources(k)
        for i in np.flatnonzero(prow < 0)[:20]:
            c = int(crow[i])
            problems.append(Problem(rank, int(trace.ids[c]), trace.name(c),
                                    f"{k} dependency on node {int(ids[i])}, which is not in the trace"))
        keep = prow >= 0
        parents.append(prow[keep])
        children.append(crow[keep])
    if not parents:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    edges = np.unique(np.stack([np.concatenate(parents), np.concatenate(children)], axis=1), axis=0)
    return edges[:, 0], edges[:, 1]


def strip_waits(trace: Trace, kind: np.ndarray, dur: np.ndarray, parent: np.ndarray, child: np.ndarray) -> np.ndarray:
    """Durations without the time ops spent blocked on a communication they depend on.

    In a measured trace, the op that waits for a collective (or a message) records the blocking in its
    own duration; the simulator models that wait itself, so replaying it too would count it twice. For
    every non-comm op that depends on a comm node, the part of its recorded interval before the comm
    node's recorded end is removed (traces without timestamps are left as they are).
    """
    if not (trace.start > 0).any():
        return dur
    comm = (kind == K_COLL) | (kind == K_SEND) | (kind == K_RECV)
    edges = comm[parent] & ~comm[child] & (trace.start[child] > 0) & (trace.start[parent] > 0)
    if not edges.any():
        return dur
    start_us = trace.start.astype(np.float64)
    comm_end = np.zeros(len(trace))
    np.maximum.at(comm_end, child[edges], start_us[parent[edges]] + trace.duration[parent[edges]].astype(np.float64))
    waited = np.clip(comm_end - start_us, 0.0, trace.duration.astype(np.float64)) * 1000.0
    waiting = comm_end > 0
    out = dur.copy()
    out[waiting] = np.maximum(dur[waiting] - waited[waiting], 1.0)
    return out


def thread_ids(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The ``tid`` attribute (PyTorch converters write it) of ``rows``; -1 where absent."""
    from ..format.attrs import get_int

    return np.asarray([get_int(trace.node(int(r)).attr, "tid", -1) for r in rows], dtype=np.int64)


def measured_gaps(trace: Trace, kind: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Durations (and extra edges) that keep each thread's measured timeline.

    A CPU op lasts until the next op or comm call of its thread starts, so the time between ops
    (interpreter work no op records, which a parent annotation such as ``ProfilerStep#N`` would
    otherwise hold as one block) stays where it happened. When the op after a comm call started only
    once the communication had ended, the thread was blocked in it: that op gets a dependency on the
    comm node, so the simulated wait replaces the measured one. Only for traces with timestamps and
    thread ids (PyTorch conversions); returns (durations, extra parent rows, extra child rows).
    """
    none = np.empty(0, np.int64)
    comm = (kind == K_COLL) | (kind == K_SEND) | (kind == K_RECV)
    rows = np.flatnonzero(((kind == K_CPU) | comm) & (trace.start > 0))
    if len(rows) < 2:
        return dur, none, none
    tids = thread_ids(trace, rows)
    if (tids < 0).all():
        return dur, none, none
    # Only the main thread (most CPU time): other threads idle between their ops, it does not.
    cpu_rows = kind[rows] == K_CPU
    busiest = np.unique(tids[cpu_rows], return_inverse=True)
    main = busiest[0][np.argmax(np.bincount(busiest[1], weights=dur[rows][cpu_rows]))]
    keep = tids == main
    rows, tids = rows[keep], tids[keep]
    start = trace.start[rows].astype(np.float64)
    order = np.lexsort((trace.ids[rows], start, tids))
    r, t, st = rows[order], tids[order], start[order]
    same = t[1:] == t[:-1]
    cur, nxt = r[:-1][same], r[1:][same]
    gap = (st[1:] - st[:-1])[same]
    out = dur.copy()
    cpu = kind[cur] == K_CPU
    out[cur[cpu]] = np.maximum(gap[cpu] * 1000.0, 1.0)
    end = trace.start.astype(np.float64) + trace.duration.astype(np.float64)
    blocked = comm[cur] & (kind[nxt] == K_CPU) & (trace.start[nxt] >= end[cur])
    # the thread's time from the end of the communication to its next op (returning from the call) stays
    out[nxt[blocked]] += (trace.start[nxt[blocked]] - end[cur[blocked]]) * 1000.0
    return out, cur[blocked], nxt[blocked]


def build_program(trace: Trace, rank: int, system: SystemConfig, knobs: Knobs) -> Program:
    """Engine form of one rank's trace."""
    problems: list[Problem] = []
    n = len(trace)
    kind = _kinds(trace)
    dur = compute_durations(trace, kind, system, knobs, rank)
    parent, child = _dependency_rows(trace, knobs.deps, rank, problems)
    if knobs.measured_gaps and not system.roofline_enabled:
        dur, extra_parent, extra_child = measured_gaps(trace, kind, dur)
        if len(extra_parent):
            edges = np.unique(np.stack([np.concatenate([parent, extra_parent]), np.concatenate([child, extra_child])], axis=1), axis=0)
            parent, child = edges[:, 0], edges[:, 1]
    if knobs.strip_waits:
        dur = strip_waits(trace, kind, dur, parent, child)
    order = np.argsort(parent, kind="stable")
    child_ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(child_ptr, parent + 1, 1)
    child_ptr = np.cumsum(child_ptr)
    indegree = np.bincount(child, minlength=n) if len(child) else np.zeros(n, np.int64)
    size = np.where(trace.comm_size == MISSING, 0, trace.comm_size).astype(np.float64)
    is_send, is_recv = kind == K_SEND, kind == K_RECV
    peer = np.where(is_send, trace.comm_dst, np.where(is_recv, trace.comm_src, MISSING))
    own = np.where(is_send, trace.comm_src, np.where(is_recv, trace.comm_dst, MISSING))
    for row in np.flatnonzero((is_send | is_recv) & (own != MISSING) & (own != rank))[:20]:
        r = int(row)
        problems.append(Problem(rank, int(trace.ids[r]), trace.name(r),
                                f"{'comm_src' if kind[r] == K_SEND else 'comm_dst'} is {int(own[r])}, not this rank ({rank})"))
    for row in np.flatnonzero(is_send & (peer == MISSING))[:20]:
        r = int(row)
        problems.append(Problem(rank, int(trace.ids[r]), trace.name(r), "SEND without comm_dst: no destination to send to"))
    peer = np.where(peer == MISSING, -1, peer)
    tag = np.where(trace.comm_tag == MISSING, -1, trace.comm_tag)
    comm_type = np.where(trace.comm_type == MISSING, -1, trace.comm_type)
    pg_table = trace.strings
    pg = [None if i < 0 else pg_table[i] for i in trace.pg_idx.tolist()] if (trace.pg_idx >= 0).any() else [None] * n
    return Program(trace, kind.tolist(), dur.tolist(), trace.ids.tolist(), child_ptr.tolist(), child[order].tolist(),
                   indegree.tolist(), pg, comm_type.tolist(), size.tolist(), peer.tolist(), tag.tolist(), problems)


_SIGNATURE_COLUMNS = ("types", "duration", "data_ptr", "ctrl_ptr", "is_cpu_op", "comm_type", "comm_size",
                      "comm_src", "comm_dst", "comm_tag", "num_ops", "tensor_size", "pg_idx")


def _signature(trace: Trace) -> bytes:
    """Digest of everything the simulation reads from a trace, up to a relabelling of node ids
    (generators number nodes with one counter across ranks, so equal graphs carry different ids)."""
    digest = hashlib.blake2b(digest_size=16)
    for name in _SIGNATURE_COLUMNS:
        digest.update(np.ascontiguousarray(getattr(trace, name)).tobytes())
    digest.update(np.argsort(trace.ids, kind="stable").tobytes())
    digest.update(trace.rows_of(trace.data_deps).tobytes())
    digest.update(trace.rows_of(trace.ctrl_deps).tobytes())
    digest.update(repr([trace.strings[i] for i in np.unique(trace.pg_idx) if i >= 0]).encode())
    return digest.digest()


def recorded_starts(job: Job) -> dict[int, float]:
    """Each rank's recorded start (its first timestamp) in ns after the earliest rank's; empty when a
    rank has no timestamps or the offsets cannot come from one clock (spread over half the shortest
    rank's recorded span: traces from hosts whose clocks disagree)."""
    first, span = {}, []
    for rank, trace in job.traces.items():
        timed = trace.start[trace.start > 0]
        if not len(timed):
            return {}
        first[rank] = float(timed.min())
        span.append(float((trace.start + trace.duration)[trace.start > 0].max()) - first[rank])
    base = min(first.values())
    offsets = {r: (t - base) * 1000.0 for r, t in first.items()}
    if max(offsets.values()) > 0.5 * min(span) * 1000.0:
        return {}
    return offsets


def rank_classes(job: Job, system: SystemConfig, knobs: Knobs) -> list[RankClass]:
    """One :class:`RankClass` per distinct program.

    Ranks share a class when their traces are identical up to node ids and nothing makes them differ
    in the simulation: no point-to-point nodes (the engine matches messages by rank, and a class is
    walked as its first rank, so peers of merged ranks would be wrong), no straggler factor and the
    same recorded start (``Knobs.measured_start``).
    """
    starts = recorded_starts(job) if knobs.measured_start else {}
    by_signature: dict[tuple, list[int]] = {}
    singles: list[int] = []
    for rank, trace in sorted(job.traces.items()):
        p2p = bool(np.isin(trace.types, (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)).any())
        if p2p or rank in knobs.stragglers or not knobs.symmetry:
            singles.append(rank)
        else:
            by_signature.setdefault((_signature(trace), starts.get(rank, 0.0)), []).append(rank)
    groups = [tuple(r) for r in by_signature.values()] + [(r,) for r in singles]
    groups.sort()
    classes = []
    for g in groups:
        program = build_program(job.traces[g[0]], g[0], system, knobs)
        program.release_ns = starts.get(g[0], 0.0)
        classes.append(RankClass(program, g))
    return classes
