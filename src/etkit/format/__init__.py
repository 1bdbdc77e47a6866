"""The Chakra ET wire format: schema, record framing, attribute kinds and the JSON twin.

This package is the only code in etkit that touches protobuf or the bytes of ``.et`` files.

The names below are imported when first used, so that importing one light module of the package
(``etkit.format.jsonfast``, which ``etkit to-json`` runs on) costs no protobuf or numpy import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

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


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
