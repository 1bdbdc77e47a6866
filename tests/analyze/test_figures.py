"""Each figure checked against values worked out by hand on small constructed jobs."""

from __future__ import annotations

import pytest

from etkit.analyze import analyze_job, breakdown, comm_summary, critical_path, imbalance, top_ops
from etkit.analyze.kinds import COMM, COMPUTE, KIND_NAMES, MEMORY
from etkit.format.schema import CommType

from .builders import COMP, MEM, RECV, SEND, N, build_job, coll, comp

US = 1000


@pytest.fixture
def overlap_job(tmp_path):
    """One rank, timestamps (us):

    fwd [100,110] -> all_reduce [110,130] and bwd [110,125] -> opt [130,135] -> load [135,140]
    -> (idle 10) -> step [150,160].
    compute 10+15+5+10 = 40, comm 20 of which 15 under bwd, memory 5, idle 10, span 60.
    """
    return build_job(tmp_path, {0: [
        comp(1, 100, 10, name="fwd"), coll(2, 110, 20, [1]), comp(3, 110, 15, [1], "bwd"),
        comp(4, 130, 5, [2, 3], "opt"), N(5, MEM, 135, 5, [4], "load", {"tensor_size": 64}),
        comp(6, 150, 10, [5], "step")]})


def test_breakdown_known_overlap(overlap_job):
    b = breakdown(overlap_job).ranks[0]
    assert b.span_ns == 60 * US
    assert b.compute_ns == 40 * US
    assert b.overlapped_comm_ns == 15 * US
    assert b.exposed_comm_ns == 5 * US
    assert b.memory_ns == 5 * US
    assert b.idle_ns == 10 * US
    assert b.host_ns == 0
    assert b.compute_ns + b.exposed_comm_ns + b.memory_ns + b.waiting_ns + b.host_ns + b.idle_ns == b.span_ns


def test_critical_path_known_single_rank(overlap_job):
    p = critical_path(overlap_job)
    assert p.length_ns == 60 * US
    assert p.node_id.tolist() == [1, 2, 4, 5, 6]  # bwd (ends 125) loses to all_reduce (ends 130)
    assert p.on_path_ns.tolist() == [10 * US, 20 * US, 5 * US, 5 * US, 10 * US]
    assert p.wait_after_ns.tolist() == [0, 0, 0, 10 * US, 0]
    assert p.share_by_kind() == {"compute": 25 * US, "comm": 20 * US, "memory": 5 * US, "wait": 10 * US}
    assert p.source == "trace timestamps"


def test_critical_path_crosses_to_the_late_rank(tmp_path):
    # rank 1's fwd takes 18 us, so rank 0 waits in the all-reduce from 110 to 118
    job = build_job(tmp_path, {
        0: [comp(1, 100, 10, name="fwd"), coll(2, 110, 20, [1]), comp(3, 130, 5, [2], "opt")],
        1: [comp(1, 100, 18, name="fwd"), coll(2, 118, 12, [1]), comp(3, 130, 4, [2], "opt")]})
    p = critical_path(job)
    assert p.length_ns == 35 * US
    assert list(zip(p.rank.tolist(), p.node_id.tolist())) == [(1, 1), (1, 2), (0, 3)]
    assert p.per_rank() == {1: 30 * US, 0: 5 * US}
    im = imbalance(job)
    # rank 0 waits 8 us for rank 1 in the all-reduce: busy rank 0 = 35 - 8, rank 1 = 34 (18 + 12 + 4);
    # the table ranks by the waiting caused, so the late rank 1 comes first
    assert [(r.rank, r.busy_ns, r.caused_ns, r.waited_ns) for r in im.ranks] == [(1, 34 * US, 8 * US, 0),
                                                                                (0, 27 * US, 0, 8 * US)]
    assert im.imbalance == pytest.approx(34 / 30.5)
    assert breakdown(job).ranks[0].waiting_ns == 8 * US
    assert [e.late_rank for e in im.events] == [1] and im.events[0].waits == {0: 8 * US}


