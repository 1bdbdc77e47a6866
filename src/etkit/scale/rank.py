"""The executor tasks of ``etkit scale``: survey a rank file; write the new ranks made from one source rank.

A source rank is read once, and every new rank that copies it is stamped from it: records that no
copy changes are written as they are (the bytes of the input); a record whose process group or peer
differs per copy keeps its other fields encoded once (rescaled where the plan says so) and gets the
copy's ``pg_name`` / ``comm_src`` / ``comm_dst`` appended (:func:`etkit.model.template.attr_field`, the
stamping of etkit's generators: ``attr`` is the last field of a Node, so the message is the same). A
copy whose values are the source's own gets the source's bytes, so scaling a job to its own degree
writes it back byte for byte. Merged pipeline stages (:func:`merge_stages`) are re-encoded node by node.
Records are framed by :func:`etkit.format.stream.frame` (runs that no copy changes once per source, as the
generators' templates do) and merged ranks written by :class:`~etkit.format.stream.TraceWriter`.
"""

from __future__ import annotations

from dataclasses import field

import numpy as np

from ..arrays import distinct
from ..errors import EtkitError
from ..format.attrs import attr_kind, make_attr
from ..format.columnar import WalkSpans
from ..format.parts import joined_spans, record_parts, walked_parts
from ..format.schema import AttributeProto, Node, NodeType
from ..format.stream import TraceWriter, encode_varint, frame
from ..format.tags import NODE_ATTR
from ..model.survey import survey_file
from ..model.template import attr_field
from ..model.trace import MISSING, Trace, load_trace
from ..records import record

__all__ = ["RankSurvey", "survey_rank", "Target", "SourceTask", "write_copies", "merge_stages"]

