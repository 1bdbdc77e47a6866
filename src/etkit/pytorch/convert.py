"""Converting one linked rank (host ET + Kineto) into a Chakra ET file.

What each host op becomes:

* every collective call becomes exactly one COMM node: the outermost op of its chain
  (``_c10d_functional::*`` > ``c10d::*`` > ``record_param_comms`` > ``gloo:*``/``nccl:*`` > NCCL kernel).
  The inner members are folded into it: their Kineto interval is the COMM node's start and duration
  (the backend's or kernel's execution, not the enqueue), their tensors give its size.
  ``comm_type``/``comm_size``/``pg_name`` on collectives; ``comm_src``/``comm_dst`` (global ranks),
  ``comm_tag``, ``comm_size``, ``pg_name`` on send/recv. Comm nodes have ``is_cpu_op=false``.
* ``process_group:init`` becomes the METADATA node (``inputs.values = "['<json list>']"``); when the host
  trace lacks it, it is built from Kineto's ``distributedInfo``.
* every other op is a COMP node (``is_cpu_op`` true, or false with ``stream`` for GPU activity) whose
  duration is its exclusive (self) time.

Node ids are dense, in order of (start time, depth-first position): parents come before children and every dependency
points to a smaller id, so the graph is acyclic by construction and nodes are written sorted by id.
Data deps: each thread's ops form a chain in start order; GPU activity follows its stream and its launch;
a COMM node depends on the op before it on its thread (it is issued there) and on the previous
collective of its group; the first op that touches a collective's tensors afterwards (the wait) depends on
the COMM node; an op that reads a tensor another thread wrote depends on the writer. Ctrl deps name the
parent op (never a COMM node, which would make feeder v3 wait for the collective).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import field
from typing import Any

import numpy as np
import orjson

from ..format import assemble
from ..format.assemble import INPUTS, OUTPUTS, AttrPieces, IoPieces, id_varints, metadata_record, node_record
from ..format.attrs import PROFILER_CATEGORIES
from ..format.schema import SCHEMA_VERSION, CommType, NodeType
from ..format.stream import TraceWriter
from ..records import record
from .comm import (
    CommArgumentError,
    CommKind,
    Family,
    classify_kernel,
    classify_op,
    group_name_arg,
    is_comm_kernel,
    message_bytes,
    p2p_peer_and_tag,
    process_group_entries,
)
from .device import MEMORY_CATEGORIES, DeviceWaits, device_waits, gpu_node_type
from .host import KERNEL as _HOSTOPS
from .host import KNOWN_SCHEMAS, HostOp, HostTraceError
from .link import GpuActivity, LinkedRank

__all__ = ["RankReport", "P2PCall", "convert_linked", "convert_linked_bytes", "GroupInfo", "groups_of_rank"]

PG_INIT = "process_group:init"
#: Worker threads ProcessGroupGloo starts per group (two per device; one CPU device).
GLOO_THREADS_PER_GROUP = 2
_FAMILY_DEPTH = {Family.FUNCTIONAL: 0, Family.DISPATCH: 1, Family.PARAM: 2, Family.BACKEND: 3, Family.KERNEL: 4}


@record
class GroupInfo:
    """Process groups one rank knows: ``pg_name`` -> global ranks (group-rank order), plus descriptions."""

    ranks: dict[str, list[int]] = field(default_factory=dict)
    descs: dict[str, str] = field(default_factory=dict)
    world_size: int | None = None
    source: str = "none"

    def members(self, pg_name: str) -> list[int]:
        ranks = self.ranks.get(pg_name) or []
        if not ranks and self.world_size:
            return list(range(self.world_size))
        return ranks

    def to_global(self, pg_name: str, group_rank: int) -> int | None:
        """The global rank of ``group_rank`` in group ``pg_name``; ``None`` when the group's members are
        unknown. A rank outside a known group raises :class:`CommArgumentError`."""
        # only the default group spans the world; a subgroup without recorded ranks is unknown
        members = self.ranks.get(pg_name) or (self.members(pg_name) if pg_name == "0" else [])
        if not members:
            return None
        if not 0 <= group_rank < len(members):
            raise CommArgumentError(f"peer rank {group_rank} is outside process group {pg_name!r} "
                                    f"({len(members)} ranks)")
        return members[group_rank]


@record
class RankReport:
    """What converting one rank produced."""

    rank: int
    path: str
    nodes: int = 0
    comm_nodes: dict[str, int] = field(default_factory=dict)
    comm_bytes: int = 0
    gpu_nodes: int = 0
    unlinked_ops: int = 0
    unlinked_names: dict[str, int] = field(default_factory=dict)
    durations_known: bool = True
    host_ops: int = 0      # ops of the host trace: linked_ops + unlinked_ops + roots
    linked_ops: int = 0    # host ops with a Kineto event (time and duration known)
    roots: int = 0         # synthetic root ops of the host trace (never in Kineto)
    schema: str = ""
    link: dict[str, Any] = field(default_factory=dict)
    groups: dict[str, list[int]] = field(default_factory=dict)
    group_source: str = "none"
    pg_inferred: int = 0   # comm nodes whose group was inferred (gloo worker thread; the only group fitting a peer)
    pg_assumed: int = 0    # collectives of a rank with subgroups whose group is unknown: written as "0"
    peers_unmapped: int = 0  # send/recv peers of a group whose members are unknown: written as group ranks
    peers_unknown: int = 0   # send/recv without a recorded peer (backend op alone): written as -1
    folded_ops: int = 0      # host ops folded into their collective's COMM node (nodes = host_ops - folded_ops
    metadata_added: int = 0  # + gpu_nodes + metadata_added; metadata_added: METADATA node built from Kineto)
    unknown_comm_kernels: dict[str, int] = field(default_factory=dict)  # NCCL kernels of no known kind
    peers_matched: int = 0   # send/recv peers settled against the other ranks (etkit.pytorch.peers)
    gpu_events: int = 0      # GPU kernels, copies and sets of the Kineto window
    gpu_time_kineto_ns: int = 0  # their measured time in Kineto ...
    gpu_time_et_ns: int = 0      # ... and in the ET (GPU nodes, and COMM nodes that ran as a kernel): equal
    gpu_memory_nodes: int = 0    # copies and sets, written as MEM_LOAD/MEM_STORE nodes
    runtime_ops: int = 0     # CUDA runtime calls kept as host ops (launch statistics, host syncs)
    device_waits: int = 0    # cross-stream and host-device waits written as dependencies
    p2p: list[P2PCall] = field(default_factory=list)  # every send/recv with its possible peers (not in JSON)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "p2p"}


@record
class P2PCall:
    """One send/recv as written: ``peers`` maps each global peer it may have to that reading's group (one
    entry unless this rank alone cannot tell which of its groups the call used)."""

    kind: str   # "SEND" or "RECV"
    node: int   # host op id of the call
    peers: dict[int, str]
    tag: int
    size: int


# -- process groups --------------------------------------------------------------------------------------


def _pg_init_entries(op: HostOp) -> list[dict[str, Any]]:
    return process_group_entries(op.inputs, f"node {op.id} process_group:init")


def groups_of_rank(linked: LinkedRank, pg_init: HostOp | None) -> tuple[GroupInfo, list[dict[str, Any]]]:
    """Process groups from Kineto ``distributedInfo`` (complete rank lists) or the host ``process_group:init``."""
    info = GroupInfo()
    entries: list[dict[str, Any]] = []
    kin = linked.kineto
    if kin is not None and kin.pg_config:
        info.world_size = kin.world_size
        info.source = "kineto distributedInfo"
        for entry in kin.pg_config:
            name = str(entry.get("pg_name"))
            info.ranks[name] = [int(r) for r in entry.get("ranks") or []]
            info.descs[name] = str(entry.get("pg_desc", ""))
            entries.append({"pg_name": name, "pg_desc": entry.get("pg_desc", ""),
                            "backend_config": entry.get("backend_config", ""), "ranks": info.ranks[name],
                            "group_size": entry.get("pg_size", len(info.ranks[name])),
                            "group_count": len(kin.pg_config)})
    if pg_init is not None:
        host_entries = _pg_init_entries(pg_init)
        if host_entries:
            entries = host_entries if not entries else entries
            for entry in host_entries:
                name = str(entry["pg_name"])
                if name not in info.ranks or not info.ranks[name]:
                    info.ranks[name] = [int(r) for r in entry.get("ranks") or []]
                info.descs.setdefault(name, str(entry.get("pg_desc", "")))
                if not entry.get("ranks") and entry.get("group_size") and info.world_size is None:
                    info.world_size = int(entry["group_size"])
            if info.source == "none":
                info.source = "host process_group:init"
    return info, entries


def _gloo_thread_groups(linked: LinkedRank, groups: GroupInfo, rank: int | None) -> dict[int, str]:
    """Gloo worker thread -> pg_name. Each ProcessGroupGloo starts the same number of ``pt_gloo_runloop``
    threads when it is created, and groups are created in ``pg_name`` order, so this rank's member groups
    own consecutive runs of its worker thread ids."""
    kin = linked.kineto
    if kin is None or rank is None:
        return {}
    threads = kin.gloo_threads()
    mine = sorted((name for name in groups.ranks if name.isdigit() and
                   (not groups.ranks[name] or rank in groups.ranks[name])), key=int)
    # Kineto names only the worker threads that ran a profiled op: unless every group's threads are there,
    # the runs cannot be told apart (a guess would put world collectives in a subgroup)
    if not mine or len(threads) != GLOO_THREADS_PER_GROUP * len(mine):
        return {}
    per = GLOO_THREADS_PER_GROUP
    return {tid: mine[i // per] for i, tid in enumerate(threads)}


# -- conversion ------------------------------------------------------------------------------------------


@record
class _Walk:
    """The depth-first walk of a rank's repaired op tree (``_Converter.run``), per op index."""
    order: list[int]  # parents before children, siblings in start order
    key: list[float]  # sort time: the op's start, or its parent's when unknown
    kinds: list[CommKind | None]  # the comm kind of each op (None: not a comm op)
    head: list[int]  # the COMM head whose chain the op belongs to (-1: none)
    owner: list[int]  # the COMM head whose subtree the op is in (-1: none)
    ctrl: list[int]  # nearest emitted, non-COMM ancestor (the ctrl dep; -1: none)
    lane_of: list[Any]  # the op's thread lane
    pg_init: int | None  # the process_group:init op
    pg_entries: list[dict[str, Any]]  # the rank's group descriptions
    gloo_groups: dict[int, str]  # gloo worker thread -> its group


