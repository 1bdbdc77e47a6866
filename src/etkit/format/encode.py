"""Encoding Node records from columns, vectorised: the writer's side of :mod:`etkit.format.columnar`.

:func:`encode_nodes` turns a table of nodes (ids, names through a table, types, CSR dependencies, times,
IOInfo payloads through a table, attributes as integer columns or tables of encoded values) into the
records protobuf itself would write for the same messages, byte for byte: fields in number order,
defaults left out, dependencies packed, a set oneof member always written. Each record is assembled
from pieces (a tag and a varint, a tag and a table entry, a packed list) whose bytes are placed with
numpy for all records at once, so the cost per node is a few array passes, not a message object.
:func:`etkit.format.stream.TraceWriter` writes the records.

``tests/format/test_encode.py`` checks the bytes against protobuf's serializer on random nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import field

import numpy as np

from ..records import record
from . import tags
from .columnar import MISSING
from .tags import key_byte

__all__ = ["AttrColumn", "NodeTable", "Packed", "encode_nodes", "encode_strings", "copy_spans", "INT_ATTR_FIELDS"]

#: AttributeProto oneof field number of each integer kind etkit writes from a column.
INT_ATTR_FIELDS = {"int32_val": 7, "int64_val": 9, "uint32_val": 11, "uint64_val": 13, "bool_val": 27}


@record(frozen=True)
class Packed:
    """Byte strings packed in one array: entry ``i`` is ``data[starts[i]:starts[i] + sizes[i]]``."""

    data: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray

    @classmethod
    def of(cls, blob: bytes, starts: np.ndarray, sizes: np.ndarray) -> Packed:
        return cls(np.frombuffer(blob or b"\0", dtype=np.uint8), starts.astype(np.int64), sizes.astype(np.int64))


Table = Sequence[bytes] | Packed


@record
class AttrColumn:
    """One attribute of the nodes: ``values`` per row (``MISSING`` = the node has none) of an integer
    ``kind``, or ``index`` per row into ``table`` (-1 = none), the encoded AttributeProto messages."""

    name: str = ""
    kind: str = "int64_val"
    values: np.ndarray | None = None
    table: Table = ()
    index: np.ndarray | None = None


@record
class NodeTable:
    ids: np.ndarray
    types: np.ndarray
    names: Sequence[bytes]  # distinct names (UTF-8)
    name_idx: np.ndarray  # -1 = no name
    ctrl_ptr: np.ndarray
    ctrl_deps: np.ndarray
    data_ptr: np.ndarray
    data_deps: np.ndarray
    start: np.ndarray
    duration: np.ndarray
    io: Table = ()  # encoded IOInfo messages
    inputs: np.ndarray | None = None  # index into io per row, -1 = none
    outputs: np.ndarray | None = None
    attrs: list[AttrColumn] = field(default_factory=list)


def _varint_len(v: np.ndarray) -> np.ndarray:
    """Bytes of the varint of each uint64 in ``v``."""
    n = np.ones(v.shape, dtype=np.int64)
    for k in range(1, 10):
        n += v >= np.uint64(1 << (7 * k))
    return n


def _put_varints(out: np.ndarray, pos: np.ndarray, v: np.ndarray, nb: np.ndarray) -> None:
    for k in range(int(nb.max(initial=0))):
        m = nb > k
        byte = ((v[m] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        out[pos[m] + k] = byte | np.where(nb[m] > k + 1, 0x80, 0).astype(np.uint8)


def _put_const(out: np.ndarray, pos: np.ndarray, const: bytes) -> None:
    for j, byte in enumerate(const):
        out[pos + j] = byte


def _table_blob(table: Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if isinstance(table, Packed):
        return table.data, table.starts, table.sizes
    lengths = np.fromiter((len(t) for t in table), dtype=np.int64, count=len(table))
    starts = np.zeros(len(table), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return np.frombuffer(b"".join(table) or b"\0", dtype=np.uint8), starts, lengths


def copy_spans(out: np.ndarray, pos: np.ndarray, blob: np.ndarray, src: np.ndarray, lengths: np.ndarray) -> None:
    """``out[pos[i]:pos[i] + lengths[i]] = blob[src[i]:src[i] + lengths[i]]`` for every ``i`` (spans in order).

    A side (source or destination) whose spans follow one another is read or written as one slice; one
    whose spans follow one another with gaps, the spans filling at least a quarter of its range (the
    destination of a big field, as IOInfo messages are), through a boolean mask of that range made by
    ``np.repeat`` of the gaps and spans: a byte per byte of the range. Otherwise each byte's place comes
    from one running sum (an int64 per byte: a step of 1 within a span, a jump between spans)."""
    total = int(lengths.sum())
    if not total:
        return
    if not lengths.all():
        keep = lengths > 0
        pos, src, lengths = pos[keep], src[keep], lengths[keep]
    values = _span_bytes(blob, src, lengths, total)
    lo, mask = int(pos[0]), _span_mask(pos, lengths, total)
    if mask is None:
        out[_span_index(pos, lengths, total)] = values
    elif mask.size == total:
        out[lo:lo + total] = values
    else:
        out[lo:lo + mask.size][mask] = values


def _span_mask(start: np.ndarray, lengths: np.ndarray, total: int) -> np.ndarray | None:
    """Which bytes from ``start[0]`` to the last span's end the (non-empty) spans cover; None where a span
    begins before the one before it ends, or the spans fill less than a quarter of that range."""
    if int(start[-1] + lengths[-1] - start[0]) > 4 * total:
        return None
    gaps = np.empty(lengths.size, dtype=np.int64)
    gaps[0] = 0
    np.subtract(start[1:], start[:-1] + lengths[:-1], out=gaps[1:])
    if (gaps < 0).any():
        return None
    if not gaps.any():
        return np.ones(total, dtype=bool)
    runs = np.empty(2 * lengths.size, dtype=np.int64)
    runs[0::2], runs[1::2] = gaps, lengths
    return np.repeat(np.tile(np.array([False, True]), lengths.size), runs)


def _span_index(start: np.ndarray, lengths: np.ndarray, total: int) -> np.ndarray:
    """The index of every byte of the (non-empty) spans, in order: one running sum (a step of 1 within a
    span, a jump between spans)."""
    first = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=first[1:])
    step = np.ones(total, dtype=np.int64)
    step[0] = start[0]
    step[first[1:]] = start[1:] - (start[:-1] + lengths[:-1]) + 1
    return np.cumsum(step, out=step)


def _span_bytes(blob: np.ndarray, src: np.ndarray, lengths: np.ndarray, total: int) -> np.ndarray:
    """The bytes of the (non-empty) spans ``blob[src[i]:src[i] + lengths[i]]`` one after the other."""
    lo, mask = int(src[0]), _span_mask(src, lengths, total)
    out: np.ndarray
    if mask is None:
        out = blob[_span_index(src, lengths, total)]
    elif mask.size == total:
        out = blob[lo:lo + total]
    else:
        out = blob[lo:lo + mask.size][mask]
    return out


class _Piece:
    """Bytes of one field for every row: ``length`` per row (0 = absent), written by ``put(out, pos)``."""

    def __init__(self, length: np.ndarray, put: Callable[[np.ndarray, np.ndarray], None]) -> None:
        self.length, self.put = length, put


def _varint_field(tag: bytes, values: np.ndarray, present: np.ndarray) -> _Piece:
    v = values.astype(np.uint64)
    nb = _varint_len(v)
    length = np.where(present, len(tag) + nb, 0)

    def put(out: np.ndarray, pos: np.ndarray) -> None:
        rows = np.flatnonzero(present)
        _put_const(out, pos[rows], tag)
        _put_varints(out, pos[rows] + len(tag), v[rows], nb[rows])
    return _Piece(length, put)


def _table_field(tag: bytes, table: Table, index: np.ndarray) -> _Piece:
    """``tag``, the entry's length and the entry, for rows whose index is >= 0."""
    blob, starts, sizes = _table_blob(table)
    present = index >= 0
    idx = np.where(present, index, 0)
    size = sizes[idx] if sizes.size else np.zeros(index.size, dtype=np.int64)
    nb = _varint_len(size.astype(np.uint64))
    length = np.where(present, len(tag) + nb + size, 0)

    def put(out: np.ndarray, pos: np.ndarray) -> None:
        rows = np.flatnonzero(present)
        p = pos[rows]
        _put_const(out, p, tag)
        _put_varints(out, p + len(tag), size[rows].astype(np.uint64), nb[rows])
        copy_spans(out, p + len(tag) + nb[rows], blob, starts[idx[rows]], size[rows])
    return _Piece(length, put)


