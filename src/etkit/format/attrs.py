"""Attributes: building them with the kinds consumers expect, and reading them whatever their kind.

Producers disagree on the value kind of the same attribute (``comm_size`` is ``int64_val`` in new
files and ``uint64_val`` in old ones; ``is_cpu_op`` is ``bool_val`` or ``int32_val``), so readers here
accept any integer or bool kind for numeric attributes, while attributes that etkit creates get the
canonical kind of their name (``CANONICAL_KINDS``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from ..errors import ValueRangeError
from .schema import ATTR_KINDS, LIST_KINDS, AttributeProto

__all__ = [
    "CANONICAL_KINDS",
    "PROFILER_CATEGORIES",
    "INT_KINDS",
    "make_attr",
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
