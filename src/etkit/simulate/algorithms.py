"""Collective algorithms: one class per algorithm, each the state machine of ASTRA-sim's class of the
same name (``astra-sim/system/astraccl/native_collectives/collective_algorithm``), so that every
message leaves and every reduction ends at the tick ASTRA-sim's would.

An algorithm runs one *phase* of one chunk (a stream) on one logical ring or tree of one rank. It is
driven by three events from its stream (:class:`etkit.simulate.system.Stream`): ``init`` (the stream
got a slot in its queue), ``received`` (a message it posted a receive for arrived) and ``general``
(a packet bundle it released came back from the NPU/memory side). A packet bundle costs the
rank's ``endpoint-delay`` (10 ns on a group's own ring, ASTRA-sim's "Fast" local transmission),
plus, when it reduces, three accesses of ``size / local-mem-bw`` each (read, read, write).

* :class:`Ring` (``ring``): every step sends one ``size / p`` message to the next member and receives
  one from the previous; an all-reduce is a reduce-scatter round then an all-gather round
  (``2 (p-1)`` steps), reduce-scatter and all-gather ``p-1``, all-to-all ``p (p-1) / 2`` steps.
* :class:`Direct` (``direct``, ASTRA-sim's ``AllToAll``): ``p-1`` messages at once (or ``directN``: a
  window of N), to every other member in ring order; an all-reduce waits for all ``p-1`` reduced
  shards before it sends the gathered ones.
* :class:`HalvingDoubling` (``halvingDoubling``): ``log2 p`` exchanges with the member
  ``2**k`` positions away; message sizes halve (reduce-scatter) or double (all-gather).
* :class:`DoubleBinaryTree` (``doubleBinaryTree``): an all-reduce up a binary tree (leaves send,
  inner nodes reduce both children's data) and back down; consecutive chunks alternate between
  the two trees. Members finish at different times (the leaves last).

Every class sends through its stream's ``send``/``recv``; under rank symmetry (one representative
simulated for a group of identical ranks) a send is *mirrored*: the message it sends stands for the
one it receives from the member playing the destination's role (see :mod:`etkit.simulate.system`).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from .topology import BinaryTree, LogicalRing

if TYPE_CHECKING:
    from .system import Stream

__all__ = ["Algorithm", "Ring", "Direct", "HalvingDoubling", "DoubleBinaryTree", "AR", "AG", "RS", "A2A",
           "ALGORITHM_CLASSES"]

#: Collective kinds as the system layer sees them (ASTRA-sim's ComType).
AR, AG, RS, A2A = "all_reduce", "all_gather", "reduce_scatter", "all_to_all"

_CLOCKWISE, _ANTICLOCKWISE = 0, 1


class Algorithm:
    """Base: what every algorithm exposes to its phase and stream."""

    __slots__ = ("kind", "rank", "data_size", "final_data_size", "stream", "fast")
    kind: str
    rank: int
    data_size: int
    final_data_size: int
    stream: Stream
    fast: bool
    symmetric = True  # every member does the same (a representative can stand for all)

    def bind(self, stream: Stream) -> None:
        self.stream = stream

    def run_init(self) -> None:
        raise NotImplementedError

    def run_received(self) -> None:
        raise NotImplementedError

    def run_general(self) -> None:
        raise NotImplementedError


class Ring(Algorithm):
    """ASTRA-sim's ``Ring``: one message per step to the next member of the ring."""

    __slots__ = ("ring", "direction", "n", "curr_receiver", "curr_sender", "parallel_reduce", "stream_count",
                 "msg_size", "zero_latency", "non_zero_latency", "toggle", "free_packets", "received", "packets",
                 "processed")

    def __init__(self, kind: str, rank: int, ring: LogicalRing, data_size: int, direction: int = _CLOCKWISE) -> None:
        self.kind = kind
        self.rank = rank
        self.ring = ring
        self.direction = direction
        self.data_size = data_size
        n = self.n = ring.n
        self.fast = ring.local
        self.curr_receiver = ring.receiver(rank, direction)
        self.curr_sender = ring.sender(rank, direction)
        self.parallel_reduce = 1
        if kind == AR:
            self.stream_count = 2 * (n - 1)
        elif kind == A2A:
            self.stream_count = (n - 1) * n // 2
        else:
            self.stream_count = n - 1
        if kind == AG:
            self.final_data_size, self.msg_size = data_size * n, data_size
        elif kind == RS:
            self.final_data_size, self.msg_size = data_size // n, data_size // n
        else:  # all-reduce, all-to-all
            self.final_data_size, self.msg_size = data_size, data_size // n
        self.zero_latency = self.non_zero_latency = 0
        self.toggle = False
        self.free_packets = 0
        self.received = 0
        self.packets: deque[tuple[int, int, int]] = deque()  # (source, destination, bytes) per packet
        self.processed = False

    # -- ASTRA-sim's Ring::run and helpers ---------------------------------------------------------

    def run_init(self) -> None:
        for _ in range(self.parallel_reduce):
            self.insert_packet()

    def run_received(self) -> None:
        self.received += 1
        self.insert_packet()

    def run_general(self) -> None:
        self.free_packets += 1
        self.ready()
        self.iteratable()

    def non_zero_latency_packets(self) -> int:
        return (self.n - 1) * self.parallel_reduce

    def insert_packet(self) -> None:
        if self.zero_latency == 0 and self.non_zero_latency == 0:
            self.zero_latency = self.parallel_reduce
            self.non_zero_latency = self.non_zero_latency_packets()
            self.toggle = not self.toggle
        if self.zero_latency > 0:
            self.packets.append((self.curr_sender, self.curr_receiver, self.msg_size))
            self.processed = False
            self.release()
            self.zero_latency -= 1
            return
        if self.non_zero_latency > 0:
            self.packets.append((self.curr_sender, self.curr_receiver, self.msg_size))
            self.processed = self.kind == RS or (self.kind == AR and self.toggle)
            self.release()
            self.non_zero_latency -= 1
            return
        raise AssertionError("ring: should not inject nothing")

    def release(self) -> None:
        """The packet just inserted goes to the NPU/memory side (``process_max_count`` + ``release_packets``)."""
        self.stream.bundle(self.processed, self.msg_size, self.fast)

    def ready(self) -> bool:
        if not self.packets or self.stream_count == 0 or self.free_packets == 0:
            return False
        src, dst, size = self.packets[0]
        self.stream.exchange(dst, src, size)
        self.stream_count -= 1
        self.packets.popleft()
        self.free_packets -= 1
        return True

    def iteratable(self) -> bool:
        if self.stream_count == 0 and self.free_packets == self.parallel_reduce:
            self.stream.phase_done()
            return False
        return True


