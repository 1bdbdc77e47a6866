"""The decoder's lean walk in C (``etkit.format._walk``) against columnar's numpy walk, the reference it replaces:
the same columns, spans and record parts on every real trace, and the same verdict (the parts, or which of
"not the lean shape" and "bytes it cannot read") on every mutation of lean records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etkit.errors import EtkitError
from etkit.format import columnar, stream, wire
from etkit.format.attrs import make_attr
from etkit.format.columnar import PAD, decode_columns
from etkit.format.schema import GlobalMetadata, Node
from etkit.format.stream import frame_table
from etkit.format.wire import WireFault, word_view
from etkit.model.trace import read_trace_bytes
from etkit.validate import validate

from .test_columnar import _encode_varint as _encode
from .test_columnar import _key, _len_field, _varint_field, nodes

KERNEL = wire.KERNEL


def _walks(monkeypatch: pytest.MonkeyPatch, run: Any) -> tuple[Any, Any]:
    """``run()`` with the C kernel and with the numpy readers."""
    out = []
    for kernel in (KERNEL, None):
        monkeypatch.setattr(wire, "KERNEL", kernel)
        out.append(run())
    return out[0], out[1]


def _plain(value: Any) -> Any:
    """``value`` (columns, spans, nested) as plain comparable data: arrays with their dtypes."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if hasattr(value, "__dataclass_fields__"):
        return (type(value).__name__, {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__})
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _decoded(buf: bytes, *, keep: bool = True, **options: Any) -> Any:
    """The columns of a whole file and (``keep``) the walk's spans; without spans the kernel builds the columns
    itself (``_walk.columns``), with them from its spans (``_walk.lean``)."""
    frames = frame_table(buf, "<test>", allow_empty=True)
    spans: list[Any] | None = [] if keep else None
    columns = decode_columns(buf, frames.start[1:], frames.offset[1:], frames.length[1:], spans=spans, **options)
    return _plain((columns, spans))


def _chunk_verdict(records: list[bytes], names: bool = True, attrs: frozenset[str] | None = None,
                   deps: bool = True) -> Any:
    """What the lean walk of one chunk gives without spans to keep (the kernel's ``columns``): its columns, proof
    and integer rows, or the kind of its refusal; a refusal leaves the integer rows as they were (MISSING)."""
    lengths = np.array([len(r) for r in records], dtype=np.int64)
    rec_end = np.cumsum(lengths)
    buf = b"".join(records) + bytes(PAD)
    hot = columnar._hot(attrs, deps)
    int_rows = np.full((len(hot.ints), len(records)), columnar.MISSING, dtype=np.int64)
    try:
        columns, proven = columnar._lean_chunk(buf, np.frombuffer(buf, dtype=np.uint8), rec_end - lengths, rec_end,
                                               int_rows, names, None, hot)
    except columnar._Unusual:
        assert (int_rows == columnar.MISSING).all()
        return "unusual"
    except (WireFault, IndexError, ValueError):
        return "fault"
    return _plain((columns, proven, int_rows))


def _verdict(records: list[bytes], texts: bool = True) -> Any:
    """What the lean walk gives for the records (one chunk): its parts, or the kind of its refusal (a fault
    being anything that sends the caller to the record-by-record path)."""
    lengths = np.array([len(r) for r in records], dtype=np.int64)
    rec_end = np.cumsum(lengths)
    b = np.frombuffer(b"".join(records) + bytes(PAD), dtype=np.uint8)
    try:
        scalars, spans, io_texts, attrs, ids, high = columnar._lean_parts(b, word_view(b), rec_end - lengths, rec_end,
                                                                          texts, columnar._hot(None))
        ctrl = columnar._lean_deps(b, spans[columnar._TAG_CTRL], spans[columnar._TAG_CTRL_ONE], len(records))
        data = columnar._lean_deps(b, spans[columnar._TAG_DATA], spans[columnar._TAG_DATA_ONE], len(records))
        record_high = columnar._record_high_bytes(b, word_view(b), rec_end - lengths, rec_end)
        checked = [columnar._checked_deps(b, spans[packed], spans[one], len(records))[2]
                   for packed, one in ((columnar._TAG_CTRL, columnar._TAG_CTRL_ONE),
                                       (columnar._TAG_DATA, columnar._TAG_DATA_ONE))]
    except columnar._Unusual:
        return "unusual"
    except (WireFault, IndexError, ValueError):
        return "fault"
    span_lists = {tag: (*s.cat(), s.steps()) for tag, s in spans.items()}
    return _plain((scalars, span_lists, [columnar._joined_texts(t or []) for t in io_texts], attrs, ids, high, ctrl,
                   data, record_high, checked))


