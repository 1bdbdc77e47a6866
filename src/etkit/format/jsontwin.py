"""The JSON twin of an ``.et`` file: one JSON document that converts back to the exact same bytes.

Layout (one node per line, so both directions stream)::

    {"format":"etkit-et-json","version":1,"metadata":{...},"nodes":[
    {...node...},
    {...node...}
    ]}

Messages use the proto3 JSON mapping (lowerCamelCase names, enum names, 64-bit integers as strings so
they survive any JSON parser, bytes as base64), the same mapping as the reference jsonizer. A node
whose bytes protobuf would not reproduce from its fields (unknown fields, non-canonical encoding)
carries them in ``"_raw"`` (base64), so the round trip is exact for every input.

Reading accepts this layout, any other formatting of the same document, and the reference jsonizer's
concatenated objects (GlobalMetadata first, then one object per node).
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from google.protobuf.message import DecodeError

from ..errors import TraceFormatError
from ..fileio import atomic_output, open_maybe_gzip
from .jsonfast import FramingFault, JsonWriter, record_chunks
from .schema import LIST_KINDS, AttributeProto, GlobalMetadata, IOInfo, Node, NodeType
from .stream import TraceWriter, open_trace

__all__ = ["to_json", "from_json", "iter_json_trace", "node_to_dict", "dict_to_node", "FORMAT_NAME"]

FORMAT_NAME = "etkit-et-json"
_NODE_TYPE_NAMES = {t.value: t.name for t in NodeType}
_NODE_TYPE_VALUES = {t.name: t.value for t in NodeType}
_WIDE = frozenset({"int64", "uint64", "sint64", "fixed64", "sfixed64"})
_FLOATS = frozenset({"double", "float"})
_SNAKE_TO_CAMEL = {
    "ctrl_deps": "ctrlDeps", "data_deps": "dataDeps", "start_time_micros": "startTimeMicros",
    "duration_micros": "durationMicros", "doc_string": "docString",
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


_KIND_JSON = {kind: _camel(kind) for kind in (f"{k}_{f}" for k in (
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
    "sfixed32", "sfixed64", "bool", "string", "bytes") for f in ("val", "list"))}
_JSON_KIND = {v: k for k, v in _KIND_JSON.items()} | {k: k for k in _KIND_JSON}


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
    if scalar in _WIDE:
        return str(value)
    if scalar in _FLOATS:
        return _float_out(value, scalar)
    if scalar == "bytes":
        return base64.b64encode(value).decode("ascii")
    return value


def _attr_to_dict(attr: AttributeProto) -> dict[str, Any]:
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
            out[_KIND_JSON[kind]] = {"values": [_scalar_out(v, scalar) for v in values]} if values else {}
        else:
            out[_KIND_JSON[kind]] = _scalar_out(getattr(attr, kind), scalar)
    return out


def _io_to_dict(io: IOInfo) -> dict[str, str]:
    return {key: value for key, value in (("values", io.values), ("shapes", io.shapes), ("types", io.types)) if value}


def _ids(values: Any) -> list[str]:
    return [str(v) for v in values]


_NODE_FIELDS: dict[int, tuple[str, Any]] = {
    1: ("id", str),
    2: ("name", None),
    3: ("type", lambda v: _NODE_TYPE_NAMES.get(v, v)),
    4: ("ctrlDeps", _ids),
    5: ("dataDeps", _ids),
    6: ("startTimeMicros", str),
    7: ("durationMicros", str),
    8: ("inputs", _io_to_dict),
    9: ("outputs", _io_to_dict),
}


class _Fragments:
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
            hit = self.table[key] = orjson.dumps(make())
        return hit

    def attr(self, attr: AttributeProto) -> bytes:
        key = attr.SerializeToString()
        hit = self.table.get(key)
        if hit is not None:
            return hit
        kind = attr.WhichOneof("value")
        quoted = _QUOTED_SCALARS.get(kind)  # type: ignore[arg-type]
        if quoted is None or attr.doc_string or not attr.name:
            return self._get(key, lambda: _attr_to_dict(attr))
        # integer-valued attributes are often unique per node (rf_id, seq_id): format them directly
        return b'{"name":' + self.name(attr.name) + quoted % getattr(attr, kind)

    def io(self, io: IOInfo) -> bytes:
        return self._get((io.values, io.shapes, io.types), lambda: _io_to_dict(io))

    def name(self, name: str) -> bytes:
        return self._get(name, lambda: name)


#: ``%``-templates of integer attribute values after the name (64-bit ones quoted, as proto3 JSON says).
_QUOTED_SCALARS = {f"{k}_val": (f',"{_KIND_JSON[k + "_val"]}":"%d"}}' if k in _WIDE else f',"{_KIND_JSON[k + "_val"]}":%d}}').encode()
                   for k in ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32",
                             "sfixed64")}

_TYPE_JSON = {value: b'"type":"' + name.encode() + b'"' for value, name in _NODE_TYPE_NAMES.items()}


def _id_list(key: bytes, values: Any) -> bytes:
    return key + b'["' + b'","'.join([b"%d" % v for v in values]) + b'"]'


def node_json(node: Node, fragments: _Fragments) -> bytes:
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


def node_to_dict(node: Node) -> dict[str, Any]:
    """A Node in the proto3 JSON mapping."""
    out: dict[str, Any] = {}
    for field, value in node.ListFields():
        number = field.number
        if number == 10:
            out["attr"] = [_attr_to_dict(a) for a in value]
        elif number in _NODE_FIELDS:
            key, convert = _NODE_FIELDS[number]
            out[key] = convert(value) if convert else value
    return out


def metadata_to_dict(meta: GlobalMetadata) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if meta.version:
        out["version"] = meta.version
    if meta.attr:
        out["attr"] = [_attr_to_dict(a) for a in meta.attr]
    return out


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


def dict_to_node(data: dict[str, Any]) -> Node:
    """The Node of a proto3-JSON dict (camelCase or snake_case names); ``_raw`` wins when present."""
    if "_raw" in data:
        return Node.FromString(_decode_raw(data))
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
        return GlobalMetadata.FromString(_decode_raw(data))
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


# -- files -------------------------------------------------------------------------------------------

def _with_raw(d: dict[str, Any], message: Any, payload: bytes) -> dict[str, Any]:
    """``d`` plus the original bytes when the JSON fields alone would not reproduce them."""
    if _needs_raw(message, payload) or _nan_lossy(orjson.dumps(d), dict_to_metadata, payload):
        d["_raw"] = base64.b64encode(payload).decode("ascii")
    return d


def _needs_raw(message: Any, payload: bytes) -> bool:
    message.DiscardUnknownFields()  # the JSON carries no unknown fields, so neither may the comparison
    return message.SerializeToString() != payload


def _nan_lossy(text: bytes, from_dict: Any, payload: bytes) -> bool:
    """True when a NaN of the message has a sign or payload that JSON's "NaN" loses."""
    return b'"NaN"' in text and from_dict(orjson.loads(text)).SerializeToString() != payload


