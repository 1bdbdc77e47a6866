"""The one cross-rank matcher, and the verbs that call it agreeing on the same deliberately broken jobs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etkit.cli.main import main
from etkit.errors import EtkitError
from etkit.format.schema import CommType, NodeType
from etkit.model.groups import ProcessGroups
from etkit.model.job import load_job
from etkit.model.matching import CommRecord, comm_record, match_comm
from etkit.model.trace import MISSING
from etkit.replay import plan_job
from etkit.simulate import SimulationBlocked, simulate
from etkit.validate import validate

from ..builders import coll, node, recv, send, write_job
from ..simulate.helpers import net, system

AR, AG = CommType.ALL_REDUCE, CommType.ALL_GATHER


def _wild_send(node_id: int, dst: int, size: int):  # type: ignore[no-untyped-def]
    return node(node_id, NodeType.COMM_SEND_NODE, comm_src=0, comm_dst=dst, comm_size=size)  # no comm_tag: any tag


#: name -> (ranks' nodes, whether the ranks agree)
JOBS = {
    "clean": ([[coll(1, AR, 64), coll(2, AG, 128, deps=[1]), send(3, 0, 1, 32, tag=4, deps=[2])],
               [coll(1, AR, 64), coll(2, AG, 128, deps=[1]), recv(3, 0, 1, 32, tag=4, deps=[2])]], True),
    "wildcard-tag": ([[_wild_send(1, 1, 32)], [recv(1, 0, 1, 32, tag=5)]], True),
    "type": ([[coll(1, AR, 64)], [coll(1, AG, 64)]], False),
    "size": ([[coll(1, AR, 64)], [coll(1, AR, 256)]], False),
    "order": ([[coll(1, AR, 64), coll(2, AG, 128, deps=[1])], [coll(1, AG, 128), coll(2, AR, 64, deps=[1])]], False),
    "missing": ([[coll(1, AR, 64), coll(2, AR, 64, deps=[1])], [coll(1, AR, 64)]], False),
    "unmatched-send": ([[send(1, 0, 1, 32, tag=4)], [node(1, duration=1)]], False),
    "p2p-size": ([[send(1, 0, 1, 32, tag=4)], [recv(1, 0, 1, 64, tag=4)]], False),
}


def _verdicts(prefix: Path) -> tuple[bool, bool, bool]:
    """(validate passes, replay plans it, simulate runs it)."""
    validated = validate(prefix).ok
    try:
        plan_job(load_job(prefix), "comm")
        replayed = True
    except EtkitError:
        replayed = False
    try:
        simulate(str(prefix), net(("Ring", 2, 50.0, 500.0)), system())
        simulated = True
    except SimulationBlocked:
        simulated = False
    return validated, replayed, simulated


@pytest.mark.parametrize("name", sorted(JOBS))
def test_validate_replay_and_simulate_agree(tmp_path: Path, name: str) -> None:
    ranks, agree = JOBS[name]
    assert _verdicts(write_job(tmp_path / name, ranks)) == (agree, agree, agree)


def test_simulate_refuses_with_the_findings_validate_reports(tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "m", [[coll(1, AR, 64), coll(2, AR, 64)], [coll(1, AR, 32), coll(2, AG, 64)]])
    expected = [str(f) for f in validate(prefix).errors]
    assert expected == ["rank 1 node 2: [collective-mismatch] collective #2 on pg '0' is ALL_GATHER but rank 0 "
                        "issues ALL_REDUCE (node 2)"]
    with pytest.raises(SimulationBlocked) as info:
        simulate(str(prefix), net(("Ring", 2, 50.0, 500.0)), system())
    assert info.value.report.disagreements == expected
    assert "(allow_mismatch=True simulates the job anyway)" in str(info.value)  # the library's words


def test_simulate_cli_exits_1_on_disagreeing_ranks_and_runs_them_when_allowed(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix = write_job(tmp_path / "t", JOBS["type"][0])
    net_file = tmp_path / "net.yml"
    net_file.write_text("topology: [ Ring ]\nnpus_count: [ 2 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    argv = ["simulate", str(prefix), "--network", str(net_file), "-j", "1"]
    assert main([*argv, "-q"]) == 1
    err = capsys.readouterr().err
    assert "simulation refused (ranks disagree" in err and "rank 1 node 1: [collective-mismatch]" in err
    assert "(--allow-mismatch simulates the job anyway)" in err  # the CLI's
    assert main([*argv, "--allow-mismatch"]) == 0
    captured = capsys.readouterr()
    assert "makespan" in captured.out.lower()
    assert "collective #0 on group [0, 1] is ALL_GATHER but another member issued ALL_REDUCE" in captured.err
    assert main(["replay", str(prefix), "--mode", "comm", "-q"]) == 2  # refused before any process starts
    assert "[collective-mismatch]" in capsys.readouterr().err


def test_instances_and_pairs_follow_issue_order(tmp_path: Path) -> None:
    # rank 1's file lists its nodes out of id order: issue order is id order
    r0 = [coll(1, AR, 8), coll(2, AG, 16), send(3, 0, 1, 4, tag=1), send(4, 0, 1, 4, tag=2)]
    r1 = [recv(4, 0, 1, 4, tag=2), coll(2, AG, 16), coll(1, AR, 8), recv(3, 0, 1, 4, tag=1)]
    job = load_job(write_job(tmp_path / "o", [r0, r1]))
    found = match_comm({r: comm_record(t, r) for r, t in job.traces.items()}, job.groups, job.world_size)
    assert found.mismatches == []
    assert [(i.group, i.seq, i.members, i.expected) for i in found.instances] == [
        ("0", 0, ((0, 0), (1, 2)), 2), ("0", 1, ((0, 1), (1, 1)), 2)]
    assert found.pairs == [(0, 2, 1, 3), (0, 3, 1, 0)]
    # a caller's order (replay's walk order) is the issue order instead
    reversed_order = {r: np.arange(len(t))[::-1] for r, t in job.traces.items()}
    walked = match_comm({r: comm_record(t, r, reversed_order[r]) for r, t in job.traces.items()}, job.groups,
                        job.world_size)
    assert [m.rule for m in walked.mismatches] == ["collective-mismatch"]


def test_a_receive_without_source_or_tag_takes_any_send(tmp_path: Path) -> None:
    anywhere = node(1, NodeType.COMM_RECV_NODE, comm_dst=2, comm_size=8)  # no comm_src, no comm_tag
    job = load_job(write_job(tmp_path / "w", [[], [send(1, 1, 2, 8, tag=3)], [anywhere]]))
    found = match_comm({r: comm_record(t, r) for r, t in job.traces.items()}, job.groups, job.world_size)
    assert found.pairs == [(1, 0, 2, 0)] and found.unmatched == [] and found.mismatches == []


def _random_record(rng: np.random.Generator, rank: int, world: int) -> CommRecord:
    """A rank's communication with random peers (some missing or outside the job), tags (some missing), sizes."""
    def ends(n: int, base: int) -> tuple:
        peers = rng.integers(-1, world + 1, n)
        peers[rng.random(n) < 0.15] = MISSING
        tags = rng.integers(0, 3, n)
        tags[rng.random(n) < 0.3] = MISSING
        return (np.arange(n) + base, np.arange(n, dtype=np.uint64) + base, peers.astype(np.int64),
                tags.astype(np.int64), rng.choice([8, 16], n).astype(np.int64))

    nc = int(rng.integers(0, 5))
    return CommRecord(rank, np.arange(nc), np.arange(nc, dtype=np.uint64) + 1, rng.integers(0, 4, nc), ["", "0", "a", "b"],
                      rng.choice([0, 1, 2], nc).astype(np.int64), rng.choice([8, 16], nc).astype(np.int64),
                      *ends(int(rng.integers(0, 6)), 100), *ends(int(rng.integers(0, 6)), 200))


