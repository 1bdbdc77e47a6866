"""Attributes keep their kind on read; numeric reads accept any integer kind."""

from __future__ import annotations

import itertools
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etkit.errors import ValueRangeError
from etkit.format.attrs import (
    CANONICAL_KINDS,
    attr_kind,
    attr_value,
    encode_attr,
    get_bool,
    get_int,
    get_str,
    make_attr,
)
from etkit.format.schema import ATTR_KINDS
from etkit.format.stream import open_trace


def test_canonical_kinds_for_well_known_names() -> None:
    assert attr_kind(make_attr("comm_size", 5)) == "int64_val"
    assert attr_kind(make_attr("tensor_size", 5)) == "uint64_val"
    assert attr_kind(make_attr("comm_src", 1)) == "int32_val"
    assert attr_kind(make_attr("is_cpu_op", False)) == "bool_val"
    assert attr_kind(make_attr("involved_dim", [True, False])) == "bool_list"
    assert attr_kind(make_attr("pg_name", "3")) == "string_val"
    assert CANONICAL_KINDS["num_ops"] == "int64_val"


def test_inferred_and_explicit_kinds() -> None:
    assert attr_kind(make_attr("x", 1.5)) == "double_val"
    assert attr_kind(make_attr("x", [1, 2])) == "int64_list"
    assert attr_kind(make_attr("x", 2**64 - 1)) == "uint64_val"
    assert attr_kind(make_attr("x", 7, kind="sfixed32_val")) == "sfixed32_val"
    with pytest.raises(ValueError):
        make_attr("x", 1, kind="nope")


@pytest.mark.parametrize("kind", ["int32_val", "int64_val", "uint32_val", "uint64_val", "sint32_val", "sint64_val",
                                  "fixed32_val", "fixed64_val", "sfixed32_val", "sfixed64_val"])
def test_get_int_accepts_every_integer_kind(kind: str) -> None:
    attrs = [make_attr("comm_size", 1234, kind=kind)]
    assert get_int(attrs, "comm_size") == 1234
    assert get_int(attrs, "absent", 9) == 9


def test_get_int_refuses_floats_and_reads_bools() -> None:
    with pytest.raises(TypeError):
        get_int([make_attr("num_ops", 1.0)], "num_ops")
    assert get_bool([make_attr("is_cpu_op", 0, kind="int32_val")], "is_cpu_op") is False
    assert get_str([make_attr("pg_name", 3, kind="int64_val")], "pg_name") == "3"


@pytest.mark.shared_data
def test_comm_size_read_from_old_uint64_files_and_new_int64_files(upstream: Path, tmp_path: Path) -> None:
    with tarfile.open(upstream / "astra-sim-astra-sim/inputs/workload/ASTRA-sim-2.0/onecomm_allreduce.tar") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".0.et"))
        tar.extract(member, tmp_path, filter="data")
    old = next(tmp_path.rglob("*.0.et"))
    with open_trace(old) as reader:
        [n] = list(reader)
    assert attr_kind(next(a for a in n.attr if a.name == "comm_size")) == "uint64_val"
    assert get_int(n.attr, "comm_size") == 65536
    new = upstream / "generated-by-upstream-chakra-21585d8/generator_npus2/ALL_REDUCE.0.et"
    with open_trace(new) as reader:
        nodes = list(reader)
    coll = next(n for n in nodes if get_int(n.attr, "comm_size") is not None)
    assert attr_kind(next(a for a in coll.attr if a.name == "comm_size")) == "int64_val"


# -- encode_attr: an attribute's bytes without protobuf --------------------------------------------------------

_INT_RANGES = {"int32": 31, "sint32": 31, "sfixed32": 31, "int64": 63, "sint64": 63, "sfixed64": 63}
_UINT_RANGES = {"uint32": 32, "fixed32": 32, "uint64": 64, "fixed64": 64}


