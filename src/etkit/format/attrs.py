"""Attributes: building them with the kinds consumers expect, and reading them whatever their kind.

Producers disagree on the value kind of the same attribute (``comm_size`` is ``int64_val`` in new
files and ``uint64_val`` in old ones; ``is_cpu_op`` is ``bool_val`` or ``int32_val``), so readers here
accept any integer or bool kind for numeric attributes, while attributes that etkit creates get the
canonical kind of their name (``CANONICAL_KINDS``).

:func:`encode_attr` writes an attribute's bytes without protobuf, exactly as ``make_attr(...).SerializeToString()``
(``tests/format/test_attrs.py`` checks every kind against protobuf); the writers that assemble records
(:mod:`etkit.format.assemble`) use it, so that a converter's run needs no protobuf at all.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..errors import ValueRangeError
from .schema import ATTR_FIELD_NUMBERS, ATTR_KINDS, LIST_KINDS
from .stream import encode_varint
from .tags import LENGTH, field_key

if TYPE_CHECKING:
    from .schema import AttributeProto

__all__ = [
    "CANONICAL_KINDS",
    "PROFILER_CATEGORIES",
    "INT_KINDS",
    "make_attr",
    "encode_attr",
    "attr_value",
    "attr_kind",
    "find_attr",
    "get_int",
    "get_bool",
    "get_str",
    "attrs_dict",
]

#: Value kinds for the well-known names, as the simulator feeders read them (et-format.md §2.4, §9).
CANONICAL_KINDS: dict[str, str] = {
    "is_cpu_op": "bool_val",
    "num_ops": "int64_val",
    "tensor_size": "uint64_val",
    "comm_type": "int64_val",
    "comm_size": "int64_val",
    "comm_priority": "int32_val",
    "comm_src": "int32_val",
    "comm_dst": "int32_val",
    "comm_tag": "int32_val",
    "pg_name": "string_val",
    "involved_dim": "bool_list",
    "inputs": "string_list",
    "outputs": "string_list",
    "rf_id": "int64_val",
    "fw_parent": "int64_val",
    "seq_id": "int64_val",
    "scope": "int64_val",
    "tid": "int64_val",
    "fw_tid": "int64_val",
    "op_schema": "string_val",
    "stream": "int64_val",
    "ts_ns": "int64_val",
    "dur_ns": "int64_val",
    "cat": "int64_val",
    "kernel_name": "string_val",
    "op_type": "string_val",
}

#: ``cat`` attribute codes: the profiler category (Kineto's ``cat``) of a node converted from a profile.
PROFILER_CATEGORIES = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset",
                       "gpu_user_annotation", "cuda_sync")

#: Scalar kinds that hold an integer (bool included: feeders convert bool <-> int).
INT_KINDS: frozenset[str] = frozenset(
    f"{k}_val" for k in ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
                         "fixed64", "sfixed32", "sfixed64", "bool")
)


def _infer_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool_val"
    if isinstance(value, int):
        return "int64_val" if value < 2**63 else "uint64_val"
    if isinstance(value, float):
        return "double_val"
    if isinstance(value, str):
        return "string_val"
    if isinstance(value, (bytes, bytearray)):
        return "bytes_val"
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("cannot infer the kind of an empty list attribute; pass kind=")
        return _infer_kind(value[0]).replace("_val", "_list")
    raise TypeError(f"unsupported attribute value type {type(value).__name__}")


def make_attr(name: str, value: Any, kind: str | None = None) -> AttributeProto:
    """An ``AttributeProto`` named ``name``; the kind is ``kind``, else the canonical one, else inferred."""
    kind = kind or CANONICAL_KINDS.get(name) or _infer_kind(value)
    if kind not in ATTR_KINDS:
        raise ValueError(f"unknown attribute kind {kind!r}")
    from .schema import AttributeProto

    attr = AttributeProto(name=name)
    try:
        if kind in LIST_KINDS:
            getattr(attr, kind).values.extend(value)
        else:
            setattr(attr, kind, value)
    except ValueError as exc:  # protobuf: "Value out of range" (a wrong Python type stays a TypeError)
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise ValueRangeError(f"attribute {name!r}: {shown} does not fit a {kind} ({exc})") from None
    return attr


#: Per scalar kind: the wire type of its value, the integer range a value must be in (``None``: not an integer
#: kind), and the ``struct`` format of a fixed-width value (``""``: a varint; ``None``: length-delimited).
_WIRE = {"double": (1, None, "<d"), "float": (5, None, "<f"),
         "int32": (0, (-(1 << 31), (1 << 31) - 1), ""), "int64": (0, (-(1 << 63), (1 << 63) - 1), ""),
         "uint32": (0, (0, (1 << 32) - 1), ""), "uint64": (0, (0, (1 << 64) - 1), ""),
         "sint32": (0, (-(1 << 31), (1 << 31) - 1), ""), "sint64": (0, (-(1 << 63), (1 << 63) - 1), ""),
         "fixed32": (5, (0, (1 << 32) - 1), "<I"), "fixed64": (1, (0, (1 << 64) - 1), "<Q"),
         "sfixed32": (5, (-(1 << 31), (1 << 31) - 1), "<i"), "sfixed64": (1, (-(1 << 63), (1 << 63) - 1), "<q"),
         "bool": (0, None, ""), "string": (2, None, None), "bytes": (2, None, None)}
_U64 = (1 << 64) - 1
_NAME_KEY = encode_varint(field_key("AttributeProto", "name", LENGTH))
_LIST_VALUES_KEY = b"\x0a"  # the ``values`` field (1, length-delimited) of every *List message


def _scalar(scalar: str, value: Any) -> bytes | None:
    """The encoded value of one ``scalar`` (``double``, ``int64``, ...) as protobuf writes it, or ``None`` when
    the value is not one this encoder takes exactly (a type other than the plain Python one, out of range)."""
    _, bounds, fmt = _WIRE[scalar]
    kind = type(value)
    if bounds is not None:
        if kind is not int or not bounds[0] <= value <= bounds[1]:
            return None
        if fmt:
            return struct.pack(fmt, value)
        if scalar in ("sint32", "sint64"):
            value = (value << 1) ^ (value >> 63)
        return encode_varint(value & _U64)
    if scalar == "bool":
        return (b"\x01" if value else b"\x00") if kind is bool else None
    if scalar in ("double", "float"):
        if kind is not float:
            return None
        try:
            return struct.pack(cast(str, fmt), value)
        except OverflowError:  # beyond float32: protobuf's own rounding
            return None
    data: bytes
    if scalar == "string":
        if kind is not str:
            return None
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: protobuf reports them
            return None
    elif kind is bytes:
        data = value
    else:
        return None
    return encode_varint(len(data)) + data


def encode_attr(name: str, value: Any, kind: str | None = None) -> bytes:
    """``make_attr(name, value, kind).SerializeToString()``, written without protobuf where the value is a
    plain Python one (``int``, ``bool``, ``float``, ``str``, ``bytes`` and lists of them) in its kind's range;
    anything else goes through :func:`make_attr`, so its conversions and errors are protobuf's."""
    kind = kind or CANONICAL_KINDS.get(name) or _infer_kind(value)
    number = ATTR_FIELD_NUMBERS.get(kind)
    if number is None or type(name) is not str:
        return cast(bytes, make_attr(name, value, kind).SerializeToString())
    scalar, _, form = kind.rpartition("_")
    wire = _WIRE[scalar][0]
    if form == "val":
        body = _scalar(scalar, value)
        key = encode_varint(number << 3 | wire)
    elif type(value) is list or type(value) is tuple:
        pieces = [_scalar(scalar, v) for v in value]
        if None in pieces:
            body = None
        else:
            joined = b"".join(cast("list[bytes]", pieces))
            if wire == 2:  # strings and bytes: one ``values`` field each
                joined = b"".join(_LIST_VALUES_KEY + p for p in cast("list[bytes]", pieces))
            elif joined:  # numbers: packed into one
                joined = _LIST_VALUES_KEY + encode_varint(len(joined)) + joined
            body = encode_varint(len(joined)) + joined
        key = encode_varint(number << 3 | LENGTH)
    else:
        body = None
    if body is None:
        return cast(bytes, make_attr(name, value, kind).SerializeToString())
    try:
        encoded_name = name.encode("utf-8")
    except UnicodeEncodeError:
        return cast(bytes, make_attr(name, value, kind).SerializeToString())
    head = _NAME_KEY + encode_varint(len(encoded_name)) + encoded_name if encoded_name else b""
    return head + key + body


