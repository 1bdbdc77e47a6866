"""The vectorised walk skips protobuf's parser only for records it proved protobuf accepts.

Differential tests: for valid, random and mutated records (every byte truncated, flipped, replaced),
whenever ``_decode_chunk`` calls a chunk *proven* protobuf's own parser must accept every record of
it; whatever is not proven goes to protobuf, so a file protobuf rejects is never loaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from etkit.errors import TraceFormatError
from etkit.format import columnar
from etkit.format.attrs import make_attr
from etkit.format.columnar import HOT_INT_ATTRS, MISSING, PAD
from etkit.format.schema import GlobalMetadata, Node
from etkit.format.stream import TraceWriter
from etkit.format.wire import WireFault
from etkit.model.trace import load_trace

from .test_columnar import COLUMNS, _key, _len_field, _varint_field, assert_same, nodes


def _protobuf_accepts(record: bytes) -> bool:
    try:
        Node.FromString(record)
    except (DecodeError, ValueError, RuntimeError):
        return False
    return True


def _proven(records: list[bytes], deps: bool = True) -> bool:
    """Whether the walk proves the records (a chunk of them); False where it gives up (``WireFault`` etc.).
    ``deps=False``: as a caller that reads no dependencies decodes them (``decode_columns(deps=False)``)."""
    return _outcome(records, deps) is True


def _outcome(records: list[bytes], deps: bool = True) -> bool | str:
    """The walk's proof of the records, or the name of the exception it gave up with."""
    lengths = np.array([len(r) for r in records], dtype=np.int64)
    rec_end = np.cumsum(lengths)
    buf = b"".join(records)
    b = np.frombuffer(buf + bytes(PAD), dtype=np.uint8)
    int_rows = np.full((len(HOT_INT_ATTRS), len(records)), MISSING, dtype=np.int64)
    try:
        _, proven = columnar._decode_chunk(buf, b, rec_end - lengths, rec_end, int_rows, hot=columnar._hot(None, deps))
    except (WireFault, ValueError, IndexError, UnicodeDecodeError) as exc:
        return type(exc).__name__
    return proven


def _rich_node() -> Node:
    """A node with every field the walk proves: deps, inputs/outputs, simple and generic attributes."""
    node = Node(id=300, name="aten::linear", type=4, start_time_micros=1 << 40, duration_micros=7)
    node.data_deps.extend([1, 2, 1 << 35])
    node.ctrl_deps.append(5)
    node.inputs.values, node.inputs.shapes, node.inputs.types = "[[1, 2]]", "[[8, 8]]", "['Tensor(float)']"
    node.outputs.values = "[]"
    node.attr.extend([make_attr("rf_id", 123456), make_attr("is_cpu_op", False), make_attr("pg_name", "0"),
                      make_attr("comm_size", -5, kind="sint64_val"), make_attr("tid", 9, kind="fixed32_val")])
    node.attr.add(name="x" * 150, doc_string="doc", double_val=1.5)  # generic path: long name, doc string
    return node


def test_canonical_records_are_proven() -> None:
    """The records writers produce skip protobuf's parser (the point of the proof)."""
    records = [_rich_node().SerializeToString(), Node(id=1).SerializeToString(), b""]
    assert _proven(records)


def test_ten_byte_varints_with_overflow_bits_are_proven_as_protobuf_accepts_them() -> None:
    record = _key(1, 0) + b"\xff" * 9 + b"\x7f" + _len_field(4, b"\x80" * 9 + b"\x7f")
    assert _proven([record]) and _protobuf_accepts(record)


@pytest.mark.parametrize("record", [
    Node(id=1, name="é").SerializeToString(),  # valid UTF-8, not ASCII: protobuf decides
    _len_field(2, b"\xff") + _varint_field(1, 1),  # invalid UTF-8 name
    _len_field(8, _len_field(2, b"\xc3")),  # invalid UTF-8 in inputs.shapes
    _len_field(10, _len_field(1, b"\x80x") + _varint_field(9, 1)),  # invalid attribute name
    _len_field(10, _len_field(1, b"pg_name") + _len_field(29, b"\xe2\x82")),  # cut string_val
    _len_field(10, _len_field(1, b"a") + _len_field(2, b"\xfe") + _varint_field(9, 1)),  # invalid doc_string
    _len_field(10, _len_field(1, b"l") + _len_field(10, b"\x80")),  # int64_list: a nested message
    _len_field(10, _len_field(1, b"l") + _len_field(30, _len_field(1, b"\xff"))),  # string_list
    _varint_field(11, 1),  # a field Node does not declare
    _len_field(8, _varint_field(1, 3)),  # IOInfo.values as a varint
    _key(2, 0) + b"\x01",  # name as a varint
    _len_field(10, _len_field(1, b"a") + _key(9, 1) + bytes(8)),  # int64_val with a fixed64 wire type
    _len_field(10, _varint_field(40, 1)),  # unknown attribute field
    _len_field(9, _len_field(4, b"x")),  # a field IOInfo does not declare
])
def test_records_the_walk_cannot_prove_go_to_protobuf(record: bytes) -> None:
    assert not _proven([Node(id=2).SerializeToString(), record])


def _mutations(record: bytes) -> list[bytes]:
    out = [record[:cut] for cut in range(len(record))]
    for pos, byte in enumerate(record):
        for value in {byte ^ 0x01, byte ^ 0x80, byte ^ 0x7F, 0x00, 0x80, 0xFF, 0x0A, 0x12}:
            out.append(record[:pos] + bytes((value,)) + record[pos + 1:])
        out.append(record[:pos] + record[pos + 1:])
    return out


