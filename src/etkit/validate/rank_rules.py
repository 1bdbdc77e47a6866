"""Rules that one rank's trace must obey on its own, checked on the columns without per-node loops.

Rules: ``empty-node``, ``duplicate-id``, ``missing-dep``, ``self-dep``, ``duplicate-dep``, ``cycle``
(over data and ctrl deps together, as feeder v3 schedules them), ``unknown-node-type``,
``unknown-comm-type``, ``comm-missing-type``, ``comm-missing-size``, ``comm-on-cpu``,
``p2p-missing-peer``, ``p2p-missing-tag``, ``p2p-wrong-self``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..arrays import distinct
from ..format.schema import CommType, NodeType
from ..model.edges import edges
from ..model.trace import MISSING, Trace, TraceBatch
from .findings import WARNING, FindingSink

__all__ = ["check_trace", "quiet_files"]

_COLL = int(NodeType.COMM_COLL_NODE)
_SEND = int(NodeType.COMM_SEND_NODE)
_RECV = int(NodeType.COMM_RECV_NODE)


def _known_table(values: list[int]) -> np.ndarray:
    """``table[v]`` is True for the values; one more entry (False) for every value outside ``0..max``."""
    table = np.zeros(max(values) + 2, dtype=bool)
    table[values] = True
    return table


_KNOWN_TYPES = _known_table([int(t) for t in NodeType])
_KNOWN_COMM = _known_table([int(c) for c in CommType])


def _unknown(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Where ``values`` are not among the values of ``table`` (:func:`_known_table`)."""
    index = values.astype(np.int64)
    index[(index < 0) | (index >= table.size)] = table.size - 1
    unknown: np.ndarray = ~table[index]
    return unknown


_MAX_CYCLE_IDS = 10


def _ids(trace: Trace, rows: np.ndarray) -> list[int]:
    return [int(x) for x in trace.ids[rows]]


def _check_ids(trace: Trace, sink: FindingSink) -> None:
    empty = np.flatnonzero(trace.rec_len == 0)
    for row in empty:
        sink.add(int(trace.ids[row]), "empty-node", f"record {row + 1} is empty (zero length): "
                 "other readers stop reading the file there")
    if (trace.ids[1:] > trace.ids[:-1]).all():  # ids in increasing order (the norm) cannot repeat
        return
    uniq, counts = np.unique(trace.ids, return_counts=True)
    for node_id, count in zip(uniq[counts > 1], counts[counts > 1]):
        sink.add(int(node_id), "duplicate-id", f"id {node_id} is used by {count} nodes")


def _check_deps(trace: Trace, sink: FindingSink, kind: str) -> np.ndarray:
    """Checks one dependency list kind; returns ``(src_row, dst_row)`` edges that resolve."""
    found = edges(trace, kind)
    deps, src, dst = found.ids, found.child, found.parent  # (src: the node listing dep; dst: the dep's row)
    for i in np.flatnonzero(dst < 0):
        sink.add(int(trace.ids[src[i]]), "missing-dep", f"{kind} dep {int(deps[i])} is not a node of this file")
    self_loop = trace.ids[src] == deps
    for i in np.flatnonzero(self_loop):
        sink.add(int(deps[i]), "self-dep", f"node lists itself in its {kind} deps")
    for j in _repeated_entries(trace.data_ptr if kind == "data" else trace.ctrl_ptr, deps):
        sink.add(int(trace.ids[src[j]]), "duplicate-dep",
                 f"{kind} dep {int(deps[j])} is listed more than once (feeders never release such a node)")
    ok = (dst >= 0) & ~self_loop
    return np.stack([src[ok], dst[ok]])


def _repeated_entries(ptr: np.ndarray, deps: np.ndarray) -> np.ndarray:
    """Entries of the CSR lists ``(ptr, deps)`` that repeat an earlier entry of the same list, in order.

    Only lists of two or more entries can repeat, so only those are sorted.
    """
    counts = np.diff(ptr)
    long_rows = np.flatnonzero(counts > 1)
    if long_rows.size == 0:
        return long_rows
    entries = np.repeat(ptr[long_rows] - np.cumsum(np.concatenate([[0], counts[long_rows][:-1]])), counts[long_rows])
    entries += np.arange(entries.size)
    owner = np.repeat(long_rows, counts[long_rows])
    order = np.lexsort((entries, deps[entries], owner))  # by list, value, then position: the first stays first
    entries, owner, values = entries[order], owner[order], deps[entries][order]
    same = (owner[1:] == owner[:-1]) & (values[1:] == values[:-1])
    return np.sort(entries[1:][same])