@record
class _WriteState:
    """What the dependencies of the next node depend on, updated as nodes are written in id order."""
    new_id: dict[int, int]  # ref (op index, -(GPU activity + 1)) -> node id
    waits: DeviceWaits
    ts: list[float]  # the ops' Kineto start (us; NaN: unknown)
    excl: list[float]  # the ops' exclusive time (us)
    last_on_lane: dict[Any, int] = field(default_factory=dict)  # lane -> its last node
    last_comm_of_group: dict[str, int] = field(default_factory=dict)  # pg_name -> its last COMM node
    pending_wait: dict[tuple[int, int], int] = field(default_factory=dict)  # tensor -> COMM node not waited on
    writer_of: dict[tuple[int, int], tuple[int, Any]] = field(default_factory=dict)  # tensor -> (node, lane)


class _Converter:
    def __init__(self, linked: LinkedRank, rank: int | None, out_path: str,
                 p2p_matched: dict[int, tuple[str, int]] | None = None) -> None:
        self.p2p_matched = p2p_matched or {}
        self.linked = linked
        self.host = linked.host
        self.ops = linked.host.ops
        self.rank = rank
        self.report = RankReport(rank if rank is not None else 0, out_path, schema=linked.host.schema)
        self._stream_prev: dict[int, int | None] = {}  # GPU activity -> the node before it on its stream
        self.attr_pieces = AttrPieces()
        self.io_pieces = IoPieces()
        self.templates: dict[tuple[Any, ...], bytes] = {}
        self.ids: list[bytes] = []  # varint of every node id (wire.id_varints)
        self.counts: Counter[str] = Counter()  # COMM nodes written, by kind
        self.groups = GroupInfo()
        self.kernel_chain: dict[int, int] = {}  # GPU activity -> the COMM chain head whose interval it is
        self.framed = b""  # the ET's bytes, when converted in memory (run(None))

    # Nodes are assembled from encoded pieces (etkit.format.assemble). Attributes are mostly repeated values
    # (scope 0, tid 1, the same op_schema): each distinct run of them is encoded once as a template.
    def attr(self, name: str, value: Any) -> bytes:
        return self.attr_pieces.framed(name, value)

    def _std_attrs(self, op: HostOp, is_cpu_op: bool) -> bytes:
        """rf_id, seq_id (per op), then fw_parent, scope, tid, fw_tid, op_schema, is_cpu_op (templated)."""
        int64 = self.attr_pieces.int64
        template = self.templates.get((op.fw_parent, op.scope, op.tid, op.fw_tid, op.op_schema, is_cpu_op))
        if template is None:
            template = self._template(op, is_cpu_op)
        return b"".join((int64("rf_id", op.rf_id), int64("seq_id", op.seq_id), template))

    def _template(self, op: HostOp, is_cpu_op: bool) -> bytes:
        """The encoded fw_parent, scope, tid, fw_tid, op_schema and is_cpu_op of ``op`` (kept for the next op
        with the same values)."""
        a = self.attr
        template = self.templates[(op.fw_parent, op.scope, op.tid, op.fw_tid, op.op_schema, is_cpu_op)] = b"".join([
            a("fw_parent", op.fw_parent), a("scope", op.scope), a("tid", op.tid), a("fw_tid", op.fw_tid),
            a("op_schema", op.op_schema), a("is_cpu_op", is_cpu_op)])
        return template

    def run(self, writer_path: str | None) -> RankReport:
        """Convert the rank: write ``writer_path``, or (``None``) keep the framed records in :attr:`framed`."""
        linked, ops = self.linked, self.ops
        parent = linked.parent.tolist()
        ts = self.op_ts = linked.ts.tolist()  # (read, never changed, by the walk and the writing)
        kinds, pg_init = classify_ops(ops)
        groups, pg_entries = groups_of_rank(linked, ops[pg_init] if pg_init is not None else None)
        self.groups = groups
        self.report.groups = {k: (v or groups.members(k)) for k, v in groups.ranks.items()}
        self.report.group_source = groups.source
        gloo_groups = _gloo_thread_groups(linked, groups, self.rank)

        # depth-first order of the repaired tree: parents before children
        levels = comm_levels(kinds)
        thread = linked.thread.tolist()
        tree = _HOSTOPS.walk(ops, parent, ts, levels, thread) if _HOSTOPS is not None else None
        order, key, head, owner, emitted_parent, lane_of = tree or depth_first(ops, parent, ts, levels, thread)
        return self._emit(_Walk(order, key, kinds, head, owner, emitted_parent, lane_of, pg_init, pg_entries,
                                gloo_groups), writer_path)

    def _chain_members(self, order: np.ndarray, heads: np.ndarray) -> dict[int, list[int]]:
        """COMM chain head -> its members in walk order (``order``: the walk, ``heads``: each op's head)."""
        members: dict[int, list[int]] = {}
        in_chain = np.flatnonzero(heads[order] >= 0)
        for i, h in zip(order[in_chain].tolist(), heads[order[in_chain]].tolist()):
            members.setdefault(h, []).append(i)
        return members

    def _emit(self, walk: _Walk, path: str | None) -> RankReport:
        """Write the rank's nodes: GPU activity placed, nodes put in id order, records written, report finished."""
        self._gpu_columns()
        self._exact_times()
        order, heads = np.array(walk.order, dtype=np.int64), np.array(walk.head, dtype=np.int64)
        chains = self._chain_members(order, heads)
        nodes, kernel_kind = self._place_gpu(walk, chains)
        waits = device_waits(self.linked)
        items = self._node_order(walk, waits, nodes, order, heads[order])
        self._write_nodes(path, walk, chains, items, nodes, kernel_kind, waits)
        return self._finish_report(walk, items)

    def _gpu_columns(self) -> None:
        """The GPU activities' fields the passes below read, as columns (lists, in ``linked.gpu`` order)."""
        gpu = self.linked.gpu
        self.gpu_op = [a.op for a in gpu]
        self.gpu_ts = [a.ts for a in gpu]
        self.gpu_dur = [a.dur for a in gpu]
        self.gpu_stream = [a.stream for a in gpu]
        self.gpu_name = [a.name for a in gpu]

    def _place_gpu(self, walk: _Walk, chains: dict[int, list[int]]) -> tuple[list[int], dict[int, CommKind | None]]:
        """Where each GPU activity goes: a comm kernel folds into the chain of its launching op (the first one
        only), every other activity becomes a node of its own. Returns the activities written as nodes (in
        order) and the kinds of the comm kernels among them."""
        linked, head, kinds = self.linked, walk.head, walk.kinds
        nodes: list[int] = []
        kernel_heads: list[int] = []
        cats = linked.cat if linked.cat is not None else np.full(len(self.ops), -1, dtype=np.int8)
        runtime = set(np.flatnonzero((cats == 2) | (cats == 3)).tolist())  # CUDA runtime calls
        folded_kernel: set[int] = set()  # chains that already took a kernel's interval
        parents = linked.parent
        nccl: dict[str, bool] = {}  # is_comm_kernel of each name (the others have no kind: nodes of their own)
        for g, (op, name) in enumerate(zip(self.gpu_op, self.gpu_name)):
            comm = nccl.get(name)
            if comm is None:
                comm = nccl[name] = is_comm_kernel(name)
            if not comm:
                nodes.append(g)
                continue
            caller = int(parents[op]) if op in runtime else op  # a runtime call's caller
            launch_head = head[caller] if caller >= 0 else -1
            kind = classify_kernel(name, kinds[launch_head] if launch_head >= 0 else None)
            if kind is not None and launch_head >= 0 and launch_head not in folded_kernel:
                chains[launch_head].append(-(g + 1))
                folded_kernel.add(launch_head)
                self.kernel_chain[g] = launch_head
            else:  # (a chain's further kernels are nodes of their own: every measured kernel is in the ET)
                nodes.append(g)
                if kind is not None:
                    kernel_heads.append(g)
                else:  # written as a compute kernel, and listed
                    unknown = self.report.unknown_comm_kernels
                    unknown[name] = unknown.get(name, 0) + 1
        gpu_op, gpu_name = self.gpu_op, self.gpu_name
        kernel_kind = {g: classify_kernel(gpu_name[g], kinds[head[int(parents[gpu_op[g]])]]
                                          if gpu_op[g] in runtime and head[int(parents[gpu_op[g]])] >= 0
                                          else None) for g in kernel_heads}
        return nodes, kernel_kind

    def _node_order(self, walk: _Walk, waits: DeviceWaits, nodes: list[int], order: np.ndarray,
                    heads: np.ndarray) -> list[int]:
        """The written nodes in id order: refs (op index >= 0, ``-(GPU activity + 1)``) sorted by (time,
        depth-first position). An op without a time of its own took its parent's, and its position keeps it
        after the parent and in call order among its siblings; a host call that waited for the device comes
        after that work, a COMM node that ran as a kernel after the kernel's launch. ``nodes``: the GPU
        activities written as nodes, in order; ``order``: the walk, ``heads``: the COMM head of each op in it."""
        key, report, gpu_ts, gpu_op = walk.key, self.report, self.gpu_ts, self.gpu_op
        report.device_waits = waits.count
        for i, producers in waits.host.items():
            key[i] = max([key[i]] + [gpu_ts[g] for g in producers])
        for g, h in self.kernel_chain.items():
            launch = gpu_op[g]
            if launch >= 0:  # (strictly after: on a tie the head would sort first, being earlier in the tree)
                key[h] = max(key[h], float(np.nextafter(key[launch], math.inf)))
        # refs in depth-first position order: each op not folded into its chain's COMM node, followed by the
        # activity it launched (in order); last the activity whose launch is not in the trace (by its own start)
        kept = order[(heads < 0) | (heads == order)]
        n_kept = len(kept)
        report.folded_ops += len(order) - n_kept
        op_key = np.array(key, dtype=np.float64)
        refs, keys = kept, op_key[kept]
        if nodes:
            position = np.full(len(key) + 1, -1, dtype=np.int64)  # of each kept op among the kept ones
            position[kept] = np.arange(n_kept)
            position[-1] = n_kept  # (launch not in the trace: after every op)
            act = np.array(nodes, dtype=np.int64)
            by = np.array(gpu_op, dtype=np.int64)[act]
            at = position[by]
            placed = at >= 0  # (the activity of an op folded into its COMM node has no place)
            act, by, at = act[placed], by[placed], at[placed]
            act_ts = np.array(gpu_ts, dtype=np.float64)[act]
            launcher_key = op_key[np.maximum(by, 0)]
            # max(ts, the launcher's key), as Python's max (NaN ts: NaN); the unlaunched: their own start
            act_key = np.where((by >= 0) & (launcher_key > act_ts), launcher_key, act_ts)
            # each kept op, then the activities at its position (in order): their places in the merged list
            by_place = np.argsort(at, kind="stable")
            at_sorted = at[by_place]
            acts_before = np.searchsorted(at_sorted, np.arange(n_kept), side="left")
            refs = np.empty(n_kept + len(act), dtype=np.int64)
            keys = np.empty(n_kept + len(act), dtype=np.float64)
            op_place = np.arange(n_kept) + acts_before
            act_place = np.minimum(at_sorted + 1, n_kept) + np.arange(len(act))
            refs[op_place], keys[op_place] = kept, op_key[kept]
            refs[act_place], keys[act_place] = -(act[by_place] + 1), act_key[by_place]
        # a stable sort by key keeps depth-first position order among equal keys (numpy: 20x faster than tuples)
        return refs[np.argsort(keys, kind="stable")].tolist()

    def _metadata(self) -> bytes:
        """The rank's GlobalMetadata record: the schema version and the host trace's header."""
        host = self.host
        return metadata_record(SCHEMA_VERSION, (  # (Chakra's converter leaves the version empty)
            ("schema", host.schema, None), ("pid", host.pid, "uint64_val"), ("time", host.time, None),
            ("start_ts", host.start_ts, "uint64_val"), ("finish_ts", host.finish_ts, "uint64_val")))

    def _write_nodes(self, path: str | None, walk: _Walk, chains: dict[int, list[int]], items: list[int],
                     nodes: list[int], kernel_kind: dict[int, CommKind | None], waits: DeviceWaits) -> None:
        """Write the metadata node (when the host trace has none) and every node in id order (``nodes``: the
        GPU activities written as nodes of their own)."""
        linked = self.linked
        st = _WriteState(dict(zip(items, range(1, len(items) + 1))), waits, self.op_ts, linked.excl.tolist())
        self._stream_prev = self._stream_predecessors(st.new_id, nodes)
        self.ids = id_varints(len(items) + 1)
        gpu_records, orphans = self._gpu_records(nodes, st.new_id, kernel_kind, waits)
        head, counts = walk.head, self.counts
        with TraceWriter(path, self._metadata()) as writer:
            write = writer.write_record
            if walk.pg_init is None and walk.pg_entries:
                write(self._metadata_node(0, "## process_group:init ##", walk.pg_entries))
            context = (self._host_context(walk, st, writer.write_framed, gpu_records, orphans)
                       if HOST_KERNEL is not None else None)
            k, n = 0, len(items)
            while k < n:
                if context is not None:  # the plain host ops and GPU records from k on, in C (the same bytes and state)
                    k = HOST_KERNEL.host_records(context, items, k)
                    if k == n:
                        break
                ref = items[k]
                k += 1
                if ref < 0:
                    write(gpu_records[-ref - 1])
                    label = orphans.get(-ref - 1)
                    if label is not None:  # (counted in id order, as the COMM nodes are)
                        counts[label] += 1
                elif head[ref] == ref:
                    write(self._comm_record(k, ref, walk, chains[ref], st))
                else:
                    write(self._host_record(k, ref, walk, st))
        if path is None:
            self.framed = writer.getvalue()

    def _host_context(self, walk: _Walk, st: _WriteState, write_framed: Any, gpu_records: list[bytes],
                      orphans: dict[int, str]) -> tuple[Any, ...]:
        """What ``_hostops.host_records`` reads and updates to write host ops as :meth:`_host_record` does (its
        order is the C module's ``X_*``): the walk, the write state, the encoded pieces' caches, the joins, and
        the GPU activities' records (those of ``orphans`` are left to :meth:`_write_nodes`, which counts them)."""
        attr_pieces, io_pieces = self.attr_pieces, self.io_pieces
        return (self.ops, walk.head, walk.ctrl, walk.lane_of, walk.owner, walk.pg_init, st.new_id, st.last_on_lane,
                st.pending_wait, st.writer_of, st.ts, st.excl, st.waits.host, float(self.linked.clock_offset_us),
                self.op_timing, self.templates, attr_pieces.int64_heads("rf_id"), attr_pieces.int64_heads("seq_id"),
                attr_pieces.framed("seq_id", -1), io_pieces.names, io_pieces.tails, assemble.KERNEL.io_field,
                assemble.KERNEL.record, self.ids, write_framed, INPUTS, OUTPUTS, _COMP, gpu_records, orphans)

    def _comm_record(self, nid: int, i: int, walk: _Walk, members: list[int], st: _WriteState) -> bytes:
        """The COMM node of chain head ``i``: after the op before it on its thread, the previous collective of
        its group and (when it ran as a kernel) its stream's previous node and the kernel's launch; the next op
        that touches its tensors waits for it."""
        op = self.ops[i]
        ctrl_id, lane, deps = self._issued(i, walk, st)
        node_type, start, duration, attrs, pg = self._comm_node(i, walk.kinds, members, walk.gloo_groups,
                                                                self.linked.clock_offset_us, self.counts)
        prev_comm = st.last_comm_of_group.get(pg)
        if prev_comm is not None and prev_comm not in deps:
            deps.append(prev_comm)
        st.last_comm_of_group[pg] = nid
        for m in members:  # it ran as this kernel: it also holds the kernel's place on its stream
            if m < 0:
                self._on_stream(nid, -m - 1, deps, st.new_id, st.last_on_lane, st.waits)
                launch = st.new_id.get(self.linked.gpu[-m - 1].op)  # and comes after its launch
                if launch is not None and launch not in deps and launch < nid:
                    deps.append(launch)
        for k in op.reads + op.writes:
            st.pending_wait[k] = nid
        return node_record(nid, self.io_pieces.name(op.name), node_type, ctrl_id, deps, start, duration,
                           self._io(op), attrs, self.ids)

    def _host_record(self, nid: int, i: int, walk: _Walk, st: _WriteState) -> bytes:
        """The COMP (or process_group:init METADATA) node of host op ``i``: after the op before it on its thread
        and the device work it waited for; outside a collective's subtree, after the collective whose tensors
        it touches first and after the other thread's op that wrote a tensor it reads."""
        # (runs for every host op: _issued, _io and _std_attrs are inlined)
        op = self.ops[i]
        p = walk.ctrl[i]
        lane = walk.lane_of[i]
        last_on_lane = st.last_on_lane
        prev = last_on_lane.get(lane)
        deps = [prev] if prev is not None else []
        ctrl_id = st.new_id.get(p) if p >= 0 else None
        if i == walk.pg_init:
            node_type = _METADATA
            entries = walk.pg_entries or _pg_init_entries(op)
            io = self.io_pieces.field(INPUTS, str([orjson.dumps(entries).decode()]), op.io[1], op.io[2])
        else:
            node_type = _COMP
            in_values, in_shapes, in_types, out_values, out_shapes, out_types = op.io
            field = self.io_pieces.field
            io = field(INPUTS, in_values, in_shapes, in_types) if in_values != "[]" or in_types != "[]" else b""
            if out_values != "[]" or out_types != "[]":
                io += field(OUTPUTS, out_values, out_shapes, out_types)
        start = duration = 0
        t = st.ts[i]
        int64 = self.attr_pieces.int64
        template = self.templates.get((op.fw_parent, op.scope, op.tid, op.fw_tid, op.op_schema, True))
        if template is None:
            template = self._template(op, True)
        attrs = [int64("rf_id", op.rf_id), int64("seq_id", op.seq_id), template]
        if t == t:
            start = max(0, int(t + self.linked.clock_offset_us + 0.5))
            duration = max(0, int(st.excl[i] + 0.5))
            attrs.append(self.op_timing[i])
        waited_for = st.waits.host.get(i)
        if waited_for:  # the device work this host call waited for
            for g in waited_for:
                waited = st.new_id.get(-(g + 1))
                if waited is not None and waited not in deps and waited < nid:
                    deps.append(waited)
        last_on_lane[lane] = nid
        if walk.owner[i] < 0:
            pending_wait, writer_of = st.pending_wait, st.writer_of
            if pending_wait:
                for k in op.reads + op.writes:
                    waited = pending_wait.pop(k, None)
                    if waited is not None and waited not in deps:
                        deps.append(waited)
            for k in op.reads:
                w = writer_of.get(k)
                if w is not None and w[1] != lane and w[0] not in deps:
                    deps.append(w[0])
            for k in op.writes:
                writer_of[k] = (nid, lane)
        # deps are unique by construction (each added only if not present)
        return node_record(nid, self.io_pieces.name(op.name), node_type, ctrl_id, deps, start, duration, io,
                           b"".join(attrs), self.ids)

    def _issued(self, i: int, walk: _Walk, st: _WriteState) -> tuple[int | None, Any, list[int]]:
        """Op ``i``'s ctrl parent (node id), its thread lane, and its first dep: the lane's previous node."""
        p = walk.ctrl[i]
        lane = walk.lane_of[i]
        prev = st.last_on_lane.get(lane)
        return st.new_id.get(p) if p >= 0 else None, lane, [prev] if prev is not None else []

    def _finish_report(self, walk: _Walk, items: list[int]) -> RankReport:
        """The rank's figures and warnings, once its nodes are written."""
        linked, report = self.linked, self.report
        report.metadata_added = 0 if walk.pg_init is not None or not walk.pg_entries else 1
        report.gpu_events = len(linked.gpu)
        report.gpu_time_kineto_ns = sum(self.gpu_dur_ns)
        report.runtime_ops = linked.report.runtime_ops
        if report.gpu_time_et_ns != report.gpu_time_kineto_ns:
            report.warnings.append(f"GPU time in the ET ({report.gpu_time_et_ns} ns) differs from Kineto's "
                                   f"({report.gpu_time_kineto_ns} ns)")
        report.nodes = len(items) + report.metadata_added
        report.comm_nodes = dict(self.counts)
        report.unlinked_ops = linked.report.unlinked_ops
        report.unlinked_names = linked.report.unlinked_names
        report.durations_known = linked.has_timing
        report.link = {**linked.report.to_json(), **report.link}
        report.host_ops = linked.report.host_ops
        report.linked_ops = linked.report.linked_ops
        report.roots = linked.report.roots
        report.warnings.extend(linked.report.warnings)
        if report.link.get("orphan_comm_kernels"):
            report.warnings.append(f"{report.link['orphan_comm_kernels']} NCCL kernels have no host collective: "
                                   "their comm_size is unknown (0)")
        if report.unknown_comm_kernels:
            listed = ", ".join(f"{name} x{n}" for name, n in sorted(report.unknown_comm_kernels.items()))
            report.warnings.append(f"NCCL kernels of unknown kind without a host collective, written as compute "
                                   f"nodes: {listed}")
        if report.peers_unmapped:
            report.warnings.append(f"{report.peers_unmapped} send/recv peers are ranks of a process group that is "
                                   "unknown or has unknown members: written as ranks of the default group, which "
                                   "may not be the global ranks")
        if report.peers_unknown:
            report.warnings.append(f"{report.peers_unknown} send/recv have no recorded peer (no c10d op): "
                                   "written with peer -1")
        if report.pg_assumed:
            report.warnings.append(f"{report.pg_assumed} collectives have no recorded process group and this rank "
                                   "belongs to several: assumed the default group '0'")
        if self.host.schema not in KNOWN_SCHEMAS and self.host.schema != "kineto":
            report.warnings.append(f"host trace schema {self.host.schema!r} is not one etkit was tested with; "
                                   "read with the layout of its major version")
        if not linked.has_timing:
            report.warnings.append("no Kineto timing: durations and start times are unknown (written as 0)")
        return report

    # -- node parts --------------------------------------------------------------------------------------

    def _io(self, op: HostOp) -> bytes:
        """The encoded inputs/outputs fields of a host op (omitted when they hold no value and no type)."""
        in_values, in_shapes, in_types, out_values, out_shapes, out_types = op.io
        field = self.io_pieces.field
        encoded = b""
        if in_values != "[]" or in_types != "[]":
            encoded = field(INPUTS, in_values, in_shapes, in_types)
        if out_values != "[]" or out_types != "[]":
            encoded += field(OUTPUTS, out_values, out_shapes, out_types)
        return encoded

    def _metadata_node(self, nid: int, name: str, entries: list[dict[str, Any]]) -> bytes:
        io = self.io_pieces.field(INPUTS, str([orjson.dumps(entries).decode()]), "[[]]", "['String']")
        return node_record(nid, self.io_pieces.name(name), int(NodeType.METADATA_NODE), None, [], 0, 0, io,
                           self.attr("is_cpu_op", True), [])

    def _exact_times(self) -> None:
        """Exact ns of every op's and GPU activity's Kineto start (Unix) and duration, and their encoded
        ``ts_ns``/``dur_ns``/``cat`` attributes, vectorised once."""
        linked = self.linked
        known = ~np.isnan(linked.ts)
        if not linked.gpu and not known.any():  # a host trace alone: nothing is timed
            self.op_ts_ns = self.op_dur_ns = np.zeros(len(linked.ts), dtype=np.int64)
            self.gpu_ts_ns, self.gpu_dur_ns, self.op_timing, self.gpu_timing = [], [], [], []
            return
        from .kineto import us_to_ns  # (the Kineto reader: imported where there are times)

        op_ts = np.where(known, linked.base_ns + us_to_ns(np.where(known, linked.ts, 0.0)), 0)
        op_dur = us_to_ns(np.where(known, linked.dur, 0.0))
        gpu_ts = linked.base_ns + us_to_ns(np.array(self.gpu_ts, dtype=np.float64))
        gpu_dur = us_to_ns(np.array(self.gpu_dur, dtype=np.float64))
        self.op_ts_ns, self.op_dur_ns = op_ts, op_dur  # (read for a few comm ops only: as arrays)
        self.gpu_ts_ns, self.gpu_dur_ns = gpu_ts.tolist(), gpu_dur.tolist()
        cats = linked.cat if linked.cat is not None else np.full(len(linked.ts), -1, dtype=np.int8)
        category = {c: PROFILER_CATEGORIES.index(c) for c in PROFILER_CATEGORIES}
        gpu_cat = np.array([category.get(a.category, -1) for a in linked.gpu], dtype=np.int64)
        self.op_timing = self._timing_column(op_ts, op_dur, cats)
        self.gpu_timing = self._timing_column(gpu_ts, gpu_dur, gpu_cat)

    def _timing_column(self, ts: np.ndarray, dur: np.ndarray, cat: np.ndarray) -> list[bytes]:
        """The encoded ``ts_ns``, ``dur_ns`` (and ``cat`` where known) attributes of each row."""
        return self.attr_pieces.int64_rows(("ts_ns", "dur_ns", "cat"),
                                           (np.maximum(ts, 0), np.maximum(dur, 0), np.maximum(cat, 0)), cat >= 0)

    def _ns_attrs(self, ts_ns: int, dur_ns: int, cat: int) -> bytes:
        """``ts_ns``/``dur_ns`` (the measured start in Unix ns and inclusive duration) and ``cat``."""
        int64 = self.attr_pieces.int64
        out = int64("ts_ns", ts_ns) + int64("dur_ns", dur_ns)
        return out + int64("cat", cat) if cat >= 0 else out

    def _on_stream(self, nid: int, g: int, deps: list[int], new_id: dict[int, int], last_on_lane: dict[Any, int],
                   waits: DeviceWaits) -> None:
        """Node ``nid`` runs GPU activity ``g``: it follows the previous node of the activity's stream and the
        work of other streams it waited for, and becomes the stream's last node."""
        act = self.linked.gpu[g]
        lane = ("gpu", act.stream)
        prev = self._stream_prev[g] if g in self._stream_prev else last_on_lane.get(lane)
        if prev is not None and prev not in deps:
            deps.append(prev)
        _add_waited(deps, nid, waits.gpu.get(g, ()), new_id)
        last_on_lane[lane] = nid
        self.report.gpu_time_et_ns += self.gpu_dur_ns[g]

    def _stream_predecessors(self, new_id: dict[int, int], nodes: list[int]) -> dict[int, int | None]:
        """Per written GPU activity, the node of the activity before it on its stream (None: the stream's first),
        in the stream's own order (start, then duration, then node id). Nodes are written in host order, where a COMM node that ran as a
        kernel comes at its call, possibly before kernels that ran ahead of it on its stream. ``nodes``: the
        activities that may be nodes of their own (those with an id are)."""
        node_of = {g: new_id[-g - 1] for g in nodes if -g - 1 in new_id}
        node_of.update((g, new_id[h]) for g, h in self.kernel_chain.items() if h in new_id)
        if not node_of:
            return {}
        acts = np.fromiter(node_of, dtype=np.int64, count=len(node_of))
        nids = np.fromiter(node_of.values(), dtype=np.int64, count=len(node_of))
        stream = np.array(self.gpu_stream, dtype=np.int64)[acts]
        ts = np.array(self.gpu_ts, dtype=np.float64)[acts]
        dur = np.array(self.gpu_dur, dtype=np.float64)[acts]
        order = np.lexsort((nids, dur, ts, stream))
        acts, nids, stream = acts[order].tolist(), nids[order].tolist(), stream[order].tolist()
        return {g: (nids[k - 1] if k and stream[k - 1] == stream[k] else None) for k, g in enumerate(acts)}

    def _gpu_records(self, nodes: list[int], new_id: dict[int, int], kernel_kind: dict[int, CommKind | None],
                     waits: DeviceWaits) -> tuple[list[bytes], dict[int, str]]:
        """The Node record of every GPU activity of ``nodes`` that has a node id (by activity; the others
        b""), and the label of each orphan comm kernel among them (counted where it is written, in id order).
        A record depends only on ids: its stream's previous node, the work of other streams it waited for,
        its launch. (The stream's last node is not kept in the lanes: every activity has its predecessor.)"""
        gpu, ids, report = self.linked.gpu, self.ids, self.report
        written = [g for g in nodes if -g - 1 in new_id]
        nids = [new_id[-g - 1] for g in written]
        starts, durations = self._gpu_times(written)
        name_field, stream_prev, waits_gpu, timing, gpu_op = self.io_pieces.name, self._stream_prev, waits.gpu, \
            self.gpu_timing, self.gpu_op
        heads = {s: self.attr("is_cpu_op", False) + self.attr("stream", s) for s in set(self.gpu_stream)}
        special = {g for g in written if gpu[g].category in MEMORY_CATEGORIES}.union(kernel_kind)
        records = [b""] * len(gpu)
        orphans: dict[int, str] = {}
        for g, nid, start, duration in zip(written, nids, starts, durations):
            act = gpu[g]
            op = gpu_op[g]
            launcher = new_id.get(op) if op >= 0 else None
            prev = stream_prev[g]
            deps = [prev] if prev is not None else []
            if g in waits_gpu:  # the work of other streams it waited for
                _add_waited(deps, nid, waits_gpu[g], new_id)
            if launcher is not None and launcher not in deps:
                deps.append(launcher)
            attrs = heads[act.stream] + timing[g]
            node_type = _COMP
            if g in special:
                node_type, extra, label = self._gpu_kind(act, kernel_kind.get(g))
                attrs += extra
                if label:
                    orphans[g] = label
            records[g] = node_record(nid, name_field(act.name), node_type, launcher, deps, start, duration, b"",
                                     attrs, ids)
        report.gpu_nodes += len(written)
        dur_ns = self.gpu_dur_ns
        report.gpu_time_et_ns += sum([dur_ns[g] for g in written])
        return records, orphans

    def _gpu_times(self, acts: list[int]) -> tuple[list[int], list[int]]:
        """The node start (Unix µs) and duration of each activity of ``acts``: ``max(0, int(round(...)))`` of its
        Kineto start (plus the clock's offset) and duration, with numpy (its ``rint`` rounds half to even, as
        ``round``) where every value is finite and far within int64, else one at a time (which raises)."""
        start = np.array(self.gpu_ts, dtype=np.float64)[acts] + self.linked.clock_offset_us
        duration = np.array(self.gpu_dur, dtype=np.float64)[acts]
        both = np.concatenate((start, duration))
        if bool((np.abs(both) < 2.0 ** 62).all()):  # (False for NaN)
            whole = np.maximum(np.rint(both), 0.0).astype(np.int64).tolist()
            return whole[:len(acts)], whole[len(acts):]
        return [max(0, int(round(t))) for t in start.tolist()], [max(0, int(round(d))) for d in duration.tolist()]

    def _gpu_kind(self, act: GpuActivity, kind: CommKind | None) -> tuple[int, bytes, str]:
        """Node type, further attributes and (an orphan comm kernel's) COMM label of a copy, a set or a comm
        kernel written as a node of its own."""
        a = self.attr
        node_type = gpu_node_type(act.category, act.name)
        if node_type != _COMP:
            self.report.gpu_memory_nodes += 1
            return node_type, a("tensor_size", act.nbytes) if act.nbytes >= 0 else b"", ""
        if kind is None:
            return node_type, b"", ""
        extra = a("comm_type", int(kind.comm_type)) if kind.comm_type is not None else b""
        self.report.link["orphan_comm_kernels"] = self.report.link.get("orphan_comm_kernels", 0) + 1
        return int(kind.node_type), extra + a("comm_size", 0) + a("pg_name", act.pg_name or "0"), _kind_label(kind)

    def _comm_node(self, h: int, kinds: list[CommKind | None], members: list[int], gloo_groups: dict[int, str],
                   offset: float, counts: Counter[str]) -> tuple[int, int, int, bytes, str]:
        """The COMM node of chain head ``h``: (node type, start, duration, encoded attributes, pg_name)."""
        ops, linked = self.ops, self.linked
        op = ops[h]
        kind = kinds[h]
        assert kind is not None
        # execution interval: the deepest member with timing (GPU kernel, then backend, then the head)
        exec_ts, exec_dur, best_depth, exec_cat, exec_ns, exec_stream, exec_name = _NO_TIME, 0.0, -1, -1, (0, 0), -1, ""
        pg: str | None = None
        thread_pg: str | None = None
        size_src = h
        backend = -1  # the backend op (gloo:*) of the chain, if any
        for m in members:
            if m < 0:
                act = linked.gpu[-m - 1]
                depth, t, d, cat = 5, act.ts, act.dur, PROFILER_CATEGORIES.index("kernel")
                ns, stream, name = (self.gpu_ts_ns[-m - 1], self.gpu_dur_ns[-m - 1]), act.stream, act.name
                if act.pg_name:
                    pg = pg or act.pg_name
            else:
                cat = int(linked.cat[m]) if linked.cat is not None else -1
                ns, stream, name = (int(self.op_ts_ns[m]), int(self.op_dur_ns[m])), -1, ""
                mk = kinds[m]
                depth = _FAMILY_DEPTH.get(mk.family, 0) if mk is not None else -1
                t, d = linked.ts[m], linked.dur[m]
                mop = ops[m]
                if mk is not None and mk.family in (Family.FUNCTIONAL, Family.PARAM):
                    pg = pg or (mop.extra or {}).get("pg_name") or group_name_arg(mop.inputs, mop.input_types)
                if mk is not None and mk.family == Family.BACKEND and thread_pg is None:
                    thread_pg = gloo_groups.get(int(linked.thread[m]))
                if mk is not None and mk.family == Family.DISPATCH and kind.family != Family.DISPATCH:
                    size_src = m  # dispatcher args say precisely which buffer is sent
                if mk is not None and mk.family == Family.BACKEND:
                    backend = m
            if t == t and depth > best_depth:
                exec_ts, exec_dur, best_depth, exec_cat, exec_ns, exec_stream, exec_name = t, d, depth, cat, ns, stream, name
        start = duration = 0
        timing = b""
        if exec_ts == exec_ts:
            start = max(0, int(round(exec_ts + offset)))
            duration = max(0, int(round(exec_dur)))
            timing = self._ns_attrs(*exec_ns, exec_cat)
            if exec_stream >= 0:  # it ran as a kernel on this stream, named so
                timing += self.attr("stream", exec_stream) + self.attr("kernel_name", exec_name)
        if pg is None:
            pg = thread_pg
            if pg is not None:
                self.report.pg_inferred += 1
        pg_assumed = pg is None and self._in_several_groups()
        if pg is None:
            pg = "0"
            if pg_assumed and kind.node_type == NodeType.COMM_COLL_NODE:
                self.report.pg_assumed += 1
        src = ops[size_src]
        src_kind = kinds[size_src] or kind
        size = self._message_size(size_src, backend, members, kinds, kind)
        a = self.attr
        if kind.node_type == NodeType.COMM_COLL_NODE:
            assert kind.comm_type is not None
            attrs = [a("comm_type", int(kind.comm_type)), a("comm_size", size), a("pg_name", pg)]
        else:
            me = self.rank if self.rank is not None else 0
            try:
                peer, tag = p2p_peer_and_tag(src_kind, src.inputs)
                other = self.groups.to_global(pg, peer) if peer is not None else -1
            except CommArgumentError as exc:
                raise HostTraceError(f"{self.host.path} (rank {me}): node {src.id} ({src.name}): {exc}") from None
            candidates = {other: pg} if other is not None and other >= 0 else {}
            matched = self.p2p_matched.get(op.id)
            if matched is not None:  # settled against the other ranks' send/recv (etkit.pytorch.peers)
                pg, other = matched
                candidates = {other: pg}
                self.report.peers_matched += 1
            elif pg_assumed and candidates:
                assert peer is not None and other is not None  # (a candidate is a known global peer)
                pg, other, candidates = self._p2p_group(peer, me, pg, other)
            if candidates:
                self.report.p2p.append(P2PCall(_kind_label(kind), op.id, candidates, tag or 0, size))
            if other is None:  # members unknown: the default group's ranks are the global ranks
                other = peer
                if pg != "0":
                    self.report.peers_unmapped += 1
            elif other < 0:
                self.report.peers_unknown += 1
            src_rank, dst_rank = (me, other) if kind.node_type == NodeType.COMM_SEND_NODE else (other, me)
            attrs = [a("comm_src", src_rank), a("comm_dst", dst_rank), a("comm_tag", tag or 0),
                     a("comm_size", size), a("pg_name", pg)]
        counts[_kind_label(kind)] += 1
        self.report.comm_bytes += size
        return int(kind.node_type), start, duration, self._std_attrs(op, False) + b"".join(attrs) + timing, pg


    def _message_size(self, size_src: int, backend: int, members: list[int], kinds: list[CommKind | None],
                      kind: CommKind) -> int:
        """``comm_size`` of a chain: from the op whose arguments say it (the dispatcher's, see above); when
        they do not (a Kineto trace alone: no tensors recorded, or a tensor list without element type), from
        the next member that does: record_param_comms' element count, the backend's tensor, the kernel's args."""
        ops = self.ops
        src = ops[size_src]
        size = message_bytes(kinds[size_src] or kind, src.inputs, src.outputs, src.extra)
        if self.host.schema != "kineto" or kind.comm_type == CommType.BARRIER:
            return size
        if size > 0 and not (src.extra or {}).get("dtype_assumed"):
            return size
        params = [m for m in members if m >= 0 and (mk := kinds[m]) is not None and mk.family == Family.PARAM]
        for m in params + ([backend] if backend >= 0 else []):
            found = message_bytes(kinds[m] or kind, ops[m].inputs, ops[m].outputs, ops[m].extra)
            if found > 0:
                return found
        kin = self.linked.kineto
        for m in members:
            if m < 0 and kin is not None:
                args = kin.gpu_args.get(self.linked.gpu[-m - 1].row)
                if args and args.get("In msg nelems") is not None:
                    from .kineto_convert import element_bytes

                    return int(args["In msg nelems"]) * element_bytes(str(args.get("dtype", "")))
        return size

    def _in_several_groups(self) -> bool:
        me = self.rank if self.rank is not None else 0
        return sum(1 for ranks in self.groups.ranks.values() if not ranks or me in ranks) > 1

    def _p2p_group(self, peer: int, me: int, pg: str, other: int) -> tuple[str, int, dict[int, str]]:
        """Group and global peer of a send/recv whose group was not recorded, on a rank in several groups.

        The peer argument is a rank of the (unknown) group: every group of this rank where it names another
        rank is a candidate. One global peer across them is certain; otherwise the default group's reading
        is kept and counted in ``peers_unmapped`` (warned about)."""
        candidates: dict[int, list[str]] = {}
        for name, ranks in self.groups.ranks.items():
            members = ranks or (self.groups.members(name) if name == "0" else [])
            if me in members and 0 <= peer < len(members) and members[peer] != me:
                candidates.setdefault(members[peer], []).append(name)
        if len(candidates) == 1:
            (glob, names), = candidates.items()
            self.report.pg_inferred += 1
            pg = names[0] if len(names) == 1 else pg
            return pg, glob, {glob: pg}
        self.report.peers_unmapped += 1
        return pg, other, {glob: names[0] for glob, names in candidates.items()}


