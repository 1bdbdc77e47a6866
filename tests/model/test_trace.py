"""The columnar Trace: columns match the nodes, lookups work, records are kept losslessly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etkit.errors import TraceFormatError
from etkit.format.attrs import make_attr
from etkit.format.schema import CommType, GlobalMetadata, Node, NodeType
from etkit.format.stream import frame
from etkit.model.trace import MISSING, Trace, load_trace, load_traces, trace_from_bytes

from ..builders import coll, node, send


def _trace() -> Trace:
    return Trace.from_nodes(GlobalMetadata(version="v"), [
        node(10, duration=3, start=5), coll(20, CommType.ALL_GATHER, 4096, deps=[10], pg="7"),
        send(30, 0, 1, 64, tag=3, deps=[20, 10]), node(40, ctrl=[30], is_cpu_op=True)])


def test_columns_hold_the_node_fields() -> None:
    t = _trace()
    assert len(t) == 4 and t.ids.tolist() == [10, 20, 30, 40]
    assert t.types.tolist() == [NodeType.COMP_NODE, NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE,
                                NodeType.COMP_NODE]
    assert t.names.tolist() == ["COMP_NODE_10", "COMM_COLL_NODE_20", "COMM_SEND_NODE_30", "COMP_NODE_40"]
    assert t.duration.tolist() == [3, 0, 0, 0] and t.start.tolist() == [5, 0, 0, 0]
    assert t.deps_of(2).tolist() == [20, 10] and t.deps_of(3, "ctrl").tolist() == [30]
    assert t.edge_sources().tolist() == [1, 2, 2]
    assert t.comm_type.tolist() == [MISSING, CommType.ALL_GATHER, MISSING, MISSING]
    assert t.comm_size.tolist() == [MISSING, 4096, 64, MISSING]
    assert t.comm_dst[2] == 1 and t.comm_tag[2] == 3
    assert t.is_cpu_op.tolist() == [0, 0, 0, 1]
    assert t.pg_names().tolist() == [None, "7", None, None]
    assert t.comm_rows().tolist() == [1, 2]


def test_lookups() -> None:
    t = _trace()
    assert t.rows_of([40, 10, 99]).tolist() == [3, 0, -1]
    assert t.row_of(30) == 2 and t.name(1) == "COMM_COLL_NODE_20"
    assert t.node(1).id == 20
    empty = Trace.from_nodes(None, [])
    assert len(empty) == 0 and empty.rows_of([1]).tolist() == [-1]



@pytest.mark.parametrize("ids", [[5, 6, 7, 8], [1, 3, 9, 2**63 + 1], [7, 3, 9, 3, 1], [2**64 - 2, 2**64 - 1], [0]],
                         ids=["dense", "increasing", "unordered-repeated", "top-of-range", "single"])
def test_rows_of_agrees_with_a_first_occurrence_lookup(ids: list[int]) -> None:
    t = Trace.from_nodes(None, [node(i) for i in ids])
    first = {}
    for row, node_id in enumerate(ids):
        first.setdefault(node_id, row)
    query = sorted({q for i in ids for q in (i - 1, i, i + 1) if 0 <= q < 2**64} | {0, 2**64 - 1})
    assert t.rows_of(query).tolist() == [first.get(q, -1) for q in query]


def test_write_and_reload_is_identical(tmp_path: Path) -> None:
    t = _trace()
    t.write(tmp_path / "t.0.et")
    back = load_trace(tmp_path / "t.0.et")
    assert back.metadata.version == "v"
    for column in ("ids", "types", "data_ptr", "data_deps", "ctrl_deps", "comm_size", "comm_tag", "is_cpu_op"):
        assert np.array_equal(getattr(back, column), getattr(t, column)), column
    assert list(back.records()) == list(t.records())


_LOADED = ["ids", "types", "start", "duration", "data_ptr", "data_deps", "ctrl_ptr", "ctrl_deps", "is_cpu_op",
           "comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "comm_priority", "num_ops", "tensor_size",
           "tid", "stream", "ts_ns", "dur_ns", "cat", "rec_off", "rec_len"]


def _same_trace(a: Trace, b: Trace, names: bool) -> None:
    for column in _LOADED:
        x, y = getattr(a, column), getattr(b, column)
        assert x.dtype == y.dtype and np.array_equal(x, y), (a.path, column)
    if names:
        assert list(a.names) == list(b.names), a.path
    assert list(a.pg_names()) == list(b.pg_names()), a.path
    assert (a.blob, a.metadata_record, a.metadata, a.path) == (b.blob, b.metadata_record, b.metadata, b.path)


def _outcome(load, *args, **kwargs):  # type: ignore[no-untyped-def]
    try:
        return load(*args, **kwargs)
    except TraceFormatError as exc:
        return str(exc)


@pytest.mark.shared_data
@pytest.mark.parametrize("names", [True, False])
def test_load_traces_gives_load_trace_of_each_file(upstream: Path, names: bool) -> None:
    """Files decoded in joint batches (every upstream vector, mixed producers, gzip, batches of a few
    files) give the traces that loading each alone gives."""
    files = sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz")))
    files = files[::2] + files[1::2]  # neighbours from different producers
    many = list(load_traces(files, names=names, allow_empty=not names, batch_bytes=200_000))
    assert len(many) == len(files)
    for path, trace in zip(files, many):
        _same_trace(load_trace(path, names=names, allow_empty=not names), trace, names)


def test_load_traces_stops_at_the_first_bad_file_with_its_error(tmp_path: Path) -> None:
    good = [tmp_path / f"r.{i}.et" for i in range(4)]
    for path in good:
        _trace().write(path)
    empty, cut = tmp_path / "empty.et", tmp_path / "cut.et"
    empty.write_bytes(b"")
    cut.write_bytes(good[0].read_bytes()[:-3])
    for bad in (empty, cut):
        files = [good[0], good[1], bad, good[2]]
        it = load_traces(files)
        for path in files[:2]:
            _same_trace(load_trace(path), next(it), True)
        assert _outcome(lambda: next(it)) == _outcome(load_trace, bad)
    many = list(load_traces(good, batch_bytes=1 << 20))
    for path, trace in zip(good, many):
        _same_trace(load_trace(path), trace, True)


def test_load_traces_keeps_empty_records_with_allow_empty(tmp_path: Path) -> None:
    paths = []
    for i in range(3):
        path = tmp_path / f"e.{i}.et"
        data = bytearray(frame(GlobalMetadata(version="v").SerializeToString()))
        for j in range(5):
            data += frame(Node(id=j, name=f"n{j}").SerializeToString() if (i + j) % 2 else b"")
        path.write_bytes(bytes(data))
        paths.append(path)
    for path, trace in zip(paths, load_traces(paths, allow_empty=True)):
        _same_trace(load_trace(path, allow_empty=True), trace, True)
    assert _outcome(lambda: list(load_traces(paths))) == _outcome(load_trace, paths[0])


def _faulty_files(tmp_path: Path) -> list[Path]:
    """Small plain files whose records break the rules of the streaming reader's head check or of framing: empty
    records (a few, and more than the head allows), an over-long length, cuts, in the head and past it."""
    meta = frame(GlobalMetadata(version="v").SerializeToString())
    records = [frame(Node(id=i, name=f"n{i}" * (1 + i % 90), type=NodeType.COMP_NODE).SerializeToString())
               for i in range(600)]
    whole = meta + b"".join(records)
    over_long = b"\xff\xff\xff\xff\xff\x01"
    variants = {
        "few_empty": meta + b"".join(records[:5]) + b"\x00" * 3 + b"".join(records[5:]),
        "many_empty": meta + b"".join(records[:5]) + b"\x00" * 70 + b"".join(records[5:]),
        "late_empty": whole + b"\x00" * 70 + records[0],
        "empty_then_cut": meta + b"".join(records[:5]) + b"\x00" * 70 + whole[40_000:50_000],
        "over_long": meta + b"".join(records[:10]) + over_long + b"".join(records[10:]),
        "late_over_long": whole + over_long,
        "head_cut": whole[:9_000],
        "cut": whole[:-7],
        "junk": bytes(range(256)) * 100,
    }
    paths = []
    for name, data in variants.items():
        path = tmp_path / f"{name}.et"
        path.write_bytes(data)
        paths.append(path)
    return paths


def test_small_files_checked_after_framing_give_the_errors_of_the_check_before_reading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small plain file is read whole, its head checked only where framing fails or it holds empty records:
    alone or in a batch, every file loads, or fails with the error (and record and offset), as when its head is
    checked before the rest is read."""
    from etkit.model import trace as module

    good = tmp_path / "good.et"
    _trace().write(good)
    faulty = _faulty_files(tmp_path)

    def outcomes() -> list[object]:
        out: list[object] = []
        for allow_empty in (False, True):
            for path in faulty:
                for files in ([path], [good, path, good]):
                    try:
                        out.append([t.ids.tolist() for t in load_traces(files, allow_empty=allow_empty)])
                    except TraceFormatError as exc:
                        out.append((str(exc), exc.record, exc.offset))
        return out

    deferred = outcomes()
    monkeypatch.setattr(module, "_UNCHECKED_BELOW", 0)  # every head checked before the rest is read
    checked_first = outcomes()
    assert deferred == checked_first
    assert sum(isinstance(o, tuple) for o in deferred) > 20 and any("more than 64" in str(o) for o in deferred)
    assert any(isinstance(o, list) for o in deferred)


