"""The host reader's typed fast path (msgspec records, no dict per node) gives exactly the HostOps of the dict path.

Every chunk either comes out of ``_Compactor.typed_chunk`` or, when it returns None, out of the orjson dict
path; these tests compare the two on real traces and on the JSON corners where msgspec and orjson could
read a value differently, and check that a fault still gets the dict path's error.
"""

from __future__ import annotations

import gzip
import tarfile

import orjson
import pytest

from etkit.pytorch import host
from etkit.pytorch.host import HostTraceError, _Compactor, load_host_trace
from etkit.pytorch.jsonio import read_array_document

from ..conftest import PYTORCH_JOBS, UPSTREAM

PARAM = UPSTREAM / "facebookresearch-param" / "et_replay" / "tests" / "inputs"


def _fields(op: host.HostOp) -> str:
    """Every field of ``op``, as text (NaN times compare equal)."""
    return repr(tuple(getattr(op, name) for name in host.HostOp.__slots__))


def _both(text: bytes) -> tuple[list | None, list]:
    """(typed path's ops or None, dict path's ops) of one chunk's JSON text."""
    typed = _Compactor("t", False).typed_chunk(text)
    plain = [_Compactor("t", False).op(raw) for raw in orjson.loads(text)]
    return (None if typed is None else [_fields(op) for op in typed]), [_fields(op) for op in plain]


def _node(**fields: str) -> str:
    base = {"id": "7", "name": '"aten::add"', "ctrl_deps": "3",
            "inputs": '{"values": [[1,2,0,4,4,"cpu"],1.5], "shapes": [[4],[]], "types": ["Tensor(float)","Double"]}',
            "outputs": '{"values": [[5,6,0,4,4,"cpu"]], "shapes": [[4]], "types": ["Tensor(float)"]}',
            "attrs": '[{"name": "rf_id", "type": "uint64", "value": 9}, {"name": "tid", "type": "uint64", "value": 1}]'}
    base.update(fields)
    return "{" + ", ".join(f'"{k}": {v}' for k, v in base.items() if v is not None) + "}"


CORNERS = {
    "plain": _node(),
    "no io, no attrs, no parent": _node(inputs=None, outputs=None, attrs=None, ctrl_deps=None),
    "null parent, list parent": _node(ctrl_deps="null") + ", " + _node(id="8", ctrl_deps="[3, 4]"),
    "empty list parent": _node(ctrl_deps="[]"),
    "io without keys, null io": _node(inputs="{}", outputs="null"),
    "floats": _node(inputs='{"values": [1e-7, -0.0, 1E5, 0.1e1, 3.0000000000000001, 1.7976931348623157e308, 5e-324],'
                           ' "shapes": [], "types": []}'),
    "strings": _node(name='"a\\u00e9\\ud83d\\ude00\\n\\"q\'"',
                     inputs='{"values": ["\\u0000", "\'", "x\\\\y"], "shapes": [[]], "types": ["String"]}'),
    "true false null": _node(inputs='{"values": [true, false, null], "shapes": [[],[],[]], "types": ["Bool","Bool","None"]}'),
    "integers at the 64-bit edges": _node(inputs='{"values": [18446744073709551615, -9223372036854775808, -0],'
                                                 ' "shapes": [], "types": []}'),
    "an integer beyond 64 bits (orjson: a float)": _node(inputs='{"values": [18446744073709551616], "shapes": [],'
                                                                ' "types": []}'),
    "a string of 20 digits": _node(name='"op12345678901234567890"'),
    "integral float attributes": _node(attrs='[{"name": "rf_id", "value": 9.0}, {"name": "seq_id", "value": -1.0}]'),
    "extra attributes": _node(attrs='[{"name": "pg_name", "value": "1"}, {"name": "x", "value": ""},'
                                    ' {"name": "rf_id", "value": 2}, {"name": "rf_id", "value": 3}]'),
    "attribute without value": _node(attrs='[{"name": "rf_id"}]'),
    "duplicate keys": _node() [:-1] + ', "id": 11, "name": "aten::mul"}',
    "collective keeps its arguments": _node(name='"c10d::allreduce_"', inputs='{"values": [[[1,2,0,4,4,"cuda:0"]], 3],'
                                                                             ' "shapes": [], "types": ["GenericList[Tensor]", "Int"]}'),
    "linked trace fields": _node(ts="1.5", inclusive_dur="2", exclusive_dur="null", cat='"kernel"', stream="7",
                                 pg_name='"2"'),
    "linked, empty cat": _node(ts="null", cat='""'),
    "unknown keys": _node(extra='{"a": [1, {"b": 2}]}', ph='"X"'),
    "nested tensors": _node(inputs='{"values": [[[1,2,0,4,4,"cpu"],[[3,4,0,4,4,"cpu"]]],[5,6,0,4,4,"cpu"]],'
                                   ' "shapes": [], "types": ["GenericList[Tensor]", "Tensor"]}'),
    "types not strings": _node(inputs='{"values": [1], "shapes": [], "types": [1, [2]]}'),
}


