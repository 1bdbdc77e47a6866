"""The columnar in-memory form of one rank's ET: a :class:`Trace`.

Like Perfetto's trace processor, a trace is a table: one numpy column per hot field (ids, types,
names through a string table, timing, communication attributes) and CSR arrays for dependencies.
Every node's original record bytes are kept in one blob beside the columns, so nothing a producer
wrote is lost (other attributes, IOInfo, unknown fields) and writing an unmodified trace back gives
the same bytes. Analyses, validation and the simulator work on the columns, never on per-node objects.
"""

from __future__ import annotations

import os
import zlib
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from google.protobuf.message import DecodeError  # (protobuf's pure-Python base: its runtime is not loaded)

from ..arrays import distinct
from ..errors import TraceFormatError
from ..fileio import read_bytes_maybe_gzip
from ..format import schema
from ..format.attrs import INT_KINDS
from ..format.columnar import (
    HOT_INT_ATTRS,
    MISSING,
    PAD,
    Columns,
    NodeColumns,
    WalkSpans,
    decode_columns,
    join_columns,
    split_columns,
)
from ..format.schema import CommType, NodeType
from ..format.stream import HEAD_BYTES, FrameTable, TraceWriter, check_head, frame_table
from ..lazy import LazyModule
from ..records import record

if TYPE_CHECKING:
    import gzip

    from ..format.schema import GlobalMetadata, Node
else:  # (its error class, needed when a read fails: reading .gz goes through etkit.fileio)
    gzip = LazyModule("gzip", "gzip", globals())

__all__ = ["Trace", "TraceBatch", "load_trace", "load_traces", "load_batches", "trace_from_bytes", "MISSING",
           "COMM_NODE_TYPES", "is_comm"]

COMM_NODE_TYPES = (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE)

_INT_COLUMNS = HOT_INT_ATTRS
_INT_COLUMN_SET = frozenset(HOT_INT_ATTRS)


def is_comm(types: np.ndarray) -> np.ndarray:
    """Where ``types`` are :data:`COMM_NODE_TYPES` (by comparisons: ``np.isin`` sorts, 100x slower on a rank's)."""
    send, recv, coll = (int(t) for t in COMM_NODE_TYPES)
    comm: np.ndarray = (types == coll) | (types == send) | (types == recv)
    return comm


def _csr(ptr: array[int], values: array[int]) -> tuple[np.ndarray, np.ndarray]:
    return np.frombuffer(ptr, dtype=np.int64).copy(), np.frombuffer(values, dtype=np.uint64).copy()


def _id_order(ids: np.ndarray) -> np.ndarray:
    """Rows in id order (stable), or an empty array when the rows already are (the common case)."""
    if (ids[1:] > ids[:-1]).all():
        return np.zeros(0, dtype=np.int64)
    return np.argsort(ids, kind="stable")


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=out[1:])
    return out


