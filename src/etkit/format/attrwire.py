"""AttributeProto on the wire: the one decoder of attributes for the whole-file readers (the columnar
trace loader, record parts, the JSON writer).

:func:`simple_attributes` decodes, many at once, the attributes that are exactly a name and one value
(or a name alone), which is how every producer writes nearly all of them; :func:`int_values` reads
their integer values as protobuf does. The callers walk the few others generically.
"""

from __future__ import annotations

import numpy as np

from .tags import ATTR_NAME
from .wire import fixed, varints, word_varints, word_view

__all__ = ["MISSING", "VALUE_FIELDS", "STRING_VAL", "INT_KIND", "ONEOF_WIRE_LUT", "simple_attributes", "int_values",
           "plain_int"]

#: Sentinel in integer attribute columns for "attribute absent".
MISSING = np.iinfo(np.int64).min
_U32 = np.uint64(0xFFFFFFFF)
_INT64_MAX = np.uint64(np.iinfo(np.int64).max)

#: AttributeProto integer value fields: number -> (wire type, decoder name)
VALUE_FIELDS = {
    7: (0, "int32"), 9: (0, "int64"), 11: (0, "uint32"), 13: (0, "uint64"), 15: (0, "sint32"),
    17: (0, "sint64"), 19: (5, "uint32"), 21: (1, "uint64"), 23: (5, "int32"), 25: (1, "int64"),
    27: (0, "bool"),
}
STRING_VAL = 29
#: ``INT_KIND[k]``: oneof member ``k`` holds an integer or bool (``k`` is 0 for an attribute without a value).
INT_KIND = np.zeros(34, dtype=bool)
INT_KIND[list(VALUE_FIELDS)] = True
_ONEOF_WIRE = {3: 1, 5: 5, 29: 2, 31: 2, **{n: wt for n, (wt, _) in VALUE_FIELDS.items()}}
_ONEOF_WIRE.update({n: 2 for n in range(4, 33, 2)})
#: ``ONEOF_WIRE_LUT[k]``: the wire type of oneof member ``k`` (-1: not a member; 33 stands for every larger number).
ONEOF_WIRE_LUT = np.full(34, -1, dtype=np.int64)
for _number, _wire in _ONEOF_WIRE.items():
    ONEOF_WIRE_LUT[_number] = _wire


