"""Assembling Chakra ``Node`` records from pre-encoded pieces: the converter's hot path.

Building a protobuf ``Node`` message per host op, filling it field by field and serializing it costs
more than everything else the converter does per op. Most of a node's bytes repeat from op to op
(names, shape and type strings, attributes such as ``tid``, ``scope``, ``op_schema``), so this module
encodes each distinct piece once and joins pieces into the payload.

The payload is exactly what protobuf writes for the same message (``Node.SerializeToString()``): fields
in field-number order (et-format.md §1.1), proto3 scalars omitted when zero or empty, a set sub-message
(``inputs``/``outputs``) written even when empty, packed repeated ids, attributes framed one by one in
the order given. ``tests/format/test_assemble.py`` checks this byte for byte against protobuf.

:func:`node_record` and :meth:`IoPieces.field` join their bytes in C where etkit's extension
``etkit.format._assemble`` is built (the same bytes as the Python here, which runs without it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from . import tags
from .attrs import encode_attr
from .stream import encode_varint
from .tags import key_byte

try:  # the byte joins in C (optional: the Python below gives the same bytes)
    from . import _assemble as KERNEL
except ImportError:  # pragma: no cover - built without a C compiler
    KERNEL = None

__all__ = ["KERNEL", "varint", "varints_column", "AttrPieces", "IoPieces", "node_record", "metadata_record", "id_varints",
           "INPUTS", "OUTPUTS"]

_U64 = (1 << 64) - 1
_SMALL = [bytes((n,)) for n in range(0x80)]

# Node field keys (field number << 3 | wire type), from their one home, format.tags
_ID, _NAME, _TYPE, _CTRL, _DATA, _START, _DUR, _INPUTS, _OUTPUTS, _ATTR = (key_byte(k) for k in (
    tags.NODE_ID, tags.NODE_NAME, tags.NODE_TYPE, tags.NODE_CTRL, tags.NODE_DATA, tags.NODE_START, tags.NODE_DURATION,
    tags.NODE_INPUTS, tags.NODE_OUTPUTS, tags.NODE_ATTR))
_IO_VALUES, _IO_SHAPES, _IO_TYPES = (key_byte(k) for k in (tags.IO_VALUES, tags.IO_SHAPES, tags.IO_TYPES))
_META_VERSION, _META_ATTR = key_byte(tags.META_VERSION), key_byte(tags.META_ATTR)


def varint(value: int) -> bytes:
    """Base-128 varint of an integer as protobuf writes an (u)int64: negatives as 10-byte two's complement."""
    # Unrolled for the 1-4 byte values that node ids, rf_ids and lengths are (the loop costs 3x more).
    if value < 0x80:
        if value >= 0:
            return _SMALL[value]
    elif value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    elif value < 0x200000:
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, value >> 14))
    elif value < 0x10000000:
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, (value >> 14) & 0x7F | 0x80, value >> 21))
    elif value < 1 << 63:
        # Timestamps (Unix µs, 8 bytes): the low 21 bits as 3 bytes, the slowly changing rest from a cache.
        high = value >> 21
        rest = _HIGH.get(high)
        if rest is None:
            rest = encode_varint(high)
            if len(_HIGH) < 65536:
                _HIGH[high] = rest
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, (value >> 14) & 0x7F | 0x80)) + rest
    return encode_varint(value & _U64)


_HIGH: dict[int, bytes] = {}


def varints_column(values: np.ndarray) -> list[bytes]:
    """The varint of every (non-negative) value, encoded with numpy: one ``bytes`` per value."""
    v = np.asarray(values).astype(np.uint64)
    n = len(v)
    out = np.zeros((n, 10), dtype=np.uint8)
    length = np.ones(n, dtype=np.int64)
    for k in range(10):
        rest = v >> np.uint64(7 * k)
        more = (rest >> np.uint64(7)) != 0
        out[:, k] = (rest & np.uint64(0x7F)).astype(np.uint8) | (more.astype(np.uint8) << 7)
        length += more
    flat = out.tobytes()
    return [flat[i * 10:i * 10 + m] for i, m in enumerate(length.tolist())]


