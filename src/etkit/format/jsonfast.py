"""JSON-twin text of node records read straight off their bytes, in plain Python (no protobuf, no numpy).

:class:`TwinWriter` writes exactly what :func:`etkit.format.protojson.node_json` (plus ``_raw`` where
needed) writes, for the records that it reads itself; any other record goes to the caller's
per-record function. It reads a record only when the record is *canonical*, that is exactly what
protobuf would write for its fields (fields in number order, once each, no default value written,
dependency lists packed, minimal varints, valid UTF-8, known fields and enum values only): such a record
never needs ``_raw``, and its JSON can be read off its bytes. Everything else (unknown or repeated
fields, an unpacked or empty list, an over-long varint, an unknown node type, a NaN) takes the
per-record path, so the output is the same for every input.

The pieces that repeat from node to node (names, IOInfo messages, whole attributes) are converted once
and looked up by their bytes in caches of bounded size, so memory stays the same however long the trace
and whatever its node shapes. The loop that cuts records out of the file (:func:`iter_blocks`) reads
256 KiB at a time; a record longer than that is read whole.

Importing this module costs no third-party import: ``etkit to-json`` starts in a few tens of ms.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from json.encoder import encode_basestring  # (the C escaper of json.dumps)
from typing import IO

from .tags import (
    ATTR_NAME,
    IO_SHAPES,
    IO_TYPES,
    IO_VALUES,
    META_ATTR,
    META_VERSION,
    NODE_ATTR,
    NODE_CTRL,
    NODE_DATA,
    NODE_DURATION,
    NODE_ID,
    NODE_INPUTS,
    NODE_NAME,
    NODE_OUTPUTS,
    NODE_START,
    NODE_TYPE,
)

try:
    from . import _jsonout as JSONOUT
except ImportError:  # pragma: no cover - a build without the extension
    JSONOUT = None
#: JSONOUT: :meth:`TwinWriter.node` in C (``etkit.format._jsonout``: the canonical records of the shapes real
#: converters write, each read exactly as ``node`` reads it; it declines the rest, which ``node`` then reads), or
#: None where the package was built without a C compiler. This is its one home: :meth:`TwinWriter.texts` asks
#: it when it runs, and writes the same text without it.

__all__ = ["TwinWriter", "JSONOUT", "FramingFault", "iter_blocks", "json_string", "metadata_json", "NODE_TYPE_JSON"]


class FramingFault(Exception):
    """The file is not plainly well framed (truncated, an empty node, a bad length, corrupt gzip):
    the caller reads it again with the checking reader of :mod:`etkit.format.stream`."""


# -- framing ---------------------------------------------------------------------------------------

_BLOCK = 1 << 18


def iter_blocks(stream: IO[bytes]) -> Iterator[tuple[bytes, list[int]]]:
    """The records of an ``.et`` stream, GlobalMetadata first: ``(buffer, bounds)`` per block read, where
    ``bounds`` holds ``start, end`` of each record's payload in ``buffer``, in file order."""
    carry, want = b"", _BLOCK
    cut = _cut if JSONOUT is None else JSONOUT.cut
    while True:
        try:
            block = stream.read(want)
        except (OSError, EOFError, zlib.error) as exc:
            raise FramingFault(str(exc)) from None
        buf = carry + block if carry else block
        found = cut(buf)
        if found is None:
            raise FramingFault("record length varint longer than 5 bytes")
        bounds, pos, over = found
        if over:
            want = max(_BLOCK, over)  # a record longer than a block: read the rest at once
        elif bounds:
            want = _BLOCK
        if bounds:
            yield buf, bounds
        if not block:
            if pos < len(buf):
                raise FramingFault("truncated record")
            return
        carry = buf[pos:]


def _cut(buf: bytes) -> tuple[list[int], int, int] | None:
    """``(bounds, stop, over)`` of the records framed in ``buf`` from byte 0: ``start, end`` of each whole
    record's payload, where the first record that is not whole starts (its length prefix), and how far that
    record runs past the end of ``buf`` (0 if its prefix is cut off, or there is none); None where a length
    prefix is longer than five bytes (what ``JSONOUT.cut`` does in C)."""
    pos, end = 0, len(buf)
    bounds: list[int] = []
    add = bounds.append
    while pos < end:
        byte = buf[pos]
        if byte < 0x80:
            start, length = pos + 1, byte
        elif pos + 1 < end and buf[pos + 1] < 0x80:  # most node records: 128 B .. 16 KiB
            start, length = pos + 2, (byte & 0x7F) | (buf[pos + 1] << 7)
        else:
            try:
                prefix = _length_prefix(buf, pos, end)
            except FramingFault:
                return None
            if prefix is None:
                break
            length, start = prefix
        nxt = start + length
        if nxt > end:
            return bounds, pos, nxt - end
        add(start)
        add(nxt)
        pos = nxt
    return bounds, pos, 0


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