class Direct(Ring):
    """ASTRA-sim's ``AllToAll`` (``direct`` / ``directN``): every other member at once, in ring order."""

    __slots__ = ("middle_point",)

    def __init__(self, kind: str, rank: int, ring: LogicalRing, data_size: int, direction: int = _CLOCKWISE,
                 window: int = -1) -> None:
        super().__init__(kind, rank, ring, data_size, direction)
        self.middle_point = self.n - 1
        self.parallel_reduce = self.n - 1 if window == -1 else min(window, self.n - 1)
        if kind == A2A:
            self.stream_count = self.n - 1

    def run_general(self) -> None:
        self.free_packets += 1
        if self.kind == AR and self.stream_count <= self.middle_point:
            if self.received < self.middle_point:
                return
            for _ in range(self.parallel_reduce):
                self.ready()
            self.iteratable()
        else:
            self.ready()
            self.iteratable()

    def non_zero_latency_packets(self) -> int:
        return self.parallel_reduce if not self.ring.local else (self.n - 1) * self.parallel_reduce

    def release(self) -> None:
        super().release()
        ring, me, direction = self.ring, self.rank, self.direction
        receiver = ring.receiver(self.curr_receiver, direction)
        if receiver == me:
            receiver = ring.receiver(receiver, direction)
        self.curr_receiver = receiver
        sender = ring.sender(self.curr_sender, direction)
        if sender == me:
            sender = ring.sender(sender, direction)
        self.curr_sender = sender


