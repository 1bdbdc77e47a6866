"""System layer: how long a collective takes on a group of NPUs.

A collective is cut into ``preferred-dataset-splits`` chunks. Each chunk passes through *phases*, one
per network dimension the group spans (hierarchical, ASTRA-sim style: an all-reduce is reduce-scatter
on the inner dimensions, all-reduce on the outermost, then all-gather back inwards). A phase runs one
algorithm (ring, direct, halving-doubling, double binary tree) as a list of :class:`Round` s; a round
costs ``hops * latency + floor(link_bytes / bandwidth) + endpoint_delay`` plus, when it reduces, three
local-memory accesses per received message (``floor(message / local_mem_bw)`` each). Chunks flow
through phases like jobs through a flow shop with ``active-chunks-per-dimension`` slots per phase.

``link_bytes`` is what the busiest link of a member carries in that round, so algorithms that fan
out (direct on a Switch, any multi-hop path on a Ring) pay for their own contention in both
congestion modes; the congestion-aware engine additionally shares links between concurrent flows.

An etkit system may add a fixed per-call overhead per collective type (and ``P2P`` per message,
:meth:`SystemConfig.overhead_ns`): the software cost of a call that the network does not explain,
which a calibration against a real backend finds (gloo's per-type costs differ by milliseconds).

Collectives ASTRA-sim does not simulate get the standard decompositions: broadcast = scatter +
all-gather, reduce = reduce-scatter + gather, gather ~ all-gather, scatter ~ reduce-scatter (no
reduction), barrier = a zero-byte all-reduce (latency only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ..format.schema import CommType
from .config import Dimension, NetworkConfig, SystemConfig

__all__ = ["Round", "Phase", "LayoutDim", "CollectivePlan", "group_layout", "plan_collective", "rounds",
           "round_time", "phase_time", "flow_shop", "p2p_time", "MEMORY_ACCESSES_PER_REDUCTION"]

#: A reduction reads both operands and writes the result (ASTRA-sim's PacketBundle model).
MEMORY_ACCESSES_PER_REDUCTION = 3


@dataclass(frozen=True)
class Round:
    """One algorithm step as one member sees it."""

    link_bytes: float  # bytes on this member's busiest link
    hops: int  # links the slowest message of the round crosses
    message_bytes: float  # size of one message (what a reduction reads)
    reduced_messages: int  # messages reduced into the local buffer on arrival


@dataclass(frozen=True)
class LayoutDim:
    """A group's extent in one network dimension: ``p`` members spaced ``stride`` positions apart."""

    index: int
    dim: Dimension
    p: int
    stride: int = 1

    def hops(self, index_distance: int) -> int:
        distance = (index_distance * self.stride) % self.dim.npus if self.dim.npus else index_distance
        return self.dim.hops(distance)

    def fan_out_load(self, message: float) -> float:
        """Busiest-link bytes when every member sends ``message`` bytes to every other member at once."""
        if self.p <= 1:
            return 0.0
        if self.dim.topology == "Switch":
            return (self.p - 1) * message
        if self.dim.topology == "FullyConnected":
            return message
        # Ring: shortest paths both ways round the ring; the load spreads evenly over 2p directed links.
        return message * sum(self.hops(k) for k in range(1, self.p)) / 2


@dataclass(frozen=True)
class Phase:
    layout: LayoutDim
    rounds: tuple[Round, ...]


@dataclass(frozen=True)
class CollectivePlan:
    """Phases of one chunk, chunk count and the resulting time (ns) with its bandwidth share."""

    phases: tuple[Phase, ...]
    chunks: int
    time_ns: float
    bandwidth_ns: float  # part of ``time_ns`` spent moving bytes (what link sharing stretches)
    dims: tuple[int, ...]  # network dimensions the collective uses


def group_layout(members: tuple[int, ...], network: NetworkConfig) -> tuple[LayoutDim, ...]:
    """Which network dimensions a group spans and how many members it has in each.

    A group that is a full grid of coordinates (any sub-grid, e.g. a tensor-parallel group inside a
    node or a data-parallel group across a rail) maps to one :class:`LayoutDim` per spanned dimension.
    An irregular group is treated as one flat dimension over the slowest links it crosses.
    """
    if len(members) <= 1:
        return ()
    coords = [network.coords(r) for r in members]
    values = [sorted({c[i] for c in coords}) for i in range(len(network.dims))]
    spanned = [i for i, v in enumerate(values) if len(v) > 1]
    if math.prod(len(values[i]) for i in spanned) == len(members):
        out = []
        for i in spanned:
            gaps = [b - a for a, b in zip(values[i], values[i][1:])]
            out.append(LayoutDim(i, network.dims[i], len(values[i]), min(gaps)))
        return tuple(out)
    dims = [network.dims[i] for i in spanned]
    topology = dims[0].topology if len(dims) == 1 else "FullyConnected"
    flat = Dimension(topology, len(members), min(d.bandwidth_gbps for d in dims), sum(d.latency_ns for d in dims))
    return (LayoutDim(spanned[-1], flat, len(members)),)


