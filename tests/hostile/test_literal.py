"""Python-literal strings in traces are untrusted: every payload gives a value or one clean error, in every
verb that reads them (``process_group:init`` in an ET, the same in a host trace, IOInfo in replay)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from etkit.format.schema import CommType, NodeType

from ..builders import coll, node, write_job
from .helpers import PP_JOB, cli, small_job

#: Payloads that made the parser raise TypeError/ValueError (or recurse) before.
PAYLOADS = {
    "tuple-key-with-list": "{(1,[2]):3, 'pg_name': 1}",
    "escape-beyond-unicode": "['\\U7fffffff']",
    "lone-surrogate": "['\\udc80']",
    "5000-digit-int": "[" + "9" * 5000 + "]",
    "deep-nesting": "[" * 5000 + "]" * 5000,
    "wrapped-tuple-key": "['[{\"pg_name\": \"1\", \"ranks\": [0, 1]}]', {((1,), [2]): 3}]",
    "huge-float": "[1e999999, -1e999999, nan]",
}


def test_the_parser_raises_only_its_own_error() -> None:
    from etkit.literal import LiteralError, parse_literal

    for name, text in PAYLOADS.items():
        try:
            parse_literal(text, what="x.0.et: node 4 inputs.values")
        except LiteralError as exc:
            assert str(exc).startswith("x.0.et: node 4 inputs.values: ") and "\n" not in str(exc), name
        except Exception as exc:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{name}: {type(exc).__name__}: {exc}")


def _job_with_every_payload(folder: Path) -> Path:
    """Two ranks, each with one ``process_group:init`` METADATA node per payload (and a collective)."""
    nodes = [node(1, duration=10, start=100), coll(2, CommType.ALL_REDUCE, 4096, deps=[1], pg="0", duration=5, start=110)]
    for i, payload in enumerate(PAYLOADS.values()):
        init = node(10 + i, NodeType.METADATA_NODE, name="## process_group:init ##")
        init.inputs.values = payload
        nodes.append(init)
    return write_job(folder / "job", [nodes, nodes])


@pytest.mark.parametrize("verb", ["validate", "analyze", "simulate", "report", "timeline", "info"])
def test_et_verbs_read_hostile_process_group_payloads_cleanly(tmp_path: Path, capsys, verb: str) -> None:  # type: ignore[no-untyped-def]
    prefix = _job_with_every_payload(tmp_path)
    extra = {"simulate": ["--preset", "hgx-h100"], "report": ["-o", tmp_path / "r.html"],
             "timeline": ["-o", tmp_path / "t.json"]}.get(verb, [])
    workers = ["-j", "1"] if verb in ("validate", "analyze", "simulate", "info", "report", "timeline") else []
    done = cli(capsys, verb, prefix, *extra, *workers, "-q")
    assert "Traceback" not in done.err
    assert done.rc in (0, 1, 2), done.err
    if done.rc == 2:
        assert len(done.err.strip().splitlines()) == 1 and "job.0.et" in done.err, done.err


@pytest.mark.shared_data
@pytest.mark.parametrize("verb", ["convert", "link"])
def test_host_trace_verbs_read_hostile_payloads_cleanly(tmp_path: Path, capsys, verb: str) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads((PP_JOB / "rank-0.et.json").read_text())
    init = next(n for n in doc["nodes"] if "process_group:init" in n["name"])
    init["inputs"]["values"] = list(PAYLOADS.values())  # each tried in turn: every one must fail cleanly
    host = tmp_path / "rank-0.et.json"
    host.write_text(json.dumps(doc))
    kineto = PP_JOB / "rank-0.kineto.json"
    argv = (["convert", "pytorch", host, "--kineto", kineto, "-o", tmp_path / "c"] if verb == "convert" else
            ["link", "--host", host, "--kineto", kineto, "-o", tmp_path / "l.json"])
    done = cli(capsys, *argv)
    assert "Traceback" not in done.err
    assert done.rc in (0, 2), done.err
    if done.rc == 2:
        assert len(done.err.strip().splitlines()) == 1 and str(host) in done.err, done.err


def test_replay_planning_reads_hostile_io_info_cleanly(tmp_path: Path) -> None:
    """The all-to-all split sizes come from a node's IOInfo literals: one all-to-all per payload."""
    from etkit.executor import SerialExecutor
    from etkit.model.job import load_job
    from etkit.replay.plan import plan_job

    nodes = [node(1, duration=3)]
    for i, payload in enumerate(PAYLOADS.values()):
        a2a = coll(2 + i, CommType.ALL_TO_ALL, 4096, deps=[1 + i], pg="0")
        a2a.inputs.values = payload
        a2a.inputs.shapes = payload
        nodes.append(a2a)
    job = load_job(write_job(tmp_path / "j", [nodes, copy.deepcopy(nodes)]), executor=SerialExecutor())
    plan = plan_job(job, "comm")
    assert plan.world == 2 and sorted(plan.ranks) == [0, 1]


@pytest.mark.torch
def test_replay_op_parsing_refuses_hostile_io_info_as_unsupported() -> None:
    from etkit.replay.aten import UnsupportedOp, parse_op_call

    for payload in PAYLOADS.values():
        for values, shapes, types in ((payload, "[]", "[]"), ("[]", payload, "[]"), ("[]", "[]", payload)):
            try:
                parse_op_call("aten::mm", "", values, shapes, types)
            except UnsupportedOp:
                pass


def test_a_metadata_node_name_is_not_a_payload(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Sanity: the same job with a well-formed payload still declares its group."""
    init = json.dumps([{"pg_name": "7", "ranks": [0, 1]}])
    prefix = small_job(tmp_path, init=str([init]))
    from etkit.executor import SerialExecutor
    from etkit.model.job import load_job

    assert load_job(prefix, executor=SerialExecutor()).members("7") == (0, 1)