def test_every_mutation_of_a_rich_record_is_proven_only_if_protobuf_accepts_it() -> None:
    record = _rich_node().SerializeToString()
    proven = 0
    for mutated in _mutations(record):
        if _proven([mutated]):
            proven += 1
            assert _protobuf_accepts(mutated), mutated
    assert proven > len(record)  # many mutations (other values, ids, lengths) stay valid and are proven


def test_records_are_checked_the_same_when_their_deps_are_not_decoded() -> None:
    """``deps=False`` (info reads no dependencies) proves, or gives up on, exactly the records decoding does:
    every mutation of records with short and long (over eight bytes) dependency lists."""
    long_deps = Node(id=7, data_deps=[1 << 40, 3, 1 << 62], ctrl_deps=list(range(200, 212)), duration_micros=1)
    rich = _rich_node().SerializeToString()
    deps_end = rich.index(_key(6, 0))  # the rich node's fields up to its deps (the rest is checked above)
    for mutated in _mutations(long_deps.SerializeToString()) + _mutations(rich[:deps_end]):
        assert _outcome([mutated], deps=False) == _outcome([mutated]), mutated


@settings(max_examples=300, deadline=None)
@given(st.lists(nodes(), min_size=1, max_size=4), st.data())
def test_random_and_mutated_records_are_proven_only_if_protobuf_accepts_them(node_list, data) -> None:  # type: ignore[no-untyped-def]
    records = [n.SerializeToString() for n in node_list]
    row = data.draw(st.integers(0, len(records) - 1))
    edits = data.draw(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3))
    mutated = bytearray(records[row])
    for pos, value in edits:
        if mutated:
            mutated[pos % len(mutated)] = value
    records[row] = bytes(mutated[:data.draw(st.integers(0, len(mutated)))] if data.draw(st.booleans()) else mutated)
    if _proven(records):
        assert all(_protobuf_accepts(r) for r in records)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_random_bytes_are_proven_only_if_protobuf_accepts_them(record: bytes) -> None:
    if _proven([record]):
        assert _protobuf_accepts(record)


@pytest.mark.parametrize("names", [True, False])
@pytest.mark.parametrize("bad", [
    _len_field(2, b"\xff") + _varint_field(1, 1),
    _varint_field(1, 1) + _len_field(9, _len_field(3, b"\xc0\xaf")),
    _varint_field(1, 1) + _len_field(10, _len_field(1, b"pg_name") + _len_field(29, b"\xed\xa0\x80")),
])
def test_files_with_invalid_strings_are_rejected(tmp_path: Path, names: bool, bad: bytes) -> None:
    """Even where names are not decoded (validation), a string protobuf rejects fails the load."""
    assert not _protobuf_accepts(bad)
    path = tmp_path / "bad.et"
    good = _rich_node().SerializeToString()
    with TraceWriter(path, GlobalMetadata(version="v")) as writer:
        for payload in (good, good, bad, good):
            writer.write_record(payload)
    with pytest.raises(TraceFormatError, match="record 3"):
        load_trace(path, names=names)


@pytest.mark.parametrize("names", [True, False])
@pytest.mark.parametrize("name_len", [0x01, 0x09, 0x80, 0xa0, 0xff])  # of the next record: its length prefix varies
def test_a_bad_string_before_a_name_alone_is_rejected(tmp_path: Path, names: bool, name_len: int) -> None:
    """A record whose last attribute is a name alone is followed by the next frame's length prefix: the walk
    must not count that byte as the attribute's value tag (a prefix of 128 or more starts with a byte above
    0x7f, which once made up for a bad byte in a string, so that validation "proved" a record protobuf
    rejects)."""
    bad = _varint_field(1, 1) + _len_field(2, b"a" * 150 + b"\xff") + _len_field(10, _len_field(1, b"x"))
    assert not _protobuf_accepts(bad)
    after = _varint_field(1, 2) + _len_field(2, b"b" * name_len)
    assert not _proven([bad, bad])
    path = tmp_path / "bad.et"
    with TraceWriter(path, GlobalMetadata(version="v")) as writer:
        for payload in (bad, after):
            writer.write_record(payload)
    with pytest.raises(TraceFormatError, match="record 1"):
        load_trace(path, names=names, allow_empty=True)


def test_unproven_chunks_still_load_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks with non-ASCII names or list attributes go through protobuf and give the same columns."""
    monkeypatch.setattr(columnar, "_DECODE_CHUNK", 2)
    nodes_ = [_rich_node() for _ in range(7)]
    for i, node in enumerate(nodes_):
        node.id = i + 1
    nodes_[3].name = "ß-op"
    nodes_[5].attr.append(make_attr("sizes", [1, 2, 3], kind="int64_list"))
    path = tmp_path / "u.et"
    with TraceWriter(path, GlobalMetadata(version="v")) as writer:
        for node in nodes_:
            writer.write(node)
    assert_same(path)
    lean = load_trace(path, names=False)
    assert (lean.name_idx == -1).all()
    assert list(lean.pg_names()) == ["0"] * 7


@pytest.mark.shared_data
def test_load_without_names_matches_the_full_load_on_every_upstream_vector(upstream: Path) -> None:
    for path in sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz"))):
        full, lean = load_trace(path), load_trace(path, names=False)
        for column in COLUMNS:
            assert np.array_equal(getattr(full, column), getattr(lean, column)), (path, column)
        assert list(full.pg_names()) == list(lean.pg_names())
