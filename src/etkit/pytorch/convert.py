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

import contextlib
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import attrgetter
from typing import Any

import numpy as np
import orjson

from ..fileio import atomic_output
from ..format.assemble import AttrPieces
from ..format.attrs import PROFILER_CATEGORIES, make_attr
from ..format.encode import AttrColumn, NodeTable, Packed, encode_node_chunks
from ..format.schema import SCHEMA_VERSION, CommType, GlobalMetadata, NodeType
from ..format.stream import frame
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
from .device import DeviceWaits, device_waits, gpu_node_type
from .host import KNOWN_SCHEMAS, HostOp, HostTraceError
from .kineto import us_to_ns
from .link import LinkedRank
from .records import Interned, csr_lists, int_attr_columns, io_table, packed

__all__ = ["RankReport", "P2PCall", "convert_linked", "convert_linked_bytes", "GroupInfo", "groups_of_rank"]

PG_INIT = "process_group:init"
#: Worker threads ProcessGroupGloo starts per group (two per device; one CPU device).
GLOO_THREADS_PER_GROUP = 2
_FAMILY_DEPTH = {Family.FUNCTIONAL: 0, Family.DISPATCH: 1, Family.PARAM: 2, Family.BACKEND: 3, Family.KERNEL: 4}


@dataclass
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


@dataclass
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


@dataclass
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


@dataclass
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


