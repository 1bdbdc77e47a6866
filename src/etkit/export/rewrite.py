"""Pass 2 of an ASTRA-sim export: one rank's file rewritten as the plan says, streamed record by record.

:func:`write_rank` (an executor task) reads the rank's columns (:func:`etkit.simulate.loader.load_columns`,
no record bytes), works out with numpy which rows change, then streams the records once more: rows
that do not change are copied byte for byte, the few that do are decoded, edited and re-encoded, so a
rank costs its columns and one record at a time, never its file's bytes.

What changes:

* METADATA and INVALID nodes, and collectives of one-member groups, are left out; a node that
  depended on one depends on what that one depended on instead (through chains of them), with the
  same kind of dependency, so the graph keeps every ordering it had;
* a collective gets its export ``pg_name``, its planned size and the comm type(s) of
  :func:`etkit.simulate.collectives.decompose` (what etkit's simulator runs in their place) (a broadcast becomes two nodes: the second has a fresh id and
  depends on the first; nodes that depended on the broadcast depend on the second), ``is_cpu_op``
  false and no ``involved_dim`` (ASTRA-sim's default group would obey it, etkit never does); an
  all-gather smaller than ``preferred-dataset-splits`` bytes grows to it (ASTRA-sim cuts it into
  empty chunks and loops forever; in etkit's model the few bytes cost nothing: transfers are floored
  to whole ns);
* a SEND gets ``comm_src`` = its rank and a RECV ``comm_dst`` = its rank, both a ``comm_tag`` (0 where
  missing) and the planned ``comm_size``; a RECV its planned ``comm_src``;
* a repeated dependency is written once (feeders never release such a node);
* a measured trace (one with start times: a PyTorch conversion) is written as etkit replays it, so
  that ASTRA-sim, which replays ``duration_micros``, gives what etkit gives: each compute node's
  duration becomes the one etkit's workload layer derives (:func:`etkit.simulate.workload.build_program`:
  the measured gaps of the main thread kept, recorded waits on communication removed), the extra
  dependencies it adds (an op that started only once a communication had ended waits for it) become
  control dependencies, and start times go (so etkit reads the export as the plain replay it is);
* a rank left without nodes gets one idle COMP node (ASTRA-sim refuses a file with no node to start);
* a rank with CPU or MEM nodes ends with one more GPU COMP node of no duration (1 ns in both simulators)
  that depends on the rank's last nodes: when such a rank finishes, ASTRA-sim's statistics throw ("Only
  GPU and COMM types are supported for overlap extraction", ``Statistics.cc``); the event loop catches
  that when a compute node ended the rank, but a rank ended by a send/recv completion aborts the whole
  run before the other ranks finish.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import field

import numpy as np

from ..arrays import distinct
from ..format.attrs import make_attr
from ..format.schema import CommType, GlobalMetadata, Node, NodeType
from ..format.stream import TraceWriter, open_trace
from ..model.groups import communicator_key
from ..model.trace import MISSING, Trace, comm_type_name
from ..records import record
from ..simulate.collectives import decompose
from ..simulate.config import Knobs
from ..simulate.loader import load_columns
from ..simulate.workload import K_CPU, K_GPU, build_program
from .plan import DROPPED_TYPES, RankTask

__all__ = ["RankWritten", "write_rank", "IDLE_NODE_NAME", "END_NODE_NAME"]

IDLE_NODE_NAME = "etkit export: idle rank"
END_NODE_NAME = "etkit export: end of rank"
_COLL, _SEND, _RECV = int(NodeType.COMM_COLL_NODE), int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)
_MEM = (int(NodeType.MEM_LOAD_NODE), int(NodeType.MEM_STORE_NODE))
_ALL_GATHER = int(CommType.ALL_GATHER)
#: Without the system ASTRA-sim gets, all-gathers below this size are reported: they hang there when
#: ``preferred-dataset-splits`` exceeds them.
SMALL_ALL_GATHER = 64


@record
class RankWritten:
    rank: int
    nodes_in: int
    nodes_out: int
    changes: Counter = field(default_factory=Counter)


def _idle_node(node_id: int) -> Node:
    return Node(id=node_id, name=IDLE_NODE_NAME, type=NodeType.COMP_NODE, attr=[make_attr("is_cpu_op", False)])


def _end_node(trace: Trace, edits: _RankEdits, written: list[np.ndarray], referenced: list[np.ndarray],
              node_id: int) -> Node:
    """A GPU node of no duration after every node of the rank that no other written node depends on."""
    copied = np.flatnonzero(~edits.drop & ~edits.reencode)
    ids = np.concatenate([trace.ids[copied].astype(np.int64), *written])
    parents = [np.concatenate([trace.data_deps[_entries(trace.data_ptr, copied)[0]],
                               trace.ctrl_deps[_entries(trace.ctrl_ptr, copied)[0]]]).astype(np.int64), *referenced]
    sinks = np.setdiff1d(ids, np.concatenate(parents))
    node = Node(id=node_id, name=END_NODE_NAME, type=NodeType.COMP_NODE, attr=[make_attr("is_cpu_op", False)])
    node.data_deps.extend(sinks.tolist())
    return node


def write_rank(task: RankTask) -> RankWritten:
    """Executor task: write ``task.target`` for one rank (see the module docstring)."""
    if task.source is None:
        with TraceWriter(task.target, GlobalMetadata(version="0.0.4")) as writer:
            writer.write(_idle_node(0))
        return RankWritten(task.rank, 0, 1, Counter({"idle ranks": 1}))
    trace = load_columns(task.source).trace
    edits = _RankEdits(trace, task)
    done = RankWritten(task.rank, len(trace), 0, edits.changes)
    needs_end = bool(np.isin(trace.types[~edits.drop], _MEM).any()
                     or ((trace.types == int(NodeType.COMP_NODE)) & (trace.is_cpu_op == 1) & ~edits.drop).any())
    written: list[np.ndarray] = []
    referenced: list[np.ndarray] = []
    with open_trace(task.source) as reader, TraceWriter(task.target, reader.metadata_record) as writer:
        drop, reencode = edits.drop, edits.reencode
        for row, payload in enumerate(reader.records()):
            if drop[row]:
                continue
            if not reencode[row]:
                writer.write_record(payload)
                continue
            node = Node()
            node.ParseFromString(payload)
            for out in edits.apply(row, node):
                writer.write(out)
                if needs_end:
                    written.append(np.asarray([out.id], dtype=np.int64))
                    referenced.append(np.asarray([*out.data_deps, *out.ctrl_deps], dtype=np.int64))
        if writer.nodes_written == 0:
            writer.write(_idle_node(task.next_id))
            edits.changes["idle nodes added"] += 1
        elif needs_end:
            writer.write(_end_node(trace, edits, written, referenced, task.next_id + edits.extra_ids))
            edits.changes["end nodes added (ASTRA-sim's statistics)"] += 1
        done.nodes_out = writer.nodes_written
    return done


def _set_attr(node: Node, name: str, value: object) -> None:
    for attr in node.attr:
        if attr.name == name:
            attr.CopyFrom(make_attr(name, value))
            return
    node.attr.append(make_attr(name, value))


def _drop_attr(node: Node, name: str) -> None:
    kept = [a for a in node.attr if a.name != name]
    if len(kept) != len(node.attr):
        del node.attr[:]
        node.attr.extend(kept)


def _entries(ptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in a CSR value array of the lists of ``rows``, and the row owning each position."""
    counts = ptr[rows + 1] - ptr[rows]
    owner = np.repeat(rows, counts)
    first = np.repeat(ptr[rows] - (np.cumsum(counts) - counts), counts)
    return first + np.arange(int(counts.sum()), dtype=np.int64), owner