def test_durations_schedule_when_no_timestamps(tmp_path):
    # no timestamps: A(10) -> {D(4), E(7)} -> F(1) on rank 0; collective joins rank 1's A(20)
    job = build_job(tmp_path, {
        0: [comp(1, 0, 10, name="A"), comp(2, 0, 4, [1], "D"), comp(3, 0, 7, [1], "E"),
            comp(4, 0, 1, [2, 3], "F"), coll(5, 0, 5, [4]), comp(6, 0, 3, [5], "G")],
        1: [comp(1, 0, 20, name="A"), coll(2, 0, 5, [1]), comp(3, 0, 3, [2], "G")]})
    a = analyze_job(job)
    assert a.source.startswith("node durations")
    # the collective starts when rank 1 is ready at 20 and ends at 25; G ends at 28
    assert a.makespan_ns == 28 * US
    p = a.critical_path
    assert p.length_ns == 28 * US
    assert list(zip(p.rank.tolist(), p.node_id.tolist()))[:2] == [(1, 1), (1, 2)]
    b0 = a.breakdown.ranks[0]
    # rank 0: compute [0,18] (D and E overlap on two lanes), waits 18..20, comm [20,25], G [25,28]
    assert b0.compute_ns == 21 * US and b0.exposed_comm_ns == 5 * US and b0.idle_ns == 2 * US
    ops = {o.name: o for o in a.top_ops.by_name}
    assert ops["D"].exclusive_ns == 4 * US and ops["E"].exclusive_ns == 7 * US
    assert ops["A"].count == 2 and ops["A"].total_ns == 30 * US


def test_p2p_critical_path_and_matrix(tmp_path):
    job = build_job(tmp_path, {
        0: [comp(1, 0, 10, name="produce"),
            N(2, SEND, 0, 2, [1], "send", {"comm_src": 0, "comm_dst": 1, "comm_tag": 7, "comm_size": 4096})],
        1: [N(1, RECV, 0, 1, [], "recv", {"comm_src": 0, "comm_dst": 1, "comm_tag": 7, "comm_size": 4096}),
            comp(2, 0, 5, [1], "consume")]})
    p = critical_path(job)
    # send [10,12]; recv cannot end before it: [10,12]; consume [12,17]
    assert p.length_ns == 17 * US
    assert list(zip(p.rank.tolist(), p.node_id.tolist())) == [(0, 1), (0, 2), (1, 2)]
    c = comm_summary(job)
    assert c.matrix.tolist() == [[0, 4096], [0, 0]]  # receives are not counted twice
    assert c.by_type["SEND"].bytes == 4096 and c.by_type["RECV"].count == 1


@pytest.mark.parametrize("algorithm", ["ring", "direct"])
def test_traffic_matrix_expands_collectives(tmp_path, algorithm):
    s = 1200
    ranks = {r: [coll(1, 0, 1, size=s, ctype=CommType.ALL_REDUCE),
                 coll(2, 0, 1, [1], size=s, ctype=CommType.ALL_GATHER),
                 coll(3, 0, 1, [2], size=s, ctype=CommType.ALL_TO_ALL)] for r in range(4)}
    c = comm_summary(build_job(tmp_path, ranks), algorithm=algorithm)
    p = 4
    m = c.matrix
    if algorithm == "ring":
        # to the next rank: all-reduce 2(p-1)/p*S + all-gather (p-1)*S + all-to-all S/p; others S/p
        for r in range(4):
            assert m[r, (r + 1) % 4] == pytest.approx(2 * (p - 1) / p * s + (p - 1) * s + s / p)
            assert m[r, (r + 2) % 4] == pytest.approx(s / p)
    else:
        for r in range(4):
            for d in range(4):
                assert m[r, d] == (0 if r == d else pytest.approx(2 * s / p + s + s / p))
    assert c.by_type["ALL_REDUCE"].bytes == 4 * s and c.by_group == {"0": c.by_group["0"]}
    assert c.histogram.counts == {10: 12}  # 1200 B is in [1024, 2048)


def test_subgroup_collectives_stay_in_group(tmp_path):
    job = build_job(tmp_path, {r: [coll(1, 0, 1, size=800, pg="7" if r < 2 else "8")] for r in range(4)})
    m = comm_summary(job).matrix
    # groups inferred from the callers: {0,1} and {2,3}; ring all-reduce of 2 sends S to the other
    assert m.tolist() == [[0, 800, 0, 0], [800, 0, 0, 0], [0, 0, 0, 800], [0, 0, 800, 0]]