_P2P = (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
#: Attributes whose value is a rank (rewritten per copy).
_RANK_ATTRS = ("comm_src", "comm_dst")


@record(frozen=True)
class RankSurvey:
    rank: int
    nodes: int
    pg_names: frozenset[str]
    peers: frozenset[int]  # ranks named by comm_src / comm_dst (the rank itself included)
    declared: dict[str, tuple[int, ...]]
    counts: dict[str, int]  # nodes per NodeType name


def survey_rank(item: tuple[int, str]) -> RankSurvey:
    """Executor task: groups, peers and node counts of one rank file (:func:`etkit.model.survey.survey_file`)."""
    rank, path = item
    survey = survey_file(path, ints=_RANK_ATTRS)
    p2p = np.isin(survey.types, _P2P)
    peers = np.concatenate([survey.ints["comm_src"][p2p], survey.ints["comm_dst"][p2p]])
    known = frozenset(int(p) for p in distinct(peers[(peers != MISSING) & (peers >= 0)]).tolist())
    uniq, counts = np.unique(survey.types, return_counts=True)
    by_type = {NodeType(int(t)).name if int(t) in NodeType._value2member_map_ else str(int(t)): int(c)
               for t, c in zip(uniq.tolist(), counts.tolist())}
    return RankSurvey(rank, len(survey), survey.pg_names, known, dict(survey.declared.groups), by_type)


@record(frozen=True)
class Target:
    """One new rank made from a source rank: where it goes and how its groups and peers are named."""

    rank: int
    path: str
    pg: dict[str, str]  # old pg_name -> new
    peers: dict[int, int]  # old rank -> new rank (the source itself included)
    declared: dict[str, tuple[int, ...]] | None = None  # process_group:init content (new names), if any


@record(frozen=True)
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
        names: tuple[str, ...] = ("num_ops", "tensor_size", "dur_ns")
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


def _group_init(declared: dict[str, tuple[int, ...]]) -> str:
    import orjson

    return str([orjson.dumps([{"pg_name": n, "ranks": list(r)} for n, r in declared.items()]).decode()])


#: A stamped record's key: its old pg_name (None: none), its rank attributes ((name, kind), ...) in wire order
#: and their old values. Every copy encodes the attributes of a key once.
_Key = tuple[str | None, tuple[tuple[str, str], ...], tuple[int, ...]]


class _Copies:
    """Every copy of one source rank, assembled from pieces: the source's runs of unchanged records (framed,
    the same for every copy), and per stamped record its length prefix, its fixed bytes and the copy's
    attributes (``pg_name``, ``comm_src``, ``comm_dst``), appended (``attr`` is the last field of a Node).

    The stamped records fall into a few keys (:data:`_Key`): each copy encodes one suffix per key, and
    the pieces of its stamped records are chosen with numpy (object arrays of the byte strings made once
    per source), then joined once. A stamped record whose copy values are the source's own gets the source's
    record, so scaling a job to its own degree writes it back byte for byte."""

    def __init__(self, pieces: np.ndarray, slots: np.ndarray, fixed: list[bytes], records: list[bytes],
                 rescaled: np.ndarray, keys: list[_Key], metadata: list[tuple[int, Node]]) -> None:
        self.pieces = pieces  # slots + 0, 1, 2: a stamped record's length prefix, fixed bytes, the copy's attributes
        self.slots = slots
        self.fixed = _objects(fixed)
        self.fixed_len = np.fromiter(map(len, fixed), dtype=np.int64, count=len(fixed))
        self.record = _objects(records)  # the source's record (unframed), for copies with the source's values
        self.original_prefix = _prefixes(np.fromiter(map(len, records), dtype=np.int64, count=len(records)))
        self.rescaled = rescaled
        index: dict[_Key, int] = {}
        self.key = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys))
        self.keys = list(index)
        self.metadata = metadata  # (slot, process_group:init node): re-encoded per copy with the copy's groups
        self._fixed_in_place = False  # whether the pieces hold every stamped record's fixed bytes

    def data(self, target: Target) -> bytes:
        """The bytes of the file of ``target``."""
        pieces = self.pieces
        if self.slots.size:
            suffixes, same = [], []
            for old_pg, holes, old_ranks in self.keys:
                pg = None if old_pg is None else target.pg.get(old_pg, old_pg)
                ranks = tuple(target.peers.get(old, old) for old in old_ranks)
                same.append(pg == old_pg and ranks == old_ranks)
                parts = [attr_field(name, value, kind) for (name, kind), value in zip(holes, ranks)]
                if pg is not None:
                    parts.append(attr_field("pg_name", pg, "string_val"))
                suffixes.append(b"".join(parts))
            suffix = _objects(suffixes)[self.key]
            length = self.fixed_len + np.fromiter(map(len, suffixes), dtype=np.int64, count=len(suffixes))[self.key]
            ident = np.asarray(same, dtype=bool)[self.key] & ~self.rescaled  # the source's own values: its record
            if ident.any():
                pieces[self.slots] = np.where(ident, self.original_prefix, _prefixes(length))
                pieces[self.slots + 1] = np.where(ident, self.record, self.fixed)
                pieces[self.slots + 2] = np.where(ident, _EMPTY, suffix)
                self._fixed_in_place = False
            else:  # the usual copy: every stamped record gets the copy's attributes
                if not self._fixed_in_place:
                    pieces[self.slots + 1] = self.fixed
                    self._fixed_in_place = True
                pieces[self.slots] = _prefixes(length)
                pieces[self.slots + 2] = suffix
        for slot, node in self.metadata:
            copy = Node()
            copy.CopyFrom(node)
            if target.declared is not None:
                copy.inputs.values = _group_init(target.declared)
            pieces[slot] = frame(copy.SerializeToString())
        return b"".join(pieces.tolist())


def _objects(items: list) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


_EMPTY = _objects([b""])
#: Length prefixes of records shorter than 16 KiB, as an object array to index with lengths.
_PREFIX_OBJECTS = _objects([encode_varint(n) for n in range(1 << 14)])


