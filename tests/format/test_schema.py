"""The schema built at import time matches the Chakra wire format, byte for byte."""

from __future__ import annotations

import pytest

from etkit.format.attrs import make_attr
from etkit.format.schema import ATTR_KINDS, AttributeProto, CommType, GlobalMetadata, Node, NodeType, protobuf_backend


def test_node_encoding_matches_the_documented_example() -> None:
    # et-format.md §2.1: generator output two_comp_nodes_dependent.0.et, node 13.
    n = Node(id=13, name="COMP_NODE", type=NodeType.COMP_NODE, duration_micros=5)
    n.data_deps.append(12)
    n.attr.append(make_attr("is_cpu_op", False))
    expected = bytes.fromhex("080d1209434f4d505f4e4f444518042a010c3805520e0a0969735f6370755f6f70d80100")
    assert n.SerializeToString() == expected


@pytest.mark.parametrize(("kind", "tag"), [
    ("double_val", "19"), ("double_list", "22"), ("float_val", "2d"), ("int32_val", "38"), ("int64_val", "48"),
    ("uint32_val", "58"), ("uint64_val", "68"), ("sint32_val", "78"), ("sint32_list", "8201"),
    ("sint64_val", "8801"), ("fixed32_val", "9d01"), ("fixed64_val", "a901"), ("sfixed32_val", "bd01"),
    ("sfixed64_val", "c901"), ("bool_val", "d801"), ("bool_list", "e201"), ("string_val", "ea01"),
    ("string_list", "f201"), ("bytes_val", "fa01"), ("bytes_list", "8202"),
])
def test_attribute_oneof_wire_tags(kind: str, tag: str) -> None:
    attr = AttributeProto()
    if kind.endswith("_list"):
        getattr(attr, kind).SetInParent()
    else:
        setattr(attr, kind, {"string_val": "", "bytes_val": b"", "bool_val": False}.get(kind, 0))
    assert attr.SerializeToString().hex().startswith(tag)


def test_zero_valued_oneof_members_are_serialised() -> None:
    assert make_attr("is_cpu_op", False).SerializeToString().endswith(bytes.fromhex("d80100"))


def test_enums_and_kinds() -> None:
    assert [t.value for t in NodeType] == list(range(8))
    assert CommType.REDUCE_SCATTER_BLOCK == 8 and CommType.BARRIER == 9
    assert len(ATTR_KINDS) == 30


def test_unknown_fields_and_enum_values_survive() -> None:
    n = Node(id=7, type=NodeType.COMP_NODE)
    # field 11 (proposed StorageInfo) and node type 9 (proposed BATCH_NODE), written by hand
    payload = n.SerializeToString() + bytes.fromhex("5a03080101") + bytes.fromhex("1809")
    parsed = Node.FromString(payload)
    assert parsed.type == 9
    assert parsed.SerializeToString().startswith(bytes.fromhex("0807"))
    assert b"\x5a\x03\x08\x01\x01" in parsed.SerializeToString()


def test_global_metadata_fields() -> None:
    meta = GlobalMetadata(version="1.0.0")
    assert meta.SerializeToString() == bytes.fromhex("0a05312e302e30")


def test_uses_fast_runtime() -> None:
    assert protobuf_backend() in {"upb", "cpp", "python"}


@pytest.mark.shared_data
def test_every_etkit_writer_stamps_the_schema_version(converted_job, upstream, tmp_path) -> None:  # noqa: ANN001
    """Converted and generated ETs say which Chakra schema they follow (Chakra's converters leave it empty)."""
    from etkit.executor import SerialExecutor
    from etkit.format.schema import SCHEMA_VERSION
    from etkit.format.stream import open_trace
    from etkit.generate.collective import write_collective
    from etkit.text.convert import write_text

    serial = SerialExecutor()
    text = upstream / "mlcommons-chakra" / "eg_converter" / "input_files" / "Text" / "MLP_ModelParallel.txt"
    written = [converted_job("cnn_single").with_name("cnn_single.0.et"),
               *write_text(text, tmp_path / "mlp", 2, executor=serial),
               *write_collective(tmp_path / "ar", "all_reduce", 1024, 2, executor=serial)]
    for path in written:
        with open_trace(path) as reader:
            assert reader.metadata.version == SCHEMA_VERSION, path
    assert SCHEMA_VERSION == "1.0.0"  # as mlc-chakra 1.0.0's generator labels et_def.proto
