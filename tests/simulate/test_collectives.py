"""Each collective x algorithm x topology against its closed-form time (one chunk, one dimension),
plus hierarchy over two dimensions and chunk pipelining, through the public ``simulate``."""

from __future__ import annotations

import math

import pytest

from etkit.format.schema import CommType
from etkit.simulate import simulate

from .helpers import GIB, net, one_collective, system

P, S, BW, LAT, EP, MEM = 8, 1 << 20, 50.0, 500.0, 10.0, 1600.0
B = BW * GIB
TOPOLOGIES = ("Ring", "FullyConnected", "Switch")


def near_hops(topology: str) -> int:
    return 2 if topology == "Switch" else 1


def fan_out(topology: str, message: float) -> tuple[float, int]:
    """(busiest-link bytes, hops of the farthest peer) when each of P members sends to all others."""
    if topology == "Switch":
        return (P - 1) * message, 2
    if topology == "FullyConnected":
        return message, 1
    return message * sum(min(k, P - k) for k in range(1, P)) / 2, P // 2


def red(message: float) -> float:
    return 3 * math.floor(message / MEM)


def step(hops: int, link_bytes: float) -> float:
    return hops * LAT + math.floor(link_bytes / B) + EP


def ring(op: int, topo: str) -> float:
    h, m = near_hops(topo), S / P
    rs = (P - 1) * (step(h, m) + red(m))
    ag_of_shards = (P - 1) * step(h, m)
    return EP + {CommType.REDUCE_SCATTER: rs, CommType.ALL_REDUCE: rs + ag_of_shards,
                 CommType.ALL_GATHER: (P - 1) * step(h, S), CommType.ALL_TO_ALL: P * (P - 1) / 2 * step(h, m)}[op]


def direct(op: int, topo: str) -> float:
    m = S / P
    load, hops = fan_out(topo, m)
    rs = step(hops, load) + (P - 1) * red(m)
    if op == CommType.ALL_GATHER:
        load, hops = fan_out(topo, S)
        return EP + step(hops, load)
    ag = step(*reversed(fan_out(topo, m)))  # all-gather of the S/P shards
    return EP + {CommType.REDUCE_SCATTER: rs, CommType.ALL_REDUCE: rs + ag,
                 CommType.ALL_TO_ALL: step(hops, load)}[op]


def halving_doubling(op: int, topo: str) -> float:
    q = int(math.log2(P))

    def hops(distance: int) -> int:
        return min(distance, P - distance) if topo == "Ring" else near_hops(topo)

    rs = sum(step(hops(P >> (k + 1)), S / 2 ** (k + 1)) + red(S / 2 ** (k + 1)) for k in range(q))
    ag_shards = sum(step(hops(2**k), S / P * 2**k) for k in range(q))
    return EP + {CommType.REDUCE_SCATTER: rs, CommType.ALL_REDUCE: rs + ag_shards,
                 CommType.ALL_GATHER: sum(step(hops(2**k), S * 2**k) for k in range(q)),
                 CommType.ALL_TO_ALL: sum(step(hops(2**k), S / 2) for k in range(q))}[op]


def double_binary_tree(topo: str) -> float:
    depth = math.ceil(math.log2(P))
    load = S if topo == "Switch" else S / 2
    hops = min(P // 4, P - P // 4) if topo == "Ring" else near_hops(topo)
    return EP + depth * (step(hops, load) + 2 * red(S / 2)) + depth * step(hops, load)


CLOSED = {"ring": ring, "direct": direct, "halvingDoubling": halving_doubling}
OPS = (CommType.ALL_REDUCE, CommType.REDUCE_SCATTER, CommType.ALL_GATHER, CommType.ALL_TO_ALL)


@pytest.mark.parametrize("topo", TOPOLOGIES)
@pytest.mark.parametrize("algo", sorted(CLOSED))
@pytest.mark.parametrize("op", OPS, ids=lambda o: CommType(o).name)
def test_collective_matches_closed_form(op: int, algo: str, topo: str) -> None:
    result = simulate(one_collective(P, op, S), net((topo, P, BW, LAT)), system(algo))
    expected = CLOSED[algo](op, topo)
    assert result.makespan_ns == pytest.approx(expected, rel=1e-9)
    assert {f.finish_ns for f in result.ranks.values()} == {result.makespan_ns}


@pytest.mark.parametrize("topo", TOPOLOGIES)
def test_double_binary_tree_all_reduce(topo: str) -> None:
    result = simulate(one_collective(P, CommType.ALL_REDUCE, S), net((topo, P, BW, LAT)), system("doubleBinaryTree"))
    assert result.makespan_ns == pytest.approx(double_binary_tree(topo))


def test_double_binary_tree_falls_back_to_ring_for_all_gather() -> None:
    result = simulate(one_collective(P, CommType.ALL_GATHER, S), net(("Ring", P, BW, LAT)), system("doubleBinaryTree"))
    assert result.makespan_ns == pytest.approx(ring(CommType.ALL_GATHER, "Ring"))


FAST, SLOW = ("Ring", 4, 100.0, 100.0), ("Switch", 2, 25.0, 1000.0)


def two_dim_phases(size: float) -> list[float]:
    """4 x 2 all-reduce: reduce-scatter in dim 0, all-reduce in dim 1 on size/4, all-gather back in dim 0."""
    b0, b1 = 100.0 * GIB, 25.0 * GIB

    def st(h: int, lat: float, nbytes: float, bw: float) -> float:
        return h * lat + math.floor(nbytes / bw) + EP

    rs0 = EP + 3 * (st(1, 100.0, size / 4, b0) + red(size / 4))
    m1 = size / 4 / 2
    ar1 = EP + (st(2, 1000.0, m1, b1) + red(m1)) + st(2, 1000.0, m1, b1)
    ag0 = EP + 3 * st(1, 100.0, size / 4, b0)
    return [rs0, ar1, ag0]


def test_all_reduce_is_hierarchical_over_two_dimensions() -> None:
    result = simulate(one_collective(8, CommType.ALL_REDUCE, S), net(FAST, SLOW), system("ring"))
    assert result.makespan_ns == pytest.approx(sum(two_dim_phases(S)))


@pytest.mark.parametrize("active", [1, 2, 4])
def test_chunks_pipeline_through_phases(active: int) -> None:
    # 4 chunks through the 3 phases: chunk k enters phase j when it left phase j-1 and a slot is free
    times = two_dim_phases(S / 4)
    done: list[list[float]] = []
    for k in range(4):
        row = []
        for j, t in enumerate(times):
            ready = max(row[j - 1] if j else 0.0, done[k - active][j] if k >= active else 0.0)
            row.append(ready + t)
        done.append(row)
    result = simulate(one_collective(8, CommType.ALL_REDUCE, S), net(FAST, SLOW), system("ring", splits=4, active=active))
    assert result.makespan_ns == pytest.approx(done[-1][-1])


def test_more_bandwidth_is_never_slower() -> None:
    times = [simulate(one_collective(P, CommType.ALL_REDUCE, S), net(("Ring", P, bw, LAT)), system()).makespan_ns
             for bw in (25.0, 50.0, 100.0, 200.0)]
    assert times == sorted(times, reverse=True)
