"""The verbs end to end: analyze, diff, timeline, graph, report through ``etkit.cli.main``."""

from __future__ import annotations

import json

import pytest

from etkit.cli.main import main

from .builders import write_job, coll, comp


@pytest.fixture
def prefixes(tmp_path):
    before = write_job(tmp_path, {r: [comp(1, 100, 20, name="fwd"), coll(2, 120, 30, [1])] for r in range(2)}, "before")
    after = write_job(tmp_path, {r: [comp(1, 100, 10, name="fwd"), coll(2, 110, 20, [1]),
                                     comp(3, 110, 15, [1], "bwd")] for r in range(2)}, "after")
    return before, after


def test_analyze_prints_and_writes_json(prefixes, tmp_path, capsys):
    out = tmp_path / "a.json"
    assert main(["analyze", prefixes[1], "-q", "-j", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "times from: trace timestamps" in text and "== critical path: 30.0 us" in text
    data = json.loads(out.read_text())
    assert data["schedule_source"] == "trace timestamps"
    assert data["breakdown"]["ranks"]["0"]["overlapped_comm_ns"] == 15_000  # bwd hides 15 of 20 us
    assert data["critical_path"]["length_ns"] == 30_000
    assert data["comm"]["matrix_bytes"] == [[0, 1048576], [1048576, 0]]


def test_analyze_json_to_stdout_only(prefixes, capsys):
    assert main(["analyze", prefixes[0], "-q", "-j", "1", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["makespan_ns"] == 50_000


def test_diff(prefixes, tmp_path, capsys):
    out = tmp_path / "d.json"
    assert main(["diff", prefixes[0], prefixes[1], "-q", "-j", "1", "--json", str(out)]) == 0
    assert "diff" in capsys.readouterr().out
    d = json.loads(out.read_text())
    summary = {x["key"]: x for x in d["summary"]}
    assert summary["makespan_ns"]["a"] == 50_000 and summary["makespan_ns"]["b"] == 30_000
    nodes = {x["key"]: x for x in d["node_counts"]}
    assert nodes["COMP_NODE"]["delta"] == 2
    ops = {x["key"]: x for x in d["op_time"]}
    assert ops["fwd"]["delta"] == -20_000 and ops["bwd"]["ratio"] is None


def test_timeline_graph_report(prefixes, tmp_path, capsys):
    assert main(["timeline", prefixes[1], "-q", "-j", "1", "-o", str(tmp_path / "t.json")]) == 0
    assert len([e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"]) == 6
    assert main(["graph", f"{prefixes[1]}.0.et", "-o", str(tmp_path / "g.dot"), "--around", "1", "--depth", "1"]) == 0
    assert "3 nodes, 2 edges" in capsys.readouterr().out
    assert main(["report", prefixes[1], "-q", "-j", "1", "--baseline", prefixes[0], "-o", str(tmp_path / "r.html")]) == 0
    assert "diff: " in (tmp_path / "r.html").read_text()


def test_errors_are_one_line_exit_2(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("etkit analyze: ") and err.count("\n") == 1
    write_job(tmp_path, {0: [comp(1, 1, 1)]}, "one")
    assert main(["graph", str(tmp_path / "one.0.et"), "-o", str(tmp_path / "g.jpg")]) == 2
    assert main(["graph", str(tmp_path / "one.0.et"), "-o", str(tmp_path / "g.dot"), "--around", "99"]) == 2