def _prefixes(lengths: np.ndarray) -> np.ndarray:
    """The varint length prefix of each record length, as an object array."""
    if not lengths.size or int(lengths.max()) < _PREFIX_OBJECTS.size:
        return _PREFIX_OBJECTS[lengths]
    return _objects([encode_varint(n) for n in lengths.tolist()])


#: Oneof members of an attribute value that hold an integer (bool included), by field number.
_INT_MEMBERS = {number: AttributeProto.DESCRIPTOR.fields_by_number[number].name for number in range(7, 28, 2)}
_IS_INT_MEMBER = np.zeros(64, dtype=bool)
_IS_INT_MEMBER[list(_INT_MEMBERS)] = True
_STAMP_NAMES = ("pg_name", *_RANK_ATTRS)
_ATTR_TAG = NODE_ATTR


@record
class _FastStamps:
    """The stamped records found with the vectorised walk: their rows, fixed bytes and keys."""

    rows: np.ndarray
    fixed: list[bytes]
    keys: list[_Key]


def _fast_stamps(trace: Trace, rows: np.ndarray, spans: list[WalkSpans | None] | None = None
                 ) -> tuple[_FastStamps, np.ndarray]:
    """Stamp ``rows`` (not rescaled) from their bytes: each record without its ``pg_name`` attributes (when
    the node has one) and without its integer ``comm_src`` / ``comm_dst`` attributes (the holes); returns
    them and the rows left to protobuf (an unusual value kind, a length prefix protobuf would not write).
    ``spans``: what the trace loader's walk found (then the records are not walked again)."""
    none = _FastStamps(np.zeros(0, dtype=np.int64), [], [])
    parts = None
    if rows.size and spans:
        parts = walked_parts(trace.blob, len(trace), spans, _STAMP_NAMES, rows=rows, io=False, strings=False)
    if parts is None and rows.size:
        parts = record_parts(trace.blob, trace.rec_off[rows], trace.rec_len[rows], _STAMP_NAMES, io=False, strings=False)
    if parts is None:
        return none, rows
    sub, name, kind = parts.attr_row, parts.attr_name, parts.attr_kind
    has_pg = trace.pg_idx[rows] >= 0
    int_member = _IS_INT_MEMBER[np.minimum(kind, 63)]
    is_rank = name >= 1
    hole = is_rank & int_member
    values = parts.int_values()
    # what protobuf's path writes otherwise: a float, double or bytes rank (a *_val that is not an integer), or
    # an integer beyond int64, and attributes whose field header is not the minimal one
    remove = hole | ((name == 0) & has_pg[sub])
    length = parts.attr_len
    start = parts.attr_off - 1 - np.where(length < 0x80, 1, 2)
    b = np.frombuffer(trace.blob, dtype=np.uint8)
    header_ok = (length < 0x4000) & (start >= 0)
    check = np.flatnonzero(remove & header_ok)
    ok_header = np.zeros(sub.size, dtype=bool)
    short = check[length[check] < 0x80]
    ok_header[short] = (b[start[short]] == _ATTR_TAG) & (b[start[short] + 1] == length[short])
    long = check[length[check] >= 0x80]
    ok_header[long] = (b[start[long]] == _ATTR_TAG) & (b[start[long] + 1] == ((length[long] & 0x7F) | 0x80)) & \
        (b[start[long] + 2] == (length[long] >> 7))
    odd = (is_rank & ~int_member & (kind != 0) & (kind % 2 == 1) & (kind != 29)) | (hole & (values == MISSING)) | \
        (remove & ~ok_header)
    declined = np.zeros(rows.size, dtype=bool)
    declined[sub[odd]] = True
    remove &= ~declined[sub]
    has_hole = np.bincount(sub[hole & ~declined[sub]], minlength=rows.size) > 0
    keep = ~declined & (has_hole | has_pg)  # the others are written as they are
    if not keep.any():
        return none, rows[declined]
    # the fixed bytes: the kept records with the removed attribute fields cut out
    rec_off, rec_len = trace.rec_off[rows[keep]], trace.rec_len[rows[keep]]
    joined = np.frombuffer(joined_spans(trace.blob, rec_off, rec_len, b"\x00"), dtype=np.uint8)
    base = np.zeros(rows.size, dtype=np.int64)
    base[keep] = np.concatenate([[0], np.cumsum(rec_len[:-1] + 1)])
    cut = np.flatnonzero(remove & keep[sub])
    cut_start = start[cut] - trace.rec_off[rows[sub[cut]]] + base[sub[cut]]
    cut_end = parts.attr_off[cut] + length[cut] - trace.rec_off[rows[sub[cut]]] + base[sub[cut]]
    delta = np.zeros(joined.size + 1, dtype=np.int64)
    np.add.at(delta, cut_start, 1)
    np.add.at(delta, cut_end, -1)
    kept = np.cumsum(delta[:-1]) == 0
    separators = np.zeros(joined.size, dtype=bool)
    separators[base[keep][1:] - 1] = True
    kept &= ~separators
    removed = np.bincount(sub[cut], weights=(cut_end - cut_start), minlength=rows.size).astype(np.int64)
    fixed_len = rec_len - removed[keep]
    blob = joined[kept].tobytes()
    ends = np.cumsum(fixed_len).tolist()
    fixed = [blob[e - k:e] for e, k in zip(ends, fixed_len.tolist())]
    # the keys: old pg_name and the holes in wire order (a record's attributes are in wire order in ``parts``)
    holes = np.flatnonzero(hole & keep[sub])
    holes = holes[np.argsort(sub[holes], kind="stable")]
    width = int(np.bincount(sub[holes], minlength=rows.size).max(initial=0))
    matrix = np.full((rows.size, 1 + 3 * width), -1, dtype=np.int64)
    matrix[:, 0] = np.where(has_pg, trace.pg_idx[rows], -1)
    if holes.size:
        first = np.searchsorted(sub[holes], sub[holes], side="left")
        place = np.arange(holes.size) - first
        for j, column in enumerate((name[holes], kind[holes], values[holes])):
            matrix[sub[holes], 1 + 3 * place + j] = column
    unique, inverse = np.unique(matrix[keep], axis=0, return_inverse=True)
    table = []
    for row in unique.tolist():
        pg = trace.strings[row[0]] if row[0] >= 0 else None
        spec = tuple((_STAMP_NAMES[row[k]], _INT_MEMBERS[row[k + 1]]) for k in range(1, len(row), 3) if row[k] >= 0)
        old = tuple(row[k + 2] for k in range(1, len(row), 3) if row[k] >= 0)
        table.append((pg, spec, old))
    keys = [table[i] for i in inverse.ravel().tolist()]
    return _FastStamps(rows[keep], fixed, keys), rows[declined]


