"""Reading and writing .et files: exact bytes, gzip, atomic output, and clean errors on bad input."""

from __future__ import annotations

import gzip
import os
import tarfile
from pathlib import Path

import pytest

from etkit.errors import TraceFormatError
from etkit.format.schema import GlobalMetadata, Node, NodeType
from etkit.format.stream import (
    TraceWriter,
    _scan_frames_exact,
    _serialises_in_field_order,
    frame,
    frame_table,
    open_trace,
    scan_frames,
    write_trace,
)
from etkit.model.trace import load_trace

from ..builders import coll, node, write_job


def _upstream_et_files(upstream: Path) -> list[Path]:
    return sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz")))


def _plain(data: bytes) -> bytes:
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


@pytest.mark.shared_data
def test_every_upstream_vector_round_trips_byte_for_byte(upstream: Path, tmp_path: Path) -> None:
    files = _upstream_et_files(upstream)
    assert len(files) >= 250
    for path in files:
        original = _plain(path.read_bytes())
        # through Node messages (read -> write)
        with open_trace(path) as reader:
            write_trace(tmp_path / "a.et", reader.metadata, reader)
        assert (tmp_path / "a.et").read_bytes() == original, path
        # through the columnar Trace
        load_trace(path).write(tmp_path / "b.et.gz")
        assert gzip.decompress((tmp_path / "b.et.gz").read_bytes()) == original, path


@pytest.mark.shared_data
def test_historic_astra_sim_tars_are_read_tolerantly(upstream: Path, tmp_path: Path) -> None:
    tars = sorted((upstream / "astra-sim-astra-sim/inputs/workload/ASTRA-sim-2.0").glob("*.tar"))
    assert tars
    total = 0
    for tar_path in tars:
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp_path / tar_path.stem, filter="data")
        for et in (tmp_path / tar_path.stem).rglob("*.et"):
            trace = load_trace(et)
            assert len(trace) > 0
            total += len(trace)
            comm = trace.comm_rows()
            # old files carry comm_size as uint64 (or not at all) and involved_dim bool lists
            assert all(trace.comm_size[r] > 0 or trace.comm_size[r] == -(2**63) for r in comm)
    assert total > 1000


def _small_file(path: Path) -> bytes:
    write_trace(path, GlobalMetadata(version="1.0.0"),
                [node(1, duration=5), node(2, deps=[1], duration=7), coll(3, 0, 1 << 20, deps=[2])])
    return path.read_bytes()


def test_truncation_at_every_byte_gives_a_clean_error(tmp_path: Path) -> None:
    data = _small_file(tmp_path / "t.et")
    boundaries = set()
    pos = 0
    while pos < len(data):
        boundaries.add(pos)
        pos += 1 + data[pos]  # all records here are shorter than 128 bytes
    cut = tmp_path / "cut.et"
    for n in range(len(data)):
        cut.write_bytes(data[:n])
        if n in boundaries and n > 0:
            # a cut on a record boundary is a shorter, valid file
            assert len(load_trace(cut)) == sum(1 for b in boundaries if b < n) - 1
            continue
        with pytest.raises(TraceFormatError) as err:
            load_trace(cut)
        message = str(err.value)
        assert str(cut) in message and "record" in message
        with pytest.raises(TraceFormatError):
            with open_trace(cut) as reader:
                list(reader)


def test_truncated_file_error_names_record_and_offset(tmp_path: Path) -> None:
    data = _small_file(tmp_path / "t.et")
    (tmp_path / "cut.et").write_bytes(data[:-3])
    with pytest.raises(TraceFormatError) as err:
        load_trace(tmp_path / "cut.et")
    assert err.value.record == 3
    assert err.value.offset == len(data) - len(frame(coll(3, 0, 1 << 20, deps=[2]).SerializeToString()))
    assert "truncated record" in str(err.value)


def test_zero_length_record_is_an_error_not_end_of_file(tmp_path: Path) -> None:
    data = _small_file(tmp_path / "t.et")
    first_node_end = 1 + data[0]
    first_node_end += 1 + data[first_node_end]
    bad = data[:first_node_end] + b"\x00" + data[first_node_end:]
    (tmp_path / "z.et").write_bytes(bad)
    with pytest.raises(TraceFormatError, match="zero-length record") as err:
        load_trace(tmp_path / "z.et")
    assert err.value.record == 2
    assert len(load_trace(tmp_path / "z.et", allow_empty=True)) == 4