def _values(scalar: str) -> st.SearchStrategy[Any]:
    """Plain Python values of ``scalar``, its edges included."""
    if scalar in _INT_RANGES:
        bits = _INT_RANGES[scalar]
        return st.one_of(st.integers(-(1 << bits), (1 << bits) - 1), st.sampled_from([0, -1, 1, -(1 << bits)]))
    if scalar in _UINT_RANGES:
        return st.integers(0, (1 << _UINT_RANGES[scalar]) - 1)
    if scalar == "float":
        return st.floats(width=32)
    return {"double": st.floats(), "bool": st.booleans(), "string": st.text(), "bytes": st.binary()}[scalar]


_NAMES = st.one_of(st.sampled_from(["", "comm_size", "rf_id", "kernel_name", "x" * 200]), st.text(max_size=20))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), kind=st.sampled_from(ATTR_KINDS), name=_NAMES)
def test_encode_attr_writes_protobufs_bytes_for_every_kind(data: st.DataObject, kind: str, name: str) -> None:
    scalar, _, form = kind.rpartition("_")
    values = _values(scalar)
    value = data.draw(values if form == "val" else st.lists(values, max_size=6))
    assert encode_attr(name, value, kind) == make_attr(name, value, kind).SerializeToString()


@pytest.mark.parametrize(("name", "value", "kind"), [
    ("rf_id", 7, None), ("is_cpu_op", True, None), ("pg_name", "0", None), ("inputs", ["a", "é"], None),
    ("involved_dim", [True, False], None), ("t", 1.5, None), ("b", b"\x00", None), ("n", 2**63, None),
    ("n", np.int64(5), "int64_val"), ("n", 3, "double_val"), ("n", 1, "bool_val"),
    ("n", 1e300, "float_val"), ("n", float("nan"), "float_val"), ("n", [float("-inf")], "float_list"),
    ("n", b"ab", "string_val"), ("n", (1, 2), "int32_list"), ("n", [], "string_list"), ("n", [], "int64_list"),
])
def test_encode_attr_agrees_with_protobuf_beyond_plain_values(name: str, value: Any, kind: str | None) -> None:
    """Values outside the plain-Python fast path (numpy integers, a bool for an integer, an int for a double)
    go through protobuf, to its bytes."""
    expected = make_attr(name, value, kind).SerializeToString()
    assert encode_attr(name, value, kind) == expected


@pytest.mark.parametrize(("value", "kind"), [(2**31, "int32_val"), (-1, "uint64_val"), ("\ud800", "string_val"),
                                             ([1, 2**40], "int32_list"), (1.5, "int64_val"), ("1", "int64_val"),
                                             (True, "int64_val"), (1.0, "float_list")])
def test_encode_attr_refuses_what_make_attr_refuses(value: Any, kind: str) -> None:
    with pytest.raises((ValueRangeError, TypeError, ValueError)) as theirs:
        make_attr("n", value, kind)
    with pytest.raises(type(theirs.value)):
        encode_attr("n", value, kind)


@pytest.mark.shared_data
def test_encode_attr_rewrites_every_attribute_of_the_upstream_vectors_to_their_bytes(upstream: Path) -> None:
    """Each attribute of the real ETs (Chakra's converters and generators, STAGE, param), encoded again from
    its name, value and kind, is its own bytes."""
    seen: set[bytes] = set()
    kinds: set[str] = set()
    for path in sorted(upstream.rglob("*.et"))[::3]:
        with open_trace(path) as reader:
            for node in itertools.islice(reader, 2000):
                for a in node.attr:
                    wire = a.SerializeToString()
                    if wire in seen or a.doc_string or attr_kind(a) is None:
                        continue
                    seen.add(wire)
                    kinds.add(str(attr_kind(a)))
                    assert encode_attr(a.name, attr_value(a), attr_kind(a)) == wire, (path, a)
    assert len(seen) > 500 and {"int64_val", "string_val", "bool_val", "uint64_val"} <= kinds, (len(seen), kinds)
