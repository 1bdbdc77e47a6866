"""Validation finds every planted fault, names rank, node and rule, and passes real upstream jobs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etkit.errors import TraceFormatError
from etkit.executor import SerialExecutor
from etkit.format.schema import CommType, GlobalMetadata, Node, NodeType
from etkit.format.stream import TraceWriter, frame, write_trace
from etkit.model.groups import ProcessGroups
from etkit.model.job import Job
from etkit.model.trace import load_trace
from etkit.validate import validate, validate_job

from ..builders import coll, node, recv, send, write_job

AR, AG = CommType.ALL_REDUCE, CommType.ALL_GATHER


def _check(prefix: Path, **kw):  # type: ignore[no-untyped-def]
    return validate(prefix, executor=SerialExecutor(), **kw)


def _rules(report) -> set[tuple[int, int | None, str]]:  # type: ignore[no-untyped-def]
    return {(f.rank, f.node_id, f.rule) for f in report.findings}


def test_clean_job_passes(tmp_path: Path) -> None:
    rank = [node(1, duration=3), coll(2, AR, 1024, deps=[1]), node(3, deps=[2])]
    report = _check(write_job(tmp_path / "ok", [rank, rank]))
    assert report.ok and report.findings == [] and report.nodes == 6 and report.ranks == 2


def test_single_file_faults(tmp_path: Path) -> None:
    nodes = [
        node(1), node(1),  # duplicate id
        node(2, deps=[99]),  # missing dep
        node(3, deps=[3]),  # self dep
        node(4, deps=[1, 1]),  # duplicate dep (written raw below)
        node(5, deps=[6]), node(6, deps=[7]), node(7, deps=[5]),  # cycle
        Node(id=8, type=NodeType.COMM_COLL_NODE, name="c"),  # no comm_type, no comm_size
        coll(9, AR, 10, is_cpu_op=True),  # comm on cpu
        coll(10, 42, 10),  # unknown comm type
        Node(id=11, type=12, name="future"),  # unknown node type
        Node(id=12, type=NodeType.COMM_SEND_NODE, name="s"),  # send without peer
    ]
    with TraceWriter(tmp_path / "bad.0.et", GlobalMetadata()) as writer:
        for n in nodes:
            writer.write_record(n.SerializeToString())  # raw: keep the duplicate dep
    report = _check(tmp_path / "bad")
    found = _rules(report)
    for expected in [(0, 1, "duplicate-id"), (0, 2, "missing-dep"), (0, 3, "self-dep"), (0, 4, "duplicate-dep"),
                     (0, 5, "cycle"), (0, 8, "comm-missing-type"), (0, 8, "comm-missing-size"),
                     (0, 9, "comm-on-cpu"), (0, 10, "unknown-comm-type"), (0, 11, "unknown-node-type"),
                     (0, 12, "p2p-missing-peer")]:
        assert expected in found, expected
    cycle = next(f for f in report.findings if f.rule == "cycle")
    assert "5, 6, 7" in cycle.message
    assert not report.ok



def test_every_repeated_dep_is_reported_once_per_extra_copy(tmp_path: Path) -> None:
    nodes = [node(1), node(2), node(3, deps=[1, 2, 1, 2, 1], ctrl=[2, 2]), node(4, deps=[1], ctrl=[2, 1])]
    with TraceWriter(tmp_path / "dup.0.et", GlobalMetadata()) as writer:
        for n in nodes:
            writer.write_record(n.SerializeToString())  # raw: keep the repeated deps
    repeats = [f.message.split(" is listed")[0] for f in _check(tmp_path / "dup").findings if f.rule == "duplicate-dep"]
    # node 3: data 1 twice more, data 2 once more, ctrl 2 once more; node 4 repeats nothing
    assert sorted(repeats) == sorted(["data dep 1", "data dep 2", "data dep 1", "ctrl dep 2"])


def test_deps_on_later_nodes_are_not_a_cycle_unless_they_close_one(tmp_path: Path) -> None:
    forward = [node(1, deps=[2]), node(2, deps=[3]), node(3)]  # listed before what they depend on: no cycle
    assert _check(write_job(tmp_path / "fwd", [forward])).ok
    closed = [node(1, deps=[2]), node(2, ctrl=[3]), node(3, deps=[1])]
    [cycle] = [f for f in _check(write_job(tmp_path / "cyc", [closed])).findings if f.rule == "cycle"]
    assert cycle.node_id == 1 and "3 nodes" in cycle.message


def test_empty_node_record_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "e.0.et"
    write_trace(path, GlobalMetadata(), [node(1), node(2)])
    data = path.read_bytes()
    path.write_bytes(data + b"\x00")
    assert (0, 0, "empty-node") in _rules(_check(tmp_path / "e"))


def test_unmatched_send_and_size_mismatch(tmp_path: Path) -> None:
    r0 = [send(1, 0, 1, 100, tag=7), send(2, 0, 1, 50, tag=8)]
    r1 = [recv(1, 0, 1, 100, tag=7), recv(2, 0, 1, 60, tag=9)]
    found = _rules(_check(write_job(tmp_path / "p2p", [r0, r1])))
    assert (0, 2, "unmatched-send") in found
    assert (1, 2, "unmatched-recv") in found
    assert not any(rule == "p2p-size-mismatch" for _, _, rule in found)
    r1[1] = recv(2, 0, 1, 60, tag=8)
    found = _rules(_check(write_job(tmp_path / "p2q", [r0, r1])))
    assert (0, 2, "p2p-size-mismatch") in found


def test_collective_missing_on_one_rank(tmp_path: Path) -> None:
    full = [coll(1, AR, 64), coll(2, AG, 128, deps=[1]), coll(3, AR, 64, deps=[2])]
    short = full[:2]
    report = _check(write_job(tmp_path / "c", [full, full, short, full]))
    [finding] = [f for f in report.findings if f.rule == "collective-missing"]
    assert finding.rank == 2 and "ALL_REDUCE" in finding.message and "rank 0 node 3" in finding.message


def test_collective_type_and_size_mismatch(tmp_path: Path) -> None:
    a = [coll(1, AR, 64), coll(2, AR, 64)]
    b = [coll(1, AR, 64), coll(2, AG, 64)]
    c = [coll(1, AR, 32), coll(2, AR, 64)]
    found = _rules(_check(write_job(tmp_path / "m", [a, a, b, c])))
    assert (2, 2, "collective-mismatch") in found
    assert (3, 1, "collective-size-mismatch") in found


def test_uneven_all_to_all_is_only_a_warning(tmp_path: Path) -> None:
    report = _check(write_job(tmp_path / "a2a", [[coll(1, CommType.ALL_TO_ALL, 100)], [coll(1, CommType.ALL_TO_ALL, 80)]]))
    assert report.ok and [f.rule for f in report.warnings] == ["collective-size-mismatch"]


def test_process_subgroups_from_comm_groups_json(tmp_path: Path) -> None:
    ranks = [[coll(1, AR, 64, pg="1")], [coll(1, AR, 64, pg="1")], [coll(1, AR, 8, pg="2")], [coll(1, AR, 8, pg="2")]]
    prefix = write_job(tmp_path / "g", ranks)
    assert any(f.rule == "unknown-group" for f in _check(prefix).findings)
    ProcessGroups.from_mapping({"1": [0, 1], "2": [2, 3]}).write(f"{prefix}.comm_groups.json")
    assert _check(prefix).ok
    ProcessGroups.from_mapping({"1": [0, 1, 2], "2": [2, 3]}).write(f"{prefix}.comm_groups.json")
    assert (2, None, "collective-missing") in _rules(_check(prefix))
    ProcessGroups.from_mapping({"1": [0, 1], "2": [3]}).write(f"{prefix}.comm_groups.json")
    assert (2, 1, "not-in-group") in _rules(_check(prefix))


def test_groups_from_a_process_group_init_metadata_node(tmp_path: Path) -> None:
    meta = Node(id=1, name="## process_group:init ##", type=NodeType.METADATA_NODE)
    meta.inputs.values = str(['[{"pg_name": "0", "ranks": []}, {"pg_name": "5", "ranks": [1, 2]}]'])
    ranks = [[meta, coll(2, AR, 4, pg="0")], [meta, coll(2, AR, 4, pg="0"), coll(3, AR, 9, pg="5")],
             [meta, coll(2, AR, 4, pg="0"), coll(3, AR, 9, pg="5")]]
    assert _check(write_job(tmp_path / "m", ranks)).ok


@pytest.mark.shared_data
@pytest.mark.parametrize("prefix", [
    "astra-sim-astra-sim/examples/system/custom_collectives/custom_ring_allreduce_8npus_1MB/custom_allreduce",
    "astra-sim-astra-sim/examples/workload/microbenchmarks/all_reduce/16npus_1MB/all_reduce",
    "generated-by-upstream-chakra-21585d8/text_converter_npus4_passes1/DLRM_HybridParallel",
    "generated-by-upstream-chakra-21585d8/text_converter_npus4_passes1/MLP_HybridParallel_Data_Model",
])
def test_upstream_jobs_validate(upstream: Path, prefix: str) -> None:
    report = _check(upstream / prefix)
    assert report.ok, [str(f) for f in report.errors]


@pytest.mark.shared_data
def test_reference_generator_send_recv_cases_are_not_runnable(upstream: Path) -> None:
    # the reference generator writes p2p nodes without peers or sizes; etkit says so
    report = _check(upstream / "generated-by-upstream-chakra-21585d8/generator_npus2/one_comm_send_node")
    assert {"comm-missing-size", "p2p-missing-peer"} <= {f.rule for f in report.errors}


@pytest.mark.slow
def test_cycle_in_a_million_node_file_without_recursion_limits(tmp_path: Path) -> None:
    n = 1_000_000
    with TraceWriter(tmp_path / "big.0.et", GlobalMetadata()) as writer:
        template = Node(type=NodeType.COMP_NODE)
        for i in range(1, n + 1):
            template.id = i
            del template.data_deps[:]
            template.data_deps.append(i - 1 if i > 1 else n)  # one cycle through every node
            writer.write_record(template.SerializeToString())
    report = validate(tmp_path / "big", executor=SerialExecutor())
    [cycle] = [f for f in report.findings if f.rule == "cycle"]
    assert cycle.node_id == 1 and f"{n} nodes" in cycle.message


@pytest.mark.parametrize("min_batches", [1, 16])
def test_files_read_in_batches_give_each_rank_s_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         min_batches: int) -> None:
    """Ranks read together (one batch, or many) are checked as ranks read one by one; a truncated file in
    the middle of a batch is named in the one-line error."""
    monkeypatch.setattr("etkit.model.job.MIN_BATCHES", min_batches)
    good = [node(1, duration=3), coll(2, AR, 1024, deps=[1]), node(3, deps=[2])]
    ranks = [good] * 9 + [[node(1), node(1), node(2, deps=[99]), coll(3, AR, 512, deps=[2])]] + [good] * 6
    prefix = write_job(tmp_path / "j", ranks)
    report = _check(prefix)
    loaded = {rank: load_trace(f"{prefix}.{rank}.et", allow_empty=True) for rank in range(len(ranks))}
    one_by_one = validate_job(Job(loaded, ProcessGroups(), None))
    assert [str(f) for f in report.findings] == [str(f) for f in one_by_one.findings] and not report.ok
    assert (report.ranks, report.nodes) == (16, 3 * 15 + 4) and {f.rank for f in report.errors} == {9}
    bad = tmp_path / "j.12.et"
    bad.write_bytes(bad.read_bytes()[:-2])
    with pytest.raises(TraceFormatError, match="j.12.et"):
        _check(prefix)


def test_unknown_enum_values_are_found_by_table_as_by_membership() -> None:
    from etkit.validate import rank_rules

    for dtype, table, members in ((np.int32, rank_rules._KNOWN_TYPES, [int(t) for t in NodeType]),
                                  (np.int64, rank_rules._KNOWN_COMM, [int(c) for c in CommType])):
        info = np.iinfo(dtype)
        values = np.array([info.min, info.max, -1, *range(-2, len(table) + 3)], dtype=dtype)
        assert np.array_equal(rank_rules._unknown(values, table), ~np.isin(values, members))


def _one_fault_per_rank() -> list[list[Node | bytes]]:
    """Ranks of one job: clean ones (ids consecutive, sparse, lists not in order) and one per single-file rule
    broken, each rank's p2p nodes naming it (a ``b""`` entry: an empty record)."""
    meta = Node(id=1, name="## process_group:init ##", type=NodeType.METADATA_NODE)
    meta.inputs.values = str(['[{"pg_name": "0", "ranks": []}, {"pg_name": "5", "ranks": [1, 2]}]'])

    def clean(rank: int, ids: tuple[int, ...] = (1, 2, 3, 4)) -> list[Node | bytes]:
        a, b, c, d = ids
        return [node(a), coll(b, AR, 1024, deps=[a]), send(c, rank, (rank + 1) % 3, 64, tag=1, deps=[b, a]),
                recv(d, (rank + 2) % 3, rank, 64, tag=1, deps=[c])]

    faults: list[list[Node | bytes]] = [
        [meta, coll(2, AR, 4, pg="0"), coll(3, AR, 9, pg="5")],  # groups declared in the job
        [meta, coll(2, AR, 4, pg="0"), coll(3, AR, 9, pg="5"), coll(4, AG, 9, pg=""),
         coll(5, AR, 9, pg="7")],
        [b"", node(1), node(3)],  # empty-node (id 0, then rising)
        [node(1), node(1), node(2)],  # duplicate-id
        [node(2), node(1, deps=[2])],  # ids falling (no rule broken)
        [node(1), node(2, deps=[99])],  # missing-dep
        [node(10), node(20), node(40, deps=[30])],  # missing-dep, ids not consecutive
        [node(10), node(11, deps=[5])],  # missing-dep below the first id
        [node(1), node(2, deps=[2])],  # self-dep
        [node(1), node(2), node(3, deps=[2, 1, 2])],  # duplicate-dep
        [node(1), node(2), node(3, ctrl=[1, 1])],
        [node(1, deps=[2]), node(2, ctrl=[1])],  # cycle
        [node(1, deps=[2]), node(2)],  # a dep on a later node (no rule broken)
        [Node(id=1, type=12, name="future")],  # unknown-node-type
        [coll(1, 42, 10)],  # unknown-comm-type
        [Node(id=1, type=NodeType.COMM_COLL_NODE, name="c")],  # comm-missing-type and -size
        [node(1, NodeType.COMM_COLL_NODE, comm_size=4)],  # comm-missing-type
        [coll(1, AR, -5)],  # comm-negative-size
        [coll(1, AR, 10, is_cpu_op=True)],  # comm-on-cpu
        [Node(id=1, type=NodeType.COMM_SEND_NODE, name="s")],  # p2p-missing-peer
        [node(1, NodeType.COMM_SEND_NODE, comm_tag=1, comm_size=4)],
        [node(1, NodeType.COMM_COLL_NODE, comm_type=int(AR))],  # comm-missing-size
        [node(1, NodeType.COMM_RECV_NODE, comm_tag=1, comm_size=4)],
        [node(1, NodeType.COMM_SEND_NODE, comm_dst=1, comm_size=4)],  # p2p-missing-tag
        [send(1, 0, 1, 8, tag=1)],  # p2p-wrong-self (but on rank 0)
        [recv(1, 1, 0, 8, tag=1)],
    ]
    ranks: list[list[Node | bytes]] = [clean(0), clean(1, (10, 20, 30, 50)), clean(2, (5, 6, 7, 8))]
    for fault in faults:
        ranks.extend([fault, clean(len(ranks) + 1)])
    return ranks