class HalvingDoubling(Ring):
    """ASTRA-sim's ``HalvingDoubling``: exchanges with the member ``rank_offset`` positions away."""

    __slots__ = ("rank_offset", "offset_multiplier", "log_n")

    def __init__(self, kind: str, rank: int, ring: LogicalRing, data_size: int) -> None:
        if kind == A2A:
            raise ValueError("halvingDoubling has no all-to-all (ASTRA-sim exits on it)")
        super().__init__(kind, rank, ring, data_size)
        n = self.n
        self.log_n = math.log2(n)
        self.stream_count = int(2 * self.log_n) if kind == AR else int(self.log_n)
        if kind == AR:
            self.final_data_size, self.msg_size, self.rank_offset, self.offset_multiplier = data_size, data_size // 2, 1, 2.0
        elif kind == AG:
            self.final_data_size, self.msg_size, self.rank_offset, self.offset_multiplier = data_size * n, data_size, n // 2, 0.5
        else:
            self.final_data_size, self.msg_size, self.rank_offset, self.offset_multiplier = data_size // n, data_size // 2, 1, 2.0
        self._aim()

    def _aim(self) -> None:
        """``curr_receiver = curr_sender`` = the member ``rank_offset`` away, in the direction of this step."""
        ring = self.ring
        if self.rank_offset == 0:
            direction = _CLOCKWISE
        else:
            direction = _CLOCKWISE if (ring.index(self.rank) // self.rank_offset) % 2 == 0 else _ANTICLOCKWISE
        peer = self.rank
        for _ in range(self.rank_offset):
            peer = ring.receiver(peer, direction)
        self.curr_receiver = self.curr_sender = peer

    def non_zero_latency_packets(self) -> int:
        return int(self.log_n - 1 * self.parallel_reduce)

    def release(self) -> None:
        self.stream.bundle(self.processed, self.msg_size, self.fast)
        self.rank_offset = int(self.rank_offset * self.offset_multiplier)
        self.msg_size = int(self.msg_size / self.offset_multiplier)
        if self.rank_offset == self.n and self.kind == AR:
            self.offset_multiplier = 0.5
            self.rank_offset = int(self.rank_offset * self.offset_multiplier)
            self.msg_size = int(self.msg_size / self.offset_multiplier)
        self._aim()


class DoubleBinaryTree(Algorithm):
    """ASTRA-sim's ``DoubleBinaryTreeAllReduce``: reduce up the tree, broadcast down."""

    __slots__ = ("tree", "state", "reductions", "parent", "left", "right", "role")
    symmetric = False

    _BEGIN, _TO_PARENT, _FROM_PARENT, _END, _TWO_CHILDREN, _ONE_CHILD, _TO_CHILDREN = range(7)

    def __init__(self, rank: int, tree: BinaryTree, data_size: int) -> None:
        self.kind = AR
        self.rank = rank
        self.tree = tree
        self.data_size = self.final_data_size = data_size
        self.fast = False
        self.state = self._BEGIN
        self.reductions = 0
        self.parent, self.left, self.right, self.role = tree.node(rank)

    def _bundle(self, processing: bool) -> None:
        self.stream.bundle(processing, self.data_size, False)

    def _step(self, event: str) -> None:
        s, role, S = self.state, self.role, DoubleBinaryTree
        stream, size = self.stream, self.data_size
        if role == "leaf":
            if s == S._BEGIN:
                self._bundle(False)
                self.state = S._TO_PARENT
            elif s == S._TO_PARENT:
                stream.exchange(self.parent, self.parent, size)
                self.state = S._FROM_PARENT
            elif s == S._FROM_PARENT:
                self._bundle(False)
                self.state = S._END
            elif s == S._END:
                stream.phase_done()
            return
        if role == "intermediate":
            if s == S._BEGIN:
                self.state = S._TWO_CHILDREN
                stream.receive(self.left, size)
                stream.receive(self.right, size)
            elif s == S._TWO_CHILDREN and event == "received":
                self._bundle(True)
                self.state = S._ONE_CHILD
            elif s == S._ONE_CHILD and event == "received":
                self._bundle(True)
                self.state = S._TO_PARENT
            elif self.reductions < 1 and event == "general":
                self.reductions += 1
            elif s == S._TO_PARENT:
                self.state = S._FROM_PARENT
                stream.exchange(self.parent, self.parent, size)
            elif s == S._FROM_PARENT and event == "received":
                self._bundle(True)
                self.state = S._TO_CHILDREN
            elif s == S._TO_CHILDREN:
                stream.send(self.left, size)
                stream.send(self.right, size)
                stream.phase_done()
            return
        # root: one child
        child = self.left if self.left >= 0 else self.right
        if s == S._BEGIN:
            self.state = S._ONE_CHILD
            stream.receive(child, size)
        elif s == S._ONE_CHILD:
            self._bundle(True)
            self.state = S._TO_CHILDREN
        elif s == S._TO_CHILDREN:
            stream.send(child, size)
            stream.phase_done()

    def run_init(self) -> None:
        self._step("init")

    def run_received(self) -> None:
        self._step("received")

    def run_general(self) -> None:
        self._step("general")


ALGORITHM_CLASSES = {"ring": Ring, "direct": Direct, "halvingDoubling": HalvingDoubling,
                     "doubleBinaryTree": DoubleBinaryTree}
