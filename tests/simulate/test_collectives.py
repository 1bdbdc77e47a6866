"""Each collective x algorithm x topology through the public ``simulate``: closed forms read off
ASTRA-sim's state machines (ring and direct, one chunk) and ASTRA-sim's own figures where the state
machine has no short form (halving-doubling, the double binary tree, chunks pipelined over two
dimensions). The pinned figures are what the real ASTRA-sim (astra-sim 518bd51, analytical 599a047)
printed for these inputs; ``tests/astra`` re-runs the binary on a few hundred cases like them."""

from __future__ import annotations

import pytest

from etkit.format.schema import CommType
from etkit.simulate import simulate
from etkit.simulate.network import bytes_per_ns

from .helpers import net, one_collective, system

P, S, BW, LAT, EP, MEM = 8, 1 << 20, 50.0, 500.0, 10, 1600.0
TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
OPS = (CommType.ALL_REDUCE, CommType.REDUCE_SCATTER, CommType.ALL_GATHER, CommType.ALL_TO_ALL)


def hops(topo: str, distance: int = 1) -> int:
    if topo == "Ring":
        return min(distance, P - distance)
    return 2 if topo == "Switch" else 1


def delay(topo: str, size: int, distance: int = 1) -> int:
    """Congestion-unaware message time: floor(hops * latency + bytes / bandwidth)."""
    return int(hops(topo, distance) * LAT + size / bytes_per_ns(BW))


def red(size: int) -> int:
    """A packet bundle's reduction: read, read, write at local-mem-bw."""
    return 3 * int(size / (MEM * 1e9) * 1e9)


def ring(op: int, topo: str) -> int:
    """Ring: a first bundle (E), then per step the message, a bundle (E) and, reducing, the reduction."""
    m = S // P
    step = delay(topo, m) + EP
    if op == CommType.ALL_REDUCE:
        return EP + 2 * (P - 1) * step + (P - 1) * red(m)
    if op == CommType.REDUCE_SCATTER:
        return EP + (P - 1) * (step + red(m))
    if op == CommType.ALL_GATHER:
        return EP + (P - 1) * (delay(topo, S) + EP)
    return EP + P * (P - 1) // 2 * step


def direct(op: int, topo: str) -> int:
    """Direct: P-1 messages leave together after one bundle; the farthest arrives last."""
    far = P // 2 if topo == "Ring" else 1
    m = S // P
    if op == CommType.ALL_GATHER:
        return EP + delay(topo, S, far) + EP
    if op == CommType.ALL_TO_ALL:
        return EP + delay(topo, m, far) + EP
    rs = EP + delay(topo, m, far) + EP + red(m)
    if op == CommType.REDUCE_SCATTER:
        return rs
    return rs + delay(topo, m, far) + EP  # the gathered shards leave once every shard was reduced


@pytest.mark.parametrize("topo", TOPOLOGIES)
@pytest.mark.parametrize("op", OPS, ids=lambda o: CommType(o).name)
def test_ring_matches_its_state_machine(op: int, topo: str) -> None:
    result = simulate(one_collective(P, op, S), net((topo, P, BW, LAT)), system("ring", endpoint=EP))
    assert {f.finish_ns for f in result.ranks.values()} == {ring(op, topo)}


@pytest.mark.parametrize("topo", ("FullyConnected", "Switch"))
@pytest.mark.parametrize("op", OPS, ids=lambda o: CommType(o).name)
def test_direct_matches_its_state_machine(op: int, topo: str) -> None:
    result = simulate(one_collective(P, op, S), net((topo, P, BW, LAT)), system("direct", endpoint=EP))
    assert {f.finish_ns for f in result.ranks.values()} == {direct(op, topo)}


def test_ring_all_reduce_on_an_aware_switch_stores_and_forwards() -> None:
    """Congestion-aware: a message crosses NPU -> switch -> NPU link by link, each floor(latency +
    bytes / bandwidth): twice the latency and twice the serialisation of the unaware 2-hop time."""
    m = S // P
    hop = int(LAT + m / bytes_per_ns(BW))
    result = simulate(one_collective(P, CommType.ALL_REDUCE, S), net(("Switch", P, BW, LAT)), system("ring", endpoint=EP),
                      congestion="aware")
    assert {f.finish_ns for f in result.ranks.values()} == {EP + 2 * (P - 1) * (2 * hop + EP) + (P - 1) * red(m)}


