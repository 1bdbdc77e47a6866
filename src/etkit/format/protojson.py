"""The proto3 JSON mapping of Chakra messages, both ways: lowerCamelCase names, enum names, 64-bit
integers as strings (they survive any JSON parser), bytes as base64, NaN/Infinity as strings.

The one home of the mapping: the JSON twin (:mod:`.jsontwin`), its byte-level writer (:mod:`.jsonfast`)
and the jsonizer layout all write and read messages through it.
"""

from __future__ import annotations

import base64
import math
from typing import TYPE_CHECKING, Any

import msgspec
import orjson

from ..lazy import LazyModule
from . import tags
from .schema import LIST_KINDS, AttributeProto, GlobalMetadata, IOInfo, Node, NodeType
from .stream import encode_varint, varint_table
from .tags import key_byte

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:
    np = LazyModule("numpy", "np", globals())  # (for float fields only: from-json of most traces needs no numpy)

try:
    from . import _jsonin as JSONIN
except ImportError:  # pragma: no cover - a build without the extension
    JSONIN = None
#: JSONIN: the twin's node lines to their framed records in C (``etkit.format._jsonin``: ``lines(buf, start, end)``),
#: or None where the package was built without a C compiler. This is its one home: ``from_json`` asks
#: ``protojson.JSONIN`` when it runs; without it, :class:`LineEncoder` gives the same bytes one line at a time.

_NAME_KEY, _TYPE_KEY, _ATTR_KEY = (key_byte(k) for k in (tags.NODE_NAME, tags.NODE_TYPE, tags.NODE_ATTR))
_IO_VALUES, _IO_SHAPES, _IO_TYPES = (key_byte(k) for k in (tags.IO_VALUES, tags.IO_SHAPES, tags.IO_TYPES))
_ID_KEY, _CTRL_KEY, _DATA_KEY, _START_KEY, _DURATION_KEY, _INPUTS_KEY, _OUTPUTS_KEY = (key_byte(k) for k in (
    tags.NODE_ID, tags.NODE_CTRL, tags.NODE_DATA, tags.NODE_START, tags.NODE_DURATION, tags.NODE_INPUTS, tags.NODE_OUTPUTS))

__all__ = [
    "attr_to_dict", "attr_json", "compact", "io_to_dict", "node_to_dict", "metadata_to_dict",
    "dict_to_node", "dict_to_metadata", "NodeEncoder", "KIND_JSON", "NODE_TYPE_NAMES", "WIDE_SCALARS",
    "Fragments", "node_json", "node_text", "metadata_json", "LineEncoder", "JSONIN",
]