def _packed_field(tag: bytes, ptr: np.ndarray, values: np.ndarray) -> _Piece:
    v = values.astype(np.uint64)
    nb = _varint_len(v)
    count = np.diff(ptr)
    row_of = np.repeat(np.arange(count.size), count)
    body = np.bincount(row_of, weights=nb, minlength=count.size).astype(np.int64)
    bnb = _varint_len(body.astype(np.uint64))
    present = count > 0
    length = np.where(present, len(tag) + bnb + body, 0)

    def put(out: np.ndarray, pos: np.ndarray) -> None:
        rows = np.flatnonzero(present)
        _put_const(out, pos[rows], tag)
        _put_varints(out, pos[rows] + len(tag), body[rows].astype(np.uint64), bnb[rows])
        first = pos + len(tag) + bnb  # where each row's list begins
        offset_in_row = np.cumsum(nb) - nb - np.repeat(np.cumsum(body) - body, count)
        _put_varints(out, first[row_of] + offset_in_row, v, nb)
    return _Piece(length, put)


def _int_attr(column: AttrColumn) -> _Piece:
    """``attr`` fields (10) holding ``name`` and an integer ``kind`` value, for rows not MISSING."""
    values = np.asarray(column.values)
    present = values != MISSING
    number = INT_ATTR_FIELDS[column.kind]
    name = column.name.encode()
    if len(name) >= 0x80:
        raise ValueError(f"attribute name {column.name[:20]!r}... is too long for a column")
    value_tag = bytes([(number << 3) & 0x7F | 0x80, number >> 4]) if number >= 16 else bytes([number << 3])
    head = b"\x0a" + bytes([len(name)]) + name + value_tag
    if column.kind == "bool_val":
        v = (values != 0).astype(np.uint64)
    elif column.kind in ("int32_val", "int64_val"):
        v = values.astype(np.int64).view(np.uint64)  # negative: ten bytes, as protobuf sign-extends
    else:
        v = values.astype(np.uint64)
    nb = _varint_len(v)
    payload = len(head) + nb
    pnb = _varint_len(payload.astype(np.uint64))
    length = np.where(present, 1 + pnb + payload, 0)

    def put(out: np.ndarray, pos: np.ndarray) -> None:
        rows = np.flatnonzero(present)
        p = pos[rows]
        out[p] = tags.NODE_ATTR
        _put_varints(out, p + 1, payload[rows].astype(np.uint64), pnb[rows])
        p = p + 1 + pnb[rows]
        _put_const(out, p, head)
        _put_varints(out, p + len(head), v[rows], nb[rows])
    return _Piece(length, put)


