"""Planning without processes: order, actions, comm specs and cross-rank checks, on real and built traces."""

from __future__ import annotations

import numpy as np
import pytest

from etkit.errors import EtkitError
from etkit.executor import SerialExecutor
from etkit.format.attrs import get_int
from etkit.format.schema import CommType, NodeType
from etkit.format.stream import open_trace
from etkit.model.job import load_job
from etkit.replay.plan import Action, plan_job

from ..conftest import UPSTREAM
from .builders import node, write_nodes_job

RING = UPSTREAM / "astra-sim-astra-sim/examples/system/custom_collectives/custom_ring_allreduce_8npus_1MB/custom_allreduce"
MICRO = UPSTREAM / "astra-sim-astra-sim/examples/workload/microbenchmarks"


def _load(prefix) -> object:
    return load_job(str(prefix), executor=SerialExecutor())


@pytest.mark.shared_data
def test_ring_plan_matches_the_raw_send_recv_attributes():
    job = _load(RING)
    plan = plan_job(job, "full")
    for rank in job.ranks:
        expected = []
        with open_trace(f"{RING}.{rank}.et") as reader:
            for n in reader:
                if n.type == NodeType.COMM_SEND_NODE:
                    expected.append(("SEND", get_int(n.attr, "comm_dst"), get_int(n.attr, "comm_size")))
                elif n.type == NodeType.COMM_RECV_NODE:
                    expected.append(("RECV", get_int(n.attr, "comm_src"), get_int(n.attr, "comm_size")))
        rank_plan = plan.ranks[rank]
        got = [(s.kind, s.peer, s.nbytes) for row, s in sorted(rank_plan.comm.items())]
        assert got == expected
        assert not rank_plan.reasons  # every send has its receive
        # the walk order respects every dependency
        position = np.empty(len(rank_plan.order), dtype=np.int64)
        position[rank_plan.order] = np.arange(len(rank_plan.order))
        children = np.repeat(np.arange(len(position)), np.diff(rank_plan.dep_ptr))
        assert (position[rank_plan.dep_rows] < position[children]).all()


@pytest.mark.shared_data
@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
def test_microbenchmark_collectives_are_planned_on_the_world(coll):
    prefix = MICRO / coll / "4npus_1MB" / coll
    plan = plan_job(_load(prefix), "comm")
    for rank_plan in plan.ranks.values():
        (spec,) = rank_plan.comm.values()
        assert spec.kind == coll.upper()
        assert spec.nbytes == 1 << 20
        assert spec.members == (0, 1, 2, 3)
    assert plan.groups == {}  # only the world group: nothing to create


def test_mode_switches_compute_and_comm_off(tmp_path):
    nodes = [node(1, "c", NodeType.COMP_NODE, dur=5),
             node(2, "ar", NodeType.COMM_COLL_NODE, deps=(1,), comm_type=0, comm_size=64)]
    job = _load(write_nodes_job(tmp_path, "m", {0: nodes, 1: nodes}))
    comm = plan_job(job, "comm").ranks[0].action.tolist()
    compute = plan_job(job, "compute").ranks[0].action.tolist()
    assert comm == [Action.OFF, Action.COLL]
    assert compute == [Action.KERNEL, Action.OFF]


def test_unmatched_send_is_listed_not_issued(tmp_path):
    r0 = [node(1, "send", NodeType.COMM_SEND_NODE, comm_dst=1, comm_src=0, comm_size=16, comm_tag=3),
          node(2, "send2", NodeType.COMM_SEND_NODE, deps=(1,), comm_dst=1, comm_src=0, comm_size=16, comm_tag=3)]
    r1 = [node(1, "recv", NodeType.COMM_RECV_NODE, comm_src=0, comm_dst=1, comm_size=16, comm_tag=3)]
    job = _load(write_nodes_job(tmp_path, "p", {0: r0, 1: r1}))
    with pytest.raises(EtkitError, match=r"node 2: send of 16 bytes to rank 1 tag 3 has no matching recv.*would hang"):
        plan_job(job, "comm")  # as etkit validate: an unmatched send is an error
    plan = plan_job(job, "comm", allow_mismatch=True)
    assert plan.ranks[0].action.tolist() == [Action.SEND, Action.SKIP]
    assert "no matching peer" in plan.ranks[0].reasons[1]
    assert plan.ranks[1].action.tolist() == [Action.RECV]


def test_missing_peer_and_unknown_group_are_reasons(tmp_path):
    r = [node(1, "recv", NodeType.COMM_RECV_NODE, comm_size=16),
         node(2, "ar", NodeType.COMM_COLL_NODE, comm_type=0, comm_size=64, pg_name="7")]
    plan = plan_job(_load(write_nodes_job(tmp_path, "q", {0: r, 1: r})), "comm")
    reasons = plan.ranks[0].reasons
    assert reasons[0] == "recv without comm_src"
    assert reasons[1] == "unknown process group '7'"


def test_collective_sequences_that_differ_are_refused(tmp_path):
    ar = node(1, "ar", NodeType.COMM_COLL_NODE, comm_type=int(CommType.ALL_REDUCE), comm_size=64)
    ag = node(1, "ag", NodeType.COMM_COLL_NODE, comm_type=int(CommType.ALL_GATHER), comm_size=64)
    job = _load(write_nodes_job(tmp_path, "x", {0: [ar], 1: [ag]}))
    with pytest.raises(EtkitError, match="would hang"):
        plan_job(job, "comm")