def test_nested_ops_exclusive_time_and_kinds(tmp_path):
    # a profiler-style range [0,100] holding two ops; an all-reduce on another track
    job = build_job(tmp_path, {0: [
        N(1, COMP, 1000, 100, [], "ProfilerStep#1", {"tid": 1}),
        N(2, COMP, 1010, 30, [1], "aten::mm", {"tid": 1}),
        N(3, COMP, 1050, 20, [2], "aten::add", {"tid": 1}),
        coll(4, 1060, 30, [3])]})
    ops = {o.name: o for o in top_ops(job).by_name}
    assert ops["ProfilerStep#1"].total_ns == 100 * US
    assert ops["ProfilerStep#1"].exclusive_ns == 50 * US
    assert ops["aten::mm"].exclusive_ns == 30 * US
    b = breakdown(job).ranks[0]
    # the range marker's own time is the thread between ops, not compute: compute is mm [1010,1040] and
    # add [1050,1070]; the all-reduce [1060,1090] hides under add for 10 us and is exposed for 20 us
    assert b.compute_ns == 50 * US and b.overlapped_comm_ns == 10 * US and b.exposed_comm_ns == 20 * US
    assert b.idle_ns == 30 * US and b.span_ns == 100 * US
    assert ops["ProfilerStep#1"].kind == "other"
    p = critical_path(job)
    assert "ProfilerStep#1" not in p.names  # ranges that hold ops are not on the path
    assert KIND_NAMES[COMPUTE] == "compute" and KIND_NAMES[COMM] == "comm" and KIND_NAMES[MEMORY] == "memory"


def _send_recv_job(tmp, send_us: int):
    """Rank 0 sends at 110 us for ``send_us``; rank 1 is busy until 135, then receives [135, 140]."""
    tmp.mkdir(exist_ok=True)
    return build_job(tmp, {
        0: [comp(1, 100, 10, name="produce"),
            N(2, SEND, 110, send_us, [1], "send", {"comm_dst": 1, "comm_tag": 0, "comm_size": 64}),
            comp(3, 110 + send_us, 5, [2], "next")],
        1: [comp(1, 100, 35, name="busy"),
            N(2, RECV, 135, 5, [1], "recv", {"comm_src": 0, "comm_tag": 0, "comm_size": 64})]})


def test_measured_send_that_waits_for_a_late_receiver(tmp_path):
    # the send ends with the receive at 140: rank 1 being busy until 135 is on the path
    p = critical_path(_send_recv_job(tmp_path / "rendezvous", 30))
    assert list(zip(p.rank.tolist(), p.node_id.tolist())) == [(1, 1), (1, 2), (0, 3)]
    assert p.on_path_ns.tolist() == [35 * US, 5 * US, 5 * US] and p.length_ns == 45 * US
    # a send that ends long after its receive is not explained by the receiver
    p = critical_path(_send_recv_job(tmp_path / "late", 60))
    assert list(zip(p.rank.tolist(), p.node_id.tolist())) == [(0, 1), (0, 2), (0, 3)]


def test_host_time_when_the_rank_also_has_device_compute(tmp_path):
    # CPU op [100,110] launches a kernel [105,115]; a second CPU op [120,125] runs alone
    job = build_job(tmp_path, {0: [N(1, COMP, 100, 10, [], "launch", {"is_cpu_op": True}),
                                   N(2, COMP, 105, 10, [1], "kernel", {"is_cpu_op": False}),
                                   N(3, COMP, 120, 5, [2], "host_op", {"is_cpu_op": True})]})
    b = breakdown(job).ranks[0]
    assert (b.span_ns, b.compute_ns, b.host_ns, b.idle_ns) == (25 * US, 10 * US, 10 * US, 5 * US)
    kinds = {o.name: o.kind for o in top_ops(job).by_name}
    assert kinds == {"launch": "cpu", "kernel": "compute", "host_op": "cpu"}
