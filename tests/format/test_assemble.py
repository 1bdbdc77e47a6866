"""Hand-assembled Node records are byte for byte what protobuf serializes for the same Node."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etkit.format.assemble import (
    INPUTS,
    OUTPUTS,
    AttrPieces,
    IoPieces,
    id_varints,
    metadata_record,
    node_record,
    varint,
)
from etkit.format.attrs import make_attr
from etkit.format.schema import IOInfo, Node

U64 = (1 << 64) - 1
IDS = 300  # ids index a varint table in node_record, as in the converter
ids = st.integers(0, IDS - 1)
# small and large values: 1..4-byte varints, 8-byte timestamps, the 64-bit edge
big = st.one_of(st.integers(0, 1 << 30), st.integers(1 << 40, 1 << 52), st.integers((1 << 63) - 5, (1 << 63) - 1))
text = st.text(max_size=200)
io_strings = st.tuples(text, st.sampled_from(["", "[]", "[[17, 2]]", "[[]]" * 40]), st.sampled_from(["", "['Int']", "[]"]))
# (name, value) pairs whose canonical kinds cover int64 (negatives too), int32, bool, string attributes
attrs = st.lists(st.one_of(
    st.tuples(st.sampled_from(["rf_id", "seq_id", "scope", "tid", "fw_parent", "stream"]),
              st.integers(-(1 << 63), (1 << 63) - 1)),
    st.tuples(st.sampled_from(["comm_src", "comm_dst", "comm_tag"]), st.integers(-(1 << 31), (1 << 31) - 1)),
    st.tuples(st.just("is_cpu_op"), st.booleans()),
    st.tuples(st.sampled_from(["op_schema", "pg_name"]), text)), max_size=8)


@settings(max_examples=300, deadline=None)
@given(node_id=ids, name=text, node_type=st.integers(0, 7), ctrl=st.one_of(st.none(), ids),
       deps=st.lists(ids, max_size=12, unique=True), start=big, duration=big,
       inputs=st.one_of(st.none(), io_strings), outputs=st.one_of(st.none(), io_strings), attr_values=attrs)
def test_node_record_equals_protobuf(node_id, name, node_type, ctrl, deps, start, duration, inputs, outputs,
                                     attr_values):
    pieces, attr_pieces = IoPieces(), AttrPieces()
    io = b""
    expected = Node(id=node_id, name=name, type=node_type, start_time_micros=start, duration_micros=duration)
    if ctrl is not None:
        expected.ctrl_deps.append(ctrl)
    expected.data_deps.extend(deps)
    if inputs is not None:
        expected.inputs.CopyFrom(IOInfo(values=inputs[0], shapes=inputs[1], types=inputs[2]))
        io += pieces.field(INPUTS, *inputs)
    if outputs is not None:
        expected.outputs.CopyFrom(IOInfo(values=outputs[0], shapes=outputs[1], types=outputs[2]))
        io += pieces.field(OUTPUTS, *outputs)
    encoded_attrs = b""
    for attr_name, value in attr_values:
        expected.attr.append(make_attr(attr_name, value))
        int64_kind = attr_name in ("rf_id", "seq_id", "scope", "tid", "fw_parent", "stream")
        encoded_attrs += attr_pieces.int64(attr_name, value) if int64_kind else attr_pieces.framed(attr_name, value)
    got = node_record(node_id, pieces.name(name), node_type, ctrl, deps, start, duration, io, encoded_attrs,
                      id_varints(IDS))
    assert got == expected.SerializeToString()


@given(st.one_of(st.integers(1, 1 << 35), st.integers(1 << 35, U64 >> 1), st.integers(-(1 << 63), -1)))
def test_varint_equals_protobuf(value):
    # field 1 of a Node (id, uint64; 0 would be omitted) is tag 0x08 then the varint: compare through protobuf
    node = Node(id=value & U64)
    assert b"\x08" + varint(value) == node.SerializeToString()


def _c_and_python(call):  # noqa: ANN001, ANN202 - a callable of (node_record, IoPieces())
    """``call`` with the C joins and with assemble's Python ones: the same bytes, or the same error."""
    from etkit.format import assemble

    kernel = assemble.KERNEL
    if kernel is None:
        pytest.skip("etkit.format._assemble is not built")
    results = []
    try:
        for k, record in ((kernel, assemble.node_record), (None, assemble.py_node_record)):
            assemble.KERNEL = k
            try:
                results.append(call(record, IoPieces()))
            except (IndexError, TypeError, UnicodeEncodeError) as exc:
                results.append(type(exc))
    finally:
        assemble.KERNEL = kernel
    assert results[0] == results[1]


