"""The JSON twin's node texts in C (``etkit.format._jsonout``) against the Python writer it speeds up.

The kernel renders a run of records and stops at the first it declines; :meth:`TwinWriter.texts` renders that one
the Python way. So the proof has two halves: wherever the kernel renders a record, its text is exactly
``TwinWriter.node``'s (never one where ``node`` gives None); and ``to_json`` with the kernel writes the bytes it
writes without it (``jsonfast.JSONOUT`` patched to None), or fails with the same error, on every upstream vector,
a real-shaped slice of a million-node trace's kind, generated nodes of every attribute kind, and every single-byte
mutation of real records. A share test keeps the kernel honest: on the real converters' records it declines
nothing, so the comparisons exercise it.
"""

from __future__ import annotations

import array
import importlib.util
import io
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etkit.errors import TraceFormatError
from etkit.format import jsonfast
from etkit.format.attrs import make_attr
from etkit.format.jsonfast import TwinWriter, iter_blocks
from etkit.format.jsontwin import to_json
from etkit.format.schema import ATTR_KINDS, LIST_KINDS, AttributeProto, GlobalMetadata, Node
from etkit.format.stream import TraceWriter, encode_varint, open_trace

from ..conftest import REPO
from .test_jsontwin_fast import _KIND_VALUES as _PYTHON_KIND_VALUES
from .test_jsontwin_fast import _node_records, _records

KERNEL = jsonfast.JSONOUT
pytestmark = pytest.mark.skipif(KERNEL is None, reason="etkit.format._jsonout is not built")

U64 = 2**64 - 1
RESNET = "generated-by-upstream-chakra-21585d8/pytorch_converter/resnet_2gpu_et.1.1.0-chakra.0.0.4.host_only.et.gz"


def _outcome(et: Path, out: Path) -> Any:
    """What ``to_json`` makes of ``et``: the bytes written, or the error (its type and message)."""
    out.unlink(missing_ok=True)
    try:
        to_json(et, out)
    except TraceFormatError as exc:
        assert not out.exists()
        return type(exc), str(exc)
    return out.read_bytes()


def _both(monkeypatch: pytest.MonkeyPatch, et: Path, tmp: Path) -> tuple[Any, Any]:
    """``to_json``'s outcome with the kernel, and with the Python writer alone."""
    outcomes = []
    for kernel in (KERNEL, None):
        monkeypatch.setattr(jsonfast, "JSONOUT", kernel)
        outcomes.append(_outcome(et, tmp / "out.json"))
    monkeypatch.setattr(jsonfast, "JSONOUT", KERNEL)
    return outcomes[0], outcomes[1]


def _rendered(records: list[bytes]) -> list[bytes | None]:
    """The kernel's text of each record (None where it declines): from one buffer of them all, the same as from
    a buffer of the record's own bytes and nothing more (an array: the sanitizer sees a read one byte past it)."""
    out = _rendered_joined(records)
    for record, text in zip(records, out, strict=True):
        run, stop = KERNEL.render(array.array("B", record), [0, len(record)], 0)
        assert (run if stop else None) == text
    return out


def _rendered_joined(records: list[bytes]) -> list[bytes | None]:
    buf = b"".join(records)
    bounds, pos = [], 0
    for record in records:
        bounds += [pos, pos + len(record)]
        pos += len(record)
    out: list[bytes | None] = []
    i = 0
    while i < len(records):
        run, stop = KERNEL.render(buf, bounds, i)
        if stop > i:
            texts = run.split(b",\n")  # (no record's text holds a raw newline: JSON escapes it)
            assert len(texts) == stop - i
            out += texts
        if stop < len(records):
            out.append(None)
        i = stop + 1
    return out


def _check_records(records: list[bytes], writer: TwinWriter | None = None) -> int:
    """Every record the kernel renders is rendered as ``TwinWriter.node`` renders it; returns how many it declined."""
    writer = writer or TwinWriter()
    declined = 0
    for record, text in zip(records, _rendered(records), strict=True):
        if text is None:
            declined += 1
            continue
        assert text == writer.node(record, 0, len(record)), record.hex()
    return declined


def _node_records_of(path: Path) -> list[bytes]:
    with open_trace(path) as reader:
        return list(reader.records())


def _write(path: Path, records: list[bytes], metadata: GlobalMetadata | None = None) -> Path:
    with TraceWriter(path, metadata or GlobalMetadata(version="1.0.0")) as writer:
        for record in records:
            writer.write_record(record)
    return path


# -- real data -------------------------------------------------------------------------------------------