@record(eq=False)
class Trace(NodeColumns):
    """One rank's execution trace as columns (:class:`~etkit.format.columnar.NodeColumns`, then the fields below).
    Row ``i`` is the ``i``-th node in file order.

    Integer attribute columns (communication, ``num_ops``, ``tensor_size``, and the profiled thread ``tid``
    and device ``stream`` of converted traces) hold :data:`MISSING` where the node lacks the attribute; ``is_cpu_op``
    holds -1 for absent, 0 or 1; ``pg_name`` indexes :attr:`strings` (-1 = absent). ``ts_ns``/``dur_ns`` are
    the nanosecond start and inclusive wall duration a converter measured (``start_time_micros`` and
    ``duration_micros`` hold whole microseconds and, for host ops, self time only).
    """

    comm_type: np.ndarray
    comm_size: np.ndarray
    comm_src: np.ndarray
    comm_dst: np.ndarray
    comm_tag: np.ndarray
    comm_priority: np.ndarray
    num_ops: np.ndarray
    tensor_size: np.ndarray
    tid: np.ndarray
    stream: np.ndarray
    ts_ns: np.ndarray  # measured start, Unix ns (converted profiles; MISSING elsewhere)
    dur_ns: np.ndarray  # measured wall duration in ns, callees included (converted profiles)
    cat: np.ndarray  # profiler category of a converted node (format.attrs.PROFILER_CATEGORIES index)
    blob: bytes
    rec_off: np.ndarray
    rec_len: np.ndarray
    path: str = ""
    metadata_record: bytes | None = None
    #: The decoded GlobalMetadata (``None``: not decoded yet; :attr:`metadata` decodes ``metadata_record``).
    metadata_message: GlobalMetadata | None = field(default=None, repr=False)
    _order: np.ndarray | None = field(default=None, repr=False)

    @property
    def metadata(self) -> GlobalMetadata:
        """The rank's GlobalMetadata message, decoded from :attr:`metadata_record` when first read (protobuf is
        imported then: the analyses of a converted profile never read it)."""
        if self.metadata_message is None:
            self.metadata_message = _parse_metadata(self.metadata_record or b"", self.path)
        return self.metadata_message

    @metadata.setter
    def metadata(self, value: GlobalMetadata) -> None:
        self.metadata_message = value

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_records(cls, metadata: GlobalMetadata | bytes, records: Iterable[bytes] | Iterable[tuple[int, int, bytes]],
                     *, path: str | os.PathLike[str] = "<memory>") -> Trace:
        """Build from raw Node payloads (or ``(index, offset, payload)`` triples from a reader)."""
        return _TraceBuilder(str(path)).build(metadata, records)

    @classmethod
    def from_nodes(cls, metadata: GlobalMetadata | None, nodes: Iterable[Node]) -> Trace:
        """Build from Node messages (what a producer made in memory)."""
        return cls.from_records(metadata or schema.GlobalMetadata(), (n.SerializeToString() for n in nodes))

    # -- size and lookup ------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def names(self) -> np.ndarray:
        """Node names as an object array (built on demand; prefer ``name_idx`` + ``strings``)."""
        names: np.ndarray = np.asarray(self.strings, dtype=object)[self.name_idx]
        return names

    def name(self, row: int) -> str:
        return self.strings[int(self.name_idx[row])]

    def names_of(self, rows: np.ndarray) -> list[str]:
        """``[self.name(r) for r in rows]``, through the string table at once (no method call a row)."""
        return list(map(self.strings.__getitem__, self.name_idx[rows].tolist()))

    def rows_of(self, ids: np.ndarray | Sequence[int]) -> np.ndarray:
        """Row index of each id (-1 where the id is not a node of this trace; the first row if repeated)."""
        query = np.asarray(ids, dtype=np.uint64)
        n = len(self)
        if n == 0:
            return np.full(query.shape, -1, dtype=np.int64)
        if self._order is None:
            self._order = _id_order(self.ids)
        if self._order.size == 0:  # ids strictly increasing: row order is id order
            first = self.ids[0]
            if int(self.ids[-1]) - int(first) == n - 1:  # and dense: the row is the id's distance to the first
                rows = query - first  # ids below the first wrap round to huge values
                return np.where(rows < np.uint64(n), rows.astype(np.int64), -1)
            sorted_ids, order = self.ids, None
        else:
            sorted_ids, order = self.ids[self._order], self._order
        pos = np.minimum(np.searchsorted(sorted_ids, query), n - 1)
        found = sorted_ids[pos] == query
        return np.where(found, pos if order is None else order[pos], -1).astype(np.int64)

    def row_of(self, node_id: int) -> int:
        row = int(self.rows_of([node_id])[0])
        if row < 0:
            raise KeyError(f"{self.path}: no node with id {node_id}")
        return row

    def deps_of(self, row: int, kind: str = "data") -> np.ndarray:
        ptr, deps = (self.data_ptr, self.data_deps) if kind == "data" else (self.ctrl_ptr, self.ctrl_deps)
        return deps[ptr[row]:ptr[row + 1]]

    def edge_sources(self, kind: str = "data") -> np.ndarray:
        """For each entry of ``data_deps`` (or ``ctrl_deps``), the row of the node that lists it."""
        ptr = self.data_ptr if kind == "data" else self.ctrl_ptr
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(ptr))

    def pg_names(self) -> np.ndarray:
        """``pg_name`` per row as an object array (``None`` where absent)."""
        table = np.asarray(self.strings + [None], dtype=object)
        return table[np.where(self.pg_idx < 0, len(self.strings), self.pg_idx)]

    # -- full nodes -----------------------------------------------------------------------------

    def record(self, row: int) -> bytes:
        off = int(self.rec_off[row])
        return self.blob[off:off + int(self.rec_len[row])]

    def node(self, row: int) -> Node:
        """The full Node message of row ``row`` (decoded from the kept record bytes)."""
        node = schema.Node()
        node.ParseFromString(self.record(row))
        return node

    def string_attr(self, rows: np.ndarray, name: str) -> list[str | None]:
        """Per row of ``rows``, what ``node(row)``'s first attribute called ``name`` holds as ``string_val`` (``""``
        when it holds another kind), or ``None`` where the node has no such attribute: read from the record
        bytes, without protobuf, where the vectorised walk takes them (:func:`etkit.format.parts.record_parts`)."""
        from ..format.parts import record_parts

        rows = np.asarray(rows, dtype=np.int64)
        off, size = self.rec_off[rows], self.rec_len[rows]
        blob = self.blob
        if int(size.sum()) * 4 < len(blob):  # a few records (a job's COMM nodes): walked in a copy of their own
            blob = b"".join(map(blob.__getitem__, map(slice, off.tolist(), (off + size).tolist())))
            off = np.cumsum(size) - size  # (the walk pads its buffer: a copy of the whole blob was 3 ms of 17 MB)
        parts = record_parts(blob, off, size, [name], io=False)
        if parts is None:  # a record the walk does not take: protobuf reads them all
            return [next((a.string_val for a in self.node(r).attr if a.name == name), None) for r in rows.tolist()]
        found: list[str | None] = [None] * rows.size
        named = np.flatnonzero(parts.attr_name == 0)
        first = named[np.unique(parts.attr_row[named], return_index=True)[1]]  # wire order: the first of each row
        strings = parts.strings
        for row, text in zip(parts.attr_row[first].tolist(), parts.attr_text[first].tolist()):
            found[row] = strings[text] if text >= 0 else ""
        return found

    def records(self) -> Iterator[bytes]:
        blob = self.blob
        return (blob[o:o + n] for o, n in zip(self.rec_off.tolist(), self.rec_len.tolist()))

    def nodes(self) -> Iterator[Node]:
        for row in range(len(self)):
            yield self.node(row)

    def comm_rows(self) -> np.ndarray:
        return np.flatnonzero(is_comm(self.types))

    # -- output ---------------------------------------------------------------------------------

    def write(self, path: str | os.PathLike[str], *, compress: bool | None = None) -> None:
        """Write this trace as an ``.et`` file (byte-identical to the file it was read from)."""
        meta = self.metadata_record if self.metadata_record is not None else self.metadata.SerializeToString()
        with TraceWriter(path, meta, compress=compress) as writer:
            writer.write_records(self.records())


