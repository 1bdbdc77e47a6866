"""The JSON twin: one valid JSON document, lossless both ways, and the reference jsonizer's output read too."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from etkit.errors import TraceFormatError
from etkit.format.attrs import make_attr
from etkit.format.jsontwin import from_json, iter_json_trace, to_json
from etkit.format.schema import GlobalMetadata, Node, NodeType
from etkit.format.stream import TraceWriter, write_trace

from ..builders import node


def _plain(data: bytes) -> bytes:
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


@pytest.mark.shared_data
def test_every_upstream_vector_round_trips_through_json(upstream: Path, tmp_path: Path) -> None:
    files = sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz")))
    for path in files:
        count = to_json(path, tmp_path / "x.json")
        document = orjson.loads((tmp_path / "x.json").read_bytes())  # ONE valid JSON document
        assert document["format"] == "etkit-et-json" and len(document["nodes"]) == count
        from_json(tmp_path / "x.json", tmp_path / "x.et")
        assert (tmp_path / "x.et").read_bytes() == _plain(path.read_bytes()), path


@pytest.mark.shared_data
@pytest.mark.parametrize(("jsonized", "et"), [
    ("jsonizer/AllReduce_1MB.1.jsonized.txt", "text_converter_npus4_passes1/AllReduce_1MB.1.et"),
    ("jsonizer/MLP_ModelParallel.0.jsonized.txt", "text_converter_npus4_passes1/MLP_ModelParallel.0.et"),
    ("jsonizer/one_metadata_node_all_types.0.jsonized.txt", "generator_npus2/one_metadata_node_all_types.0.et"),
    ("jsonizer/two_comp_nodes_dependent.0.jsonized.txt", "generator_npus2/two_comp_nodes_dependent.0.et"),
    ("jsonizer/1.0.2-chakra.0.0.4.host_only.jsonized.txt", "pytorch_converter/1.0.2-chakra.0.0.4.host_only.et"),
])
def test_reference_jsonizer_output_restores_the_original_file(upstream: Path, tmp_path: Path, jsonized: str,
                                                              et: str) -> None:
    base = upstream / "generated-by-upstream-chakra-21585d8"
    from_json(base / jsonized, tmp_path / "x.et")
    assert (tmp_path / "x.et").read_bytes() == (base / et).read_bytes()


def test_64_bit_values_are_lossless_and_strings(tmp_path: Path) -> None:
    n = Node(id=2**64 - 1, name="big", type=NodeType.COMP_NODE, start_time_micros=2**63 + 5)
    n.data_deps.append(2**64 - 2)
    n.attr.extend([make_attr("u", 2**64 - 1, kind="uint64_val"), make_attr("s", -(2**63), kind="sint64_val"),
                   make_attr("f", 0.1, kind="float_val"), make_attr("d", float("inf"), kind="double_val"),
                   make_attr("b", b"\x00\xff", kind="bytes_val"), make_attr("l", [], kind="int64_list")])
    write_trace(tmp_path / "a.et", GlobalMetadata(), [n])
    to_json(tmp_path / "a.et", tmp_path / "a.json.gz")
    doc = orjson.loads(gzip.decompress((tmp_path / "a.json.gz").read_bytes()))
    assert doc["nodes"][0]["id"] == str(2**64 - 1)
    from_json(tmp_path / "a.json.gz", tmp_path / "b.et")
    assert (tmp_path / "b.et").read_bytes() == (tmp_path / "a.et").read_bytes()


def test_non_canonical_records_keep_their_bytes(tmp_path: Path) -> None:
    canonical = Node(id=5, name="x", type=NodeType.COMP_NODE).SerializeToString()
    reordered = canonical[2:] + canonical[:2]  # id field last: valid protobuf, not canonical order
    unknown = canonical + bytes.fromhex("5a03080101")  # an unknown field 11
    with TraceWriter(tmp_path / "n.et") as writer:
        writer.write_record(reordered)
        writer.write_record(unknown)
    to_json(tmp_path / "n.et", tmp_path / "n.json")
    assert all("_raw" in item for item in orjson.loads((tmp_path / "n.json").read_bytes())["nodes"])
    from_json(tmp_path / "n.json", tmp_path / "m.et")
    assert (tmp_path / "m.et").read_bytes() == (tmp_path / "n.et").read_bytes()


def test_pretty_printed_twin_and_snake_case_are_read(tmp_path: Path) -> None:
    doc = {"format": "etkit-et-json", "version": 1, "metadata": {"version": "1.0.0"},
           "nodes": [{"id": "1", "name": "a", "type": "COMP_NODE", "duration_micros": "4",
                      "attr": [{"name": "is_cpu_op", "bool_val": False}]},
                     {"id": 2, "type": 4, "data_deps": [1]}]}
    (tmp_path / "p.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    from_json(tmp_path / "p.json", tmp_path / "p.et")
    write_trace(tmp_path / "q.et", GlobalMetadata(version="1.0.0"),
                [node(1, name="a", duration=4), Node(id=2, type=4, data_deps=[1])])
    assert (tmp_path / "p.et").read_bytes() == (tmp_path / "q.et").read_bytes()


@pytest.mark.parametrize("text", [
    b"", b"{", b"[]", b"{}{", b'{"format":"etkit-et-json","version":1,"metadata":{},"nodes":[\n{"id":"x"}\n]}\n',
    b'{"format":"etkit-et-json","version":1,"metadata":{},"nodes":[\n{"id":"1"},\n',
    b'{"version":"1"}{"id":"1","type":"NOPE"}', b'{"version":"1"}{"id":"99999999999999999999999"}',
    b'{"version":"1"}{"attr":[{"name":"a","int32Val":"abc"}]}', b'{"version":"1"}{"inputs":{"x":"y"}}',
    b'{"version":"1"}{"attr":[{"name":"a","boolVal":3}]}', b"\xff\xfe",
])
def test_malformed_json_gives_one_clean_error(tmp_path: Path, text: bytes) -> None:
    (tmp_path / "bad.json").write_bytes(text)
    with pytest.raises(TraceFormatError) as err:
        from_json(tmp_path / "bad.json", tmp_path / "bad.et")
    assert str(tmp_path / "bad.json") in str(err.value)
    assert not (tmp_path / "bad.et").exists()


def test_iter_json_trace_streams_metadata_then_nodes(tmp_path: Path) -> None:
    write_trace(tmp_path / "a.et", GlobalMetadata(version="v"), [node(1), node(2, deps=[1])])
    to_json(tmp_path / "a.et", tmp_path / "a.json")
    items = list(iter_json_trace(tmp_path / "a.json"))
    assert isinstance(items[0], GlobalMetadata) and [n.id for n in items[1:]] == [1, 2]


@pytest.mark.shared_data
def test_fast_node_text_is_the_proto3_json_mapping(upstream: Path) -> None:
    from etkit.format.protojson import Fragments, node_json, node_to_dict
    from etkit.format.stream import open_trace

    fragments = Fragments()
    for path in sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz"))):
        with open_trace(path) as reader:
            for n in reader:
                assert orjson.loads(node_json(n, fragments)) == node_to_dict(n), path
