"""The Chakra ET wire format: schema, record framing, attribute kinds and the JSON twin.

This package is the only code in etkit that touches protobuf or the bytes of ``.et`` files.
"""

from .attrs import CANONICAL_KINDS, attr_value, get_bool, get_int, get_str, make_attr
from .schema import AttributeProto, CommType, GlobalMetadata, IOInfo, Node, NodeType
from .stream import TraceReader, TraceWriter, open_trace, write_trace

__all__ = [
    "AttributeProto", "CommType", "GlobalMetadata", "IOInfo", "Node", "NodeType",
    "CANONICAL_KINDS", "attr_value", "get_bool", "get_int", "get_str", "make_attr",
    "TraceReader", "TraceWriter", "open_trace", "write_trace",
]