class _TraceBuilder:
    """Accumulates columns record by record in compact ``array`` buffers, then freezes them to numpy."""

    def __init__(self, path: str) -> None:
        self.path = path

    def build(self, metadata: GlobalMetadata | bytes,
              records: Iterable[bytes] | Iterable[tuple[int, int, bytes]]) -> Trace:  # noqa: C901
        path = self.path
        if isinstance(metadata, bytes):
            meta_record = metadata
            metadata_msg = schema.GlobalMetadata()
            metadata_msg.ParseFromString(metadata)
        else:
            metadata_msg = metadata
            meta_record = None
        ids = array("Q")
        types = array("i")
        name_idx = array("i")
        starts = array("Q")
        durations = array("Q")
        data_ptr = array("q", [0])
        data_deps = array("Q")
        ctrl_ptr = array("q", [0])
        ctrl_deps = array("Q")
        cpu = array("b")
        pg_idx = array("i")
        ints = {name: array("q") for name in _INT_COLUMNS}
        rec_len = array("q")
        chunks: list[bytes] = []
        strings: dict[str, int] = {}
        int_cols = _INT_COLUMN_SET
        int_kinds = INT_KINDS
        missing = int(MISSING)
        row = 0
        for item in records:
            if isinstance(item, tuple):
                index, offset, payload = item
            else:
                index, offset, payload = row + 1, None, item
            node = schema.Node()
            try:
                node.ParseFromString(payload)
            except (DecodeError, ValueError, RuntimeError) as exc:
                raise TraceFormatError(path, f"corrupt Node message ({exc})", record=index, offset=offset) from None
            ids.append(node.id)
            types.append(node.type)
            name = node.name
            idx = strings.get(name)
            if idx is None:
                idx = strings[name] = len(strings)
            name_idx.append(idx)
            starts.append(node.start_time_micros)
            durations.append(node.duration_micros)
            deps = node.data_deps
            if deps:
                data_deps.extend(deps)
            data_ptr.append(len(data_deps))
            deps = node.ctrl_deps
            if deps:
                ctrl_deps.extend(deps)
            ctrl_ptr.append(len(ctrl_deps))
            cpu_value = -1
            pg = -1
            found: dict[str, int] | None = None
            for attr in node.attr:
                aname = attr.name
                if aname in int_cols:
                    kind = attr.WhichOneof("value")
                    if kind in int_kinds:
                        if found is None:
                            found = {}
                        value = int(getattr(attr, kind))
                        found[aname] = value if -missing > value > missing else missing
                elif aname == "is_cpu_op":
                    kind = attr.WhichOneof("value")
                    if kind in int_kinds:
                        cpu_value = 1 if getattr(attr, kind) else 0
                elif aname == "pg_name":
                    kind = attr.WhichOneof("value")
                    if kind == "string_val":
                        text = attr.string_val
                    elif kind in int_kinds:
                        text = str(int(getattr(attr, kind)))
                    else:
                        continue
                    known = strings.get(text)
                    if known is None:
                        known = strings[text] = len(strings)
                    pg = known
            cpu.append(cpu_value)
            pg_idx.append(pg)
            if found is None:
                for col in ints.values():
                    col.append(missing)
            else:
                for cname, col in ints.items():
                    col.append(found.get(cname, missing))
            chunks.append(payload)
            rec_len.append(len(payload))
            row += 1

        lengths = np.frombuffer(rec_len, dtype=np.int64).copy()
        dp, dd = _csr(data_ptr, data_deps)
        cp, cd = _csr(ctrl_ptr, ctrl_deps)
        cols = Columns(
            ids=np.frombuffer(ids, dtype=np.uint64).copy(),
            types=np.frombuffer(types, dtype=np.int32).copy(),
            name_idx=np.frombuffer(name_idx, dtype=np.int32).copy(),
            strings=list(strings),
            start=np.frombuffer(starts, dtype=np.uint64).copy(),
            duration=np.frombuffer(durations, dtype=np.uint64).copy(),
            data_ptr=dp, data_deps=dd, ctrl_ptr=cp, ctrl_deps=cd,
            is_cpu_op=np.frombuffer(cpu, dtype=np.int8).copy(),
            pg_idx=np.frombuffer(pg_idx, dtype=np.int32).copy(),
            ints={name: np.frombuffer(col, dtype=np.int64).copy() for name, col in ints.items()},
        )
        trace = _from_columns(cols, metadata_msg, b"".join(chunks), _offsets(lengths), lengths, path)
        trace.metadata_record = meta_record
        return trace