# -- values ----------------------------------------------------------------------------------------

_U64 = 1 << 64
_BAD = -1  # a varint that is not canonical (over-long, past 64 bits, cut off)


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """The canonical varint at ``pos`` (``_BAD`` for any other) and where it ends."""
    value = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if (byte == 0 and shift) or value >= _U64:
                return _BAD, pos
            return value, pos
        shift += 7
        if shift > 63:
            return _BAD, pos
    return _BAD, pos


def _field_span(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Where the bytes of the length-delimited field whose one-byte tag is at ``pos`` start and stop (a stop
    before the start: a bad length)."""
    length = buf[pos + 1] if pos + 1 < end else 0x80
    start = pos + 2
    if length >= 0x80:
        length, start = _varint(buf, pos + 1, end)
    return start, start + length


def _int_field(raw: bytes, pos: int, end: int, how: str, bits: int) -> int | None:
    """The varint ``raw[pos:end]`` as an integer attribute of kind ``how`` reads it (``"s"`` two's complement,
    ``"v"`` unsigned, ``"z"`` zigzag) in ``bits`` bits; ``None`` when it is not one canonical varint filling the
    span or does not fit (protobuf's parser would differ)."""
    value, pos = _varint(raw, pos, end)
    if value == _BAD or pos != end:
        return None
    if how == "s":
        if value >= 1 << 63:
            value -= _U64
        return value if -(1 << (bits - 1)) <= value < 1 << (bits - 1) else None
    if value >> bits:
        return None
    return (value >> 1) ^ -(value & 1) if how == "z" else value


def json_string(raw: bytes) -> bytes | None:
    """The JSON text (quoted, escaped) of UTF-8 ``raw``, as orjson and ``json.dumps(ensure_ascii=False)``
    write it (the same bytes for every code point); ``None`` for bytes that are not UTF-8."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return encode_basestring(text).encode("utf-8")


#: JSON text of each node type, by its value (``"type":"COMP_NODE"``); the order of Chakra's NodeType.
NODE_TYPE_JSON = [b'"type":"' + name + b'"' for name in (
    b"INVALID_NODE", b"METADATA_NODE", b"MEM_LOAD_NODE", b"MEM_STORE_NODE", b"COMP_NODE", b"COMM_SEND_NODE",
    b"COMM_RECV_NODE", b"COMM_COLL_NODE")]

#: AttributeProto value members read here: field number -> (JSON key, quoted, how the value is read):
#: "v" a varint, "s" a sign-extended varint, "z" a zigzag varint, "4"/"8" fixed little-endian (signed "4s"/"8s").
_INT_ATTRS = {7: (b"int32Val", False, "s", 32), 9: (b"int64Val", True, "s", 64), 11: (b"uint32Val", False, "v", 32),
              13: (b"uint64Val", True, "v", 64), 15: (b"sint32Val", False, "z", 32), 17: (b"sint64Val", True, "z", 64),
              19: (b"fixed32Val", False, "4", 32), 21: (b"fixed64Val", True, "8", 64),
              23: (b"sfixed32Val", False, "4s", 32), 25: (b"sfixed64Val", True, "8s", 64)}
_WIRE_OF = {"v": 0, "s": 0, "z": 0, "4": 5, "4s": 5, "8": 1, "8s": 1}
_BOOL, _STRING = 27, 29

#: What one cache of texts may hold (keys and texts, roughly); it is emptied when full.
CACHE_BUDGET = 1 << 20
_CACHED_BYTES = 4096  # longer pieces are rarely repeated: converted, not kept


class _Cache:
    """JSON texts by the bytes they come from, within :data:`CACHE_BUDGET`."""

    def __init__(self, make: Callable[[bytes], bytes | None]) -> None:
        self.make = make
        self.table: dict[bytes, bytes | None] = {}
        self.used = 0

    def miss(self, key: bytes) -> bytes | None:
        text = self.make(key)
        self.keep(key, text)
        return text

    def keep(self, key: bytes, text: bytes | None) -> None:
        if len(key) <= _CACHED_BYTES:
            self.used += 2 * len(key) + 100  # key, text and the entry itself, roughly
            if self.used > CACHE_BUDGET:
                self.table.clear()
                self.used = 0
            self.table[key] = text


def _name_json(raw: bytes) -> bytes | None:
    if not raw:
        return None  # an empty string written: not canonical
    return json_string(raw)


def _attr_json(raw: bytes) -> bytes | None:
    """The JSON text of a serialized AttributeProto: a name and an integer, bool or string value (or a
    name alone) read here; any other kind through protobuf (:func:`etkit.format.protojson.attr_json`)."""
    pos, end = 0, len(raw)
    head = b"{"
    if pos < end and raw[pos] == ATTR_NAME:
        length, start = _varint(raw, 1, end)
        if length <= 0 or start + length > end:
            return None
        name = json_string(raw[start:start + length])
        if name is None:
            return None
        head = b'{"name":' + name
        pos = start + length
        if pos == end:
            return head + b"}"
    if pos >= end or head == b"{":
        return _other_attr(raw)
    tag, pos = _varint(raw, pos, end)
    if tag == _BAD:
        return None
    field, wire = tag >> 3, tag & 7
    if field in _INT_ATTRS:
        key, quoted, how, bits = _INT_ATTRS[field]
        if wire != _WIRE_OF[how]:
            return _other_attr(raw)
        if how in ("4", "4s", "8", "8s"):
            size = 4 if how[0] == "4" else 8
            if pos + size != end:
                return None
            value = int.from_bytes(raw[pos:end], "little", signed=how.endswith("s"))
        else:
            typed = _int_field(raw, pos, end, how, bits)
            if typed is None:
                return None
            value = typed
        number = b"%d" % value
        return head + b',"' + key + b'":' + (b'"' + number + b'"' if quoted else number) + b"}"
    if field == _BOOL and wire == 0:
        if pos + 1 != end or raw[pos] > 1:
            return None
        return head + (b',"boolVal":true}' if raw[pos] else b',"boolVal":false}')
    if field == _STRING and wire == 2:
        length, start = _varint(raw, pos, end)
        if length == _BAD or start + length != end:
            return None
        text = json_string(raw[start:end])
        return None if text is None else head + b',"stringVal":' + text + b"}"
    return _other_attr(raw)


def _other_attr(raw: bytes) -> bytes | None:
    """Lists, floats, bytes, a doc string, no name: protobuf's own reading (imported only for these)."""
    from google.protobuf.message import DecodeError

    from .protojson import attr_json
    try:
        return attr_json(raw)
    except (DecodeError, ValueError, RuntimeError):
        return None


def metadata_json(raw: bytes) -> bytes | None:
    """The JSON text of a canonical GlobalMetadata record (a version, then attributes); ``None`` for any other."""
    parts = []
    pos, end = 0, len(raw)
    if pos < end and raw[pos] == META_VERSION:
        length, start = _varint(raw, 1, end)
        pos = start + length
        text = json_string(raw[start:pos]) if 0 < length and pos <= end else None
        if text is None:
            return None
        parts.append(b'"version":' + text)
    items = []
    while pos < end and raw[pos] == META_ATTR:
        length, start = _varint(raw, pos + 1, end)
        pos = start + length
        text = _attr_json(raw[start:pos]) if 0 <= length and pos <= end else None
        if text is None:
            return None
        items.append(text)
    if pos != end:
        return None
    if items:
        parts.append(b'"attr":[' + b",".join(items) + b"]")
    return b"{" + b",".join(parts) + b"}"


# -- nodes -----------------------------------------------------------------------------------------

_IO_FIELDS = ((IO_VALUES, b'"values":'), (IO_SHAPES, b'"shapes":'), (IO_TYPES, b'"types":'))
_TIME_FIELDS = ((NODE_START, b'"startTimeMicros":"%d"'), (NODE_DURATION, b'"durationMicros":"%d"'))


def _int_head(head: bytes) -> tuple[bytes, str, int, bool] | None:
    """``name, tag`` of an attribute with a one-byte varint tag: its JSON up to the value and how the
    value reads; ``None`` when the value is not a varint integer."""
    name = _name_json(head[2:-1])
    field, wire = head[-1] >> 3, head[-1] & 7
    if name is None or field not in _INT_ATTRS or wire != 0:
        return None
    key, quoted, how, bits = _INT_ATTRS[field]
    return b'{"name":' + name + b',"' + key + b'":' + (b'"' if quoted else b""), how, bits, quoted


class TwinWriter:
    """Converts node records to JSON text; its caches last from one block to the next."""

    def __init__(self) -> None:
        self._names = _Cache(_name_json)
        self._strings = _Cache(json_string)
        self._ios = _Cache(self._io_json)
        self._attrs = _Cache(_attr_json)
        self._heads: dict[bytes, tuple[bytes, str, int, bool] | None] = {}
        #: The attributes of a node from the one at ``_tail_at`` to the last, by their bytes (what follows
        #: the attributes that change from node to node: ids, sequence numbers).
        self._tails = _Cache(lambda raw: None)
        self._tail_at = -1

    def texts(self, buf: bytes, bounds: list[int], first: int, slow: Callable[[bytes, int], bytes]) -> list[bytes]:
        """The JSON text of the records ``buf[bounds[2i]:bounds[2i+1]]`` from pair ``first`` on, in pieces to be
        joined by ``b",\\n"``: a piece holds one record's text, or the texts of a run of records so joined (what
        :data:`JSONOUT` renders, where it was built). ``slow(record, i)`` gives the text of a record not read
        here (``i`` counts from ``first``)."""
        kernel = JSONOUT
        node = self.node
        out: list[bytes] = []
        add = out.append
        i, n = first, len(bounds) // 2
        while i < n:
            if kernel is not None:  # the records it reads, up to the first it declines
                run, i = kernel.render(buf, bounds, i)
                if run:
                    add(run)
                if i == n:
                    break
            start, end = bounds[2 * i], bounds[2 * i + 1]
            text = node(buf, start, end)
            add(slow(buf[start:end], i - first) if text is None else text)
            i += 1
        return out

    def _io_json(self, raw: bytes) -> bytes | None:
        """``{"values":..,"shapes":..,"types":..}`` of a serialized IOInfo (each only when set), or None;
        its strings through the cache of strings (shapes and types repeat where values do not)."""
        parts = []
        pos, end = 0, len(raw)
        strings = self._strings
        table = strings.table
        for tag, key in _IO_FIELDS:
            if pos < end and raw[pos] == tag:
                start, pos = _field_span(raw, pos, end)
                if pos <= start or pos > end:
                    return None  # empty (protobuf leaves it out), or cut off
                piece = raw[start:pos]
                text = table.get(piece) or strings.miss(piece)
                if text is None:
                    return None
                parts.append(key + text)
        if pos != end:
            return None  # unknown fields, or fields out of order / repeated
        return b"{" + b",".join(parts) + b"}"

    def _int_attr(self, raw: bytes) -> bytes | None:
        """The JSON text of ``name`` + a varint integer value (the attributes that differ from node to
        node: ids, sequence numbers), its head cached; ``None`` for any other attribute."""
        size = len(raw)
        length = raw[1] if size > 3 and raw[0] == ATTR_NAME else 0x80
        head_end = length + 3
        if not 0 < length < 0x80 or head_end >= size or raw[head_end - 1] >= 0x80:
            return None
        head = raw[:head_end]
        heads = self._heads
        if head in heads:
            entry = heads[head]
        else:
            entry = heads[head] = _int_head(head) if len(heads) < 4096 else None
        if entry is None:
            return None
        prefix, how, bits, quoted = entry
        value = raw[head_end]
        if value < 0x80 and head_end + 1 == size:  # a small value: it repeats, so it is cached
            text = prefix + (b'%d"}' if quoted else b"%d}") % ((value >> 1) ^ -(value & 1) if how == "z" else value)
            self._attrs.keep(raw, text)
            return text
        typed = _int_field(raw, head_end, size, how, bits)
        if typed is None:
            return None
        return prefix + (b'%d"}' if quoted else b"%d}") % typed

    def node(self, buf: bytes, pos: int, end: int) -> bytes | None:  # noqa: C901 - one field after the other
        """The JSON text of the canonical node record ``buf[pos:end]``; ``None`` for any other."""
        if pos >= end:
            raise FramingFault("empty node record")
        parts: list[bytes] = []
        add = parts.append
        tag = buf[pos]
        if tag == NODE_ID:
            value = buf[pos + 1] if pos + 1 < end else 0
            if value < 0x80:
                pos += 2
            elif pos + 2 < end and 0 < buf[pos + 2] < 0x80:
                value = (value & 0x7F) | buf[pos + 2] << 7
                pos += 3
            elif pos + 3 < end and buf[pos + 2] >= 0x80 and 0 < buf[pos + 3] < 0x80:  # ids up to 2 million
                value = (value & 0x7F) | (buf[pos + 2] & 0x7F) << 7 | buf[pos + 3] << 14
                pos += 4
            else:
                value, pos = _varint(buf, pos + 1, end)
            if value <= 0:
                return None
            add(b'"id":"%d"' % value)
            tag = buf[pos] if pos < end else 0
        if tag == NODE_NAME:
            start, pos = _field_span(buf, pos, end)
            if pos <= start or pos > end:
                return None
            key = buf[start:pos]
            text = self._names.table.get(key) or self._names.miss(key)
            if text is None:
                return None
            add(b'"name":' + text)
            tag = buf[pos] if pos < end else 0
        if tag == NODE_TYPE:
            value = buf[pos + 1] if pos + 1 < end else 0
            if not 0 < value < 8:
                return None
            add(NODE_TYPE_JSON[value])
            pos += 2
            tag = buf[pos] if pos < end else 0
        if tag == NODE_CTRL or tag == NODE_DATA:
            for list_tag, list_key in ((NODE_CTRL, b'"ctrlDeps":["'), (NODE_DATA, b'"dataDeps":["')):
                if tag != list_tag:
                    continue
                start, pos = _field_span(buf, pos, end)
                if pos <= start or pos > end:
                    return None
                ids = []
                while start < pos:
                    value = buf[start]
                    if value < 0x80:
                        start += 1
                    elif start + 1 < pos and 0 < buf[start + 1] < 0x80:
                        value = (value & 0x7F) | buf[start + 1] << 7
                        start += 2
                    elif start + 2 < pos and buf[start + 1] >= 0x80 and 0 < buf[start + 2] < 0x80:
                        value = (value & 0x7F) | (buf[start + 1] & 0x7F) << 7 | buf[start + 2] << 14
                        start += 3
                    else:
                        value, start = _varint(buf, start, pos)
                        if value == _BAD:
                            return None
                    ids.append(b"%d" % value)
                if start != pos:
                    return None
                add(list_key + b'","'.join(ids) + b'"]')
                tag = buf[pos] if pos < end else 0
        for time_tag, time_key in _TIME_FIELDS:  # start, then duration: positive varints
            if tag != time_tag:
                continue
            value = buf[pos + 1] if pos + 1 < end else 0x80
            if value < 0x80:
                pos += 2
            else:
                value, pos = _varint(buf, pos + 1, end)
            if value <= 0:
                return None
            add(time_key % value)
            tag = buf[pos] if pos < end else 0
        if tag == NODE_INPUTS or tag == NODE_OUTPUTS:
            ios = self._ios
            table = ios.table
            for io_tag, io_key in ((NODE_INPUTS, b'"inputs":'), (NODE_OUTPUTS, b'"outputs":')):
                if tag != io_tag:
                    continue
                start, pos = _field_span(buf, pos, end)
                if pos < start or pos > end:
                    return None
                key = buf[start:pos]
                text = table.get(key) or ios.miss(key)
                if text is None:
                    return None
                add(io_key + text)
                tag = buf[pos] if pos < end else 0
        if tag == NODE_ATTR:  # to the end of the record
            attrs = self._attrs
            table = attrs.table
            int_attr = self._int_attr
            tails, tail_at = self._tails.table, self._tail_at
            items: list[bytes] = []
            last_miss, tail_pos, hit = -1, pos, False
            while tag == NODE_ATTR:
                if len(items) == tail_at:
                    text = tails.get(buf[pos:end])
                    if text is not None:  # the rest of the attributes, as they were on an earlier node
                        items.append(text)
                        pos, hit = end, True
                        break
                length = buf[pos + 1] if pos + 1 < end else 0x80
                start = pos + 2
                if length >= 0x80:
                    length, start = _varint(buf, pos + 1, end)
                if length < 0 or start + length > end:
                    return None
                key = buf[start:start + length]
                pos = start + length
                text = table.get(key)
                if text is None:
                    text = int_attr(key) or attrs.miss(key)
                    if text is None:
                        return None
                    last_miss, tail_pos = len(items), pos
                items.append(text)
                tag = buf[pos] if pos < end else 0
            if pos == end and len(items) - last_miss > 2 and (not hit or last_miss + 1 < tail_at):
                # the attributes after the last new one repeat: look for all of them at once on the next nodes
                self._tail_at = last_miss + 1
                self._tails.keep(buf[tail_pos:end], b",".join(items[last_miss + 1:]))
            add(b'"attr":[' + b",".join(items) + b"]")
        if pos != end:
            return None  # an unknown field, a field out of order or repeated
        return b"{" + b",".join(parts) + b"}"
