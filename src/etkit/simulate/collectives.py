"""Collectives as etkit prices them: ASTRA-sim's four natively, the others as sequences of those four.

ASTRA-sim's system layer (:mod:`etkit.simulate.system`) runs ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER
and ALL_TO_ALL. etkit also simulates the collectives ASTRA-sim refuses (or charges 1 ns, BROADCAST),
as what ``etkit export astra-sim`` writes in their place (:func:`decompose`, ``p`` = group members):

==================== ==========================================
collective           simulated as
==================== ==========================================
REDUCE(S)            ALL_REDUCE(S)
BARRIER              ALL_REDUCE(0)
GATHER(S)            ALL_GATHER(S)
REDUCE_SCATTER_BLOCK REDUCE_SCATTER(S)
SCATTER(S)           ALL_GATHER(ceil(S/p))
BROADCAST(S)         ALL_GATHER(ceil(S/p)), then ALL_GATHER(ceil(S/p))
==================== ==========================================

:func:`collective_times` runs one collective alone (every member, or one standing for all when the
group is symmetric) and returns when each member finishes; :func:`plan_collective` and
:func:`p2p_time` are the closed views the calibration fits (one call's time on an idle network).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..format.schema import CommType
from ..records import record
from .algorithms import A2A, AG, AR, RS
from .config import NetworkConfig, SystemConfig
from .events import EventQueue
from .network import Transport, make_network, unaware_delay
from .system import GroupPlan, RankSys, SysParams, symmetric_group

__all__ = ["SUPPORTED", "NATIVE", "KIND", "CollectiveStuck", "decompose", "collective_times", "GroupShape", "group_shape",
           "CollectivePlan", "plan_collective", "p2p_time"]

#: ASTRA-sim's own collectives and the system layer's name for each.
KIND = {CommType.ALL_REDUCE: AR, CommType.ALL_GATHER: AG, CommType.REDUCE_SCATTER: RS, CommType.ALL_TO_ALL: A2A}
NATIVE = frozenset(int(c) for c in KIND)
_SAME_SIZE = {CommType.REDUCE: CommType.ALL_REDUCE, CommType.GATHER: CommType.ALL_GATHER,
              CommType.REDUCE_SCATTER_BLOCK: CommType.REDUCE_SCATTER}
#: Every collective type etkit simulates.
SUPPORTED = frozenset(int(c) for c in (*KIND, *_SAME_SIZE, CommType.BARRIER, CommType.SCATTER, CommType.BROADCAST))


class CollectiveStuck(RuntimeError):
    """A collective whose members wait for messages no member sends (ASTRA-sim hangs on it too)."""


def decompose(comm_type: int, size: int, members: int) -> tuple[tuple[int, int], ...]:
    """``(comm_type, comm_size)`` of the native collectives that stand for one ``comm_type`` of ``size``
    bytes on a group of ``members`` ranks, in the order they run (see the module docstring)."""
    kind = CommType(comm_type)
    if kind in KIND:
        return ((int(kind), size),)
    if kind in _SAME_SIZE:
        return ((int(_SAME_SIZE[kind]), size),)
    if kind == CommType.BARRIER:
        return ((int(CommType.ALL_REDUCE), 0),)
    shard = -(-size // max(members, 1))
    if kind == CommType.SCATTER:
        return ((int(CommType.ALL_GATHER), shard),)
    if kind == CommType.BROADCAST:
        return ((int(CommType.ALL_GATHER), shard), (int(CommType.ALL_GATHER), shard))
    raise ValueError(f"comm_type {comm_type} is not a collective etkit simulates")


def collective_times(comm_type: int, size: int, members: Sequence[int], network: NetworkConfig, system: SystemConfig,
                     *, congestion: str = "unaware", starts: Mapping[int, float] | None = None,
                     symmetric: bool | None = None, trees: dict | None = None) -> dict[int, float]:
    """Finish time (ns) of every member of one collective run alone on an idle network, each member
    starting at ``starts[member]`` (default 0). The group is ``members`` (every NPU of ``network``:
    the network's own rings). With a symmetric group and equal starts one member is simulated and its
    time given to all (``symmetric`` forces the choice). Decomposed types run their parts in turn.
    ``trees``: which double-binary-tree each (collective kind, dimension) uses next, updated in place
    (ASTRA-sim alternates the two trees chunk by chunk across collectives)."""
    params = SysParams.of(system, network)
    members = tuple(members)
    whole = len(members) == params.total_nodes
    group = GroupPlan(None if whole else members)
    starts = dict(starts or {})
    finish = {m: float(starts.get(m, 0.0)) for m in members}
    for part_type, part_size in decompose(comm_type, size, len(members)):
        kind = KIND[CommType(part_type)]
        one = symmetric if symmetric is not None else (
            len(set(finish.values())) == 1
            and symmetric_group(kind, group, params, network, members[0], congestion == "aware"))
        finish = run_alone(kind, part_size, members, group, params, network, congestion, finish, one, trees)
    return finish


def run_alone(kind: str, size: int, members: tuple[int, ...], group: GroupPlan, params: SysParams,
              network: NetworkConfig, congestion: str, starts: Mapping[int, float], one: bool,
              trees: dict | None = None) -> dict[int, float]:
    """One native collective alone (see :func:`collective_times`); ``one``: simulate ``members[0]``
    only, mirrored, and give every member its time."""
    queue = EventQueue()
    net = make_network(network, queue, congestion, (lambda r: members[0]) if one else None)
    transport = Transport(net)
    done: dict[int, float] = {}
    runners = members[:1] if one else members
    counters: dict = {}

    def launch(rank: int) -> None:
        sys = RankSys(rank, params, queue, transport)
        if trees:
            sys.tree_counter.update(trees)
        counters[rank] = sys.tree_counter
        sys.start(kind, size, group, 0, lambda: done.__setitem__(rank, queue.now), mirrored=one)

    for rank in sorted(runners, key=lambda r: (starts[r], r)):
        queue.at(starts[rank], launch, rank)
    queue.run()
    if len(done) != len(runners):
        missing = sorted(set(runners) - set(done))
        raise CollectiveStuck(f"{kind} of {size} bytes on {len(members)} ranks never finishes on rank(s) "
                              f"{missing[:8]}: its algorithms wait for messages no member sends (ASTRA-sim hangs too)")
    if trees is not None and counters:
        trees.update(counters[runners[0]])
    if one:
        return {m: done[members[0]] - starts[members[0]] + starts[m] for m in members}
    return done


# -- closed views for the calibration --------------------------------------------------------------

@record(frozen=True)
class GroupShape:
    """A group on a network (what :func:`plan_collective` times a collective on)."""

    members: tuple[int, ...]
    network: NetworkConfig


def group_shape(members: Sequence[int], network: NetworkConfig) -> GroupShape:
    return GroupShape(tuple(members), network)


@record(frozen=True)
class CollectivePlan:
    time_ns: float  # the slowest member's time, per-call overhead included


def plan_collective(comm_type: int, size: float, layout: GroupShape, system: SystemConfig) -> CollectivePlan:
    """One collective's time on an idle network (every member starting together), plus the system's
    per-call overhead of its type (an etkit extension)."""
    if len(layout.members) <= 1:
        return CollectivePlan(system.overhead_ns(CommType(comm_type).name))
    times = collective_times(comm_type, int(size), layout.members, layout.network, system)
    return CollectivePlan(max(times.values()) + system.overhead_ns(CommType(comm_type).name))


def p2p_time(network: NetworkConfig, system: SystemConfig, src: int, dst: int, size: float) -> tuple[float, float, tuple[int, ...]]:
    """(total ns, bandwidth ns, dimensions crossed) of one message on an idle network (ASTRA-sim's
    congestion-unaware time, plus the system's per-message ``P2P`` overhead)."""
    if src == dst:
        return system.overhead_ns("P2P"), 0.0, ()
    total = unaware_delay(network, src, dst, size)
    latency = unaware_delay(network, src, dst, 0)
    dims = tuple(i for i, c in enumerate(zip(network.coords(src), network.coords(dst))) if c[0] != c[1])
    return total + system.overhead_ns("P2P"), float(total - latency), dims[:1]