def _template(trace: Trace, task: SourceTask, spans: list[WalkSpans | None] | None = None) -> _Copies:
    """The pieces of every copy of ``trace``: runs of records the same for every copy, stamped records, and
    METADATA nodes re-encoded per copy. The stamped records of nodes not rescaled are cut from their bytes
    (:func:`_fast_stamps`); rescaled ones, and the few the walk leaves, go through protobuf."""
    has_peer = (trace.comm_src != MISSING) | (trace.comm_dst != MISSING)
    has_pg = trace.pg_idx >= 0
    rescale_rows = np.zeros(len(trace), dtype=bool)
    if task.compute != 1.0:
        rescale_rows |= trace.types == NodeType.COMP_NODE
    if task.p2p != 1.0:
        rescale_rows |= np.isin(trace.types, _P2P)
    if any(f != (1.0, 1.0) for f in task.collectives.values()):
        rescale_rows |= _rescaled_collectives(trace, task)
    metadata = trace.types == NodeType.METADATA_NODE
    special = np.flatnonzero(has_peer | has_pg | rescale_rows | metadata)
    fast, slow = _fast_stamps(trace, special[~rescale_rows[special] & ~metadata[special]], spans)
    others: dict[int, tuple] = {}
    pg_names = trace.pg_names()
    for row in np.union1d(slow, special[rescale_rows[special] | metadata[special]]).tolist():
        entry = _protobuf_entry(trace, task, row, pg_names[row], bool(rescale_rows[row]), bool(metadata[row]))
        if entry is not None:
            others[row] = entry
    # entries in row order: the fast stamps, then the others merged in
    rows = np.concatenate([fast.rows, np.asarray(sorted(others), dtype=np.int64)])
    order = np.argsort(rows, kind="stable")
    rows = rows[order]
    stamped = np.ones(rows.size, dtype=bool)
    stamped[np.flatnonzero(order >= fast.rows.size)] = [others[r][0] == "stamped" for r in rows[order >= fast.rows.size].tolist()]
    # pieces: the metadata record, then per entry the run before it and its slots (3 for a stamped record), a last run
    width = np.where(stamped, 4, 2)
    run_at = 1 + np.cumsum(width) - width  # (empty when no record is special)
    pieces = np.empty(2 + int(width.sum()), dtype=object)
    meta = trace.metadata_record if trace.metadata_record is not None else trace.metadata.SerializeToString()
    pieces[0] = frame(meta)
    frames = _frame_spans(trace)
    after = np.concatenate([[0], rows + 1])
    runs = [_run(trace, frames, a, b) for a, b in zip(after.tolist(), [*rows.tolist(), len(trace)])]
    pieces[run_at] = _objects(runs[:-1])
    pieces[-1] = runs[-1]
    pieces[run_at[~stamped] + 1] = b""
    fixed: list[bytes] = [b""] * rows.size
    keys: list = [None] * rows.size
    rescaled = np.zeros(rows.size, dtype=bool)
    position = np.empty(rows.size, dtype=np.int64)
    position[order] = np.arange(rows.size)
    for i, f, k in zip(position[:fast.rows.size].tolist(), fast.fixed, fast.keys):
        fixed[i], keys[i] = f, k
    metadata_slots = []
    for i, row in zip(position[fast.rows.size:].tolist(), sorted(others)):
        entry = others[row]
        if entry[0] == "stamped":
            fixed[i], rescaled[i], keys[i] = entry[1], entry[2], entry[3]
        elif entry[0] == "bytes":
            pieces[run_at[i] + 1] = frame(entry[1])
        else:
            metadata_slots.append((int(run_at[i]) + 1, entry[1]))
    slots = run_at[stamped] + 1
    records = [trace.record(r) for r in rows[stamped].tolist()]
    return _Copies(pieces, slots, [f for f, s in zip(fixed, stamped.tolist()) if s], records, rescaled[stamped],
                   [k for k, s in zip(keys, stamped.tolist()) if s], metadata_slots)