def _length_delimited(key: bytes, data: bytes) -> bytes:
    n = len(data)
    return key + (_SMALL[n] if n < 0x80 else varint(n)) + data


class AttrPieces:
    """Framed ``attr`` entries (key ``0x52`` + length + AttributeProto), each distinct one encoded once.

    ``framed(name, value)`` builds through :func:`etkit.format.attrs.encode_attr` (canonical kinds), so an
    entry is byte-identical to what appending that attribute to a Node serializes to. ``int64(name, v)``
    serves attributes whose value changes on every op (``rf_id``, ``seq_id``) from a cached prefix.
    """

    def __init__(self) -> None:
        self._framed: dict[tuple[str, Any], bytes] = {}
        self._int_heads: dict[str, list[bytes]] = {}

    def framed(self, name: str, value: Any) -> bytes:
        key = (name, value)
        found = self._framed.get(key)
        if found is None:
            found = self._framed[key] = _length_delimited(_ATTR, encode_attr(name, value))
        return found

    def int64(self, name: str, value: int) -> bytes:
        """The framed canonical int64 attribute ``name`` = ``value`` (its kind must be an int64 varint)."""
        heads = self._int_heads.get(name)
        if heads is None:
            heads = self._new_int_heads(name)
        if value < 0:  # seq_id -1 on most ops: 10 bytes, encoded once
            return self.framed(name, value)
        encoded = varint(value)
        return heads[len(encoded)] + encoded

    def int64_column(self, name: str, values: np.ndarray) -> list[bytes]:
        """:meth:`int64` of every value of a column at once (non-negative values, vectorised varints)."""
        heads = self.int64_heads(name)
        encoded = varints_column(values)
        return [heads[len(e)] + e for e in encoded]

    def int64_rows(self, names: tuple[str, ...], columns: tuple[np.ndarray, ...],
                   last_present: np.ndarray | None = None) -> list[bytes]:
        """Per row, :meth:`int64` of ``names[j]`` = ``columns[j][row]`` for every column, joined (non-negative
        values); the last column's attribute only where ``last_present`` (None: everywhere). In C where
        etkit's extension is built (the same bytes as the varints_column join below)."""
        heads = [self.int64_heads(name) for name in names]
        values = [np.ascontiguousarray(np.asarray(c).astype(np.uint64)) for c in columns]
        present = None if last_present is None else np.ascontiguousarray(last_present, dtype=np.bool_)
        if KERNEL is not None:
            rows: list[bytes] = KERNEL.int64_rows(heads, values, present)
            return rows
        encoded = [[h[len(e)] + e for e in varints_column(v)] for h, v in zip(heads, values)]
        if present is not None:
            encoded[-1] = [e if keep else b"" for e, keep in zip(encoded[-1], present.tolist())]
        return [b"".join(parts) for parts in zip(*encoded)]

    def int64_heads(self, name: str) -> list[bytes]:
        """The prefixes :meth:`int64` puts before a value's varint, by its length (index 1-10)."""
        return self._int_heads.get(name) or self._new_int_heads(name)

    def _new_int_heads(self, name: str) -> list[bytes]:
        """Key, length and name part of the framed attribute, by the length of the value's varint (1-10)."""
        zero = encode_attr(name, 0)  # oneof members are written even when 0
        if zero[-1:] != b"\x00" or encode_attr(name, 1) != zero[:-1] + b"\x01":
            raise ValueError(f"attribute {name!r} is not a varint kind")
        prefix = zero[:-1]
        heads = self._int_heads[name] = [_ATTR + varint(len(prefix) + k) + prefix for k in range(11)]
        return heads


