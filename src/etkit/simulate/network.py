"""Network layer: how long a message takes from one NPU to another, in two implementations of one interface.

* :class:`UnawareNetwork` (ASTRA-sim's congestion-unaware analytical backend): a message crosses only
  the first dimension in which the two NPUs differ, taking ``floor(hops * latency + bytes /
  bandwidth)`` ns whatever else is in flight. ``hops`` is 1 on a FullyConnected dimension, 2 through a
  Switch and the shorter way round a Ring.
* :class:`AwareNetwork` (ASTRA-sim's congestion-aware backend, extended to several dimensions): every
  directed link is a FIFO queue. A message is stored and forwarded link by link along its route; a
  link sends one message at a time, is busy for ``floor(bytes / bandwidth)`` and delivers it to the
  next device ``floor(latency + bytes / bandwidth)`` after it started. On one dimension this is
  ASTRA-sim's model exactly (Ring: the shorter direction, ties clockwise; Switch: NPU -> switch ->
  NPU; FullyConnected: one link per ordered pair). Beyond ASTRA-sim (which refuses more than one
  dimension), a message between NPUs that differ in several dimensions is routed dimension by
  dimension, lowest first, each dimension's topology in the line of NPUs that share the other
  coordinates.

Bandwidth is GB/s turned into bytes per ns as ASTRA-sim does (``GB/s * 2**30 / 1e9``).

:class:`Transport` is what both backends share in front of the network (ASTRA-sim's
``CommonNetworkApi``): a send and a receive meet on (tag, source, destination, size, n-th such
message); the sender's handler runs when the message arrives, the receiver's at arrival or at once
when it posts its receive after the arrival. A *mirrored* send (rank symmetry, see
:mod:`etkit.simulate.system`) is delivered to its own sender as the message it expects from the peer
that plays the destination's role.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from .config import NetworkConfig
from .events import EventQueue

__all__ = ["bytes_per_ns", "UnawareNetwork", "AwareNetwork", "Transport", "make_network", "unaware_delay"]


def bytes_per_ns(bandwidth_gbps: float) -> float:
    """ASTRA-sim's ``bw_GBps_to_Bpns`` (same floating-point operations, same result)."""
    return bandwidth_gbps * 1073741824 / 1000000000


def _ring_hops(a: int, b: int, n: int) -> int:
    clockwise = b - a
    if clockwise < 0:
        clockwise += n
    return min(clockwise, n - clockwise)


def _hops(topology: str, a: int, b: int, n: int) -> int:
    if topology == "Ring":
        return _ring_hops(a, b, n)
    return 2 if topology == "Switch" else 1


def unaware_delay(network: NetworkConfig, src: int, dst: int, size: float) -> int:
    """ns one message of ``size`` bytes takes from ``src`` to ``dst`` on the congestion-unaware backend."""
    if src == dst:
        return 0
    for dim in network.dims:
        n = dim.npus
        a, b = src % n, dst % n
        if a != b:
            hops = _hops(dim.topology, a, b, n)
            return int(hops * dim.latency_ns + size / bytes_per_ns(dim.bandwidth_gbps))
        src //= n
        dst //= n
    return 0


class UnawareNetwork:
    """Congestion-unaware: a message arrives after its own fixed delay (see the module docstring)."""

    def __init__(self, network: NetworkConfig, queue: EventQueue) -> None:
        self.config = network
        self.queue = queue
        self._delays: dict[tuple[int, int, float], int] = {}

    def delay(self, src: int, dst: int, size: float) -> int:
        key = (src, dst, size)
        got = self._delays.get(key)
        if got is None:
            got = self._delays[key] = unaware_delay(self.config, src, dst, size)
        return got

    def send(self, src: int, dst: int, size: float, handler: Callable[[Any], None], arg: Any) -> None:
        queue = self.queue
        queue.at(queue.now + self.delay(src, dst, size), handler, arg)

    @staticmethod
    def idle() -> bool:
        return True


class _Link:
    """One directed link: a FIFO of messages, one on the wire at a time."""

    __slots__ = ("queue", "bpns", "latency", "busy", "pending", "carried")

    def __init__(self, queue: EventQueue, bandwidth_gbps: float, latency_ns: float) -> None:
        self.queue = queue
        self.bpns = bytes_per_ns(bandwidth_gbps)
        self.latency = latency_ns
        self.busy = False
        self.pending: deque[list] = deque()
        self.carried = 0.0  # bytes, for reports and tests

    def send(self, msg: list) -> None:
        if self.busy:
            self.pending.append(msg)
        else:
            self._transmit(msg)

    def _transmit(self, msg: list) -> None:
        self.busy = True
        size = msg[2]
        self.carried += size
        queue = self.queue
        now = queue.now
        serial = size / self.bpns
        queue.at(now + int(self.latency + serial), _hop_done, msg)
        queue.at(now + int(serial), self._free, None)

    def _free(self, _: Any) -> None:
        self.busy = False
        if self.pending:
            self._transmit(self.pending.popleft())


def _hop_done(msg: list) -> None:
    """A message reached the end of one link: deliver it, or queue it on the next link of its route."""
    links = msg[0]
    msg[1] += 1
    if msg[1] == len(links):
        msg[3](msg[4])
    else:
        links[msg[1]].send(msg)


