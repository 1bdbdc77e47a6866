"""format.parts: the record parts from the trace loader's walk are those of a walk of their own."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from etkit.format.columnar import PAD, _hashed_table
from etkit.format.parts import RecordParts, record_parts, span_table, walked_parts
from etkit.model.trace import load_trace

_ARRAYS = ("io_off", "io_len", "text_off", "text_len", "attr_row", "attr_name", "attr_off", "attr_len", "attr_kind",
           "attr_text", "attr_value", "attr_value_off")


def _assert_same(a: RecordParts, b: RecordParts) -> None:
    for name in _ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert a.names == b.names and a.strings == b.strings and a.buf == b.buf


def _compare(path: Path) -> bool:
    """Whether the loader's walk took every record of ``path`` (then its parts were compared)."""
    spans: list = []
    trace = load_trace(path, spans=spans)
    assert load_trace(path).ids.tolist() == trace.ids.tolist()  # the spans change nothing else
    took = False
    for names in (None, ["op_schema", "rf_id", "pg_name", "ts_ns"]):
        walked = walked_parts(trace.blob, len(trace), spans, names)
        if walked is None:
            assert None in spans or not spans
            continue
        own = record_parts(trace.blob, trace.rec_off, trace.rec_len, names)
        assert own is not None
        _assert_same(walked, own)
        if names is not None:
            _assert_same_unordered(walked_parts(trace.blob, len(trace), spans, names, ordered=False), own)
        took = True
    return took


def _assert_same_unordered(a: RecordParts | None, b: RecordParts) -> None:
    """The same parts but the attributes' order across records: each record's in wire order, the same strings."""
    assert a is not None
    for name in _ARRAYS[:4]:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    by_row = np.argsort(a.attr_row, kind="stable")  # a record's attributes in the order given: wire order
    row, off = a.attr_row[by_row], a.attr_off[by_row]
    assert ((np.diff(off) > 0) | (np.diff(row) != 0)).all()
    order_a, order_b = (np.lexsort((p.attr_off, p.attr_row)) for p in (a, b))
    for name in _ARRAYS[4:]:
        if name != "attr_text":
            assert np.array_equal(getattr(a, name)[order_a], getattr(b, name)[order_b]), name
    assert a.names == b.names and sorted(a.strings) == sorted(b.strings)


@pytest.mark.shared_data
def test_the_loader_spans_give_the_parts_of_a_walk(upstream: Path, converted_job) -> None:
    files = sorted(upstream.rglob("*.et"))
    job = converted_job("hybrid_dp_tp_ws4")
    files += sorted(job.parent.glob(f"{job.name}.*.et"))
    taken = sum(_compare(f) for f in files)
    assert taken > len(files) // 2  # most files are of the loader's lean shape


def test_chunks_and_the_tail_read_in_place(tmp_path: Path) -> None:
    """More records than a chunk, in a file big enough that its last records are decoded apart (the loader's
    tail chunk has offsets of its own): still the parts of a walk."""
    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
    from bench_share_scale import make_job

    import etkit.format.columnar as columnar

    make_job(tmp_path / "job", 1, 20_000)
    assert _compare(tmp_path / "job.0.et")
    old = columnar._PADDED_COPY
    try:
        columnar._PADDED_COPY = 0  # the tail chunk even for this file
        assert _compare(tmp_path / "job.0.et")
    finally:
        columnar._PADDED_COPY = old


def test_spans_of_records_the_lean_walk_declines_are_none(tmp_path: Path) -> None:
    from etkit.format.attrs import make_attr
    from etkit.format.schema import GlobalMetadata, Node
    from etkit.format.stream import TraceWriter

    with TraceWriter(tmp_path / "odd.0.et", GlobalMetadata(version="1")) as w:
        for i in range(3):
            node = Node(id=i + 1, name="n")
            node.attr.append(make_attr("xs", [1, 2], "int64_list"))
            w.write(node)
    spans: list = []
    trace = load_trace(tmp_path / "odd.0.et", spans=spans)
    assert spans == [None] and walked_parts(trace.blob, len(trace), spans) is None
    assert record_parts(trace.blob, trace.rec_off, trace.rec_len) is not None


def test_text_tables_of_long_strings_are_the_string_tables() -> None:
    rng = np.random.default_rng(5)
    texts = [f"['Tensor(float)', 'Tensor({t})', 'Int']".encode() for t in ("int", "long", "float", "bool")]
    texts += [b"[[1, 2]]", b"x" * 30, "é".encode() * 20]
    pick = rng.integers(0, len(texts), 5000)
    buf = b"".join(texts[i] for i in pick)
    length = np.asarray([len(texts[i]) for i in pick], dtype=np.int64)
    off = np.concatenate([[0], np.cumsum(length)[:-1]])
    off[::7] = -1  # absent spans: the empty text
    padded = buf + bytes(PAD)
    # span_table takes the dictionary path here (most strings are long); the hashes must give the same
    want = _hashed_table(padded, np.frombuffer(padded, dtype=np.uint8), np.maximum(off, 0), np.where(off >= 0, length, 0))
    got = span_table(buf, off, length)
    assert np.array_equal(got[0], want[0]) and got[0].dtype == want[0].dtype and got[1] == want[1]


def _named_values(parts: RecordParts, names: tuple[str, ...]) -> list:
    return [(parts.ints(n).tolist(), [t[i] if i >= 0 else None for i in idx.tolist()])
            for n in names for idx, t in [parts.texts(n)]]


@pytest.mark.shared_data
@pytest.mark.parametrize("few", [1 << 14, 0])  # bytes.find, or the word views
def test_named_only_reads_the_named_attributes_as_the_whole_walk(upstream: Path, converted_job, monkeypatch,
                                                                 few: int) -> None:
    """record_parts(named_only=True) decodes only the attributes whose bytes hold a name asked for: every
    record's values of those names are the ones the walk of every attribute reads."""
    import etkit.format.parts as parts

    monkeypatch.setattr(parts, "_FEW", few)
    job = converted_job("hybrid_dp_tp_ws4")
    files = sorted(upstream.rglob("*.et"))[::4] + sorted(job.parent.glob(f"{job.name}.*.et"))
    names = ("pg_name", "ts_ns", "comm_src", "comm_dst", "tensor_size")
    compared = fewer = 0
    for path in files:
        trace = load_trace(path)
        both = [record_parts(trace.blob, trace.rec_off, trace.rec_len, names, io=False, strings=False, scalars=(3, 6),
                             named_only=only) for only in (False, True)]
        if both[0] is None:
            continue
        assert both[1] is not None and both[1].scalars is not None and both[0].scalars is not None
        assert _named_values(both[0], names) == _named_values(both[1], names), path
        assert all(np.array_equal(both[0].scalars[k], both[1].scalars[k]) for k in (3, 6))
        compared += 1
        fewer += both[1].attr_row.size < both[0].attr_row.size
    assert compared > len(files) // 2 and fewer > compared // 2  # the filter ran, and left attributes out