def _from_columns(cols: Columns, metadata: GlobalMetadata | None, blob: bytes, rec_off: np.ndarray, rec_len: np.ndarray,
                  path: str) -> Trace:
    """A :class:`Trace` of decoded columns; integer columns the decoder left out (``attrs``) are a read-only
    view of :data:`MISSING`."""
    ints = cols.ints
    if len(ints) < len(_INT_COLUMNS):
        missing = np.broadcast_to(np.asarray(MISSING, dtype=np.int64), cols.ids.shape)
        ints = {k: ints.get(k, missing) for k in _INT_COLUMNS}
    return Trace(**cols.node_columns(), metadata_message=metadata, **cast("dict[str, Any]", ints), blob=blob,
                 rec_off=rec_off, rec_len=rec_len, path=path)


def load_trace(path: str | os.PathLike[str], *, allow_empty: bool = False, names: bool = True,
               spans: list[WalkSpans | None] | None = None, attrs: Collection[str] | None = None) -> Trace:
    """Read a whole ``.et`` file (gzip sniffed) into a columnar :class:`Trace`.

    The columns are decoded vectorised over the whole file (:mod:`etkit.format.columnar`); files that
    path cannot take are decoded record by record, which also yields the precise error for corrupt
    ones. ``allow_empty`` keeps zero-length node records as rows (validation reports them).
    ``names=False`` is for callers that never read node names (validation): the name column may then
    be left undecoded (``name_idx`` -1, ``strings`` only the ``pg_name`` values); the same files
    are accepted and rejected, and every other column is the same. Many files: :func:`load_traces`.
    ``spans``: a list that receives what the decoder's walk found of the rest of the records
    (:func:`etkit.format.columnar.decode_columns`' ``spans``; a None in it: not all of them were walked).
    ``attrs``: for callers that read only some attribute columns (names among
    :data:`~etkit.format.columnar.HOT_ATTRS`): the others may be left undecoded (integer columns
    :data:`MISSING`, read-only; ``is_cpu_op``/``pg_idx`` -1); the same files are accepted and rejected.
    """
    return _trace_of(str(path), _read_trace(path, allow_empty, _UNCHECKED_BELOW), allow_empty, names, spans, attrs)