@pytest.mark.parametrize("case", sorted(CORNERS))
def test_typed_path_gives_the_dict_paths_ops(case):
    typed, plain = _both(("[" + CORNERS[case] + "]").encode())
    if typed is not None:
        assert typed == plain


@pytest.mark.skipif(host.KERNEL is None, reason="etkit.pytorch._hostops is not built")
@pytest.mark.parametrize("case", sorted(CORNERS))
def test_the_c_typed_path_gives_the_python_typed_paths_ops(monkeypatch, case):
    """Each corner twice in one chunk: the first node teaches the compactor its name and strings, so the
    second one is made by the C kernel where it is common; the result is what typed_op alone gives."""
    text = ("[" + CORNERS[case] + ",\n" + CORNERS[case] + "]").encode()
    with_c = _both(text)
    monkeypatch.setattr(host, "KERNEL", None)
    assert _both(text) == with_c
    if with_c[0] is not None:
        assert with_c[0] == with_c[1]


def test_integers_beyond_64_bits_take_the_dict_path():
    # msgspec would read the integer exactly; orjson reads a float, and that is what the ET always had
    assert _both(("[" + CORNERS["an integer beyond 64 bits (orjson: a float)"] + "]").encode())[0] is None
    assert _both(("[" + CORNERS["plain"] + "]").encode())[0] is not None


FAULTS = {
    "node not an object": "[1, 2]",
    "id missing": _node(id=None),
    "id a string": _node(id='"7"'),
    "id negative": _node(id="-1"),
    "name missing": _node(name=None),
    "name a number": _node(name="5"),
    "inputs a list": _node(inputs="[1]"),
    "values not a list": _node(inputs='{"values": 1}'),
    "types not a list": _node(inputs='{"values": [], "types": "x"}'),
    "attrs not a list": _node(attrs='{"name": "rf_id"}'),
    "attrs null": _node(attrs="null"),
    "attr without a name": _node(attrs='[{"value": 1}]'),
    "attr name a list": _node(attrs='[{"name": [1], "value": 1}]'),
    "rf_id a string": _node(attrs='[{"name": "rf_id", "value": "9"}]'),
    "tid beyond int64": _node(attrs='[{"name": "tid", "value": 9223372036854775808}]'),
    "linked ts a string": _node(ts='"soon"'),
    "stream a float": _node(ts="1", cat='"kernel"', stream="1.5"),
}


@pytest.mark.parametrize("case", sorted(FAULTS))
def test_a_fault_gets_the_dict_paths_error(case):
    text = FAULTS[case] if FAULTS[case].startswith("[") else "[" + FAULTS[case] + "]"
    assert _Compactor("t", False).typed_chunk(text.encode()) is None  # left to the dict path ...
    with pytest.raises(HostTraceError):  # ... which says what is wrong
        [_Compactor("t", False).op(raw) for raw in orjson.loads(text)]


@pytest.mark.skipif(host.KERNEL is None, reason="etkit.pytorch._hostops is not built")
@pytest.mark.parametrize("case", sorted(FAULTS))
def test_a_fault_after_a_common_node_of_its_name_still_gets_the_dict_path(case):
    """A faulty node whose name and strings the C kernel knows (a good node of the same name before it):
    the chunk still goes to the dict path, which reports the fault."""
    good = _node(name='"aten::add"')
    bad = FAULTS[case] if not FAULTS[case].startswith("[") else FAULTS[case][1:-1]
    text = "[" + good + ",\n" + good + ",\n" + bad + "]"
    assert _Compactor("t", False).typed_chunk(text.encode()) is None
    with pytest.raises(HostTraceError):
        [_Compactor("t", False).op(raw) for raw in orjson.loads(text)]


def _host_traces() -> list:
    paths = [PARAM / "1.0.3-chakra.0.0.4" / "resnet_1gpu_et.json.gz"]  # (1.1.0's: the next test)
    if PYTORCH_JOBS.is_dir():
        paths += sorted(PYTORCH_JOBS.rglob("*.et.json*"))
    return paths