class IoPieces:
    """Encoded ``name`` and ``inputs``/``outputs`` fields; repeated parts (names, the shapes and types of
    an IOInfo) are encoded once."""

    def __init__(self) -> None:
        self._tail: dict[tuple[str, str], bytes] = {}
        self._names: dict[str, bytes] = {}

    @property
    def names(self) -> dict[str, bytes]:
        """The encoded ``name`` fields so far, by name (what :meth:`name` returns)."""
        return self._names

    @property
    def tails(self) -> dict[tuple[str, str], bytes]:
        """The encoded shapes and types of an IOInfo so far, by (shapes, types) (what :meth:`field` appends)."""
        return self._tail

    def name(self, name: str) -> bytes:
        """The encoded ``name`` field (names repeat: cached)."""
        found = self._names.get(name)
        if found is None:
            found = self._names[name] = _length_delimited(_NAME, name.encode()) if name else b""
        return found

    def _new_tail(self, shapes: str, types: str) -> bytes:
        tail = self._tail[(shapes, types)] = (
            (_length_delimited(_IO_SHAPES, shapes.encode()) if shapes else b"")
            + (_length_delimited(_IO_TYPES, types.encode()) if types else b""))
        return tail

    def field(self, key: bytes, values: str, shapes: str, types: str) -> bytes:
        """A set IOInfo field (``INPUTS`` or ``OUTPUTS``): key, length, then values, shapes, types."""
        tail = self._tail.get((shapes, types))
        if tail is None:
            tail = self._new_tail(shapes, types)
        if KERNEL is not None:
            joined: bytes = KERNEL.io_field(key, values, tail)
            return joined
        if not values:
            return _length_delimited(key, tail)
        encoded = values.encode()
        n = len(encoded)
        n_bytes = _SMALL[n] if n < 0x80 else varint(n)
        size = 1 + len(n_bytes) + n + len(tail)
        return b"".join((key, _SMALL[size] if size < 0x80 else varint(size), _IO_VALUES, n_bytes, encoded, tail))


#: Keys of the Node fields ``inputs`` and ``outputs`` (for :meth:`IoPieces.field`).
INPUTS, OUTPUTS = _INPUTS, _OUTPUTS


_TYPE_FIELD = [b""] + [_TYPE + _SMALL[t] for t in range(1, 0x80)]


def metadata_record(version: str, attrs: Iterable[tuple[str, Any, str | None]]) -> bytes:
    """A ``GlobalMetadata`` record, as protobuf serialises one with this ``version`` and these attributes (each
    ``(name, value, kind)`` as :func:`etkit.format.attrs.encode_attr` takes them, in this order)."""
    head = _length_delimited(_META_VERSION, version.encode("utf-8")) if version else b""
    return head + b"".join(_length_delimited(_META_ATTR, encode_attr(name, value, kind)) for name, value, kind in attrs)


def id_varints(count: int) -> list[bytes]:
    """``varint(i)`` for every node id ``0 <= i < count``: ids are dense and each one is written several times
    (as the node's id, then in the deps of the nodes after it), so they are encoded once."""
    if KERNEL is not None:  # (the rows of one column with empty heads: the bare varints)
        encoded: list[bytes] = KERNEL.int64_rows([[b""] * 11], [np.arange(count, dtype=np.uint64)], None)
        return encoded
    return [varint(i) for i in range(count)]


def py_node_record(node_id: int, name_field: bytes, node_type: int, ctrl: int | None, deps: list[int],
                   start: int, duration: int, io: bytes, attrs: bytes, ids: list[bytes]) -> bytes:
    """One Node payload. ``name_field`` comes from :meth:`IoPieces.name`; ``io`` is the encoded inputs and
    outputs fields (or empty); ``attrs`` the framed attributes in order; ``ctrl`` the single ctrl dep or None;
    ``ids`` the :func:`id_varints` of every id the node names."""
    if ctrl is not None:
        one = ids[ctrl]
        ctrl_field = _CTRL + _SMALL[len(one)] + one
    else:
        ctrl_field = b""
    if deps:
        body = ids[deps[0]] if len(deps) == 1 else b"".join([ids[v] for v in deps])
        n = len(body)
        data_field = _DATA + (_SMALL[n] if n < 0x80 else varint(n)) + body
    else:
        data_field = b""
    return b"".join((_ID + ids[node_id] if node_id else b"", name_field, _TYPE_FIELD[node_type], ctrl_field,
                     data_field, _START + varint(start) if start else b"",
                     _DUR + varint(duration) if duration else b"", io, attrs))


#: :func:`py_node_record`, in C where etkit's extension is built (the same bytes)
node_record = KERNEL.record if KERNEL is not None else py_node_record
