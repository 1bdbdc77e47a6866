"""Hand-assembled Node records are byte for byte what protobuf serializes for the same Node."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from etkit.format.assemble import AttrPieces, varint
from etkit.format.attrs import make_attr
from etkit.format.schema import Node

U64 = (1 << 64) - 1
text = st.text(max_size=200)
# (name, value) pairs whose canonical kinds cover int64 (negatives too), int32, bool, string attributes
attrs = st.lists(st.one_of(
    st.tuples(st.sampled_from(["rf_id", "seq_id", "scope", "tid", "fw_parent", "stream"]),
              st.integers(-(1 << 63), (1 << 63) - 1)),
    st.tuples(st.sampled_from(["comm_src", "comm_dst", "comm_tag"]), st.integers(-(1 << 31), (1 << 31) - 1)),
    st.tuples(st.just("is_cpu_op"), st.booleans()),
    st.tuples(st.sampled_from(["op_schema", "pg_name"]), text)), max_size=8)


@settings(max_examples=300, deadline=None)
@given(attr_values=attrs)
def test_attribute_pieces_equal_protobuf(attr_values):
    """A Node holding only attributes serializes to its attribute fields, framed one by one in order."""
    pieces = AttrPieces()
    expected = Node()
    encoded = b""
    for attr_name, value in attr_values:
        expected.attr.append(make_attr(attr_name, value))
        int64_kind = attr_name in ("rf_id", "seq_id", "scope", "tid", "fw_parent", "stream")
        encoded += pieces.int64(attr_name, value) if int64_kind else pieces.framed(attr_name, value)
    assert encoded == expected.SerializeToString()


@given(st.one_of(st.integers(1, 1 << 35), st.integers(1 << 35, U64 >> 1), st.integers(-(1 << 63), -1)))
def test_varint_equals_protobuf(value):
    # field 1 of a Node (id, uint64; 0 would be omitted) is tag 0x08 then the varint: compare through protobuf
    node = Node(id=value & U64)
    assert b"\x08" + varint(value) == node.SerializeToString()
