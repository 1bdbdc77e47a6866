"""The field numbers that ``etkit.format.tags`` spells are the schema's own."""

from __future__ import annotations

import subprocess
import sys

from etkit.format import schema, tags


def test_every_field_number_is_the_schemas() -> None:
    classes = schema._message_classes()
    for message, fields in tags.FIELD_NUMBERS.items():
        descriptor = classes[message].DESCRIPTOR
        for field, number in fields.items():
            assert descriptor.fields_by_name[field].number == number, (message, field)
    oneof = schema.AttributeProto.DESCRIPTOR.oneofs_by_name["value"]
    assert {f.name: f.number for f in oneof.fields} == schema.ATTR_FIELD_NUMBERS


def test_the_schema_imports_protobuf_when_a_message_class_is_first_read() -> None:
    code = ("import sys; from etkit.format.schema import ATTR_KINDS, CommType, NodeType; "
            "print('google.protobuf' in sys.modules); from etkit.format.schema import Node; "
            "print('google.protobuf' in sys.modules, Node().DESCRIPTOR.full_name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True", "ChakraProtoMsg.Node"]


def test_keys_are_number_and_wire_type() -> None:
    assert tags.NODE_ATTR == (10 << 3 | tags.LENGTH) and tags.NODE_CTRL_ONE == (4 << 3 | tags.VARINT)
    assert tags.key_byte(tags.NODE_ID) == b"\x08"


def test_tags_and_the_json_writer_import_no_protobuf_or_numpy() -> None:
    code = ("import sys; import etkit.format.tags, etkit.format.jsonfast, etkit.format.jsontwin; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'google', 'orjson')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