def _lean_node() -> bytes:
    """A record of every field the lean walk takes: deps packed and single, IOInfo, attributes of each value kind."""
    node = Node(id=300, name="aten::linear", type=4, start_time_micros=1 << 40, duration_micros=7)
    node.data_deps.extend([1, 2, 1 << 35])
    node.inputs.values, node.inputs.shapes, node.inputs.types = "[[1, 2]]", "[[8, 8]]", "['Tensor(float)']"
    node.outputs.values = "[]"
    node.attr.extend([make_attr("rf_id", 123456), make_attr("is_cpu_op", False), make_attr("pg_name", "0"),
                      make_attr("comm_size", -5, kind="sint64_val"), make_attr("tid", 9, kind="fixed32_val"),
                      make_attr("ts", 1 << 50, kind="fixed64_val")])
    node.attr.add(name="flag")  # a name alone
    node.attr.add(name="ratio", double_val=0.5)
    return node.SerializeToString() + _varint_field(4, 5)  # a single (unpacked) ctrl dep


def test_the_kernel_is_built() -> None:
    assert KERNEL is not None, "etkit.format._walk is not built: `pip install -e .` compiles it (it needs a C compiler)"


@pytest.mark.shared_data
def test_every_upstream_vector_decodes_the_same(upstream: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz")))
    assert len(files) > 200
    for path in files:
        buf = read_trace_bytes(path)
        for options in ({}, {"names": False}, {"deps": False, "attrs": ("comm_type", "pg_name")}):
            kernel, numpy_walk = _walks(monkeypatch, lambda: _decoded(buf, **options))  # noqa: B023
            assert kernel == numpy_walk, (path, options)
            direct, numpy_direct = _walks(monkeypatch, lambda: _decoded(buf, keep=False, **options))  # noqa: B023
            assert direct == numpy_direct and direct[0] == kernel[0], (path, options)


def test_every_mutation_of_lean_records_gets_the_same_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    record = _lean_node()
    other = Node(id=1, name="x", ctrl_deps=[0]).SerializeToString()
    assert _walks(monkeypatch, lambda: _verdict([record, other]))[0] not in ("unusual", "fault")
    verdicts, directs = set(), set()
    for at in range(len(record)):
        for mutated in (record[:at], record[:at] + bytes([record[at] ^ 0x80]) + record[at + 1:],
                        record[:at] + b"\xff" + record[at + 1:], record[:at] + b"\x00" + record[at + 1:],
                        record[:at] + bytes([(record[at] + 1) & 0xFF]) + record[at + 1:]):
            kernel, numpy_walk = _walks(monkeypatch, lambda: _verdict([other, mutated, other]))  # noqa: B023
            assert kernel == numpy_walk, (at, mutated)
            verdicts.add(kernel if isinstance(kernel, str) else "parts")
            for options in ({}, {"names": False, "deps": False, "attrs": frozenset({"pg_name", "tid"})}):
                direct, numpy_direct = _walks(monkeypatch,
                                              lambda: _chunk_verdict([other, mutated, other], **options))  # noqa: B023
                assert direct == numpy_direct, (at, mutated, options)
                directs.add(direct if isinstance(direct, str) else "parts")
    assert verdicts == directs == {"parts", "unusual", "fault"}


@settings(max_examples=200, deadline=None)
@given(st.lists(nodes(), min_size=1, max_size=4), st.data())
def test_random_records_get_the_same_verdict(node_list, data) -> None:  # type: ignore[no-untyped-def]
    records = [n.SerializeToString() for n in node_list]
    row = data.draw(st.integers(0, len(records) - 1))
    mutated = bytearray(records[row])
    for pos, value in data.draw(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=2)):
        if mutated:
            mutated[pos % len(mutated)] = value
    records[row] = bytes(mutated)
    names, deps = data.draw(st.booleans(), label="names"), data.draw(st.booleans(), label="deps")
    attrs = data.draw(st.none() | st.frozensets(st.sampled_from(columnar.HOT_ATTRS)), label="attrs")
    verdicts, direct = [], []
    for kernel in (KERNEL, None):  # (hypothesis and function-scoped fixtures do not mix: patched by hand)
        saved, wire.KERNEL = wire.KERNEL, kernel
        try:
            verdicts.append(_verdict(records, data.draw(st.booleans(), label=f"texts {kernel is None}")))
            direct.append(_chunk_verdict(records, names, attrs, deps))
        finally:
            wire.KERNEL = saved
    assert direct[0] == direct[1]
    if not any(isinstance(v, str) for v in verdicts):  # (texts drawn apart: compare what both give)
        assert verdicts[0][:1] == verdicts[1][:1]
    else:
        assert verdicts[0] == verdicts[1]


