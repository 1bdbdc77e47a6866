"""Linking a host execution trace with the Kineto trace of the same steps.

For every host op the linker finds its Kineto event (by record-function id; when Kineto has none, as
with schema 1.0.1 traces, by External id order, name and time containment; with no ids at all, by name
order on each thread), and from Kineto it takes the start time, the inclusive and the exclusive (self)
duration. GPU activity is attached to the CPU op that
launched it (launch ``correlation`` -> the innermost CPU op enclosing the launch on its thread).

It also repairs the op tree that asynchronous collectives corrupt in host traces (pytorch-traces.md
§7.1): a linked op's parent is the innermost op that encloses it in time on the same OS thread, and a
backend op (``gloo:*``, ``nccl:*``) that runs on a worker thread hangs under the dispatcher op
(``c10d::*``) whose tensors it moves, paired by tensor identity in issue order.

:func:`link` returns a :class:`LinkedRank`; :func:`write_linked_json` writes the classic "host + device"
JSON (the host ET plus ``ts``/``inclusive_dur``/``exclusive_dur`` and GPU nodes), the input of
``chakra_converter``.
"""

from __future__ import annotations

import math
import os
from collections import Counter, defaultdict
from dataclasses import field
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ..arrays import distinct
from ..errors import EtkitError
from ..fileio import atomic_output
from ..format.attrs import PROFILER_CATEGORIES
from ..format.schema import CommType, NodeType
from ..records import record
from .comm import Family, classify_op, process_group_entries
from .host import HostOp, HostTrace, load_host_trace
from .jsonio import read_array_document

if TYPE_CHECKING:  # pragma: no cover - the Kineto reader is imported where a Kineto trace is read
    from .kineto import KinetoTrace

__all__ = ["LinkedRank", "LinkReport", "GpuActivity", "LinkError", "link", "link_files", "write_linked_json",
           "from_linked_host", "check_same_job"]

#: Names of the synthetic roots of a host trace (no Kineto twin).
ROOT_MARKERS = ("[pytorch|profiler|execution_trace|", "[pytorch|profiler|execution_graph|")
#: Kineto categories of host calls into the CUDA runtime (kept as ops of their own).
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
_NAN = float("nan")
_ID, _PARENT, _GPU, _LINKED = (attrgetter(name) for name in ("id", "parent", "gpu", "linked"))
_NO_PID = -1


@record
class LinkReport:
    """How well the two traces matched: ``host_ops = linked_ops + unlinked_ops + roots``."""

    host_ops: int = 0
    linked_ops: int = 0
    unlinked_ops: int = 0
    unlinked_names: dict[str, int] = field(default_factory=dict)
    name_mismatches: int = 0
    method: str = "none"           # "rf_id", "external-id", "name-order", "linked-json" or "none" (host alone)
    kineto_cpu_events: int = 0
    kernels: int = 0               # GPU kernels, copies and sets of the window (all in the ET; and syncs on a stream)
    kernels_linked: int = 0        # ... attached to their launch
    kernels_unlinked: int = 0      # ... whose launch is not in the trace: nodes of their stream
    kernels_outside: int = 0       # launched outside the host trace's window (other steps): not converted
    runtime_ops: int = 0           # CUDA runtime calls of the window (cudaLaunchKernel, ...), kept as host ops
    roots: int = 0                 # synthetic root ops of the host trace (never in Kineto)
    tree_repairs: int = 0          # ops whose parent differs from the host trace's
    backend_ops_paired: int = 0    # gloo:*/nccl:* ops hung under their c10d op
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@record
class GpuActivity:
    """One GPU kernel / memcpy / memset attached to the host op (index) that launched it: its CUDA runtime
    call where the trace has it, else the innermost op around the launch (-1: no launch found)."""

    op: int
    name: str
    category: str
    ts: float
    dur: float
    stream: int
    pg_name: str | None
    nbytes: int = -1  # memcpy / memset size
    correlation: int = -1
    row: int = -1  # its row in the Kineto trace (-1: from a linked JSON)


@record
class LinkedRank:
    """A host trace with per-op timing (µs, NaN where unknown), repaired parents and GPU activity.

    ``ts`` is on the Kineto clock; ``clock_offset_us`` turns it into Unix µs. ``thread`` is the OS
    thread of linked ops (Kineto ``tid``), else -1. ``parent`` holds op indices (-1 = root).
    """

    host: HostTrace
    ts: np.ndarray
    dur: np.ndarray
    excl: np.ndarray
    thread: np.ndarray
    parent: np.ndarray
    gpu: list[GpuActivity]
    report: LinkReport
    clock_offset_us: float = 0.0
    kineto: KinetoTrace | None = None
    base_ns: int = 0  # the Kineto clock's origin in Unix ns (clock_offset_us exactly)
    runtime_rows: dict[int, int] = field(default_factory=dict)  # Kineto runtime-call row -> its op index
    cat: np.ndarray | None = None  # per op: its Kineto event's category (format.attrs.PROFILER_CATEGORIES), -1

    @property
    def has_timing(self) -> bool:
        return self.report.linked_ops > 0


# -- matching -------------------------------------------------------------------------------------------


def _match_by_rf_id(host: HostTrace, kin: KinetoTrace, rows: np.ndarray, report: LinkReport) -> None:
    rf = np.fromiter((op.rf_id for op in host.ops), dtype=np.int64, count=len(host.ops))
    k_rf = kin.cpu_rf_id
    valid = np.flatnonzero(k_rf >= 0)
    order = valid[np.argsort(k_rf[valid], kind="stable")]
    sorted_rf = k_rf[order]
    pos = np.searchsorted(sorted_rf, rf)
    pos_ok = pos < len(sorted_rf)
    hit = np.zeros(len(rf), dtype=bool)
    hit[pos_ok] = sorted_rf[pos[pos_ok]] == rf[pos_ok]
    hit &= rf != 0
    cand = np.full(len(rf), -1, dtype=np.int64)
    cand[hit] = order[pos[hit]]
    names = kin.names
    for i in np.flatnonzero(hit).tolist():
        row = int(cand[i])
        if names[kin.cpu_name[row]] == host.ops[i].name:
            rows[i] = row
        else:
            report.name_mismatches += 1
    report.method = "rf_id"


