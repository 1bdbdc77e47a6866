"""The executor tasks of ``etkit scale``: survey a rank file; write the new ranks made from one source rank.

A source rank is read once, and every new rank that copies it is stamped from it: records that no
copy changes are written as they are (the bytes of the input); a record whose process group or peer
differs per copy keeps its other fields encoded once (rescaled where the plan says so) and gets the
copy's ``pg_name`` / ``comm_src`` / ``comm_dst`` appended (:func:`etkit.generate.writer.attr_field`, the
stamping of etkit's generators: ``attr`` is the last field of a Node, so the message is the same). A
copy whose values are the source's own gets the source's bytes, so scaling a job to its own degree
writes it back byte for byte. Merged pipeline stages (:func:`merge_stages`) are re-encoded node by node.
Records are framed by :func:`etkit.format.stream.frame` (runs that no copy changes once per source, as the
generators' templates do) and merged ranks written by :class:`~etkit.format.stream.TraceWriter`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..format.attrs import attr_kind, make_attr
from ..format.schema import Node, NodeType
from ..fileio import atomic_output
from ..format.stream import TraceWriter, frame
from ..generate.writer import attr_field, frame_runs
from ..model.job import groups_from_trace
from ..model.trace import MISSING, Trace, load_trace

__all__ = ["RankSurvey", "survey_rank", "Target", "SourceTask", "write_copies", "merge_stages"]

_P2P = (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
#: Attributes whose value is a rank (rewritten per copy).
_RANK_ATTRS = ("comm_src", "comm_dst")


@dataclass(frozen=True)
class RankSurvey:
    rank: int
    nodes: int
    pg_names: frozenset[str]
    peers: frozenset[int]  # ranks named by comm_src / comm_dst (the rank itself included)
    declared: dict[str, tuple[int, ...]]
    counts: dict[str, int]  # nodes per NodeType name


def survey_rank(item: tuple[int, str]) -> RankSurvey:
    """Executor task: groups, peers and node counts of one rank file (columns only)."""
    rank, path = item
    trace = load_trace(path, names=False)  # node names are not needed: the name table is the costliest column
    names = frozenset(trace.strings[i] for i in np.unique(trace.pg_idx[trace.pg_idx >= 0]).tolist())
    p2p = np.isin(trace.types, _P2P)
    peers = np.concatenate([trace.comm_src[p2p], trace.comm_dst[p2p]])
    peers = frozenset(int(p) for p in np.unique(peers[(peers != MISSING) & (peers >= 0)]).tolist())
    uniq, counts = np.unique(trace.types, return_counts=True)
    by_type = {NodeType(int(t)).name if int(t) in NodeType._value2member_map_ else str(int(t)): int(c)
               for t, c in zip(uniq.tolist(), counts.tolist())}
    return RankSurvey(rank, len(trace), names, peers, dict(groups_from_trace(trace).groups), by_type)


@dataclass(frozen=True)
class Target:
    """One new rank made from a source rank: where it goes and how its groups and peers are named."""

    rank: int
    path: str
    pg: dict[str, str]  # old pg_name -> new
    peers: dict[int, int]  # old rank -> new rank (the source itself included)
    declared: dict[str, tuple[int, ...]] | None = None  # process_group:init content (new names), if any


@dataclass(frozen=True)
class SourceTask:
    """One executor task: the source rank(s) and every new rank made from them."""

    sources: tuple[str, ...]  # several: pipeline stages merged into one rank, in stage order
    source_ranks: tuple[int, ...]
    targets: tuple[Target, ...]
    compute: float = 1.0  # factor on COMP nodes' duration, num_ops, tensor_size
    p2p: float = 1.0  # factor on send/recv sizes
    #: per old pg_name: (factor of an ALL_GATHER's size, factor of other collectives' sizes)
    collectives: dict[str, tuple[float, float]] = field(default_factory=dict)


def _scaled(value: int, factor: float) -> int:
    return value if factor == 1.0 else max(int(round(value * factor)), 1 if value > 0 else 0)


def _rescale(node: Node, task: SourceTask, pg_old: str | None) -> bool:
    """Apply the task's factors to ``node`` in place; whether anything changed."""
    t = node.type
    if t == NodeType.COMP_NODE:
        f = task.compute
        names = ("num_ops", "tensor_size", "dur_ns")
        if f != 1.0:
            node.duration_micros = _scaled(node.duration_micros, f)
    elif t in _P2P:
        f, names = task.p2p, ("comm_size", "tensor_size")
    elif t == NodeType.COMM_COLL_NODE:
        gather, other = task.collectives.get(pg_old or "0", (1.0, 1.0))
        ctype = next((a for a in node.attr if a.name == "comm_type"), None)
        is_gather = ctype is not None and int(getattr(ctype, attr_kind(ctype) or "int64_val")) == 2
        f, names = (gather if is_gather else other), ("comm_size",)
    else:
        return False
    if f == 1.0:
        return False
    for attr in node.attr:
        if attr.name in names:
            kind = attr_kind(attr)
            if kind and kind.endswith("_val") and kind not in ("string_val", "bytes_val", "bool_val", "float_val", "double_val"):
                setattr(attr, kind, _scaled(int(getattr(attr, kind)), f))
    return True