#: Records converted together: bounded memory, and numpy calls long enough to pay off.
_CHUNK_RECORDS = 4096


def _node_text(payload: bytes, fragments: _Fragments) -> bytes:
    """The JSON text of one node record, with ``_raw`` when its fields do not reproduce its bytes."""
    node = Node.FromString(payload)
    text = node_json(node, fragments)
    if _needs_raw(node, payload) or _nan_lossy(text, dict_to_node, payload):
        text = text[:-1] + (b"," if len(text) > 2 else b"") + b'"_raw":"' + base64.b64encode(payload) + b'"}'
    return text


def to_json(et_path: str | os.PathLike[str], json_path: str | os.PathLike[str]) -> int:
    """Write the JSON twin of ``et_path`` to ``json_path`` (streaming, atomic; ``.gz`` = gzip).

    Returns the number of nodes written. Chunks of records are converted at once by
    :class:`etkit.format.jsonfast.JsonWriter`, which hands the records it does not cover back to the
    per-record :func:`node_json`; both write the same text. A file that is not plainly well framed is
    read again record by record by the checking reader, which reports the fault.
    """
    try:
        return _write_json(et_path, json_path, chunked=True)
    except FramingFault:
        return _write_json(et_path, json_path, chunked=False)


def _write_json(et_path: str | os.PathLike[str], json_path: str | os.PathLike[str], *, chunked: bool) -> int:
    count = 0
    fragments = _Fragments()

    def slow(payload: bytes, index: int) -> bytes:
        try:
            return _node_text(payload, fragments)
        except DecodeError as exc:
            raise _bad(et_path, f"corrupt Node message ({exc})", index) from None

    with open_trace(et_path) as reader, atomic_output(json_path) as out:
        meta = _with_raw(metadata_to_dict(reader.metadata), reader.metadata, reader.metadata_record)
        out.write(b'{"format":"' + FORMAT_NAME.encode() + b'","version":1,"metadata":' + orjson.dumps(meta) + b',"nodes":[')
        if chunked:
            writer = JsonWriter()
            with open_maybe_gzip(et_path) as stream:
                for data, start, length in record_chunks(stream, _CHUNK_RECORDS):
                    text = writer.chunk_json(data, start, length, lambda payload, i, base=count: slow(payload, base + i + 1))
                    out.write(text[1:] if count == 0 else text)  # the first node follows "[" without a comma
                    count += start.size
        else:
            records = reader.records()
            for batch in iter(lambda: list(itertools.islice(records, _CHUNK_RECORDS)), []):
                out.write((b",\n" if count else b"\n") + b",\n".join(slow(p, count + i + 1) for i, p in enumerate(batch)))
                count += len(batch)
        out.write(b"\n]}\n")
    return count


def _bad(path: str | os.PathLike[str], message: str, record: int | None = None) -> TraceFormatError:
    return TraceFormatError(path, message, record=record)


