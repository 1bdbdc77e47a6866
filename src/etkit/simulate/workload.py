"""Workload layer: turns each rank's columnar :class:`~etkit.model.trace.Trace` into a
:class:`Program` the engine walks (node kinds, durations in ns, dependency counts, children, resolved
communication fields) in compact arrays, vectorised with numpy; and groups ranks that simulate alike
(equal graphs whose groups and peers correspond: :func:`symmetric_classes`) into :class:`RankClass` es
so that the engine simulates each once (rank symmetry, pipeline stages of every replica included).

Node handling follows ASTRA-sim: COMP nodes replay ``duration_micros`` x 1000 ns (0 counts as 1 ns)
unless the roofline is on and the node is not a CPU op (then ``max(num_ops / peak, tensor_size /
local_mem_bw)``); METADATA and INVALID nodes complete at once; MEM nodes take ``tensor_size /
local_mem_bw``. Unlike ASTRA-sim, every comm type is simulated, METADATA never trips anything, and
SEND/RECV without ``comm_src``/``comm_tag`` match with wildcards.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Mapping
from dataclasses import field

import numpy as np

from ..arrays import distinct
from ..format.schema import NodeType
from ..model.devices import Device
from ..model.edges import edges
from ..model.groups import ProcessGroups
from ..model.job import Job
from ..model.kinds import Resource
from ..model.trace import MISSING, Trace
from ..records import record
from .config import Knobs, NetworkConfig, SystemConfig
from .system import ring_order

__all__ = ["Program", "RankClass", "Problem", "build_program", "rank_classes",
           "K_INSTANT", "K_CPU", "K_GPU", "K_COLL", "K_SEND", "K_RECV", "K_MEM", "RESOURCE_OF_KIND", "PROGRAM_KIND_NAMES"]

#: The engine's node kinds (a :class:`Program` column): finer than :class:`etkit.model.kinds.NodeKind`, as
#: the engine walks each differently.
K_INSTANT, K_CPU, K_GPU, K_COLL, K_SEND, K_RECV, K_MEM = range(7)
PROGRAM_KIND_NAMES = ("instant", "cpu", "compute", "collective", "send", "recv", "memory")
#: :class:`~etkit.model.kinds.Resource` a node kind holds while it runs in the engine (its CPU, GPU compute and
#: GPU comm slots), -1 none (instant and memory nodes; a RECV is exempt).
RESOURCE_OF_KIND = (-1, int(Resource.CPU), int(Resource.COMPUTE), int(Resource.COMM), int(Resource.COMM), -1, -1)
#: :class:`~etkit.model.kinds.Resource` per kind in a simulated schedule (memory nodes included).
SCHEDULE_RESOURCE = np.asarray([Resource.CPU, Resource.CPU, Resource.COMPUTE, Resource.COMM, Resource.COMM,
                                Resource.COMM, Resource.MEMORY], dtype=np.int8)


@record(frozen=True)
class Problem:
    """Something in a trace that stops the simulation before it starts (reported, never raised as a crash)."""

    rank: int
    node_id: int
    name: str
    message: str


@record
class Program:
    """One rank's graph in engine form.

    Columns are :class:`array.array` s: the event loop indexes them one element at a time (as fast as a
    list, but 1-8 bytes per node instead of a Python object), and numpy reads them without a copy.
    81 bytes per node plus 8 per dependency; no record bytes, no reference to the trace.
    """

    kind: array  # 'b'
    duration: array  # 'd', ns
    ids: array  # 'Q'
    child_ptr: array  # 'q', CSR over child_idx
    child_idx: array  # 'q'
    indegree: array  # 'q'
    name_idx: array  # 'i', into strings
    pg_idx: array  # 'i', into strings (-1 = no pg_name)
    strings: list[str]
    comm_type: array  # 'q'
    comm_size: array  # 'd'
    comm_peer: array  # 'q', SEND: destination, RECV: source (-1 = any)
    comm_tag: array  # 'q', -1 = any
    problems: list[Problem] = field(default_factory=list)
    release_ns: float = 0.0  # when the rank's first nodes may start (its recorded start, measured traces)

    def __len__(self) -> int:
        return len(self.kind)

    def name(self, row: int) -> str:
        return self.strings[self.name_idx[row]]

    def pg(self, row: int) -> str | None:
        """``pg_name`` of ``row`` (None = absent)."""
        i = self.pg_idx[row]
        return None if i < 0 else self.strings[i]


@record
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


def roofline_ns(ops: np.ndarray, nbytes: np.ndarray, peak_tflops: float, mem_gbps: float) -> np.ndarray:
    """ASTRA-sim's roofline time, whole ns: ``num_ops / min(local-mem-bw * num_ops / tensor_size, peak-perf)``
    (the same floating-point operations as ``Workload::issue_comp``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        perf = np.minimum(mem_gbps * 1e9 * (ops / nbytes), peak_tflops * 1e12)
        return np.trunc(ops / perf * 1e9)


def compute_durations(trace: Trace, kind: np.ndarray, system: SystemConfig, knobs: Knobs, rank: int) -> np.ndarray:
    """Duration in ns of every node (0 for comm nodes, whose time the system layer decides).

    As in ASTRA-sim: a replayed node lasts ``duration_micros`` x 1000 ns (0 counts as 1 ns); with the
    roofline on, a GPU node with ``num_ops`` and a ``tensor_size`` lasts its roofline time (a
    ``tensor_size`` of 0 makes it an instant node, see :func:`build_program`); without ``num_ops`` it
    is replayed (ASTRA-sim stops there)."""
    dur = np.maximum(trace.duration.astype(np.float64) * 1000.0, 1.0)
    ops = np.where(trace.num_ops == MISSING, 0, trace.num_ops).astype(np.float64)
    nbytes = np.where(trace.tensor_size == MISSING, 0, trace.tensor_size).astype(np.float64)
    gpu = kind == K_GPU
    has_roofline = gpu & (ops > 0) & (nbytes > 0)
    if system.roofline_enabled:
        dur = np.where(has_roofline, roofline_ns(ops, nbytes, system.peak_perf_tflops, system.local_mem_bw_gbps), dur)
    elif knobs.device is not None and knobs.trace_device is not None:
        dur = np.where(gpu, dur * _device_ratio(ops, nbytes, knobs.trace_device, knobs.device), dur)
    compute = (kind == K_GPU) | (kind == K_CPU)
    dur = np.where(compute, dur * knobs.compute_factor(rank), dur)
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
    keys, n = [], max(len(trace), 1)
    for k in kinds:
        found = edges(trace, k)
        if not len(found):
            continue
        for i in np.flatnonzero(found.parent < 0)[:20]:
            c = int(found.child[i])
            problems.append(Problem(rank, int(trace.ids[c]), trace.name(c),
                                    f"{k} dependency on node {int(found.ids[i])}, which is not in the trace"))
        found = found.resolved(self_loops=True)
        keys.append(found.parent * n + found.child)  # one int64 per edge: compact, and sorts as (parent, child)
        del found
    key = distinct(np.concatenate(keys)) if keys else np.empty(0, np.int64)
    return key // n, key % n


def _unique_edges(parent: np.ndarray, child: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (parent, child) row pairs sorted by parent then child."""
    key = distinct(parent.astype(np.int64) * max(n, 1) + child)
    return key // max(n, 1), key % max(n, 1)


def strip_waits(trace: Trace, kind: np.ndarray, dur: np.ndarray, parent: np.ndarray, child: np.ndarray,
                factor: float = 1.0) -> np.ndarray:
    """Durations without the time ops spent blocked on a communication they depend on.

    In a measured trace, the op that waits for a collective (or a message) records the blocking in its
    own duration; the simulator models that wait itself, so replaying it too would count it twice. For
    every non-comm op that depends on a comm node, the part of its recorded interval before the comm
    node's recorded end is removed (traces without timestamps are left as they are); ``factor`` is the
    compute factor ``dur`` was scaled by (:meth:`Knobs.compute_factor`): the removed part is scaled alike.
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
    waited = np.clip(comm_end - start_us, 0.0, trace.duration.astype(np.float64)) * 1000.0 * factor
    waiting = comm_end > 0
    out = dur.copy()
    out[waiting] = np.maximum(dur[waiting] - waited[waiting], 1.0)
    return out


def thread_ids(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The ``tid`` attribute (PyTorch converters write it) of ``rows``; -1 where absent."""
    tid = trace.tid[rows]
    return np.where(tid == MISSING, -1, tid).astype(np.int64)


def measured_gaps(trace: Trace, kind: np.ndarray, dur: np.ndarray,
                  factor: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Durations (and extra edges) that keep each thread's measured timeline.

    A CPU op lasts until the next op or comm call of its thread starts, so the time between ops
    (interpreter work no op records, which a parent annotation such as ``ProfilerStep#N`` would
    otherwise hold as one block) stays where it happened. When the op after a comm call started only
    once the communication had ended, the thread was blocked in it: that op gets a dependency on the
    comm node, so the simulated wait replaces the measured one. When it started earlier, the call
    returned while its communication went on, and the thread's time in the call (from its start to
    the next op) is added to that op, unless that op consumes a communication's result (it waited).
    The thread's measured times are multiplied by ``factor`` (:meth:`Knobs.compute_factor`: a slower host
    or a straggler runs the interpreter slower too). Only for traces with timestamps and thread ids
    (PyTorch conversions); returns (durations, extra parent rows, extra child rows).
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
    if not cpu_rows.any():  # no CPU op: no main thread to keep the timeline of
        return dur, none, none
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
    out[cur[cpu]] = np.maximum(gap[cpu] * 1000.0 * factor, 1.0)
    end = trace.start.astype(np.float64) + trace.duration.astype(np.float64)
    blocked = comm[cur] & (kind[nxt] == K_CPU) & (trace.start[nxt] >= end[cur])
    # the thread's time from the end of the communication to its next op (returning from the call) stays
    out[nxt[blocked]] += (trace.start[nxt[blocked]] - end[cur[blocked]]) * 1000.0 * factor
    # a call that returned while its communication went on (an async collective, an isend) held the thread
    # from its start until the next op: that time stays on the thread too (a loaded host may keep it for ms);
    # not when the next op consumes a communication's result (the thread waited for it; a backend may
    # close its record late, after the waiting thread went on)
    issued = comm[cur] & (kind[nxt] == K_CPU) & (trace.start[nxt] < end[cur])
    if issued.any():
        data = edges(trace, "data").resolved(self_loops=True)
        waits = np.zeros(len(trace), dtype=bool)
        waits[data.child[comm[data.parent]]] = True
        issued &= ~waits[nxt]
    out[nxt[issued]] += (trace.start[nxt[issued]] - trace.start[cur[issued]]) * 1000.0 * factor
    return out, cur[blocked], nxt[blocked]


def _without_issue_order(trace: Trace, kind: np.ndarray, parent: np.ndarray,
                         child: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The edges without those from a collective to the next collective of its group: the issue order
    (PyTorch conversions chain a group's calls), which the engine keeps by issuing comm ops smallest id
    first, for a backend that runs a group's calls side by side (``etkit-comm-slots-per-group`` > 1)."""
    coll = kind == K_COLL
    order = coll[parent] & coll[child] & (trace.pg_idx[parent] == trace.pg_idx[child])
    return (parent[~order], child[~order]) if order.any() else (parent, child)


def build_program(trace: Trace, rank: int, system: SystemConfig, knobs: Knobs) -> Program:
    """Engine form of one rank's trace."""
    problems: list[Problem] = []
    n = len(trace)
    kind = _kinds(trace)
    if system.roofline_enabled:  # ASTRA-sim skips a roofline node without bytes (it finishes at once)
        kind[(kind == K_GPU) & (trace.tensor_size == 0) & (trace.num_ops != MISSING)] = K_INSTANT
    dur = compute_durations(trace, kind, system, knobs, rank)
    parent, child = _dependency_rows(trace, knobs.deps, rank, problems)
    if system.concurrent_group_calls():
        parent, child = _without_issue_order(trace, kind, parent, child)
    if knobs.measured_gaps and not system.roofline_enabled:
        dur, extra_parent, extra_child = measured_gaps(trace, kind, dur, knobs.compute_factor(rank))
        if len(extra_parent):
            parent, child = _unique_edges(np.concatenate([parent, extra_parent]), np.concatenate([child, extra_child]), n)
    if knobs.strip_waits:
        dur = strip_waits(trace, kind, dur, parent, child, knobs.compute_factor(rank))
    duration = _array("d", dur)
    del dur
    # edges come sorted by parent, then child: the CSR is a count per parent; numpy copies go as soon as
    # each column is an array (this is the peak of a large rank's memory)
    child_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(parent, minlength=n), out=child_ptr[1:])
    links = (_array("q", child_ptr), _array("q", child), _array("q", np.bincount(child, minlength=n)))
    del parent, child, child_ptr
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
    peers = _array("q", np.where(peer == MISSING, -1, peer))
    del own, is_send, is_recv, peer
    return Program(_array("b", kind), duration, _array("Q", trace.ids), *links, _array("i", trace.name_idx),
                   _array("i", trace.pg_idx), trace.strings, _array("q", np.where(trace.comm_type == MISSING, -1, trace.comm_type)),
                   _array("d", np.where(trace.comm_size == MISSING, 0, trace.comm_size)), peers,
                   _array("q", np.where(trace.comm_tag == MISSING, -1, trace.comm_tag)), problems)


def _array(code: str, values: np.ndarray) -> array:
    """``values`` as an :class:`array.array` of ``code`` (through numpy's buffer, no Python object per element)."""
    out = array(code)
    out.frombytes(memoryview(np.ascontiguousarray(values, dtype=np.dtype(code))).cast("B"))  # type: ignore[arg-type]
    return out


_SIGNATURE_COLUMNS = ("types", "duration", "data_ptr", "ctrl_ptr", "is_cpu_op", "comm_type", "comm_size",
                      "comm_tag", "num_ops", "tensor_size", "tid")
_ANY_PEER, _SELF = -1, -2


@record(frozen=True)
class RankShape:
    """What decides whether two ranks simulate alike, taken from one rank's trace (kept after it is dropped).

    ``signature`` digests everything the simulation reads up to a relabelling of node ids (generators
    number nodes with one counter across ranks), of process-group names and of point-to-point peers:
    groups appear as their order of first use (``pg_names`` holds the names in that order), peers as
    their order of first appearance (``peers`` holds the ranks; the rank itself and "any" stay as they are).
    """

    rank: int
    nodes: int
    signature: bytes
    pg_names: tuple[str | None, ...]
    peers: tuple[int, ...]
    odd_p2p: bool  # a SEND/RECV whose own end is another rank (a Problem): never merged
    recorded: tuple[float, float] | None  # (first timestamp, recorded span) in us; None without timestamps


def _canonical_peers(values: np.ndarray, rank: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """``values`` (comm_src/comm_dst of SEND/RECV rows) with other ranks replaced by their order of first appearance."""
    out = np.where(values == rank, _SELF, np.where(values == MISSING, _ANY_PEER - 2, values))
    other = (values != rank) & (values != MISSING) & (values >= 0)
    uniq, first = np.unique(values[other], return_index=True)
    order = np.argsort(first, kind="stable")
    position = np.empty(len(uniq), dtype=np.int64)
    position[order] = np.arange(len(uniq))
    out[other] = position[np.searchsorted(uniq, values[other])]
    return out, tuple(int(v) for v in uniq[order])


def _update(digest: hashlib._Hash, values: np.ndarray) -> None:
    """Hash the bytes of ``values`` through the array's buffer (no copy of a contiguous one)."""
    digest.update(np.ascontiguousarray(values))  # type: ignore[arg-type]


def rank_shape(trace: Trace, rank: int) -> RankShape:
    """The :class:`RankShape` of ``rank``'s trace."""
    digest = hashlib.sha256()  # (compared for equality only; SHA-256 runs on the CPU's SHA extensions: 2.4x blake2b)
    for name in _SIGNATURE_COLUMNS:  # (hashed through their buffers: no copy of a contiguous column)
        _update(digest, getattr(trace, name))
    timed = trace.start > 0
    any_timed = bool(timed.any())
    first = int(trace.start[timed].min()) if any_timed else 0
    _update(digest, np.where(timed, trace.start - np.uint64(first), 0))  # programs read time differences only
    src, dst = trace.comm_src, trace.comm_dst
    p2p = np.flatnonzero((trace.types == NodeType.COMM_SEND_NODE) | (trace.types == NodeType.COMM_RECV_NODE))
    peers: tuple[int, ...] = ()
    odd_p2p = False
    if p2p.size:
        src, dst = src.copy(), dst.copy()
        canon, peers = _canonical_peers(np.concatenate([src[p2p], dst[p2p]]), rank)
        src[p2p], dst[p2p] = canon[:len(p2p)], canon[len(p2p):]
        own = np.where(trace.types[p2p] == NodeType.COMM_SEND_NODE, trace.comm_src[p2p], trace.comm_dst[p2p])
        odd_p2p = bool(((own != rank) & (own != MISSING)).any())
    _update(digest, src)
    _update(digest, dst)
    used, first_use = np.unique(trace.pg_idx, return_index=True)
    used = used[np.argsort(first_use, kind="stable")]
    canon_pg = np.full(len(trace.strings) + 1, -1, dtype=np.int64)
    canon_pg[used] = np.arange(len(used))  # (-1, no pg_name, indexes the extra last entry)
    _update(digest, canon_pg[trace.pg_idx])
    _update(digest, np.argsort(trace.ids, kind="stable"))
    _update(digest, trace.rows_of(trace.data_deps))
    _update(digest, trace.rows_of(trace.ctrl_deps))
    recorded = None
    if any_timed:
        recorded = (float(first), float((trace.start + trace.duration)[timed].max()) - first)
    return RankShape(rank, len(trace), digest.digest()[:16], tuple(None if i < 0 else trace.strings[i] for i in used.tolist()),
                     peers, odd_p2p, recorded)


def recorded_starts(job: Job) -> dict[int, float]:
    """Each rank's recorded start (its first timestamp) in ns after the earliest rank's; empty when a
    rank has no timestamps or the offsets cannot come from one clock (spread over half the shortest
    rank's recorded span: traces from hosts whose clocks disagree)."""
    return starts_of({rank: rank_shape(trace, rank) for rank, trace in job.traces.items()})


def starts_of(shapes: Mapping[int, RankShape]) -> dict[int, float]:
    """:func:`recorded_starts` from the ranks' shapes."""
    if not shapes or any(s.recorded is None for s in shapes.values()):
        return {}
    recorded = {r: s.recorded for r, s in shapes.items() if s.recorded is not None}
    base = min(start for start, _ in recorded.values())
    offsets = {r: (start - base) * 1000.0 for r, (start, _) in recorded.items()}
    if max(offsets.values()) > 0.5 * min(span for _, span in recorded.values()) * 1000.0:
        return {}
    return offsets


def rank_classes(job: Job, system: SystemConfig, knobs: Knobs, network: NetworkConfig | None = None) -> list[RankClass]:
    """One :class:`RankClass` per set of ranks that simulate alike (see :func:`symmetric_classes`)."""
    shapes = {rank: rank_shape(trace, rank) for rank, trace in sorted(job.traces.items())}
    return build_classes(shapes, job.groups, job.traces.__getitem__, system, knobs, network)


def build_classes(shapes: Mapping[int, RankShape], groups: ProcessGroups, trace_of: Callable[[int], Trace],
                  system: SystemConfig, knobs: Knobs, network: NetworkConfig | None) -> list[RankClass]:
    """Programs of the classes of :func:`symmetric_classes`, built from each class's first rank (``trace_of``)."""
    starts = starts_of(shapes) if knobs.measured_start else {}
    classes = []
    for members in symmetric_classes(shapes, groups, starts, knobs, network):
        program = build_program(trace_of(members[0]), members[0], system, knobs)
        program.release_ns = starts.get(members[0], 0.0)
        classes.append(RankClass(program, members))
    return classes


def symmetric_classes(shapes: Mapping[int, RankShape], groups: ProcessGroups, starts: Mapping[int, float],
                      knobs: Knobs, network: NetworkConfig | None) -> list[tuple[int, ...]]:
    """Ranks that the engine may simulate once, first rank first (it is the one simulated).

    Ranks share a class when their graphs are equal (:class:`RankShape` signature), nothing else sets
    them apart (no straggler factor, the same recorded start with ``Knobs.measured_start``), and their
    partners correspond: the k-th group each uses holds members of the same classes and has the same
    layout on the network, and the k-th peer each talks to is in the same class at the same network
    distance. Found by refining classes until they are stable (colour refinement). The engine walks a
    class as its first rank, so a class stays merged only when that rank's peers are first ranks too
    and each group it uses holds the first rank of every class in it; otherwise its ranks are split.

    A group's members are compared by what each sees of it: the classes of the members at each position
    of the group's ring relative to its own, and the hops to each (collectives are not barriers: a
    member's finish depends on who is next to it). Without ``network``, only ranks that use the very
    same groups and have no point-to-point nodes merge.
    """
    world = max(shapes) + 1 if shapes else 0
    relabel = network is not None
    alone = {rank for rank, shape in shapes.items()
             if not knobs.symmetry or rank in knobs.stragglers or shape.odd_p2p or (shape.peers and not relabel)}
    colour = _numbered({rank: ("alone", rank) if rank in alone else (shape.signature, starts.get(rank, 0.0))
                        for rank, shape in shapes.items()})
    info = _GroupInfo(groups, world, network)
    while True:
        colour = _refine(shapes, colour, alone, info, relabel)
        split = _unwalkable(shapes, colour, info) - alone
        if not split:
            break
        alone.update(split)
        colour = _numbered({r: ("alone", r) if r in alone else c for r, c in colour.items()})
    by_colour: dict[int, list[int]] = {}
    for rank in sorted(shapes):
        by_colour.setdefault(colour[rank], []).append(rank)
    return sorted(tuple(m) for m in by_colour.values())


class _GroupInfo:
    """Members and network layout of each group (cached)."""

    def __init__(self, groups: ProcessGroups, world: int, network: NetworkConfig | None) -> None:
        self.groups, self.world, self.network = groups, world, network
        self._members: dict[str | None, tuple[int, ...]] = {}
        self._layout: dict[str | None, object] = {}
        self._views: dict[tuple[str | None, int], tuple] = {}
        self._route: dict[tuple[int, int], object] = {}

    def members(self, pg: str | None) -> tuple[int, ...]:
        got = self._members.get(pg)
        if got is None:
            try:
                got = ring_order(self.groups, pg, self.world)
            except KeyError:  # an unknown group: the engine reports it; nothing to merge on
                got = ()
            self._members[pg] = got
        return got

    def layout(self, pg: str | None) -> object:
        """Whether the group is every NPU (it then runs on the network's own rings, the same from everywhere)."""
        if pg not in self._layout:
            members = self.members(pg)
            self._layout[pg] = len(members) == self.network.npus if members and max(members) < self.network.npus else None  # type: ignore[union-attr]
        return self._layout[pg]

    def view(self, pg: str | None, rank: int) -> tuple:
        """The members of a smaller group in ring order from ``rank`` on, and the hops to each."""
        key = (pg, rank)
        got = self._views.get(key)
        if got is None:
            members = self.members(pg)
            if rank not in members or self.layout(pg) is not False:
                got = ()
            else:
                i, n = members.index(rank), len(members)
                got = tuple(self.route(rank, members[(i + k) % n]) for k in range(1, n))
            self._views[key] = got
        return got

    def ring_colours(self, pg: str | None, rank: int, colour: Mapping[int, int]) -> tuple:
        """The classes of a smaller group's members in ring order from ``rank`` on (every NPU's group
        runs on the network's rings: the engine checks its members finish alike instead)."""
        members = self.members(pg)
        if rank not in members or self.layout(pg) is not False:
            return ()
        i, n = members.index(rank), len(members)
        return tuple(colour.get(members[(i + k) % n]) for k in range(n))

    def route(self, src: int, dst: int) -> object:
        """Hops and links a message from ``src`` to ``dst`` takes (what its time depends on)."""
        key = (src, dst)
        if key not in self._route:
            net = self.network
            assert net is not None  # (a message needs a network)
            ok = 0 <= src < net.npus and 0 <= dst < net.npus
            self._route[key] = tuple((d.hops(abs(a - b)), d) if a != b else None
                                     for a, b, d in zip(net.coords(src), net.coords(dst), net.dims)) if ok else None
        return self._route[key]


def _numbered(keys: Mapping[int, object]) -> dict[int, int]:
    """Class keys as small integers (equal keys, equal numbers)."""
    numbers: dict[object, int] = {}
    return {rank: numbers.setdefault(key, len(numbers)) for rank, key in keys.items()}


def _refine(shapes: Mapping[int, RankShape], colour: dict[int, int], alone: set[int], info: _GroupInfo,
            relabel: bool) -> dict[int, int]:
    """Split classes until every member's groups and peers fall in the same classes as its class-mates'."""
    count = len(set(colour.values()))
    while True:
        group_colours: dict[str | None, frozenset] = {}
        new: dict[int, object] = {}
        for rank, shape in shapes.items():
            old = colour[rank]
            if rank in alone:
                new[rank] = old
            elif relabel:
                parts = []
                for pg in shape.pg_names:
                    if pg not in group_colours:
                        group_colours[pg] = frozenset(colour[m] for m in info.members(pg) if m in colour)
                    cols = group_colours[pg]
                    ring = info.ring_colours(pg, rank, colour) if len(cols) > 1 else ()
                    parts.append((cols, info.layout(pg), info.view(pg, rank), ring))
                peers = tuple((colour.get(p), info.route(rank, p)) for p in shape.peers)
                new[rank] = (old, tuple(parts), peers)
            else:
                new[rank] = (old, shape.pg_names)
        colour = _numbered(new)
        settled = len(set(colour.values()))
        if settled == count:
            return colour
        count = settled


def _unwalkable(shapes: Mapping[int, RankShape], colour: dict[int, int], info: _GroupInfo) -> set[int]:
    """Ranks of merged classes the engine cannot walk as their first ranks: a peer of a first rank that
    is not a first rank itself, a group of a first rank without the first rank of each class in it, or
    class-mates whose k-th groups overlap without being the same group."""
    first: dict[int, int] = {}
    mates: dict[int, list[int]] = {}
    for rank in sorted(shapes):
        first.setdefault(colour[rank], rank)
        mates.setdefault(colour[rank], []).append(rank)
    bad: set[int] = set()
    for c, rep in first.items():
        shape = shapes[rep]
        for p in shape.peers:
            if p in colour and first[colour[p]] != p:
                bad.update(mates[colour[p]])
        for pg in shape.pg_names:
            members = info.members(pg)
            for m in members:
                if m in colour and first[colour[m]] not in members:
                    bad.update(mates[colour[m]])
        if len(mates[c]) > 1 and not all(a == b or not set(info.members(a)) & set(info.members(b))
                                         for r in mates[c] for a, b in zip(shapes[r].pg_names, shape.pg_names)):
            bad.update(mates[c])
    return bad