def test_flipped_bytes_give_a_trace_or_a_clean_error(tmp_path: Path) -> None:
    data = _small_file(tmp_path / "t.et")
    for i in range(len(data)):
        for flip in (0x01, 0x80, 0xFF):
            corrupt = bytearray(data)
            corrupt[i] ^= flip
            path = tmp_path / "f.et"
            path.write_bytes(bytes(corrupt))
            try:
                load_trace(path)
            except TraceFormatError:
                pass


def test_gzip_is_sniffed_and_written_by_suffix(tmp_path: Path) -> None:
    data = _small_file(tmp_path / "t.et")
    write_trace(tmp_path / "t.et.gz", GlobalMetadata(version="1.0.0"), open_trace(tmp_path / "t.et"))
    assert (tmp_path / "t.et.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress((tmp_path / "t.et.gz").read_bytes()) == data
    renamed = tmp_path / "no_suffix.et"
    renamed.write_bytes((tmp_path / "t.et.gz").read_bytes())
    assert [n.id for n in open_trace(renamed)] == [1, 2, 3]
    (tmp_path / "broken.et").write_bytes((tmp_path / "t.et.gz").read_bytes()[:-10])
    with pytest.raises(TraceFormatError, match="gzip"):
        load_trace(tmp_path / "broken.et")


def test_writer_drops_duplicate_deps_and_refuses_empty_nodes(tmp_path: Path) -> None:
    with TraceWriter(tmp_path / "d.et") as writer:
        writer.write(node(1))
        writer.write(node(2, deps=[1, 1], ctrl=[1, 1]))
        with pytest.raises(ValueError, match="empty node"):
            writer.write(Node())
    [_, second] = list(open_trace(tmp_path / "d.et"))
    assert list(second.data_deps) == [1] and list(second.ctrl_deps) == [1]


def test_writes_are_atomic(tmp_path: Path) -> None:
    target = tmp_path / "a.et"
    _small_file(target)
    before = target.read_bytes()
    with pytest.raises(RuntimeError):
        with TraceWriter(target, GlobalMetadata(version="x")) as writer:
            writer.write(node(9))
            raise RuntimeError("crash in the middle")
    assert target.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["a.et"]
    assert oct(target.stat().st_mode & 0o777) != "0o600"


def test_node_type_enum_of_unknown_value_is_kept(tmp_path: Path) -> None:
    payload = Node(id=1, type=NodeType.COMP_NODE).SerializeToString()[:-1] + b"\x09"
    with TraceWriter(tmp_path / "u.et") as writer:
        writer.write_record(payload)
    assert int(load_trace(tmp_path / "u.et").types[0]) == 9


def test_streaming_reader_is_single_pass(tmp_path: Path) -> None:
    _small_file(tmp_path / "t.et")
    reader = open_trace(tmp_path / "t.et")
    assert [n.id for n in reader] == [1, 2, 3]
    with pytest.raises(RuntimeError):
        list(reader)


def test_write_job_prefix_layout(tmp_path: Path) -> None:
    write_job(tmp_path / "job", [[node(1)], [node(1)]])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.0.et", "job.1.et"]


def _frames_or_error(scan, buf: bytes, allow_empty: bool):  # type: ignore[no-untyped-def]
    try:
        return [list(map(int, column)) for column in scan(buf, "f.et", allow_empty=allow_empty)]
    except TraceFormatError as exc:
        return (str(exc), exc.record, exc.offset)


def _frame_columns(buf: bytes, path: str, *, allow_empty: bool = False):  # type: ignore[no-untyped-def]
    table = frame_table(buf, path, allow_empty=allow_empty)
    return table.start, table.offset, table.length


def test_frame_table_matches_the_record_by_record_scan_at_every_cut() -> None:
    # one-, two- and three-byte length prefixes, an empty record, and an over-long varint at the end
    records = [b"m" * 3, b"a" * 5, b"b" * 200, b"", b"c" * 20_000, b"d" * 127, b"e" * 128, b"f" * 16_383]
    data = b"".join(frame(r) for r in records)
    cuts = sorted(set(range(0, len(data), 97)) | {p + d for p in range(len(data) + 1) if p in _starts(data)
                                                  for d in range(4)})
    for allow_empty in (False, True):
        for n in cuts:
            buf = data[:n]
            want = _frames_or_error(_scan_frames_exact, buf, allow_empty)
            assert _frames_or_error(_frame_columns, buf, allow_empty) == want, n
            assert _frames_or_error(scan_frames, buf, allow_empty) == want, n
    bad = data + b"\xff\xff\xff\xff\xff\x01"
    assert _frames_or_error(_frame_columns, bad, True) == _frames_or_error(_scan_frames_exact, bad, True)
    assert "longer than 5 bytes" in _frames_or_error(_frame_columns, bad, True)[0]


def _starts(data: bytes) -> set[int]:
    return set(_scan_frames_exact(data, "f.et", allow_empty=True)[0]) | {len(data)}


def test_batched_duplicate_dep_removal_keeps_first_occurrences_and_file_order(tmp_path: Path) -> None:
    # enough nodes for the vectorised check, with repeats in some lists, mixed with lossless records
    lists = [([i - 1, i - 2, i - 1, i - 3, i - 2][: i % 6], [i - 5] * (i % 3)) for i in range(10, 400)]
    raw = node(9999, deps=[1, 1]).SerializeToString()  # write_record keeps records as they are
    with TraceWriter(tmp_path / "b.et") as writer:
        for i, (data, ctrl) in enumerate(lists):
            writer.write(node(i + 10, deps=data, ctrl=ctrl))
            if i % 100 == 50:
                writer.write_record(raw)
    nodes = list(open_trace(tmp_path / "b.et"))
    written = [n for n in nodes if n.id != 9999]
    assert [n.id for n in nodes if n.id == 9999] == [9999] * 4 and list(nodes[51].data_deps) == [1, 1]
    for n, (data, ctrl) in zip(written, lists):
        assert list(n.data_deps) == list(dict.fromkeys(data)) and list(n.ctrl_deps) == list(dict.fromkeys(ctrl))


def test_protobuf_writes_node_fields_in_number_order() -> None:
    # the batched duplicate-dep check stops reading a record after its deps only where this holds
    assert _serialises_in_field_order()


@pytest.mark.parametrize("long_name", [0, 200, 20_000])  # one-byte, two-byte and three-byte length prefixes
def test_batched_framing_gives_the_exact_protobuf_records(tmp_path: Path, long_name: int) -> None:
    """Batches of write() (several drains of over 1 MiB) frame every record as varint(len) || SerializeToString."""
    nodes = [node(i, deps=[i - 1] if i > 1 else [], ctrl=[1, 2] if i % 7 == 0 else []) for i in range(1, 12_000)]
    for i, n in enumerate(nodes):
        n.name = "k" * long_name if i % 1000 == 0 else f"op{i}" + "x" * 80  # 1.4 MB in all
    meta = GlobalMetadata(version="v").SerializeToString()
    with TraceWriter(tmp_path / "f.et", meta) as writer:
        for n in nodes:
            writer.write(n)
        assert writer.nodes_written == len(nodes)
    expected = bytearray()
    for payload in [meta] + [n.SerializeToString() for n in nodes]:
        length = len(payload)
        while length >= 0x80:  # protobuf varint, little-endian base 128
            expected.append(length & 0x7F | 0x80)
            length >>= 7
        expected.append(length)
        expected += payload
    assert (tmp_path / "f.et").read_bytes() == bytes(expected)


def _decoy_records(count: int, seed: int) -> list[bytes]:
    """Node-like records (``08`` first, as real ones) whose payloads also hold bytes that look like frame
    starts (a length then ``08``), with empty, two- and three-byte-prefixed records among them."""
    import random
    rng = random.Random(seed)
    out = []
    for i in range(count):
        size = rng.choice([0, 1, 5, 9, 40, 127, 128, 300]) if i % 50 else rng.choice([16_384, 20_000])
        body = bytes(rng.choice([0x08, 0x05, 0x0A, 0x80, 0x01, 0x7F, 0xFF]) for _ in range(max(0, size - 1)))
        out.append(b"\x08" + body if size else b"")
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_split_framing_gives_the_single_chain_at_every_cut(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Big buffers are framed by many chains from guessed starts; wrong guesses (decoys) are walked again, so
    the frames and every error are those of the record-by-record scan, at every cut of the buffer."""
    from etkit.format import stream
    monkeypatch.setattr(stream, "_SPLIT_FRAMING", 1)
    monkeypatch.setattr(stream, "_SEGMENT", 256)
    monkeypatch.setattr(stream, "_GUESS_WINDOW", 64)
    records = [r for r in _decoy_records(60, seed) if len(r) < 16_384] + [b"\x08" + b"\x05\x08" * 8_200]
    data = frame(b"\x0a\x03abc") + b"".join(frame(r) for r in records)
    starts = set(_scan_frames_exact(data, "f.et", allow_empty=True)[0])
    cuts = sorted(set(range(1, len(data) + 1, 97)) | {p + d for p in starts for d in range(-1, 3) if 0 < p + d <= len(data)})
    for allow_empty in (False, True):
        for n in cuts:
            buf = data[:n]
            assert _frames_or_error(_frame_columns, buf, allow_empty) == _frames_or_error(_scan_frames_exact, buf,
                                                                                         allow_empty), n
    bad = data + b"\xff\xff\xff\xff\xff\x01"
    assert _frames_or_error(_frame_columns, bad, True) == _frames_or_error(_scan_frames_exact, bad, True)


def test_split_framing_of_a_big_buffer_matches_the_scan() -> None:
    data = frame(b"\x0a\x01v") + b"".join(frame(r) for r in _decoy_records(7_000, 3))
    assert len(data) > 1 << 20
    for allow_empty in (False, True):
        assert _frames_or_error(_frame_columns, data, allow_empty) == _frames_or_error(_scan_frames_exact, data,
                                                                                      allow_empty)


def _head_outcome(head: bytes, allow_empty: bool) -> object:
    from etkit.format.stream import check_head
    try:
        check_head(head, "f.et", allow_empty=allow_empty)
    except TraceFormatError as exc:
        return (str(exc), exc.record, exc.offset)
    return None


def test_vectorised_head_check_raises_what_the_record_by_record_check_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    from etkit.format import stream
    records = [r for r in _decoy_records(80, 4) if len(r) < 16_384] + [b"", b"\x08"] * 35 + [b""] * 35 + [b"\x08" * 16_400]
    data = frame(b"\x0a\x01v") + b"".join(frame(r) for r in records) + b"\xff\xff\xff\xff\xff\x01"
    cuts = range(0, len(data) + 1, 13)
    fast = [_head_outcome(data[:n], allow_empty) for n in cuts for allow_empty in (False, True)]
    monkeypatch.setattr(stream, "_plain_head", lambda head, allow_empty: False)
    exact = [_head_outcome(data[:n], allow_empty) for n in cuts for allow_empty in (False, True)]
    assert fast == exact
    assert any(exact) and not all(exact)  # both outcomes are met


def test_an_in_memory_writer_holds_the_bytes_the_file_gets(tmp_path: Path) -> None:
    meta = GlobalMetadata(version="1.0.0")
    nodes = [Node(id=i, name=f"op{i}", type=NodeType.COMP_NODE, data_deps=[i - 1] * 2 if i else []) for i in range(300)]
    with TraceWriter(tmp_path / "t.et", meta) as on_disk:
        for node in nodes:
            on_disk.write(node)
        on_disk.write_record(nodes[0].SerializeToString())
    with TraceWriter(None, meta) as in_memory:
        for node in nodes:
            in_memory.write(node)
        in_memory.write_record(nodes[0].SerializeToString())
        with pytest.raises(ValueError, match="closed in-memory"):
            in_memory.getvalue()
    assert in_memory.getvalue() == (tmp_path / "t.et").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.et"]


def test_length_prefix_table_is_the_varint_of_every_length() -> None:
    from etkit.format.stream import _prefix, encode_varint, varint_table

    assert varint_table() == [encode_varint(n) for n in range(0x4000)]
    assert [_prefix(n) for n in [*range(0x4400), 1 << 20, 0x4000, 1 << 20]] == [
        encode_varint(n) for n in [*range(0x4400), 1 << 20, 0x4000, 1 << 20]]  # past the cache's size too
