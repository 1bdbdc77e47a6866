"""The verbs end to end: analyze, diff, timeline, graph, report through ``etkit.cli.main``."""

from __future__ import annotations

import json

import pytest

from etkit.cli.main import main

from .builders import coll, comp, write_job


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


def test_ranks_selects_ranks_and_bad_sets_are_one_line(tmp_path, capsys):
    prefix = write_job(tmp_path, {r: [comp(1, 100, 10 + r, name="fwd"), coll(2, 120, 5, [1])] for r in range(4)})
    out = tmp_path / "a.json"
    assert main(["analyze", prefix, "-q", "-j", "1", "--ranks", "1,3", "--json", str(out)]) == 0
    assert sorted(json.loads(out.read_text())["breakdown"]["ranks"]) == ["1", "3"]
    assert main(["timeline", prefix, "-q", "-j", "1", "--ranks", "0-1", "-o", str(tmp_path / "t.json")]) == 0
    pids = {e["pid"] for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"}
    assert pids == {0, 1}
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:
        main(["analyze", prefix, "--ranks", "3-1"])
    assert bad.value.code == 2 and "'3-1' is not a rank or a range" in capsys.readouterr().err
    assert main(["analyze", prefix, "-q", "--ranks", "9"]) == 2
    assert "--ranks 9 names none of its ranks (0..3)" in capsys.readouterr().err


@pytest.mark.shared_data
def test_a_kineto_trace_is_analysed_as_it_is_with_csv_tables(tmp_path, capsys):
    import csv

    from ..conftest import KINETO_TRACES

    trace = KINETO_TRACES["hta-nccl"]
    assert main(["analyze", str(trace), "-j", "1", "--csv", str(tmp_path / "csv"), "--top", "3"]) == 0
    captured = capsys.readouterr()
    assert "a Kineto trace, converted on the fly" in captured.err
    assert "== GPU (as HTA defines it" in captured.out and "wrote 20 tables" in captured.out
    with open(tmp_path / "csv" / "gpu_kernels.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and {"rank", "name", "kernel_type", "sum_ns"} <= set(rows[0])
    assert any(r["kernel_type"] == "COMMUNICATION" for r in rows)
    assert main(["report", str(KINETO_TRACES["hta-alexnet"]), "-q", "-j", "1", "-o", str(tmp_path / "r.html")]) == 0
    assert main(["diff", str(KINETO_TRACES["hta-compare-base"]), str(KINETO_TRACES["hta-compare-test"]), "-q",
                 "-j", "1"]) == 0
    assert "critical_path_nodes" in capsys.readouterr().out


def test_to_pandas_gives_every_table(prefixes):
    import pandas as pd  # the dev extra installs it (etkit itself does not need it)

    from etkit.analyze import analyze_job
    from etkit.executor import SerialExecutor
    from etkit.model.job import load_job

    a = analyze_job(load_job(prefixes[1], executor=SerialExecutor()))
    frames = a.to_pandas()
    assert set(frames) == {t.name for t in a.tables()}
    assert isinstance(frames["breakdown"], pd.DataFrame) and list(frames["breakdown"]["rank"]) == [0, 1]


def test_long_names_are_cut_in_the_middle_and_kept_whole_in_the_report_tooltip(tmp_path, capsys):
    import html

    name = "aten::" + "very_long_template_argument_" * 6 + "end_of_kernel_name"
    prefix = write_job(tmp_path, {r: [comp(1, 100, 20, name=name), coll(2, 120, 30, [1])] for r in range(2)})
    assert main(["analyze", prefix, "-q", "-j", "1"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("aten::"))
    shown = row.split()[0]
    assert "\u2026" in shown and len(shown) < len(name)
    head, tail = shown.split("\u2026")
    assert name.startswith(head) and name.endswith(tail) and tail.endswith("end_of_kernel_name")
    page = tmp_path / "r.html"
    assert main(["report", prefix, "-q", "-j", "1", "--ranks", "1", "-o", str(page)]) == 0
    text = html.unescape(page.read_text())
    assert f'title="{name}"' in text and "\u2026" in text
    assert "rank 1" in text and "rank 0" not in text  # --ranks draws the ranks it names only
