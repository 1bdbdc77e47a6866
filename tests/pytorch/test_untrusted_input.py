"""Trace contents are untrusted: malformed fields, mismatched pairs and odd arguments give one clear error
(or a warning), never a traceback or silently wrong output. Every case starts from a real shared trace."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from etkit.cli.main import main
from etkit.errors import EtkitError
from etkit.executor import SerialExecutor
from etkit.pytorch.host import load_host_trace
from etkit.pytorch.job import convert_files, convert_job
from etkit.pytorch.link import link_files

from ..conftest import PYTORCH_JOBS
from .raw import load_json

pytestmark = pytest.mark.shared_data
PP = PYTORCH_JOBS / "pp_sendrecv_ws2"
ROOT_PREFIX = "[pytorch|profiler|execution_"


def _first_cpu_op(doc):
    return next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "cpu_op" and e.get("ph") == "X")


def _set_event(field, value):
    def mutate(doc):
        i = _first_cpu_op(doc)
        event = doc["traceEvents"][i]
        if field.startswith("args."):
            event["args"][field[5:]] = value
        else:
            event[field] = value
        name = event["name"]
        return f"traceEvents[{i}]" + (f" ({name!r})" if isinstance(name, str) else ":")
    return mutate


def _set_header(field, value):
    def mutate(doc):
        if "." in field:
            outer, inner = field.split(".", 1)
            doc[outer][inner] = value
        else:
            doc[field] = value
        return None
    return mutate


@pytest.mark.parametrize("mutate, field", [
    (_set_event("dur", "abc"), "'dur'"),
    (_set_event("dur", -5.0), "'dur'"),
    (_set_event("ts", [1]), "'ts'"),
    (_set_event("tid", "main"), "'tid'"),
    (_set_event("pid", {"x": 1}), "'pid'"),
    (_set_event("args", "junk"), "'args'"),
    (_set_event("name", ["aten::mm"]), "'name'"),
    (_set_event("args.Record function id", "seven"), "'args.Record function id'"),
    (_set_event("args.External id", 1.5), "'args.External id'"),
    (_set_header("distributedInfo", "junk"), "'distributedInfo'"),
    (_set_header("distributedInfo.rank", "zero"), "'distributedInfo.rank'"),
    (_set_header("distributedInfo.pg_config", [{"pg_name": "0", "ranks": "all"}]), "'distributedInfo.pg_config[0].ranks'"),
    (_set_header("baseTimeNanoseconds", "x"), "'baseTimeNanoseconds'"),
])
@pytest.mark.parametrize("verb", ["link", "convert"])
def test_malformed_kineto_field_is_one_error_line(tmp_path, capsys, mutate, field, verb):
    doc = load_json(PP / "rank-0.kineto.json")
    event = mutate(doc)
    kineto = tmp_path / "rank-0.kineto.json"
    kineto.write_text(json.dumps(doc, indent=1))
    host = str(PP / "rank-0.et.json")
    argv = (["link", "--host", host, "--kineto", str(kineto), "-o", str(tmp_path / "l.json")] if verb == "link" else
            ["convert", "pytorch", host, "--kineto", str(kineto), "-o", str(tmp_path / "c")])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(kineto) in err and f"field {field}" in err
    if event is not None:
        assert event in err


def test_malformed_host_header_is_an_error(tmp_path):
    doc = load_json(PP / "rank-0.et.json")
    doc["pid"] = "x"
    path = tmp_path / "rank-0.et.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(EtkitError, match="field 'pid'"):
        load_host_trace(path, rank=0)


def test_traces_of_another_job_are_refused():
    with pytest.raises(EtkitError, match=r"not the same rank of one job \(host pid \d+, Kineto pid \d+\)"):
        link_files(PP / "rank-0.et.json", PYTORCH_JOBS / "ddp_mlp_ws2" / "rank-0.kineto.json")


def test_traces_of_another_rank_are_refused(tmp_path):
    with pytest.raises(EtkitError, match="host rank 0, Kineto distributedInfo rank 1"):
        convert_files(PP / "rank-0.et.json", tmp_path / "x", kineto=PP / "rank-1.kineto.json")


def test_world_size_mismatch_is_refused(tmp_path):
    doc = load_json(PP / "rank-0.kineto.json")
    doc["distributedInfo"]["world_size"] = 8
    kineto = tmp_path / "k.json"
    kineto.write_text(json.dumps(doc))
    with pytest.raises(EtkitError, match="host world size 2, Kineto world size 8"):
        link_files(PP / "rank-0.et.json", kineto, rank=0)


def test_collapsed_coverage_is_warned(tmp_path, capsys):
    """The same process's Kineto trace with most host ops missing (as if it covered other steps)."""
    doc = load_json(PP / "rank-0.kineto.json")
    cpu = [i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "cpu_op"]
    drop = set(cpu[: int(len(cpu) * 0.8)])
    doc["traceEvents"] = [e for i, e in enumerate(doc["traceEvents"]) if i not in drop]
    kineto = tmp_path / "rank-0.kineto.json"
    kineto.write_text(json.dumps(doc))
    assert main(["link", "--host", str(PP / "rank-0.et.json"), "--kineto", str(kineto), "-o",
                 str(tmp_path / "l.json")]) == 0
    out = capsys.readouterr().out
    assert "warning: only" in out and "host ops matched" in out
    linked = link_files(PP / "rank-0.et.json", PP / "rank-0.kineto.json", rank=0)
    assert linked.report.warnings == []  # the real pair links fully