def test_ranks_checked_together_find_what_the_rules_find_rank_by_rank(tmp_path: Path) -> None:
    """validate() of a job whose files are decoded together (its rules run only where quiet_files cannot clear a
    file; its communication records and groups from the joined columns) says what the rules and comm_record
    say of each file alone (validate_job of the files loaded one by one)."""
    from etkit.model.matching import comm_record, comm_records
    from etkit.model.trace import load_batches
    from etkit.validate import RULE_ATTRS, validate_trace
    from etkit.validate.rank_rules import quiet_files

    ranks = _one_fault_per_rank()
    for rank, nodes in enumerate(ranks):  # framed here: TraceWriter refuses an empty record
        records = [GlobalMetadata().SerializeToString(), *(n if isinstance(n, bytes) else n.SerializeToString()
                                                           for n in nodes)]
        (tmp_path / f"j.{rank}.et").write_bytes(b"".join(map(frame, records)))
    paths = [str(tmp_path / f"j.{rank}.et") for rank in range(len(ranks))]
    loaded = {rank: load_trace(path, allow_empty=True) for rank, path in enumerate(paths)}
    [batch] = load_batches(paths, allow_empty=True, names=False, attrs=RULE_ATTRS)
    assert batch.joint
    alone = [validate_trace(loaded[rank], rank) for rank in range(len(ranks))]
    quiet = quiet_files(batch, list(range(len(ranks)))).tolist()
    assert all(not found for ok, found in zip(quiet, alone) if ok)  # never cleared where a rule finds something
    assert quiet[:3] + quiet[4::2] == [True] * 29  # and cleared the clean ones (the faults on odd ranks from 3)
    assert quiet[3::2] == [True] * 2 + [False] * 24
    for mine, theirs in zip(comm_records(batch, list(range(len(ranks)))), (comm_record(t, r) for r, t in loaded.items())):
        for name in ("coll_rows", "coll_ids", "coll_type", "coll_size", "send_rows", "send_ids", "send_peer",
                     "send_tag", "send_size", "recv_rows", "recv_ids", "recv_peer", "recv_tag", "recv_size"):
            assert getattr(mine, name).tolist() == getattr(theirs, name).tolist(), name
        assert ([mine.pg_table[i] for i in mine.coll_pg_idx] == [theirs.pg_table[i] for i in theirs.coll_pg_idx])
    report = _check(tmp_path / "j")
    one_by_one = validate_job(Job(loaded, ProcessGroups(), None))
    assert [str(f) for f in report.findings] == [str(f) for f in one_by_one.findings]
    assert {f.rule for f in report.findings} >= {"empty-node", "duplicate-id", "missing-dep", "self-dep", "duplicate-dep",
                                                 "cycle", "unknown-node-type", "unknown-comm-type", "comm-missing-type",
                                                 "comm-missing-size", "comm-negative-size", "comm-on-cpu",
                                                 "p2p-missing-peer", "p2p-missing-tag", "p2p-wrong-self", "unknown-group"}