# ASTRA-sim's figures, 8 NPUs, 50 GB/s, 500 ns, 1 MiB, one chunk: (unaware, aware)
HALVING_DOUBLING = {
    ("ALL_REDUCE", "Ring"): (41_978, 66_388), ("ALL_REDUCE", "Switch"): (40_978, 75_154),
    ("ALL_REDUCE", "FullyConnected"): (37_978, 37_978),
    ("ALL_GATHER", "Ring"): (140_258, 237_913), ("ALL_GATHER", "Switch"): (139_758, 276_476),
    ("ALL_GATHER", "FullyConnected"): (138_258, 138_258),
    ("REDUCE_SCATTER", "Ring"): (21_360, 33_565), ("REDUCE_SCATTER", "Switch"): (20_860, 37_948),
    ("REDUCE_SCATTER", "FullyConnected"): (19_360, 19_360),
}
# per rank 0..7: the leaves finish last, the root (rank 7 of the max tree) first
DOUBLE_BINARY_TREE = {
    ("Ring", "unaware"): (134_081, 114_040, 134_081, 91_534, 134_081, 114_040, 134_081, 68_028),
    ("Ring", "aware"): (290_329, 270_288, 290_329, 228_251, 290_329, 270_288, 290_329, 146_152),
    ("Switch", "unaware"): (133_081, 112_540, 133_081, 90_034, 133_081, 112_540, 133_081, 67_528),
    ("Switch", "aware"): (289_329, 249_257, 308_860, 207_220, 308_860, 268_788, 328_391, 165_183),
    ("FullyConnected", "unaware"): (130_081, 110_040, 130_081, 88_034, 130_081, 110_040, 130_081, 66_028),
    ("FullyConnected", "aware"): (130_081, 110_040, 130_081, 88_034, 130_081, 110_040, 130_081, 66_028),
}


@pytest.mark.parametrize("case", sorted(HALVING_DOUBLING), ids=lambda c: f"{c[0]}-{c[1]}")
@pytest.mark.parametrize("mode", ("unaware", "aware"))
def test_halving_doubling_equals_astra_sim(case: tuple[str, str], mode: str) -> None:
    op, topo = case
    result = simulate(one_collective(P, CommType[op], S), net((topo, P, BW, LAT)), system("halvingDoubling", endpoint=EP),
                      congestion=mode)
    expected = HALVING_DOUBLING[case][mode == "aware"]
    assert {f.finish_ns for f in result.ranks.values()} == {expected}


@pytest.mark.parametrize("case", sorted(DOUBLE_BINARY_TREE), ids=lambda c: f"{c[0]}-{c[1]}")
def test_double_binary_tree_equals_astra_sim_on_every_rank(case: tuple[str, str]) -> None:
    topo, mode = case
    result = simulate(one_collective(P, CommType.ALL_REDUCE, S), net((topo, P, BW, LAT)),
                      system("doubleBinaryTree", endpoint=EP), congestion=mode)
    assert tuple(result.ranks[r].finish_ns for r in range(P)) == DOUBLE_BINARY_TREE[case]


@pytest.mark.parametrize("active, expected", [(1, 18_760), (2, 9_380), (4, 4_690)])
def test_chunks_pipeline_through_two_dimensions(active: int, expected: int) -> None:
    """4 x 2 (Ring 100 GB/s 100 ns, Switch 25 GB/s 1 us), 1 MiB in 4 chunks: reduce-scatter on the
    ring, all-reduce on the switch, all-gather back; ``active`` chunks per dimension at once."""
    result = simulate(one_collective(8, CommType.ALL_REDUCE, S), net(("Ring", 4, 100.0, 100.0), ("Switch", 2, 25.0, 1000.0)),
                      system("ring", splits=4, active=active, endpoint=EP))
    assert {f.finish_ns for f in result.ranks.values()} == {expected}


def test_a_size_that_does_not_divide_makes_one_more_full_chunk() -> None:
    """ASTRA-sim cuts ``size // splits`` bytes per chunk and sends every chunk whole."""
    exact = simulate(one_collective(P, CommType.ALL_REDUCE, 4 * 65_536), net(("Ring", P, BW, LAT)), system(splits=4))
    more = simulate(one_collective(P, CommType.ALL_REDUCE, 4 * 65_536 + 3), net(("Ring", P, BW, LAT)), system(splits=4))
    assert more.makespan_ns == pytest.approx(exact.makespan_ns * 5 / 4)


def test_more_bandwidth_is_never_slower() -> None:
    times = [simulate(one_collective(P, CommType.ALL_REDUCE, S), net(("Ring", P, bw, LAT)), system()).makespan_ns
             for bw in (25.0, 50.0, 100.0, 200.0)]
    assert times == sorted(times, reverse=True)
