"""A real 4-rank gloo job (barrier, reduce, gather, scatter, list-form all_gather, send/recv in subgroups),
recorded with etkit.pytorch.collect.profile in spawned ranks, converted, and every COMM node checked against the
raw host traces (read independently, tests/pytorch/raw.py) and the job's own plan (gloo_collectives_job.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from etkit.executor import SerialExecutor
from etkit.format.schema import CommType, NodeType
from etkit.model.trace import load_trace
from etkit.pytorch.job import convert_files, convert_job
from etkit.validate import validate

from . import gloo_collectives_job as plan
from .raw import host_collectives

pytestmark = [pytest.mark.torch, pytest.mark.slow]
JOB_SCRIPT = Path(plan.__file__)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("gloo_collectives")
    done = subprocess.run([sys.executable, str(JOB_SCRIPT), str(out / "raw")], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    report = convert_job(out / "raw", out / "et" / "job", executor=SerialExecutor(quiet=True))
    return out, report


def _comm_nodes(path):
    trace = load_trace(path)
    nodes = []
    for row in range(len(trace)):
        node_type = int(trace.types[row])
        if node_type not in (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
            continue
        node = trace.node(row)
        attrs = {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}
        kind = {NodeType.COMM_SEND_NODE: "SEND", NodeType.COMM_RECV_NODE: "RECV"}.get(
            node_type, CommType(attrs.get("comm_type", -1)).name if "comm_type" in attrs else "?")
        nodes.append({"kind": kind, "bytes": attrs["comm_size"], "pg": attrs["pg_name"], "start": node.start_time_micros,
                      "src": attrs.get("comm_src"), "dst": attrs.get("comm_dst"), "tag": attrs.get("comm_tag")})
    return sorted(nodes, key=lambda n: n["start"])


def _resolvable(rank: int, peer: int) -> bool:
    """Whether a send/recv's global peer follows from the groups alone (its group is not in a gloo trace):
    every group of ``rank`` where the group-local ``peer`` names another rank gives the same global rank."""
    groups = [list(range(plan.WORLD))] + [g for g in plan.SUBGROUPS if rank in g]
    return len({g[peer] for g in groups if peer < len(g) and g[peer] != rank}) == 1


def test_every_comm_node_matches_the_raw_trace_and_the_plan(job):
    out, report = job
    for rank_report in report.ranks:
        rank = rank_report.rank
        expected = plan.expected_calls(rank)
        raw = host_collectives(out / "raw" / f"rank-{rank}.et.json")
        assert [c["kind"] for c in raw] == [c["kind"] for c in expected]
        assert [c["bytes"] for c in raw] == [c["bytes"] for c in expected]
        got = _comm_nodes(rank_report.path)
        assert [n["kind"] for n in got] == [c["kind"] for c in expected], rank
        assert [n["bytes"] for n in got] == [c["bytes"] for c in expected], rank
        assert rank_report.comm_nodes == {c["kind"]: 1 for c in expected}
        for node, call, raw_call in zip(got, expected, raw):
            if call["kind"] not in ("SEND", "RECV"):
                assert node["pg"] == "0"  # world collectives; no gloo worker-thread guess puts them elsewhere
                continue
            assert node["tag"] == call["tag"] == raw_call["tag"]
            group = call["group"]
            assert raw_call["peer"] == group.index(call["dst"] if call["kind"] == "SEND" else call["src"])
            # group rank -> global rank, settled on the rank alone or against its partner's call
            assert (node["src"], node["dst"]) == (call["src"], call["dst"])
            peer_global = call["dst"] if call["kind"] == "SEND" else call["src"]
            fitting = {name for name, members in report.groups.items()
                       if rank in members and members[raw_call["peer"]] == peer_global}
            assert node["pg"] in fitting
            assert rank_report.peers_matched == (0 if _resolvable(rank, raw_call["peer"]) else 1)
            assert rank_report.peers_unmapped == 0
        assert rank_report.pg_assumed == len(expected) - 1  # and it says the collectives' group is assumed


def test_the_job_validates_and_groups_are_complete(job):
    out, report = job
    assert report.groups["0"] == list(range(plan.WORLD))
    assert sorted(v for k, v in report.groups.items() if k != "0") == sorted(plan.SUBGROUPS)
    assert validate(str(out / "et" / "job"), executor=SerialExecutor()).ok


def test_one_rank_alone_warns_about_the_peer_it_cannot_tell(job, tmp_path):
    """Without the other ranks, a send whose group two of its groups fit is written as the default group's
    reading and counted in a warning, never settled silently."""
    out, _ = job
    ambiguous = [r for r in range(plan.WORLD) for c in plan.expected_calls(r) if c["kind"] in ("SEND", "RECV")
                 and not _resolvable(r, c["group"].index(c["dst"] if c["kind"] == "SEND" else c["src"]))]
    assert ambiguous  # the plan has such a call (else this test would prove nothing)
    rank = ambiguous[0]
    report = convert_files(out / "raw" / f"rank-{rank}.et.json", tmp_path / "one",
                           kineto=out / "raw" / f"rank-{rank}.kineto.json").ranks[0]
    assert report.peers_unmapped == 1 and report.peers_matched == 0
    assert any("send/recv peers are ranks of a process group" in w for w in report.warnings)


def test_numbers_add_up(job):
    out, report = job
    for rank_report in report.ranks:
        assert rank_report.host_ops == rank_report.linked_ops + rank_report.unlinked_ops + rank_report.roots