def test_every_message_is_paired_once_with_a_partner_it_accepts_or_listed_alone() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        world = int(rng.integers(1, 5))
        records = {r: _random_record(rng, r, world) for r in range(world)}
        groups = ProcessGroups.from_mapping({"a": list(range(min(2, world))), "b": [0, world - 1]})
        found = match_comm(records, groups, world)
        sends = {(r, int(row)): (int(peer), int(tag)) for r, rec in records.items()
                 for row, peer, tag in zip(rec.send_rows, rec.send_peer, rec.send_tag) if 0 <= peer < world}
        recvs = {(r, int(row)): (int(peer), int(tag)) for r, rec in records.items()
                 for row, peer, tag in zip(rec.recv_rows, rec.recv_peer, rec.recv_tag)
                 if peer == MISSING or 0 <= peer < world}
        ends_paired = [((s_rank, s_row), (r_rank, r_row)) for s_rank, s_row, r_rank, r_row in found.pairs]
        for (s_rank, s_row), (r_rank, r_row) in ends_paired:
            (dst, s_tag), (src, r_tag) = sends[(s_rank, s_row)], recvs[(r_rank, r_row)]
            assert dst == r_rank and src in (MISSING, s_rank) and (MISSING in (s_tag, r_tag) or s_tag == r_tag)
        paired = [e for pair in ends_paired for e in pair]
        assert len(paired) == len(set(paired))  # nobody is paired twice
        assert sorted(paired + found.unmatched) == sorted([*sends, *recvs])  # everybody is paired or listed
        lone = {(m.rank, m.node_id) for m in found.mismatches if m.rule.startswith("unmatched-")}
        assert len(lone) == len(found.unmatched)
        members = sorted(m for inst in found.instances for m in inst.members)
        assert members == sorted((r, int(row)) for r, rec in records.items() for row in rec.coll_rows)