@dataclass
class _Stamped:
    """A record that differs per copy: its fixed bytes and what to append."""

    fixed: bytes
    original: bytes  # framed: what a copy whose values are the source's own gets
    rescaled: bool
    pg: str | None  # old pg_name (None: the node has none)
    ranks: tuple[tuple[str, str, int], ...]  # (attr name, kind, old rank) of comm_src / comm_dst
    old_ranks: list[int] = field(default_factory=list)


def _group_init(declared: dict[str, tuple[int, ...]]) -> str:
    import orjson

    return str([orjson.dumps([{"pg_name": n, "ranks": list(r)} for n, r in declared.items()]).decode()])


def _template(trace: Trace, task: SourceTask) -> list:  # noqa: C901 - one pass over the rows
    """Per record: its bytes (the same for every copy), a :class:`_Stamped`, or a METADATA node (re-encoded per copy)."""
    pg_names = trace.pg_names()
    has_peer = (trace.comm_src != MISSING) | (trace.comm_dst != MISSING)
    has_pg = trace.pg_idx >= 0
    comp = trace.types == NodeType.COMP_NODE
    rescale_rows = np.zeros(len(trace), dtype=bool)
    if task.compute != 1.0:
        rescale_rows |= comp
    if task.p2p != 1.0:
        rescale_rows |= np.isin(trace.types, _P2P)
    if any(f != (1.0, 1.0) for f in task.collectives.values()):
        rescale_rows |= trace.types == NodeType.COMM_COLL_NODE
    metadata = trace.types == NodeType.METADATA_NODE
    special = has_peer | has_pg | rescale_rows | metadata
    items: list = list(trace.records())
    for row in np.flatnonzero(special).tolist():
        record = items[row]
        node = Node.FromString(record)
        if metadata[row]:
            if node.inputs.values and "pg_name" in node.inputs.values:
                items[row] = ("metadata", node)
            continue
        pg_old = pg_names[row]
        rescaled = _rescale(node, task, pg_old) if rescale_rows[row] else False
        holes: list[tuple[str, str, int]] = []
        keep = []
        for attr in node.attr:
            if attr.name in _RANK_ATTRS and (kind := attr_kind(attr)) and kind.endswith("_val") and kind != "string_val":
                holes.append((attr.name, kind, int(getattr(attr, kind))))
            elif attr.name == "pg_name" and pg_old is not None:
                continue
            else:
                keep.append(attr)
        if not holes and pg_old is None:
            if rescaled:
                items[row] = node.SerializeToString()
            continue
        del node.attr[:]
        node.attr.extend(keep)
        items[row] = _Stamped(node.SerializeToString(), frame(record), rescaled, pg_old, tuple(holes),
                              [old for _, _, old in holes])
    return items


class _Copy:
    """One copy's values and their encodings (each attribute value encoded once per copy)."""

    def __init__(self, target: Target) -> None:
        self.pg, self.peers = target.pg, target.peers
        self.encoded: dict[tuple[str, str, object], bytes] = {}

    def attr(self, name: str, kind: str, value: object) -> bytes:
        key = (name, kind, value)
        out = self.encoded.get(key)
        if out is None:
            out = self.encoded[key] = attr_field(name, value, kind)  # type: ignore[arg-type]
        return out

    def stamp(self, item: _Stamped) -> bytes:
        """The framed record of ``item`` for this copy."""
        old_pg = item.pg
        pg = None if old_pg is None else self.pg.get(old_pg, old_pg)
        peers = self.peers
        ranks = [peers.get(old, old) for old in item.old_ranks]
        if pg == old_pg and ranks == item.old_ranks and not item.rescaled:
            return item.original
        parts = [item.fixed]
        parts.extend(self.attr(name, kind, value) for (name, kind, _), value in zip(item.ranks, ranks))
        if pg is not None:
            parts.append(self.attr("pg_name", "string_val", pg))
        return frame(b"".join(parts))