def simple_attributes(b: np.ndarray, a_start: np.ndarray, a_end: np.ndarray, name_off: np.ndarray,
                      name_len: np.ndarray, kind: np.ndarray, value: np.ndarray,
                      v_off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode the attributes ``b[a_start:a_end]`` that are exactly ``name, value`` (the canonical encoding of
    nearly all), and those that are a name alone.

    Such an attribute starts with its name (tag ``0a``, length, bytes); then one value field whose one- or
    two-byte tag names a oneof member with its wire type, and that field ends exactly where the attribute
    ends. Having exactly these fields, its name and value are the ones protobuf reports (no later
    duplicate can override them). Fills the outputs for those attributes (the value's kind, raw varint
    or fixed bits or string length, and offset; ``kind`` 0 for a name alone) and returns the masks of
    the ``name, value`` ones and of the names alone; the callers walk the others generically. ``b`` must
    have 32 spare bytes past the last attribute (word-wide reads).
    """
    words = word_view(b)
    head = words[a_start]
    first = head & np.uint64(0xFF)
    length = ((head >> np.uint64(8)) & np.uint64(0xFF)).astype(np.int64)
    size = np.ones(a_start.size, dtype=np.int64)
    named = (first == ATTR_NAME) & (a_start < a_end)
    longer = np.flatnonzero(named & (length >= 0x80))
    if longer.size:  # names of 128 bytes or more: a longer length varint
        long_length, size[longer] = varints(b, a_start[longer] + 1)
        length[longer] = np.minimum(long_length, np.uint64(1 << 40)).astype(np.int64)
    n_off = a_start + 1 + size
    q = n_off + length
    alone = named & (q == a_end)
    ok = named & (q < a_end)
    q = np.where(ok, q, a_start)  # keep reads of the others inside the buffer
    w = words[q]
    low = (w & np.uint64(0xFF)).astype(np.int64)
    high = ((w >> np.uint64(8)) & np.uint64(0xFF)).astype(np.int64)
    two = low >= 0x80  # oneof members 16..32 have two-byte tags
    tag = np.where(two, (low & 0x7F) | (high << 7), low)
    field = np.minimum(tag >> 3, 33)
    wire = tag & 7
    ok &= (~two | (high < 0x80)) & (field >= 3) & (ONEOF_WIRE_LUT[field] == wire)
    off = q + 1 + two
    rest = w >> (np.uint64(8) + (two.astype(np.uint64) << np.uint64(3)))
    val = rest & np.uint64(0xFF)
    advance = np.ones(val.size, dtype=np.int64)
    fixed_width = (wire == 1) | (wire == 5)
    long = np.flatnonzero(val >= 0x80)  # one-byte values (most) need no word-wide decoding
    if long.size:
        val[long], advance[long] = word_varints(rest[long], 6)
        longer = long[(advance[long] == 0) & ok[long] & ~fixed_width[long]]
        if longer.size:  # varints of seven bytes or more (negative integers, nanosecond times)
            val[longer], advance[longer] = varints(b, off[longer])
    ok &= fixed_width | (advance > 0)
    off += np.where(fixed_width, 0, advance)
    field_end = off + np.where(wire == 2, np.minimum(val, np.uint64(1 << 40)).astype(np.int64), 0)
    for wire_type, width in ((1, 8), (5, 4)):
        m = ok & (wire == wire_type)
        if m.any():
            val[m], field_end[m] = fixed(b, off[m], width), off[m] + width
    ok &= field_end == a_end
    sel: np.ndarray | slice = slice(None) if ok.all() else ok  # a slice avoids mask copies in the usual case
    name_off[sel], name_len[sel] = n_off[sel], length[sel]
    kind[sel], value[sel], v_off[sel] = field[sel], val[sel], off[sel]
    if alone.any():
        name_off[alone], name_len[alone], kind[alone] = n_off[alone], length[alone], 0
    return ok, alone


def int_values(kind: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Attribute integer values per oneof field number, as the int64 the columns hold."""
    out: np.ndarray = value.view(np.int64).copy()
    low = value & _U32
    present = np.bincount(kind, minlength=len(ONEOF_WIRE_LUT))
    for number, (_, decoder) in VALUE_FIELDS.items():
        if not present[number]:
            continue
        m = kind == number
        if decoder == "int32":
            out[m] = low[m].astype(np.uint32).view(np.int32).astype(np.int64)
        elif decoder == "uint32":
            out[m] = low[m].astype(np.int64)
        elif decoder == "uint64":
            v = value[m]
            out[m] = np.where(v > _INT64_MAX, MISSING, v.astype(np.int64))
        elif decoder == "sint32":
            u = low[m].astype(np.uint32)
            out[m] = ((u >> np.uint32(1)).astype(np.int64) ^ -(u & np.uint32(1)).astype(np.int64))
        elif decoder == "sint64":
            v = value[m]
            out[m] = (v >> np.uint64(1)).view(np.int64) ^ -(v & np.uint64(1)).view(np.int64)
        elif decoder == "bool":
            out[m] = (value[m] != 0).astype(np.int64)
    return out


def plain_int(kind: int, value: int) -> int:
    """What protobuf returns for an integer oneof member (used for the rare integer ``pg_name``)."""
    decoder = VALUE_FIELDS[kind][1]
    if decoder in ("int32",):
        value &= 0xFFFFFFFF
        return value - (1 << 32) if value >= 1 << 31 else value
    if decoder == "uint32":
        return value & 0xFFFFFFFF
    if decoder == "int64":
        return value - (1 << 64) if value >= 1 << 63 else value
    if decoder == "sint32":
        value &= 0xFFFFFFFF
        return (value >> 1) ^ -(value & 1)
    if decoder == "sint64":
        return (value >> 1) ^ -(value & 1)
    if decoder == "bool":
        return int(value != 0)
    return value