class _RankEdits:
    """Which rows of one rank are dropped or re-encoded, and how each re-encoded row changes."""

    def __init__(self, trace: Trace, task: RankTask) -> None:
        self.task = task
        self.changes: Counter = Counter()
        n = len(trace)
        types = trace.types
        self.ids = trace.ids
        coll_rows = np.flatnonzero(types == _COLL)
        drop = np.isin(types, DROPPED_TYPES)
        self.changes["METADATA nodes dropped"] = int((types == int(NodeType.METADATA_NODE)).sum())
        self.changes["INVALID nodes dropped"] = int((types == int(NodeType.INVALID_NODE)).sum())
        # per collective row: export pg_name, members, size
        self.pg_name: dict[int, str] = {}
        self.members: dict[int, int] = {}
        pg_idx = trace.pg_idx[coll_rows]
        for idx in distinct(pg_idx).tolist():
            key = communicator_key(None if idx < 0 else trace.strings[idx])
            name, members = task.groups[key]
            rows = coll_rows[pg_idx == idx]
            if name is None:
                drop[rows] = True
                self.changes["single-rank collectives dropped"] += len(rows)
                continue
            for r in rows.tolist():
                self.pg_name[r] = name
                self.members[r] = members
        self.drop = drop
        self.coll_size = _by_id(trace.ids, coll_rows, task.coll_ids, task.coll_size)
        self.comm_type = trace.comm_type
        bcast = np.zeros(n, dtype=bool)
        bcast[coll_rows] = (trace.comm_type[coll_rows] == int(CommType.BROADCAST)) & ~drop[coll_rows]
        self.second_id = np.full(n, -1, dtype=np.int64)
        b_rows = np.flatnonzero(bcast)
        self.second_id[b_rows] = task.next_id + np.arange(len(b_rows))
        self.extra_ids = len(b_rows)  # ids the export hands out from task.next_id on
        send_rows, recv_rows = np.flatnonzero(types == _SEND), np.flatnonzero(types == _RECV)
        self.send_size = _by_id(trace.ids, send_rows, task.send_ids, task.send_size)
        self.recv_size = _by_id(trace.ids, recv_rows, task.recv_ids, task.recv_size)
        self.recv_src = _by_id(trace.ids, recv_rows, task.recv_ids, task.recv_src)
        self.types = types
        self.mem_size: dict[int, int] = {}
        if task.mem_min_bytes:
            mem_rows = np.flatnonzero(np.isin(types, _MEM) & (np.where(trace.tensor_size == MISSING, 0, trace.tensor_size)
                                                                < task.mem_min_bytes))
            self.mem_size = dict.fromkeys(mem_rows.tolist(), task.mem_min_bytes)
            self.changes["MEM nodes grown to one ns of local-mem-bw"] += len(mem_rows)
        self.duration_us: np.ndarray | None
        self.duration_us, extra = _replayed(trace, task) if (trace.start > 0).any() else (None, None)
        self.deps = _rewired_deps(trace, drop, bcast, self.second_id, extra)
        reencode = np.zeros(n, dtype=bool) if self.duration_us is None else np.ones(n, dtype=bool)
        reencode[coll_rows] = True
        reencode[send_rows] = True
        reencode[recv_rows] = True
        reencode[list(self.mem_size)] = True
        reencode[list(self.deps)] = True
        self.reencode = reencode & ~drop

    def apply(self, row: int, node: Node) -> list[Node]:
        """The node(s) ``row`` becomes."""
        if self.duration_us is not None:
            node.start_time_micros = 0
            node.duration_micros = int(self.duration_us[row])
        new_deps = self.deps.get(row)
        if new_deps is not None:
            del node.data_deps[:]
            node.data_deps.extend(new_deps[0])
            del node.ctrl_deps[:]
            node.ctrl_deps.extend(new_deps[1])
        kind = self.types[row]
        if kind == _COLL:
            return self._collective(row, node)
        if kind == _SEND or kind == _RECV:
            own = self.task.rank
            _set_attr(node, "is_cpu_op", False)
            if kind == _SEND:
                _set_attr(node, "comm_src", own)
                _set_attr(node, "comm_size", int(self.send_size[row]))
            else:
                _set_attr(node, "comm_src", int(self.recv_src[row]))
                _set_attr(node, "comm_dst", own)
                _set_attr(node, "comm_size", int(self.recv_size[row]))
            if not any(a.name == "comm_tag" for a in node.attr):
                _set_attr(node, "comm_tag", 0)
                self.changes["comm_tag 0 added"] += 1
        if row in self.mem_size:
            _set_attr(node, "tensor_size", self.mem_size[row])
        return [node]

    def _collective(self, row: int, node: Node) -> list[Node]:
        original = int(self.comm_type[row]) if self.comm_type[row] != MISSING else int(CommType.ALL_REDUCE)
        parts = decompose(original, int(self.coll_size[row]), self.members[row])
        if parts[0][0] != original:
            self.changes[f"{comm_type_name(original)} written as "
                         f"{' + '.join(comm_type_name(t) for t, _ in parts)}"] += 1
        _set_attr(node, "pg_name", self.pg_name[row])
        _set_attr(node, "is_cpu_op", False)
        _drop_attr(node, "involved_dim")
        out = []
        for i, (comm_type, size) in enumerate(parts):
            part = node if i == 0 else Node()
            if i:
                part.CopyFrom(node)
                part.id = int(self.second_id[row])
                part.name = f"{node.name} [{i + 1}/{len(parts)}]"
                del part.data_deps[:]
                del part.ctrl_deps[:]
                part.data_deps.append(node.id)
            if comm_type == _ALL_GATHER:
                size = self._all_gather_size(size)
            _set_attr(part, "comm_type", comm_type)
            _set_attr(part, "comm_size", size)
            out.append(part)
        if len(parts) > 1:
            node.name = f"{node.name} [1/{len(parts)}]"
        return out


    def _all_gather_size(self, size: int) -> int:
        least = self.task.system.preferred_dataset_splits
        if size < SMALL_ALL_GATHER and not self.task.known_system:
            self.changes["all-gathers under 64 bytes (need --system)"] += 1
        if size < least:
            self.changes["all-gathers grown to preferred-dataset-splits bytes"] += 1
            return least
        return size


