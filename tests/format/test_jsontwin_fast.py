"""The JSON writer that reads records off their bytes (``etkit.format.jsonfast``) writes exactly what the
per-record path writes.

Three references: the per-record path of ``to_json`` (``node_json`` for every record), protobuf's own
proto3 JSON mapping (``json_format.MessageToDict``), and the original bytes (``from_json``).
"""

from __future__ import annotations

import base64
import gzip
import io
import math
from pathlib import Path

import numpy as np
import orjson
import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etkit.errors import TraceFormatError
from etkit.fileio import open_maybe_gzip
from etkit.format import jsonfast, jsontwin
from etkit.format.attrs import make_attr
from etkit.format.jsonfast import TwinWriter, iter_blocks
from etkit.format.jsontwin import from_json, to_json
from etkit.format.schema import ATTR_KINDS, LIST_KINDS, AttributeProto, GlobalMetadata, Node, NodeType
from etkit.format.stream import TraceWriter, encode_varint

U64 = 2**64 - 1


@pytest.fixture(autouse=True)
def _python_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are of the Python writer: its C twin (``jsonfast.JSONOUT``) is compared with it in
    test_jsonout_kernel.py."""
    monkeypatch.setattr(jsonfast, "JSONOUT", None)


def _per_record(et: Path, out: Path) -> bytes:
    jsontwin._write_checked(et, out)
    return out.read_bytes()


def _cut_records(stream: io.BufferedIOBase) -> list[bytes]:
    """The node records of an .et stream as iter_blocks cuts them (the GlobalMetadata left out)."""
    records = []
    for buf, bounds in iter_blocks(stream):
        records += [buf[bounds[i]:bounds[i + 1]] for i in range(0, len(bounds), 2)]
    return records[1:]


def _check(et: Path, tmp: Path) -> dict:
    """The chunked output equals the per-record output, is one JSON document, matches protobuf's
    JSON mapping node by node, and converts back to the same bytes. Returns the document."""
    count = to_json(et, tmp / "fast.json")
    fast = (tmp / "fast.json").read_bytes()
    assert fast == _per_record(et, tmp / "slow.json")
    document = orjson.loads(fast)
    assert len(document["nodes"]) == count
    with open_maybe_gzip(et) as stream:
        plain = stream.read()
    records = _cut_records(io.BytesIO(plain))
    for item, record in zip(document["nodes"], records, strict=True):
        node = Node.FromString(record)
        node.DiscardUnknownFields()
        item = dict(item)
        if "_raw" in item:
            assert base64.b64decode(item.pop("_raw")) == record  # non-canonical, or a NaN with a sign or payload
        else:
            assert node.SerializeToString() == record
        assert _float32_as_values(item) == _float32_as_values(json_format.MessageToDict(node))
    from_json(tmp / "fast.json", tmp / "back.et")
    assert (tmp / "back.et").read_bytes() == plain
    return document


def _float32_as_values(item: dict) -> dict:
    """``item`` with float32 attribute values as numbers: protobuf writes 1.4013e-45 where etkit
    writes 1e-45, the same float32 (the per-record path, which writes floats, is compared exactly)."""
    def value(v: object) -> object:
        return float(np.float32(v)) if isinstance(v, (int, float)) else v

    for attr in item.get("attr", []):
        if "floatVal" in attr:
            attr["floatVal"] = value(attr["floatVal"])
        if "floatList" in attr:
            attr["floatList"]["values"] = [value(v) for v in attr["floatList"].get("values", [])]
    return item


def _write(path: Path, records: list[bytes], metadata: GlobalMetadata | None = None) -> Path:
    with TraceWriter(path, metadata or GlobalMetadata(version="1.0.0")) as writer:
        for record in records:
            writer.write_record(record)
    return path


def _fast_share(path: Path) -> float:
    """Share of the records the byte reader converts itself (not through the per-record callback)."""
    slow = total = 0

    def count_slow(record: bytes, i: int) -> bytes:
        nonlocal slow
        slow += 1
        return b"{}"

    writer = TwinWriter()
    with open_maybe_gzip(path) as stream:
        for k, (buf, bounds) in enumerate(iter_blocks(stream)):
            writer.texts(buf, bounds, 1 if k == 0 else 0, count_slow)
            total += len(bounds) // 2 - (1 if k == 0 else 0)
    return 1 - slow / max(total, 1)


#: Folders of ../shared/data/upstream whose ETs were written by other tools: Chakra's own converters and
#: generator, STAGE, ASTRA-sim's examples (their record shapes are what the fast path must cover).
_KNOWN_PRODUCERS = {"generated-by-upstream-chakra-21585d8", "generated-by-stage-3a7f49c", "astra-sim-astra-sim"}


@pytest.mark.shared_data
def test_every_upstream_vector_read_off_its_bytes_equals_per_record(upstream: Path, tmp_path: Path) -> None:
    files = sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz")))
    # every vector there is (the folder grows): at least the 274 of today, from each known producer
    assert len(files) >= 274
    assert {folder for folder in _KNOWN_PRODUCERS if any(folder in p.parts for p in files)} == _KNOWN_PRODUCERS
    fast: dict[str, float] = dict.fromkeys(_KNOWN_PRODUCERS, 0.0)
    total = dict.fromkeys(_KNOWN_PRODUCERS, 0)
    for path in files:
        assert to_json(path, tmp_path / "a.json") >= 0
        assert (tmp_path / "a.json").read_bytes() == _per_record(path, tmp_path / "b.json"), path
        nodes = len(orjson.loads((tmp_path / "a.json").read_bytes())["nodes"])
        producer = next((folder for folder in _KNOWN_PRODUCERS if folder in path.parts), "other")
        fast[producer] = fast.get(producer, 0.0) + _fast_share(path) * nodes
        total[producer] = total.get(producer, 0) + nodes
    # the comparison exercises the byte reader: it covers the records of every producer (STAGE's
    # string lists and name-only attributes included)
    share = {producer: fast[producer] / max(total[producer], 1) for producer in total}
    assert min(share.values()) > 0.99, share


def _attr(name: str, kind: str, value: object) -> AttributeProto:
    return make_attr(name, value, kind=kind)


_INT_EDGES = {
    "int32_val": [0, 1, -1, 2**31 - 1, -(2**31)], "int64_val": [0, -1, 2**63 - 1, -(2**63)],
    "uint32_val": [0, 2**32 - 1], "uint64_val": [0, 2**63, U64], "sint32_val": [0, -1, 2**31 - 1, -(2**31)],
    "sint64_val": [0, -1, 2**63 - 1, -(2**63)], "fixed32_val": [0, 2**32 - 1], "fixed64_val": [0, U64],
    "sfixed32_val": [0, -1, -(2**31)], "sfixed64_val": [0, -1, -(2**63)], "bool_val": [False, True],
}
_ODD_STRINGS = ["", "plain", "é中文😀", 'quote"inside', "back\\slash", "new\nline", "ctl\x01\x1f", "del\x7f",
                "percent %d %s %%", "\u2028sep", "a" * 40]


def _odd_nodes() -> list[Node]:
    nodes = []
    for i, text in enumerate(_ODD_STRINGS):
        nodes.append(Node(id=i + 1, name=text, type=NodeType.COMP_NODE, start_time_micros=i, duration_micros=U64))
    for i, (kind, values) in enumerate(_INT_EDGES.items()):
        n = Node(id=100 + i, name="ints", type=NodeType.COMM_COLL_NODE)
        n.attr.extend(_attr(f"{kind}_{j}", kind, v) for j, v in enumerate(values))
        nodes.append(n)
    n = Node(id=U64, name="strings", type=NodeType.COMP_NODE)
    n.attr.extend(_attr(f"s{j}", "string_val", text) for j, text in enumerate(_ODD_STRINGS))
    n.attr.extend([_attr("a_very_long_attribute_name_beyond_16", "int64_val", 5),
                   _attr("a_very_long_attribute_name_beyond_17", "int64_val", 6),
                   _attr("same_first_sixteen_bytes_1", "int64_val", 7), _attr("é名", "bool_val", True)])
    nodes.append(n)
    for kind in ATTR_KINDS:  # every kind, including the ones that take the per-record path
        n = Node(id=200 + len(nodes), name=kind)
        value: object = {"double": math.pi, "float": 0.1, "bool": True, "string": "s", "bytes": b"\x00\xff"}.get(
            kind.split("_")[0], 7)
        if kind in LIST_KINDS:
            n.attr.append(_attr(kind, kind, [value, value]))
            n.attr.append(_attr(kind + "_empty", kind, []))
        else:
            n.attr.append(_attr(kind, kind, value))
        nodes.append(n)
    nodes.append(Node(id=300, attr=[AttributeProto(name="no value")]))
    nodes.append(Node(id=301, attr=[AttributeProto(int64_val=3)]))  # no name
    nodes.append(Node(id=302, attr=[AttributeProto(name="doc", doc_string="d", int64_val=3)]))
    nodes.append(Node(id=303, attr=[_attr("d", "double_val", float("nan")), _attr("i", "float_val", -math.inf)]))
    io = Node(id=304, name="io", type=NodeType.COMP_NODE)
    io.inputs.SetInParent()  # set but empty
    io.outputs.shapes = "[[1]]"
    nodes.append(io)
    for j, text in enumerate(_ODD_STRINGS[1:]):
        n = Node(id=400 + j)
        n.inputs.values, n.inputs.types = text, "t"
        n.outputs.values, n.outputs.shapes, n.outputs.types = "v", text, text
        nodes.append(n)
    for count in (1, 2, 4, 5, 9):
        n = Node(id=500 + count, type=NodeType.COMP_NODE)
        n.data_deps.extend(range(1, count + 1))
        n.ctrl_deps.extend([U64 - k for k in range(count)] if count != 4 else [0, 1, 0, 2**35])
        nodes.append(n)
    many = Node(id=700, name="many attributes")  # more than the chunked path keeps in its shape table
    many.attr.extend(_attr(f"a{k}", "int64_val", k) for k in range(300))
    long_io = [Node(id=701 + k, inputs={"values": "[" + "1, " * 3000 + "2]"}) for k in range(2)]  # not cached
    nodes += [many, *long_io]
    nodes += [Node(type=NodeType.COMP_NODE), Node(name="only a name"), Node(id=600, type=99), Node(id=601, type=-1),
              Node(attr=[make_attr("x", 1)]), Node(start_time_micros=1), Node(id=602, data_deps=[0])]
    return nodes


def _non_canonical() -> list[bytes]:
    base = Node(id=7, name="x", type=NodeType.COMP_NODE, data_deps=[1, 2]).SerializeToString()
    attr = make_attr("tid", 3).SerializeToString()
    return [
        base[2:] + base[:2],  # id last
        base + bytes.fromhex("0809"),  # id twice (the last wins)
        base + bytes.fromhex("5a03080101"),  # unknown field 11
        base + bytes.fromhex("6501020304"),  # unknown fixed-width field 12
        base + b"\x52" + encode_varint(len(attr) + 3) + attr + bytes.fromhex("c00201"),  # unknown field in an attribute
        base + b"\x42\x05\x0a\x01a\x20\x01",  # unknown field in an IOInfo
        bytes.fromhex("0881808000") + base[2:],  # over-long varint id
        bytes.fromhex("0800") + base[2:],  # explicit zero id
        bytes.fromhex("2801 2802 0807"),  # unpacked data deps
        bytes.fromhex("2a00 0807"),  # empty packed list
        b"\x52" + encode_varint(len(attr)) + attr + b"\x08\x07",  # attribute before the id
        bytes.fromhex("0807 d80100"),  # bool_val 0 directly in the node: unknown field 27
        bytes.fromhex("0807 5206 0a01 61 d801 02"),  # bool attribute encoded as 2 (reads as true)
    ]


def _records() -> list[bytes]:
    records = [n.SerializeToString() for n in _odd_nodes()] + _non_canonical()
    return [r for r in records if r]


def test_every_oddity_matches_the_per_record_path_and_protobuf(tmp_path: Path) -> None:
    meta = GlobalMetadata(version="v", attr=[make_attr("m", -5, kind="sint64_val")])
    document = _check(_write(tmp_path / "odd.et", _records(), meta), tmp_path)
    raw = sum("_raw" in item for item in document["nodes"])
    assert raw == len(_non_canonical())  # only the non-canonical ones keep their bytes
    assert _fast_share(tmp_path / "odd.et") > 0.5  # most oddities are handled by the byte reader itself


def test_chunk_and_block_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records() * 3
    big = Node(id=9, name="big", inputs={"values": "v" * 20_000}).SerializeToString()  # 3-byte length prefix
    records[5:5] = [big, big]
    path = _write(tmp_path / "b.et", records)
    expected = _check(path, tmp_path)
    for block in (1, 7, 64, 20_001, 1 << 22):
        monkeypatch.setattr(jsonfast, "_BLOCK", block)
        assert _check(path, tmp_path) == expected


def test_gzip_input_and_output(tmp_path: Path) -> None:
    path = _write(tmp_path / "g.et.gz", _records())
    assert gzip.decompress(path.read_bytes())  # really gzip
    _check(path, tmp_path)
    to_json(path, tmp_path / "g.json.gz")
    assert gzip.decompress((tmp_path / "g.json.gz").read_bytes()) == (tmp_path / "fast.json").read_bytes()


@pytest.mark.parametrize("damage", ["truncated", "empty node", "bad utf-8", "corrupt gzip", "long varint"])
def test_faults_give_the_per_record_errors(tmp_path: Path, damage: str) -> None:
    path = _write(tmp_path / "f.et", _records())
    data = path.read_bytes()
    if damage == "truncated":
        data = data[:-3]
    elif damage == "empty node":
        data += b"\x00" + data[-40:]
    elif damage == "bad utf-8":
        data = data.replace("é中文😀".encode(), b"\xff" * len("é中文😀".encode()), 1)
    elif damage == "corrupt gzip":
        data = gzip.compress(data)[:-30] + b"\x00" * 30
    else:
        data += b"\xff" * 6
    path.write_bytes(data)
    with pytest.raises(TraceFormatError) as err:
        to_json(path, tmp_path / "f.json")
    assert str(path) in str(err.value) and "record" in str(err.value)
    assert not (tmp_path / "f.json").exists()


_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
_KIND_VALUES = {
    "double": st.floats(allow_nan=True), "float": st.floats(width=32), "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1), "uint32": st.integers(0, 2**32 - 1), "uint64": st.integers(0, U64),
    "sint32": st.integers(-(2**31), 2**31 - 1), "sint64": st.integers(-(2**63), 2**63 - 1),
    "fixed32": st.integers(0, 2**32 - 1), "fixed64": st.integers(0, U64), "sfixed32": st.integers(-(2**31), 2**31 - 1),
    "sfixed64": st.integers(-(2**63), 2**63 - 1), "bool": st.booleans(), "string": _text, "bytes": st.binary(max_size=6),
}


@st.composite
def _attributes(draw: st.DrawFn) -> AttributeProto:
    kind = draw(st.sampled_from(ATTR_KINDS[4:28] * 3 + ATTR_KINDS))  # mostly the integer, bool and string kinds
    values = _KIND_VALUES[kind.rsplit("_", 1)[0]]
    value = draw(st.lists(values, max_size=3)) if kind in LIST_KINDS else draw(values)
    attr = _attr(draw(st.sampled_from(["tid", "rf_id", "pg_name", "x"]) | _text), kind, value)
    if draw(st.integers(0, 20)) == 0:
        attr.doc_string = draw(_text)
    return attr


@st.composite
def _node_records(draw: st.DrawFn) -> bytes:
    n = Node(id=draw(st.integers(0, U64)), name=draw(st.sampled_from(["aten::mm", ""]) | _text),
             type=draw(st.sampled_from(list(range(8)) + [0, 4, 4, 7, 12])),
             start_time_micros=draw(st.integers(0, U64)), duration_micros=draw(st.integers(0, 2**40)))
    n.ctrl_deps.extend(draw(st.lists(st.integers(0, U64), max_size=6)))
    n.data_deps.extend(draw(st.lists(st.integers(0, 2**20), max_size=6)))
    for member in ("inputs", "outputs"):
        if draw(st.booleans()):
            getattr(n, member).SetInParent()
            for key in ("values", "shapes", "types"):
                setattr(getattr(n, member), key, draw(st.sampled_from(["[[1, 2]]", ""]) | _text))
    n.attr.extend(draw(st.lists(_attributes(), max_size=5)))
    record = n.SerializeToString()
    if draw(st.integers(0, 10)) == 0:  # an unknown field, or the fields out of order
        record = draw(st.sampled_from([record + bytes.fromhex("7801"), record[len(record) // 2:] + record[:len(record) // 2]]))
    return record or b"\x08\x01"


def test_nan_sign_and_payload_survive(tmp_path: Path) -> None:
    import struct

    negative_nan = struct.unpack("<d", bytes.fromhex("000000000000f8ff"))[0]
    payload_nan = struct.unpack("<f", bytes.fromhex("0100c07f"))[0]
    n = Node(id=1, attr=[_attr("d", "double_val", negative_nan), _attr("f", "float_list", [payload_nan, 1.5])])
    meta = GlobalMetadata(attr=[_attr("d", "double_val", negative_nan)])
    document = _check(_write(tmp_path / "nan.et", [n.SerializeToString(), Node(id=2).SerializeToString()], meta),
                      tmp_path)
    assert ["_raw" in item for item in document["nodes"]] == [True, False] and "_raw" in document["metadata"]


def _parses(record: bytes) -> bool:
    try:
        Node.FromString(record)
    except Exception:  # noqa: BLE001 - the reordering can cut a field in two
        return False
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_node_records(), min_size=1, max_size=12))
def test_random_nodes(tmp_path_factory: pytest.TempPathFactory, records: list[bytes]) -> None:
    tmp = tmp_path_factory.mktemp("fast")
    _check(_write(tmp / "r.et", [r for r in records if _parses(r)] or [b"\x08\x01"]), tmp)


def _encoded_or_error(encode, data: dict):  # type: ignore[no-untyped-def]
    try:
        return encode(data)
    except Exception as exc:  # noqa: BLE001 - the two must fail alike
        return type(exc)


@settings(max_examples=80, deadline=None)
@given(records=st.lists(_node_records(), min_size=1, max_size=8), shuffle=st.randoms(use_true_random=False))
def test_node_encoder_writes_what_protobuf_writes(records: list[bytes], shuffle) -> None:  # type: ignore[no-untyped-def]
    """from-json's direct encoder gives protobuf's bytes (or its error) for every dict, whatever the key order,
    numbers given as JSON numbers or strings, and values out of range or of the wrong type."""
    from etkit.format.protojson import NodeEncoder, dict_to_node, node_to_dict

    encoder = NodeEncoder(limit=4)  # a small table: its clearing is exercised too
    reference = lambda d: dict_to_node(d).SerializeToString()  # noqa: E731
    for record in records:
        if not _parses(record):
            continue
        base = node_to_dict(Node.FromString(record))
        variants = [base, dict(shuffle.sample(list(base.items()), len(base)))]
        if "id" in base:
            variants += [dict(base, id=int(base["id"])), dict(base, id="-1"), dict(base, id=str(U64 + 1)), dict(base, id=True)]
        for attr in base.get("attr", [])[:2]:
            for key in [k for k in attr if k != "name"]:
                for odd in (True, 1, "7", -(2**31) - 1, 2**31, 2**64, "x", None, 1.5):
                    variants.append(dict(base, attr=[dict(attr, **{key: odd})]))
            variants.append(dict(base, attr=[dict(reversed(list(attr.items())))]))
        if "inputs" in base:
            variants += [dict(base, inputs={**base["inputs"], "other": "x"}), dict(base, inputs={"values": 3})]
        variants += [dict(base, type=3), dict(base, type="NOPE"), dict(base, data_deps=["1"]), dict(base, dataDeps=[-1])]
        for data in variants:
            assert _encoded_or_error(encoder.encode, data) == _encoded_or_error(reference, data), data


def _line_or_error(text: bytes, encoder):  # type: ignore[no-untyped-def]
    """What the general path makes of one node line: its record, or the type of its error."""
    try:
        return encoder.encode(orjson.loads(text))
    except Exception as exc:  # noqa: BLE001 - the line reader must decline every line that fails
        return type(exc)


def _line_variants(text: bytes) -> list[bytes]:
    """``text`` and odd versions of it: each a line the general path reads some other way or refuses."""
    swaps = [(b'"id":"', b'"id":"-'), (b'"id":"', b'"id":"0'), (b'"id":"', b'"id":"99999999999999999999'),
             (b'"id":"', rb'"id":"\u0031'), (b'"name":"', rb'"name":"\t'), (b'"name":"', rb'"name":"\ud800'),
             (b'"name":"', '"name":"\u00e9'.encode()), (b'"name":"', b'"name":"\xff'), (b'"name":"', b'"name":"\x01'),
             (b'"type":"', b'"type":"X'), (b'Deps":["', b'Deps":["-'), (b'Deps":["', b'Deps":[1,"'),
             (b'"inputs":{', b'"inputs":{"other":"","x":"",'), (b'"inputs":{"values":"', b'"inputs":{"values":"","values":"'),
             (b'"attr":[', b'"attr":[{"name":"a","stringVal":"},{"},'), (b'"attr":[', b'"attr":[{},'),
             (b'"attr":[', b'"attr":[{"name":"rf_id","int64Val":"--5"},'),
             (b'"attr":[', b'"attr":[{"name":"rf_id","uint64Val":"-5"},{"name":"rf_id","int32Val":2147483648},'),
             (b'"attr":[', rb'"attr":[{"name":"b","boolVal":1},{"name":"s","stringVal":"},{\"name\":\"t\"}"},'),
             (b'"int64Val":"', b'"int64Val":"-'), (b'"int64Val":"', b'"int64Val":"99999999999999999999'),
             (b'"int64Val":"', b'"int64Val":" '), (b'{"name":"', b'{"int64Val":"1","name":"'),
             (b'"stringVal":"', b'"stringVal":"},{'), (b'"boolVal":true', b'"boolVal":"true"'),
             (b'"id":', b'"_raw":"CAE=","id":'), (b'"id":', b'"data_deps":["1"],"id":'), (b'{', b'{"id":"7",'),
             (b',"', b' ,"'), (b'}', b'},'), (b'"', b"'")]
    out = [text, text + b"x", text[:-1], b"{}", b'{"id":"0"}', b"[]", b"null"]
    for old, new in swaps:
        if old in text:
            out += [text.replace(old, new, 1), text.replace(old, new)]
    return out


@settings(max_examples=60, deadline=None)
@given(records=st.lists(_node_records(), min_size=1, max_size=8))
def test_line_encoder_writes_what_the_general_path_writes(records: list[bytes]) -> None:
    """from-json's reader of node lines (msgspec, then the twin's own layout) gives the general path's
    record for every line it takes (it declines every line that the general path refuses)."""
    from etkit.format.protojson import Fragments, LineEncoder, NodeEncoder, node_text

    lines, general = LineEncoder(limit=4), NodeEncoder(limit=4)  # small tables: their clearing is exercised too
    for record in [r for r in records if _parses(r)] * 2:  # twice: the second time from the tables
        for text in _line_variants(node_text(record, Fragments())):
            record_or_none = lines.encode(text)
            assert record_or_none is None or record_or_none == _line_or_error(text, general), text


def test_line_encoder_takes_the_twins_lines_and_declines_odd_ones() -> None:
    """A real-shaped line (every field, integer, string and bool attributes) is taken, from the tables too;
    its odd versions are declined or give the general path's record."""
    from etkit.format.protojson import LineEncoder, NodeEncoder

    line = (b'{"id":"7130","name":"aten::narrow","type":"COMP_NODE","ctrlDeps":["1"],"dataDeps":["7129","12"],'
            b'"startTimeMicros":"5","durationMicros":"6","inputs":{"values":"[[426, 435], 0]","shapes":"[[53120], []]",'
            b'"types":"[\'Tensor(float)\', \'Int\']"},"outputs":{"values":"","shapes":"[]","types":"[]"},'
            b'"attr":[{"name":"rf_id","int64Val":"4997"},{"name":"seq_id","int64Val":"-1"},{"name":"n","uint64Val":"3"},'
            b'{"name":"op_schema","stringVal":"aten::narrow(Tensor(a) self) -> Tensor(a)"},{"name":"is_cpu_op","boolVal":true},'
            b'{"name":"w","int32Val":-4}]}')
    lines, general = LineEncoder(), NodeEncoder()
    for number in range(3):  # new, then from the tables (a new rf_id each time)
        text = line.replace(b'"4997"', b'"%d"' % (4997 + number))
        assert lines.encode(text) == general.encode(orjson.loads(text)) is not None
    outcomes = [lines.encode(text) for text in _line_variants(line)]
    for text, outcome in zip(_line_variants(line), outcomes, strict=True):
        assert outcome is None or outcome == _line_or_error(text, general), text
    assert sum(outcome is None for outcome in outcomes) > 50


