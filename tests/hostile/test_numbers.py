"""Numbers outside what a trace can hold are clean errors; sums of 64-bit columns never wrap around."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etkit.format.schema import CommType, GlobalMetadata, Node, NodeType
from etkit.format.stream import write_trace

from ..builders import coll, node, write_job
from .helpers import PP_JOB, assert_clean_error, cli


@pytest.mark.parametrize("argv, named", [
    (["generate", "llm", "--hidden", "1000000000000"], "64-bit"),
    (["generate", "llm", "--hidden", "100000000", "--layers", "2"], ""),
    (["generate", "collective", "--type", "all_reduce", "--ranks", "2", "--size", "100000000000000000000GiB"],
     "100000000000000000000GiB"),
])
def test_generators_refuse_numbers_a_trace_cannot_hold(tmp_path: Path, capsys, argv: list[str], named: str) -> None:  # type: ignore[no-untyped-def]
    done = cli(capsys, *argv, "-o", tmp_path / "g", "-q")
    assert_clean_error(done, named)
    assert not list(tmp_path.iterdir())


def _host_doc() -> dict:
    return json.loads((PP_JOB / "rank-0.et.json").read_text())


def _first_op(doc: dict) -> dict:
    return next(n for n in doc["nodes"] if n["name"].startswith("aten::") and n.get("attrs"))


def _set_attr(name: str, value: int):  # type: ignore[no-untyped-def]
    def mutate(doc: dict) -> str:
        op = _first_op(doc)
        for attr in op["attrs"]:
            if attr["name"] == name:
                attr["value"] = value
                break
        else:
            op["attrs"].append({"name": name, "type": "uint64", "value": value})
        return f"node {op['id']}"
    return mutate


def _set_header(name: str, value: int):  # type: ignore[no-untyped-def]
    def mutate(doc: dict) -> str:
        doc[name] = value
        return name
    return mutate


@pytest.mark.shared_data
@pytest.mark.parametrize("mutate, field", [
    (_set_attr("rf_id", 2**64), "rf_id"),
    (_set_attr("rf_id", 2**63), "rf_id"),
    (_set_attr("fw_parent", 2**63), "fw_parent"),
    (_set_attr("scope", 2**63), "scope"),
    (_set_attr("tid", 2**63), "tid"),
    (_set_header("start_ts", 2**64), "start_ts"),
    (_set_header("finish_ts", -1), "finish_ts"),
], ids=["rf_id-2^64", "rf_id-2^63", "fw_parent", "scope", "tid", "start_ts", "finish_ts"])
@pytest.mark.parametrize("verb", ["convert", "link"])
def test_host_integers_beyond_64_bits_are_one_error_naming_the_field(tmp_path: Path, capsys, verb, mutate, field) -> None:  # type: ignore[no-untyped-def]
    doc = _host_doc()
    mutate(doc)
    host = tmp_path / "rank-0.et.json"
    host.write_text(json.dumps(doc))
    kineto = PP_JOB / "rank-0.kineto.json"
    argv = (["convert", "pytorch", host, "--kineto", kineto, "-o", tmp_path / "c"] if verb == "convert" else
            ["link", "--host", host, "--kineto", kineto, "-o", tmp_path / "l.json"])
    assert_clean_error(cli(capsys, *argv), host, field)


@pytest.mark.shared_data
@pytest.mark.parametrize("value", [1e300, 1e17], ids=["1e300", "1e17"])
def test_a_kineto_duration_too_large_to_hold_is_one_error_naming_the_event(tmp_path: Path, capsys, value: float) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads((PP_JOB / "rank-0.kineto.json").read_text())
    index = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "cpu_op" and e.get("ph") == "X")
    doc["traceEvents"][index]["dur"] = value
    kineto = tmp_path / "rank-0.kineto.json"
    kineto.write_text(json.dumps(doc))
    done = cli(capsys, "convert", "pytorch", PP_JOB / "rank-0.et.json", "--kineto", kineto, "-o", tmp_path / "c")
    assert_clean_error(done, kineto, f"traceEvents[{index}]", "'dur'")


def test_info_sums_durations_past_64_bits_exactly(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    big = 2**63
    write_trace(tmp_path / "d.0.et", GlobalMetadata(version="1.0.0"),
                [Node(id=1, name="a", type=NodeType.COMP_NODE, duration_micros=big),
                 Node(id=2, name="b", type=NodeType.COMP_NODE, duration_micros=big),
                 Node(id=3, name="c", type=NodeType.COMP_NODE, duration_micros=5)])
    done = cli(capsys, "info", tmp_path / "d", "-j", "1", "-q", "--json", tmp_path / "i.json")
    assert done.rc == 0, done.err
    rank = json.loads((tmp_path / "i.json").read_text())["ranks"][0]
    assert rank["duration_us_total"] == 2 * big + 5
    text = cli(capsys, "info", tmp_path / "d", "-j", "1", "-q").out
    assert f"{2 * big + 5:,}" in text


def test_validate_flags_a_negative_comm_size(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix = write_job(tmp_path / "n", [[node(1), coll(2, CommType.ALL_REDUCE, -1, deps=[1])]] * 2)
    done = cli(capsys, "validate", prefix, "-j", "1", "-q", "--json", tmp_path / "v.json")
    assert done.rc == 1
    rules = {f["rule"] for f in json.loads((tmp_path / "v.json").read_text())["findings"]}
    assert "comm-negative-size" in rules
    assert "-2 B" not in cli(capsys, "validate", prefix, "-j", "1", "-q").out


def test_the_size_parser_is_exact_and_bounded() -> None:
    from etkit.errors import UsageError
    from etkit.units import parse_size

    assert parse_size("1.5KiB") == 1536
    assert parse_size("9223372036854775807") == 2**63 - 1
    with pytest.raises(UsageError, match="more than 8 EiB"):
        parse_size("9223372036854775808")
    with pytest.raises(UsageError, match="not a whole number"):
        parse_size("0.1B")