def test_records_of_more_fields_than_the_walk_takes_are_unusual_to_both(monkeypatch: pytest.MonkeyPatch) -> None:
    many = _varint_field(1, 1) * (columnar._MAX_STEPS + 1)
    assert _walks(monkeypatch, lambda: _verdict([many])) == ("unusual", "unusual")
    short = _varint_field(1, 1) * columnar._MAX_STEPS
    kernel, numpy_walk = _walks(monkeypatch, lambda: _verdict([short]))
    assert kernel == numpy_walk and kernel not in ("unusual", "fault")
    io = _len_field(8, _len_field(1, b"") * (columnar._MAX_STEPS + 1))
    assert _walks(monkeypatch, lambda: _verdict([io])) == ("unusual", "unusual")


def test_a_name_alone_before_a_record_whose_length_reads_as_a_fixed_value_is_not_miscounted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found writing the kernel: after a name-only attribute that ends its record, the numpy walk read the next
    record's length prefix 0x19 as a double_val tag and counted the next eight bytes' top bits as the value's,
    which could make up for an invalid string elsewhere: validate accepted a file that protobuf rejects."""
    name = b"a" * 19 + b"\xff"  # not UTF-8: protobuf rejects the record
    second = _varint_field(1, 128) + _len_field(2, name)  # 25 bytes: its length prefix is 0x19
    assert len(second) == 0x19
    first = _varint_field(1, 1) + _len_field(10, _len_field(1, b"x"))
    meta = GlobalMetadata(version="0.0.4").SerializeToString()
    path = tmp_path / "bad.et"
    path.write_bytes(b"".join(bytes([len(r)]) + r for r in (meta, first, second)))
    for kernel in (KERNEL, None):
        monkeypatch.setattr(wire, "KERNEL", kernel)
        try:
            report = validate(path)
        except EtkitError as exc:
            assert "bad UTF-8" in str(exc)
        else:
            assert not report.ok, report
    assert _key(3, 1) == b"\x19"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=40), st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)),
                                                                 max_size=3), st.integers(0, 3))
def test_frame_starts_are_the_same(payloads, edits, cut) -> None:  # type: ignore[no-untyped-def]
    """The chain of length prefixes, from valid framing through damaged prefixes and cut ends."""
    buf = bytearray(b"".join(bytes(_encode(len(p))) + p for p in payloads))
    for pos, value in edits:
        if buf:
            buf[pos % len(buf)] = value
    data = bytes(buf[:len(buf) - min(cut, len(buf))])
    got, tables = [], []
    for kernel in (KERNEL, None):
        saved, wire.KERNEL = wire.KERNEL, kernel
        try:
            starts = stream._frame_starts(data)
            for allow_empty in (False, True):
                try:
                    table = frame_table(data, "<test>", allow_empty=allow_empty)
                    tables.append([(c.dtype.str, c.tolist()) for c in (table.start, table.offset, table.length)])
                except EtkitError as exc:
                    tables.append(str(exc))
        finally:
            wire.KERNEL = saved
        got.append(None if starts is None else starts.tolist())
    assert got[0] == got[1]
    assert tables[:2] == tables[2:]  # (the frame table, which the kernel's chain walk decodes itself)


@pytest.mark.shared_data
def test_frame_starts_of_a_big_real_buffer_are_the_same(upstream: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``_SPLIT_FRAMING`` the numpy path walks many chains at once; the kernel follows the one chain."""
    buf = b"".join(read_trace_bytes(p) for p in sorted(upstream.rglob("*.et")))
    assert len(buf) > stream._SPLIT_FRAMING
    kernel, numpy_walk = _walks(monkeypatch, lambda: stream._frame_starts(buf).tolist())
    assert kernel == numpy_walk

    def table() -> list[list[int]]:  # (with the kernel: the lengths its chain walk decodes)
        found = frame_table(buf, "<test>")
        return [found.start.tolist(), found.offset.tolist(), found.length.tolist()]

    kernel, numpy_walk = _walks(monkeypatch, table)
    assert kernel == numpy_walk and max(kernel[2]) >= 1 << 14  # records of 16 KiB and more among them


