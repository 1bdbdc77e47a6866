"""Chunked JSON-twin text of node records: thousands of records per numpy pass, no ``Node`` per record.

:meth:`JsonWriter.chunk_json` writes exactly what :func:`etkit.format.jsontwin.node_json` (plus
``_raw`` where needed) writes, for a chunk of records that :func:`record_chunks` cut from the file:

1. **Canonical check.** The whole chunk is parsed and re-serialized by protobuf's C runtime in one
   call (as one ``EtkitNodeBatch``); where the bytes differ, the chunk is bisected down to the
   records that differ. A canonical record is exactly what protobuf writes for its fields: fields in
   number order, once each, packed lists, minimal varints, valid UTF-8. Its JSON can therefore be
   read straight off its bytes, and (without unknown fields, which the walks below refuse) it never
   needs ``_raw``.
2. **Fields.** The fields of the canonical records are walked with numpy in lock-step (step ``k``
   reads the ``k``-th field of every record), then their attributes and dependency lists.
3. **Text.** Nodes with the same *shape* (which fields are set, the type, the dependency counts,
   the attribute names and kinds) share one ``bytes %`` template: the keys, attribute names and
   constant values are in the template, and one C-level ``%`` per node fills in its numbers and
   strings. Strings (names, IOInfo, string attributes) go through a bounded cache of their JSON text;
   so do whole attributes of the other kinds (lists, floats, bytes, a doc string), each one slot.

Records the fast path does not cover are handed to the caller's per-record function, so the output
is the same for every input: non-canonical records, unknown fields (also inside an attribute or an
IOInfo) or enum values, NaN values, nodes with very many attributes, and shapes too rare in the
chunk to pay for a template.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any

import numpy as np
import orjson
from google.protobuf.message import DecodeError

from .attrwire import ONEOF_WIRE_LUT, int_values, simple_attributes
from .protojson import attr_json, compact, io_to_dict
from .schema import IOInfo, Node, NodeBatch, NodeType
from .tags import BATCH_NODES
from .wire import WireFault, packed_varints, varints

__all__ = ["JsonWriter", "FramingFault", "record_chunks"]

_PAD = 32
_U64 = np.uint64


# -- wire reading --------------------------------------------------------------------------------

def _walk(b: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every field of the messages ``b[start:end]``, in lock-step: (message, field, wire, value, offset).

    ``value`` is the varint value, or the payload length for wire type 2 (``offset`` = payload start).
    Fixed-width fields (only unknown ones in a node) are stepped over; groups raise.
    """
    active = np.flatnonzero(start < end)
    p, e = start[active], end[active]
    parts = []
    while active.size:
        tag, tag_len = varints(b, p)
        value, value_len = varints(b, p + tag_len)
        wire = (tag & _U64(7)).astype(np.int64)
        if ((wire == 3) | (wire == 4) | (wire > 5)).any():
            raise WireFault("group or bad wire type")
        offset = p + tag_len + value_len
        parts.append((active, (tag >> _U64(3)).astype(np.int64), wire, value, offset))
        nxt = np.where(wire == 2, offset + value.astype(np.int64), offset)
        nxt = np.where(wire == 1, p + tag_len + 8, np.where(wire == 5, p + tag_len + 4, nxt))  # (unknown fields)
        if (nxt > e).any():
            raise WireFault("field runs past its message")
        going = nxt < e
        active, p, e = active[going], nxt[going], e[going]
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, np.zeros(0, dtype=_U64), empty
    return tuple(np.concatenate(column) for column in zip(*parts))


# -- canonical check -------------------------------------------------------------------------------