class _Converter:
    def __init__(self, linked: LinkedRank, rank: int | None, out_path: str,
                 p2p_matched: dict[int, tuple[str, int]] | None = None) -> None:
        self.p2p_matched = p2p_matched or {}
        self.linked = linked
        self.host = linked.host
        self.ops = linked.host.ops
        self.rank = rank
        self.report = RankReport(rank if rank is not None else 0, out_path, schema=linked.host.schema)
        self._stream_prev = np.zeros(0, dtype=np.int64)  # per GPU activity: the node before it on its stream
        self.attr_pieces = AttrPieces()
        self.counts: Counter[str] = Counter()  # COMM nodes written, by kind
        self.groups = GroupInfo()
        self.kernel_chain: dict[int, int] = {}  # GPU activity -> the COMM chain head whose interval it is
        self.framed = b""  # the ET's bytes, when converted in memory (run(None))

    # Attributes are mostly repeated values (scope 0, tid 1, the same op_schema): each distinct one, and each
    # distinct run of them, is encoded once (etkit.format.assemble.AttrPieces, _Rows).
    def attr(self, name: str, value: Any) -> bytes:
        return self.attr_pieces.framed(name, value)

    def run(self, writer_path: str | None) -> RankReport:
        """Convert the rank: write ``writer_path``, or (``None``) keep the framed records in :attr:`framed`."""
        linked, ops = self.linked, self.ops
        n = len(ops)
        parent = linked.parent.tolist()
        ts = linked.ts.tolist()
        # comm classification and chain heads
        kinds: list[CommKind | None] = [None] * n
        pg_init = None
        for i, op in enumerate(ops):
            if op.inputs is not None:
                if PG_INIT in op.name:
                    pg_init = i if pg_init is None else pg_init
                else:
                    kinds[i] = classify_op(op.name, op.extra, op.inputs)
        groups, pg_entries = groups_of_rank(linked, ops[pg_init] if pg_init is not None else None)
        self.groups = groups
        self.report.groups = {k: (v or groups.members(k)) for k, v in groups.ranks.items()}
        self.report.group_source = groups.source
        gloo_groups = _gloo_thread_groups(linked, groups, self.rank)

        # depth-first order of the repaired tree: parents before children
        children: list[list[int]] = [[] for _ in range(n)]
        roots: list[int] = []
        for i, p in enumerate(parent):
            (children[p] if p >= 0 else roots).append(i)
        key = [0.0] * n
        head = [-1] * n          # the COMM head whose chain op i belongs to (-1: none)
        owner = [-1] * n         # the COMM head whose subtree op i is in (-1: none)
        emitted_parent = [-1] * n  # nearest emitted, non-COMM ancestor (ctrl dep)
        lane_of: list[Any] = [None] * n
        thread = linked.thread.tolist()
        lanes: dict[int, tuple[str, int]] = {}
        stack: list[tuple[int, float, int, int, int, Any, int]] = [(r, -math.inf, -1, -1, -1, None, -1) for r in reversed(sorted(roots, key=lambda i: ops[i].id))]
        order: list[int] = []
        visit_key = [(t if t == t else math.inf, op.id) for t, op in zip(ts, ops)]
        while stack:
            i, parent_key, h, own, ctrl, parent_lane, chain_level = stack.pop()
            t = ts[i]
            k = parent_key if t != t else max(t, parent_key)  # NaN: inherit the parent's time
            key[i] = k
            kind = kinds[i]
            level = -1
            if kind is not None:
                level = _FAMILY_DEPTH[kind.family]
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
            next_ctrl = ctrl if kind is not None else i
            kids = children[i]
            if kids:
                if len(kids) > 1:  # visit in start order (unknown times last, then call order)
                    kids.sort(key=visit_key.__getitem__, reverse=True)
                    stack.extend([(c, k, h, own, next_ctrl, lane, level) for c in kids])
                else:
                    stack.append((kids[0], k, h, own, next_ctrl, lane, level))
        if len(order) != n:
            seen = set(order)
            for i in range(n):  # ops outside every root's tree (cannot happen after link's cycle check)
                if i not in seen:
                    order.append(i)
                    key[i] = ts[i] if ts[i] == ts[i] else math.inf
        return self._emit(_Walk(order, key, kinds, head, owner, emitted_parent, lane_of, pg_init, pg_entries,
                                gloo_groups), writer_path)

    def _chain_members(self, order: list[int], head: list[int]) -> dict[int, list[int]]:
        members: dict[int, list[int]] = {}
        for i in order:
            h = head[i]
            if h >= 0:
                members.setdefault(h, []).append(i)
        return members

    def _emit(self, walk: _Walk, path: str | None) -> RankReport:
        """Write the rank's nodes: GPU activity placed, nodes put in id order, records written, report finished."""
        self._exact_times()
        chains = self._chain_members(walk.order, walk.head)
        gpu_by_op, kernel_kind = self._place_gpu(walk, chains)
        waits = device_waits(self.linked)
        items = self._node_order(walk, waits, gpu_by_op)
        self._write_nodes(path, walk, chains, items, kernel_kind, waits)
        return self._finish_report(walk, items)

    def _place_gpu(self, walk: _Walk, chains: dict[int, list[int]]
                   ) -> tuple[dict[int, list[int]], dict[int, CommKind | None]]:
        """Where each GPU activity goes: a comm kernel folds into the chain of its launching op (the first one
        only), every other activity becomes a node of its own. Returns the activities written as nodes by
        launching op (-1: launch not in the trace) and the kinds of the comm kernels among them."""
        linked, head, kinds = self.linked, walk.head, walk.kinds
        gpu_by_op: dict[int, list[int]] = {}
        kernel_heads: list[int] = []
        cats = linked.cat if linked.cat is not None else np.full(len(self.ops), -1, dtype=np.int8)
        runtime = set(np.flatnonzero((cats == 2) | (cats == 3)).tolist())  # CUDA runtime calls
        folded_kernel: set[int] = set()  # chains that already took a kernel's interval
        parents = linked.parent
        for g, act in enumerate(linked.gpu):
            caller = int(parents[act.op]) if act.op in runtime else act.op  # a runtime call's caller
            launch_head = head[caller] if caller >= 0 else -1
            kind = classify_kernel(act.name, kinds[launch_head] if launch_head >= 0 else None)
            if kind is not None and launch_head >= 0 and launch_head not in folded_kernel:
                chains[launch_head].append(-(g + 1))
                folded_kernel.add(launch_head)
                self.kernel_chain[g] = launch_head
            else:  # (a chain's further kernels are nodes of their own: every measured kernel is in the ET)
                gpu_by_op.setdefault(act.op, []).append(g)
                if kind is not None:
                    kernel_heads.append(g)
                elif is_comm_kernel(act.name):  # written as a compute kernel, and listed
                    unknown = self.report.unknown_comm_kernels
                    unknown[act.name] = unknown.get(act.name, 0) + 1
        kernel_kind = {g: classify_kernel(linked.gpu[g].name, kinds[head[int(parents[linked.gpu[g].op])]]
                                          if linked.gpu[g].op in runtime and head[int(parents[linked.gpu[g].op])] >= 0
                                          else None) for g in kernel_heads}
        return gpu_by_op, kernel_kind

    def _node_order(self, walk: _Walk, waits: DeviceWaits, gpu_by_op: dict[int, list[int]]) -> list[int]:
        """The written nodes in id order: refs (op index >= 0, ``-(GPU activity + 1)``) sorted by (time,
        depth-first position). An op without a time of its own took its parent's, and its position keeps it
        after the parent and in call order among its siblings; a host call that waited for the device comes
        after that work, a COMM node that ran as a kernel after the kernel's launch."""
        linked, key, head, report = self.linked, walk.key, walk.head, self.report
        report.device_waits = waits.count
        for i, producers in waits.host.items():
            key[i] = max([key[i]] + [linked.gpu[g].ts for g in producers])
        for g, h in self.kernel_chain.items():
            launch = linked.gpu[g].op
            if launch >= 0:  # (strictly after: on a tie the head would sort first, being earlier in the tree)
                key[h] = max(key[h], float(np.nextafter(key[launch], math.inf)))
        # in depth-first position order: each op not folded into its chain's COMM node, then the GPU activity
        # it launched that is a node of its own
        order = np.asarray(walk.order, dtype=np.int64)
        heads = np.asarray(head, dtype=np.int64)[order]
        kept = order[(heads < 0) | (heads == order)]
        report.folded_ops += int(order.size - kept.size)
        launched = np.zeros(len(self.ops), dtype=np.int64)
        for i, acts in gpu_by_op.items():
            if i >= 0:
                launched[i] = len(acts)
        at = np.zeros(kept.size, dtype=np.int64)  # where each kept op goes
        np.cumsum(1 + launched[kept][:-1], out=at[1:])
        tail = gpu_by_op.get(-1, [])
        total = int(at[-1] + 1 + launched[kept[-1]]) if kept.size else 0
        refs = np.empty(total + len(tail), dtype=np.int64)
        keys = np.empty(total + len(tail), dtype=np.float64)
        refs[at] = kept
        keys[at] = np.asarray(key, dtype=np.float64)[kept]
        place = np.full(len(self.ops), -1, dtype=np.int64)
        place[kept] = at
        gpu = linked.gpu
        for i, acts in gpu_by_op.items():
            p = int(place[i]) if i >= 0 else -1
            if p >= 0:
                k = key[i]
                for j, g in enumerate(acts, p + 1):
                    refs[j] = -(g + 1)
                    keys[j] = max(gpu[g].ts, k)
        for j, g in enumerate(tail, total):  # activity whose launch is not in the trace: by its own start
            refs[j] = -(g + 1)
            keys[j] = gpu[g].ts
        # a stable sort by key keeps depth-first position order among equal keys
        ordered: list[int] = refs[np.argsort(keys, kind="stable")].tolist()
        return ordered

    def _metadata(self) -> Any:
        """The rank's GlobalMetadata: the schema version and the host trace's header."""
        meta = GlobalMetadata(version=SCHEMA_VERSION)  # Chakra's converter leaves it empty
        host = self.host
        meta.attr.extend([make_attr("schema", host.schema), make_attr("pid", host.pid, "uint64_val"),
                          make_attr("time", host.time), make_attr("start_ts", host.start_ts, "uint64_val"),
                          make_attr("finish_ts", host.finish_ts, "uint64_val")])
        return meta

    def _write_nodes(self, path: str | None, walk: _Walk, chains: dict[int, list[int]], items: list[int],
                     kernel_kind: dict[int, CommKind | None], waits: DeviceWaits) -> None:
        """Write the metadata node (when the host trace has none) and every node in id order: the nodes are
        decided as columns (:class:`_Rows`), then encoded together (etkit.format.encode)."""
        metadata = frame(self._metadata().SerializeToString())
        with contextlib.nullcontext(None) if path is None else atomic_output(path) as out:
            table = _Rows(self, walk, chains, items, kernel_kind, waits).table()
            # about _CHUNK_BYTES of records at a time: the encoder's working arrays are several times their bytes
            io = table.io
            row_bytes = 120 + (io.data.size if isinstance(io, Packed) else 0) // max(1, table.ids.size)
            rows = min(max(_CHUNK_BYTES // row_bytes, 1 << 10), 1 << 14)
            chunks = chain([metadata], encode_node_chunks(table, rows))
            if out is None:
                self.framed = b"".join(chunks)
            else:
                for chunk in chunks:
                    out.write(chunk)

    def _finish_report(self, walk: _Walk, items: list[int]) -> RankReport:
        """The rank's figures and warnings, once its nodes are written."""
        linked, report = self.linked, self.report
        report.metadata_added = 0 if walk.pg_init is not None or not walk.pg_entries else 1
        report.gpu_events = len(linked.gpu)
        report.gpu_time_kineto_ns = int(self.gpu_dur_ns.sum())
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

    def _exact_times(self) -> None:
        """Exact ns of every op's and GPU activity's Kineto start (Unix) and duration (0 where unknown), and the
        GPU activities' ``cat`` codes, vectorised once."""
        linked = self.linked
        known = ~np.isnan(linked.ts)
        op_ts = np.where(known, linked.base_ns + us_to_ns(np.where(known, linked.ts, 0.0)), 0)
        op_dur = us_to_ns(np.where(known, linked.dur, 0.0))
        gpu = linked.gpu
        self.gpu_ts_us = np.fromiter((a.ts for a in gpu), dtype=np.float64, count=len(gpu))
        self.gpu_dur_us = np.fromiter((a.dur for a in gpu), dtype=np.float64, count=len(gpu))
        self.gpu_stream = np.fromiter((a.stream for a in gpu), dtype=np.int64, count=len(gpu))
        self.gpu_op = np.fromiter((a.op for a in gpu), dtype=np.int64, count=len(gpu))
        gpu_ts = linked.base_ns + us_to_ns(self.gpu_ts_us)
        gpu_dur = us_to_ns(self.gpu_dur_us)
        self.op_ts_ns, self.op_dur_ns, self.gpu_ts_ns, self.gpu_dur_ns = op_ts, op_dur, gpu_ts, gpu_dur
        self.gpu_cat = np.array([PROFILER_CATEGORIES.index(a.category) if a.category in PROFILER_CATEGORIES else -1
                                 for a in linked.gpu], dtype=np.int64)

    def _stream_predecessors(self, nid_of_op: np.ndarray, nid_of_gpu: np.ndarray) -> np.ndarray:
        """Per GPU activity, the node of the written activity before it on its stream (-1: the stream's first, or
        the activity is not written), in the stream's own order (start, then duration, then node id). ``nid_of_op``
        and ``nid_of_gpu``: the node id of each op and activity (-1: none). Nodes are written in host order,
        where a COMM node that ran as a kernel comes at its call, possibly before kernels that ran ahead of it
        on its stream."""
        node = nid_of_gpu.copy()
        chained = np.fromiter(self.kernel_chain, dtype=np.int64, count=len(self.kernel_chain))
        node[chained] = nid_of_op[np.fromiter(self.kernel_chain.values(), dtype=np.int64, count=chained.size)]
        acts = np.flatnonzero(node >= 0)
        out = np.full(node.size, -1, dtype=np.int64)
        if not acts.size:
            return out
        nids, stream = node[acts], self.gpu_stream[acts]
        order = np.lexsort((nids, self.gpu_dur_us[acts], self.gpu_ts_us[acts], stream))
        acts, nids, stream = acts[order], nids[order], stream[order]
        out[acts[1:]] = np.where(stream[1:] == stream[:-1], nids[:-1], -1)
        return out

    def _comm_node(self, h: int, kinds: list[CommKind | None], members: list[int], gloo_groups: dict[int, str],
                   offset: float) -> tuple[int, int, int, bytes, tuple[int, int, int] | None, bytes, str, str]:
        """The COMM node of chain head ``h``: (node type, start, duration, its encoded COMM attributes, the
        exact ns start, duration and category of its execution (None: unknown), the encoded stream and
        kernel_name of the kernel it ran as (or empty), pg_name, its label in the report)."""
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
                ns, stream, name = (int(self.gpu_ts_ns[-m - 1]), int(self.gpu_dur_ns[-m - 1])), act.stream, act.name
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
        timing: tuple[int, int, int] | None = None
        tail = b""
        if exec_ts == exec_ts:
            start = max(0, int(round(exec_ts + offset)))
            duration = max(0, int(round(exec_dur)))
            timing = (*exec_ns, exec_cat)
            if exec_stream >= 0:  # it ran as a kernel on this stream, named so
                tail = self.attr("stream", exec_stream) + self.attr("kernel_name", exec_name)
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
        self.report.comm_bytes += size
        return int(kind.node_type), start, duration, b"".join(attrs), timing, tail, pg, _kind_label(kind)


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


class _Rows:
    """The rank's nodes as columns, row ``k`` being node ``k + 1`` (``items[k]``), after a METADATA node 0
    when the host trace has no ``process_group:init`` of its own but its groups are known.

    Host ops, GPU activity and COMM nodes differ in which fields they have and in the order of their
    attributes; the attributes are written in columns of one order that fits every kind: ``rf_id``,
    ``seq_id`` (or, where they take few values, as in Kineto traces, in the run that follows), a run (the
    op's ``fw_parent`` .. ``is_cpu_op``, each distinct one encoded once; a GPU node's ``is_cpu_op`` and ``stream``),
    the COMM attributes, ``ts_ns``, ``dur_ns``, ``cat``, and a tail (a COMM kernel's ``stream`` and
    ``kernel_name``; a copy's ``tensor_size``; an orphan NCCL kernel's COMM attributes).

    Dependencies: an op's first is the previous host node of its thread (vectorised); GPU activity follows
    its stream, then the work it waited for, then its launch. What depends on the order the nodes are
    written in (the tensors of collectives and of other threads, the previous collective of a group, the
    device work a host call waited for) is walked in id order over the rows that have any."""

    def __init__(self, conv: _Converter, walk: _Walk, chains: dict[int, list[int]], items: list[int],
                 kernel_kind: dict[int, CommKind | None], waits: DeviceWaits) -> None:
        self.conv, self.walk, self.chains, self.waits = conv, walk, chains, waits
        self.kernel_kind = kernel_kind
        linked = conv.linked
        m = self.m = len(items)
        refs = self.refs = np.asarray(items, dtype=np.int64).reshape(m)
        self.op_rows = np.flatnonzero(refs >= 0)
        self.op_idx = refs[self.op_rows]
        self.gpu_rows = np.flatnonzero(refs < 0)
        self.gpu_idx = -refs[self.gpu_rows] - 1
        head = np.asarray(walk.head, dtype=np.int64).reshape(len(conv.ops))
        comm = head[self.op_idx] == self.op_idx
        self.comm_rows, self.host_rows = self.op_rows[comm], self.op_rows[~comm]
        self.nid_of_op = np.full(len(conv.ops), -1, dtype=np.int64)
        self.nid_of_op[self.op_idx] = self.op_rows + 1
        self.nid_of_gpu = np.full(len(linked.gpu), -1, dtype=np.int64)
        self.nid_of_gpu[self.gpu_idx] = self.gpu_rows + 1
        conv._stream_prev = conv._stream_predecessors(self.nid_of_op, self.nid_of_gpu)
        self.types = np.full(m, int(NodeType.COMP_NODE), dtype=np.int64)
        self.start = np.zeros(m, dtype=np.int64)
        self.duration = np.zeros(m, dtype=np.int64)
        self.ctrl = np.full(m, -1, dtype=np.int64)
        self.names: list[str] = [""] * m
        # rows with inputs (outputs) and their ops' io (the op's own tuple: values, shapes, types of both)
        self.in_rows: list[int] = []
        self.in_io: list[tuple[str, ...]] = []
        self.out_rows: list[int] = []
        self.out_io: list[tuple[str, ...]] = []
        self.pg_init_io: tuple[int, tuple[str, str, str]] | None = None  # the process_group:init op's inputs
        self.run = np.full(m, -1, dtype=np.int64)  # index into self.runs (framed attributes)
        self.comm_attrs = np.full(m, -1, dtype=np.int64)
        self.tail = np.full(m, -1, dtype=np.int64)
        self.runs = _Framed()
        self.ts_ns = np.zeros(m, dtype=np.int64)
        self.dur_ns = np.zeros(m, dtype=np.int64)
        self.cat = np.full(m, -1, dtype=np.int64)
        self.timed = np.zeros(m, dtype=bool)
        self.has_std = np.zeros(m, dtype=bool)  # rows with rf_id and seq_id columns (else in their template)
        self.lists: dict[int, list[int]] = {}  # row -> its deps, where not [first, second]
        self.first = np.full(m, -1, dtype=np.int64)
        self.second = np.full(m, -1, dtype=np.int64)
        self.labels: list[tuple[int, str]] = []  # (node id, label) of every COMM node and NCCL kernel, counted

    # -- the three kinds of rows ----------------------------------------------------------------------

    def _ops(self) -> None:
        """What host ops and COMM nodes share: name, ctrl dep, first dep (the thread's previous host node),
        inputs and outputs, rf_id .. is_cpu_op."""
        conv, walk, ops = self.conv, self.walk, self.conv.ops
        rows, idx = self.op_rows, self.op_idx
        chosen = [ops[i] for i in idx.tolist()]
        row_list = rows.tolist()
        names = self.names
        in_rows, in_io, out_rows, out_io = self.in_rows, self.in_io, self.out_rows, self.out_io
        for row, op in zip(row_list, chosen):
            names[row] = op.name
            io = op.io
            if io[0] != "[]" or io[2] != "[]":
                in_rows.append(row)
                in_io.append(io)
            if io[3] != "[]" or io[5] != "[]":
                out_rows.append(row)
                out_io.append(io)
        ctrl = np.asarray(walk.ctrl, dtype=np.int64).reshape(len(ops))[idx]
        self.ctrl[rows] = np.where(ctrl >= 0, self.nid_of_op[np.maximum(ctrl, 0)], -1)
        comm = np.zeros(self.m, dtype=bool)
        comm[self.comm_rows] = True
        rf_id = np.fromiter((op.rf_id for op in chosen), dtype=np.int64, count=len(chosen))
        seq_id = np.fromiter((op.seq_id for op in chosen), dtype=np.int64, count=len(chosen))
        # rf_id and seq_id: in the template where they take few values (Kineto: none, -1), else columns of their own
        fold = np.unique(rf_id).size * np.unique(seq_id).size <= _FOLDED_IDS
        self.rf_id = np.zeros(self.m, dtype=np.int64)
        self.seq_id = np.zeros(self.m, dtype=np.int64)
        if not fold:
            self.has_std[rows] = True
            self.rf_id[rows], self.seq_id[rows] = rf_id, seq_id
        templates: dict[tuple[Any, ...], int] = {}
        a, int64 = conv.attr, conv.attr_pieces.int64
        run = []
        keys = zip(rf_id.tolist(), seq_id.tolist()) if fold else repeat(None)
        for std, is_comm, ids in zip(map(_STD_ATTRS, chosen), comm[rows].tolist(), keys):
            key = (std, is_comm, ids)
            found = templates.get(key)
            if found is None:
                fw_parent, scope, tid, fw_tid, op_schema = std
                found = templates[key] = self.runs.add(b"".join([
                    *((int64("rf_id", ids[0]), int64("seq_id", ids[1])) if ids is not None else ()),
                    a("fw_parent", fw_parent), a("scope", scope), a("tid", tid), a("fw_tid", fw_tid),
                    a("op_schema", op_schema), a("is_cpu_op", not is_comm)]))
            run.append(found)
        self.run[rows] = run
        # the previous host node of the op's lane (a COMM node is issued there but is not the lane's last)
        codes: dict[Any, int] = {}
        lane_code = [codes[lane] if lane in codes else codes.setdefault(lane, len(codes)) for lane in walk.lane_of]
        self.lane = np.full(self.m, -1, dtype=np.int64)
        self.lane[rows] = np.asarray(lane_code, dtype=np.int64)[idx]
        nid = rows + 1
        lane = self.lane[rows]
        order = np.lexsort((nid, lane))
        group = np.zeros(rows.size, dtype=np.int64)
        if rows.size:
            group[1:] = np.cumsum(lane[order][1:] != lane[order][:-1])
        span = self.m + 2
        last = np.maximum.accumulate(group * span + np.where(comm[rows][order], 0, nid[order] + 1))
        last = last - group * span - 1  # the group's last host node so far, this row included (-1: none)
        prev = np.full(rows.size, -1, dtype=np.int64)
        same = group[1:] == group[:-1]
        prev[1:] = np.where(same, last[:-1], -1)
        self.first[rows[order]] = prev

    def _host(self) -> None:
        """Host ops: start and duration where timed (their exclusive time), ts_ns, dur_ns, cat."""
        conv, linked = self.conv, self.conv.linked
        rows, idx = self.host_rows, self.refs[self.host_rows]
        ts = linked.ts[idx]
        timed = ~np.isnan(ts)
        t_rows, t_idx = rows[timed], idx[timed]
        start = np.floor(linked.ts[t_idx] + linked.clock_offset_us + 0.5)
        duration = np.floor(linked.excl[t_idx] + 0.5)
        self.start[t_rows] = np.maximum(0, start).astype(np.int64)
        self.duration[t_rows] = np.maximum(0, duration).astype(np.int64)
        self.timed[t_rows] = True
        self.ts_ns[t_rows] = np.maximum(conv.op_ts_ns[t_idx], 0)
        self.dur_ns[t_rows] = np.maximum(conv.op_dur_ns[t_idx], 0)
        cats = linked.cat if linked.cat is not None else np.full(len(conv.ops), -1, dtype=np.int8)
        self.cat[t_rows] = cats[t_idx]

    def _gpu(self) -> None:
        """GPU activity: type, its stream's run, times, the stream / waits / launch deps, and the tail."""
        conv, linked, report = self.conv, self.conv.linked, self.conv.report
        rows, idx = self.gpu_rows, self.gpu_idx
        gpu = linked.gpu
        a = conv.attr
        streams, at = np.unique(conv.gpu_stream[idx], return_inverse=True)
        runs = np.asarray([self.runs.add(a("is_cpu_op", False) + a("stream", s)) for s in streams.tolist()] or [0],
                          dtype=np.int64)
        self.run[rows] = runs[at.reshape(-1)]
        names = self.names
        for row, g in zip(rows.tolist(), idx.tolist()):
            names[row] = gpu[g].name
        prev = conv._stream_prev[idx]
        launch = conv.gpu_op[idx]
        launcher = np.where(launch >= 0, self.nid_of_op[np.maximum(launch, 0)], -1)
        self.ctrl[rows] = launcher
        self.first[rows] = prev
        self.second[rows] = np.where(launcher != prev, launcher, -1)
        waits_gpu = self.waits.gpu
        nid_of_gpu = self.nid_of_gpu
        for k in np.flatnonzero(np.isin(idx, np.fromiter(waits_gpu, dtype=np.int64, count=len(waits_gpu)))).tolist():
            row, g, p, lnode = int(rows[k]), int(idx[k]), int(prev[k]), int(launcher[k])
            nid = row + 1
            deps = [p] if p >= 0 else []
            for producer in waits_gpu[g]:  # the work of other streams it waited for
                waited = int(nid_of_gpu[producer])
                if waited >= 0 and waited not in deps and waited < nid:
                    deps.append(waited)
            if lnode >= 0 and lnode not in deps:
                deps.append(lnode)
            self.lists[row] = deps
        # copies and sets, and NCCL kernels without a host collective
        memory = np.isin(conv.gpu_cat[idx], _GPU_MEMORY_CATS)
        kernels = np.fromiter(self.kernel_kind, dtype=np.int64, count=len(self.kernel_kind))
        for k in np.flatnonzero(memory | np.isin(idx, kernels)).tolist():
            row, g = int(rows[k]), int(idx[k])
            act = gpu[g]
            node_type = gpu_node_type(act.category, act.name)
            if node_type != NodeType.COMP_NODE:
                self.types[row] = node_type
                report.gpu_memory_nodes += 1
                if act.nbytes >= 0:
                    self.tail[row] = self.runs.add(a("tensor_size", act.nbytes))
                continue
            kind = self.kernel_kind.get(g)
            if kind is not None:
                self.types[row] = int(kind.node_type)
                attrs = [a("comm_type", int(kind.comm_type))] if kind.comm_type is not None else []
                attrs += [a("comm_size", 0), a("pg_name", act.pg_name or "0")]
                self.tail[row] = self.runs.add(b"".join(attrs))
                report.link["orphan_comm_kernels"] = report.link.get("orphan_comm_kernels", 0) + 1
                self.labels.append((row + 1, _kind_label(kind)))
        self.start[rows] = np.maximum(0, np.rint(conv.gpu_ts_us[idx] + linked.clock_offset_us)).astype(np.int64)
        self.duration[rows] = np.maximum(0, np.rint(conv.gpu_dur_us[idx])).astype(np.int64)
        self.timed[rows] = True
        self.ts_ns[rows] = np.maximum(conv.gpu_ts_ns[idx], 0)
        self.dur_ns[rows] = np.maximum(conv.gpu_dur_ns[idx], 0)
        self.cat[rows] = conv.gpu_cat[idx]
        report.gpu_nodes += int(idx.size)
        report.gpu_time_et_ns += int(conv.gpu_dur_ns[idx].sum())

    def _in_order(self) -> None:
        """The COMM nodes, and the deps that depend on the nodes written before: in id order."""
        walk, ops, waits = self.walk, self.conv.ops, self.waits
        owner = walk.owner
        waits_host = waits.host
        host = self.refs[self.host_rows].tolist()
        special = [row for row, i in zip(self.host_rows.tolist(), host)
                   if i in waits_host or i == walk.pg_init or (owner[i] < 0 and (ops[i].reads or ops[i].writes))]
        rows = sorted(special + self.comm_rows.tolist())
        comm = set(self.comm_rows.tolist())
        refs, first, lane = self.refs.tolist(), self.first.tolist(), self.lane.tolist()
        nid_of_gpu, lists, pg_init = self.nid_of_gpu, self.lists, walk.pg_init
        pending_wait: dict[tuple[int, int], int] = {}  # tensor -> COMM node not waited on
        writer_of: dict[tuple[int, int], tuple[int, int]] = {}  # tensor -> (node, lane)
        last_comm_of_group: dict[str, int] = {}
        for row in rows:
            i = refs[row]
            nid = row + 1
            prev = first[row]
            deps = [prev] if prev >= 0 else []
            op = ops[i]
            if row in comm:
                self._comm(row, i, deps, last_comm_of_group)
                for k in op.reads + op.writes:
                    pending_wait[k] = nid
                lists[row] = deps
                continue
            if i == pg_init:
                self.types[row] = int(NodeType.METADATA_NODE)
                entries = walk.pg_entries or _pg_init_entries(op)
                self.pg_init_io = (row, (str([orjson.dumps(entries).decode()]), op.io[1], op.io[2]))
            if i in waits_host:
                for g in waits_host[i]:  # the device work this host call waited for
                    waited = int(nid_of_gpu[g])
                    if waited >= 0 and waited not in deps and waited < nid:
                        deps.append(waited)
            if owner[i] < 0:
                if pending_wait:
                    for k in op.reads + op.writes:
                        waited = pending_wait.pop(k, -1)
                        if waited >= 0 and waited not in deps:
                            deps.append(waited)
                my_lane = lane[row]
                for k in op.reads:
                    w = writer_of.get(k)
                    if w is not None and w[1] != my_lane and w[0] not in deps:
                        deps.append(w[0])
                for k in op.writes:
                    writer_of[k] = (nid, my_lane)
            if len(deps) > 1 or (deps and deps[0] != prev):
                lists[row] = deps  # unique by construction (each added only if not present)

    def _comm(self, row: int, i: int, deps: list[int], last_comm_of_group: dict[str, int]) -> None:
        """The COMM node of chain head ``i``: after the op before it on its thread, the previous collective of
        its group and (when it ran as a kernel) its stream's previous node and the kernel's launch; the next op
        that touches its tensors waits for it."""
        conv, walk = self.conv, self.walk
        nid = row + 1
        members = self.chains[i]
        node_type, start, duration, attrs, timing, tail, pg, label = conv._comm_node(
            i, walk.kinds, members, walk.gloo_groups, conv.linked.clock_offset_us)
        self.labels.append((nid, label))
        self.types[row], self.start[row], self.duration[row] = node_type, start, duration
        self.comm_attrs[row] = self.runs.add(attrs)
        if tail:
            self.tail[row] = self.runs.add(tail)
        if timing is not None:
            self.timed[row] = True
            self.ts_ns[row], self.dur_ns[row], self.cat[row] = timing
        prev_comm = last_comm_of_group.get(pg)
        if prev_comm is not None and prev_comm not in deps:
            deps.append(prev_comm)
        last_comm_of_group[pg] = nid
        gpu = conv.linked.gpu
        for m in members:  # it ran as this kernel: it also holds the kernel's place on its stream
            if m < 0:
                g = -m - 1
                prev = int(conv._stream_prev[g])
                if prev >= 0 and prev not in deps:
                    deps.append(prev)
                for producer in self.waits.gpu.get(g, ()):
                    waited = int(self.nid_of_gpu[producer])
                    if waited >= 0 and waited not in deps and waited < nid:
                        deps.append(waited)
                conv.report.gpu_time_et_ns += int(conv.gpu_dur_ns[g])
                launch = int(self.nid_of_op[gpu[g].op])  # and comes after its launch (op >= 0: it was folded)
                if launch >= 0 and launch not in deps and launch < nid:
                    deps.append(launch)

    # -- the table ------------------------------------------------------------------------------------

    def _io(self) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
        """Each row's index into the IOInfo messages of its inputs and outputs (-1: none), and the messages'
        values, shapes and types (three lists): inputs in row order, then outputs (each a run the encoder
        copies at once)."""
        inputs = np.full(self.m, -1, dtype=np.int64)
        outputs = np.full(self.m, -1, dtype=np.int64)
        in_rows, out_rows, in_io, out_io = self.in_rows, self.out_rows, self.in_io, self.out_io
        if self.pg_init_io is not None:  # METADATA: the groups as its inputs, no outputs
            row, triple = self.pg_init_io
            if row in out_rows:
                k = out_rows.index(row)
                del out_rows[k], out_io[k]
            if row in in_rows:
                k = in_rows.index(row)
                del in_rows[k], in_io[k]
            in_rows.append(row)
            in_io.append((*triple, "", "", ""))
        inputs[in_rows] = np.arange(len(in_rows))
        outputs[out_rows] = np.arange(len(in_rows), len(in_rows) + len(out_rows))
        io = [[row[k] for row in in_io] + [row[k + 3] for row in out_io] for k in range(3)]
        return inputs, outputs, io


    def table(self) -> NodeTable:
        """Every row decided, the metadata node added, as an encodable table."""
        self._ops()
        self._host()
        self._gpu()
        self._in_order()
        conv, walk = self.conv, self.walk
        for _, label in sorted(self.labels, key=lambda x: x[0]):  # counted in id order, as they are listed
            conv.counts[label] += 1
        ctrl_ptr, ctrl_deps = csr_lists(self.m, self.ctrl, np.full(self.m, -1, dtype=np.int64), {})
        data_ptr, data_deps = csr_lists(self.m, self.first, self.second, self.lists)
        names: Interned[str] = Interned()
        name_idx = np.asarray(names.indices(self.names), dtype=np.int64).reshape(self.m)
        inputs, outputs, io = self._io()
        run = self.run
        meta = walk.pg_init is None and bool(walk.pg_entries)
        if meta:  # node 0: METADATA with the groups, before every other
            for strings, text in zip(io, (str([orjson.dumps(walk.pg_entries).decode()]), "[[]]", "['String']")):
                strings.append(text)
            name0 = names.add("## process_group:init ##")
            run0 = self.runs.add(conv.attr("is_cpu_op", True))

            def pre(column: np.ndarray, value: int) -> np.ndarray:
                return np.concatenate((np.asarray([value], dtype=column.dtype), column))
            ids = np.arange(self.m + 1, dtype=np.int64)
            types = pre(self.types, int(NodeType.METADATA_NODE))
            name_idx, inputs, outputs, run = pre(name_idx, name0), pre(inputs, len(io[0]) - 1), pre(outputs, -1), pre(run, run0)
            ctrl_ptr, data_ptr = pre(ctrl_ptr, 0), pre(data_ptr, 0)
            start, duration = pre(self.start, 0), pre(self.duration, 0)
            columns = [pre(c, v) for c, v in ((self.has_std, 0), (self.rf_id, 0), (self.seq_id, 0),
                                              (self.comm_attrs, -1), (self.timed, 0), (self.ts_ns, 0),
                                              (self.dur_ns, 0), (self.cat, -1), (self.tail, -1))]
        else:
            ids = np.arange(1, self.m + 1, dtype=np.int64)
            types, start, duration = self.types, self.start, self.duration
            columns = [self.has_std, self.rf_id, self.seq_id, self.comm_attrs, self.timed, self.ts_ns, self.dur_ns,
                       self.cat, self.tail]
        has_std, rf_id, seq_id, comm_attrs, timed, ts_ns, dur_ns, cat, tail = columns
        runs = self.runs.table()
        attrs = [*int_attr_columns("rf_id", rf_id, has_std.astype(bool)),
                 *int_attr_columns("seq_id", seq_id, has_std.astype(bool)),
                 AttrColumn("", table=runs, index=run, framed=True),
                 AttrColumn("", table=runs, index=comm_attrs, framed=True),
                 *int_attr_columns("ts_ns", ts_ns, timed.astype(bool)),
                 *int_attr_columns("dur_ns", dur_ns, timed.astype(bool)),
                 *int_attr_columns("cat", cat, timed.astype(bool) & (cat >= 0)),
                 AttrColumn("", table=runs, index=tail, framed=True)]
        return NodeTable(ids, types, [s.encode() for s in names.values], name_idx, ctrl_ptr, ctrl_deps,
                         data_ptr, data_deps, start.astype(np.uint64), duration.astype(np.uint64), io_table(io[0], io[1], io[2]),
                         inputs, outputs, attrs)


class _Framed(Interned[bytes]):
    """Distinct runs of framed attributes, each stored once."""

    def table(self) -> Packed:
        return packed(self.values)


_NO_TIME = float("nan")
#: ``cat`` codes of the GPU activity written as MEM_LOAD / MEM_STORE nodes (device.gpu_node_type).
_GPU_MEMORY_CATS = np.array([PROFILER_CATEGORIES.index(c) for c in ("gpu_memcpy", "gpu_memset")])
#: Bytes of records encoded at a time (about: from the size of their IOInfo messages): the encoder's working
#: arrays are 10-20 times their bytes; bigger chunks are not faster.
_CHUNK_BYTES = 1 << 18
#: At most this many distinct (rf_id, seq_id) pairs are written as part of the ops' templates.
_FOLDED_IDS = 64
#: The attributes of a host op that its template holds (``_Rows._ops``), with ``is_cpu_op``.
_STD_ATTRS = attrgetter("fw_parent", "scope", "tid", "fw_tid", "op_schema")


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