def test_top_bit_bytes_are_counted_as_numpy_counts_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The count the proof rests on, over records of every length around its word and 255-word boundaries."""
    rng = np.random.default_rng(7)
    lengths = np.array([0, 1, 7, 8, 9, 2039, 2040, 2041, 2048, 4087, 4096, 70_001], dtype=np.int64)
    b = rng.integers(0, 256, int(lengths.sum()) + 3 * lengths.size + PAD, dtype=np.uint8)
    rec_off = np.cumsum(lengths + 3) - lengths  # three bytes between records, not counted
    rec_end = rec_off + lengths
    kernel, numpy_walk = _walks(monkeypatch, lambda: columnar._record_high_bytes(b, word_view(b), rec_off, rec_end))
    assert kernel == numpy_walk == sum(int(np.count_nonzero(b[o:e] >= 0x80)) for o, e in zip(rec_off, rec_end))


def test_packed_lists_of_ten_and_eleven_byte_varints(monkeypatch: pytest.MonkeyPatch) -> None:
    """A packed dep list's varints as protobuf reads them: ten bytes at most (decoded, or only checked)."""
    for continuation, verdict in ((9, "parts"), (10, "fault")):
        record = _varint_field(1, 1) + _len_field(5, b"\x01" + b"\xff" * continuation + b"\x01" + b"\x02" * 8)
        kernel, numpy_walk = _walks(monkeypatch, lambda: _verdict([record]))  # noqa: B023
        assert kernel == numpy_walk
        assert (kernel if isinstance(kernel, str) else "parts") == verdict
        for deps in (True, False):
            direct, numpy_direct = _walks(monkeypatch, lambda: _chunk_verdict([record], deps=deps))  # noqa: B023
            assert direct == numpy_direct and (direct if isinstance(direct, str) else "parts") == verdict


def test_hot_attributes_in_any_order_and_kind_are_the_same_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's columns (``_walk.columns``) against the numpy walk where the order matters: repeated hot
    attributes (the last wins), ``pg_name`` at different field positions of different records (its string table
    in walk order), integer and valueless ``pg_name`` values, every integer kind, deps packed and single."""
    records = [
        Node(id=1, name="a", attr=[make_attr("pg_name", "late"), make_attr("comm_size", 3),
                                   make_attr("comm_size", -4, kind="sint32_val")]).SerializeToString(),
        Node(id=2, attr=[make_attr("pg_name", "early")]).SerializeToString(),
        Node(id=3, name="early", data_deps=[1, 2], attr=[make_attr("pg_name", 7, kind="int64_val"),
                                                         make_attr("is_cpu_op", 2, kind="int32_val"),
                                                         make_attr("is_cpu_op", True)]).SerializeToString()
        + _varint_field(5, 9) + _varint_field(4, 1),
        Node(id=4, attr=[make_attr("pg_name", "x"), make_attr("pg_name", 1.5, kind="double_val"), make_attr("tid", 1 << 63,
                                                                                         kind="uint64_val"),
                         make_attr("stream", 5, kind="fixed32_val"), make_attr("num_ops", -1, kind="sfixed64_val"),
                         make_attr("tensor_size", -2, kind="int32_val")]).SerializeToString(),
        _varint_field(1, 5) + _len_field(10, _len_field(1, b"pg_name")),  # a pg_name without a value
        b"",
    ]
    for attrs in (None, frozenset({"pg_name"}), frozenset({"is_cpu_op", "tid"})):
        for names, deps in ((True, True), (False, False)):
            direct, numpy_walk = _walks(monkeypatch, lambda: _chunk_verdict(records, names, attrs, deps))  # noqa: B023
            assert direct == numpy_walk and not isinstance(direct, str), (attrs, names, deps)
