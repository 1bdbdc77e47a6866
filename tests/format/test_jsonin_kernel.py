"""from-json's node lines in C (``etkit.format._jsonin``) against the Python path it stands in front of (the home,
``protojson.JSONIN``, patched to None: :class:`etkit.format.protojson.LineEncoder`, then ``NodeEncoder`` and
protobuf): the same ``.et`` bytes, or the same error, on the twins of every upstream vector, on real-shaped
lines, on random nodes and on every single-byte mutation of real lines. Every line the C path takes it must
encode as the Python path does, without error; every other line it must leave to it."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etkit.errors import TraceFormatError
from etkit.format import jsontwin, protojson, tags
from etkit.format.jsontwin import from_json, to_json
from etkit.format.protojson import KIND_JSON, Fragments, LineEncoder, NodeEncoder, dict_to_node, node_text
from etkit.format.schema import AttributeProto, IOInfo, Node, NodeType
from etkit.format.stream import TraceWriter, encode_varint, frame_table

from .test_jsontwin_fast import _line_variants, _node_records, _parses, _records

KERNEL = protojson.JSONIN
_RESNET = "generated-by-upstream-chakra-21585d8/pytorch_converter/resnet_2gpu_et.1.1.0-chakra.0.0.4.host_only.et.gz"
_STAGE = "generated-by-stage-3a7f49c"
_HEADER = b'{"format":"etkit-et-json","version":1,"metadata":{},"nodes":[\n'


def _both(monkeypatch: pytest.MonkeyPatch, twin: Path, tmp: Path) -> tuple[Any, Any]:
    """What from_json makes of ``twin`` with the C path and with the Python path: (node count, bytes) or the error."""
    out = []
    for kernel in (KERNEL, None):
        monkeypatch.setattr(protojson, "JSONIN", kernel)
        target = tmp / ("c.et" if kernel else "py.et")
        try:
            out.append((from_json(twin, target), target.read_bytes()))
        except TraceFormatError as exc:
            out.append(("error", str(exc).replace(str(target), "OUT"), target.exists()))
    monkeypatch.setattr(protojson, "JSONIN", KERNEL)
    return out[0], out[1]


class _Python:
    """The Python path's record of one node line (it raises where from_json reports the line), its tables kept
    from line to line as from_json keeps them."""

    def __init__(self) -> None:
        self.encoder = NodeEncoder()
        self.lines = LineEncoder(self.encoder)

    def record(self, text: bytes) -> bytes:
        record = self.lines.encode(text)
        if record is None:
            record = jsontwin._payload(orjson.loads(text), Node, self.encoder.encode)
        return record


def _unframed(framed: bytes) -> list[bytes]:
    """The records of framed bytes (the framing checked: each after its length, nothing after the last)."""
    frames = frame_table(framed, "<test>", allow_empty=True)
    return [framed[o:o + n] for o, n in zip(frames.offset.tolist(), frames.length.tolist())]


def _lines(buf: bytes, start: int = 0, end: int | None = None) -> tuple[bytes, int, int]:
    """The C path on ``buf[start:end]``: its records, how many lines it took and where it stopped (into a fresh
    bytearray, and into one that holds more than it needs: the same)."""
    out, used = bytearray(), bytearray(b"\xee" * 100_000)
    size, count, stop = KERNEL.lines(bytearray(buf), start, len(buf) if end is None else end, out)
    assert KERNEL.lines(buf, start, len(buf) if end is None else end, used) == (size, count, stop)
    assert used[:size] == out[:size] and size <= len(out)
    return bytes(out[:size]), count, stop


def _taken(buf: bytes) -> list[tuple[bytes, bytes]]:
    """The lines of ``buf`` the C path takes from its start, each with its record (their framing checked)."""
    records, count, stop = _lines(buf)
    unframed = _unframed(records)
    lines = buf.split(b"\n")
    assert len(unframed) == count and stop == sum(len(line) + 1 for line in lines[:count])
    return [(line[:-1] if line.endswith(b",") else line, record) for line, record in zip(lines, unframed)]


def _check_taken(buf: bytes, python: _Python | None = None) -> int:
    """Every line the C path takes: the Python path's record, and protobuf's. Returns how many it took."""
    taken = _taken(buf)
    python = python or _Python()
    for text, record in taken:
        assert record and record == python.record(text), text
        assert record == dict_to_node(orjson.loads(text)).SerializeToString(), text
    return len(taken)


def _check_every_line(body: bytes) -> int:
    """:func:`_check_taken` from each line the C path declines on (as from_json goes on after it): how many it took."""
    taken = pos = 0
    while pos < len(body):
        records, count, stop = _lines(body, pos)
        taken += _check_taken(body[pos:])
        pos = body.index(b"\n", stop) + 1 if stop < len(body) else stop
    return taken


def _twin(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(_HEADER + b",\n".join(lines) + b"\n]}\n")
    return path


def test_the_kernel_is_built() -> None:
    assert KERNEL is not None


def test_its_keys_are_the_schemas() -> None:
    keys = KERNEL.keys()
    node = {"id": tags.NODE_ID, "name": tags.NODE_NAME, "type": tags.NODE_TYPE, "ctrlDeps": tags.NODE_CTRL,
            "dataDeps": tags.NODE_DATA, "startTimeMicros": tags.NODE_START, "durationMicros": tags.NODE_DURATION,
            "inputs": tags.NODE_INPUTS, "outputs": tags.NODE_OUTPUTS, "attr": tags.NODE_ATTR}
    assert keys["node"] == node and list(keys["node"]) == list(node)  # (in field order)
    assert keys["io"] == {"values": tags.IO_VALUES, "shapes": tags.IO_SHAPES, "types": tags.IO_TYPES}
    assert keys["attr_name"] == tags.ATTR_NAME
    fields = AttributeProto.DESCRIPTOR.fields_by_name
    members = {KIND_JSON[kind]: (fields[kind].number, kind.endswith("_list")) for kind in KIND_JSON
               if kind.split("_")[0] in ("int32", "int64", "uint32", "uint64", "bool", "string")}
    assert keys["members"] == members
    assert keys["types"] == {t.name: t.value for t in NodeType}
    assert [f.number for f in IOInfo.DESCRIPTOR.fields] == [1, 2, 3]


@pytest.mark.shared_data
def test_every_upstream_vectors_twin_gives_the_same_bytes(upstream: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz")))
    assert len(files) >= 274
    taken = total = 0
    for path in files:
        to_json(path, tmp_path / "t.json")
        c, py = _both(monkeypatch, tmp_path / "t.json", tmp_path)
        assert c == py, path
        assert c[1] == gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        text = (tmp_path / "t.json").read_bytes()
        body = text[text.index(b"\n") + 1:text.rindex(b"]}")]
        taken += _check_every_line(body)
        total += c[0]
    assert taken > 0.95 * total, (taken, total)


@pytest.mark.shared_data
def test_real_shaped_lines_are_taken(upstream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Chakra-converted ResNet trace (the source of the 1M-node real-shaped trace) repeated: every line
    without a backslash is taken, and the file is the same through both paths, read in small pieces too."""
    to_json(upstream / _RESNET, tmp_path / "r.json")
    text = (tmp_path / "r.json").read_bytes()
    head, body = text[:text.index(b"\n") + 1], text[text.index(b"\n") + 1:text.rindex(b"]}")]
    lines = body.split(b"\n")[:-1]
    for line in lines:
        assert bool(_taken(line + b"\n")) == (b"\\" not in line), line
    assert _check_taken(body) == next(i for i, line in enumerate(lines) if b"\\" in line)
    (tmp_path / "big.json").write_bytes(head + body * 3 + b"]}\n")
    c, py = _both(monkeypatch, tmp_path / "big.json", tmp_path)
    assert c == py and c[0] == 3 * len(lines)
    for read in (333, 4096, 25_000):  # lines cut across reads: one line over many, many in one
        monkeypatch.setattr(jsontwin, "_RUN_READ", read)
        assert from_json(tmp_path / "big.json", tmp_path / "small.et") == c[0]
        assert (tmp_path / "small.et").read_bytes() == c[1]