#: :func:`load_traces` decodes the files of about this many bytes together (the decoder needs about ten times
#: a batch's bytes while it works; bigger batches gain little: 1,024 rank files of 225 KB took the same CPU
#: time in batches of 4 and 16 MiB, at half the peak memory).
BATCH_BYTES = 1 << 22


@record(eq=False)
class TraceBatch:
    """Consecutive rank files decoded together (:func:`load_batches`): ``paths[i]``'s rows are
    ``bounds[i]:bounds[i + 1]`` of :attr:`columns` (the files' columns joined, one string table), its
    GlobalMetadata ``metadata[i]``; ``rec_len`` the joined rows' record lengths, :meth:`node` a row's full Node;
    :meth:`traces` gives each file's :class:`Trace`, as :func:`load_traces` does."""

    paths: list[str]
    metadata: list[GlobalMetadata]
    bounds: np.ndarray
    rec_len: np.ndarray  # each joined row's record length in bytes
    _joined: Columns | None = field(default=None, repr=False)
    _split: Callable[[], list[Trace]] | None = field(default=None, repr=False)
    _traces: list[Trace] | None = field(default=None, repr=False)
    _record: Callable[[int], bytes] | None = field(default=None, repr=False)

    @property
    def joint(self) -> bool:
        """Whether the files were decoded together (else file by file, and :meth:`traces` costs nothing)."""
        return self._split is not None

    @property
    def columns(self) -> Columns:
        if self._joined is None:  # a batch loaded file by file: its traces' columns joined
            traces = self._traces or []
            self._joined = join_columns([Columns(**t.node_columns(), ints={k: getattr(t, k) for k in _INT_COLUMNS})
                                         for t in traces]) if traces else _no_columns()
        return self._joined

    def int_column(self, name: str) -> np.ndarray:
        """The joined rows' integer attribute column ``name`` (:data:`~etkit.format.columnar.HOT_INT_ATTRS`),
        a read-only view of :data:`MISSING` where the decoder left it out (as in each :class:`Trace`)."""
        column = self.columns.ints.get(name)
        return column if column is not None else np.broadcast_to(np.asarray(MISSING, dtype=np.int64),
                                                                 self.columns.ids.shape)

    def traces(self) -> list[Trace]:
        if self._traces is None:
            self._traces = self._split() if self._split is not None else []
        return self._traces

    def node(self, row: int) -> Node:
        """The full Node message of joined row ``row`` (decoded from the file's record bytes)."""
        if self._record is not None:
            payload = self._record(row)
        else:
            file = int(np.searchsorted(self.bounds, row, side="right")) - 1
            payload = self.traces()[file].record(row - int(self.bounds[file]))
        node = schema.Node()
        node.ParseFromString(payload)
        return node


