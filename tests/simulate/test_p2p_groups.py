"""Point-to-point matching, process subgroups and congestion sharing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from etkit.format.schema import CommType
from etkit.simulate import Knobs, SimulationBlocked, simulate
from etkit.simulate.synthetic import chain_job

from ..conftest import UPSTREAM
from .helpers import GIB, coll, comp, job, net, p2p, system

EXAMPLES = UPSTREAM / "astra-sim-astra-sim" / "examples"
EP, LAT, BW = 10.0, 500.0, 50.0


def msg_time(nbytes: float, hops: int = 1, bw: float = BW) -> float:
    """A message on ASTRA-sim's congestion-unaware network: floor(hops * latency + bytes / bandwidth)."""
    return math.floor(hops * LAT + nbytes / (bw * GIB))


def bundle_step(nbytes: float, hops: int = 1) -> float:
    """One collective step: the message, then a packet bundle (10 ns on a group's own ring)."""
    return msg_time(nbytes, hops) + EP


def test_send_recv_pair_time_and_schedule() -> None:
    j = job({0: [comp(1, 3), p2p(2, "send", 4096, [1], src=0, dst=1, tag=7)],
             1: [p2p(5, "recv", 4096, src=0, dst=1, tag=7), comp(6, 2, [5])]})
    result = simulate(j, net(("Ring", 2, BW, LAT)), system())
    arrival = 3000 + msg_time(4096)
    assert result.ranks[0].finish_ns == pytest.approx(arrival)
    assert result.ranks[1].finish_ns == pytest.approx(arrival + 2000)
    sched = result.schedule.ranks[1]
    assert result.schedule.source == "simulation"
    assert sched.ran.all() and sched.start_ns[0] == 0.0 and sched.end_ns[0] == pytest.approx(arrival)


def test_recv_without_src_or_tag_matches_any_sender() -> None:
    # ASTRA-sim aborts on SEND/RECV without comm_src/comm_tag; etkit matches with wildcards
    j = job({0: [p2p(1, "send", 100, dst=2)], 1: [p2p(1, "send", 100, dst=2, tag=3)],
             2: [p2p(1, "recv", 100), p2p(2, "recv", 100, [1])]})
    result = simulate(j, net(("Switch", 3, BW, LAT)), system())
    assert all(s.ran.all() for s in result.schedule.ranks.values())


def test_messages_match_in_order_by_tag() -> None:
    j = job({0: [p2p(1, "send", 1 << 20, dst=1, tag=1), p2p(2, "send", 1024, [1], dst=1, tag=2)],
             1: [p2p(1, "recv", 1024, src=0, tag=2), p2p(2, "recv", 1 << 20, src=0, tag=1)]})
    result = simulate(j, net(("Ring", 2, BW, LAT)), system())
    small = result.schedule.ranks[1].end_ns[0]
    big = msg_time(1 << 20)
    assert small == pytest.approx(big + msg_time(1024))  # tag 2 was sent after tag 1 finished
    assert not result.warnings


def test_size_mismatch_is_refused_unless_allowed() -> None:
    j = job({0: [p2p(1, "send", 100, dst=1)], 1: [p2p(1, "recv", 200, src=0)]})
    with pytest.raises(SimulationBlocked) as info:  # as etkit validate: a p2p-size-mismatch error
        simulate(j, net(("Ring", 2, BW, LAT)), system())
    assert info.value.report.disagreements == ["rank 0 node 1: [p2p-size-mismatch] send to rank 1 tag any is 100 bytes "
                                               "but its recv (rank 1 node 1) expects 200"]
    result = simulate(j, net(("Ring", 2, BW, LAT)), system(), allow_mismatch=True)
    assert any("100 bytes" in w and "200 bytes" in w for w in result.warnings)


@pytest.mark.shared_data
def test_astra_custom_ring_allreduce_runs_to_the_end() -> None:
    prefix = EXAMPLES / "system" / "custom_collectives" / "custom_ring_allreduce_8npus_1MB" / "custom_allreduce"
    result = simulate(str(prefix), EXAMPLES / "network" / "analytical" / "Ring_8npus.yml",
                      EXAMPLES / "system" / "native_collectives" / "Ring_4chunks.json")
    assert all(s.ran.all() for s in result.schedule.ranks.values())
    # a ring all-reduce moves 2 (p-1) messages one after the other on each channel, each at least one hop
    assert result.makespan_ns > 14 * msg_time(131072)


