"""The Chakra ET wire format: schema, record framing, attribute kinds and the JSON twin.

This package is the only code in etkit that touches protobuf or the bytes of ``.et`` files.

The names below are imported when first used, so that importing one light module of the package
(``etkit.format.jsonfast``, which ``etkit to-json`` runs on) costs no protobuf or numpy import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .attrs import CANONICAL_KINDS, attr_value, get_bool, get_int, get_str, make_attr
    from .schema import AttributeProto, CommType, GlobalMetadata, IOInfo, Node, NodeType
    from .stream import TraceReader, TraceWriter, open_trace, write_trace

#: Public names: name -> module that defines it.
_LAZY = {name: ".attrs" for name in ("CANONICAL_KINDS", "attr_value", "get_bool", "get_int", "get_str", "make_attr")}
_LAZY |= {name: ".schema" for name in ("AttributeProto", "CommType", "GlobalMetadata", "IOInfo", "Node", "NodeType")}
_LAZY |= {name: ".stream" for name in ("TraceReader", "TraceWriter", "open_trace", "write_trace")}

__all__ = [
    "AttributeProto", "CommType", "GlobalMetadata", "IOInfo", "Node", "NodeType",
    "CANONICAL_KINDS", "attr_value", "get_bool", "get_int", "get_str", "make_attr",
    "TraceReader", "TraceWriter", "open_trace", "write_trace",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'etkit.format' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