def _check_cycles(trace: Trace, edges: np.ndarray, sink: FindingSink) -> None:
    n = len(trace)
    if n == 0 or edges.shape[1] == 0:
        return
    if (edges[1] < edges[0]).all():  # every dep is on an earlier row: file order is a topological order
        return
    from scipy.sparse import csr_matrix  # here: ~0.3 s to import, and most traces never need it
    from scipy.sparse.csgraph import connected_components

    graph = csr_matrix((np.ones(edges.shape[1], dtype=np.int8), (edges[0], edges[1])), shape=(n, n))
    count, labels = connected_components(graph, directed=True, connection="strong")
    if count == n:
        return
    sizes = np.bincount(labels, minlength=count)
    for label in np.flatnonzero(sizes > 1):
        rows = np.flatnonzero(labels == label)
        ids = sorted(_ids(trace, rows))
        shown = ", ".join(map(str, ids[:_MAX_CYCLE_IDS])) + (" ..." if len(ids) > _MAX_CYCLE_IDS else "")
        sink.add(ids[0], "cycle", f"{len(ids)} nodes depend on each other in a cycle (data+ctrl deps): {shown}")


def _check_enums(trace: Trace, sink: FindingSink) -> None:
    for row in np.flatnonzero(_unknown(trace.types, _KNOWN_TYPES)):
        sink.add(int(trace.ids[row]), "unknown-node-type", f"node type {int(trace.types[row])} is not in the schema")
    has_type = trace.comm_type != MISSING
    coll = trace.types == _COLL
    for row in np.flatnonzero(coll & has_type & _unknown(trace.comm_type, _KNOWN_COMM)):
        sink.add(int(trace.ids[row]), "unknown-comm-type", f"comm_type {int(trace.comm_type[row])} is not in the schema")


def _check_comm(trace: Trace, sink: FindingSink) -> None:
    types = trace.types
    coll = types == _COLL
    send = types == _SEND
    recv = types == _RECV
    comm = coll | send | recv
    for row in np.flatnonzero(coll & (trace.comm_type == MISSING)):
        sink.add(int(trace.ids[row]), "comm-missing-type", "collective node has no comm_type attribute")
    for row in np.flatnonzero(comm & (trace.comm_size == MISSING)):
        sink.add(int(trace.ids[row]), "comm-missing-size", "communication node has no comm_size attribute")
    for row in np.flatnonzero(comm & (trace.comm_size != MISSING) & (trace.comm_size < 0)):
        sink.add(int(trace.ids[row]), "comm-negative-size",
                 f"comm_size is {int(trace.comm_size[row])}: a number of bytes cannot be negative")
    for row in np.flatnonzero(comm & (trace.is_cpu_op == 1)):
        sink.add(int(trace.ids[row]), "comm-on-cpu", "communication node has is_cpu_op=true (ASTRA-sim aborts on it)")
    for row in np.flatnonzero(send & (trace.comm_dst == MISSING)):
        sink.add(int(trace.ids[row]), "p2p-missing-peer", "send node has no comm_dst")
    for row in np.flatnonzero(recv & (trace.comm_src == MISSING)):
        sink.add(int(trace.ids[row]), "p2p-missing-peer", "recv node has no comm_src")
    for row in np.flatnonzero((send | recv) & (trace.comm_tag == MISSING)):
        sink.add(int(trace.ids[row]), "p2p-missing-tag", "send/recv node has no comm_tag (it matches any tag)",
                 WARNING)
    rank = sink.rank
    for row in np.flatnonzero(send & (trace.comm_src != MISSING) & (trace.comm_src != rank)):
        sink.add(int(trace.ids[row]), "p2p-wrong-self",
                 f"send node has comm_src={int(trace.comm_src[row])} but is on rank {rank}")
    for row in np.flatnonzero(recv & (trace.comm_dst != MISSING) & (trace.comm_dst != rank)):
        sink.add(int(trace.ids[row]), "p2p-wrong-self",
                 f"recv node has comm_dst={int(trace.comm_dst[row])} but is on rank {rank}")


def check_trace(trace: Trace, sink: FindingSink) -> None:
    """Add every single-rank finding of ``trace`` to ``sink``."""
    _check_ids(trace, sink)
    data_edges = _check_deps(trace, sink, "data")
    ctrl_edges = _check_deps(trace, sink, "ctrl")
    _check_cycles(trace, np.concatenate([data_edges, ctrl_edges], axis=1), sink)
    _check_enums(trace, sink)
    _check_comm(trace, sink)