def _no_columns() -> Columns:
    empty = np.zeros(0, dtype=np.int64)
    return Columns(empty.astype(np.uint64), empty.astype(np.int32), empty.astype(np.int32), [], empty.astype(np.uint64),
                   empty.astype(np.uint64), np.zeros(1, dtype=np.int64), empty.astype(np.uint64),
                   np.zeros(1, dtype=np.int64), empty.astype(np.uint64), empty.astype(np.int8), empty.astype(np.int32),
                   {k: empty for k in _INT_COLUMNS})


def _batch_of_traces(traces: list[Trace]) -> TraceBatch:
    bounds = np.zeros(len(traces) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in traces], out=bounds[1:])
    rec_len = np.concatenate([t.rec_len for t in traces]) if traces else np.zeros(0, dtype=np.int64)
    return TraceBatch([t.path for t in traces], [t.metadata for t in traces], bounds, rec_len, _traces=traces)


def _read_batches(paths: Iterable[str | os.PathLike[str]], allow_empty: bool,
                  batch_bytes: int) -> Iterator[list[tuple[str, bytes]]]:
    """The files' (path, content), in batches of about ``batch_bytes``; an unreadable file's error is raised
    after the batch of the files before it."""
    batch: list[tuple[str, bytes]] = []
    size = 0
    for path in paths:
        try:
            buf = _read_trace(path, allow_empty, _UNCHECKED_BELOW)
        except TraceFormatError:
            if batch:
                yield batch  # the files before it first
            raise
        if batch and size + len(buf) > batch_bytes:
            yield batch
            batch, size = [], 0
        batch.append((str(path), buf))
        size += len(buf)
    if batch:
        yield batch


def load_traces(paths: Iterable[str | os.PathLike[str]], *, allow_empty: bool = False, names: bool = True,
                batch_bytes: int = BATCH_BYTES, attrs: Collection[str] | None = None) -> Iterator[Trace]:
    """:func:`load_trace` of each of ``paths``, in order, the node records of several files decoded together.

    The files are read in batches of about ``batch_bytes``; the records of a batch are framed and decoded
    in one vectorised pass, then split per file, so a job of many small rank files costs its records
    rather than one decoder set-up per file. Every trace, and every error (the first bad file's, as
    :func:`load_trace` words it), is what :func:`load_trace` gives; only the order of each trace's string
    table may differ (first use in row order). At most one batch is held at a time besides the traces
    the caller keeps. ``names`` and ``attrs`` as :func:`load_trace` has them.
    """
    for batch in _read_batches(paths, allow_empty, batch_bytes):
        joint = _joint_batch(batch, allow_empty, names, attrs) if len(batch) > 1 else None
        if joint is not None:
            yield from joint.traces()
        else:  # file by file (so the traces before a bad file come before its error)
            for path, buf in batch:
                yield _trace_of(path, buf, allow_empty, names, None, attrs)


def load_batches(paths: Iterable[str | os.PathLike[str]], *, allow_empty: bool = False, names: bool = True,
                 batch_bytes: int = BATCH_BYTES, attrs: Collection[str] | None = None,
                 deps: bool = True) -> Iterator[TraceBatch]:
    """The files of :func:`load_traces` as the batches it decodes together (:class:`TraceBatch`: their columns
    joined, for callers that work on a batch at once rather than per file); the same traces, the same errors
    (the files before a bad file's come first, as a batch of their own where they were to be decoded with it).
    ``deps=False``, for callers that read no dependencies: the files are checked the same, but
    ``data_deps``/``ctrl_deps`` may be left empty."""
    for batch in _read_batches(paths, allow_empty, batch_bytes):
        joint = _joint_batch(batch, allow_empty, names, attrs, deps) if len(batch) > 1 else None
        if joint is not None:
            yield joint
            continue
        traces = []
        for path, buf in batch:  # one by one (so the files before a bad one come before its error)
            try:
                traces.append(_trace_of(path, buf, allow_empty, names, None, attrs, deps))
            except TraceFormatError:
                if traces:
                    yield _batch_of_traces(traces)
                raise
        yield _batch_of_traces(traces)


