"""The vectorised decoder agrees with record-by-record protobuf parsing on every input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etkit.format.attrs import make_attr
from etkit.format.schema import ATTR_KINDS, GlobalMetadata, Node
from etkit.format.stream import open_trace, write_trace
from etkit.model.trace import _TraceBuilder, load_trace

COLUMNS = ["ids", "types", "start", "duration", "data_ptr", "data_deps", "ctrl_ptr", "ctrl_deps", "is_cpu_op",
           "comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "comm_priority", "num_ops", "tensor_size",
           "tid", "stream", "rec_len"]


def _slow(path: Path):  # type: ignore[no-untyped-def]
    with open_trace(path) as reader:
        return _TraceBuilder(str(path)).build(reader.metadata_record, reader.records_with_position())


def assert_same(path: Path) -> None:
    fast, slow = load_trace(path), _slow(path)
    for column in COLUMNS:
        assert np.array_equal(getattr(fast, column), getattr(slow, column)), (path, column)
    assert list(fast.names) == list(slow.names)
    assert list(fast.pg_names()) == list(slow.pg_names())
    assert list(fast.records()) == list(slow.records())


@pytest.mark.shared_data
def test_fast_and_slow_paths_agree_on_every_upstream_vector(upstream: Path) -> None:
    files = sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz")))
    for path in files:
        assert_same(path)


_INT_KINDS = [k for k in ATTR_KINDS if k.endswith("_val") and k.split("_")[0] in
              ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32", "sfixed64",
               "bool")]
_BOUNDS = {"int32": (-2**31, 2**31 - 1), "sint32": (-2**31, 2**31 - 1), "sfixed32": (-2**31, 2**31 - 1),
           "uint32": (0, 2**32 - 1), "fixed32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1),
           "sint64": (-2**63, 2**63 - 1), "sfixed64": (-2**63, 2**63 - 1), "uint64": (0, 2**64 - 1),
           "fixed64": (0, 2**64 - 1), "bool": (0, 1)}
_NAMES = ["tid", "stream", "comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "comm_priority", "num_ops",
          "tensor_size",
          "is_cpu_op", "pg_name", "rf_id", "comm_sizeX", "a_really_long_attribute_name_over_16"]


@st.composite
def attributes(draw):  # type: ignore[no-untyped-def]
    name = draw(st.sampled_from(_NAMES))
    choice = draw(st.sampled_from(_INT_KINDS + ["string_val", "double_val", "bool_list"]))
    if choice == "string_val":
        return make_attr(name, draw(st.text(max_size=5)), kind="string_val")
    if choice == "double_val":
        return make_attr(name, draw(st.floats(allow_nan=False)), kind="double_val")
    if choice == "bool_list":
        return make_attr(name, draw(st.lists(st.booleans(), max_size=3)), kind="bool_list")
    lo, hi = _BOUNDS[choice.split("_")[0]]
    value = draw(st.integers(lo, hi))
    return make_attr(name, bool(value) if choice == "bool_val" else value, kind=choice)


@st.composite
def nodes(draw):  # type: ignore[no-untyped-def]
    n = Node(id=draw(st.integers(0, 2**64 - 1)), name=draw(st.sampled_from(["", "a", "aten::mm", "x" * 30, "é"])),
             type=draw(st.integers(-3, 12)), start_time_micros=draw(st.integers(0, 2**64 - 1)),
             duration_micros=draw(st.integers(0, 2**40)))
    n.data_deps.extend(draw(st.lists(st.integers(0, 2**64 - 1), max_size=4)))
    n.ctrl_deps.extend(draw(st.lists(st.integers(0, 300), max_size=2)))
    n.attr.extend(draw(st.lists(attributes(), max_size=5)))
    if draw(st.booleans()):
        n.inputs.values = draw(st.text(max_size=8))
    if not n.SerializeToString():
        n.id = 1
    return n


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(nodes(), max_size=12))
def test_fast_and_slow_paths_agree_on_random_nodes(tmp_path_factory, node_list) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("col") / "r.et"
    write_trace(path, GlobalMetadata(version="v"), node_list)
    assert_same(path)
