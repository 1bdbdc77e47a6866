"""Every way a job can fail to finish ends with a report (library) or exit 1 (CLI), never a hang."""

from __future__ import annotations

import pytest

from etkit.cli.main import main
from etkit.format.schema import CommType
from etkit.simulate import SimulationBlocked, simulate

from .helpers import coll, comp, job, net, p2p, system

RING4 = net(("Ring", 4, 50.0, 500.0))


def blocked(j) -> SimulationBlocked:
    with pytest.raises(SimulationBlocked) as info:
        simulate(j, RING4, system())
    return info.value


def test_unmatched_send() -> None:
    j = job({0: [p2p(1, "send", 64, dst=1, tag=4)], 1: [comp(1, 1)], 2: [], 3: []})
    report = blocked(j).report
    assert "unmatched send" in report.reason
    [node] = report.nodes
    assert (node.rank, node.node_id, node.kind) == (0, 1, "send")
    assert "RECV on rank 1" in node.waits_for and "tag 4" in node.waits_for


def test_recv_without_send_blocks_its_children() -> None:
    j = job({0: [p2p(1, "recv", 64, src=3), comp(2, 1, [1]), comp(3, 1, [2])], 1: [], 2: [], 3: []})
    report = blocked(j).report
    assert "receive without a send" in report.reason
    assert report.nodes[0].rank == 0 and "SEND from rank 3" in report.nodes[0].waits_for
    assert report.waiting_on_deps == {0: 2}


def test_collective_a_member_never_issues() -> None:
    per_rank = {r: [coll(1, CommType.ALL_REDUCE, 1024)] for r in range(3)}
    per_rank[3] = [comp(1, 5)]
    report = blocked(job(per_rank)).report
    assert report.reason == "collective not issued by every member"
    assert sorted(n.rank for n in report.nodes) == [0, 1, 2]
    assert all("rank(s) [3] never issued it" in n.waits_for for n in report.nodes)


def test_collectives_in_crossed_order_deadlock_on_the_comm_resource() -> None:
    groups = {"a": [0, 1], "b": [0, 1]}
    j = job({0: [coll(1, CommType.ALL_REDUCE, 64, pg="a"), coll(2, CommType.ALL_REDUCE, 64, pg="b")],
             1: [coll(1, CommType.ALL_REDUCE, 64, pg="b"), coll(2, CommType.ALL_REDUCE, 64, pg="a")],
             2: [], 3: []}, groups)
    report = blocked(j).report
    waits = {(n.rank, n.node_id): n.waits_for for n in report.nodes}
    assert "never issued it" in waits[(0, 1)] and "never issued it" in waits[(1, 1)]
    assert "comm resource, held by node 1" in waits[(0, 2)]


def test_dependency_cycle() -> None:
    j = job({0: [comp(1, 1, [2]), comp(2, 1, [1]), comp(3, 1)], 1: [], 2: [], 3: []})
    report = blocked(j).report
    assert report.reason == "dependency cycle"
    assert {n.node_id for n in report.nodes} == {1, 2}
    assert all("cycle" in n.waits_for for n in report.nodes)


def test_missing_dependency_unknown_group_and_unknown_comm_type_are_reported_up_front() -> None:
    j = job({0: [comp(1, 1, [99])], 1: [coll(1, CommType.ALL_REDUCE, 8, pg="nope")],
             2: [coll(1, 42, 8)], 3: [p2p(1, "send", 8)]})
    report = blocked(j).report
    assert report.reason == "invalid input"
    text = "\n".join(report.lines())
    assert "node 99, which is not in the trace" in text
    assert "process group 'nope'" in text
    assert "UNKNOWN(42)" in text
    assert "SEND without comm_dst" in text


def test_cli_exits_1_with_the_report(tmp_path, capsys) -> None:
    j = job({0: [p2p(1, "send", 64, dst=1)], 1: [], 2: [], 3: []})
    j.write(tmp_path / "bad")
    net_file = tmp_path / "net.yml"
    net_file.write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    out = tmp_path / "r.json"
    rc = main(["simulate", str(tmp_path / "bad"), "--network", str(net_file), "-q", "-j", "1", "--json", str(out)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "simulation blocked (unmatched send)" in err and "rank 0: node 1" in err
    import json

    assert json.loads(out.read_text())["blocked"]["blocked"][0]["rank"] == 0


def test_a_job_of_some_ranks_files_names_the_absent_members() -> None:
    """One rank's file of a bigger job (a Kineto trace of rank 1): its group and peers name rank 0, which is
    not in the job; the simulator reports them, it does not fail on a missing rank (was ``KeyError: 0``)."""
    j = job({1: [coll(1, CommType.ALL_REDUCE, 1024, pg="g"), p2p(2, "send", 64, dst=0, tag=1, deps=[1])],
             2: [coll(1, CommType.ALL_REDUCE, 1024, pg="g")]}, {"g": [0, 1, 2]})
    report = blocked(j).report
    assert report.reason == "invalid input"
    waits = {(n.rank, n.node_id): n.waits_for for n in report.nodes}
    assert "rank(s) [0] of group 'g', which are not in the job" in waits[(1, 1)]
    assert "rank 0, which is not in the job" in waits[(1, 2)]
