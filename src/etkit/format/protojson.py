"""The proto3 JSON mapping of Chakra messages, both ways: lowerCamelCase names, enum names, 64-bit
integers as strings (they survive any JSON parser), bytes as base64, NaN/Infinity as strings.

The one home of the mapping: the JSON twin (:mod:`.jsontwin`), its chunked writer (:mod:`.jsonfast`)
and the jsonizer layout all write and read messages through it.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np
import orjson

from .schema import LIST_KINDS, AttributeProto, GlobalMetadata, IOInfo, Node, NodeType

__all__ = [
    "attr_to_dict", "attr_json", "compact", "io_to_dict", "node_to_dict", "metadata_to_dict",
    "dict_to_node", "dict_to_metadata", "KIND_JSON", "NODE_TYPE_NAMES", "WIDE_SCALARS",
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