@pytest.mark.shared_data
def test_stage_string_lists_are_taken(upstream: Path, tmp_path: Path) -> None:
    path = next(p for p in sorted((upstream / _STAGE).rglob("*.et")) if b"stringList" in _json_of(p, tmp_path))
    body = _json_of(path, tmp_path).split(b"\n")[1:-2]
    lists = [line for line in body if b"stringList" in line]
    assert lists and all(_check_taken(line.rstrip(b",") + b"\n") == 1 for line in lists)


def _json_of(et: Path, tmp: Path) -> bytes:
    to_json(et, tmp / "s.json")
    return (tmp / "s.json").read_bytes()


def test_the_oddities_give_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every oddity of the to-json tests (every attribute kind, odd strings, edge integers, non-canonical records)."""
    with TraceWriter(tmp_path / "odd.et") as writer:
        for record in _records():
            writer.write_record(record)
    to_json(tmp_path / "odd.et", tmp_path / "odd.json")
    c, py = _both(monkeypatch, tmp_path / "odd.json", tmp_path)
    assert c == py and c[1] == (tmp_path / "odd.et").read_bytes()
    lines = (tmp_path / "odd.json").read_bytes().split(b"\n")[1:-2]
    assert sum(_check_taken(line.rstrip(b",") + b"\n") for line in lines) > len(lines) // 3


#: One line of every member and value kind the C path takes, and its edges.
_FULL = (b'{"id":"18446744073709551615","name":"n","type":"COMM_COLL_NODE","ctrlDeps":["0","18446744073709551615"],'
         b'"dataDeps":["1"],"startTimeMicros":"1","durationMicros":"300","inputs":{},'
         b'"outputs":{"values":"","shapes":"s","types":"t"},"attr":[{"name":"a","int32Val":-2147483648},{"name":"b","int32Val":"2147483647"},'
         b'{"name":"c","int64Val":"-9223372036854775808"},{"name":"d","uint32Val":4294967295},'
         b'{"name":"e","uint64Val":"18446744073709551615"},{"name":"f","boolVal":false},{"name":"g","stringVal":""},'
         b'{"name":"h","int32List":{"values":[-1,0,"7"]}},{"name":"i","int64List":{}},'
         b'{"name":"j","uint32List":{"values":[1]}},{"name":"k","uint64List":{"values":["5","0"]}},'
         b'{"name":"l","boolList":{"values":[true,false]}},{"name":"m","stringList":{"values":["","x y"]}},'
         b'{"name":"o","stringList":{"values":[]}},{"name":"name alone"}]}')


def test_every_kind_it_takes_is_protobufs() -> None:
    assert _check_taken(_FULL + b"\n") == 1
    long_line = _FULL.replace(b'"shapes":"s"', b'"shapes":"' + b"s" * 20_000 + b'"').replace(b'"x y"', b'"' + b"s" * 200 + b'"')
    assert _check_taken(long_line + b"\n" + _FULL + b",\n") == 2  # 3-byte lengths: bodies moved up


@pytest.mark.parametrize("line", [
    b"{}", b'{"id":"0"}', b'{"type":"INVALID_NODE"}', b'{"id":"1","id":"2"}', b'{"name":"a","id":"1"}',
    b'{"id":"01"}', b'{"id":"-1"}', b'{"id":1}', b'{"id":"18446744073709551616"}', b'{"id":"1" }', b' {"id":"1"}',
    b'{"id":"1"}\r', b'{"id":"1"},,', b'{"name":"\\u0041"}', b'{"name":"\xc3\xa9"}', b'{"name":"a\x7f"}',
    b'{"name":"a\tb"}', b'{"type":"COMP"}', b'{"type":4}', b'{"id":"1","_raw":"CAE="}', b'{"id":"1","data_deps":["1"]}',
    b'{"inputs":{"shapes":"a","values":"b"}}', b'{"inputs":{"values":"a","values":"b"}}', b'{"inputs":{"x":"a"}}',
    b'{"id":"1","attr":[{"name":"","int64Val":"1"}]}', b'{"id":"1","attr":[{"int64Val":"1","name":"a"}]}',
    b'{"id":"1","attr":[{"name":""}]}', b'{"id":"1","attr":[{"name":"a","doubleVal":1}]}',
    b'{"id":"1","attr":[{"name":"a","int32Val":2147483648}]}', b'{"id":"1","attr":[{"name":"a","uint64Val":"-1"}]}',
    b'{"id":"1","attr":[{"name":"a","int64Val":"-0"}]}', b'{"id":"1","attr":[{"name":"a","int64Val":1.0}]}',
    b'{"id":"1","attr":[{"name":"a","int64Val":1e2}]}', b'{"id":"1","attr":[{"name":"a","boolVal":"true"}]}',
    b'{"id":"1","attr":[{"name":"a","int64Val":"1","docString":"d"}]}', b'{"id":"1","attr":[{"name":"a","int64Val":"1"},]}',
    b'{"id":"1","attr":[{"name":"a","int64List":{"values":[],"x":1}}]}', b'{"id":"1","attr":[{"name":"a","int64List":[]}]}',
    b'{"id":"1","attr":[{"name":"a","boolList":{"values":[1]}}]}', b'{"id":"1","ctrlDeps":[1]}',
    b'{"id":"1","ctrlDeps":["1",]}', b'{"id":"1","ctrlDeps":null}', b"]}", b"", b"{",
])
def test_lines_outside_its_subset_are_declined(line: bytes) -> None:
    assert _lines(line + b"\n" + _FULL + b"\n") == (b"", 0, 0)


def test_lines_not_ended_by_a_newline_before_the_end_are_not_taken() -> None:
    buf = b'{"id":"1"}\n{"id":"2"}'
    assert _lines(buf)[1:] == (1, 11)
    assert _lines(buf, 11)[1:] == (0, 11)
    assert _lines(buf, 0, 5)[1:] == (0, 0)


def test_bad_arguments_are_refused() -> None:
    buf = bytearray(b'{"id":"1"}\n{"id":"2"}\n')
    for start, end in ((5, len(buf) + 1), (6, 5), (-1, 3)):
        with pytest.raises(ValueError, match="not within"):
            KERNEL.lines(buf, start, end, bytearray())
    with pytest.raises(ValueError, match="out holds"):
        KERNEL.lines(buf, 0, len(buf), buf)
    with memoryview(buf) as view:
        with pytest.raises(ValueError, match="out holds"):
            KERNEL.lines(view[11:], 0, 11, buf)
    with pytest.raises(TypeError):
        KERNEL.lines(buf, 0, len(buf), memoryview(bytearray(100)))
    out = bytearray()
    with memoryview(out):  # (an exported bytearray cannot grow)
        with pytest.raises(BufferError):
            KERNEL.lines(buf, 0, len(buf), out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_node_records(), min_size=1, max_size=10))
def test_random_nodes_and_their_odd_lines(tmp_path_factory: pytest.TempPathFactory, records: list[bytes]) -> None:
    """Random nodes (every kind, odd strings, unknown fields) as to-json writes them, and odd versions of each
    line (other key orders, numbers, escapes, members): the C path's record for every line it takes is the Python
    path's, and whole twins of them give the same bytes or the same error through both paths."""
    tmp = tmp_path_factory.mktemp("jsonin")
    texts = [node_text(r, Fragments()) for r in records if _parses(r)]
    for text in texts:
        for variant in _line_variants(text):
            if b"\n" not in variant:
                _check_taken(variant + b"\n")
    with pytest.MonkeyPatch.context() as monkeypatch:
        for lines in (texts, [v for t in texts for v in _line_variants(t)[:3]]):
            if lines:
                c, py = _both(monkeypatch, _twin(tmp / "h.json", lines), tmp)
                assert c == py