class AwareNetwork:
    """Congestion-aware: links with FIFO queues (see the module docstring).

    ``canon`` maps an NPU to the NPU whose links stand for its links (rank symmetry: every member of
    a class of identical ranks sees the same traffic, so the class's representative's links carry
    it); the identity when None.
    """

    def __init__(self, network: NetworkConfig, queue: EventQueue, canon: Callable[[int], int] | None = None) -> None:
        self.config = network
        self.queue = queue
        self.canon = canon or (lambda r: r)
        self.links: dict[tuple, _Link] = {}
        self._routes: dict[tuple[int, int], tuple[_Link, ...]] = {}
        self.in_flight = 0

    def _link(self, key: tuple, dim: int) -> _Link:
        link = self.links.get(key)
        if link is None:
            d = self.config.dims[dim]
            link = self.links[key] = _Link(self.queue, d.bandwidth_gbps, d.latency_ns)
        return link

    def route(self, src: int, dst: int) -> tuple[_Link, ...]:
        """The links from ``src`` to ``dst``, in order."""
        got = self._routes.get((src, dst))
        if got is not None:
            return got
        canon = self.canon
        links: list[_Link] = []
        current = src
        stride = 1
        for d, dim in enumerate(self.config.dims):
            n = dim.npus
            a, b = (current // stride) % n, (dst // stride) % n
            if a != b:
                base = current - a * stride
                if dim.topology == "Switch":
                    links.append(self._link(("up", d, canon(current)), d))
                    links.append(self._link(("down", d, canon(base + b * stride)), d))
                elif dim.topology == "FullyConnected":
                    links.append(self._link(("fc", d, canon(current), base + b * stride), d))
                else:
                    clockwise = (b - a) % n
                    step = -1 if n - clockwise < clockwise else 1
                    pos = a
                    while pos != b:
                        links.append(self._link(("ring", d, canon(base + pos * stride), step), d))
                        pos = (pos + step) % n
                current = base + b * stride
            stride *= n
        route = self._routes[(src, dst)] = tuple(links)
        return route

    def send(self, src: int, dst: int, size: float, handler: Callable[[Any], None], arg: Any) -> None:
        route = self.route(src, dst)
        if not route:
            self.queue.at(self.queue.now, handler, arg)
            return
        self.in_flight += 1
        route[0].send([route, 0, size, self._delivered, (handler, arg)])

    def _delivered(self, item: tuple[Callable[[Any], None], Any]) -> None:
        self.in_flight -= 1
        item[0](item[1])

    def idle(self) -> bool:
        """Nothing in flight and every link free (what a collective started now shares its links with)."""
        return self.in_flight == 0 and not any(link.busy for link in self.links.values())


def make_network(network: NetworkConfig, queue: EventQueue, congestion: str,
                 canon: Callable[[int], int] | None = None) -> UnawareNetwork | AwareNetwork:
    """The backend for ``congestion`` ("unaware" or "aware")."""
    if congestion == "aware":
        return AwareNetwork(network, queue, canon)
    return UnawareNetwork(network, queue)


class Transport:
    """Sends meet receives on (tag, source, destination, size, n-th such message), as in ASTRA-sim."""

    __slots__ = ("network", "queue", "_entries", "_send_ids", "_recv_ids")

    def __init__(self, network: UnawareNetwork | AwareNetwork) -> None:
        self.network = network
        self.queue = network.queue
        # key -> [send handler, send arg, recv handler, recv arg, arrived]
        self._entries: dict[tuple, list] = {}
        self._send_ids: dict[tuple, int] = {}
        self._recv_ids: dict[tuple, int] = {}

    def send(self, tag: Hashable, src: int, dst: int, size: float, handler: Callable[[Any], None] | None, arg: Any,
             mirror: int | None = None) -> None:
        """Send; ``handler(arg)`` (if any) when the message arrived. With ``mirror``, the message is the
        one ``src`` receives from ``mirror`` (rank symmetry)."""
        ids = self._send_ids
        k = (tag, src, dst, size)
        cid = ids[k] = ids.get(k, -1) + 1
        key = (tag, src, dst, size, cid) if mirror is None else (tag, mirror, src, size, cid)
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = [handler, arg, None, None, False]
        else:
            entry[0], entry[1] = handler, arg
        self.network.send(src, dst, size, self._arrived, key)

    def _arrived(self, key: tuple) -> None:
        entry = self._entries[key]
        if entry[0] is not None:
            entry[0](entry[1])
        if entry[2] is not None:
            del self._entries[key]
            entry[2](entry[3])
        else:
            entry[4] = True

    def recv(self, tag: Hashable, src: int, dst: int, size: float, handler: Callable[[Any], None], arg: Any) -> None:
        """Post a receive; ``handler(arg)`` when its message has arrived."""
        ids = self._recv_ids
        k = (tag, src, dst, size)
        cid = ids[k] = ids.get(k, -1) + 1
        key = (tag, src, dst, size, cid)
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = [None, None, handler, arg, False]
        elif entry[4]:
            del self._entries[key]
            self.queue.at(self.queue.now, handler, arg)
        else:
            entry[2], entry[3] = handler, arg

    def pending(self) -> int:
        """Messages or receives still waiting for their other half."""
        return len(self._entries)
