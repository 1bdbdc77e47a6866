"""Pre-encoded pieces of Chakra ``Node`` records: varints and attribute fields, each distinct one encoded
once (the converter's attributes, such as ``tid``, ``scope``, ``op_schema``, repeat from op to op).

The records themselves are assembled in bulk from columns by :mod:`etkit.format.encode`; an attribute
field made here is exactly what protobuf writes for that ``AttributeProto`` in a ``Node``
(``tests/format/test_assemble.py`` checks it byte for byte against protobuf).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import tags
from .attrs import make_attr
from .stream import encode_varint
from .tags import key_byte

__all__ = ["varint", "varints_column", "AttrPieces"]

_U64 = (1 << 64) - 1
_SMALL = [bytes((n,)) for n in range(0x80)]

# the Node attribute field key (field number << 3 | wire type), from its one home, format.tags
_ATTR = key_byte(tags.NODE_ATTR)


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

    ``framed(name, value)`` builds through :func:`etkit.format.attrs.make_attr` (canonical kinds), so an
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
            found = self._framed[key] = _length_delimited(_ATTR, make_attr(name, value).SerializeToString())
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
        heads = self._int_heads.get(name) or self._new_int_heads(name)
        encoded = varints_column(values)
        return [heads[len(e)] + e for e in encoded]

    def _new_int_heads(self, name: str) -> list[bytes]:
        """Key, length and name part of the framed attribute, by the length of the value's varint (1-10)."""
        zero = make_attr(name, 0).SerializeToString()  # oneof members are written even when 0
        if zero[-1:] != b"\x00" or make_attr(name, 1).SerializeToString() != zero[:-1] + b"\x01":
            raise ValueError(f"attribute {name!r} is not a varint kind")
        prefix = zero[:-1]
        heads = self._int_heads[name] = [_ATTR + varint(len(prefix) + k) + prefix for k in range(11)]
        return heads
