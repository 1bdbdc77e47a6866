"""``etkit.export.astra_sim`` on constructed jobs: what each rank's file becomes, and what it refuses.

These need neither ASTRA-sim nor shared data: they read the export back with etkit and compare it with
the source, and ``etkit simulate`` of both (tests/export/test_astra.py runs the real ASTRA-sim).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from etkit.errors import EtkitError
from etkit.executor import SerialExecutor
from etkit.export import ExportError, astra_sim
from etkit.export.rewrite import END_NODE_NAME
from etkit.format.schema import CommType, NodeType
from etkit.model.job import load_job
from etkit.model.trace import MISSING, load_trace
from etkit.simulate import simulate
from etkit.simulate.config import Dimension, NetworkConfig, SystemConfig
from tests.builders import coll, node, recv, send, write_job

RING4 = NetworkConfig((Dimension("Ring", 4, 50.0, 500.0),))
SYSTEM = SystemConfig(preferred_dataset_splits=4)


def export(src: Path, out: Path, **kw):
    kw.setdefault("executor", SerialExecutor())
    return astra_sim(src, out, **kw)


def by_id(trace) -> dict[int, int]:
    return {int(i): r for r, i in enumerate(trace.ids.tolist())}


def finishes(prefix: Path, network: NetworkConfig = RING4, system: SystemConfig = SYSTEM, **kw) -> dict[int, float]:
    return {r: f.finish_ns for r, f in simulate(str(prefix), network, system, **kw).ranks.items()}


def test_metadata_and_invalid_nodes_go_and_their_children_wait_for_their_parents(tmp_path: Path) -> None:
    # 1 -> METADATA 2 -> INVALID 3 -> 4 (data), and 5 (on the CPU) waits on 2 by a ctrl dep
    ranks = [[node(1, duration=3), node(2, NodeType.METADATA_NODE, deps=[1]), node(3, NodeType.INVALID_NODE, deps=[2]),
              node(4, deps=[3], duration=2), node(5, ctrl=[2], duration=1, is_cpu_op=True),
              coll(6, CommType.ALL_REDUCE, 4096, deps=[4])] for _ in range(2)]
    src = write_job(tmp_path / "src", ranks)
    done = export(src, tmp_path / "out")
    trace = load_trace(tmp_path / "out.0.et")
    rows = by_id(trace)
    assert sorted(rows) == [1, 4, 5, 6, 7]  # 7: the node that ends a rank with CPU ops (ASTRA-sim's statistics)
    assert trace.name(rows[7]) == END_NODE_NAME and sorted(trace.deps_of(rows[7]).tolist()) == [5, 6]
    assert trace.deps_of(rows[4]).tolist() == [1]
    assert trace.deps_of(rows[5], "ctrl").tolist() == [1] and not len(trace.deps_of(rows[5]))
    assert done.changes["METADATA nodes dropped"] == 2 and done.changes["INVALID nodes dropped"] == 2
    # the same as the job written without them by hand (ASTRA-sim strands what follows an INVALID node
    # until another node ends; etkit's engine also lets such nodes wait for the next event)
    by_hand = write_job(tmp_path / "hand", [[node(1, duration=3), node(4, deps=[1], duration=2),
                                             node(5, ctrl=[1], duration=1, is_cpu_op=True),
                                             coll(6, CommType.ALL_REDUCE, 4096, deps=[4])] for _ in range(2)])
    assert finishes(tmp_path / "out") == {r: t + 1 for r, t in finishes(by_hand).items()}  # + the end node's 1 ns


def test_groups_are_numbered_from_one_and_the_whole_machine_is_the_default_group(tmp_path: Path) -> None:
    def rank(r: int) -> list:
        half = "tp0" if r < 2 else "tp1"
        return [coll(1, CommType.ALL_REDUCE, 1 << 16, pg="0"), coll(2, CommType.ALL_GATHER, 1 << 12, pg=half, deps=[1]),
                coll(3, CommType.ALL_REDUCE, 1 << 12, pg="7" if r % 2 == 0 else "odd", deps=[2]),
                coll(4, CommType.ALL_REDUCE, 1 << 12, pg=f"solo{r}", deps=[3])]
    src = write_job(tmp_path / "src", [rank(r) for r in range(4)])
    (tmp_path / "src.comm_groups.json").write_text(json.dumps(
        {"0": [0, 1, 2, 3], "tp0": [0, 1], "tp1": [2, 3], "7": [0, 2], "odd": [1, 3], **{f"solo{r}": [r] for r in range(4)}}))
    done = export(src, tmp_path / "out")
    groups = json.loads(Path(done.comm_groups).read_text())
    # "7" kept, the others numbered from 1 in name order, one-rank groups gone, "0" (everyone) the default group
    assert groups == {"1": [1, 3], "2": [0, 1], "3": [2, 3], "7": [0, 2]}
    trace = load_trace(tmp_path / "out.2.et")
    assert trace.pg_names().tolist() == ["", "3", "7"]
    assert done.changes["single-rank collectives dropped"] == 4
    assert finishes(tmp_path / "out") == finishes(src)


def test_a_bigger_network_gets_idle_ranks_and_the_job_group_an_id(tmp_path: Path) -> None:
    src = write_job(tmp_path / "src", [[coll(1, CommType.ALL_REDUCE, 1 << 20)] for _ in range(2)])
    done = export(src, tmp_path / "out", network=RING4, system=SYSTEM)
    assert done.ranks == 4 and done.job_ranks == 2
    assert json.loads(Path(done.comm_groups).read_text()) == {"1": [0, 1]}
    job = load_job(tmp_path / "out", executor=SerialExecutor())
    assert [len(job.traces[r]) for r in range(4)] == [1, 1, 1, 1]
    assert job.traces[3].name(0) == "etkit export: idle rank"
    ours, theirs = finishes(tmp_path / "out"), finishes(src)
    assert [ours[r] for r in (0, 1)] == [theirs[r] for r in (0, 1)]
    # the written network is ASTRA-sim's: one NPU per rank file
    assert Path(done.network).read_text().splitlines()[:2] == ["topology: [ Ring ]", "npus_count: [ 4 ]"]


def test_unsupported_collectives_become_what_etkit_simulates_in_their_place(tmp_path: Path) -> None:
    size = 1 << 20
    kinds = [CommType.BROADCAST, CommType.BARRIER, CommType.REDUCE, CommType.GATHER, CommType.SCATTER,
             CommType.REDUCE_SCATTER_BLOCK]
    ranks = [[coll(i + 1, kind, size, deps=[i] if i else []) for i, kind in enumerate(kinds)]
             + [node(len(kinds) + 1, deps=[1], duration=1)] for _ in range(4)]
    src = write_job(tmp_path / "src", ranks)
    done = export(src, tmp_path / "out")
    trace = load_trace(tmp_path / "out.1.et")
    rows = by_id(trace)
    written = [(int(trace.comm_type[r]), int(trace.comm_size[r])) for r in range(len(trace)) if trace.types[r] == NodeType.COMM_COLL_NODE]
    quarter = size // 4
    assert written == [(CommType.ALL_GATHER, quarter), (CommType.ALL_GATHER, quarter), (CommType.ALL_REDUCE, 0),
                       (CommType.ALL_REDUCE, size), (CommType.ALL_GATHER, size), (CommType.ALL_GATHER, quarter),
                       (CommType.REDUCE_SCATTER, size)]
    second = max(rows)  # the broadcast's second half: a fresh id after the first half
    assert trace.deps_of(rows[second]).tolist() == [1]
    assert trace.deps_of(rows[2]).tolist() == [second]  # what waited on the broadcast waits on both halves
    assert trace.deps_of(rows[len(kinds) + 1]).tolist() == [second]
    assert done.changes["BROADCAST written as ALL_GATHER + ALL_GATHER"] == 4
    assert finishes(tmp_path / "out") == finishes(src)


def test_uneven_collective_sizes_become_the_largest_member_s(tmp_path: Path) -> None:
    src = write_job(tmp_path / "src", [[coll(1, CommType.ALL_TO_ALL, 1000 + 64 * r), coll(2, CommType.ALL_REDUCE, 4096, deps=[1])]
                                       for r in range(4)])
    done = export(src, tmp_path / "out")
    job = load_job(tmp_path / "out", executor=SerialExecutor())
    assert {int(job.traces[r].comm_size[0]) for r in range(4)} == {1000 + 64 * 3}
    assert done.changes["collective sizes equalised"] == 3
    assert finishes(tmp_path / "out") == finishes(src)


def test_messages_get_their_source_tag_and_size(tmp_path: Path) -> None:
    # rank 0 sends 0 bytes, then 2 KiB; rank 1's recvs name no source, expect other sizes, carry no tag
    untagged_recv = node(1, NodeType.COMM_RECV_NODE, comm_dst=1, comm_size=16)
    later = node(2, NodeType.COMM_RECV_NODE, deps=[1], comm_dst=1, comm_size=0)
    untagged_send = node(2, NodeType.COMM_SEND_NODE, deps=[1], comm_dst=1, comm_size=2048)
    src = write_job(tmp_path / "src", [[send(1, 0, 1, 0, tag=0), untagged_send], [untagged_recv, later]])
    done = export(src, tmp_path / "out")
    sent, got = load_trace(tmp_path / "out.0.et"), load_trace(tmp_path / "out.1.et")
    assert sent.comm_size.tolist() == [1, 2048] and sent.comm_tag.tolist() == [0, 0] and sent.comm_src.tolist() == [0, 0]
    assert got.comm_src.tolist() == [0, 0] and got.comm_dst.tolist() == [1, 1] and got.comm_tag.tolist() == [0, 0]
    assert got.comm_size.tolist() == [1, 2048]
    assert done.changes["RECV sources derived"] == 2 and done.changes["comm_tag 0 added"] == 3
    # the source's sizes disagree (simulate refuses it unless allowed); the export carries the sender's
    assert finishes(tmp_path / "out") == pytest.approx(finishes(src, allow_mismatch=True), abs=1.0)


def test_repeated_dependencies_are_written_once(tmp_path: Path) -> None:
    n = node(2, deps=[1], duration=1)
    n.data_deps.append(1)
    src = write_job(tmp_path / "src", [[node(1, duration=1), n] for _ in range(2)])
    from etkit.format.stream import TraceWriter  # write_trace would drop the repeat itself
    for r in range(2):
        with TraceWriter(tmp_path / f"src.{r}.et") as w:
            w.write_record(node(1, duration=1).SerializeToString())
            w.write_record(n.SerializeToString())
    export(src, tmp_path / "out")
    assert load_trace(tmp_path / "out.0.et").deps_of(1).tolist() == [1]


def test_a_measured_trace_is_written_as_etkit_replays_it(tmp_path: Path) -> None:
    # one thread: op 1 (10 us recorded) starts at 100, the all-reduce at 130, op 3 only after it ended
    ranks = [[node(1, start=100, duration=10, is_cpu_op=True, tid=1),
              coll(2, CommType.ALL_REDUCE, 1 << 20, deps=[1], start=130, duration=400, tid=1),
              node(3, deps=[1], start=560, duration=5, is_cpu_op=True, tid=1)] for _ in range(2)]
    src = write_job(tmp_path / "src", ranks)
    export(src, tmp_path / "out")
    trace = load_trace(tmp_path / "out.0.et")
    assert not trace.start.any()  # replayed as it stands: no start time left to re-derive gaps from
    assert trace.duration.tolist()[0] == 30  # op 1 lasts until the thread's next call (its measured gap)
    assert trace.deps_of(2, "ctrl").tolist() == [2]  # op 3 started once the all-reduce had ended
    network = NetworkConfig((Dimension("Ring", 2, 50.0, 500.0),))
    assert finishes(tmp_path / "out", network) == {r: t + 1 for r, t in finishes(src, network).items()}  # end node


def test_an_older_export_is_replaced_as_a_whole(tmp_path: Path) -> None:
    four = write_job(tmp_path / "four", [[coll(1, CommType.ALL_REDUCE, 4096)] for _ in range(4)])
    two = write_job(tmp_path / "two", [[coll(1, CommType.ALL_REDUCE, 4096)] for _ in range(2)])
    export(four, tmp_path / "out")
    export(two, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.glob("out.*")) == ["out.0.et", "out.1.et", "out.comm_groups.json"]


def _refused(tmp_path: Path, ranks: list, *, groups: dict | None = None) -> str:
    src = write_job(tmp_path / "src", ranks)
    if groups is not None:
        (tmp_path / "src.comm_groups.json").write_text(json.dumps(groups))
    (tmp_path / "out.0.et").write_bytes(b"older")
    with pytest.raises(ExportError) as info:
        export(src, tmp_path / "out")
    assert (tmp_path / "out.0.et").read_bytes() == b"older"  # nothing half-written
    assert isinstance(info.value, EtkitError) and "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("case, ranks, expected", [
    ("unmatched send", [[send(1, 0, 1, 64, tag=3)], [node(1)]],
     "rank 0 node 1: SEND to rank 1 tag 3 has no RECV on rank 1"),
    ("unmatched recv", [[node(1)], [recv(5, 0, 1, 64, tag=3)]],
     "rank 1 node 5: RECV from rank 0 tag 3 has no SEND on rank 0"),
    ("lone sends: the first is paired, five named per channel",
     [[send(i, 0, 1, 64, tag=3) for i in range(1, 8)], [recv(1, 0, 1, 64, tag=3)]],
     "rank 0 node 2: SEND to rank 1 tag 3 has no RECV on rank 1 (ASTRA-sim would wait for it forever) (and 4 more;"),
    ("recv from outside the job", [[node(1)], [recv(5, 7, 1, 64, tag=3)]],
     "rank 1 node 5: RECV from rank 7, which is not in the job (ranks 0..1)"),
    ("two senders", [[send(1, 0, 2, 64)], [send(1, 1, 2, 64)], [node(1, NodeType.COMM_RECV_NODE, comm_dst=2, comm_size=64, comm_tag=0)]],
     "rank 2 node 1: RECV without comm_src and ranks [0, 1] send to it"),
    ("missing collective", [[coll(1, CommType.ALL_REDUCE, 64), coll(2, CommType.ALL_REDUCE, 64, deps=[1])],
                            [coll(1, CommType.ALL_REDUCE, 64)]], "[collective-missing]"),
    ("type mismatch", [[coll(1, CommType.ALL_REDUCE, 64)], [coll(7, CommType.ALL_GATHER, 64)]],
     "rank 1 node 7: [collective-mismatch]"),
    ("dangling dep", [[node(1, deps=[9])], [node(1)]], "rank 0 node 1: [missing-dep]"),
    ("cycle", [[node(1, deps=[2]), node(2, deps=[1])], [node(1)]], "[cycle]"),
    ("send as another rank", [[send(1, 1, 1, 64)], [recv(1, 1, 1, 64)]], "rank 0 node 1: [p2p-wrong-self]"),
])
def test_what_astra_sim_would_refuse_or_hang_on_is_one_error_naming_rank_and_node(tmp_path: Path, case: str, ranks: list,
                                                                                  expected: str) -> None:
    message = _refused(tmp_path, ranks)
    assert "cannot export for ASTRA-sim" in message and expected in message, message


def test_an_unknown_group_is_refused(tmp_path: Path) -> None:
    message = _refused(tmp_path, [[coll(1, CommType.ALL_REDUCE, 64, pg="tp")] for _ in range(2)])
    assert "[unknown-group]" in message and "'tp'" in message


def test_the_congestion_aware_backend_takes_one_dimension(tmp_path: Path) -> None:
    src = write_job(tmp_path / "src", [[coll(1, CommType.ALL_REDUCE, 64)] for _ in range(4)])
    two_d = NetworkConfig((Dimension("Switch", 2, 50.0, 500.0), Dimension("Switch", 2, 25.0, 900.0)))
    with pytest.raises(ExportError, match="one dimension"):
        export(src, tmp_path / "out", network=two_d, system=SYSTEM, congestion="aware")


def test_the_written_system_names_an_algorithm_per_dimension(tmp_path: Path) -> None:
    src = write_job(tmp_path / "src", [[coll(1, CommType.ALL_REDUCE, 1 << 20)] for _ in range(8)])
    # a dimension of one NPU goes, with its algorithm entry (ASTRA-sim refuses npus_count 1)
    network = NetworkConfig((Dimension("Switch", 4, 50.0, 500.0), Dimension("Ring", 1, 25.0, 700.0),
                             Dimension("Ring", 2, 25.0, 900.0)))
    system = SystemConfig(all_reduce=("direct", "halvingDoubling", "ring"), all_to_all=("direct",))
    done = export(src, tmp_path / "out", network=network, system=system)
    written = json.loads(Path(done.system).read_text())
    assert written["all-reduce-implementation"] == ["direct", "ring"]
    assert written["all-to-all-implementation"] == ["direct", "direct"]
    assert Path(done.network).read_text().splitlines()[1] == "npus_count: [ 4, 2 ]"
    assert json.loads(Path(done.memory).read_text())["memory-type"] == "PER_NPU_MEMORY_EXPANSION"
    assert done.command.split()[0] == "AstraSim_Analytical_Congestion_Unaware"
    assert f"--comm-group-configuration={done.comm_groups}" in done.command


def test_a_small_all_gather_grows_to_the_dataset_splits(tmp_path: Path) -> None:
    src = write_job(tmp_path / "src", [[coll(1, CommType.BROADCAST, 4)] for _ in range(2)])
    network = NetworkConfig((Dimension("Ring", 2, 50.0, 500.0),))
    done = export(src, tmp_path / "out", network=network, system=SYSTEM)
    trace = load_trace(tmp_path / "out.0.et")
    assert trace.comm_size.tolist() == [4, 4]  # two all-gathers of 2 bytes would be cut into empty chunks
    assert done.changes["all-gathers grown to preferred-dataset-splits bytes"] == 4
    without = export(src, tmp_path / "bare")
    assert any("--system" in note for note in without.notes)
    assert np.all(load_trace(tmp_path / "bare.0.et").comm_size != MISSING)


def test_ranks_are_exported_through_the_executor_alike(tmp_path: Path) -> None:
    from etkit.executor import ProcessExecutor

    ranks = [[node(1, duration=2), node(2, NodeType.METADATA_NODE, deps=[1]), coll(3, CommType.BROADCAST, 4096, deps=[2]),
              coll(4, CommType.ALL_TO_ALL, 512 * (r + 1), deps=[3])] for r in range(4)]
    src = write_job(tmp_path / "src", ranks)
    export(src, tmp_path / "serial")
    export(src, tmp_path / "pool", executor=ProcessExecutor(2))
    for r in range(4):
        assert (tmp_path / f"pool.{r}.et").read_bytes() == (tmp_path / f"serial.{r}.et").read_bytes()


def test_group_ids_stay_where_astra_sim_tells_groups_apart() -> None:
    from etkit.export.plan import MAX_GROUP_ID, _name_groups

    # 1,200 pairs: ids skip multiples of 500, and ids 500 apart never share two members
    pairs = {f"g{i:04d}": (2 * i, 2 * i + 1) for i in range(1200)}
    overlapping = {**pairs, "x": (0, 1)}  # shares both members with g0000
    renamed, groups = _name_groups(overlapping, 2400, "job")
    ids = [int(k) for k in groups]
    assert min(ids) == 1 and not any(i % 500 == 0 for i in ids) and len(ids) == len(overlapping)
    by_class: dict[int, list[set[int]]] = {}
    for gid, members in groups.items():
        by_class.setdefault(int(gid) % 500, []).append(set(members))
    assert all(len(a & b) < 2 for sets in by_class.values() for i, a in enumerate(sets) for b in sets[i + 1:])
    assert max(ids) <= MAX_GROUP_ID
    too_many = {f"g{i}": (i, i + 1) for i in range(MAX_GROUP_ID + 1)}
    with pytest.raises(ExportError, match="group ids"):
        _name_groups(too_many, MAX_GROUP_ID + 2, "job")