def test_line_encoder_reads_real_lines(upstream: Path, tmp_path: Path) -> None:
    """On a real converter's trace the line reader takes all but a few lines (those with a backslash)."""
    from etkit.format.protojson import LineEncoder, NodeEncoder

    et = upstream / "generated-by-upstream-chakra-21585d8/pytorch_converter/resnet_2gpu_et.1.1.0-chakra.0.0.4.host_only.et.gz"
    to_json(et, tmp_path / "r.json")
    lines, general = LineEncoder(), NodeEncoder()
    texts = [t.rstrip(b",") for t in (tmp_path / "r.json").read_bytes().split(b"\n")[1:-2]]
    records = [lines.encode(t) for t in texts]
    assert sum(r is None for r in records) == sum(b"\\" in t for t in texts) < 5
    assert all(r == general.encode(orjson.loads(t)) for r, t in zip(records, texts, strict=True) if r is not None)


def test_json_strings_are_orjsons_and_node_types_the_schemas() -> None:
    """The byte reader escapes strings with json's C escaper: the same bytes as orjson (which the per-record
    path uses) for every code point; its node type names are the schema's."""
    chars = [chr(c) for c in [*range(0x800), *range(0x800, 0x110000, 97)] if not 0xD800 <= c < 0xE000]
    for c in chars:
        assert jsonfast.json_string(c.encode()) == orjson.dumps(c), hex(ord(c))
    assert jsonfast.json_string(b"\xff") is None
    assert jsonfast.NODE_TYPE_JSON == [b'"type":"%s"' % t.name.encode() for t in NodeType]
