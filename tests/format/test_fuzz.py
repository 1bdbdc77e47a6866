"""Property-based fuzzing of the readers: any input gives a trace or one clean error, never a crash or hang."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etkit.errors import TraceFormatError
from etkit.format.jsontwin import from_json
from etkit.format.schema import GlobalMetadata
from etkit.format.stream import open_trace, write_trace
from etkit.model.trace import load_trace

from ..builders import coll, node

_SETTINGS = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _seed(tmp: Path) -> bytes:
    write_trace(tmp / "seed.et", GlobalMetadata(version="1.0.0"),
                [node(1, duration=3), coll(2, 0, 4096, deps=[1], pg="0"), node(3, deps=[2], ctrl=[1])])
    return (tmp / "seed.et").read_bytes()


@_SETTINGS
@given(data=st.binary(max_size=400))
def test_random_bytes(tmp_path_factory, data: bytes) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("fz") / "r.et"
    path.write_bytes(data)
    _read_both(path)


@_SETTINGS
@given(edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
       cut=st.integers(0, 10_000))
def test_mutated_valid_files(tmp_path_factory, edits, cut) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("fz")
    data = bytearray(_seed(tmp))
    for pos, value in edits:
        data[pos % len(data)] = value
    path = tmp / "m.et"
    path.write_bytes(bytes(data[: max(1, cut % (len(data) + 1))]))
    _read_both(path)


def _read_both(path: Path) -> None:
    try:
        trace = load_trace(path)
        for row in range(len(trace)):
            trace.node(row)
    except TraceFormatError as exc:
        assert str(path) in str(exc)
    try:
        with open_trace(path) as reader:
            for _ in reader:
                pass
    except TraceFormatError as exc:
        assert str(path) in str(exc)


@_SETTINGS
@given(text=st.one_of(st.text(max_size=200).map(str.encode), st.binary(max_size=200),
                      st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.text(max_size=5),
                                   lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                                       st.sampled_from(["id", "name", "type", "attr", "dataDeps", "version",
                                                        "inputs", "int64Val", "values", "format", "nodes"]),
                                       inner, max_size=4), max_leaves=12).map(
                          lambda v: json.dumps(v).encode())))
def test_random_json(tmp_path_factory, text: bytes) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("fj")
    (tmp / "j.json").write_bytes(text)
    try:
        from_json(tmp / "j.json", tmp / "j.et")
    except TraceFormatError as exc:
        assert str(tmp / "j.json") in str(exc)