def _rescaled_collectives(trace: Trace, task: SourceTask) -> np.ndarray:
    """The collectives :func:`_rescale` may change: those whose group has a factor other than 1 for their
    kind (an all-gather's or the others'), and any whose ``comm_type`` the columns do not tell."""
    coll = trace.types == NodeType.COMM_COLL_NODE
    used, pg = np.unique(np.where(coll & (trace.pg_idx >= 0), trace.pg_idx, -1), return_inverse=True)
    factors = np.asarray([task.collectives.get((trace.strings[i] if i >= 0 else None) or "0", (1.0, 1.0))
                          for i in used.tolist()], dtype=np.float64).reshape(-1, 2)
    factor = np.where(trace.comm_type == 2, factors[pg.ravel(), 0], factors[pg.ravel(), 1])
    return coll & ((factor != 1.0) | (trace.comm_type == MISSING))


def _protobuf_entry(trace: Trace, task: SourceTask, row: int, pg_old: str | None, rescale: bool,
                    metadata: bool) -> tuple | None:
    """What a special row becomes, through protobuf (None: written as it is)."""
    node = Node.FromString(trace.record(row))
    if metadata:
        return ("metadata", node) if node.inputs.values and "pg_name" in node.inputs.values else None
    rescaled = _rescale(node, task, pg_old) if rescale else False
    holes: list[tuple[str, str]] = []
    old: list[int] = []
    keep = []
    for attr in node.attr:
        if attr.name in _RANK_ATTRS and (kind := attr_kind(attr)) and kind.endswith("_val") and kind != "string_val":
            holes.append((attr.name, kind))
            old.append(int(getattr(attr, kind)))
        elif attr.name == "pg_name" and pg_old is not None:
            continue
        else:
            keep.append(attr)
    if not holes and pg_old is None:
        return ("bytes", node.SerializeToString()) if rescaled else None
    del node.attr[:]
    node.attr.extend(keep)
    return ("stamped", node.SerializeToString(), rescaled, (pg_old, tuple(holes), tuple(old)))