def quiet_files(batch: TraceBatch, ranks: Sequence[int]) -> np.ndarray:
    """Per file of ``batch`` (as rank ``ranks[i]``): True where :func:`check_trace` certainly finds nothing in it,
    False where it may. Decided on the batch's joined columns at once (a few dozen numpy calls a batch, not per
    rank) by a stricter test than the rules': ids rising, every dependency on an earlier node of its file, no list
    with an entry that does not rise (unless it repeats nothing), nothing the enum and communication rules name.
    A file that passes breaks no rule; the caller checks the others with :func:`check_trace`."""
    cols, bounds = batch.columns, batch.bounds
    files = bounds.size - 1
    counts = np.diff(bounds)
    ids = cols.ids
    owner = np.repeat(np.arange(files, dtype=np.int64), counts)
    has = counts > 0
    loud = np.zeros(ids.size, dtype=bool)  # rows a rule may report
    loud[1:] = ids[1:] <= ids[:-1]  # ids rising in each file: none repeats
    loud[bounds[:-1][has]] = False  # (a file's first row follows no row of its file)
    loud |= batch.rec_len == 0
    first_id = np.zeros(files, dtype=np.uint64)
    first_id[has] = ids[bounds[:-1][has]]
    last_id = np.zeros(files, dtype=np.uint64)
    last_id[has] = ids[bounds[1:][has] - 1]
    dense = last_id - first_id == counts.astype(np.uint64) - np.uint64(1)
    for ptr, deps in ((cols.data_ptr, cols.data_deps), (cols.ctrl_ptr, cols.ctrl_deps)):
        if not deps.size:
            continue
        child = np.repeat(np.arange(ids.size, dtype=np.int64), np.diff(ptr))
        file = owner[child]
        late = (deps >= ids[child]) | (deps < first_id[file])  # itself, a later node, or none of the file's
        _not_a_node(deps, late, file, ~dense, ids, bounds)
        loud[child[late]] = True
        loud[_rows_with_repeats(ptr, deps)] = True
    types = cols.types
    loud |= _unknown(types, _KNOWN_TYPES)
    coll, send, recv = types == _COLL, types == _SEND, types == _RECV
    comm_type = batch.int_column("comm_type")
    loud |= coll & _unknown(comm_type, _KNOWN_COMM)  # (MISSING too: it is no member)
    comm = coll | send | recv
    loud |= comm & ((batch.int_column("comm_size") < 0) | (cols.is_cpu_op == 1))  # (MISSING is below 0)
    src, dst = batch.int_column("comm_src"), batch.int_column("comm_dst")
    loud |= (send | recv) & (batch.int_column("comm_tag") == MISSING)
    rank = np.asarray(ranks, dtype=np.int64)[owner]
    loud |= send & ((dst == MISSING) | ((src != MISSING) & (src != rank)))
    loud |= recv & ((src == MISSING) | ((dst != MISSING) & (dst != rank)))
    quiet: np.ndarray = np.bincount(owner[loud], minlength=files) == 0
    return quiet


def _not_a_node(deps: np.ndarray, late: np.ndarray, file: np.ndarray, sparse: np.ndarray, ids: np.ndarray,
                bounds: np.ndarray) -> None:
    """Marks in ``late`` the entries ``deps`` (of file ``file``, ascending) that name no node of their file, for the
    files whose ids, rising, are ``sparse`` (not consecutive; in the others every id from the first to the last is a node)."""
    look = np.flatnonzero(sparse[file] & ~late)
    if not look.size:
        return
    f = file[look]
    cuts = np.flatnonzero(np.concatenate([[True], f[1:] != f[:-1], [True]]))
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist()):  # one search per such file
        k = int(f[lo])
        own = ids[bounds[k]:bounds[k + 1]]
        entries = look[lo:hi]
        at = np.minimum(np.searchsorted(own, deps[entries]), own.size - 1)
        late[entries[own[at] != deps[entries]]] = True


def _rows_with_repeats(ptr: np.ndarray, deps: np.ndarray) -> np.ndarray:
    """Rows whose list (CSR ``ptr``, ``deps``) holds an entry twice: only lists with an entry not above the one before
    it can, and only those are sorted (:func:`_repeated_entries`)."""
    if deps.size < 2:
        return np.zeros(0, dtype=np.int64)
    inside = np.ones(deps.size - 1, dtype=bool)  # entries k and k + 1 are of one list
    starts = ptr[1:-1]
    inside[starts[(starts > 0) & (starts < deps.size)] - 1] = False
    suspect = np.flatnonzero(inside & (deps[1:] <= deps[:-1]))
    if not suspect.size:
        return suspect
    rows = distinct(np.searchsorted(ptr, suspect, side="right") - 1)
    sizes = ptr[rows + 1] - ptr[rows]
    sub_ptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=sub_ptr[1:])
    entries = np.repeat(ptr[rows] - sub_ptr[:-1], sizes) + np.arange(int(sub_ptr[-1]))
    repeated = _repeated_entries(sub_ptr, deps[entries])
    found: np.ndarray = rows[np.searchsorted(sub_ptr, repeated, side="right") - 1]
    return found