def test_subgroups_run_on_their_own_ring() -> None:
    groups = {"1": [0, 1, 2, 3], "2": [4, 5, 6, 7], "3": [0, 2, 4, 6], "4": [1, 3, 5, 7]}
    pg_of = {r: ("1" if r < 4 else "2") for r in range(8)}
    stride = {r: ("3" if r % 2 == 0 else "4") for r in range(8)}
    ring8 = net(("Ring", 8, BW, LAT))
    near = simulate(chain_job(8, 1, 0, CommType.ALL_GATHER, 4096, pg_names=pg_of, groups=groups), ring8, system())
    apart = simulate(chain_job(8, 1, 0, CommType.ALL_GATHER, 4096, pg_names=stride, groups=groups), ring8, system())
    # four members each, one ring in the order the group lists them: 3 steps. 0, 2, 4, 6: every hop
    # 2 links of the 8-ring. 0, 1, 2, 3: 1 link, but the ring closes from 3 back to 0 over 3 links, and
    # the members behind that link finish later (ASTRA-sim: 1,769 and 2,769 ns)
    assert {f.finish_ns for f in apart.ranks.values()} == {1 + EP + 3 * bundle_step(4096, hops=2)}
    behind = 1 + EP + 2 * bundle_step(4096) + bundle_step(4096, hops=3)
    assert sorted({f.finish_ns for f in near.ranks.values()}) == [1 + EP + 3 * bundle_step(4096), behind]
    assert {r for r, f in near.ranks.items() if f.finish_ns == behind} == {0, 1, 2, 4, 5, 6}


def test_groups_from_metadata_node() -> None:
    from etkit.format.schema import IOInfo, Node, NodeType

    init = Node(id=0, name="process_group:init", type=NodeType.METADATA_NODE,
                inputs=IOInfo(values=str(['[{"pg_name": "5", "ranks": [0, 1]}, {"pg_name": "6", "ranks": [2, 3]}]'])))
    per_rank = {r: [init, coll(1, CommType.ALL_REDUCE, 1 << 16, [0], pg="5" if r < 2 else "6")] for r in range(4)}
    from etkit.model.job import groups_from_traces

    j = job(per_rank)
    j.groups = groups_from_traces(j.traces)
    result = simulate(j, net(("Ring", 4, BW, LAT)), system())
    whole = simulate(job({r: [coll(1, CommType.ALL_REDUCE, 1 << 16)] for r in range(4)}), net(("Ring", 4, BW, LAT)), system())
    assert result.makespan_ns < whole.makespan_ns  # two pairs, not one ring of four


def test_a_message_crosses_only_the_first_dimension_its_npus_differ_in() -> None:
    """ASTRA-sim's congestion-unaware network times a message by the first dimension in which source
    and destination differ: group 0, 1, 5 on 4 x 2 is a ring 0 -> 1 (dim 0) -> 5 (dim 1) -> 0 (dim 0)."""
    two_dim = net(("Switch", 4, 400.0, 100.0), ("Switch", 2, 25.0, 2000.0))
    members = (0, 1, 5)
    j = job({r: [coll(1, CommType.ALL_GATHER, 4096, pg="7")] for r in members} | {r: [] for r in (2, 3, 4, 6, 7)},
            {"7": list(members)})
    result = simulate(j, two_dim, system())
    fast = math.floor(2 * 100.0 + 4096 / (400.0 * GIB)) + EP
    slow = math.floor(2 * 2000.0 + 4096 / (25.0 * GIB)) + EP
    # rank 1 hears from 0 over fast hops only; ranks 5 and 0 wait once for the slow hop 1 -> 5
    assert result.ranks[1].finish_ns == EP + 2 * fast
    assert result.ranks[5].finish_ns == result.ranks[0].finish_ns == EP + slow + fast


def test_a_rank_outside_the_group_is_refused() -> None:
    from etkit.simulate import SimulationBlocked

    j = job({r: [coll(1, CommType.ALL_REDUCE, 4096, pg="7")] for r in range(4)}, {"7": [0, 1]})
    with pytest.raises(SimulationBlocked, match="rank 2 is not in process group '7'"):
        simulate(j, net(("Ring", 4, BW, LAT)), system())