@settings(max_examples=300, deadline=None)
@given(node_id=st.integers(-IDS, IDS + 2), node_type=st.integers(-130, 130),
       ctrl=st.one_of(st.none(), st.integers(-IDS, IDS + 2)), deps=st.lists(st.integers(-IDS, IDS + 2), max_size=80),
       start=st.one_of(big, st.integers(-(1 << 70), 1 << 70), st.sampled_from([1 << 64, -(1 << 64), 0])),
       duration=st.one_of(big, st.integers(-(1 << 70), 1 << 70)), values=st.text(max_size=300),
       shapes=st.sampled_from(["", "[[]]" * 40]), types=st.sampled_from(["", "['Int']"]))
def test_the_c_joins_give_the_python_bytes(node_id, node_type, ctrl, deps, start, duration, values, shapes, types):
    """The C record and IOInfo joins against assemble's Python, on the edges protobuf never sees (negative
    and over-long ints, Python's list indexing, non-ASCII and surrogate values, long dependency lists)."""
    table = id_varints(IDS)

    def call(record, pieces):  # noqa: ANN001, ANN202
        io = pieces.field(INPUTS, values, shapes, types) + pieces.field(OUTPUTS, "", shapes, types)
        return record(node_id, pieces.name("aten::mm"), node_type, ctrl, deps, start, duration, io, b"\x52\x00", table)

    _c_and_python(call)
    _c_and_python(lambda record, pieces: pieces.field(INPUTS, "\udc80" + values, shapes, types))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-(1 << 63), U64), st.integers(0, U64), st.integers(-3, 40)), max_size=60),
       masked=st.booleans())
def test_int64_rows_c_and_python_and_protobuf(rows, masked):
    """AttrPieces.int64_rows in C and in Python, against the attributes protobuf frames one by one (values as
    uint64, the last one left out where it is negative when masked)."""
    import numpy as np

    from etkit.format import assemble

    a = np.array([r[0] & U64 for r in rows], dtype=np.uint64)
    b = np.array([r[1] for r in rows], dtype=np.uint64)
    c = np.array([r[2] for r in rows], dtype=np.int64)
    present = c >= 0 if masked else None
    columns = (a, b, np.maximum(c, 0))
    names = ("ts_ns", "dur_ns", "cat")
    kernel = assemble.KERNEL
    try:
        assemble.KERNEL = None
        python = AttrPieces().int64_rows(names, columns, present)
    finally:
        assemble.KERNEL = kernel
    pieces = AttrPieces()

    def framed(name: str, value: int) -> bytes:  # the int64 attribute of a uint64's bits, as protobuf frames it
        return pieces.framed(name, value - (1 << 64) if value >= 1 << 63 else value)

    expected = [framed("ts_ns", int(x)) + framed("dur_ns", int(y)) + (framed("cat", max(int(z), 0)) if not masked or z >= 0 else b"")
                for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())]
    assert python == expected
    if kernel is not None:
        assert kernel is assemble.KERNEL and AttrPieces().int64_rows(names, columns, present) == python


@pytest.mark.parametrize("count", [0, 1, 0x80, 0x4000 + 3, 300_000])
def test_id_varints_c_and_python(count):
    """The node ids' varints (C: int64_rows of one column with empty heads) are assemble.varint's."""
    from etkit.format import assemble

    kernel = assemble.KERNEL
    try:
        assemble.KERNEL = None
        python = assemble.id_varints(count)
    finally:
        assemble.KERNEL = kernel
    assert python == [varint(i) for i in range(count)]
    assert assemble.id_varints(count) == python


@settings(max_examples=60, deadline=None)
@given(version=st.text(max_size=12), attrs=st.lists(st.tuples(
    st.sampled_from(["schema", "pid", "time", "start_ts", "rank"]),
    st.one_of(st.integers(0, 2**64 - 1), st.text(max_size=30))), max_size=6))
def test_metadata_record_equals_protobuf(version, attrs):
    from etkit.format.schema import GlobalMetadata

    typed = [(name, value, "uint64_val" if isinstance(value, int) else None) for name, value in attrs]
    meta = GlobalMetadata(version=version)
    meta.attr.extend(make_attr(name, value, kind) for name, value, kind in typed)
    assert metadata_record(version, typed) == meta.SerializeToString()