_NO_TIME = float("nan")
_COMP, _METADATA = int(NodeType.COMP_NODE), int(NodeType.METADATA_NODE)


def _add_waited(deps: list[int], nid: int, producers: Iterable[int], new_id: dict[int, int]) -> None:
    """Append to ``deps`` the nodes of the GPU activities ``producers`` (other streams' work that node ``nid``'s
    activity waited for) that are written before it and not in ``deps`` yet."""
    for producer in producers:
        waited = new_id.get(-(producer + 1))
        if waited is not None and waited not in deps and waited < nid:
            deps.append(waited)


#: ``_hostops.host_records`` (plain host ops' nodes in C, the bytes of ``_host_record``), where both C modules
#: are built; None: every node in Python
HOST_KERNEL: Any = _HOSTOPS if _HOSTOPS is not None and assemble.KERNEL is not None else None


def classify_ops(ops: list[HostOp]) -> tuple[list[CommKind | None], int | None]:
    """The comm kind of each op (None: not a comm op) and the first ``process_group:init`` op (None: none)."""
    kinds: list[CommKind | None] = [None] * len(ops)
    pg_init = None
    for i, op in enumerate(ops):
        if op.inputs is not None:  # (only comm ops keep their raw arguments)
            if PG_INIT in op.name:
                pg_init = i if pg_init is None else pg_init
            else:
                kinds[i] = classify_op(op.name, op.extra, op.inputs)
    return kinds, pg_init


