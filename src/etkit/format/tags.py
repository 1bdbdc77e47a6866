"""The keys of the Chakra fields that etkit's byte-level readers and writers handle without protobuf: field number
``<< 3 |`` wire type. The field numbers of ``et_def.proto`` are spelled here, in :data:`FIELD_NUMBERS`, so that
this module imports nothing (``etkit to-json`` and file sniffing start without protobuf);
``tests/format/test_tags.py`` checks every one against the schema's descriptors (:mod:`etkit.format.schema`).
All of them are one byte; :func:`key_byte` gives that byte.

``NODE_CTRL`` / ``NODE_DATA`` are the packed (length-delimited) lists protobuf writes; ``NODE_CTRL_ONE`` /
``NODE_DATA_ONE`` are single unpacked entries, which readers must also accept.
"""

from __future__ import annotations

__all__ = ["VARINT", "LENGTH", "FIELD_NUMBERS", "field_key", "key_byte", "NODE_ID", "NODE_NAME", "NODE_TYPE",
           "NODE_CTRL", "NODE_CTRL_ONE", "NODE_DATA", "NODE_DATA_ONE", "NODE_START", "NODE_DURATION", "NODE_INPUTS",
           "NODE_OUTPUTS", "NODE_ATTR", "IO_VALUES", "IO_SHAPES", "IO_TYPES", "ATTR_NAME", "META_VERSION",
           "META_ATTR", "BATCH_NODES"]

#: Wire types: a varint, and a length-delimited field (string, bytes, message, packed list).
VARINT, LENGTH = 0, 2

#: The field numbers read here, by message and field name (as in ``et_def.proto``; ``EtkitNodeBatch`` is etkit's).
FIELD_NUMBERS: dict[str, dict[str, int]] = {
    "Node": {"id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5, "start_time_micros": 6,
             "duration_micros": 7, "inputs": 8, "outputs": 9, "attr": 10},
    "IOInfo": {"values": 1, "shapes": 2, "types": 3},
    "AttributeProto": {"name": 1, "doc_string": 2},
    "GlobalMetadata": {"version": 1, "attr": 2},
    "EtkitNodeBatch": {"nodes": 1},
}


def field_key(message: str, field: str, wire: int) -> int:
    """The key of ``message``'s ``field`` sent as ``wire``."""
    return FIELD_NUMBERS[message][field] << 3 | wire


def key_byte(key: int) -> bytes:
    """The one byte that a key below 128 is on the wire."""
    if not 0 <= key < 0x80:
        raise ValueError(f"field key {key:#x} is not one byte")
    return bytes((key,))


NODE_ID = field_key("Node", "id", VARINT)
NODE_NAME = field_key("Node", "name", LENGTH)
NODE_TYPE = field_key("Node", "type", VARINT)
NODE_CTRL = field_key("Node", "ctrl_deps", LENGTH)
NODE_CTRL_ONE = field_key("Node", "ctrl_deps", VARINT)
NODE_DATA = field_key("Node", "data_deps", LENGTH)
NODE_DATA_ONE = field_key("Node", "data_deps", VARINT)
NODE_START = field_key("Node", "start_time_micros", VARINT)
NODE_DURATION = field_key("Node", "duration_micros", VARINT)
NODE_INPUTS = field_key("Node", "inputs", LENGTH)
NODE_OUTPUTS = field_key("Node", "outputs", LENGTH)
NODE_ATTR = field_key("Node", "attr", LENGTH)
IO_VALUES = field_key("IOInfo", "values", LENGTH)
IO_SHAPES = field_key("IOInfo", "shapes", LENGTH)
IO_TYPES = field_key("IOInfo", "types", LENGTH)
ATTR_NAME = field_key("AttributeProto", "name", LENGTH)
META_VERSION = field_key("GlobalMetadata", "version", LENGTH)
META_ATTR = field_key("GlobalMetadata", "attr", LENGTH)
#: etkit's own batch message (many node records parsed, and so checked, by one C call).
BATCH_NODES = field_key("EtkitNodeBatch", "nodes", LENGTH)