def _frame_spans(trace: Trace) -> np.ndarray | None:
    """Where each record's frame starts in the trace's buffer, when the records lie there framed one after
    another with the length prefixes the writer makes (so a run of them is one slice); else None."""
    n = len(trace)
    if not n:
        return None
    lengths = trace.rec_len
    header = np.where(lengths < 0x80, 1, np.where(lengths < 0x4000, 2, 0))
    start = trace.rec_off - header
    if (header == 0).any() or start[0] < 0 or (start[1:] != trace.rec_off[:-1] + lengths[:-1]).any():
        return None
    b = np.frombuffer(trace.blob, dtype=np.uint8)
    one = header == 1
    ok = np.where(one, b[start] == lengths, (b[start] == ((lengths & 0x7F) | 0x80)) &
                  (b[np.minimum(start + 1, b.size - 1)] == (lengths >> 7)))
    return start if ok.all() else None


def _run(trace: Trace, frames: np.ndarray | None, first: int, stop: int) -> bytes:
    """The framed records ``first .. stop - 1``, as they are."""
    if first >= stop:
        return b""
    if frames is not None:
        return trace.blob[int(frames[first]):int(trace.rec_off[stop - 1] + trace.rec_len[stop - 1])]
    return b"".join(frame(trace.record(r)) for r in range(first, stop))


def _write_file(path: str, data: bytes) -> None:
    """``data`` written to ``path``: a file of the job's staging folder, which job_output swaps in as a whole
    (so the file needs no temporary of its own)."""
    try:
        with open(path, "wb") as out:
            out.write(data)
    except OSError as exc:
        raise EtkitError(f"{path}: cannot write: {exc.strerror or exc}") from None


def write_copies(task: SourceTask) -> int:
    """Executor task: write every target of a single-source task; returns the nodes written.

    Like the generators' :class:`~etkit.model.template.TraceTemplate`, the records that no copy changes
    are written as they are, a run of them as one byte string (:class:`_Copies`). The files go into the
    job's staging folder (:func:`etkit.fileio.job_output`)."""
    spans: list[WalkSpans | None] = []
    trace = load_trace(task.sources[0], names=False, spans=spans)  # names are not read: only pg_name among the strings
    copies = _template(trace, task, spans)
    spans.clear()  # not needed while the copies are written
    for target in task.targets:
        _write_file(target.path, copies.data(target))
    return len(trace) * len(task.targets)


def _p2p_key(node: Node) -> tuple[int, int, int]:
    vals = {a.name: int(getattr(a, attr_kind(a) or "")) for a in node.attr
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
        for row, raw in enumerate(trace.records()):
            node = Node.FromString(raw)
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