def comm_levels(kinds: list[CommKind | None]) -> dict[int, int]:
    """The family depth of each comm op (the chain a comm op continues; see :func:`depth_first`)."""
    return {i: _FAMILY_DEPTH[kind.family] for i, kind in enumerate(kinds) if kind is not None}


def depth_first(ops: list[HostOp], parent: list[int], ts: list[float], levels: dict[int, int],
                thread: list[int]) -> tuple[list[int], list[float], list[int], list[int], list[int], list[Any]]:
    """The depth-first walk of a rank's repaired op tree (``parent``: op index, -1 a root), roots in id order,
    siblings in start order (unknown times last, then call order): the ops in walk order, and per op its sort
    time (its start, or its parent's when unknown), COMM chain head, COMM owner, ctrl parent and thread lane
    (see :class:`_Walk`). ``levels``: the family depth of each comm op. ``_hostops.walk`` is this in C."""
    n = len(ops)
    children: list[list[int]] = [[] for _ in range(n)]
    roots: list[int] = []
    for i, p in enumerate(parent):
        (children[p] if p >= 0 else roots).append(i)
    key = [0.0] * n
    head = [-1] * n          # the COMM head whose chain op i belongs to (-1: none)
    owner = [-1] * n         # the COMM head whose subtree op i is in (-1: none)
    emitted_parent = [-1] * n  # nearest emitted, non-COMM ancestor (ctrl dep)
    lane_of: list[Any] = [None] * n
    lanes: dict[int, tuple[str, int]] = {}
    stack: list[tuple[int, float, int, int, int, Any, int]] = [(r, -math.inf, -1, -1, -1, None, -1) for r in reversed(sorted(roots, key=lambda i: ops[i].id))]
    order: list[int] = []
    while stack:
        i, parent_key, h, own, ctrl, parent_lane, chain_level = stack.pop()
        t = ts[i]
        k = parent_key if t != t else max(t, parent_key)  # NaN: inherit the parent's time
        key[i] = k
        level = levels.get(i, -1)
        if level >= 0:
            # A comm op continues its parent's chain only one layer down (c10d:: -> gloo:); a c10d op
            # under another one (recv_ under an isend in a corrupted tree) is a call of its own.
            if h < 0 or level <= chain_level:
                h = i
                own = i
        else:
            h = -1  # a compute op inside a comm op (aten::clone under reduce_scatter) is its own node
        head[i] = h
        owner[i] = own
        emitted_parent[i] = ctrl
        lane = lanes.get(thread[i]) if thread[i] >= 0 else (parent_lane or ("et", ops[i].tid))
        if lane is None:
            lane = lanes[thread[i]] = ("t", thread[i])  # one tuple per thread, not per op
        lane_of[i] = lane
        order.append(i)
        next_ctrl = ctrl if level >= 0 else i
        kids = children[i]
        if len(kids) > 1:  # visit in start order (unknown times last, then call order)
            kids.sort(key=lambda c: (ts[c] if ts[c] == ts[c] else math.inf, ops[c].id), reverse=True)
        for c in kids:
            stack.append((c, k, h, own, next_ctrl, lane, level))
    if len(order) != n:
        seen = set(order)
        for i in range(n):  # ops outside every root's tree (cannot happen after link's cycle check)
            if i not in seen:
                order.append(i)
                key[i] = ts[i] if ts[i] == ts[i] else math.inf
    return order, key, head, owner, emitted_parent, lane_of