def write_copies(task: SourceTask) -> int:
    """Executor task: write every target of a single-source task; returns the nodes written.

    Like the generators' :class:`~etkit.generate.writer.TraceTemplate`, runs of records that no copy changes
    are framed once and written as one byte string per copy; each file is written atomically."""
    trace = load_trace(task.sources[0])
    items = frame_runs(_template(trace, task))
    meta = trace.metadata_record if trace.metadata_record is not None else trace.metadata.SerializeToString()
    head = frame(meta)
    for target in task.targets:
        parts = [head]
        stamp = _Copy(target).stamp
        for item in items:
            if type(item) is bytes:
                parts.append(item)
            elif type(item) is _Stamped:
                parts.append(stamp(item))
            else:
                node = Node()
                node.CopyFrom(item[1])
                if target.declared is not None:
                    node.inputs.values = _group_init(target.declared)
                parts.append(frame(node.SerializeToString()))
        with atomic_output(target.path, compress=False) as out:
            out.write(b"".join(parts))
    return len(trace) * len(task.targets)


def _p2p_key(node: Node) -> tuple[int, int, int]:
    vals = {a.name: int(getattr(a, attr_kind(a))) for a in node.attr
            if a.name in ("comm_src", "comm_dst", "comm_tag") and attr_kind(a)}
    return vals.get("comm_src", -1), vals.get("comm_dst", -1), vals.get("comm_tag", -1)


def merge_stages(task: SourceTask) -> int:
    """Executor task: one new rank running several old pipeline stages one after another.

    Node ids of stage ``j`` are offset past those of the stages before it. A message between two of the
    merged stages becomes a local hand-off: the send a zero-time compute node, the receive a zero-time
    compute node that depends on it (the k-th such send from a stage to another with a tag matches the
    k-th receive, as point-to-point matching does)."""
    (target,) = task.targets
    merged = set(task.source_ranks)
    traces = [load_trace(p) for p in task.sources]
    offsets, base = [], 0
    for trace in traces:
        offsets.append(base)
        base += (int(trace.ids.max()) + 1) if len(trace) else 0
    nodes: list[Node] = []
    sends: dict[tuple[int, int, int], list[Node]] = {}
    recvs: dict[tuple[int, int, int], list[Node]] = {}
    for trace, offset in zip(traces, offsets):
        pg_names = trace.pg_names()
        for row, record in enumerate(trace.records()):
            node = Node.FromString(record)
            node.id += offset
            deps = [d + offset for d in node.data_deps]
            ctrl = [d + offset for d in node.ctrl_deps]
            del node.data_deps[:], node.ctrl_deps[:]
            node.data_deps.extend(deps)
            node.ctrl_deps.extend(ctrl)
            if node.type in _P2P:
                src, dst, tag = _p2p_key(node)
                if src in merged and dst in merged:
                    (sends if node.type == NodeType.COMM_SEND_NODE else recvs).setdefault((src, dst, tag), []).append(node)
            pg_old = pg_names[row]
            for attr in node.attr:
                kind = attr_kind(attr)
                if attr.name in _RANK_ATTRS and kind and kind != "string_val":
                    setattr(attr, kind, target.peers.get(int(getattr(attr, kind)), int(getattr(attr, kind))))
                elif attr.name == "pg_name" and pg_old is not None:
                    attr.string_val = target.pg.get(pg_old, pg_old)
            if node.type == NodeType.METADATA_NODE and "pg_name" in node.inputs.values and target.declared is not None:
                node.inputs.values = _group_init(target.declared)
            nodes.append(node)
    for key, sent in sends.items():
        for send, recv in zip(sent, recvs.get(key, [])):
            for hand_off in (send, recv):
                _make_local(hand_off)
            recv.data_deps.append(send.id)
    meta = traces[0].metadata_record if traces[0].metadata_record is not None else traces[0].metadata.SerializeToString()
    with TraceWriter(target.path, meta, compress=False) as writer:
        for node in nodes:
            writer.write(node)
    return len(nodes)


def _make_local(node: Node) -> None:
    """A send or receive between merged stages as a zero-time compute node."""
    keep = [a for a in node.attr if a.name not in ("comm_src", "comm_dst", "comm_tag", "comm_size", "tensor_size",
                                                   "pg_name", "comm_type", "is_cpu_op")]
    del node.attr[:]
    node.attr.extend(keep)
    node.attr.append(make_attr("is_cpu_op", False))
    node.type = NodeType.COMP_NODE
    node.duration_micros = 0