def _iter_dicts(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """``(index, object)``: index 0 is the metadata object, then one per node (JSON syntax checked)."""
    try:
        stream = open_maybe_gzip(path)
    except OSError as exc:
        raise _bad(path, f"cannot open ({exc.strerror or exc})") from None
    with stream:
        try:
            first_line = stream.readline()
        except (OSError, EOFError) as exc:
            raise _bad(path, f"cannot read ({exc})") from None
        if first_line.startswith(b'{"format":"' + FORMAT_NAME.encode()) and first_line.rstrip().endswith(b'"nodes":['):
            yield from _iter_line_layout(path, first_line, stream)
            return
        try:
            text = (first_line + stream.read()).decode("utf-8")
        except (UnicodeDecodeError, OSError, EOFError) as exc:
            raise _bad(path, f"not UTF-8 JSON text ({exc})") from None
    yield from _iter_documents(path, text)


def _iter_line_layout(path: str | os.PathLike[str], first_line: bytes, stream: Any) -> Iterator[tuple[int, Any]]:
    try:
        header = orjson.loads(first_line.rstrip()[: -len(b',"nodes":[')] + b"}")
    except orjson.JSONDecodeError as exc:
        raise _bad(path, f"bad header line ({exc})", 0) from None
    yield 0, header.get("metadata", {})
    index = 0
    closed = False
    for raw in stream:
        line = raw.strip()
        if not line:
            continue
        if line == b"]}":
            closed = True
            continue
        if closed:
            raise _bad(path, "text after the end of the document")
        index += 1
        try:
            yield index, orjson.loads(line[:-1] if line.endswith(b",") else line)
        except orjson.JSONDecodeError as exc:
            raise _bad(path, f"invalid JSON ({exc})", index) from None
    if not closed:
        raise _bad(path, "truncated document (no closing ]})")


def _iter_documents(path: str | os.PathLike[str], text: str) -> Iterator[tuple[int, Any]]:
    """Either one JSON twin document, or concatenated jsonizer objects."""
    decoder = json.JSONDecoder()
    pos = 0
    index = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        try:
            data, pos = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise _bad(path, f"invalid JSON ({exc})", index) from None
        if index == 0 and isinstance(data, dict) and data.get("format") == FORMAT_NAME:
            yield 0, data.get("metadata", {})
            nodes = data.get("nodes", [])
            if not isinstance(nodes, list):
                raise _bad(path, '"nodes" must be a list', 0)
            for index, item in enumerate(nodes, start=1):
                yield index, item
            index += 1
            continue
        yield index, data
        index += 1
    if index == 0:
        raise _bad(path, "no JSON object found")


def _convert(path: str | os.PathLike[str], index: int, data: Any, convert: Any) -> Any:
    what = "metadata" if index == 0 else "node"
    try:
        if not isinstance(data, dict):
            raise ValueError(f"a {what} must be a JSON object")
        return convert(data)
    except Exception as exc:  # noqa: BLE001 - any malformed content becomes one clean error
        raise _bad(path, f"bad {what} ({type(exc).__name__}: {exc})", index) from None


def _decode_raw(data: dict[str, Any]) -> bytes:
    return base64.b64decode(data["_raw"], validate=True)


def _payload(data: dict[str, Any], cls: Any, from_dict: Any) -> bytes:
    """The record bytes of a message dict: its ``_raw`` bytes as they are, else its fields serialized."""
    if "_raw" in data:
        payload = _decode_raw(data)
        cls.FromString(payload)  # refuse bytes that are not this message
        return payload
    return from_dict(data).SerializeToString()


def _node_payload(data: dict[str, Any]) -> bytes:
    return _payload(data, Node, dict_to_node)


def _metadata_payload(data: dict[str, Any]) -> bytes:
    return _payload(data, GlobalMetadata, dict_to_metadata)


def iter_json_trace(path: str | os.PathLike[str]) -> Iterator[GlobalMetadata | Node]:
    """The GlobalMetadata, then every Node, of a JSON twin or of jsonizer output (gzip sniffed)."""
    for index, data in _iter_dicts(path):
        yield _convert(path, index, data, dict_to_metadata if index == 0 else dict_to_node)


def from_json(json_path: str | os.PathLike[str], et_path: str | os.PathLike[str]) -> int:
    """Write the ``.et`` file described by a JSON twin (or jsonizer output); returns the node count.

    Records are restored exactly (``_raw`` bytes as they are); an empty node is refused.
    """
    items = _iter_dicts(json_path)
    index, data = next(items)
    count = 0
    with TraceWriter(et_path, _convert(json_path, index, data, _metadata_payload)) as writer:
        for index, data in items:
            payload = _convert(json_path, index, data, _node_payload)
            if not payload:
                raise _bad(json_path, "empty node (id 0 and no other field) cannot be written", index)
            writer.write_record(payload)
            count += 1
    return count


def default_json_path(et_path: str | os.PathLike[str]) -> Path:
    name = Path(et_path).name
    for suffix in (".et.gz", ".et"):
        if name.endswith(suffix):
            return Path(et_path).with_name(name[: -len(suffix)] + ".json")
    return Path(et_path).with_name(name + ".json")