def _batch_bytes(b: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The contiguous framed records (``varint(len) record`` each, the first frame at offset 0) as
    one ``EtkitNodeBatch`` (tag ``0A`` before each frame), and where each entry starts in it."""
    frame_start = np.concatenate([[0], start[:-1] + length[:-1]])
    end = int(start[-1] + length[-1])
    return np.insert(b[:end], frame_start, BATCH_NODES).tobytes(), np.append(frame_start + np.arange(start.size), end + start.size)


def _reserializes(piece: bytes, message: Any = NodeBatch) -> bool:
    try:
        return bool(message.FromString(piece).SerializeToString() == piece)
    except (DecodeError, ValueError, RuntimeError):
        return False


def _canonical_mask(data: bytes, b: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Which records ``data[start:start+length]`` protobuf parses and writes back to the same bytes.

    The records must be contiguous frames, the first one at offset 0. Unknown fields are kept by
    protobuf, so a record with unknown fields can pass: the field walks of :class:`JsonWriter`
    accept only known fields, and send the others the slow way.
    """
    mask = np.zeros(length.size, dtype=bool)
    if not length.size:
        return mask
    wrapped, at = _batch_bytes(b, start, length)

    def check(lo: int, hi: int) -> None:
        if _reserializes(wrapped[at[lo]:at[hi]]):
            mask[lo:hi] = True
        elif hi - lo <= 8:  # a frame with an over-long length prefix differs too: judge the record alone
            for i in range(lo, hi):
                mask[i] = _reserializes(data[start[i]:start[i] + length[i]], Node)
        else:
            mid = (lo + hi) // 2
            check(lo, mid)
            check(mid, hi)

    check(0, length.size)
    return mask


# -- framing ---------------------------------------------------------------------------------------

class FramingFault(Exception):
    """The file is not plainly well framed (truncated, an empty node, a bad length, corrupt gzip):
    the caller reads it again with the checking reader of :mod:`etkit.format.stream`."""


_BLOCK = 1 << 20


def _length_prefix(buf: bytes, pos: int, end: int) -> tuple[int, int] | None:
    """A record length varint of up to 5 bytes at ``pos``: (length, payload start); ``None`` if cut off."""
    length = 0
    for k in range(5):
        if pos + k >= end:
            return None
        byte = buf[pos + k]
        length |= (byte & 0x7F) << (7 * k)
        if byte < 0x80:
            return length & 0xFFFFFFFF, pos + k + 1
    raise FramingFault("record length varint longer than 5 bytes")


def record_chunks(stream: IO[bytes], records: int) -> Iterator[tuple[bytes, np.ndarray, np.ndarray]]:
    """The node records of an ``.et`` stream (GlobalMetadata skipped) in chunks of up to ``records``:
    ``(frames, payload offsets, payload lengths)``, the frames contiguous from offset 0.

    The loop only finds where each frame ends; where its payload starts is worked out per chunk.
    """
    carry, want, metadata = b"", _BLOCK, True
    ends: list[int] = []
    while True:
        try:
            block = stream.read(want)
        except (OSError, EOFError, zlib.error) as exc:
            raise FramingFault(str(exc)) from None
        buf = carry + block if carry else block
        pos, end, first = 0, len(buf), 0  # first: where the pending chunk's first frame starts
        add = ends.append
        while pos < end:
            byte = buf[pos]
            if byte < 0x80:
                nxt = pos + 1 + byte
            elif pos + 1 < end and buf[pos + 1] < 0x80:  # most node records: 128 B .. 16 KiB
                nxt = pos + 2 + ((byte & 0x7F) | (buf[pos + 1] << 7))
            else:
                prefix = _length_prefix(buf, pos, end)
                if prefix is None:
                    break
                nxt = prefix[1] + prefix[0]
            if nxt > end:
                want = max(_BLOCK, nxt - end)  # a record longer than a block: read the rest at once
                break
            want = _BLOCK
            pos = nxt
            if metadata:  # the GlobalMetadata record (read by the caller)
                metadata, first = False, pos
                continue
            add(pos)
            if len(ends) == records:
                yield _chunk(buf, first, ends)
                first = pos
        if not block:
            if pos < end:
                raise FramingFault("truncated record")
            break
        if ends:
            yield _chunk(buf, first, ends)
        carry = buf[pos:]


def _chunk(buf: bytes, first: int, ends: list[int]) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The frames ``buf[first:ends[-1]]`` and their payloads' offsets (from ``first``) and lengths."""
    stop = np.asarray(ends, dtype=np.int64) - first
    ends.clear()
    data = buf[first:int(stop[-1]) + first]
    b = np.frombuffer(data, dtype=np.uint8)
    frame = np.concatenate([[0], stop[:-1]])
    head = np.ones(frame.size, dtype=np.int64)
    more = b[frame] >= 0x80
    for k in range(1, 5):  # length prefixes of up to 5 bytes (longer ones were refused while framing)
        head += more
        more &= b[np.minimum(frame + k, b.size - 1)] >= 0x80
    start = frame + head
    length = stop - start
    if not length.all():
        raise FramingFault("empty node record")
    return data, start, length


# -- strings ---------------------------------------------------------------------------------------

_CACHED_BYTES = 4096
#: What one cache of texts may hold (keys and texts); it is emptied when full.
CACHE_BUDGET = 4 << 20


class _JsonTexts:
    """JSON text of byte strings that repeat (names, IOInfo messages, attributes), by their bytes;
    bounded by :data:`CACHE_BUDGET` bytes, so memory stays the same however long the trace.

    ``make`` returns the text, or ``None`` when the node must go the slow way.
    """

    def __init__(self, make: Callable[[bytes], bytes | None], budget: int = CACHE_BUDGET) -> None:
        self.make = make
        self.budget = budget
        self.used = 0
        self.table: dict[bytes, bytes | None] = {}

    def texts(self, data: bytes, off: np.ndarray, length: np.ndarray) -> list[bytes | None]:
        table, make, out = self.table, self.make, []
        for start, stop in zip(off.tolist(), (off + length).tolist()):
            key = data[start:stop]
            try:
                out.append(table[key])
            except KeyError:  # (a measured loop: faster than map(table.get) plus a pass for the misses)
                text = make(key)
                if stop - start <= _CACHED_BYTES:  # long strings are rarely repeated
                    self.used += 2 * (stop - start) + 100  # key, text and the entry itself, roughly
                    if self.used > self.budget:
                        table.clear()
                        self.used = 0
                    table[key] = text
                out.append(text)
        return out


def _string_json(data: bytes) -> bytes:
    return compact(orjson.dumps(data.decode("utf-8")))


def _io_json(data: bytes) -> bytes | None:
    io = IOInfo.FromString(data)
    io.DiscardUnknownFields()
    if io.SerializeToString() != data:
        return None  # unknown fields: the node keeps its bytes in "_raw"
    return compact(orjson.dumps(io_to_dict(io)))


_NAME_WORDS = 2  # attribute names of up to 16 bytes are keyed by their bytes; longer ones by a table index
_LONG = np.int64(-1)  # second key word of a long name


def _name_keys(data: bytes, b: np.ndarray, off: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """A key of each string ``b[off:off+length]``: its bytes as two words for strings of up to 16
    bytes (attribute names nearly always are), else ``(index in the returned table, -1)``."""
    words = np.ndarray(shape=(b.size - 7,), dtype="<i8", buffer=b, offset=0, strides=(1,))
    keys = np.zeros((off.size, _NAME_WORDS), dtype=np.int64)
    for k in range(_NAME_WORDS):
        left = np.clip(length - 8 * k, 0, 8)
        keys[:, k] = words[off + 8 * k] & np.where(left >= 8, -1, (1 << (8 * np.minimum(left, 7))) - 1)
    long_rows = np.flatnonzero(length > 8 * _NAME_WORDS)
    table: dict[bytes, int] = {}
    if long_rows.size:
        keys[long_rows, 0] = [table.setdefault(data[o:o + n], len(table))
                              for o, n in zip(off[long_rows].tolist(), length[long_rows].tolist())]
        keys[long_rows, 1] = _LONG
    return keys, list(table)


def _name_of(key: list[int], length: int, long_names: list[bytes]) -> bytes:
    if key[1] == _LONG and length > 8 * _NAME_WORDS:
        return long_names[key[0]]
    return np.asarray(key, dtype="<i8").tobytes()[:length]


# -- attributes --------------------------------------------------------------------------------------

# AttributeProto value members handled here: field number -> (wire type, JSON key, value text in the template)
_ATTR_KINDS = {
    7: (0, "int32Val", "%d"), 9: (0, "int64Val", '"%d"'), 11: (0, "uint32Val", "%d"), 13: (0, "uint64Val", '"%d"'),
    15: (0, "sint32Val", "%d"), 17: (0, "sint64Val", '"%d"'), 19: (5, "fixed32Val", "%d"),
    21: (1, "fixed64Val", '"%d"'), 23: (5, "sfixed32Val", "%d"), 25: (1, "sfixed64Val", '"%d"'),
    27: (0, "boolVal", None), 29: (2, "stringVal", "%s"),
}
_KIND_WIRE = np.full(34, -1, dtype=np.int64)  # the wire type of each member handled here (-1: the others)
_KIND_WIRE[list(_ATTR_KINDS)] = ONEOF_WIRE_LUT[list(_ATTR_KINDS)]
_BOOL = 27
_STRING = 29
_UNSIGNED_64 = (13, 21)
#: Variant codes beyond the field numbers: bool attributes (the value is part of the template), an
#: attribute that is only a name, and one written from its cached JSON text.
_FALSE, _TRUE, _NAME_ONLY, _TEXT = 33, 34, 35, 36


class _Attributes:
    """The attributes of the chunk's fast records, in three forms.

    Rows are in file order, so each node's attributes are consecutive. ``name, value`` with an
    integer, bool or string value (nearly all attributes) and a name alone (``outputs`` with no
    value, as STAGE writes it) are put in the template; every other attribute (a list, a float or
    bytes value, a doc string, no name) is one template slot filled with its JSON text, cached by
    its bytes. A node whose attribute that text cannot stand for (unknown fields, a NaN) is dropped.
    """

    def __init__(self, c: _Chunk, owner: np.ndarray, a_off: np.ndarray, a_len: np.ndarray) -> None:
        b = c.b
        na = owner.size
        name_off, name_len, v_off = (np.zeros(na, dtype=np.int64) for _ in range(3))
        field, value = np.zeros(na, dtype=np.int64), np.zeros(na, dtype=_U64)
        simple, name_only = simple_attributes(b, a_off, a_off + a_len, name_off, name_len, field, value, v_off)
        simple &= _KIND_WIRE[field] >= 0  # the kinds the template writes; the others are JSON texts
        self.owner = owner
        self.kind = np.where(simple, field, np.where(name_only, _NAME_ONLY, _TEXT))
        self.raw = value
        self.ints = int_values(self.kind, value)
        self.variant = np.where(self.kind == _BOOL, np.where(value != 0, _TRUE, _FALSE), self.kind)
        self.name_len = np.where(simple | name_only, name_len, 0)
        self.name_keys, self.long_names = _name_keys(c.data, b, name_off, self.name_len)
        strings = np.flatnonzero(self.kind == _STRING)
        self.strings = np.empty(owner.size, dtype=object)
        self.strings[strings] = c.strings.texts(c.data, v_off[strings], value[strings].astype(np.int64))
        texts = np.flatnonzero((self.kind == _TEXT) & c.fast[owner])
        self.texts = np.empty(owner.size, dtype=object)
        self.texts[texts] = c.texts(c.attr_texts, owner[texts], a_off[texts], a_len[texts])


# -- one chunk -------------------------------------------------------------------------------------

class _Chunk:
    """The records of one chunk as one buffer, and which of them the fast path still covers."""

    def __init__(self, data: bytes, start: np.ndarray, length: np.ndarray, strings: _JsonTexts,
                 ios: _JsonTexts, attr_texts: _JsonTexts) -> None:
        self.n = start.size
        self.data = data
        self.b = np.frombuffer(data + bytes(_PAD), dtype=np.uint8)
        self.start, self.length = start, length
        self.fast = _canonical_mask(data, self.b, start, length)
        self.strings, self.ios, self.attr_texts = strings, ios, attr_texts
        self._escaped: np.ndarray | None = None

    def escaped(self) -> np.ndarray:
        """Per byte of the chunk, 1 where a JSON string would write it escaped (computed once)."""
        if self._escaped is None:
            self._escaped = _ESCAPED[self.b]
        return self._escaped

    def drop(self, records: np.ndarray) -> None:
        """These records go the slow way."""
        self.fast[records] = False

    def texts(self, cache: _JsonTexts, owner: np.ndarray, off: np.ndarray, length: np.ndarray) -> np.ndarray:
        """The cached JSON texts of ``b[off:off+length]`` as an object array; owners of ``None`` are dropped."""
        out = np.empty(owner.size, dtype=object)
        out[:] = cache.texts(self.data, off, length)
        self.drop(owner[out == None])  # per element
        return out


_ATTR_COLUMNS = _NAME_WORDS + 1  # per attribute in a shape row: name key, then name length and kind
_MAX_LISTED = 4  # dependency lists up to this long have one template slot per entry; longer are joined
_HEAD = 7  # shape row columns before the attributes': type, fields, dep counts, attribute count, IOInfo codes
#: IOInfo code in a shape: the bits of its fields (values 1, shapes 2, types 4) when their bytes are the
#: JSON string's text, or one of these.
_IO_ABSENT, _IO_TEXT = -1, 8
_IO_KEYS = ((1, b'"values":'), (2, b'"shapes":'), (4, b'"types":'))
#: Bytes a JSON string writes escaped: ``"``, ``\`` and the control characters.
_ESCAPED = np.zeros(256, dtype=np.uint8)
_ESCAPED[:0x20] = _ESCAPED[0x22] = _ESCAPED[0x5C] = 1


def _io_fields(c: _Chunk, rows: np.ndarray, start: np.ndarray, length: np.ndarray,
               raw: dict[int, np.ndarray]) -> np.ndarray:
    """The IOInfo messages ``b[start:start+length]`` of the records ``rows``, read off their bytes: the
    code of each (:data:`_IO_TEXT` where a field is unknown or a string needs escaping), and in ``raw``
    per field bit the bytes of each string (object arrays over the chunk's records)."""
    msg, field, wire, value, offset = _walk(c.b, start, start + length)
    code = np.zeros(rows.size, dtype=np.int64)
    known = (wire == 2) & (field >= 1) & (field <= 3)
    code[msg[~known]] = _IO_TEXT
    if msg.size:
        order = np.argsort(offset, kind="stable")  # strings in file order: [start, end) pairs never overlap
        ends = offset + value.astype(np.int64)
        bounds = np.stack([offset[order], ends[order]], axis=1).ravel()
        escaped = np.add.reduceat(c.escaped(), np.minimum(bounds, c.b.size - 1), dtype=np.int64)[::2]
        needs = np.zeros(msg.size, dtype=bool)
        needs[order] = (escaped > 0) | (value[order] == 0)
        code[msg[needs]] = _IO_TEXT
        bits = np.where(known, 1 << np.clip(field - 1, 0, 2), 0)
        code |= np.bincount(msg, weights=bits, minlength=rows.size).astype(np.int64)  # (a field once: sum = or)
        code[code >= _IO_TEXT] = _IO_TEXT
        plain = known & (code[msg] != _IO_TEXT)
        data = c.data
        for bit in (1, 2, 4):
            m = np.flatnonzero(plain & (bits == bit))
            column = raw.setdefault(bit, np.empty(c.n, dtype=object))
            column[rows[msg[m]]] = [data[a:b] for a, b in zip(offset[m].tolist(), ends[m].tolist())]
    return code




class _NodeColumns:
    """Per-node values of a chunk's fast records, and the shape of each node."""

    def __init__(self, c: _Chunk, val: np.ndarray, off: np.ndarray, length: np.ndarray, attrs: _Attributes) -> None:
        self.val, self.attrs = val, attrs
        n = c.n
        self.have = off != 0
        self.objects: dict[int, np.ndarray] = {}  # name and (escaped) IOInfo texts by field number
        self.io_code = np.full((n, 2), _IO_ABSENT, dtype=np.int64)
        self.io_raw: dict[int, dict[int, np.ndarray]] = {8: {}, 9: {}}  # field -> IOInfo field bit -> bytes
        for f in (2, 8, 9):
            rows = np.flatnonzero(self.have[:, f] & c.fast)
            self.objects[f] = np.empty(n, dtype=object)
            if f != 2:
                code = _io_fields(c, rows, off[rows, f], length[rows, f], self.io_raw[f])
                self.io_code[rows, f - 8] = code
                rows = rows[code == _IO_TEXT]
            self.objects[f][rows] = c.texts(c.strings if f == 2 else c.ios, rows, off[rows, f], length[rows, f])
        lists = np.flatnonzero(self.have[:, 4:6].ravel())
        owner, which = np.divmod(lists, 2)
        self.dep_values, counts = packed_varints(c.b, off[owner, which + 4], length[owner, which + 4])
        first = np.cumsum(counts) - counts
        self.deps: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.joined: dict[int, np.ndarray] = {}
        for f in (4, 5):
            mine = which == f - 4
            count, start = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
            count[owner[mine]], start[owner[mine]] = counts[mine], first[mine]
            self.deps[f] = (count, start)
            long_rows = np.flatnonzero((count > _MAX_LISTED) & c.fast)
            self.joined[f] = np.empty(n, dtype=object)
            self.joined[f][long_rows] = [b'","'.join([b"%d" % v for v in self.dep_values[s:s + k].tolist()])
                                         for s, k in zip(start[long_rows].tolist(), count[long_rows].tolist())]
        self.attr_count = np.bincount(attrs.owner, minlength=n)
        self.attr_first = np.cumsum(self.attr_count) - self.attr_count

    def shapes(self, rows: np.ndarray) -> np.ndarray:
        """One row per node of ``rows``: type, set fields, capped dependency counts, number of
        attributes, the codes of its IOInfo messages, then per attribute its name key and its name
        length, kind and bool value."""
        width = int(self.attr_count[rows].max())
        out = np.full((rows.size, _HEAD + _ATTR_COLUMNS * width), -1, dtype=np.int64)
        out[:, 0] = self.val[rows, 3].astype(np.int64)
        out[:, 1] = self.have[rows] @ (1 << np.arange(10))
        out[:, 2] = np.minimum(self.deps[4][0][rows], _MAX_LISTED + 1)
        out[:, 3] = np.minimum(self.deps[5][0][rows], _MAX_LISTED + 1)
        out[:, 4] = self.attr_count[rows]
        out[:, 5:7] = self.io_code[rows]
        row_of = np.full(self.val.shape[0], -1, dtype=np.int64)
        row_of[rows] = np.arange(rows.size)
        a = self.attrs
        mine = np.flatnonzero(row_of[a.owner] >= 0)
        row = row_of[a.owner[mine]]
        column = _HEAD + _ATTR_COLUMNS * (mine - self.attr_first[a.owner[mine]])
        for k in range(_NAME_WORDS):
            out[row, column + k] = a.name_keys[mine, k]
        out[row, column + _NAME_WORDS] = a.name_len[mine] * 64 + a.variant[mine]
        return out

    def shape_key(self, shape: np.ndarray) -> tuple[Any, ...]:
        """The shape as a key that holds across chunks (attribute names as bytes)."""
        head = shape[:_HEAD].tolist()
        attrs = shape[_HEAD:_HEAD + _ATTR_COLUMNS * head[4]].reshape(-1, _ATTR_COLUMNS).tolist()
        return (*head, tuple((_name_of(a[:_NAME_WORDS], a[_NAME_WORDS] >> 6, self.attrs.long_names),
                              a[_NAME_WORDS] & 63) for a in attrs))

    def column(self, slot: tuple[Any, ...], rows: np.ndarray) -> list[Any]:
        """The values of one template slot for the nodes ``rows``."""
        values: list[Any] = self._column(slot, rows)
        return values

    def _column(self, slot: tuple[Any, ...], rows: np.ndarray) -> Any:
        what, arg = slot
        if what == "int":
            return self.val[rows, arg].tolist()
        if what == "text":
            return self.objects[arg][rows].tolist()
        if what == "joined":
            return self.joined[arg][rows].tolist()
        if what == "io":
            f, bit = arg
            return self.io_raw[f][bit][rows].tolist()
        if what == "dep":
            f, k = arg
            return self.dep_values[self.deps[f][1][rows] + k].tolist()
        index = self.attr_first[rows] + arg
        if what == "attr_str":
            return self.attrs.strings[index].tolist()
        if what == "attr_text":
            return self.attrs.texts[index].tolist()
        if what == "attr_uint":
            return self.attrs.raw[index].tolist()
        return self.attrs.ints[index].tolist()


_NODE_KEYS = {1: "id", 2: "name", 4: "ctrlDeps", 5: "dataDeps", 6: "startTimeMicros", 7: "durationMicros",
              8: "inputs", 9: "outputs"}


def _literal(text: str | bytes) -> bytes:
    """``text`` as a part of a ``%`` template."""
    data = text.encode() if isinstance(text, str) else text
    return data.replace(b"%", b"%%")


def _template(key: tuple[Any, ...]) -> tuple[bytes, list[tuple[Any, Any]]]:
    """The ``%`` template of a node shape and the slots it takes, in order."""
    node_type, have, ctrl, data, _, io_in, io_out, attrs = key
    members: list[bytes] = []
    slots: list[tuple[Any, Any]] = []
    counts = {4: ctrl, 5: data}
    io_codes = {8: io_in, 9: io_out}
    for f in range(1, 10):
        if not have >> f & 1:
            continue
        if f == 3:
            members.append(b'"type":"%s"' % _literal(NodeType(node_type).name))
            continue
        head = b'"%s":' % _NODE_KEYS[f].encode()
        if f in (1, 6, 7):
            members.append(head + b'"%d"')
            slots.append(("int", f))
        elif f == 2 or io_codes.get(f) == _IO_TEXT:
            members.append(head + b"%s")
            slots.append(("text", f))
        elif f in (8, 9):
            fields = [key + b'"%s"' for bit, key in _IO_KEYS if io_codes[f] & bit]
            members.append(head + b"{" + b",".join(fields) + b"}")
            slots.extend(("io", (f, bit)) for bit, _ in _IO_KEYS if io_codes[f] & bit)
        elif counts[f] > _MAX_LISTED:
            members.append(head + b'["%s"]')
            slots.append(("joined", f))
        else:
            members.append(head + b"[" + b",".join([b'"%d"'] * counts[f]) + b"]")
            slots.extend(("dep", (f, k)) for k in range(counts[f]))
    if attrs:
        items = []
        for index, (name, variant) in enumerate(attrs):
            if variant == _TEXT:
                items.append(b"%s")
                slots.append(("attr_text", index))
                continue
            head = b'{"name":' + _literal(orjson.dumps(name.decode("utf-8")))
            if variant == _NAME_ONLY:
                items.append(head + b"}")
                continue
            if variant in (_FALSE, _TRUE):
                items.append(head + (b',"boolVal":true}' if variant == _TRUE else b',"boolVal":false}'))
                continue
            _, json_key, value = _ATTR_KINDS[variant]
            assert value is not None  # only bools have none, and they are written above
            items.append(head + b',"%s":%s}' % (json_key.encode(), value.encode()))
            slots.append(("attr_str" if variant == _STRING else "attr_uint" if variant in _UNSIGNED_64 else "attr_int",
                          index))
        members.append(b'"attr":[' + b",".join(items) + b"]")
    return b"{" + b",".join(members) + b"}", slots


_MAX_ATTRS = 256  # nodes with more attributes take the per-record path
_MIN_GROUP = 4  # nodes of a rarer shape in a chunk take the per-record path
_MAX_TEMPLATES = 1 << 14


class JsonWriter:
    """Converts chunks of node records to JSON text; its caches last from one chunk to the next."""

    def __init__(self) -> None:
        self._strings = _JsonTexts(_string_json)
        self._ios = _JsonTexts(_io_json)
        self._attr_texts = _JsonTexts(attr_json)
        self._templates: dict[tuple[Any, ...], tuple[bytes, list[tuple[Any, Any]]]] = {}

    def chunk_json(self, data: bytes, start: np.ndarray, length: np.ndarray,
                   slow: Callable[[bytes, int], bytes]) -> bytes:
        """``",\n{node}"`` for every record ``data[start:start+length]`` (contiguous frames, as
        :func:`record_chunks` gives them), in order; ``slow(record, i)`` gives the text of a record
        the fast path does not cover (and raises for a corrupt one)."""
        if not start.size:
            return b""
        c = _Chunk(data, start, length, self._strings, self._ios, self._attr_texts)
        try:
            texts = self._texts(c)
        except WireFault:
            texts = np.empty(c.n, dtype=object)
            c.fast[:] = False
        for i in np.flatnonzero(~c.fast).tolist():
            texts[i] = slow(data[start[i]:start[i] + length[i]], i)
        return b",\n" + b",\n".join(texts.tolist())

    def _texts(self, c: _Chunk) -> np.ndarray:
        n, b = c.n, c.b
        recs = np.flatnonzero(c.fast)
        msg, field, wire, value, offset = _walk(b, c.start[recs], c.start[recs] + c.length[recs])
        msg = recs[msg]
        expected_wire = np.array([-1, 0, 2, 0, 2, 2, 0, 0, 2, 2, 2, -1])
        bad = expected_wire[np.minimum(field, 11)] != wire
        c.drop(msg[bad])
        msg, field, value, offset = msg[~bad], field[~bad], value[~bad], offset[~bad]
        member = field < 10
        val = np.zeros((n, 10), dtype=_U64)
        off = np.zeros((n, 10), dtype=np.int64)  # non-zero = the field is set
        val[msg[member], field[member]] = value[member]
        off[msg[member], field[member]] = offset[member]
        c.drop(np.flatnonzero(val[:, 3] >= _U64(len(NodeType))))  # an unknown enum value is written as a number
        attr = ~member  # field 10, in file order: each node's attributes are consecutive
        order = np.argsort(offset[attr], kind="stable")
        attrs = _Attributes(c, msg[attr][order], offset[attr][order], value[attr][order].astype(np.int64))
        node = _NodeColumns(c, val, off, val.astype(np.int64), attrs)

        c.drop(np.flatnonzero(node.attr_count > _MAX_ATTRS))  # keeps the shape table small
        out = np.empty(n, dtype=object)
        fast = np.flatnonzero(c.fast)
        if not fast.size:
            return out
        shapes, _, inverse = _distinct_rows(node.shapes(fast))
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(shapes.shape[0] + 1))
        for s in range(shapes.shape[0]):
            rows = fast[order[bounds[s]:bounds[s + 1]]]
            if rows.size < _MIN_GROUP:  # a shape's fixed costs exceed the per-record path's
                c.drop(rows)
                continue
            key = node.shape_key(shapes[s])
            template = self._templates.get(key)
            if template is None:
                if len(self._templates) >= _MAX_TEMPLATES:
                    self._templates.clear()
                template = self._templates[key] = _template(key)
            text, slots = template
            if slots:
                out[rows] = [text % args for args in zip(*[node.column(slot, rows) for slot in slots])]
            else:
                out[rows] = [text] * rows.size
        return out


_MIX = np.random.default_rng(0x6A736F6E).integers(1, 1 << 63, size=4096, dtype=np.int64).view(_U64) | _U64(1)


def _distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of an int64 matrix, the first row of each, and each row's index among them.

    Rows are hashed to one uint64 (fast to sort); a hash collision is detected and then the exact,
    slower row-wise unique is used.
    """
    if rows.shape[1] <= _MIX.size:
        with np.errstate(over="ignore"):
            hashed = (rows.view(_U64) * _MIX[: rows.shape[1]]).sum(axis=1, dtype=_U64)
        _, first, inverse = np.unique(hashed, return_index=True, return_inverse=True)
        if np.array_equal(rows[first][inverse], rows):
            return rows[first], first, inverse
    distinct, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    return distinct, first, inverse.ravel()