def attr_kind(attr: AttributeProto) -> str | None:
    """The oneof member set on ``attr`` (``None`` when the attribute carries no value)."""
    return cast("str | None", attr.WhichOneof("value"))


def attr_value(attr: AttributeProto) -> Any:
    """The Python value of ``attr``: a scalar, or a list for ``*_list`` kinds; ``None`` if unset."""
    kind = attr.WhichOneof("value")
    if kind is None:
        return None
    if kind in LIST_KINDS:
        return list(getattr(attr, kind).values)
    return getattr(attr, kind)


def find_attr(attrs: Iterable[AttributeProto], name: str) -> AttributeProto | None:
    """The first attribute called ``name``, or ``None``."""
    for attr in attrs:
        if attr.name == name:
            return attr
    return None


def get_int(attrs: Iterable[AttributeProto], name: str, default: int | None = None) -> int | None:
    """Integer value of attribute ``name`` whatever its integer or bool kind; ``default`` if absent.

    A float kind is refused (as feeder v3 does) because silently truncating it would hide a producer bug.
    """
    attr = find_attr(attrs, name)
    if attr is None:
        return default
    kind = attr.WhichOneof("value")
    if kind is None:
        return default
    if kind not in INT_KINDS:
        raise TypeError(f"attribute {name!r} holds {kind}, not an integer")
    return int(getattr(attr, kind))


def get_bool(attrs: Iterable[AttributeProto], name: str, default: bool | None = None) -> bool | None:
    """Truth value of attribute ``name`` (any integer kind, non-zero = true); ``default`` if absent."""
    value = get_int(attrs, name, None)
    return default if value is None else bool(value)


def get_str(attrs: Iterable[AttributeProto], name: str, default: str | None = None) -> str | None:
    """String value of attribute ``name``; integers are rendered in decimal (old ``pg_name`` files)."""
    attr = find_attr(attrs, name)
    if attr is None:
        return default
    kind = attr.WhichOneof("value")
    if kind == "string_val":
        return cast(str, attr.string_val)
    if kind in INT_KINDS:
        return str(int(getattr(attr, kind)))
    return default


def attrs_dict(attrs: Sequence[AttributeProto]) -> dict[str, Any]:
    """``{name: value}`` of all attributes (the last wins on duplicate names)."""
    return {a.name: attr_value(a) for a in attrs}