def _kind_label(kind: CommKind) -> str:
    """Report label of a COMM node: the collective's name, or SEND / RECV."""
    if kind.comm_type is not None:
        return CommType(kind.comm_type).name
    return "SEND" if kind.node_type == NodeType.COMM_SEND_NODE else "RECV"


def convert_linked(linked: LinkedRank, out_path: str | os.PathLike[str], *, rank: int | None = None,
                   p2p_matched: dict[int, tuple[str, int]] | None = None) -> RankReport:
    """Write ``linked`` as the Chakra ET ``out_path``; returns what was written.

    ``p2p_matched`` settles send/recv whose group this rank alone cannot tell: host op id -> (pg_name,
    global peer), as :func:`etkit.pytorch.peers.match_p2p_peers` finds them across ranks."""
    return _Converter(linked, _rank_of(linked, rank), str(out_path), p2p_matched).run(str(out_path))


def _rank_of(linked: LinkedRank, rank: int | None) -> int | None:
    """``rank``, else the host trace's, else the Kineto trace's."""
    if rank is None:
        rank = linked.host.rank if linked.host.rank is not None else (
            linked.kineto.rank if linked.kineto is not None else None)
    return rank


def convert_linked_bytes(linked: LinkedRank, *, rank: int | None = None, path: str = "<memory>",
                         p2p_matched: dict[int, tuple[str, int]] | None = None) -> tuple[RankReport, bytes]:
    """:func:`convert_linked` in memory: the report and the bytes of the ET file it would write (uncompressed;
    :func:`etkit.model.trace.trace_from_bytes` reads them as :func:`etkit.model.trace.load_trace` reads the
    file). ``path`` names the rank in the report. Nothing is written."""
    converter = _Converter(linked, _rank_of(linked, rank), path, p2p_matched)
    report = converter.run(None)
    return report, converter.framed
