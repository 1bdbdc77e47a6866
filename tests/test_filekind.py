"""What a file is, from its head: every kind users hold, on real files, and the one-line messages it gives."""

from __future__ import annotations

import gzip

import pytest

from etkit.errors import UsageError
from etkit.filekind import require, sniff, sniff_bytes

from .conftest import PYTORCH_JOBS, UPSTREAM

EXAMPLES = UPSTREAM / "astra-sim-astra-sim" / "examples"
REAL = [
    (UPSTREAM / "generated-by-stage-3a7f49c" / "small_dp2tp2pp2" / "workload.3.et", "chakra-et"),
    (UPSTREAM / "generated-by-upstream-chakra-21585d8" / "pytorch_converter"
     / "resnet_2gpu_et.1.1.0-chakra.0.0.4.host_only.et.gz", "chakra-et"),
    (UPSTREAM / "generated-by-stage-3a7f49c" / "small_dp2tp2pp2" / "workload.json", "comm-groups"),
    (PYTORCH_JOBS / "ddp_mlp_ws2" / "rank-0.et.json", "host-et"),
    (PYTORCH_JOBS / "tp_transformer_ws2" / "rank-1.et.json.gz", "host-et"),
    (PYTORCH_JOBS / "ddp_mlp_ws2" / "rank-0.kineto.json", "kineto"),
    (UPSTREAM / "facebookresearch-param" / "et_replay" / "tests" / "inputs" / "linear_et.json.gz", "host-et"),
    (UPSTREAM / "facebookresearch-param" / "et_replay" / "tests" / "inputs" / "linear_kineto.json.gz", "kineto"),
    (UPSTREAM / "hta" / "tests" / "data" / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "kineto"),
    (UPSTREAM / "generated-by-upstream-chakra-21585d8" / "jsonizer" / "AllReduce_1MB.1.jsonized.txt", "jsonizer"),
    (UPSTREAM / "generated-by-upstream-chakra-21585d8" / "jsonizer" / "1.0.2-chakra.0.0.4.host_only.jsonized.txt",
     "jsonizer"),
    (EXAMPLES / "network" / "analytical" / "Ring_8npus.yml", "astra-network"),
    (EXAMPLES / "system" / "native_collectives" / "Ring_4chunks.json", "astra-system"),
    (UPSTREAM / "mlcommons-chakra" / "eg_converter" / "input_files" / "Text" / "DLRM_HybridParallel.txt",
     "text-workload"),
    (PYTORCH_JOBS / "ddp_mlp_ws2" / "meta.json", "json"),
]


@pytest.mark.shared_data
@pytest.mark.parametrize("path, kind", REAL, ids=[p.name for p, _ in REAL])
def test_real_files_are_told_apart(path, kind):
    assert sniff(path).name == kind


@pytest.mark.shared_data
def test_etkit_outputs_are_told_apart(tmp_path, converted_job):
    from etkit.format.jsontwin import to_json
    from etkit.pytorch.link import link_files, write_linked_json

    prefix = converted_job("pp_sendrecv_ws2")
    to_json(f"{prefix}.0.et", tmp_path / "twin.json")
    src = PYTORCH_JOBS / "pp_sendrecv_ws2"
    write_linked_json(link_files(src / "rank-0.et.json", src / "rank-0.kineto.json", rank=0), tmp_path / "l.json.gz")
    assert [sniff(p).name for p in (f"{prefix}.0.et", f"{prefix}.comm_groups.json", tmp_path / "twin.json",
                                    tmp_path / "l.json.gz")] == ["chakra-et", "comm-groups", "json-twin", "linked"]


@pytest.mark.parametrize("head, kind", [
    (b"", "empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "binary"),
    (b'{"preset": "hgx-h100"}', "json"),
    (b"preset: hgx-h100\ndevice: H100\n", "etkit-system"),
    (b"network:\n  topology: [Ring]\nsystem: {}\n", "etkit-system"),
    (b"topology: [Ring]\nnpus_count: [8]\n", "astra-network"),
    (b'[{"ph": "X", "name": "aten::mm", "pid": 1}]', "kineto"),
    (b'{"0": [0, 1, 2, 3], "1": [0, 1]}', "comm-groups"),
    (b"just some words\n", "yaml"),
])
def test_heads(head, kind):
    assert sniff_bytes(head).name == kind


def test_gzip_is_looked_through(tmp_path):
    path = tmp_path / "x.json.gz"
    path.write_bytes(gzip.compress(b'{"schemaVersion": 1, "traceEvents": []}'))
    assert sniff(path).name == "kineto"


def test_require_says_what_the_file_is_and_which_verb_reads_it(tmp_path):
    path = tmp_path / "rank-0.et.json"
    path.write_text('{"schema": "1.1.1-chakra.0.0.4", "pid": 1, "time": "x", "start_ts": 0, "nodes": []}')
    with pytest.raises(UsageError) as err:
        require(path, {"chakra-et"}, wanted="a Chakra ET (.et) file")
    assert str(err.value) == (f"{path} is a PyTorch host execution trace, not a Chakra ET (.et) file: convert it "
                              "with `etkit convert pytorch`")
    empty = tmp_path / "e.et"
    empty.write_bytes(b"")
    with pytest.raises(UsageError, match="the file is empty"):
        require(empty, {"chakra-et"}, wanted="a Chakra ET (.et) file")
    assert require(tmp_path / "missing.et", {"chakra-et"}, wanted="x").name == "missing"  # the reader says so


def test_a_head_full_of_escaped_quotes_is_read_in_linear_time():
    """A twin whose attribute holds quoted XML (as ASTRA-sim's ``input_file`` does): the key scan once restarted
    inside the string at every escaped quote (quadratic: 5.4 s for 39 KB). The bound only catches that."""
    import time

    value = '<a b=\\"c\\"/>' * 6000  # ~70 KB, 12,000 escaped quotes: minutes for the quadratic scan
    head = ('{"format": "etkit-et-json", "nodes": [{"attr": [{"name": "input_file", "value": "' + value + '"}]}]}')
    start = time.process_time()
    assert sniff_bytes(head.encode()).name == "json-twin"
    assert sniff_bytes(('{"traceEvents": [{"args": {"x": "' + value + '"}}]}').encode()).name == "kineto"
    assert time.process_time() - start < 2.0


def test_text_is_every_byte_but_the_control_characters_other_than_tab_and_line_breaks() -> None:
    """``_is_text`` against its definition, byte by byte: each byte alone and amid text, and past the first 4 KiB
    (which are all it looks at)."""
    from etkit.filekind import _is_text

    allowed = {9, 10, 12, 13}
    for b in range(256):
        byte = bytes([b])
        want = b >= 32 or b in allowed
        assert _is_text(byte) is want and _is_text(b"{\"a\": 1}" + byte + b"x" * 100) is want, b
    assert _is_text(b"x" * 4096 + b"\x00") and not _is_text(b"x" * 4095 + b"\x00")
    assert _is_text(b"") and _is_text("é ü\t\r\n".encode())