def _chunk_texts(doc) -> list[bytes]:  # noqa: ANN001 - a JsonArrayDocument
    """The JSON text of each chunk the reader hands its fast path."""
    texts: list[bytes] = []
    list(doc.converted(lambda raw: raw, fast=texts.append))  # (append returns None: each chunk parsed as well)
    return texts


@pytest.mark.shared_data
def test_real_traces_read_alike_on_both_paths(tmp_path):
    """Every chunk of the real host traces (param's resnet, the PyTorch jobs): the typed path takes it, and
    gives the dict path's ops."""
    with tarfile.open(UPSTREAM / "mlcommons-chakra" / "tests" / "data" / "1.0.2-chakra.0.0.4.tgz") as tar:
        chakra = tmp_path / "chakra.json"
        chakra.write_bytes(tar.extractfile(tar.getmember("1.0.2-chakra.0.0.4.json")).read())
    checked = 0
    for path in [*_host_traces(), chakra]:
        doc = read_array_document(path, "nodes")
        if doc.header.get("schema", "").startswith("1.0.1") or not doc.found:
            continue
        texts = _chunk_texts(doc)
        for text in texts:
            typed, plain = _both(text)
            assert typed == plain, path
        checked += len(texts)
    assert checked > 400


@pytest.mark.shared_data
@pytest.mark.skipif(host.KERNEL is None, reason="etkit.pytorch._hostops is not built")
def test_whole_traces_read_alike_with_and_without_the_c_kernel(monkeypatch):
    """Param's resnet traces (1.0.3 and 1.1.0, 14,391 nodes each) and the PyTorch jobs' host traces: the same
    ops with the C kernel as with typed_op alone, and most nodes made by the kernel."""
    paths = [PARAM / "1.0.3-chakra.0.0.4" / "resnet_1gpu_et.json.gz", PARAM / "1.1.0-chakra.0.0.4" / "resnet_2gpu_et.json.gz",
             *_host_traces()[1:]]
    slow_calls = []
    typed_op = _Compactor.typed_op
    monkeypatch.setattr(_Compactor, "typed_op", lambda self, node: slow_calls.append(1) or typed_op(self, node))
    with_c = [[_fields(op) for op in load_host_trace(path).ops] for path in paths]
    assert 0 < len(slow_calls) < sum(map(len, with_c)) / 5
    monkeypatch.setattr(host, "KERNEL", None)
    assert [[_fields(op) for op in load_host_trace(path).ops] for path in paths] == with_c


@pytest.mark.shared_data
def test_whole_trace_equals_the_dict_path(monkeypatch):
    """load_host_trace with and without the typed path: the same ops (resnet, 14,391 nodes)."""
    path = PARAM / "1.1.0-chakra.0.0.4" / "resnet_2gpu_et.json.gz"
    fast = load_host_trace(path)
    monkeypatch.setattr(_Compactor, "typed_chunk", lambda self, text: None)
    slow = load_host_trace(path)
    assert [_fields(op) for op in fast.ops] == [_fields(op) for op in slow.ops]
    assert len(fast.ops) == 14392


def test_a_bad_node_after_good_chunks_is_reported(tmp_path):
    """A fault in a later chunk: the typed path hands that chunk to the dict path, which names the node."""
    nodes = ",\n  ".join(_node(id=str(i)) for i in range(1, 200)) + ",\n  " + _node(id="500", name="5")
    path = tmp_path / "h.json.gz"
    path.write_bytes(gzip.compress(('{"schema": "1.1.0-chakra.0.0.4", "pid": 1, "nodes": [\n  ' + nodes + "\n]}").encode()))
    with pytest.raises(HostTraceError, match="node 500: field 'name' is missing or not a string"):
        load_host_trace(path)


@pytest.mark.skipif(host.KERNEL is None, reason="etkit.pytorch._hostops is not built")
@pytest.mark.parametrize("text", [b"", b"1" * 19, b"1" * 20, b"x" + b"0" * 20 + b"y", b"-9223372036854775808,1",
                                  b"18446744073709551616", b"1234567890 1234567890", "é1".encode() * 20,
                                  CORNERS["an integer beyond 64 bits (orjson: a float)"].encode()])
def test_the_c_long_number_check_is_the_translate_one(text):
    assert host.KERNEL.long_number(text) is (host._LONG_NUMBER in text.translate(host._DIGITS_TO_ZERO))