@pytest.mark.shared_data
def test_every_upstream_vector_gives_the_python_writers_bytes(upstream: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz")))
    assert len(files) >= 274
    declined = total = 0
    for path in files:
        fast, plain = _both(monkeypatch, path, tmp_path)
        assert isinstance(fast, bytes) and fast == plain, path
        records = _node_records_of(path)
        declined += _check_records(records)
        total += len(records)
    # the kernel reads the records of every producer there (Chakra's converters and generator, STAGE, ASTRA-sim):
    # only the generator's one node of each float, double and bytes kind goes to Python
    assert total > 18_000 and declined <= 4, (declined, total)


def _real_shapes() -> Any:
    spec = importlib.util.spec_from_file_location("real_shapes", REPO / "benchmarks" / "real_shapes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.shared_data
@pytest.mark.slow
def test_a_real_shaped_slice_gives_the_python_writers_bytes(upstream: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """What the 1M-node real-shaped benchmark input is made of (the Chakra-converted ResNet ET repeated with
    fresh ids), 60,000 nodes of it: ids and deps of three varint bytes, every block boundary of a long file."""
    et = tmp_path / "real.et"
    nodes = _real_shapes().repeat_et(upstream / RESNET, et, 60_000)
    fast, plain = _both(monkeypatch, et, tmp_path)
    assert isinstance(fast, bytes) and fast == plain
    assert fast.count(b"\n{") == nodes >= 60_000  # one line per node (a text holds no raw newline)
    assert _check_records(_node_records_of(et)[::7]) == 0


@pytest.mark.shared_data
def test_real_records_every_single_byte_mutation(upstream: Path) -> None:
    """Each byte of a few real records (a converter's operators with IOInfo and integer, string and bool
    attributes, one of them with quotes to escape; STAGE's string lists) set to each of its 256 values: the kernel renders the mutant as
    ``TwinWriter.node`` does, or declines it (to_json's outcome on a sample of them is in the next test)."""
    resnet = _node_records_of(upstream / RESNET)
    stage = next(p for p in sorted((upstream / "generated-by-stage-3a7f49c").rglob("*.et")))
    lists = [r for r in _node_records_of(stage) if b"\xf2\x01" in r]  # a string_list attribute (field 30)
    quoted = next(r for r in resnet if b'"' in r and len(r) < 600)  # a string escaped in JSON (the process group's)
    picks = [resnet[1], quoted, min(lists, key=len)]
    writer = TwinWriter()
    for record in picks:
        mutants = [record[:i] + bytes((v,)) + record[i + 1:] for i in range(len(record)) for v in range(256)
                   if v != record[i]]
        declined = _check_records(mutants, writer)
        assert 0 < declined < len(mutants)  # some stay readable (a digit, a letter changed), some do not
    assert _check_records(picks) == 0


@pytest.mark.shared_data
def test_mutated_files_give_the_python_writers_bytes_or_error(upstream: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of a real record and its neighbours, one byte of the record changed (to a sample of values at
    each position, the framing's length prefix included): the same bytes written, or the same error."""
    resnet = _node_records_of(upstream / RESNET)
    record = resnet[1]
    framed = encode_varint(len(record)) + record
    head = _write(tmp_path / "h.et", resnet[:2]).read_bytes()
    at = len(head) - len(framed)
    assert head[at:] == framed
    tail = b"".join(encode_varint(len(r)) + r for r in resnet[2:5])
    outcomes = set()
    for i in range(len(framed)):
        for v in {0x00, 0x01, 0x7F, 0x80, 0xFF, framed[i] ^ 0x01, framed[i] ^ 0x40} - {framed[i]}:
            et = tmp_path / "m.et"
            et.write_bytes(head[:at + i] + bytes((v,)) + head[at + i + 1:] + tail)
            fast, plain = _both(monkeypatch, et, tmp_path)
            assert fast == plain, (i, v)
            outcomes.add(type(fast) is bytes)
    assert outcomes == {True, False}  # both kinds of outcome were compared


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.binary(max_size=300) | st.sampled_from([b"\xff" * 6, b"\x80", b"\x80\x80\x80\x80\x10", b"\x00",
                                                                  b"\xff\xff\xff\xff\x7f"]), max_size=10),
       framed=st.booleans())
def test_cut_frames_records_as_the_python_loop_does(pieces: list[bytes], framed: bool) -> None:
    """Whole records, the first one cut off (its prefix or its payload), over-long and 5-byte length prefixes."""
    buf = b"".join(encode_varint(len(p)) + p if framed else p for p in pieces)
    for end in sorted({len(buf), *range(0, len(buf), max(1, len(buf) // 13))}):
        assert KERNEL.cut(buf[:end]) == jsonfast._cut(buf[:end]), buf[:end].hex()


def test_block_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of one byte up (records cut anywhere, a record longer than a block, 3-byte length prefixes)."""
    records = _records() * 3
    big = Node(id=9, name="big", inputs={"values": "v" * 20_000}).SerializeToString()
    records[5:5] = [big, big]
    path = _write(tmp_path / "b.et", records)
    outcomes = []
    for block in (1, 7, 64, 20_001, 1 << 22):
        monkeypatch.setattr(jsonfast, "_BLOCK", block)
        outcomes += _both(monkeypatch, path, tmp_path)
    assert type(outcomes[0]) is bytes and outcomes == [outcomes[0]] * len(outcomes)


# -- generated nodes -------------------------------------------------------------------------------------

def test_the_oddities_of_the_python_writers_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """test_jsontwin_fast's records (every kind, edge values, non-canonical encodings)."""
    records = _records()
    fast, plain = _both(monkeypatch, _write(tmp_path / "odd.et", records), tmp_path)
    assert isinstance(fast, bytes) and fast == plain
    assert _check_records(records) < len(records) // 2


_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=10) | st.sampled_from(
    ["", "NaN", '"NaN"', "a\"b\\c", "\x00\x1f\x7f", "\n\r\t\b\f", "é中文😀", "\u2028\ufeff", "\U0010ffff"])
_FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([math.nan, -math.inf, 0.0, -0.0, 1e300])
_KIND_VALUES = {**_PYTHON_KIND_VALUES, "double": _FLOATS, "float": st.floats(width=32, allow_nan=True), "string": _text}


@st.composite
def _attribute(draw: st.DrawFn) -> AttributeProto:
    kind = draw(st.sampled_from(ATTR_KINDS))
    values = _KIND_VALUES[kind.rsplit("_", 1)[0]]
    value = draw(st.lists(values, max_size=4)) if kind in LIST_KINDS else draw(values)
    attr = make_attr(draw(st.sampled_from(["rf_id", "op_schema", "NaN"]) | _text), value, kind=kind)
    if draw(st.integers(0, 6)) == 0:
        attr.doc_string = draw(_text)
    if draw(st.integers(0, 12)) == 0:
        attr.ClearField(kind)  # a name (or nothing) alone
    return attr


@st.composite
def _node(draw: st.DrawFn) -> bytes:
    n = Node(id=draw(st.integers(0, U64) | st.integers(0, 3_000_000)), name=draw(_text),
             type=draw(st.integers(0, 9)), start_time_micros=draw(st.integers(0, U64)),
             duration_micros=draw(st.integers(0, 2**40)))
    n.ctrl_deps.extend(draw(st.lists(st.integers(0, U64), max_size=5)))
    n.data_deps.extend(draw(st.lists(st.integers(0, 3_000_000), max_size=5)))
    for member in ("inputs", "outputs"):
        if draw(st.booleans()):
            getattr(n, member).SetInParent()
            for key in ("values", "shapes", "types"):
                setattr(getattr(n, member), key, draw(_text))
    n.attr.extend(draw(st.lists(_attribute(), max_size=5)))
    record = n.SerializeToString()
    flips = draw(st.lists(st.tuples(st.integers(0, max(len(record) - 1, 0)), st.integers(0, 255)), max_size=2))
    if record and draw(st.integers(0, 3)) == 0:  # a byte or two changed: a non-canonical or broken record
        for at, value in flips:
            record = record[:at] + bytes((value,)) + record[at + 1:]
    return record or b"\x08\x01"


@settings(max_examples=300, deadline=None)
@given(records=st.lists(_node() | _node_records(), min_size=1, max_size=10))
def test_generated_records_are_rendered_as_node_renders_them(records: list[bytes]) -> None:
    _check_records(records)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_node(), min_size=1, max_size=10))
def test_generated_files_give_the_python_writers_bytes_or_error(tmp_path_factory: pytest.TempPathFactory,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                records: list[bytes]) -> None:
    tmp = tmp_path_factory.mktemp("jsonout")
    fast, plain = _both(monkeypatch, _write(tmp / "g.et", records), tmp)
    assert fast == plain


def test_what_it_declines() -> None:
    """Floats, doubles and bytes go to Python (their text is protobuf's and orjson's), as do a NaN's text, an
    empty record, and each kind of non-canonical encoding; the kinds real converters write do not."""
    def attr(name: str, value: Any, kind: str) -> bytes:
        return Node(id=1, attr=[make_attr(name, value, kind=kind)]).SerializeToString()

    taken = [attr("a", 5, "int64_val"), attr("a", -5, "sint32_val"), attr("a", [1, 2], "uint64_list"),
             attr("a", ["x", ""], "string_list"), attr("a", [], "bool_list"), attr("a", 2**32 - 1, "fixed32_val"),
             attr("NaN", 1, "int64_val"), attr("a", "NaN", "string_val"), Node(id=1, name="n").SerializeToString()]
    declined = [attr("a", 1.5, "double_val"), attr("a", 1.5, "float_val"), attr("a", [1.0], "double_list"),
                attr("a", b"x", "bytes_val"), attr("a", ["NaN"], "string_list"), b"",
                Node(id=1, attr=[AttributeProto(name="NaN", doc_string="d", int64_val=1)]).SerializeToString(),
                bytes.fromhex("0880 00"), bytes.fromhex("0800"), bytes.fromhex("0801 0801"), bytes.fromhex("1800"),
                bytes.fromhex("0801 2200"), bytes.fromhex("0801 1201 ff"), bytes.fromhex("0801 5203 0a01 61 ff")]
    assert [t is not None for t in _rendered(taken)] == [True] * len(taken)
    assert _rendered(declined) == [None] * len(declined)
    assert _check_records(taken) == 0


def test_strings_every_code_point_and_every_short_byte_sequence() -> None:
    """Names of every code point (the escapes, and the UTF-8 of 1 to 4 bytes), every pair of bytes, and the
    three- and four-byte sequences around the limits of UTF-8 (over-long, surrogate, past U+10FFFF): the kernel
    writes jsonfast.json_string's text, and declines exactly where that gives None (not UTF-8)."""
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    names = ["".join(points[i:i + 997]).encode() for i in range(0, len(points), 997)]
    names += [bytes((a, b)) for a in range(256) for b in range(256)]
    names += [bytes((a, b, c)) for a in range(0xE0, 0xF8) for b in range(0x70, 0xD0) for c in (0x41, 0x80, 0xBF)]
    names += [bytes((a, b, 0x80, 0x80)) for a in range(0xF0, 0xF8) for b in range(0x70, 0xD0)]
    records = [Node(id=1).SerializeToString() + b"\x12" + encode_varint(len(n)) + n for n in names]
    texts = _rendered(records)
    for name, text in zip(names, texts, strict=True):
        expected = jsonfast.json_string(name)
        assert text == (None if expected is None else b'{"id":"1","name":' + expected + b"}"), name.hex()


def test_render_checks_its_arguments() -> None:
    record = Node(id=3, name="x").SerializeToString()
    assert KERNEL.render(record, [0, len(record)], 0) == (b'{"id":"3","name":"x"}', 1)
    assert KERNEL.render(record * 2, [0, len(record), len(record), 2 * len(record)], 0)[0].count(b",\n") == 1
    assert KERNEL.render(record, [0, len(record)], 1) == (b"", 1)
    with pytest.raises(ValueError, match="outside the buffer"):
        KERNEL.render(record, [0, len(record) + 1], 0)
    with pytest.raises(TypeError):
        KERNEL.render(record, [0, "1"], 0)
    with pytest.raises(TypeError):
        KERNEL.render(record, (0, len(record)), 0)


def test_texts_joins_runs_and_single_records_alike(tmp_path: Path) -> None:
    """TwinWriter.texts: the kernel's runs and the Python writer's records joined as the records' texts."""
    records = _records()
    buf = b"".join(encode_varint(len(r)) + r for r in records)
    (buf_read, bounds), = list(iter_blocks(io.BytesIO(buf)))
    slow_texts = []

    def slow(record: bytes, i: int) -> bytes:
        slow_texts.append(i)
        return b"<%d>" % i

    joined = b",\n".join(TwinWriter().texts(buf_read, bounds, 0, slow))
    expected = []
    writer = TwinWriter()
    for i in range(len(records)):
        text = writer.node(buf_read, bounds[2 * i], bounds[2 * i + 1])
        expected.append(b"<%d>" % i if text is None else text)
    assert joined == b",\n".join(expected) and slow_texts


@pytest.mark.shared_data
def test_to_json_of_a_real_trace_starts_light(upstream: Path, tmp_path: Path) -> None:
    """The kernel reads the whole ResNet ET: neither numpy nor protobuf nor orjson is imported (start-up is
    most of to-json's time on a file of this size)."""
    import os
    import subprocess
    import sys

    import etkit

    code = ("import sys\nfrom etkit.format.jsontwin import to_json\nto_json(sys.argv[1], sys.argv[2])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'google', 'orjson', 'msgspec')))\n"
            "print('etkit.format._jsonout' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(Path(etkit.__file__).parents[1]))
    done = subprocess.run([sys.executable, "-c", code, str(upstream / RESNET), str(tmp_path / "r.json")],
                          capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "True"]