def _assemble(n: int, pieces: list[_Piece], framed: bool = False) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The messages of ``pieces`` one after the other (each after its varint length when ``framed``, as an
    ``.et`` file frames its records): the bytes, and each message's offset and length (prefix excluded)."""
    lengths = np.zeros(n, dtype=np.int64)
    for piece in pieces:
        lengths += piece.length
    prefix = _varint_len(lengths.astype(np.uint64)) if framed else np.zeros(n, dtype=np.int64)
    offsets = np.zeros(n, dtype=np.int64)
    np.cumsum((lengths + prefix)[:-1], out=offsets[1:])
    offsets += prefix
    out = np.zeros(int(lengths.sum() + prefix.sum()), dtype=np.uint8)
    if framed:
        _put_varints(out, offsets - prefix, lengths.astype(np.uint64), prefix)
    pos = offsets.copy()
    for piece in pieces:
        piece.put(out, pos)
        pos += piece.length
    return out.tobytes(), offsets, lengths


def encode_strings(n: int, fields: Sequence[tuple[int, Table, np.ndarray]]) -> tuple[bytes, np.ndarray, np.ndarray]:
    """``n`` messages made of string fields: ``(field number, table, index per message)``, -1 = field unset
    (an IOInfo is ``values`` 1, ``shapes`` 2, ``types`` 3). An empty string is left out, as protobuf does."""
    pieces = []
    for number, table, index in fields:
        _, _, sizes = _table_blob(table)
        index = np.where((index >= 0) & (sizes[np.maximum(index, 0)] > 0 if sizes.size else False), index, -1)
        if (index >= 0).any():
            pieces.append(_table_field(bytes([number << 3 | 2]), table, index))
    if n == 0:
        return b"", np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return _assemble(n, pieces)


def encode_nodes(table: NodeTable, *, framed: bool = False) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The Node records of ``table``: one byte string and each record's offset and length in it.

    ``framed``: each record after its length prefix, as a trace file holds them (the bytes follow the
    file's GlobalMetadata record as they are)."""
    n = int(table.ids.size)
    if n == 0:
        return b"", np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ids, types = table.ids.astype(np.uint64), table.types.astype(np.int64)
    pieces = [_varint_field(key_byte(tags.NODE_ID), ids, ids != 0),
              _table_field(key_byte(tags.NODE_NAME), table.names, np.where(_non_empty(table.names, table.name_idx), table.name_idx, -1)),
              _varint_field(key_byte(tags.NODE_TYPE), types.view(np.uint64), types != 0),
              _packed_field(key_byte(tags.NODE_CTRL), table.ctrl_ptr, table.ctrl_deps),
              _packed_field(key_byte(tags.NODE_DATA), table.data_ptr, table.data_deps),
              _varint_field(key_byte(tags.NODE_START), table.start, table.start != 0),
              _varint_field(key_byte(tags.NODE_DURATION), table.duration, table.duration != 0)]
    for tag, index in ((key_byte(tags.NODE_INPUTS), table.inputs), (key_byte(tags.NODE_OUTPUTS), table.outputs)):
        if index is not None and (index >= 0).any():
            pieces.append(_table_field(tag, table.io, index))
    for column in table.attrs:
        if column.values is not None:
            if (np.asarray(column.values) != MISSING).any():
                pieces.append(_int_attr(column))
        elif column.index is not None and (column.index >= 0).any():
            pieces.append(_table_field(key_byte(tags.NODE_ATTR), column.table, column.index))
    return _assemble(n, pieces, framed)


def _non_empty(names: Sequence[bytes], idx: np.ndarray) -> np.ndarray:
    """Rows whose name is not empty (protobuf leaves an empty name out)."""
    if not len(names):
        return np.zeros(idx.size, dtype=bool)
    filled = np.fromiter((len(s) > 0 for s in names), dtype=bool, count=len(names))
    named: np.ndarray = (idx >= 0) & filled[np.maximum(idx, 0)]
    return named