def test_order_follows_dependencies_when_the_file_order_does_not(tmp_path):
    # file order 3, 1, 2 with 1 -> 2 -> 3: the walk must be 1, 2, 3
    nodes = [node(3, "c3", NodeType.COMP_NODE, deps=(2,), dur=1), node(1, "c1", NodeType.COMP_NODE, dur=1),
             node(2, "c2", NodeType.COMP_NODE, deps=(1,), dur=1)]
    plan = plan_job(_load(write_nodes_job(tmp_path, "o", {0: nodes})), "full").ranks[0]
    assert plan.order.tolist() == [1, 2, 0]
    assert plan.trace_iteration_us == 3.0  # critical path of durations
    assert plan.trace_time_basis == "critical path of durations"


def test_dependency_cycle_is_an_error(tmp_path):
    nodes = [node(1, "a", NodeType.COMP_NODE, deps=(2,), dur=1), node(2, "b", NodeType.COMP_NODE, deps=(1,), dur=1)]
    with pytest.raises(EtkitError, match="cycle"):
        plan_job(_load(write_nodes_job(tmp_path, "c", {0: nodes})), "full")


@pytest.mark.shared_data
def test_rank_count_and_device_are_checked_before_launching():
    from etkit.replay import ReplayOptions, replay_job

    with pytest.raises(EtkitError, match="ranks=3 but the trace has 4 ranks"):
        replay_job(str(MICRO / "all_reduce" / "4npus_1MB" / "all_reduce"), ranks=3)
    if not __import__("torch").cuda.is_available():
        with pytest.raises(EtkitError, match="no CUDA device"):
            ReplayOptions(device="cuda").resolved()
    with pytest.raises(EtkitError, match="backend='nccl' needs device='cuda'"):
        ReplayOptions(device="cpu", backend="nccl").resolved()


def test_members_that_recorded_different_sizes_get_the_largest(tmp_path):
    def ar(size: int) -> list:
        return [node(1, "ar", NodeType.COMM_COLL_NODE, comm_type=int(CommType.ALL_REDUCE), comm_size=size)]

    job = _load(write_nodes_job(tmp_path, "s", {0: ar(64), 1: ar(256)}))
    with pytest.raises(EtkitError, match=r"ALL_REDUCE #1 on pg '0' moves 256 bytes, rank 0 moves 64 "
                                         r"\[collective-size-mismatch\]"):
        plan_job(job, "comm")  # as etkit validate
    plan = plan_job(job, "comm", allow_mismatch=True)
    assert [p.comm[0].nbytes for p in plan.ranks.values()] == [256, 256]
    assert "recorded [64, 256] bytes; replayed with 256" in plan.notes[0]


def test_all_to_all_without_recorded_splits_sends_an_even_share_to_each_member(tmp_path):
    def a2a(size: int) -> list:
        return [node(1, "a2a", NodeType.COMM_COLL_NODE, comm_type=int(CommType.ALL_TO_ALL), comm_size=size)]

    plan = plan_job(_load(write_nodes_job(tmp_path, "a", {0: a2a(800), 1: a2a(1600)})), "comm")
    r0, r1 = plan.ranks[0].comm[0], plan.ranks[1].comm[0]
    # float32: rank 0 sends 100 elements to each member, rank 1 sends 200; each receives what the other sent
    assert (r0.in_splits, r0.out_splits) == ((100, 100), (100, 200))
    assert (r1.in_splits, r1.out_splits) == ((200, 200), (100, 200))


def test_all_to_all_uses_the_recorded_uneven_splits(tmp_path):
    def a2a(out_rows: int, in_rows: int, out_splits: list, in_splits: list) -> list:
        values = [[1, 1, 0, out_rows * 32, 4, "cpu"], [2, 2, 0, in_rows * 32, 4, "cpu"], "<Object>",
                  out_splits, in_splits, False, -1]
        shapes = [[out_rows, 32], [in_rows, 32], [], [[], []], [[], []], [], []]
        types = ["Tensor(float)", "Tensor(float)", "Object", "GenericList[Int,Int]", "GenericList[Int,Int]",
                 "Bool", "Int"]
        return [node(1, "c10d::alltoall_base_", NodeType.COMM_COLL_NODE, inputs=(values, shapes, types),
                     comm_type=int(CommType.ALL_TO_ALL), comm_size=in_rows * 32 * 4)]

    # rank 0 sends 8 rows to each rank; rank 1 sends 11 rows to rank 0 and 8 to itself (MoE routing)
    job = _load(write_nodes_job(tmp_path, "u", {0: a2a(19, 16, [8, 11], [8, 8]), 1: a2a(16, 19, [8, 8], [11, 8])}))
    plan = plan_job(job, "comm")
    r0, r1 = plan.ranks[0].comm[0], plan.ranks[1].comm[0]
    assert (r0.in_splits, r0.out_splits) == ((8 * 32, 8 * 32), (8 * 32, 11 * 32))
    assert (r1.in_splits, r1.out_splits) == ((11 * 32, 8 * 32), (8 * 32, 8 * 32))
