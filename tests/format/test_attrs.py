"""Attributes keep their kind on read; numeric reads accept any integer kind."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from etkit.format.attrs import CANONICAL_KINDS, attr_kind, get_bool, get_int, get_str, make_attr
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