def test_congestion_aware_incast_shares_the_receiver_port() -> None:
    """Two messages to one NPU through a Switch: each crosses its sender's link to the switch at once,
    then the switch's link to the receiver sends one after the other (store and forward, FIFO)."""
    size = 1 << 22
    j = job({0: [p2p(1, "send", size, dst=2)], 1: [p2p(1, "send", size, dst=2)],
             2: [p2p(1, "recv", size, src=0), p2p(2, "recv", size, src=1)]})
    switch = net(("Switch", 3, BW, LAT))
    unaware = simulate(j, switch, system())
    aware = simulate(j, switch, system(), congestion="aware")
    assert unaware.makespan_ns == msg_time(size, hops=2)
    hop, wire = math.floor(LAT + size / (BW * GIB)), math.floor(size / (BW * GIB))
    assert aware.ranks[0].finish_ns == 2 * hop  # the first through the switch
    assert aware.makespan_ns == hop + wire + hop  # the second waits for the first to leave the link


def test_congestion_aware_in_two_dimensions() -> None:
    # ASTRA-sim's congestion-aware backend supports one dimension; here sharing works in any
    size = 1 << 22
    two_dim = net(("Switch", 2, 400.0, 100.0), ("Switch", 2, BW, LAT))
    j = job({0: [p2p(1, "send", size, dst=3)], 1: [p2p(1, "send", size, dst=3)], 2: [],
             3: [p2p(1, "recv", size, src=0), p2p(2, "recv", size, src=1)]})
    unaware = simulate(j, two_dim, system())
    aware = simulate(j, two_dim, system(), congestion="aware")
    assert aware.makespan_ns > unaware.makespan_ns * 1.5


def test_disjoint_flows_do_not_slow_each_other() -> None:
    size = 1 << 22
    j = job({0: [p2p(1, "send", size, dst=1)], 1: [p2p(1, "recv", size, src=0)],
             2: [p2p(1, "send", size, dst=3)], 3: [p2p(1, "recv", size, src=2)]})
    one = job({0: [p2p(1, "send", size, dst=1)], 1: [p2p(1, "recv", size, src=0)], 2: [], 3: []})
    switch = net(("Switch", 4, BW, LAT))
    assert simulate(j, switch, system(), congestion="aware").makespan_ns == \
        simulate(one, switch, system(), congestion="aware").makespan_ns


def test_symmetry_gives_the_same_schedule_as_walking_every_rank() -> None:
    j = chain_job(8, 20, 5, CommType.ALL_REDUCE, 1 << 18)
    fast = simulate(j, net(("Ring", 8, BW, LAT)), system(splits=4))
    full = simulate(j, net(("Ring", 8, BW, LAT)), system(splits=4), Knobs(symmetry=False))
    assert fast.classes == 1 and full.classes == 8
    for r in range(8):
        assert np.array_equal(fast.schedule.ranks[r].end_ns, full.schedule.ranks[r].end_ns)


def test_measured_trace_keeps_thread_gaps_and_replaces_recorded_blocking() -> None:
    from etkit.format.attrs import make_attr
    from etkit.simulate import Knobs
    from etkit.simulate.collectives import group_shape, plan_collective

    def timed(node, start_us: int, tid: int = 1):
        node.start_time_micros = start_us
        node.attr.append(make_attr("tid", tid))
        return node

    per_rank = {}
    for r in range(2):
        a = timed(comp(1, 10, cpu=True), 1000)  # 10 us of work, then 40 us of untraced interpreter time
        b = timed(comp(2, 10, [1], cpu=True), 1050)
        c = coll(3, CommType.ALL_REDUCE, 1 << 16, [2])
        c.duration_micros = 100  # the thread blocked in it from 1060 to 1160
        c = timed(c, 1060)
        d = timed(comp(4, 10, [2], cpu=True), 1170)  # returned 10 us after the collective ended
        per_rank[r] = [a, b, c, d]
    ring2 = net(("Ring", 2, BW, LAT))
    collective = plan_collective(CommType.ALL_REDUCE, 1 << 16, group_shape((0, 1), ring2), system()).time_ns
    kept = simulate(job(per_rank), ring2, system())
    assert kept.makespan_ns == pytest.approx(50_000 + 10_000 + collective + 10_000 + 10_000)
    raw = simulate(job(per_rank), ring2, system(), Knobs(measured_gaps=False, strip_waits=False))
    # d only depends on b, so it runs beside the collective; the 40 us gap and the blocking are gone
    assert raw.makespan_ns == pytest.approx(max(20_000 + collective, 30_000))