def rounds(algorithm: str, op: str, layout: LayoutDim, size: float, reduce: bool = True) -> tuple[Round, ...]:
    """Rounds of ``op`` ("rs", "ag", "ar", "a2a") with ``algorithm`` on ``layout``.

    ``size`` is the buffer each member holds for rs/ar/a2a and the per-member shard for ag.
    """
    p = layout.p
    if p <= 1:
        return ()
    if op == "ar":
        if algorithm == "doubleBinaryTree":
            return _double_binary_tree(layout, size, reduce)
        return rounds(algorithm, "rs", layout, size, reduce) + rounds(algorithm, "ag", layout, size / p)
    red = 1 if reduce and op == "rs" else 0
    if algorithm == "direct":
        message = size / p if op in ("rs", "a2a") else size
        return (Round(layout.fan_out_load(message), layout.hops(p // 2) if layout.dim.topology == "Ring" else layout.hops(1),
                      message, red * (p - 1)),)
    if algorithm == "halvingDoubling":
        steps = math.ceil(math.log2(p))
        if op == "rs":
            return tuple(Round(size / 2 ** (k + 1), layout.hops(max(1, p >> (k + 1))), size / 2 ** (k + 1), red)
                         for k in range(steps))
        if op == "ag":
            return tuple(Round(size * 2 ** k, layout.hops(2 ** k % p or 1), size * 2 ** k, 0) for k in range(steps))
        return tuple(Round(size / 2, layout.hops(2 ** k % p or 1), size / 2, 0) for k in range(steps))
    # ring (also the fallback of doubleBinaryTree for non-all-reduce operations)
    near = layout.hops(1)
    if op == "rs":
        return (Round(size / p, near, size / p, red),) * (p - 1)
    if op == "ag":
        return (Round(size, near, size, 0),) * (p - 1)
    return (Round(size / p, near, size / p, 0),) * (p * (p - 1) // 2)


def _double_binary_tree(layout: LayoutDim, size: float, reduce: bool) -> tuple[Round, ...]:
    # Two complementary trees each carry half the buffer: reduce up the tree, then broadcast down.
    depth = max(1, math.ceil(math.log2(layout.p)))
    half = size / 2
    load = size if layout.dim.topology == "Switch" else half  # a Switch port carries both trees' halves
    hops = layout.hops(max(1, layout.p // 4))
    up = Round(load, hops, half, 2 if reduce else 0)
    down = Round(load, hops, half, 0)
    return (up,) * depth + (down,) * depth


def round_time(rnd: Round, dim: Dimension, system: SystemConfig) -> tuple[float, float]:
    """(total ns, bandwidth ns) of one round."""
    transfer = math.floor(rnd.link_bytes / dim.bytes_per_ns)
    reduce = (MEMORY_ACCESSES_PER_REDUCTION * rnd.reduced_messages * math.floor(rnd.message_bytes / system.local_mem_bw_gbps)
              if rnd.reduced_messages else 0)
    return rnd.hops * dim.latency_ns + transfer + system.endpoint_delay_ns + reduce, float(transfer)


def phase_time(phase: Phase, system: SystemConfig) -> tuple[float, float]:
    total, bandwidth = system.endpoint_delay_ns, 0.0
    for rnd in phase.rounds:
        t, b = round_time(rnd, phase.layout.dim, system)
        total += t
        bandwidth += b
    return total, bandwidth


def flow_shop(times: list[float], chunks: int, slots: int) -> float:
    """Finish time of ``chunks`` equal chunks through phases of ``times``, ``slots`` chunks per phase at once."""
    if not times:
        return 0.0
    finish = [[0.0] * len(times) for _ in range(chunks)]
    for k in range(chunks):
        for j, t in enumerate(times):
            ready = finish[k][j - 1] if j else 0.0
            if k >= slots:
                ready = max(ready, finish[k - slots][j])
            finish[k][j] = ready + t
    return finish[-1][-1]


_FAMILY = {CommType.ALL_REDUCE: "all_reduce", CommType.BROADCAST: "all_reduce", CommType.REDUCE: "all_reduce",
           CommType.BARRIER: "all_reduce", CommType.ALL_GATHER: "all_gather", CommType.GATHER: "all_gather",
           CommType.REDUCE_SCATTER: "reduce_scatter", CommType.REDUCE_SCATTER_BLOCK: "reduce_scatter",
           CommType.SCATTER: "reduce_scatter", CommType.ALL_TO_ALL: "all_to_all"}
SUPPORTED = frozenset(_FAMILY)


def _phases(comm_type: int, layout: tuple[LayoutDim, ...], chunk: float, system: SystemConfig) -> list[Phase]:
    family = _FAMILY[CommType(comm_type)]

    def algo(ld: LayoutDim) -> str:
        return system.algorithm(family, ld.index)

    if comm_type in (CommType.ALL_GATHER, CommType.GATHER):
        phases, shard = [], chunk
        for ld in reversed(layout):  # slow outer links carry the small shards, fast inner ones the big
            phases.append(Phase(ld, rounds(algo(ld), "ag", ld, shard)))
            shard *= ld.p
        return phases
    if comm_type in (CommType.REDUCE_SCATTER, CommType.REDUCE_SCATTER_BLOCK, CommType.SCATTER):
        phases, size = [], chunk
        reduce = comm_type != CommType.SCATTER
        for ld in layout:
            phases.append(Phase(ld, rounds(algo(ld), "rs", ld, size, reduce)))
            size /= ld.p
        return phases
    if comm_type == CommType.ALL_TO_ALL:
        return [Phase(ld, rounds(algo(ld), "a2a", ld, chunk)) for ld in layout]
    # all-reduce shaped: rs inner dims, ar on the outermost, ag back inwards
    reduce = comm_type != CommType.BROADCAST
    down, sizes, size = [], [], chunk
    for ld in layout[:-1]:
        down.append(Phase(ld, rounds(algo(ld), "rs", ld, size, reduce)))
        sizes.append(size)
        size /= ld.p
    last = layout[-1]
    middle = Phase(last, rounds(algo(last), "ar", last, size, reduce))
    up = [Phase(ld, rounds(algo(ld), "ag", ld, s / ld.p)) for ld, s in zip(reversed(layout[:-1]), reversed(sizes))]
    return down + [middle] + up


def plan_collective(comm_type: int, size: float, layout: tuple[LayoutDim, ...], system: SystemConfig) -> CollectivePlan:
    """Plan and time one collective of ``size`` bytes (``comm_size``) over a group laid out as ``layout``."""
    if not layout:
        return CollectivePlan((), 1, 0.0, 0.0, ())
    zero = comm_type == CommType.BARRIER or size <= 0
    chunks = 1 if zero else system.preferred_dataset_splits
    chunk = 0.0 if zero else size / chunks
    phases = tuple(p for p in _phases(comm_type, layout, chunk, system) if p.rounds)
    timed = [phase_time(p, system) for p in phases]
    total = flow_shop([t for t, _ in timed], chunks, system.active_chunks_per_dimension)
    serial = sum(t for t, _ in timed) * chunks
    bandwidth = sum(b for _, b in timed) * chunks * (total / serial if serial else 0.0)
    total += system.overhead_ns(CommType(comm_type).name)
    return CollectivePlan(phases, chunks, total, bandwidth, tuple(sorted({ld.index for ld in layout})))


@lru_cache(maxsize=4096)
def _route(network: NetworkConfig, src: int, dst: int) -> tuple[int, float, tuple[int, ...], float]:
    a, b = network.coords(src), network.coords(dst)
    hops, latency, dims, bw = 0, 0.0, [], math.inf
    for i, (x, y, dim) in enumerate(zip(a, b, network.dims)):
        if x != y:
            h = dim.hops(abs(x - y))
            hops += h
            latency += h * dim.latency_ns
            dims.append(i)
            bw = min(bw, dim.bytes_per_ns)
    return hops, latency, tuple(dims), bw


def p2p_time(network: NetworkConfig, system: SystemConfig, src: int, dst: int, size: float) -> tuple[float, float, tuple[int, ...]]:
    """(total ns, bandwidth ns, dimensions used) of one point-to-point message."""
    if src == dst:
        return system.endpoint_delay_ns, 0.0, ()
    _, latency, dims, bw = _route(network, src, dst)
    transfer = float(math.floor(max(size, 0) / bw))
    return latency + transfer + system.endpoint_delay_ns + system.overhead_ns("P2P"), transfer, dims