def test_trace_from_bytes_decodes_the_metadata_when_first_read(tmp_path: Path) -> None:
    """In memory, the GlobalMetadata record is decoded on first read: the same message as load_trace's, and a
    corrupt one is the same one-line error then."""
    t = _trace()
    t.write(tmp_path / "t.0.et")
    buf = (tmp_path / "t.0.et").read_bytes()
    lazy = trace_from_bytes(buf, "mem")
    assert lazy.metadata_message is None
    assert lazy.metadata == load_trace(tmp_path / "t.0.et").metadata and lazy.metadata.version == "v"
    meta_len = buf[0]
    corrupt = bytes([meta_len]) + b"\x0a\x7f" + buf[3:]  # the version's length runs past the record
    broken = trace_from_bytes(corrupt, "mem")
    assert len(broken) == 4
    with pytest.raises(TraceFormatError, match="mem: .*corrupt GlobalMetadata message"):
        broken.metadata  # noqa: B018
    (tmp_path / "c.0.et").write_bytes(corrupt)
    with pytest.raises(TraceFormatError, match="corrupt GlobalMetadata message"):  # a file: at once
        load_trace(tmp_path / "c.0.et")


def test_string_attr_reads_what_the_node_messages_hold(tmp_path: Path, monkeypatch) -> None:
    """Per row, the first attribute of a name: its string, "" for another kind, None where there is none; from
    the record bytes, as protobuf reads them."""
    nodes = [node(1), node(2), node(3), node(4)]
    nodes[0].attr.extend([make_attr("kernel_name", "ncclKernel_AllReduce"), make_attr("kernel_name", "second")])
    nodes[1].attr.extend([make_attr("kernel_name", 5, "int64_val")])
    nodes[3].attr.extend([make_attr("other", "x"), make_attr("kernel_name", "é" * 200)])
    t = Trace.from_nodes(GlobalMetadata(), nodes)
    rows = np.array([3, 0, 1, 2])
    expected = [next((a.string_val for a in t.node(r).attr if a.name == "kernel_name"), None) for r in rows.tolist()]
    assert t.string_attr(rows, "kernel_name") == expected == ["é" * 200, "ncclKernel_AllReduce", "", None]
    assert t.string_attr(np.zeros(0, dtype=np.int64), "kernel_name") == []
    # the same nodes among many others: a few rows' records are walked in a copy of their own (by the walk, not
    # by protobuf, which reads the records the walk refuses)
    many = Trace.from_nodes(GlobalMetadata(), [*nodes, *(node(i) for i in range(5, 400))])
    monkeypatch.setattr(Trace, "node", lambda self, row: pytest.fail("the walk refused the records"))
    assert many.string_attr(rows, "kernel_name") == expected
    assert many.string_attr(np.arange(len(many)), "kernel_name")[:4] == [expected[k] for k in (1, 2, 3, 0)]


@pytest.mark.shared_data
def test_string_attr_on_the_upstream_vectors(upstream: Path) -> None:
    for path in sorted(upstream.rglob("*.et"))[::9]:
        t = load_trace(path)
        rows = np.arange(min(len(t), 500))
        for name in ("op_schema", "pg_name", "rf_id"):
            assert t.string_attr(rows, name) == [
                next((a.string_val for a in t.node(r).attr if a.name == name), None) for r in rows.tolist()], (path, name)