NODE_TYPE_NAMES = {t.value: t.name for t in NodeType}
_NODE_TYPE_VALUES = {t.name: t.value for t in NodeType}
#: Scalar types written as JSON strings (64-bit integers).
WIDE_SCALARS = frozenset({"int64", "uint64", "sint64", "fixed64", "sfixed64"})
_FLOATS = frozenset({"double", "float"})
_SNAKE_TO_CAMEL = {
    "ctrl_deps": "ctrlDeps", "data_deps": "dataDeps", "start_time_micros": "startTimeMicros",
    "duration_micros": "durationMicros", "doc_string": "docString",
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


#: JSON key of each ``AttributeProto`` value member (``int64_val`` -> ``int64Val``).
KIND_JSON = {kind: _camel(kind) for kind in (f"{k}_{f}" for k in (
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
    "sfixed32", "sfixed64", "bool", "string", "bytes") for f in ("val", "list"))}
_JSON_KIND = {v: k for k, v in KIND_JSON.items()} | {k: k for k in KIND_JSON}


# -- message -> dict ---------------------------------------------------------------------------------

def _float_out(value: float, scalar: str) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if scalar == "float":
        return float(str(np.float32(value)))
    return value


def _scalar_out(value: Any, scalar: str) -> Any:
    if scalar in WIDE_SCALARS:
        return str(value)
    if scalar in _FLOATS:
        return _float_out(value, scalar)
    if scalar == "bytes":
        return base64.b64encode(value).decode("ascii")
    return value


def attr_to_dict(attr: AttributeProto) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if attr.name:
        out["name"] = attr.name
    if attr.doc_string:
        out["docString"] = attr.doc_string
    kind = attr.WhichOneof("value")
    if kind is not None:
        scalar = kind.rsplit("_", 1)[0]
        if kind in LIST_KINDS:
            values = getattr(attr, kind).values
            out[KIND_JSON[kind]] = {"values": [_scalar_out(v, scalar) for v in values]} if values else {}
        else:
            out[KIND_JSON[kind]] = _scalar_out(getattr(attr, kind), scalar)
    return out


def compact(text: bytes) -> bytes:
    """A copy of ``text`` that holds only its own bytes: orjson 3.13 returns every result in a 4 KiB
    buffer, so a cache of its texts costs 4 KiB an entry unless they are copied."""
    return bytes(memoryview(text))


def attr_json(data: bytes) -> bytes | None:
    """The JSON text of one serialized attribute, or ``None`` where that text would not give its
    bytes back (unknown fields, a NaN that may carry a sign or payload)."""
    attr = AttributeProto.FromString(data)
    attr.DiscardUnknownFields()
    if attr.SerializeToString() != data:
        return None
    text = orjson.dumps(attr_to_dict(attr))
    return None if b'"NaN"' in text else compact(text)


def io_to_dict(io: IOInfo) -> dict[str, str]:
    return {key: value for key, value in (("values", io.values), ("shapes", io.shapes), ("types", io.types)) if value}


def _ids(values: Any) -> list[str]:
    return [str(v) for v in values]


_NODE_FIELDS: dict[int, tuple[str, Any]] = {
    1: ("id", str),
    2: ("name", None),
    3: ("type", lambda v: NODE_TYPE_NAMES.get(v, v)),
    4: ("ctrlDeps", _ids),
    5: ("dataDeps", _ids),
    6: ("startTimeMicros", str),
    7: ("durationMicros", str),
    8: ("inputs", io_to_dict),
    9: ("outputs", io_to_dict),
}


def node_to_dict(node: Node) -> dict[str, Any]:
    """A Node in the proto3 JSON mapping."""
    out: dict[str, Any] = {}
    for field, value in node.ListFields():
        number = field.number
        if number == 10:
            out["attr"] = [attr_to_dict(a) for a in value]
        elif number in _NODE_FIELDS:
            key, convert = _NODE_FIELDS[number]
            out[key] = convert(value) if convert else value
    return out


def metadata_to_dict(meta: GlobalMetadata) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if meta.version:
        out["version"] = meta.version
    if meta.attr:
        out["attr"] = [attr_to_dict(a) for a in meta.attr]
    return out


# -- message -> JSON text, one record at a time ------------------------------------------------------

class Fragments:
    """JSON text of repeated pieces, by their protobuf bytes: traces repeat the same attributes, IOInfo
    and names on most nodes, so each distinct one is converted once (bounded: cleared when full)."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit
        self.table: dict[object, bytes] = {}

    def _get(self, key: object, make: Any) -> bytes:
        hit = self.table.get(key)
        if hit is None:
            if len(self.table) >= self.limit:
                self.table.clear()
            hit = self.table[key] = compact(orjson.dumps(make()))
        return hit

    def attr(self, attr: AttributeProto) -> bytes:
        key = attr.SerializeToString()
        hit = self.table.get(key)
        if hit is not None:
            return hit
        kind = attr.WhichOneof("value")
        quoted = _QUOTED_SCALARS.get(kind)
        if quoted is None or attr.doc_string or not attr.name:
            return self._get(key, lambda: attr_to_dict(attr))
        # integer-valued attributes are often unique per node (rf_id, seq_id): format them directly
        return bytes(b'{"name":' + self.name(attr.name) + quoted % getattr(attr, kind))

    def io(self, io: IOInfo) -> bytes:
        return self._get((io.values, io.shapes, io.types), lambda: io_to_dict(io))

    def name(self, name: str) -> bytes:
        return self._get(name, lambda: name)


#: ``%``-templates of integer attribute values after the name (64-bit ones quoted, as proto3 JSON says).
_QUOTED_SCALARS = {f"{k}_val": (f',"{KIND_JSON[k + "_val"]}":"%d"}}' if k in WIDE_SCALARS else f',"{KIND_JSON[k + "_val"]}":%d}}').encode()
                   for k in ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32",
                             "sfixed64")}

_TYPE_JSON = {value: b'"type":"' + name.encode() + b'"' for value, name in NODE_TYPE_NAMES.items()}


def _id_list(key: bytes, values: Any) -> bytes:
    return key + b'["' + b'","'.join([b"%d" % v for v in values]) + b'"]'


def node_json(node: Node, fragments: Fragments) -> bytes:
    """The JSON text of :func:`node_to_dict` (the same document), built from cached fragments."""
    parts = []
    if node.id:
        parts.append(b'"id":"%d"' % node.id)
    if node.name:
        parts.append(b'"name":' + fragments.name(node.name))
    if node.type:
        parts.append(_TYPE_JSON.get(node.type) or b'"type":%d' % node.type)
    if node.ctrl_deps:
        parts.append(_id_list(b'"ctrlDeps":', node.ctrl_deps))
    if node.data_deps:
        parts.append(_id_list(b'"dataDeps":', node.data_deps))
    if node.start_time_micros:
        parts.append(b'"startTimeMicros":"%d"' % node.start_time_micros)
    if node.duration_micros:
        parts.append(b'"durationMicros":"%d"' % node.duration_micros)
    if node.HasField("inputs"):
        parts.append(b'"inputs":' + fragments.io(node.inputs))
    if node.HasField("outputs"):
        parts.append(b'"outputs":' + fragments.io(node.outputs))
    if node.attr:
        parts.append(b'"attr":[' + b",".join([fragments.attr(a) for a in node.attr]) + b"]")
    return b"{" + b",".join(parts) + b"}"


def metadata_json(payload: bytes) -> bytes:
    """The JSON text of a GlobalMetadata record, with ``_raw`` when its fields do not reproduce its
    bytes (raises protobuf's DecodeError for bytes that are not a GlobalMetadata)."""
    meta = GlobalMetadata.FromString(payload)
    d = metadata_to_dict(meta)
    if _needs_raw(meta, payload) or _nan_lossy(orjson.dumps(d), dict_to_metadata, payload):
        d["_raw"] = base64.b64encode(payload).decode("ascii")
    return orjson.dumps(d)


def _needs_raw(message: Any, payload: bytes) -> bool:
    message.DiscardUnknownFields()  # the JSON carries no unknown fields, so neither may the comparison
    return bool(message.SerializeToString() != payload)


def _nan_lossy(text: bytes, from_dict: Any, payload: bytes) -> bool:
    """True when a NaN of the message has a sign or payload that JSON's "NaN" loses."""
    return b'"NaN"' in text and from_dict(orjson.loads(text)).SerializeToString() != payload


def node_text(payload: bytes, fragments: Fragments) -> bytes:
    """The JSON text of one node record, with ``_raw`` when its fields do not reproduce its bytes
    (raises protobuf's DecodeError for bytes that are not a Node)."""
    node = Node.FromString(payload)
    text = node_json(node, fragments)
    if _needs_raw(node, payload) or _nan_lossy(text, dict_to_node, payload):
        text = text[:-1] + (b"," if len(text) > 2 else b"") + b'"_raw":"' + base64.b64encode(payload) + b'"}'
    return text


# -- dict -> message ---------------------------------------------------------------------------------

def _scalar_in(value: Any, scalar: str) -> Any:
    if scalar in _FLOATS:
        special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        return special[value] if isinstance(value, str) and value in special else float(value)
    if scalar == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"expected true/false, got {value!r}")
        return value
    if scalar == "string":
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        return value
    if scalar == "bytes":
        return base64.b64decode(value, validate=False)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected an integer, got {value!r}")
    return int(value)


def _fill_attr(attr: AttributeProto, data: dict[str, Any]) -> None:
    for key, value in data.items():
        if key == "name":
            attr.name = value
        elif key in ("docString", "doc_string"):
            attr.doc_string = value
        elif key in _JSON_KIND:
            kind = _JSON_KIND[key]
            scalar = kind.rsplit("_", 1)[0]
            if kind in LIST_KINDS:
                target = getattr(attr, kind)
                target.SetInParent()
                target.values.extend(_scalar_in(v, scalar) for v in (value or {}).get("values", []))
            else:
                setattr(attr, kind, _scalar_in(value, scalar))
        else:
            raise ValueError(f"unknown attribute field {key!r}")


def _fill_io(io: IOInfo, data: dict[str, Any]) -> None:
    io.SetInParent()
    for key, value in data.items():
        if key not in ("values", "shapes", "types"):
            raise ValueError(f"unknown IOInfo field {key!r}")
        setattr(io, key, value)


def _node_type(value: Any) -> int:
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        if value not in _NODE_TYPE_VALUES:
            raise ValueError(f"unknown node type {value!r}")
        return _NODE_TYPE_VALUES[value]
    return int(value)


def raw_bytes(data: dict[str, Any]) -> bytes:
    """The original record bytes that the JSON twin keeps in ``"_raw"`` (base64)."""
    return base64.b64decode(data["_raw"], validate=True)


def dict_to_node(data: dict[str, Any]) -> Node:
    """The Node of a proto3-JSON dict (camelCase or snake_case names); ``_raw`` wins when present."""
    if "_raw" in data:
        return Node.FromString(raw_bytes(data))
    node = Node()
    for key, value in data.items():
        key = _SNAKE_TO_CAMEL.get(key, key)
        if key == "id":
            node.id = int(value)
        elif key == "name":
            node.name = value
        elif key == "type":
            node.type = _node_type(value)
        elif key == "ctrlDeps":
            node.ctrl_deps.extend(int(v) for v in value)
        elif key == "dataDeps":
            node.data_deps.extend(int(v) for v in value)
        elif key == "startTimeMicros":
            node.start_time_micros = int(value)
        elif key == "durationMicros":
            node.duration_micros = int(value)
        elif key in ("inputs", "outputs"):
            _fill_io(getattr(node, key), value)
        elif key == "attr":
            for item in value:
                _fill_attr(node.attr.add(), item)
        else:
            raise ValueError(f"unknown node field {key!r}")
    return node


def dict_to_metadata(data: dict[str, Any]) -> GlobalMetadata:
    if "_raw" in data:
        return GlobalMetadata.FromString(raw_bytes(data))
    meta = GlobalMetadata()
    for key, value in data.items():
        if key == "version":
            meta.version = value
        elif key == "attr":
            for item in value:
                _fill_attr(meta.attr.add(), item)
        else:
            raise ValueError(f"unknown GlobalMetadata field {key!r}")
    return meta


# -- dict -> record bytes, directly ----------------------------------------------------------------

_U64_MAX = (1 << 64) - 1
_I64 = (-(1 << 63), (1 << 63) - 1)
#: Oneof members encoded here: JSON key -> (field number, lowest, highest value); bool and string apart.
_INT_MEMBERS = {"int32Val": (7, -(1 << 31), (1 << 31) - 1), "int64Val": (9, *_I64), "uint32Val": (11, 0, (1 << 32) - 1),
                "uint64Val": (13, 0, _U64_MAX)}
_VARINT_1 = [bytes((i,)) for i in range(128)]
_SMALL_VARINTS = varint_table()  # (the record framing's table: made once)


def _varint(value: int) -> bytes:
    """:func:`encode_varint` of a non-negative int (from a table below 2**14, three bytes at once below 2**21)."""
    if value < 0x4000:
        return _SMALL_VARINTS[value]
    if value < 0x200000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
    return encode_varint(value)


def _text(tag: bytes, text: str) -> bytes:
    data = text.encode("utf-8")
    return tag + _varint(len(data)) + data


def _int(value: Any, low: int, high: int) -> int | None:
    """``value`` (a JSON number or decimal string) as an int in ``[low, high]``, or None (the slow path decides)."""
    if type(value) is str:
        if not value.lstrip("-").isdigit() or not value.isascii():
            return None
        value = int(value)
    elif type(value) is not int:
        return None
    return value if low <= value <= high else None


def _first(item: tuple[int, bytes]) -> int:
    return item[0]


class NodeEncoder:
    """Node records straight from proto3-JSON dicts: exactly ``dict_to_node(d).SerializeToString()``.

    The usual fields and attributes (integer, bool and string values; IOInfo; ids as strings or numbers)
    are encoded here, attributes through a bounded table by their JSON fields; any other dict (a list
    or float attribute, a doc string, snake_case keys, a value out of range, ``_raw``) goes through
    :func:`dict_to_node`, which also raises the errors.
    """

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit
        self.attrs: dict[Any, bytes] = {}
        self.heads: dict[tuple[str, str], tuple[bytes, int, int, int]] = {}

    def encode(self, data: dict[str, Any]) -> bytes:
        try:
            record = self._fast(data)
        except (TypeError, KeyError, AttributeError, UnicodeEncodeError):
            record = None
        return dict_to_node(data).SerializeToString() if record is None else record

    def _fast(self, data: dict[str, Any]) -> bytes | None:
        get = data.get
        parts = []
        used = 0  # keys read: any other key sends the dict the slow way
        for key, tag in (("id", tags.NODE_ID), ("startTimeMicros", tags.NODE_START), ("durationMicros", tags.NODE_DURATION)):
            if key in data:
                used += 1
                v = _int(data[key], 0, _U64_MAX)
                if v is None:
                    return None
                if v:
                    parts.append((tag, _VARINT_1[tag] + _varint(v)))
        name = get("name")
        if name is not None:
            used += 1
            if type(name) is not str:
                return None
            if name:
                parts.append((tags.NODE_NAME, _text(_NAME_KEY, name)))
        node_type = get("type")
        if node_type is not None:
            used += 1
            value = _NODE_TYPE_VALUES.get(node_type) if type(node_type) is str else None
            if value is None:
                return None
            if value:
                parts.append((tags.NODE_TYPE, _TYPE_KEY + _VARINT_1[value]))
        for key, tag in (("ctrlDeps", tags.NODE_CTRL), ("dataDeps", tags.NODE_DATA)):
            deps = get(key)
            if deps is not None:
                used += 1
                if type(deps) is not list:
                    return None
                if deps:
                    body = []
                    for d in deps:
                        v = _int(d, 0, _U64_MAX)
                        if v is None:
                            return None
                        body.append(_varint(v))
                    joined = b"".join(body)
                    parts.append((tag, _VARINT_1[tag] + _varint(len(joined)) + joined))
        for key, tag in (("inputs", tags.NODE_INPUTS), ("outputs", tags.NODE_OUTPUTS)):
            io = get(key)
            if io is not None:
                used += 1
                if type(io) is not dict or len(io) > 3:
                    return None
                io_body = b""
                n = 0
                for sub, subtag in (("values", _IO_VALUES), ("shapes", _IO_SHAPES), ("types", _IO_TYPES)):
                    text = io.get(sub)
                    if text is not None:
                        n += 1
                        if type(text) is not str:
                            return None
                        if text:
                            io_body += _text(subtag, text)
                if n != len(io):
                    return None
                parts.append((tag, _VARINT_1[tag] + _varint(len(io_body)) + io_body))
        attrs = get("attr")
        if attrs is not None:
            used += 1
            if type(attrs) is not list:
                return None
            for attr in attrs:
                encoded = self._attr(attr)
                if encoded is None:
                    return None
                parts.append((tags.NODE_ATTR, encoded))
        if used != len(data):
            return None  # another key: snake_case names, _raw, or an unknown one
        parts.sort(key=_first)  # field number order, whatever the order of the JSON keys (stable: attributes keep theirs)
        return b"".join([part for _, part in parts])

    def _attr(self, attr: Any) -> bytes | None:
        """``52 len AttributeProto`` of one attribute dict, or None."""
        if type(attr) is not dict or len(attr) != 2 or "name" not in attr:
            return None
        (k1, name), (k2, value) = attr.items() if next(iter(attr)) == "name" else reversed(attr.items())
        if type(name) is not str or not name:
            return None
        if type(value) is str or type(value) is bool:
            key = (name, k2, value, type(value) is bool)
            hit = self.attrs.get(key)
            if hit is not None:
                return hit
        head = self._head(name, k2)
        if head is None:
            return None
        prefix, number, low, high = head
        if number == 27:
            if type(value) is not bool:
                return None
            body = prefix + (b"\x01" if value else b"\x00")
        elif number == 29:
            if type(value) is not str:
                return None
            data = value.encode("utf-8")
            body = prefix + _varint(len(data)) + data
        else:
            v = _int(value, low, high)
            if v is None or type(value) is bool:
                return None
            body = prefix + _varint(v & _U64_MAX)
        encoded = _attr_field(body)
        if type(value) is str or type(value) is bool:
            if len(self.attrs) >= self.limit:
                self.attrs.clear()
            self.attrs[(name, k2, value, type(value) is bool)] = encoded
        return encoded

    def _head(self, name: str, member: str) -> tuple[bytes, int, int, int] | None:
        """The bytes of an attribute up to its value (name, value key), its field number and the value's range."""
        head = self.heads.get((name, member))
        if head is None:
            known = _INT_MEMBERS.get(member)
            number = 27 if member == "boolVal" else 29 if member == "stringVal" else known[0] if known else 0
            if not number:
                return None
            low, high = (known[1], known[2]) if known else (0, 0)
            head = self.heads[(name, member)] = (_text(b"\x0a", name) + _varint(number << 3 | (2 if number == 29 else 0)),
                                                 number, low, high)
        return head

    def int_head(self, name: str, member: str) -> tuple[bytes, int, int] | None:
        """For :func:`int_attr_field`: the bytes of an integer attribute up to its value, and the value's range."""
        head = self._head(name, member)
        return None if head is None or head[1] in (27, 29) else (head[0], head[2], head[3])


def int_attr_field(head: tuple[bytes, int, int], value: int) -> bytes | None:
    """``52 len AttributeProto`` of an integer attribute from :meth:`NodeEncoder.int_head` and its value (None
    out of range): the bytes of ``NodeEncoder._attr({"name": name, member: str(value)})``."""
    prefix, low, high = head
    if not low <= value <= high:
        return None
    body = prefix + (_SMALL_VARINTS[value] if 0 <= value < 0x4000 else _varint(value & _U64_MAX))
    return _ATTR_KEY + _SMALL_VARINTS[len(body)] + body if len(body) < 0x4000 else _attr_field(body)


def _attr_field(body: bytes) -> bytes:
    return _ATTR_KEY + _varint(len(body)) + body


# -- one node's JSON text -> record bytes ----------------------------------------------------------

class _NodeLine(msgspec.Struct, forbid_unknown_fields=True):
    """A node object as the twin writes it, decoded by msgspec: its scalar fields as the strings they are
    in the text, its IOInfo and attribute list as raw JSON text (:class:`LineEncoder` reads those)."""

    id: str = "0"
    name: str = ""
    type: str = "INVALID_NODE"
    ctrlDeps: list[str] = []
    dataDeps: list[str] = []
    startTimeMicros: str = "0"
    durationMicros: str = "0"
    inputs: msgspec.Raw = msgspec.Raw()  # empty: the key is absent
    outputs: msgspec.Raw = msgspec.Raw()
    attr: msgspec.Raw = msgspec.Raw()


def _uint(text: str) -> int | None:
    """The value of a decimal string of ASCII digits (the text is ASCII) that fits 64 bits, else None."""
    if text.isdigit():
        value = int(text)
        return value if value <= _U64_MAX else None
    return None


_NODE_DECODE_ERRORS = (msgspec.MsgspecError, ValueError, TypeError, KeyError, AttributeError, UnicodeError)
_IO_HEAD = b'{"values":"'
_MAX_LEAD = 16  # attributes read one by one before the looked-up tail, at most
_NO_ID = "0"


class LineEncoder:
    """Node records straight from the JSON text of one node: exactly the bytes of
    ``NodeEncoder.encode(orjson.loads(text))``, or None for a text it does not vouch for (the caller
    then takes that general path, which also reports the errors).

    msgspec checks the syntax and decodes the top level into :class:`_NodeLine`; a text with a
    backslash or a byte that is not ASCII is left to the general path, so every string's bytes are its
    UTF-8 bytes (msgspec does not check UTF-8 inside raw text; the ASCII rule makes that moot). IOInfo is
    read in the twin's own layout (``values``, ``shapes``, ``types``); each attribute's text is looked up in
    a bounded table (a new one is parsed by orjson and encoded by :class:`NodeEncoder`), and one holding a
    decimal string after a known name and integer key (the ``rf_id`` of every node) is encoded from its
    digits.
    """

    def __init__(self, encoder: NodeEncoder | None = None, limit: int = 1 << 16) -> None:
        self.encoder = encoder or NodeEncoder(limit)
        self.limit = limit
        self.decode = msgspec.json.Decoder(_NodeLine).decode
        self.attrs: dict[bytes, bytes] = {}  # attribute text -> its field
        self.int_heads: dict[bytes, tuple[tuple[bytes, int, int], bool]] = {}  # text before an integer's digits -> head, signed
        self.io_tails: dict[bytes, bytes] = {}  # IOInfo text from the end of ``values`` -> shapes and types fields
        self.tails: dict[bytes, bytes] = {}  # attribute list text after the first ``lead`` -> their fields
        self.lead = 0
        self.lookups = 0  # of tails
        self.changes: dict[int, int] = {}  # attribute position -> tails in which an integer there changed
        self.names: dict[str, bytes] = {}
        self.inputs: dict[bytes, bytes] = {}  # the text of a recent IOInfo (most repeat) -> its field
        self.outputs: dict[bytes, bytes] = {}

    def encode(self, text: bytes) -> bytes | None:
        if b"\\" in text or not text.isascii():
            return None
        try:
            return self._record(self.decode(text))
        except _NODE_DECODE_ERRORS:
            return None

    def _record(self, node: _NodeLine) -> bytes | None:
        parts = []
        text = node.id
        if text != _NO_ID:
            if not text.isdigit():
                return None
            v = int(text)
            if v > _U64_MAX:
                return None
            if v:
                parts.append(_ID_KEY + _varint(v))
        name = node.name
        if name:
            field = self.names.get(name)
            if field is None:
                if len(self.names) >= self.limit:
                    self.names.clear()
                field = self.names[name] = _text(_NAME_KEY, name)
            parts.append(field)
        value = _NODE_TYPE_VALUES.get(node.type)
        if value is None:
            return None
        if value:
            parts.append(_TYPE_KEY + _VARINT_1[value])
        for deps, key in ((node.ctrlDeps, _CTRL_KEY), (node.dataDeps, _DATA_KEY)):
            if deps:
                body = []
                for d in deps:
                    if not d.isdigit():
                        return None
                    v = int(d)
                    if v > _U64_MAX:
                        return None
                    body.append(_varint(v))
                joined = b"".join(body)
                parts.append(key + _varint(len(joined)) + joined)
        if node.startTimeMicros != _NO_ID or node.durationMicros != _NO_ID:
            for micros, key in ((node.startTimeMicros, _START_KEY), (node.durationMicros, _DURATION_KEY)):
                if micros != _NO_ID:
                    time = _uint(micros)
                    if time is None:
                        return None
                    if time:
                        parts.append(key + _varint(time))
        for raw, key, ios in ((node.inputs, _INPUTS_KEY, self.inputs), (node.outputs, _OUTPUTS_KEY, self.outputs)):
            if len(raw):
                io = bytes(raw)
                field = ios.get(io)
                if field is None:
                    field = self._io(key, io)
                    if field is None:
                        return None
                    if len(ios) >= self.limit >> 4:
                        ios.clear()
                    ios[io] = field
                parts.append(field)
        if len(node.attr):
            attrs = self._attrs(bytes(node.attr))
            if attrs is None:
                return None
            parts.append(attrs)
        return b"".join(parts)

    def _io(self, key: bytes, text: bytes) -> bytes | None:
        """The IOInfo field of ``{"values":"..","shapes":"..","types":".."}`` (or ``{}``), else None."""
        if text == b"{}":
            return key + b"\x00"
        if not text.startswith(_IO_HEAD):
            return None
        cut = text.index(b'"', len(_IO_HEAD))  # the end of values (no backslash: the first quote)
        tail = self.io_tails.get(text[cut:])
        if tail is None:
            tail = self._io_tail(text[cut:])
            if tail is None:
                return None
        n = cut - len(_IO_HEAD)
        if not n:
            return key + _varint(len(tail)) + tail
        size = _SMALL_VARINTS[n] if n < 0x4000 else encode_varint(n)
        body = 1 + len(size) + n + len(tail)
        return b"".join((key, _SMALL_VARINTS[body] if body < 0x4000 else encode_varint(body), _IO_VALUES, size,
                         text[len(_IO_HEAD):cut], tail))

    def _io_tail(self, text: bytes) -> bytes | None:
        pieces = text.split(b'"')  # '', ',', 'shapes', ':', S, ',', 'types', ':', T, '}'
        if len(pieces) != 10 or pieces[:4] != [b"", b",", b"shapes", b":"] or pieces[5:8] != [b",", b"types", b":"] \
                or pieces[9] != b"}":
            return None
        shapes, types = pieces[4], pieces[8]
        tail = (_IO_SHAPES + _varint(len(shapes)) + shapes if shapes else b"") + \
            (_IO_TYPES + _varint(len(types)) + types if types else b"")
        if len(self.io_tails) >= self.limit:
            self.io_tails.clear()
        self.io_tails[text] = tail
        return tail

    def _attrs(self, text: bytes) -> bytes | None:
        """The attr fields of an attribute list's text, else None.

        The list is cut at each ``},{``. Where that is inside a string value the piece before holds an odd
        number of quotes: it is no known attribute and orjson refuses it, so the node goes the general way.
        The first ``lead`` attributes are read one by one, the rest (the *tail*, which repeats from node to
        node) is looked up whole; ``lead`` grows to cover the attributes that were new in a tail."""
        if text == b"[]":
            return b""
        if not (text.startswith(b"[{") and text.endswith(b"}]")):
            return None
        lead = self.lead
        pieces = text[2:-2].split(b"},{", lead)
        fields = []
        known = self.attrs
        for piece in pieces[:lead]:
            field = known.get(piece)
            if field is None:
                field = self._new_attr(piece)
                if field is None:
                    return None
            fields.append(field)
        if len(pieces) > lead:
            tail = pieces[lead]
            self.lookups += 1
            field = self.tails.get(tail)
            if field is None:
                field = self._new_tail(tail, lead)
                if field is None:
                    return None
            fields.append(field)
        return b"".join(fields)

    def _new_tail(self, tail: bytes, lead: int) -> bytes | None:
        fields = []
        for i, piece in enumerate(tail.split(b"},{")):
            field = self.attrs.get(piece)
            if field is None:
                if piece.rpartition(b'":"')[0] in self.int_heads:  # a known integer attribute with a new value
                    changes = self.changes[lead + i] = self.changes.get(lead + i, 0) + 1
                    if changes * 8 > self.lookups >= 64:  # on one node in eight or more: read it before the tail
                        self.lead = max(self.lead, min(lead + i + 1, _MAX_LEAD))
                field = self._new_attr(piece)
                if field is None:
                    return None
                self._keep(piece, field)  # (an integer here changes seldom: worth a place in the table)
            fields.append(field)
        joined = b"".join(fields)
        if len(self.tails) >= self.limit >> 2:  # (a tail is a few hundred bytes: fewer of them)
            self.tails.clear()
        self.tails[tail] = joined
        return joined

    def _new_attr(self, piece: bytes) -> bytes | None:
        """The field of an attribute's text (between its braces) not in the table: from the digits after a
        learnt head (``"name":"rf_id","int64Val":"``), else from orjson and :meth:`NodeEncoder._attr`."""
        head, cut, digits = piece.rpartition(b'":"')
        learnt = self.int_heads.get(head) if cut else None
        if learnt is not None and digits[-1:] == b'"':
            int_head, signed = learnt
            number = digits[1:-1] if signed and digits[:1] == b"-" else digits[:-1]
            if number.isdigit():
                return int_attr_field(int_head, int(digits[:-1]))
        data = orjson.loads(b"{" + piece + b"}")
        field = self.encoder._attr(data)
        if field is None:
            return None
        name, member = next(iter(data)), next(reversed(data))
        if member in _INT_MEMBERS and name == "name" and type(data[member]) is str \
                and piece == b'"name":"' + data[name].encode() + b'","' + member.encode() + b'":"' + data[member].encode() + b'"':
            if len(self.int_heads) >= self.limit:
                self.int_heads.clear()
            found = self.encoder.int_head(data[name], member)
            if found is not None:
                self.int_heads[head] = (found, found[1] < 0)
        self._keep(piece, field)
        return field

    def _keep(self, piece: bytes, field: bytes) -> None:
        if len(self.attrs) >= self.limit:
            self.attrs.clear()
        self.attrs[piece] = field