def test_send_with_a_string_peer_names_rank_node_and_field(tmp_path):
    doc = load_json(PP / "rank-1.et.json")
    send = next(n for n in doc["nodes"] if n["name"] == "c10d::send")
    send["inputs"]["values"][2] = "zero"
    path = tmp_path / "rank-1.et.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(EtkitError) as err:
        convert_files(path, tmp_path / "x")
    message = str(err.value)
    assert "rank 1" in message and f"node {send['id']}" in message and "argument 2 (peer rank)" in message


def test_peer_outside_its_group_is_an_error(tmp_path):
    doc = load_json(PP / "rank-1.et.json")
    send = next(n for n in doc["nodes"] if n["name"] == "c10d::send")
    send["inputs"]["values"][2] = 5  # a 2-rank job
    path = tmp_path / "rank-1.et.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(EtkitError, match=r"peer rank 5 is outside process group '0' \(2 ranks\)"):
        convert_files(path, tmp_path / "x", kineto=PP / "rank-1.kineto.json")


def test_duplicate_node_ids_are_refused(tmp_path):
    doc = load_json(PP / "rank-0.et.json")
    doc["nodes"][7]["id"] = doc["nodes"][3]["id"]
    path = tmp_path / "rank-0.et.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(EtkitError, match=rf"node {doc['nodes'][3]['id']}: field 'id' is used twice"):
        load_host_trace(path)


def test_report_numbers_add_up(tmp_path, capsys):
    """host ops = linked + unlinked + roots, and ET nodes = host ops - folded + GPU nodes + added metadata;
    the host op and root counts are the raw traces' own."""
    report = convert_job(PP, tmp_path / "pp", executor=SerialExecutor())
    for rank in report.ranks:
        raw = load_json(PP / f"rank-{rank.rank}.et.json")["nodes"]
        assert rank.host_ops == len(raw)
        assert rank.roots == sum(1 for n in raw if n["name"].startswith(ROOT_PREFIX))
        assert rank.host_ops == rank.linked_ops + rank.unlinked_ops + rank.roots
        assert rank.nodes == rank.host_ops - rank.folded_ops + rank.gpu_nodes + rank.metadata_added
        # the only ops folded on gloo are the backend ops (one per c10d op here)
        assert rank.folded_ops == sum(1 for n in raw if n["name"].startswith("gloo:"))
    assert main(["link", "--host", str(PP / "rank-0.et.json"), "--kineto", str(PP / "rank-0.kineto.json"),
                 "-o", str(tmp_path / "l.json")]) == 0
    first = report.ranks[0]
    assert (f"{first.linked_ops} of {first.host_ops} host ops linked (rf_id), {first.unlinked_ops} unlinked, "
            f"{first.roots} synthetic roots") in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["convert", "pytorch", str(PP), "-o", "{tmp}/x", "-j", "0"], "-j/--workers"),
    (["convert", "pytorch", str(PP), "-o", "{tmp}/x", "-j", "-2"], "-j/--workers"),
    (["convert", "pytorch", str(PP), "-o", "{tmp}/x", "--kineto", str(PP / "rank-0.kineto.json")], "--kineto"),
    (["convert", "pytorch", str(PP), "-o", "{tmp}/x", "--rank", "1"], "--rank"),
])
def test_options_that_cannot_apply_are_refused(tmp_path, capsys, argv, needle):
    try:
        status = main([a.format(tmp=tmp_path) for a in argv])
    except SystemExit as stop:  # argparse's usage error
        status = stop.code
    assert status == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_unknown_names_are_counted_not_guessed():
    """Sanity of the independent reading used above: the shared pp job has exactly one c10d op per gloo op."""
    raw = load_json(PP / "rank-0.et.json")["nodes"]
    names = Counter(n["name"].split(":")[0] for n in raw if n["name"].startswith(("c10d::", "gloo:")))
    assert names["c10d"] == names["gloo"]
