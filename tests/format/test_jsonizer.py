"""``to-json --format jsonizer`` writes what the reference ``chakra_jsonizer`` (mlc-chakra 1.0.0) writes,
byte for byte, and ``from-json`` reads that layout back."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest
from google.protobuf import json_format

from etkit.cli.main import main
from etkit.format.jsonizer import to_jsonizer
from etkit.format.jsontwin import from_json, iter_json_trace
from etkit.format.schema import GlobalMetadata, Node
from etkit.format.stream import TraceWriter, open_trace

from .test_jsontwin_fast import _odd_nodes

CHAKRA = "generated-by-upstream-chakra-21585d8"
#: One vector of each producer and shape (the Chakra-converted ResNet: 14,391 nodes with IOInfo on every node).
_SAMPLES = (
    f"{CHAKRA}/pytorch_converter/resnet_2gpu_et.1.1.0-chakra.0.0.4.host_only.et.gz",
    f"{CHAKRA}/generator_npus2/one_metadata_node_all_types.0.et",
    f"{CHAKRA}/text_converter_npus4_passes1/DLRM_HybridParallel.2.et",
    "generated-by-stage-3a7f49c/tp4_pp2_recompute/workload.3.et",
    "astra-sim-astra-sim/examples/system/custom_collectives/custom_ring_allreduce_8npus_1MB/custom_allreduce.4.et",
)


def _plain(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def _reference(ref_bin: Path, et: Path, out: Path) -> bytes:
    subprocess.run([str(ref_bin / "chakra_jsonizer"), "--input_filename", str(et), "--output_filename", str(out)],
                   check=True, capture_output=True, cwd=out.parent)
    return out.read_bytes()


@pytest.mark.shared_data
@pytest.mark.reference
@pytest.mark.parametrize("vector", _SAMPLES)
def test_the_same_bytes_as_chakra_jsonizer(upstream: Path, ref_bin: Path, tmp_path: Path, vector: str) -> None:
    et = upstream / vector
    assert et.exists(), et
    count = to_jsonizer(et, tmp_path / "etkit.txt")
    assert count > 0
    assert (tmp_path / "etkit.txt").read_bytes() == _reference(ref_bin, et, tmp_path / "ref.txt")


@pytest.mark.reference
def test_the_same_bytes_as_chakra_jsonizer_on_oddities(ref_bin: Path, tmp_path: Path) -> None:
    """Floats, NaN, non-ASCII, DEL, control characters, unknown enum values, empty IOInfo, long lists."""
    et = tmp_path / "odd.et"
    with TraceWriter(et, GlobalMetadata(version="v")) as writer:
        for node in _odd_nodes():
            if node.ByteSize():
                writer.write(node)
    to_jsonizer(et, tmp_path / "etkit.txt")
    assert (tmp_path / "etkit.txt").read_bytes() == _reference(ref_bin, et, tmp_path / "ref.txt")


def test_each_node_is_protobufs_own_json(tmp_path: Path) -> None:
    """The fast path (orjson) and protobuf's ``MessageToJson`` (what chakra_jsonizer calls) agree on every
    oddity, and the file is their texts with nothing between them."""
    nodes = [n for n in _odd_nodes() if n.ByteSize()]
    meta = GlobalMetadata(version="é")
    et = tmp_path / "odd.et"
    with TraceWriter(et, meta) as writer:
        for node in nodes:
            writer.write(node)
    assert to_jsonizer(et, tmp_path / "odd.txt") == len(nodes)
    with open_trace(et) as reader:  # as written (the writer may drop a repeated dep)
        expected = json_format.MessageToJson(meta) + "".join(json_format.MessageToJson(n) for n in reader)
    assert (tmp_path / "odd.txt").read_bytes() == expected.encode()


@pytest.mark.shared_data
def test_the_stored_reference_outputs(upstream: Path, tmp_path: Path) -> None:
    """The jsonizer outputs stored beside the vectors: written again the same, read back to the vector's bytes."""
    stored = sorted((upstream / CHAKRA / "jsonizer").glob("*.jsonized.txt"))
    assert len(stored) >= 5
    for ref in stored:
        [et] = [p for p in (upstream / CHAKRA).rglob(ref.name.removesuffix(".jsonized.txt") + ".et*")]
        to_jsonizer(et, tmp_path / "x.txt")
        assert (tmp_path / "x.txt").read_bytes() == ref.read_bytes(), ref.name
        from_json(ref, tmp_path / "x.et")
        assert (tmp_path / "x.et").read_bytes() == _plain(et), ref.name


@pytest.mark.shared_data
def test_every_upstream_vector_reads_back(upstream: Path, tmp_path: Path) -> None:
    """Canonical files survive the (lossy in general) jsonizer layout exactly; the reader streams it."""
    files = sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz")))
    assert len(files) >= 274
    for et in files:
        to_jsonizer(et, tmp_path / "j.txt.gz")
        from_json(tmp_path / "j.txt.gz", tmp_path / "back.et")
        assert (tmp_path / "back.et").read_bytes() == _plain(et), et


def test_strings_that_look_like_object_boundaries(tmp_path: Path) -> None:
    nodes = [Node(id=1, name="}{"), Node(id=2, name="a\n}{b", attr=[]), Node(id=3, name="{}")]
    nodes[1].inputs.values = "}\n{"
    et = tmp_path / "b.et"
    with TraceWriter(et, GlobalMetadata()) as writer:  # empty metadata: jsonizer writes {} on no line of its own
        for node in nodes:
            writer.write(node)
    to_jsonizer(et, tmp_path / "b.txt")
    assert (tmp_path / "b.txt").read_bytes().startswith(b"{}{\n")
    read = list(iter_json_trace(tmp_path / "b.txt"))
    assert read[0] == GlobalMetadata() and read[1:] == nodes
    from_json(tmp_path / "b.txt", tmp_path / "back.et")
    assert (tmp_path / "back.et").read_bytes() == et.read_bytes()


def test_cli_format_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    et = tmp_path / "t.et"
    with TraceWriter(et, GlobalMetadata(version="1.0.0")) as writer:
        writer.write(Node(id=1, name="n"))
    assert main(["to-json", str(et), "--format", "jsonizer"]) == 0
    out = tmp_path / "t.jsonized.txt"  # the default name of that layout
    assert out.read_bytes() == (json_format.MessageToJson(GlobalMetadata(version="1.0.0")) +
                                json_format.MessageToJson(Node(id=1, name="n"))).encode()
    assert main(["from-json", str(out), "-o", str(tmp_path / "back.et")]) == 0
    assert (tmp_path / "back.et").read_bytes() == et.read_bytes()
    with open_trace(tmp_path / "back.et") as reader:
        assert reader.metadata.version == "1.0.0"
    assert "1 nodes -> " in capsys.readouterr().out
