"""What one collective or message costs on a system, measured by the simulator itself.

Producers that must plan on a clock (the serving generator decides each engine step's batch from when
the previous step ends) take a cost function ``(kind, bytes, ranks) -> ns``; :func:`comm_cost` makes
one from a network and system by simulating the operation alone on the job's world (one node per
involved rank), so that the producer's clock and a later simulation of its ETs agree.

Costs are affine in size between powers of two (latency terms plus bytes over bandwidth, per chunk),
so each (kind, ranks) is simulated at the powers of two around the asked size and interpolated
linearly; results are cached, a run of thousands of steps costs a few dozen simulations.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..format.attrs import make_attr
from ..format.schema import CommType, Node, NodeType
from ..model.groups import ProcessGroups
from ..model.job import Job
from ..model.trace import Trace
from .config import Knobs, NetworkConfig, SystemConfig

__all__ = ["comm_cost"]

_KINDS = {"all_reduce": CommType.ALL_REDUCE, "all_to_all": CommType.ALL_TO_ALL,
          "all_gather": CommType.ALL_GATHER, "reduce_scatter": CommType.REDUCE_SCATTER}


def comm_cost(network: NetworkConfig, system: SystemConfig, world: int,
              knobs: Knobs | None = None) -> Callable[[str, int, tuple[int, ...]], float]:
    """A cost function ``(kind, bytes, ranks) -> ns`` for a job of ``world`` ranks on ``network``/``system``.

    ``kind`` is "p2p" (a message from ``ranks[0]`` to ``ranks[1]``) or a collective ("all_reduce",
    "all_to_all", "all_gather", "reduce_scatter") over ``ranks``.
    """
    cache: dict[tuple[str, tuple[int, ...], int], float] = {}

    def at(kind: str, ranks: tuple[int, ...], size: int) -> float:
        key = (kind, ranks, size)
        if key not in cache:
            cache[key] = _simulate_one(kind, ranks, size, network, system, world, knobs)
        return cache[key]

    def cost(kind: str, nbytes: int, ranks: tuple[int, ...]) -> float:
        if nbytes <= 0 or len(ranks) < 2:
            return 0.0
        lo = 1 << max(int(nbytes).bit_length() - 1, 0)
        if lo == nbytes:
            return at(kind, ranks, lo)
        hi = lo * 2
        t_lo, t_hi = at(kind, ranks, lo), at(kind, ranks, hi)
        return t_lo + (t_hi - t_lo) * (nbytes - lo) / (hi - lo)

    return cost


def _simulate_one(kind: str, ranks: tuple[int, ...], size: int, network: NetworkConfig, system: SystemConfig,
                  world: int, knobs: Knobs | None) -> float:
    from . import simulate

    if kind != "p2p" and kind not in _KINDS:
        raise ValueError(f"unknown communication kind {kind!r}")
    groups = ProcessGroups() if kind == "p2p" else ProcessGroups.from_mapping({"1": ranks})
    traces = {rank: Trace.from_nodes(None, _probe_nodes(kind, ranks, size, rank)) for rank in range(world)}
    result = simulate(Job(traces, groups), network, system, knobs)
    finishes = [result.ranks[r].finish_ns for r in ranks if r in result.ranks]
    return float(max(finishes)) if finishes and math.isfinite(max(finishes)) else 0.0


def _probe_nodes(kind: str, ranks: tuple[int, ...], size: int, rank: int) -> list[Node]:
    """The one node ``rank`` runs in the probe (none when it is not involved)."""
    if rank not in ranks:
        return []
    node = Node(id=1, name="probe")
    if kind == "p2p":
        src, dst = ranks[0], ranks[1]
        if rank not in (src, dst):
            return []
        node.type = NodeType.COMM_SEND_NODE if rank == src else NodeType.COMM_RECV_NODE
        node.attr.extend([make_attr("comm_size", size), make_attr("comm_src", src), make_attr("comm_dst", dst),
                          make_attr("comm_tag", 1)])
    else:
        node.type = NodeType.COMM_COLL_NODE
        node.attr.extend([make_attr("comm_type", int(_KINDS[kind])), make_attr("comm_size", size),
                          make_attr("pg_name", "1")])
    node.attr.append(make_attr("is_cpu_op", False))
    return [node]