def _joint_batch(batch: list[tuple[str, bytes]], allow_empty: bool, names: bool,
                 attrs: Collection[str] | None, deps: bool = True) -> TraceBatch | None:
    """The traces of a batch from one framing and one decode of the files' bytes joined; ``None`` where
    anything is unusual (an error, an empty file, records the decoder leaves to protobuf one by one): the
    caller then loads the files one by one, which gives the precise error."""
    sizes = np.fromiter((len(buf) for _, buf in batch), dtype=np.int64, count=len(batch))
    if not sizes.all():  # an empty file: its own error
        return None
    bases = np.zeros(len(batch) + 1, dtype=np.int64)
    np.cumsum(sizes, out=bases[1:])
    joined = b"".join([*(buf for _, buf in batch), bytes(PAD)])  # the spare bytes the decoder reads past the records
    try:
        frames = frame_table(memoryview(joined)[:-PAD], "<batch>", allow_empty=True)
    except TraceFormatError:
        return None
    first = np.searchsorted(frames.start, bases[:-1])  # each file's GlobalMetadata frame
    if (first >= len(frames)).any() or not (frames.start[np.minimum(first, len(frames) - 1)] == bases[:-1]).all():
        return None
    node = np.ones(len(frames), dtype=bool)
    node[first] = False
    empty = np.flatnonzero(node & (frames.length == 0))
    if empty.size and not (allow_empty and _heads_pass(batch, np.searchsorted(bases, frames.start[empty], side="right") - 1,
                                                       allow_empty)):
        return None  # (the files one by one raise the first one's error)
    metadata = []
    for (_, buf), at, size, base in zip(batch, frames.offset[first].tolist(), frames.length[first].tolist(),
                                        bases.tolist()):
        record = buf[at - base:at - base + size]
        try:
            metadata.append((schema.GlobalMetadata.FromString(record), record))
        except (DecodeError, ValueError, RuntimeError):
            return None
    cols = decode_columns(joined, frames.start[node], frames.offset[node], frames.length[node], names=names,
                          attrs=attrs, deps=deps)
    if cols is None:
        return None
    rows = np.zeros(len(batch) + 1, dtype=np.int64)
    np.cumsum(np.diff(np.append(first, len(frames))) - 1, out=rows[1:])

    def split() -> list[Trace]:
        traces = []
        for (path, buf), part, (meta, record), lo, hi, base in zip(batch, split_columns(cols, rows), metadata,
                                                                    first.tolist(), [*first[1:].tolist(), len(frames)],
                                                                    bases.tolist()):
            trace = _from_columns(part, meta, buf, frames.offset[lo + 1:hi] - base, frames.length[lo + 1:hi], path)
            trace.metadata_record = record
            traces.append(trace)
        return traces

    node_off, node_len = frames.offset[node], frames.length[node]

    def node_record(row: int) -> bytes:  # (from the file's own bytes: the joined copy is not kept)
        file = int(np.searchsorted(rows, row, side="right")) - 1
        at = int(node_off[row] - bases[file])
        return batch[file][1][at:at + int(node_len[row])]

    return TraceBatch([path for path, _ in batch], [meta for meta, _ in metadata], rows, node_len, cols, split,
                      _record=node_record)


def _heads_pass(batch: list[tuple[str, bytes]], files: np.ndarray, allow_empty: bool) -> bool:
    """Whether :func:`~etkit.format.stream.check_head` passes the first records of each of ``files`` (indices into
    ``batch``; the files with empty records, which :func:`_frames_of` would check)."""
    for i in distinct(files).tolist():
        path, buf = batch[i]
        try:
            check_head(buf[:HEAD_BYTES], path, allow_empty=allow_empty)
        except TraceFormatError:
            return False
    return True


def trace_from_bytes(buf: bytes, path: str = "<memory>") -> Trace:
    """The :class:`Trace` of an ``.et`` file's (uncompressed) content ``buf``, as :func:`load_trace` reads it, but
    for its GlobalMetadata record: that is decoded (and a corrupt one reported) when :attr:`Trace.metadata` is
    first read. For bytes a converter has just written (``analyze`` of a Kineto trace), which need no protobuf."""
    return _trace_of(path, buf, False, True, metadata=False)


def _parse_metadata(record: bytes, path: str) -> GlobalMetadata:
    """The GlobalMetadata message of ``record`` (the first record of the file ``path``)."""
    metadata = schema.GlobalMetadata()
    try:
        metadata.ParseFromString(record)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise TraceFormatError(path, f"corrupt GlobalMetadata message ({exc})", record=0, offset=0) from None
    return metadata


