"""The congestion-aware network beyond ASTRA-sim (which refuses more than one dimension): messages
routed dimension by dimension, store and forward, one message per link at a time; checked against
hand-computed link timelines on two dimensions. (On one dimension ``tests/astra`` checks it against
ASTRA-sim itself.)"""

from __future__ import annotations

import math

import pytest

from etkit.format.schema import CommType
from etkit.simulate import Knobs, simulate
from etkit.simulate.collectives import collective_times
from etkit.simulate.network import bytes_per_ns

from .helpers import coll, comp, job, net, one_collective, p2p, system

SIZE = 1 << 22
FAST, SLOW = ("Switch", 2, 400.0, 100.0), ("Switch", 2, 50.0, 1000.0)


def hop(dim: tuple, size: int = SIZE) -> int:
    """One link of dimension ``dim``: floor(latency + bytes / bandwidth) until the next device has it."""
    return int(dim[3] + size / bytes_per_ns(dim[2]))


def wire(dim: tuple, size: int = SIZE) -> int:
    """How long the message keeps the link busy: floor(bytes / bandwidth)."""
    return int(size / bytes_per_ns(dim[2]))


def test_a_message_between_npus_that_differ_in_two_dimensions_crosses_both() -> None:
    """0 -> 3 on 2 x 2: through dimension 0's switch to NPU 1, then dimension 1's switch to NPU 3."""
    j = job({0: [p2p(1, "send", SIZE, dst=3)], 1: [], 2: [], 3: [p2p(1, "recv", SIZE, src=0)]})
    aware = simulate(j, net(FAST, SLOW), system(), congestion="aware")
    assert aware.ranks[3].finish_ns == 2 * hop(FAST) + 2 * hop(SLOW)
    # the unaware network (ASTRA-sim's) charges the first dimension that differs, once
    unaware = simulate(j, net(FAST, SLOW), system())
    assert unaware.ranks[3].finish_ns == int(2 * FAST[3] + SIZE / bytes_per_ns(FAST[2]))


def test_messages_that_meet_on_a_link_queue_behind_each_other() -> None:
    """0 -> 3 and 1 -> 3 share NPU 1's link to dimension 1's switch and that switch's link to NPU 3.
    1 -> 3 leaves at once and holds NPU 1's uplink for ``wire(SLOW)``; 0 -> 3 gets to NPU 1 after two
    fast hops and waits for the uplink, then for the downlink the first message still holds."""
    j = job({0: [p2p(1, "send", SIZE, dst=3)], 1: [p2p(1, "send", SIZE, dst=3)], 2: [],
             3: [p2p(1, "recv", SIZE, src=1), p2p(2, "recv", SIZE, src=0)]})
    result = simulate(j, net(FAST, SLOW), system(), congestion="aware")
    first_at_switch = hop(SLOW)  # 1 -> 3 on NPU 1's uplink from t = 0
    first_done = first_at_switch + hop(SLOW)  # then the switch's link to NPU 3
    assert result.ranks[1].finish_ns == first_done
    at_npu1 = 2 * hop(FAST)
    assert at_npu1 < wire(SLOW)  # (the case: it waits for the uplink)
    up_start = max(at_npu1, wire(SLOW))
    at_switch = up_start + hop(SLOW)
    down_start = max(at_switch, first_at_switch + wire(SLOW))
    assert result.ranks[0].finish_ns == down_start + hop(SLOW)
    assert result.ranks[3].finish_ns == result.ranks[0].finish_ns


def test_a_collective_of_every_npu_runs_one_dimension_at_a_time() -> None:
    """All-reduce on 2 x 2 Switches, one chunk: reduce-scatter in dimension 0, all-reduce in dimension 1
    on half the bytes, all-gather back; each dimension's lines have their own switch, so every phase
    takes what it takes alone on a one-dimensional network of its dimension."""
    from dataclasses import replace

    size = 1 << 20
    both = replace(system(), all_reduce=("ring", "ring"), all_gather=("ring", "ring"), reduce_scatter=("ring", "ring"))
    two = simulate(one_collective(4, CommType.ALL_REDUCE, size), net(FAST, SLOW), both, congestion="aware")
    rs = collective_times(CommType.REDUCE_SCATTER, size, range(2), net(FAST), system(), congestion="aware")[0]
    ar = collective_times(CommType.ALL_REDUCE, size // 2, range(2), net(SLOW), system(), congestion="aware")[0]
    ag = collective_times(CommType.ALL_GATHER, size // 2, range(2), net(FAST), system(), congestion="aware")[0]
    assert {f.finish_ns for f in two.ranks.values()} == {rs + ar + ag}


def test_a_busy_link_slows_a_collective_only_in_the_aware_mode() -> None:
    """Rank 2 streams a large message to rank 0 while ranks 0 and 1 all-reduce: the switch's link to
    rank 0 carries both. Unaware, the all-reduce takes what it takes alone; aware, the messages it
    sends to rank 0 queue behind the large one."""
    big, size, link = 1 << 26, 1 << 20, ("Switch", 3, 400.0, 100.0)

    def run(mode: str, stream: bool) -> float:
        per = {0: [comp(1, 200), coll(2, CommType.ALL_REDUCE, size, [1], pg="1")],
               1: [comp(1, 200), coll(2, CommType.ALL_REDUCE, size, [1], pg="1")], 2: []}
        if stream:
            per[0].append(p2p(3, "recv", big, src=2))
            per[2].append(p2p(3, "send", big, dst=0))
        return simulate(job(per, {"1": [0, 1]}), net(link), system(), congestion=mode).ranks[1].finish_ns

    assert run("unaware", True) == run("unaware", False)
    # the large message reaches the switch at ~156 us and holds the link to rank 0 for ~156 us more
    assert hop(link, big) < 200_000 < hop(link, big) + wire(link, big)
    assert run("aware", True) > 2 * hop(link, big) - 10_000 > run("aware", False)


@pytest.mark.parametrize("mode", ["unaware", "aware"])
@pytest.mark.parametrize("layout", [dict(dp=2, pp=2), dict(dp=2, tp=2, pp=2), dict(tp=4, pp=2)])
def test_folded_ranks_equal_every_rank(mode: str, layout: dict) -> None:
    """Rank symmetry (one rank walked per class, its links standing for its class's in the aware mode)
    gives every rank exactly what simulating each rank gives."""
    from etkit.generate.llm import llm

    job_ = llm("llama3-8b", microbatches=2, layers=2, **layout).to_job()
    network = net(("Switch", len(job_.traces), 100.0, 500.0))
    merged = simulate(job_, network, system(splits=2), congestion=mode)
    alone = simulate(job_, network, system(splits=2), Knobs(symmetry=False), congestion=mode)
    assert merged.classes < alone.classes == len(job_.traces)
    assert {r: f.finish_ns for r, f in merged.ranks.items()} == {r: f.finish_ns for r, f in alone.ranks.items()}
    assert math.isfinite(merged.makespan_ns) and merged.makespan_ns > 0
