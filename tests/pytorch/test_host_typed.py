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

from etkit.errors import EtkitError
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
    "long names, strings and schema": _node(
        name='"aten::a_rather_long_name_with_a\\ttab"',
        inputs='{"values": ["abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnop\'qrst", "abcdefghijklmnopqr\\"stu",'
               ' "0123456789abcdef\u00e9", "0123456789abcdef\x7f"], "shapes": [[],[],[],[],[]],'
               ' "types": ["String","String","String","String","String"]}',
        attrs='[{"name": "rf_id", "type": "uint64", "value": 9}, {"name": "op_schema", "type": "string",'
              ' "value": "aten::a_rather_long_name(Tensor self, str mode=\\"it\'s\\") -> Tensor"}]'),
    "names and schemas alike in their first bytes": ", ".join(
        _node(id=str(i), name=f'"aten::convolution_backward{tail}"',
              attrs=f'[{{"name": "op_schema", "value": "aten::convolution_backward{tail}(Tensor x) -> Tensor"}}]')
        for i, tail in enumerate(["", "_overrideable", "", "_overrideable"])),
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
    ops with the C kernel (the nodes its scan leaves read by the dict path) as with typed_op alone, and most
    nodes made by the kernel."""
    paths = [PARAM / "1.0.3-chakra.0.0.4" / "resnet_1gpu_et.json.gz", PARAM / "1.1.0-chakra.0.0.4" / "resnet_2gpu_et.json.gz",
             *_host_traces()[1:]]
    slow_calls = []
    slow_node = _Compactor.slow_node
    monkeypatch.setattr(_Compactor, "slow_node", lambda self, text: slow_calls.append(1) or slow_node(self, text))
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


# -- the C scan: nodes read straight from the document's text (host._Compactor.scan) ---------------------------

def _read(path, *, scan: bool, monkeypatch) -> tuple[str, list[str]]:  # noqa: ANN001 - a path
    """("ops", every op's fields) of load_host_trace, or ("error", its message); the C scan on or off."""
    with monkeypatch.context() as m:
        if not scan:
            m.setattr(_Compactor, "scan", lambda self, text, pos, stop: ([], pos, 2))
        try:
            return "ops", [_fields(op) for op in load_host_trace(path).ops]
        except (HostTraceError, EtkitError) as exc:
            return "error", [str(exc)]


def _document(nodes: list[str], tail: str = "\n]}", sep: str = ",\n    ") -> bytes:
    text = '{"schema": "1.1.0-chakra.0.0.4", "pid": 1,\n  "nodes": [\n    ' + sep.join(nodes) + tail
    return text.encode("utf-8", "surrogateescape")  # (a surrogate escape: a byte that is not UTF-8)


needs_scan = pytest.mark.skipif(host.KERNEL is None, reason="etkit.pytorch._hostops is not built")


@needs_scan
@pytest.mark.parametrize("case", sorted(CORNERS))
def test_the_scan_gives_the_chunk_paths_ops(tmp_path, monkeypatch, case):
    """Each corner three times in a document (the first one teaches the compactor its name and strings): the
    same ops, or the same error, with the scan as without it."""
    path = tmp_path / "h.json"
    path.write_bytes(_document([CORNERS[case]] * 3))
    assert _read(path, scan=True, monkeypatch=monkeypatch) == _read(path, scan=False, monkeypatch=monkeypatch)


@needs_scan
@pytest.mark.parametrize("case", sorted(FAULTS))
def test_a_fault_the_scan_meets_gets_the_chunk_paths_error(tmp_path, monkeypatch, case):
    good = _node(name='"aten::add"')
    bad = FAULTS[case] if not FAULTS[case].startswith("[") else FAULTS[case][1:-1]
    path = tmp_path / "h.json"
    path.write_bytes(_document([good, good, bad, good]))
    got = _read(path, scan=True, monkeypatch=monkeypatch)
    assert got[0] == "error"
    assert got == _read(path, scan=False, monkeypatch=monkeypatch)


VALUES = {  # argument values whose str() the scan writes itself (True), or leaves to the chunk path (False)
    "numbers": ('[0, -1, 7, 123456789012345678, 0.5, -0.0, 0.000000, 1.000000, 2.50, 0.1, 3.0000000000000001,'
                ' 123456789.123456789e0]', False),
    "numbers without exponent": ('[0, -1, 7, 123456789012345678, 0.5, -0.0, 0.000000, 1.000000, 2.50, 0.1,'
                                 ' 3.0000000000000001, 179769313486231570000000000000000000.0]', True),
    "19 digits": ("[1234567890123456789]", False),
    "exponent": ("[1e3, 1E-2]", False),
    "minus zero": ("[-0]", False),
    "strings": ('["cpu", "", "a b", "it\'s", "q\\"uote", "back\\\\slash", "tab\\t", "é", "\\/", "\\b\\f\\n\\r"]', True),
    "unicode escape": ('["\\u00e9"]', False),
    "words": ("[true, false, null, [true], [null, false], []]", True),
    "nested tensors": ('[[[1,2,0,4,4,"cpu"],[[3,4,0,4,4,"cpu"],[]]],[5,6,0,4,4,"cpu"],[[[7,8,0,1,4,"cpu"]]],'
                       ' [9,10,[1],[2],4,"cuda:0"], [1,2,3,4,5,6], [true,2,3,4,5,"x"], [1.0,2,3,4,5,"x"],'
                       ' [1,2,3,4,5,"x",7], [[1,2,3,4,5,"y"],[1,2,[3,4,5,6,7,"z"],4,5,"w"]]]', True),
    "deep": ("[" * 60 + "1" + "]" * 60, True),
    "too deep": ("[" * 70 + "1" + "]" * 70, False),
    "object in values": ('[{"a": 1}]', False),
    "spaces": ('[ 1 ,\t[ 2 ] , "x" ]', True),
    "long strings": ('["abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnop\'qrstuvwx", "abcdefghijklmnopqr\\"stu",'
                     ' "abcdefghijklmnopqrs\u00e9 and more", "abcdefghijklmnop\x7frstuvw",'
                     ' "0123456789abcdef\\\\0123456789abcdef\\n"]', True),
}


@needs_scan
@pytest.mark.parametrize("case", sorted(VALUES))
def test_the_scan_writes_values_as_python_does(tmp_path, monkeypatch, case):
    values, taken = VALUES[case]
    io = '{"values": ' + values + ', "shapes": [], "types": ["Tensor"]}'
    path = tmp_path / "h.json"
    path.write_bytes(_document([_node(id=str(i), inputs=io, outputs=io) for i in range(1, 4)]))
    slow = []
    slow_node = _Compactor.slow_node
    monkeypatch.setattr(_Compactor, "slow_node", lambda self, text: slow.append(1) or slow_node(self, text))
    got = _read(path, scan=True, monkeypatch=monkeypatch)
    assert len(slow) == (0 if taken else 3)
    assert got == _read(path, scan=False, monkeypatch=monkeypatch)
    assert got[0] == "ops"


DOCUMENTS = {  # (nodes, separator, tail): text around and between the nodes the scan must leave to the chunks
    "plain": ([_node(id=str(i)) for i in range(1, 6)], ",\n    ", "\n]}"),
    "one line": ([_node(id=str(i)) for i in range(1, 6)], ",", "]}"),
    "empty array": ([], "", "]}"),
    "trailing comma": ([_node(id="1"), _node(id="2")], ",\n    ", ",\n]}"),
    "array then another key": ([_node(id="1"), _node(id="2")], ",\n    ", '\n], "finish_ts": 5}'),
    "array then another array": ([_node(id="1"), _node(id="2")], ",\n    ", '\n], "more": [1, 2]}'),
    "garbage between nodes": ([_node(id="1"), _node(id="2")], " x,\n    ", "\n]}"),
    "two commas": ([_node(id="1"), _node(id="2")], ",,\n    ", "\n]}"),
    "missing comma": ([_node(id="1"), _node(id="2")], "\n    ", "\n]}"),
    "truncated node": ([_node(id="1"), _node(id="2")[:-9]], ",\n    ", "\n]}"),
    "a number as node": ([_node(id="1"), "5", _node(id="2")], ",\n    ", "\n]}"),
    "duplicate ids": ([_node(id="1"), _node(id="1")], ",\n    ", "\n]}"),
    "a raw control character": ([_node(id="1"), _node(id="2", name='"a\tb"')], ",\n    ", "\n]}"),
    "invalid utf-8": ([_node(id="1"), _node(id="2", name='"a\udcff"')], ",\n    ", "\n]}"),
    "a bad escape": ([_node(id="1"), _node(id="2", name='"a\\qb"')], ",\n    ", "\n]}"),
    "leading zero": ([_node(id="1"), _node(id="02")], ",\n    ", "\n]}"),
    "a node deeper than the scan reads": ([_node(id="1"), _node(id="2", extra="[" * 1100 + "]" * 1100)], ",\n    ",
                                          "\n]}"),
}


@needs_scan
@pytest.mark.parametrize("case", sorted(DOCUMENTS))
def test_text_the_scan_does_not_read_is_the_chunk_paths(tmp_path, monkeypatch, case):
    nodes, sep, tail = DOCUMENTS[case]
    path = tmp_path / "h.json"
    path.write_bytes(_document(nodes, tail, sep))
    assert _read(path, scan=True, monkeypatch=monkeypatch) == _read(path, scan=False, monkeypatch=monkeypatch)


@needs_scan
def test_the_scan_hands_over_where_it_stops():
    """The kernel's own contract: status 0 at the end, 1 at the limit, 2 where the chunks must take over."""
    compact = _Compactor("t", False)
    text = _document([_node(id=str(i)) for i in range(1, 6)])
    start, stop = text.index(b"[") + 1, text.rindex(b"]")
    ops, pos, status = host.KERNEL.scan(text, start, stop, 2, compact.names, compact.raw_strings, compact.strings,
                                        compact.raw_string, compact.learn_name, compact.slow_node, host.HostOp)
    assert [op.id for op in ops] == [1, 2] and status == 1 and text[pos - 1:pos] == b","
    ops, pos, status = compact.scan(text, pos, stop)
    assert [op.id for op in ops] == [3, 4, 5] and (pos, status) == (stop, 0)
    bad = text[:stop] + b", 7" + text[stop:]
    ops, pos, status = compact.scan(bad, start, stop + 3)
    assert len(ops) == 5 and status == 2 and bad[pos:].lstrip().startswith(b"7")
    with pytest.raises(ValueError):
        compact.scan(text, stop, start)


@pytest.mark.shared_data
@needs_scan
def test_real_traces_read_alike_with_and_without_the_scan(monkeypatch):
    paths = [PARAM / "1.0.3-chakra.0.0.4" / "resnet_1gpu_et.json.gz", PARAM / "1.1.0-chakra.0.0.4" / "resnet_2gpu_et.json.gz",
             *_host_traces()[1:]]
    slow = []
    slow_node = _Compactor.slow_node
    monkeypatch.setattr(_Compactor, "slow_node", lambda self, text: slow.append(1) or slow_node(self, text))
    with_scan = [_read(path, scan=True, monkeypatch=monkeypatch) for path in paths]
    assert 0 < len(slow) < sum(len(ops) for _, ops in with_scan) / 10  # (kept ops: collectives)
    assert [_read(path, scan=False, monkeypatch=monkeypatch) for path in paths] == with_scan


@pytest.mark.shared_data
@pytest.mark.skipif(host.KERNEL is None, reason="the C kernel is not built here (tests/test_extensions.py says so)")
def test_the_scan_calls_a_hostop_class_it_cannot_fill_itself(monkeypatch):
    """The scan fills a plain HostOp's slots itself (no __init__ call); a class with a __post_init__, a hand-written
    __init__ (or other fields) it calls instead, so that what the class does on construction still happens, once
    per op."""
    path = PARAM / "1.0.3-chakra.0.0.4" / "resnet_1gpu_et.json.gz"
    plain = load_host_trace(path).ops
    made: list[int] = []

    @host.record(slots=True)
    class Counted(host.HostOp):
        def __post_init__(self) -> None:
            made.append(self.id)

    generated = host.HostOp.__init__

    def own_init(self, *args) -> None:  # type: ignore[no-untyped-def]
        made.append(args[0])
        generated(self, *args)

    for cls, init in ((Counted, None), (host.HostOp, own_init)):  # (HostOp itself with a hand-written __init__)
        if init is not None:
            monkeypatch.setattr(cls, "__init__", init)
        made.clear()
        monkeypatch.setattr(host, "HostOp", cls)
        ops = load_host_trace(path).ops
        assert len(made) > len(plain) // 2 and sorted(made) == sorted(op.id for op in ops if type(op) is cls)
        assert [(op.id, op.name, op.io, op.reads, op.writes) for op in ops] == \
            [(op.id, op.name, op.io, op.reads, op.writes) for op in plain]