def _trace_of(path: str, buf: bytes, allow_empty: bool, names: bool,
              spans: list[WalkSpans | None] | None = None, attrs: Collection[str] | None = None,
              deps: bool = True, *, metadata: bool = True) -> Trace:
    """:func:`load_trace` of the file ``path`` whose content is ``buf``; its GlobalMetadata decoded at once
    (``metadata``), or when first read."""
    frames = _frames_of(buf, path, allow_empty)
    if not len(frames):
        raise TraceFormatError(path, "empty file: no GlobalMetadata record", record=0, offset=0)
    meta_off, meta_len = int(frames.offset[0]), int(frames.length[0])
    meta_record = buf[meta_off:meta_off + meta_len]
    message = _parse_metadata(meta_record, path) if metadata else None
    frame_start, rec_off, rec_len = frames.start[1:], frames.offset[1:], frames.length[1:]
    cols = decode_columns(buf, frame_start, rec_off, rec_len, names=names, spans=spans, attrs=attrs, deps=deps)
    if cols is None:
        records = ((i + 1, s, buf[o:o + n]) for i, (s, o, n) in
                   enumerate(zip(frame_start.tolist(), rec_off.tolist(), rec_len.tolist())))
        trace = _TraceBuilder(path).build(meta_record, records)
    else:
        trace = _from_columns(cols, message, buf, rec_off, rec_len, path)
    trace.metadata_record = meta_record
    return trace


def _frames_of(buf: bytes, path: str, allow_empty: bool) -> FrameTable:
    """:func:`~etkit.format.stream.frame_table` of a file's content, with what :func:`~etkit.format.stream.check_head`
    says of its first records first (a reader may have left that check to here: :data:`_UNCHECKED_BELOW`). It can
    only refuse a file whose framing fails or, with ``allow_empty``, one with empty records: only then is it run."""
    error: TraceFormatError | None = None
    try:
        frames = frame_table(buf, path, allow_empty=allow_empty)
    except TraceFormatError as exc:
        error = exc
    else:
        if not allow_empty or frames.length[1:].all():
            return frames
    check_head(buf[:HEAD_BYTES], path, allow_empty=allow_empty)
    if error is not None:
        raise error
    return frames


#: Plain files smaller than this are read whole before their first records are checked (:func:`_frames_of` checks
#: them where it must): the check of each of a job's many small files costs more than holding one.
_UNCHECKED_BELOW = 1 << 26


def read_trace_bytes(path: str | os.PathLike[str], *, allow_empty: bool = False) -> bytes:
    """Whole (decompressed) content of an ET file, with one-line errors for unreadable input.

    The first records are checked as the streaming reader checks them before the rest is read, and a gzip
    file may decompress only so far (:func:`etkit.fileio.max_decompressed_bytes`): a gzip bomb is refused
    after a few kilobytes (an empty record) or at the limit, never held whole.
    """
    return _read_trace(path, allow_empty, 0)


def _read_trace(path: str | os.PathLike[str], allow_empty: bool, unchecked_below: int) -> bytes:
    """:func:`read_trace_bytes`; a plain file of fewer than ``unchecked_below`` bytes is not checked (the caller
    frames it with :func:`_frames_of`)."""
    try:
        return read_bytes_maybe_gzip(path, prefix_bytes=HEAD_BYTES, unchecked_below=unchecked_below,
                                     check_prefix=lambda head: check_head(head, path, allow_empty=allow_empty))
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceFormatError(path, f"corrupt or truncated gzip stream ({exc})") from None
    except OSError as exc:
        raise TraceFormatError(path, f"cannot open ({exc.strerror or exc})") from None


def comm_type_name(value: int) -> str:
    """``ALL_REDUCE`` for 0, ..., or ``UNKNOWN(n)`` for values outside the schema."""
    try:
        return CommType(value).name
    except ValueError:
        return f"UNKNOWN({value})"


def node_type_name(value: int) -> str:
    try:
        return NodeType(value).name
    except ValueError:
        return f"UNKNOWN({value})"