def _match_by_name_order(host: HostTrace, kin: KinetoTrace, rows: np.ndarray, report: LinkReport) -> None:
    """Schema 1.0.1 traces have no record-function ids in Kineto: align each host thread's ops (in start,
    i.e. id, order) with the Kineto ops of the OS thread that matches best, greedily by name."""
    by_tid: dict[int, list[int]] = defaultdict(list)
    for i, op in enumerate(host.ops):
        if not op.name.startswith(ROOT_MARKERS):
            by_tid[op.tid].append(i)
    k_order = np.lexsort((-kin.cpu_dur, kin.cpu_ts))
    k_threads: dict[int, list[int]] = defaultdict(list)
    for row in k_order.tolist():
        k_threads[int(kin.cpu_tid[row])].append(row)
    names = kin.names
    taken_threads: set[int] = set()
    for _tid, ops in sorted(by_tid.items(), key=lambda kv: -len(kv[1])):
        ops.sort(key=lambda i: host.ops[i].id)
        wanted = [host.ops[i].name for i in ops]
        best: tuple[int, int, list[tuple[int, int]]] = (0, -1, [])
        for ktid, krows in k_threads.items():
            if ktid in taken_threads:
                continue
            knames = [names[kin.cpu_name[r]] for r in krows]
            starts = [j for j, n in enumerate(knames) if n == wanted[0]][:16] or [0]
            for start in starts:
                pairs = _greedy_align(wanted, knames, start)
                if len(pairs) > len(best[2]):
                    best = (len(pairs), ktid, pairs)
        if best[1] >= 0:
            taken_threads.add(best[1])
            krows = k_threads[best[1]]
            for a, b in best[2]:
                rows[ops[a]] = krows[b]
    report.method = "name-order"


#: How far past the last matched Kineto op (in External-id order) a host op's twin is looked for, and how
#: many starting points are tried.
_EXT_WINDOW = 256
_EXT_STARTS = 128
#: Starts are compared on this many host ops (in call order); the winner is then aligned in full.
_EXT_PROBE = 4096


def _match_by_external_id(host: HostTrace, kin: KinetoTrace, rows: np.ndarray, report: LinkReport) -> None:
    """Kineto traces of older PyTorch (host schema 1.0.1) carry no record-function ids, but number every CPU
    op with an ``External id`` in call order across threads, as the host trace numbers its ops with
    ``rf_id``. The host ops in ``rf_id`` order are aligned with the Kineto ops in External-id order by name,
    a child only inside its parent's Kineto interval on the parent's thread (time containment). Kineto
    usually covers more iterations than the host trace, so the alignment is tried from every Kineto op that
    could be the host trace's first op (its name, and the one whose External id equals that op's rf_id); the
    start that links the most ops wins, and among those the most compact one (the fewest Kineto ops between
    the first and the last match): repeated layers make a shifted start link as many ops, but only by
    jumping from one iteration into the next."""
    ops = host.ops
    k_ext = kin.cpu_ext_id
    valid = np.flatnonzero(k_ext >= 0)
    k_order = valid[np.argsort(k_ext[valid], kind="stable")].tolist()
    name_idx = kin.cpu_name.tolist()
    k_names = [kin.names[name_idx[r]] for r in k_order]
    order = sorted((i for i, op in enumerate(ops) if op.rf_id and not op.name.startswith(ROOT_MARKERS)),
                   key=lambda i: ops[i].rf_id)
    if not order or not k_order:
        report.method = "external-id"
        return
    index_of = {op.id: i for i, op in enumerate(ops)}
    parents = [index_of.get(ops[i].parent, -1) for i in order]
    first = ops[order[0]]
    starts = [pos for pos, name in enumerate(k_names) if name == first.name][:_EXT_STARTS]
    same_id = k_ext[k_order].tolist()
    if first.rf_id in same_id:
        starts.append(same_id.index(first.rf_id))
    geometry = (kin.cpu_ts.tolist(), (kin.cpu_ts + kin.cpu_dur).tolist(), kin.cpu_tid.tolist())
    best_start, best_key = 0, (-1, 0)
    for start in sorted(set(starts)):
        found, span = _align_in_call_order(ops, order[:_EXT_PROBE], parents, k_order, k_names, start, geometry)
        if (len(found), -span) > best_key:
            best_start, best_key = start, (len(found), -span)
    found, _ = _align_in_call_order(ops, order, parents, k_order, k_names, best_start, geometry)
    for i, row in found.items():
        rows[i] = row
    report.method = "external-id"


def _align_in_call_order(ops: list[Any], order: list[int], parents: list[int], k_order: list[int],
                         k_names: list[str], start: int,
                         geometry: tuple[list[float], list[float], list[int]]) -> tuple[dict[int, int], int]:
    """Host op index -> Kineto row, matching each op to the next Kineto op of its name (within
    ``_EXT_WINDOW``) that lies inside its matched parent's interval on the parent's thread; and the number
    of Kineto positions from the first match to the last."""
    ts, end, tid = geometry
    found: dict[int, int] = {}
    pointer = start
    first = -1
    n = len(k_order)
    for i, parent in zip(order, parents):
        name = ops[i].name
        prow = found.get(parent, -1)
        for pos in range(pointer, min(pointer + _EXT_WINDOW, n)):
            if k_names[pos] != name:
                continue
            row = k_order[pos]
            if prow >= 0 and (tid[row] != tid[prow] or ts[row] < ts[prow] or end[row] > end[prow]):
                continue
            found[i] = row
            pointer = pos + 1
            if first < 0:
                first = pos
            break
    return found, (pointer - first if first >= 0 else 0)


def _greedy_align(wanted: list[str], have: list[str], start: int, window: int = 64) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    j = start
    for i, name in enumerate(wanted):
        for k in range(j, min(j + window, len(have))):
            if have[k] == name:
                pairs.append((i, k))
                j = k + 1
                break
    return pairs


# -- Kineto nesting ---------------------------------------------------------------------------------------


