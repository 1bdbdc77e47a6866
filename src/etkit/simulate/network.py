"""Network layer, congestion-aware mode: concurrent flows share the links they use.

A flow is one collective (over every member's port in each dimension it spans) or one point-to-point
message (the ports of both ends in each dimension of its route). A flow alone takes ``fixed_ns +
bandwidth_ns`` (the congestion-unaware time of :mod:`etkit.simulate.collectives`); while ``n`` flows
share a port, each gets ``1/n`` of that port's bandwidth and a flow moves at the pace of its most
shared port, so its bandwidth part stretches by that factor and its fixed part (latency, endpoint,
reduction) does not. Rates are recomputed whenever a flow starts or ends (a fluid model, in any
number of dimensions; ASTRA-sim's congestion-aware backend handles one).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

__all__ = ["Flow", "LinkSharing", "collective_ports", "p2p_ports"]

Port = tuple[int, int, int]  # (rank, dimension, direction: 0 out, 1 in); links are full duplex


def collective_ports(members: tuple[int, ...], dims: tuple[int, ...]) -> frozenset[Port]:
    return frozenset((r, d, way) for r in members for d in dims for way in (0, 1))


def p2p_ports(src: int, dst: int, dims: tuple[int, ...]) -> frozenset[Port]:
    return frozenset([(src, d, 0) for d in dims] + [(dst, d, 1) for d in dims])


@dataclass
class Flow:
    ports: frozenset[Port]
    fixed_ns: float
    bandwidth_ns: float
    remaining: float = 1.0  # fraction of the flow still to go
    rate: float = 0.0  # fraction per ns
    updated: float = 0.0
    version: int = 0


class LinkSharing:
    """Active flows and their shares; every change returns ``(flow id, finish time, version)`` to (re)schedule."""

    def __init__(self) -> None:
        self.flows: dict[int, Flow] = {}
        self.users: dict[Port, set[int]] = defaultdict(set)

    def _share(self, flow: Flow) -> float:
        crowd = max((len(self.users[p]) for p in flow.ports), default=1)
        return 1.0 / max(crowd, 1)

    def _retime(self, fids: set[int], now: float) -> list[tuple[int, float, int]]:
        out = []
        for fid in fids:
            flow = self.flows[fid]
            flow.remaining = max(flow.remaining - flow.rate * (now - flow.updated), 0.0)
            flow.updated = now
            total = flow.fixed_ns + flow.bandwidth_ns / self._share(flow)
            flow.rate = 1.0 / total if total > 0 else float("inf")
            flow.version += 1
            finish = now + (flow.remaining / flow.rate if flow.rate != float("inf") else 0.0)
            out.append((fid, finish, flow.version))
        return out

    def _neighbours(self, flow: Flow) -> set[int]:
        out: set[int] = set()
        for p in flow.ports:
            out |= self.users[p]
        return out

    def add(self, fid: int, ports: frozenset[Port], fixed_ns: float, bandwidth_ns: float, now: float) -> list[tuple[int, float, int]]:
        flow = Flow(ports, fixed_ns, bandwidth_ns, updated=now)
        self.flows[fid] = flow
        # settle the others at their old rates before the newcomer changes the shares
        others = self._neighbours(flow)
        for other in others:
            o = self.flows[other]
            o.remaining = max(o.remaining - o.rate * (now - o.updated), 0.0)
            o.updated = now
        for p in ports:
            self.users[p].add(fid)
        return self._retime(others | {fid}, now)

    def current(self, fid: int, version: int) -> bool:
        flow = self.flows.get(fid)
        return flow is not None and flow.version == version

    def remove(self, fid: int, now: float) -> list[tuple[int, float, int]]:
        flow = self.flows.pop(fid)
        for p in flow.ports:
            self.users[p].discard(fid)
        return self._retime(self._neighbours(flow), now)