def _mutations(line: bytes) -> list[bytes]:
    return [line[:i] + bytes((v,)) + line[i + 1:] for i in range(len(line)) for v in range(256) if v != line[i]]


@pytest.mark.slow
@pytest.mark.shared_data
def test_every_single_byte_mutation_of_real_lines(upstream: Path, tmp_path: Path) -> None:
    """Each byte of a few real lines replaced by each other byte: every mutant the C path takes is the Python
    path's record (so every mutant it declines goes the Python way, as all did before)."""
    to_json(upstream / _RESNET, tmp_path / "r.json")
    lines = [t.rstrip(b",") for t in (tmp_path / "r.json").read_bytes().split(b"\n")[1:-2]]
    picks = [min((t for t in lines if b"\\" not in t), key=len), min((t for t in lines if b"ctrlDeps" in t), key=len),
             _FULL]
    taken = tried = 0
    python = _Python()
    for line in picks:
        assert _check_taken(line + b"\n") == 1
        for mutant in _mutations(line):
            taken += _check_taken(mutant + b"\n", python)
            tried += 1
    assert 0.001 * tried < taken < 0.5 * tried, (taken, tried)


@pytest.mark.slow
@pytest.mark.shared_data
def test_mutated_twins_give_the_same_bytes_or_error(upstream: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole twins, a real line mutated between real lines: the same .et bytes, or the same error, both ways."""
    to_json(upstream / _RESNET, tmp_path / "r.json")
    lines = [t.rstrip(b",") for t in (tmp_path / "r.json").read_bytes().split(b"\n")[1:-2]]
    line = min((t for t in lines if b"ctrlDeps" in t), key=len)
    outcomes = set()
    for i in range(len(line)):
        for v in b'"\\,}]0-\n':
            if v != line[i]:
                mutant = line[:i] + bytes((v,)) + line[i + 1:]
                c, py = _both(monkeypatch, _twin(tmp_path / "m.json", [lines[1], mutant, lines[2]]), tmp_path)
                assert c == py, mutant
                outcomes.add(c[0] == "error")
    assert outcomes == {True, False}


def test_the_twins_layout_around_the_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blank lines, CRLF, a last line without its newline, text after the end, an empty node, a truncated
    document, gzip: the same outcome both ways."""
    a, b = b'{"id":"1","name":"a"}', b'{"id":"2","dataDeps":["1"]}'
    cases = [
        _HEADER + a + b",\n\n  " + b + b"\n]}\n", _HEADER + a + b",\r\n" + b + b"\r\n]}\r\n", _HEADER + a + b",\n" + b + b"\n]}",
        _HEADER + a + b"\n]}\n" + b + b"\n", _HEADER + a + b"\n]}\n\n\n", _HEADER + a + b",\n{}\n]}\n",
        _HEADER + a + b",\n" + b + b"\n", _HEADER + a + b",\n" + b, _HEADER + a + b",\n{\"id\":\"3\",\n]}\n",
        _HEADER + b"]}\n", _HEADER + a + b"\n]}\n]}\n", _HEADER[:-1] + a + b"\n]}\n",
    ]
    for k, text in enumerate(cases):
        for data, read in ((text, 1 << 20), (gzip.compress(text), 1 << 20), (text, 1), (text, 7)):
            monkeypatch.setattr(jsontwin, "_RUN_READ", read)
            (tmp_path / "l.json").write_bytes(data)
            c, py = _both(monkeypatch, tmp_path / "l.json", tmp_path)
            assert c == py, (k, data, read)
    assert _both(monkeypatch, _twin(tmp_path / "l.json", [a, b]), tmp_path)[0][0] == 2


def test_a_corrupt_gzip_twin_fails_after_the_same_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read of the C path's reader is one read of the gzip stream under it, as line by line reading does: a
    bad line before the damage is reported, and the damage itself, alike."""
    lines = [b'{"id":"%d","name":"n%d"}' % (i + 1, i) for i in range(150_000)]
    text = _HEADER + b",\n".join(lines) + b"\n]}\n"
    for bad_line in (None, 40_000):
        body = text if bad_line is None else text.replace(lines[bad_line], b'{"id":"x"}')
        packed = bytearray(gzip.compress(body, compresslevel=1))
        packed[len(packed) * 2 // 3:len(packed) * 2 // 3 + 64] = b"\x00" * 64
        (tmp_path / "z.json").write_bytes(bytes(packed))
        outcomes = []
        for kernel in (KERNEL, None):
            monkeypatch.setattr(protojson, "JSONIN", kernel)
            try:
                outcomes.append(from_json(tmp_path / "z.json", tmp_path / "z.et"))
            except Exception as exc:  # noqa: BLE001 - the two must fail alike
                outcomes.append((type(exc), str(exc)))
        assert outcomes[0] == outcomes[1] and isinstance(outcomes[0], tuple)


def test_framed_runs_are_written_as_records(tmp_path: Path) -> None:
    """TraceWriter.write_framed: the records of a run (short ones batched, long ones written at once; neither kept),
    in file order with those written one by one."""
    records = [Node(id=i + 1, name="n" * (i * 10_000)).SerializeToString() for i in range(9)]
    framed = [bytearray(b"".join(encode_varint(len(r)) + r for r in part)) for part in (records[1:4], records[5:8])]
    with TraceWriter(tmp_path / "a.et") as writer:
        writer.write(Node(id=1))
        writer.write_framed(memoryview(framed[0]), 3)
        framed[0][:] = b"x" * 10  # (a view it was given is not kept)
        writer.write_record(records[4])
        writer.write_framed(framed[1], 3)
        writer.write_framed(b"", 0)
        writer.write(Node(id=9, name="n" * 80_000))
        assert writer.nodes_written == 9
    with TraceWriter(tmp_path / "b.et") as writer:
        writer.write_records(records)
    assert (tmp_path / "a.et").read_bytes() == (tmp_path / "b.et").read_bytes()