def _kineto_nesting(kin: KinetoTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Innermost enclosing CPU event on the same thread (-1 = none) and exclusive duration of every CPU
    event, and the enclosing CPU event of every runtime call (``cudaLaunchKernel``...). Runtime calls hold
    nothing, but their time is their caller's callee time, not its self time. Computed once per trace."""
    if "nesting" not in kin.cache:
        kin.cache["nesting"] = _nesting(kin)
    return kin.cache["nesting"]


def _nesting(kin: KinetoTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, m = len(kin.cpu_ts), len(kin.launch_ts)
    ts_all = np.concatenate((kin.cpu_ts, kin.launch_ts))
    dur_all = np.concatenate((kin.cpu_dur, kin.launch_dur if len(kin.launch_dur) == m else np.zeros(m)))
    end_all = ts_all + dur_all
    tid_all = np.concatenate((kin.cpu_tid, kin.launch_tid))
    order = np.lexsort((np.arange(n + m) >= n, -dur_all, ts_all, tid_all))  # a call before a launch it holds
    ts_sorted, end_sorted, dur_sorted, tid_sorted = ts_all[order], end_all[order], dur_all[order], tid_all[order]
    holds_sorted = order < n  # CPU events hold others; runtime calls hold nothing
    firsts = np.flatnonzero(np.concatenate(([True], tid_sorted[1:] != tid_sorted[:-1]))).tolist() + [n + m]
    at = np.full(n + m, -1, dtype=np.int64)  # per position in that order: the position of its holder
    sums = np.zeros(n + m, dtype=np.float64)
    walked: list[tuple[int, int]] = []
    for a, b in zip(firsts, firsts[1:]):  # per thread
        nested = _nested_thread(ts_sorted[a:b], end_sorted[a:b], dur_sorted[a:b], holds_sorted[a:b])
        if nested is None:
            walked.append((a, b))
        else:  # the thread's calls nest: done with arrays
            at[a:b] = np.where(nested[0] >= 0, nested[0] + a, -1)
            sums[a:b] = nested[1]
    if walked:
        # one pass in that order, over positions in it (plain lists: numpy scalars one at a time are 5x slower)
        ts, end, dur, holds = ts_sorted.tolist(), end_sorted.tolist(), dur_sorted.tolist(), holds_sorted.tolist()
        par, sums_l = at.tolist(), sums.tolist()
        for a, b in walked:
            stack: list[int] = []
            for k in range(a, b):
                t = ts[k]
                while stack:
                    top = stack[-1]
                    e = end[top]
                    if e > t or (e == t and dur[k] == 0 and ts[top] == t):
                        break
                    stack.pop()
                # An event that starts inside the top but ends after it is clipped: treat the top as its parent.
                if stack:
                    top = stack[-1]
                    par[k] = top
                    sums_l[top] += min(dur[k], end[top] - t)
                if holds[k]:
                    stack.append(k)
        at, sums = np.asarray(par, dtype=np.int64), np.asarray(sums_l, dtype=np.float64)
    parent = np.full(n + m, -1, dtype=np.int64)
    parent[order] = np.where(at >= 0, order[at], -1)
    callee = np.zeros(n + m, dtype=np.float64)
    callee[order] = sums
    excl = np.maximum(kin.cpu_dur - callee[:n], 0.0)
    return parent[:n], excl, parent[n:]


def _nested_thread(ts: np.ndarray, end: np.ndarray, dur: np.ndarray, holds: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_nesting`'s walk of one thread (events in its order) when every call ends within the call that
    holds it, with arrays: per event the index of its holder (-1) and per event the callee time it holds.
    ``None`` when some call outlasts its holder (the walk clips it, and the stack is no longer nested).

    The walk's stack is then a nest: an event's depth says where it goes, and its holder is the last call
    started a level up. A call leaves the stack when an event starts after its end, or at its end unless
    that event is of zero length and the call too (zero-length events at one instant nest in each other):
    a call's end sorts before every start at that instant, a zero-length call's after all of them."""
    m = len(ts)
    k = np.arange(m, dtype=np.int64)
    calls = np.flatnonzero(holds)
    if not len(calls):  # runtime calls only: nothing holds them
        return np.full(m, -1, dtype=np.int64), np.zeros(m, dtype=np.float64)
    zero = dur[calls] == 0
    time = np.concatenate((ts, np.where(zero, ts[calls], end[calls])))
    when = np.concatenate((np.ones(m, dtype=np.int8), np.where(zero, 2, 0).astype(np.int8)))
    order = np.lexsort((np.concatenate((k, calls)), when, time))
    step = np.concatenate((holds.astype(np.int64), np.full(len(calls), -1, dtype=np.int64)))[order]
    depth = np.cumsum(step) - step  # before each sweep event
    starts = order < m
    level = np.empty(m, dtype=np.int64)
    level[order[starts]] = depth[starts]
    # the holder: the last call started before it one level up
    key = level[calls] * m + calls
    by_level = np.sort(key)
    at = np.searchsorted(by_level, level * m - m + k) - 1
    cand = by_level[np.maximum(at, 0)]
    up = level > 0
    if bool((up & ((at < 0) | (cand // m != level - 1))).any()):
        return None
    inner = np.where(up, cand % m, -1)
    nested_calls = calls[up[calls]]
    if bool((end[nested_calls] > end[inner[nested_calls]]).any()):
        return None
    callee = np.zeros(m, dtype=np.float64)
    held = np.flatnonzero(up)  # in walk order, so that each holder's sum adds up as the walk adds it
    np.add.at(callee, inner[held], np.minimum(dur[held], end[inner[held]] - ts[held]))
    return inner, callee


# -- tree repair -----------------------------------------------------------------------------------------


def _thread_root_of(host: HostTrace, index_of: dict[int, int], i: int) -> int:
    """Nearest host-trace ancestor that is a synthetic thread/process root (-1 if none)."""
    seen = 0
    j = i
    while seen < 10_000:
        op = host.ops[j]
        p = index_of.get(op.parent, -1)
        if p < 0 or p == j:
            return j if op.name.startswith(ROOT_MARKERS) else -1
        if host.ops[p].name.startswith(ROOT_MARKERS):
            return p
        j = p
        seen += 1
    return -1


def _pair_backend_ops(host: HostTrace, index_of: dict[int, int], ts: np.ndarray) -> dict[int, int]:
    """Backend op index -> dispatcher op index, by tensor identity and issue order."""
    ops = host.ops
    dispatch: list[int] = []
    backend: list[int] = []
    kinds: dict[int, tuple[Any, Any]] = {}  # op index -> (node type, comm type)
    for i, op in enumerate(ops):
        if op.inputs is None:
            continue
        kind = classify_op(op.name, op.extra, op.inputs)
        if kind is None:
            continue
        kinds[i] = (kind.node_type, kind.comm_type)
        if kind.family == Family.DISPATCH:
            dispatch.append(i)
        elif kind.family == Family.BACKEND:
            backend.append(i)
    if not backend or not dispatch:
        return {}

    def order_key(i: int) -> tuple[float, int]:
        t = ts[i]
        return (ops[i].id if math.isnan(t) else t, ops[i].id)

    by_key: dict[tuple[int, int], list[int]] = defaultdict(list)
    children: dict[int, list[int]] = defaultdict(list)
    dispatch_ids = {ops[i].id: i for i in dispatch}
    for i, op in enumerate(ops):
        owner = dispatch_ids.get(op.parent)
        if owner is not None:
            children[owner].append(i)
    for d in sorted(dispatch, key=order_key):
        keys = set(ops[d].reads) | set(ops[d].writes)
        for c in children[d]:  # reduce_scatter on gloo: the backend moves the dispatcher's aten::clone output
            keys.update(ops[c].writes)
        for key in keys:
            by_key[key].append(d)
    paired: dict[int, int] = {}
    used: set[int] = set()
    for b in sorted(backend, key=order_key):
        b_key = order_key(b)
        best = same = None  # earliest candidate of any kind / of the backend op's own kind
        for key in ops[b].reads or ops[b].writes:
            for d in by_key.get(key, ()):
                if d in used or not (order_key(d) <= b_key or math.isnan(ts[b])):
                    continue
                if best is None or order_key(d) < order_key(best):
                    best = d
                if kinds[d] == kinds[b]:  # a recv's buffer may be an earlier scatter's output: prefer the kind
                    if same is None or order_key(d) < order_key(same):
                        same = d
                    break
        # another kind only when none fits (gloo runs reduce_scatter as an all_reduce of a clone)
        chosen = same if same is not None else best
        if chosen is not None:
            paired[b] = chosen
            used.add(chosen)
    _pair_by_kind(backend, dispatch, kinds, paired, used, order_key, ts)
    return paired


#: (node type, comm type) of a backend op -> the dispatcher kinds it also runs (gloo: reduce_scatter as all_reduce).
_RUN_AS = {(NodeType.COMM_COLL_NODE, CommType.ALL_REDUCE): ((NodeType.COMM_COLL_NODE, CommType.REDUCE_SCATTER),)}


def _pair_by_kind(backend: list[int], dispatch: list[int], kinds: dict[int, tuple[Any, Any]], paired: dict[int, int],
                  used: set[int], order_key: Any, ts: np.ndarray) -> None:
    """Backend ops that move no tensor of their dispatcher op (``gloo:barrier``; ``gloo:scatter`` on a
    non-root rank, which gets no input list; every op of a trace without tensor identities, a Kineto trace
    alone) pair with the earliest unpaired dispatcher op of the same kind issued before them, else of a
    kind the backend runs as theirs (gloo runs reduce_scatter as an all_reduce)."""
    waiting: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for d in sorted((d for d in dispatch if d not in used), key=order_key):
        waiting[kinds[d]].append(d)
    for b in sorted((b for b in backend if b not in paired), key=order_key):
        queues = [waiting.get(kinds[b])] + [waiting.get(k) for k in _RUN_AS.get(kinds[b], ())]
        fits = [q for q in queues if q and (order_key(q[0]) <= order_key(b) or math.isnan(ts[b]))]
        if fits:
            queue = min(fits, key=lambda q: order_key(q[0]))
            d = queue.pop(0)
            paired[b] = d
            used.add(d)


def _repair_parents(host: HostTrace, rows: np.ndarray, k_parent: np.ndarray, ts: np.ndarray,
                    report: LinkReport, index_of: dict[int, int]) -> np.ndarray:
    """Each op's parent (op index, -1: a root), repaired; ``index_of``: op id -> op index."""
    ops = host.ops
    paired = _pair_backend_ops(host, index_of, ts)
    report.backend_ops_paired = len(paired)
    if _rows_are_ops(rows, k_parent) and len(rows) == len(ops):
        return _own_rows_parents(host, index_of, k_parent, paired, report)
    row_list = rows.tolist()  # plain lists: indexing numpy arrays one element at a time is 5x slower
    k_par = k_parent.tolist()
    host_of_row: dict[int, int] = {r: i for i, r in enumerate(row_list) if r >= 0}
    chosen_parents: list[int] = []
    repairs = 0
    for i, op in enumerate(ops):
        et_parent = index_of.get(op.parent, -1)
        if et_parent == i:
            et_parent = -1
        chosen = -2
        row = row_list[i]
        if i in paired:
            chosen = paired[i]
        elif row >= 0:
            kp = k_par[row]
            while kp >= 0 and kp not in host_of_row:
                kp = k_par[kp]
            if kp >= 0:
                chosen = host_of_row[kp]
            elif et_parent >= 0 and row_list[et_parent] < 0:
                chosen = et_parent  # top of its thread: keep the unlinked root above it
            else:
                chosen = _thread_root_of(host, index_of, i)
        if chosen == -2:
            chosen = et_parent
        chosen_parents.append(chosen)
        if chosen != et_parent:
            repairs += 1
    report.tree_repairs += repairs
    parent = np.array(chosen_parents, dtype=np.int64)
    _break_cycles(parent, host, index_of)
    return parent


def _own_rows_parents(host: HostTrace, index_of: dict[int, int], k_parent: np.ndarray, paired: dict[int, int],
                      report: LinkReport) -> np.ndarray:
    """:func:`_repair_parents` when every op is linked to its own Kineto row (a Kineto trace alone): an op's
    parent is its Kineto parent, else its thread root; a backend op's, its dispatcher op."""
    ops = host.ops
    et_parent = np.array([index_of.get(op.parent, -1) for op in ops], dtype=np.int64)
    et_parent[et_parent == np.arange(len(ops))] = -1
    parent = k_parent.copy()
    for i in np.flatnonzero(parent < 0).tolist():
        parent[i] = _thread_root_of(host, index_of, i)
    for b, d in paired.items():
        parent[b] = d
    report.tree_repairs += int((parent != et_parent).sum())
    _break_cycles(parent, host, index_of)
    return parent


def _has_cycle(parent: np.ndarray) -> bool:
    """Whether following ``parent`` (-1: a root) loops somewhere: by pointer doubling, every op's ancestor
    2**k levels up reaches a root within log2(n) + 1 doublings unless the op is on or under a cycle."""
    n = len(parent)
    if bool((parent >= n).any()):
        return True  # (not an op: the walk says what it makes of it)
    up = np.append(np.where(parent >= 0, parent, n), n)  # n: past the roots (stays there)
    for _ in range(max(n, 1).bit_length() + 1):
        if bool((up == n).all()):
            return False
        up = up[up]
    return not bool((up == n).all())


def _break_cycles(parent: np.ndarray, host: HostTrace, index_of: dict[int, int]) -> None:
    """Re-hang any op caught in a parent cycle under its thread root (never expected; cheap to ensure)."""
    if not _has_cycle(parent):
        return
    state = [0] * len(parent)  # 0 new, 1 on current path, 2 done
    plist = parent.tolist()
    for start in range(len(plist)):
        path = []
        j = start
        while j >= 0 and state[j] == 0:
            state[j] = 1
            path.append(j)
            j = plist[j]
        if j >= 0 and state[j] == 1:  # cycle: cut it at j
            root = _thread_root_of(host, index_of, j)
            plist[j] = root if root not in (j,) and state[root] != 1 else -1
        for k in path:
            state[k] = 2
    parent[:] = plist


# -- GPU activity ----------------------------------------------------------------------------------------


def _window(ts: np.ndarray, dur: np.ndarray) -> tuple[float, float]:
    """The Kineto-clock interval the linked host ops cover (µs; empty when none is linked)."""
    known = ~np.isnan(ts)
    if not known.any():
        return math.inf, -math.inf
    return float(ts[known].min()), float((ts[known] + dur[known]).max())


def _owner_op(row: int, k_parent: np.ndarray, host_of_row: dict[int, int]) -> int:
    """The linked host op of Kineto CPU row ``row`` or of its nearest linked ancestor (-1: none)."""
    while row >= 0 and row not in host_of_row:
        row = int(k_parent[row])
    return host_of_row.get(row, -1) if row >= 0 else -1


def _add_runtime_ops(host: HostTrace, kin: KinetoTrace, rows: np.ndarray, k_parent: np.ndarray,
                     rt_parent: np.ndarray, window: tuple[float, float]) -> tuple[dict[int, int], list[int]]:
    """Append a host op for every CUDA runtime call of the window (launches, copies, syncs), under the
    linked op that made it; returns Kineto runtime row -> op index, and the op each call is under (op index,
    -1: none; in the same order)."""
    sel = np.flatnonzero((kin.launch_ts >= window[0]) & (kin.launch_ts <= window[1]))
    if not len(sel) or not len(kin.launch_name):
        return {}, []
    ops = host.ops
    if _rows_are_ops(rows, k_parent):  # a Kineto trace alone: the op of CPU row r is op r
        owners = rt_parent[sel].tolist()
    else:
        host_of_row = {int(r): i for i, r in enumerate(rows.tolist()) if r >= 0}
        owners = [_owner_op(r, k_parent, host_of_row) for r in rt_parent[sel].tolist()]
    first_id, first = max(op.id for op in ops) + 1, len(ops)
    ids = range(first_id, first_id + len(sel))
    parent_ids = [ops[o].id if o >= 0 else i for o, i in zip(owners, ids)]
    tids = [ops[o].tid if o >= 0 else t for o, t in zip(owners, kin.launch_tid[sel].tolist())]
    names = np.asarray(kin.names, dtype=object)[kin.launch_name[sel]].tolist()
    ops.extend(map(HostOp, ids, names, parent_ids, repeat(0), repeat(0), repeat(-1), repeat(0), tids, repeat(0),
                   repeat(""), repeat(("[]", "[]", "[]", "[]", "[]", "[]")), repeat(()), repeat(())))
    return dict(zip(sel.tolist(), range(first, len(ops)))), owners


def _rows_are_ops(rows: np.ndarray, k_parent: np.ndarray) -> bool:
    """Whether host op ``i`` is Kineto CPU row ``i`` for every op and row (a host trace built from the
    Kineto trace itself): then every row's linked op is the row itself."""
    return len(rows) == len(k_parent) and bool((rows == np.arange(len(rows))).all())


def _attach_gpu(kin: KinetoTrace, rows: np.ndarray, k_parent: np.ndarray, runtime_ops: dict[int, int],
                window: tuple[float, float], report: LinkReport) -> list[GpuActivity]:
    """Every GPU activity of the window: launched in it, or, when its launch is not in the trace, running
    in it. It belongs to the runtime call that launched it (or, without one, the innermost linked op
    enclosing the launch); one whose launch cannot be found is kept with ``op`` -1 (a node of its stream)."""
    n_gpu = len(kin.gpu_ts)
    if not n_gpu:
        return []
    launch_of = {int(c): j for j, c in enumerate(kin.launch_correlation.tolist()) if c >= 0}
    # each activity's launch (-1: none): in the window, else the activity itself runs in it (columns at once)
    corr = kin.gpu_correlation.tolist()
    launch = np.fromiter(map(launch_of.get, corr, repeat(-1)), dtype=np.int64, count=n_gpu)
    launched = launch >= 0
    t = np.where(launched, kin.launch_ts[np.maximum(launch, 0)] if len(kin.launch_ts) else _NAN, _NAN)
    lo, hi = window
    inside = np.where(launched, (lo <= t) & (t <= hi), (kin.gpu_ts < hi) & (kin.gpu_ts + kin.gpu_dur > lo))
    sel = np.flatnonzero(inside)
    js = launch[sel].tolist()
    owners = list(map(runtime_ops.get, js, repeat(-1)))  # (no runtime op is a launch -1's)
    searched = [k for k, (o, j) in enumerate(zip(owners, js)) if o < 0 and j >= 0]
    if searched:  # no runtime call for the launch: the innermost linked op enclosing it on its thread
        _enclosing_ops(kin, rows, k_parent, owners, searched, js, t[sel].tolist())
    kernels_unlinked = sum(1 for o in owners if o < 0)
    g_rows = sel.tolist()
    gpu_bytes = kin.gpu_bytes[sel] if len(kin.gpu_bytes) == n_gpu else np.full(len(sel), -1)
    category, pg = kin.gpu_category, kin.gpu_pg
    out = list(map(GpuActivity, owners, np.asarray(kin.names, dtype=object)[kin.gpu_name[sel]].tolist(),
                   [category[g] for g in g_rows], kin.gpu_ts[sel].tolist(), kin.gpu_dur[sel].tolist(),
                   kin.gpu_stream[sel].tolist(), [pg[g] for g in g_rows], gpu_bytes.tolist(),
                   kin.gpu_correlation[sel].tolist(), g_rows))
    report.kernels_outside += n_gpu - len(out)
    report.kernels_unlinked += kernels_unlinked
    report.kernels_linked += len(out) - kernels_unlinked
    report.kernels = len(out)
    out.extend(_stream_syncs(kin, launch_of, runtime_ops, window))
    return out


def _enclosing_ops(kin: KinetoTrace, rows: np.ndarray, k_parent: np.ndarray, owners: list[int], searched: list[int],
                   launch: list[int], t: list[float]) -> None:
    """``owners[k]`` for each ``k`` of ``searched``: the innermost linked op enclosing launch ``launch[k]``
    (at ``t[k]``) on the launch's thread (-1: none)."""
    host_of_row = {int(r): i for i, r in enumerate(rows.tolist()) if r >= 0}
    # Per thread: CPU events sorted by start, to find the innermost one enclosing a launch.
    per_tid: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for tid in distinct(kin.cpu_tid).tolist():
        sel = np.flatnonzero(kin.cpu_tid == tid)
        sel = sel[np.lexsort((-kin.cpu_dur[sel], kin.cpu_ts[sel]))]
        per_tid[tid] = (sel, kin.cpu_ts[sel])
    end = kin.cpu_ts + kin.cpu_dur
    launch_tid = kin.launch_tid.tolist()
    for k in searched:
        found = per_tid.get(launch_tid[launch[k]])
        if found is not None:
            sel, starts = found
            at = int(np.searchsorted(starts, t[k], side="right")) - 1
            row = int(sel[at]) if at >= 0 else -1
            while row >= 0 and (end[row] < t[k] or row not in host_of_row):
                row = int(k_parent[row])
            owners[k] = host_of_row.get(row, -1) if row >= 0 else -1


def _stream_syncs(kin: KinetoTrace, launch_of: dict[int, int], runtime_ops: dict[int, int],
                  window: tuple[float, float]) -> list[GpuActivity]:
    """The ``cuda_sync`` records Kineto puts on a stream (``Stream Wait Event``, ``Stream Sync``): device-side
    waits, kept as activities of their stream under the runtime call that made them (category cuda_sync)."""
    out = []
    lo, hi = window
    for s in np.flatnonzero(kin.sync_stream >= 0).tolist():
        j = launch_of.get(int(kin.sync_correlation[s]), -1)
        t = float(kin.launch_ts[j]) if j >= 0 else float(kin.sync_ts[s])
        if not lo <= t <= hi:
            continue
        out.append(GpuActivity(runtime_ops.get(j, -1), kin.names[int(kin.sync_name[s])], "cuda_sync",
                               float(kin.sync_ts[s]), float(kin.sync_dur[s]), int(kin.sync_stream[s]), None, -1,
                               int(kin.sync_correlation[s]), -1))
    return out


# -- entry points ----------------------------------------------------------------------------------------


def link(host: HostTrace, kineto: KinetoTrace | None) -> LinkedRank:
    """Link ``host`` with ``kineto`` (``None``: a host trace alone, durations unknown)."""
    n = len(host.ops)
    report = LinkReport(host_ops=n)
    rows = np.full(n, -1, dtype=np.int64)
    if kineto is None:
        gpu = _split_gpu_nodes(host)
        n = len(host.ops)
        report.host_ops = n
        ts, dur, excl = _linked_fields(host)
        report.linked_ops = int((~np.isnan(ts)).sum())
        report.method = "linked-json" if report.linked_ops else "none"
        ops = host.ops
        index_of = dict(zip(map(_ID, ops), range(n)))
        parent = np.fromiter(map(index_of.get, map(_PARENT, ops), repeat(-1)), dtype=np.int64, count=n)
        parent[parent == np.arange(n)] = -1
        # Without Kineto nesting, still hang each backend op under its dispatcher op (tensor identity).
        paired = _pair_backend_ops(host, index_of, ts)
        for b, d in paired.items():
            if parent[b] != d:
                parent[b] = d
                report.tree_repairs += 1
        report.backend_ops_paired = len(paired)
        _break_cycles(parent, host, index_of)
        _count_unlinked(host, ts, report)
        report.kernels = report.kernels_linked = len(gpu)
        gpu_fields = list(map(_GPU, ops))
        cat = (np.asarray([PROFILER_CATEGORIES.index(g[0]) if g is not None else -1 for g in gpu_fields], dtype=np.int8)
               if any(gpu_fields) else np.full(n, -1, dtype=np.int8))
        report.runtime_ops = int(((cat == 2) | (cat == 3)).sum())
        return LinkedRank(host, ts, dur, excl, np.full(n, -1, dtype=np.int64), parent, gpu, report, cat=cat)
    check_same_job(host, kineto)
    report.kineto_cpu_events = len(kineto.cpu_ts)
    if host.has_rf_ids and kineto.has_rf_ids:
        _match_by_rf_id(host, kineto, rows, report)
    elif host.has_rf_ids and kineto.has_external_ids:
        _match_by_external_id(host, kineto, rows, report)
    else:
        _match_by_name_order(host, kineto, rows, report)
    return _link_rows(host, kineto, rows, report)


def _link_rows(host: HostTrace, kineto: KinetoTrace, rows: np.ndarray, report: LinkReport,
               window: tuple[float, float] | None = None) -> LinkedRank:
    """The linked rank once each host op's Kineto row (``rows``, -1: none) is known. ``window``: the Kineto
    time whose GPU activity and runtime calls belong to it (default: what the linked host ops cover)."""
    n = len(host.ops)
    nan = np.full(n, _NAN)
    k_parent, k_excl, rt_parent = _kineto_nesting(kineto)
    hit = rows >= 0
    ts, dur, excl = nan.copy(), nan.copy(), nan.copy()
    ts[hit] = kineto.cpu_ts[rows[hit]]
    dur[hit] = kineto.cpu_dur[rows[hit]]
    excl[hit] = k_excl[rows[hit]]
    thread = np.full(n, -1, dtype=np.int64)
    thread[hit] = kineto.cpu_tid[rows[hit]]
    report.linked_ops = int(hit.sum())
    _count_unlinked(host, ts, report)
    _check_coverage(report, kineto)
    index_of = {op.id: i for i, op in enumerate(host.ops)}  # op id -> op index (the last op of an id)
    parent = _repair_parents(host, rows, k_parent, ts, report, index_of)
    window = window or _window(ts, dur)
    runtime_ops, owners = _add_runtime_ops(host, kineto, rows, k_parent, rt_parent, window)
    if runtime_ops:  # their timing, thread and parent (the op that made the call; their ids are new ones)
        j = np.fromiter(runtime_ops, dtype=np.int64, count=len(runtime_ops))
        ops = host.ops
        extra_parent = np.asarray([index_of[ops[o].id] if o >= 0 else -1 for o in owners], dtype=np.int64)
        ts = np.concatenate((ts, kineto.launch_ts[j]))
        dur = np.concatenate((dur, kineto.launch_dur[j]))
        excl = np.concatenate((excl, kineto.launch_dur[j]))
        thread = np.concatenate((thread, kineto.launch_tid[j]))
        parent = np.concatenate((parent, extra_parent))
        report.runtime_ops = len(runtime_ops)
    gpu = _attach_gpu(kineto, rows, k_parent, runtime_ops, window, report)
    cat = np.full(len(host.ops), -1, dtype=np.int8)
    if len(kineto.cpu_cat) == len(kineto.cpu_ts):
        cat[:n][hit] = kineto.cpu_cat[rows[hit]]  # cpu_op 0, user_annotation 1
    if runtime_ops:  # cuda_runtime 2, cuda_driver 3
        added = np.fromiter(runtime_ops.values(), dtype=np.int64, count=len(runtime_ops))
        cat[added] = np.where(kineto.launch_driver[j], 3, 2) if len(kineto.launch_driver) else 2
    offset = kineto.base_time_ns / 1000.0
    return LinkedRank(host, ts, dur, excl, thread, parent, gpu, report, offset, kineto, base_ns=kineto.base_time_ns,
                      runtime_rows=runtime_ops, cat=cat)


def _split_gpu_nodes(host: HostTrace) -> list[GpuActivity]:
    """A linked JSON carries GPU activity as extra nodes (with ``cat``): turn them back into activities of
    their launching op and keep only host ops in ``host.ops``."""
    if not any(map(_GPU, host.ops)):  # (a GPU node's gpu field is a pair)
        return []
    cpu_ops = [op for op in host.ops if op.gpu is None or op.gpu[0] in RUNTIME_CATEGORIES]
    index_of = {op.id: i for i, op in enumerate(cpu_ops)}
    out = []
    for op in host.ops:
        if op.gpu is None or op.gpu[0] in RUNTIME_CATEGORIES or op.parent not in index_of:
            continue
        ts, dur, _ = op.linked or (_NAN, 0.0, 0.0)
        out.append(GpuActivity(index_of[op.parent], op.name, op.gpu[0], ts, dur, op.gpu[1],
                               (op.extra or {}).get("pg_name")))
    host.ops = cpu_ops
    return out


def _linked_fields(host: HostTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(host.ops)
    ts, dur, excl = np.full(n, _NAN), np.full(n, _NAN), np.full(n, _NAN)
    for i, linked in enumerate(map(_LINKED, host.ops)):
        if linked is not None:
            ts[i], dur[i], excl[i] = linked
    return ts, dur, excl


def _count_unlinked(host: HostTrace, ts: np.ndarray, report: LinkReport) -> None:
    ops = host.ops
    unlinked = Counter(ops[i].name for i in np.flatnonzero(np.isnan(ts)).tolist())  # (first seen first)
    roots = sum(unlinked.pop(name) for name in [name for name in unlinked if name.startswith(ROOT_MARKERS)])
    missing = unlinked
    report.roots = roots
    report.unlinked_ops = sum(missing.values())
    report.unlinked_names = dict(sorted(missing.items(), key=lambda kv: -kv[1])[:20])


# -- do the two traces belong together? -------------------------------------------------------------------

#: Below this share of linkable host ops matched, the report warns that the traces may not be a pair.
LOW_COVERAGE = 0.5


class LinkError(EtkitError):
    """A host trace and a Kineto trace that cannot be linked (they come from different ranks or jobs)."""


def _host_world_size(host: HostTrace) -> int | None:
    """World size the host trace's ``process_group:init`` declares (size of the default group "0")."""
    for op in host.ops:
        if op.inputs is not None and "process_group:init" in op.name:
            for entry in process_group_entries(op.inputs, f"{host.path}: node {op.id}"):
                size = entry.get("group_size")
                if str(entry.get("pg_name")) == "0" and type(size) is int and size > 0:
                    return size
            return None
    return None


def check_same_job(host: HostTrace, kineto: KinetoTrace) -> None:
    """Refuse a pair whose traces clearly come from different processes, ranks or jobs.

    Both files of one rank are written by the same process, so the host trace's ``pid`` must be the
    process of Kineto's CPU ops; the rank a job directory (or ``--rank``) gives the host trace must be
    Kineto's ``distributedInfo.rank``; the world size of the host's default group must be Kineto's. The
    two clocks are not comparable (the host ``start_ts`` is not on Kineto's clock), so times are not.
    """
    problems = []
    kineto_pids = sorted(kineto.pids - {_NO_PID})
    if host.pid > 0 and kineto_pids and host.pid not in kineto_pids:
        problems.append(f"host pid {host.pid}, Kineto pid {', '.join(map(str, kineto_pids[:3]))}")
    if host.rank is not None and kineto.rank is not None and host.rank != kineto.rank:
        problems.append(f"host rank {host.rank}, Kineto distributedInfo rank {kineto.rank}")
    world = _host_world_size(host)
    if world is not None and kineto.world_size is not None and world != kineto.world_size:
        problems.append(f"host world size {world}, Kineto world size {kineto.world_size}")
    if problems:
        raise LinkError(f"{host.path} and {kineto.path} are not the same rank of one job ({'; '.join(problems)}); "
                        "pass the Kineto trace recorded together with this host trace")


def _check_coverage(report: LinkReport, kineto: KinetoTrace) -> None:
    linkable = report.host_ops - report.roots
    if linkable and report.linked_ops < LOW_COVERAGE * linkable:
        report.warnings.append(
            f"only {report.linked_ops} of {linkable} host ops matched an event of {kineto.path}: the Kineto "
            "trace may cover other steps (record both with one profiler, e.g. etkit.pytorch.collect.profile)")


def from_linked_host(host: HostTrace) -> LinkedRank:
    """A :class:`LinkedRank` from a linked JSON (or a bare host trace: then no timing)."""
    return link(host, None)


def link_files(host_path: str | os.PathLike[str], kineto_path: str | os.PathLike[str] | None, *,
               rank: int | None = None) -> LinkedRank:
    """Read and link one rank's pair of files (gzip or plain)."""
    host = load_host_trace(host_path, rank=rank)
    kineto = None
    if kineto_path is not None:
        from .kineto import load_kineto

        kineto = load_kineto(kineto_path, rank=rank)
    return link(host, kineto)


def write_linked_json(linked: LinkedRank, path: str | os.PathLike[str]) -> LinkReport:
    """Write the "host + device" JSON: every host node with ``ts``/``inclusive_dur``/``exclusive_dur``
    (µs, Kineto clock) where linked and ``ctrl_deps`` = the repaired parent (the host trace's parent is
    kept as ``et_parent`` when they differ), followed by one node per GPU activity (``cat``, ``stream``,
    ``pg_name``) whose ``ctrl_deps`` is the launching op. GPU node ids continue after the largest host id.
    """
    host = linked.host
    doc = read_array_document(host.path, "nodes")
    ids = [op.id for op in host.ops]
    index_of = {node_id: i for i, node_id in enumerate(ids)}
    next_id = max(ids) + 1
    flat = host.schema.startswith("1.0.1")
    parts: list[bytes] = []
    for chunk in doc.chunks():
        for raw in chunk:
            i = index_of[raw["id"]]
            _annotate(raw, linked, i, ids)
            parts.append(orjson.dumps(raw))
    for i in range(len(host.ops) - linked.report.runtime_ops, len(host.ops)):  # the CUDA runtime calls link added
        op = host.ops[i]
        p = int(linked.parent[i])
        cat = PROFILER_CATEGORIES[int(linked.cat[i])] if linked.cat is not None and linked.cat[i] >= 0 else "cuda_runtime"
        node: dict[str, Any] = {"id": op.id, "name": op.name, "cat": cat, "ph": "X", "ts": float(linked.ts[i]),
                "inclusive_dur": float(linked.dur[i]), "exclusive_dur": float(linked.excl[i])}
        parent_id = host.ops[p].id if p >= 0 else op.id
        if flat:
            node.update(parent=parent_id, tid=op.tid, inputs=[], input_shapes=[], input_types=[], outputs=[],
                        output_shapes=[], output_types=[])
        else:
            node.update(ctrl_deps=parent_id, inputs={"values": [], "shapes": [], "types": []},
                        outputs={"values": [], "shapes": [], "types": []},
                        attrs=[{"name": "tid", "type": "int64", "value": op.tid}])
        parts.append(orjson.dumps(node))
    for act in sorted(linked.gpu, key=lambda a: (a.op, a.ts)):
        parent_id = host.ops[act.op].id if act.op >= 0 else next_id
        node = {"id": next_id, "name": act.name, "cat": act.category, "ph": "X", "ts": act.ts,
                                "inclusive_dur": act.dur, "exclusive_dur": act.dur, "stream": act.stream}
        if flat:  # schema 1.0.1 layout
            node.update(parent=parent_id, inputs=[], input_shapes=[], input_types=[], outputs=[], output_shapes=[],
                        output_types=[])
        else:
            node.update(ctrl_deps=parent_id, inputs={"values": [], "shapes": [], "types": []},
                        outputs={"values": [], "shapes": [], "types": []}, attrs=[])
        if act.pg_name is not None:
            node["pg_name"] = act.pg_name
        parts.append(orjson.dumps(node))
        next_id += 1
    header = dict(doc.header)
    header["nodes"] = None
    head = orjson.dumps(header)
    with atomic_output(path) as out:
        out.write(head[:head.rindex(b'"nodes":null')] + b'"nodes":[\n')
        out.write(b",\n".join(parts))
        out.write(b"\n]" + head[head.rindex(b'"nodes":null') + len(b'"nodes":null'):] + b"\n")
    return linked.report


def _annotate(raw: dict[str, Any], linked: LinkedRank, i: int, ids: list[int]) -> None:
    if not math.isnan(linked.ts[i]):
        raw["ts"] = float(linked.ts[i])
        raw["inclusive_dur"] = float(linked.dur[i])
        raw["exclusive_dur"] = float(linked.excl[i])
    p = int(linked.parent[i])
    new_parent = ids[p] if p >= 0 else ids[i]
    key = "parent" if "parent" in raw and "ctrl_deps" not in raw else "ctrl_deps"
    if raw.get(key) != new_parent:
        raw["et_parent"] = raw.get(key)
        raw[key] = new_parent