def _by_id(ids: np.ndarray, rows: np.ndarray, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A full-length column holding ``values[k]`` at the row whose id is ``keys[k]`` (keys sorted by id)."""
    out = np.zeros(len(ids), dtype=np.int64)
    if len(rows) and len(keys):
        pos = np.minimum(np.searchsorted(keys, ids[rows]), len(keys) - 1)
        hit = keys[pos] == ids[rows]
        out[rows[hit]] = values[pos[hit]]
    return out


def _replayed(trace: Trace, task: RankTask) -> tuple[np.ndarray, np.ndarray]:
    """Durations (us) of a measured trace as etkit replays it, and the (parent, child) rows of the
    dependencies etkit adds to it."""
    program = build_program(trace, task.rank, task.system, Knobs())
    n = len(trace)
    ns = np.frombuffer(program.duration, dtype=np.float64)
    kind = np.frombuffer(program.kind, dtype=np.int8)
    compute = (kind == K_CPU) | (kind == K_GPU)
    if task.system.roofline_enabled:  # GPU nodes with counts: both simulators take the roofline
        has_counts = (trace.num_ops != MISSING) & (trace.num_ops > 0) & (trace.tensor_size != MISSING) & (trace.tensor_size > 0)
        compute &= ~((kind == K_GPU) & has_counts)
    duration = np.where(compute, np.rint(ns / 1000.0), trace.duration).astype(np.uint64)
    ptr = np.frombuffer(program.child_ptr, dtype=np.int64)
    child = np.frombuffer(program.child_idx, dtype=np.int64)
    parent = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    listed = []
    for dptr, deps in ((trace.data_ptr, trace.data_deps), (trace.ctrl_ptr, trace.ctrl_deps)):
        listed.append(trace.rows_of(deps) * max(n, 1) + np.repeat(np.arange(n, dtype=np.int64), np.diff(dptr)))
    added = np.setdiff1d(parent * max(n, 1) + child, np.concatenate(listed))
    return duration, np.stack([added // max(n, 1), added % max(n, 1)])


def _rewired_deps(trace: Trace, drop: np.ndarray, bcast: np.ndarray, second_id: np.ndarray,
                  extra: np.ndarray | None = None) -> dict[int, tuple[list[int], list[int]]]:
    """New (data, ctrl) dependency ids of every kept row whose lists change: through dropped parents, to the
    second part of a broadcast, without a repeated entry, or with the ``extra`` (parent, child) rows as
    control dependencies."""
    n = len(trace)
    lists = ((trace.data_ptr, trace.data_deps), (trace.ctrl_ptr, trace.ctrl_deps))
    touched = drop | bcast
    affected: set[int] = set(extra[1].tolist()) if extra is not None else set()
    for ptr, deps in lists:
        if not len(deps):
            continue
        parents = trace.rows_of(deps)
        child = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
        hit = (parents >= 0) & touched[np.maximum(parents, 0)]
        affected.update(child[hit].tolist())
        key = np.sort(child * max(n, 1) + np.maximum(parents, 0))
        affected.update((key[1:][key[1:] == key[:-1]] // max(n, 1)).tolist())  # repeated deps
    affected_rows = np.asarray(sorted(r for r in affected if not drop[r]), dtype=np.int64)
    if not len(affected_rows):
        return {}
    drop_rows = np.flatnonzero(drop)
    # each dropped row's parents (both kinds), to substitute for it
    d_child, d_parent = [], []
    for ptr, deps in lists:
        pos, owner = _entries(ptr, drop_rows)
        d_child.append(owner)
        d_parent.append(trace.rows_of(deps[pos]))
    d_child_a, d_parent_a = np.concatenate(d_child), np.concatenate(d_parent)
    order = np.argsort(d_child_a, kind="stable")
    d_child_a, d_parent_a = d_child_a[order], d_parent_a[order]
    d_start = np.searchsorted(d_child_a, np.arange(n), side="left")
    d_count = np.searchsorted(d_child_a, np.arange(n), side="right") - d_start
    child_e, parent_e, kind_e, order_e = [], [], [], []
    for kind, (ptr, deps) in enumerate(lists):
        pos, owner = _entries(ptr, affected_rows)
        child_e.append(owner)
        parent_e.append(trace.rows_of(deps[pos]))
        kind_e.append(np.full(len(pos), kind, dtype=np.int64))
        order_e.append(pos)
    if extra is not None and extra.shape[1]:
        keep = ~drop[extra[1]]
        child_e.append(extra[1][keep])
        parent_e.append(extra[0][keep])
        kind_e.append(np.ones(int(keep.sum()), dtype=np.int64))
        order_e.append(np.full(int(keep.sum()), len(trace.data_deps) + len(trace.ctrl_deps), dtype=np.int64))
    child_a, parent_a = np.concatenate(child_e), np.concatenate(parent_e)
    kind_a, order_a = np.concatenate(kind_e), np.concatenate(order_e)
    for _ in range(len(drop_rows) + 1):
        hit = drop[parent_a]
        if not hit.any():
            break
        through = parent_a[hit]
        counts = d_count[through]
        pos, _ = _entries(np.concatenate([d_start, [len(d_child_a)]]), through)
        child_a = np.concatenate([child_a[~hit], np.repeat(child_a[hit], counts)])
        kind_a = np.concatenate([kind_a[~hit], np.repeat(kind_a[hit], counts)])
        order_a = np.concatenate([order_a[~hit], np.repeat(order_a[hit], counts)])
        parent_a = np.concatenate([parent_a[~hit], d_parent_a[pos]])
    out_id = np.where(bcast[parent_a], second_id[parent_a], trace.ids[parent_a].astype(np.int64))
    # one entry per (child, kind, parent), the first in list order
    key = np.lexsort((order_a, out_id, kind_a, child_a))
    child_a, kind_a, out_id, order_a = child_a[key], kind_a[key], out_id[key], order_a[key]
    first = np.ones(len(child_a), dtype=bool)
    first[1:] = (child_a[1:] != child_a[:-1]) | (kind_a[1:] != kind_a[:-1]) | (out_id[1:] != out_id[:-1])
    child_a, kind_a, out_id, order_a = child_a[first], kind_a[first], out_id[first], order_a[first]
    key = np.lexsort((order_a, kind_a, child_a))
    child_a, kind_a, out_id = child_a[key], kind_a[key], out_id[key]
    result: dict[int, tuple[list[int], list[int]]] = {int(r): ([], []) for r in affected_rows.tolist()}
    for c, k, p in zip(child_a.tolist(), kind_a.tolist(), out_id.tolist()):
        result[c][k].append(p)
    return result
