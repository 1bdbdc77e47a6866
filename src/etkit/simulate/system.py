"""System layer: how one rank runs a collective, as ASTRA-sim's ``Sys`` does (``astra-sim/system/Sys.cc``).

A collective of ``size`` bytes is cut into chunks of ``size // preferred-dataset-splits`` bytes (at
least one byte per NPU of the network, except for all-gather; every chunk is full-sized, so a size
that does not divide gives one more chunk). Each chunk is a :class:`Stream` that runs one *phase* per
network dimension its group spans, each phase one algorithm (:mod:`etkit.simulate.algorithms`) on
that dimension's ring or trees:

* all-reduce (``collective-optimization: localBWAware``, the default): reduce-scatter on every
  dimension but the last, all-reduce on the last, all-gather back down; ``baseline``: an all-reduce
  on every dimension in turn;
* reduce-scatter and all-to-all: dimension 0 upwards; all-gather: the last dimension downwards;
* a group smaller than the whole network: one phase on the group's own ring (``ring`` unless the
  system names exactly one algorithm for the collective), packet bundles of 10 ns.

Every dimension has one queue per rank (ASTRA-sim's ``--num-queues-per-dim`` default of 1) in which
``active-chunks-per-dimension`` streams run at once; the others wait in priority order. The
reduce-scatter and all-gather phases of one dimension share its queue.

:class:`RankSys` is one rank's system layer: its queues, its batched events
(:class:`~etkit.simulate.events.RankTicks`) and the counters ASTRA-sim keeps per rank (priorities,
which of the two trees the next double-binary-tree chunk uses).

*Rank symmetry.* When every member of a group behaves the same (one class of identical ranks, an
algorithm whose members all play the same role, a network that looks the same from every member),
one representative stands for the group: its sends are *mirrored* (:class:`~etkit.simulate.network.Transport`),
each delivered to itself as the message it expects from the member that plays the destination's role.
:func:`symmetric_group` decides when that holds.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Sequence

from ..records import record
from .algorithms import A2A, AG, AR, RS, Algorithm, Direct, DoubleBinaryTree, HalvingDoubling, Ring
from .config import NetworkConfig, SystemConfig
from .events import EventQueue, RankTicks
from .network import Transport
from .topology import ANTICLOCKWISE, CLOCKWISE, DimPlan, LogicalRing, dimension_rings

__all__ = ["SysParams", "RankSys", "Stream", "GroupPlan", "symmetric_group", "split_algorithm", "chunking",
           "ring_order", "KINDS", "FAST_BUNDLE_NS"]

#: The collective kinds ASTRA-sim's system layer runs.
KINDS = (AR, AG, RS, A2A)
#: Packet bundle cost on a group's own ring (ASTRA-sim's hard-coded "Fast" transmission).
FAST_BUNDLE_NS = 10


def split_algorithm(name: str) -> tuple[str, int]:
    """ASTRA-sim implementation name -> (algorithm, window): ``direct8`` -> ("direct", 8), ``oneRing`` -> ("ring", -1)."""
    base = name[3].lower() + name[4:] if name.startswith("one") else name
    if base.startswith("direct"):
        return "direct", int(base[6:]) if len(base) > 6 else -1
    return base, -1


@record(frozen=True)
class SysParams:
    """The system configuration as every rank's system layer reads it."""

    endpoint_delay: int
    local_mem_bw: float  # GB/s
    active_chunks: int
    splits: int
    baseline: bool  # collective-optimization: baseline (else localBWAware)
    lifo: bool
    impls: dict  # kind -> tuple of implementation names per dimension
    dims: tuple[int, ...]  # NPUs per network dimension

    @property
    def total_nodes(self) -> int:
        return math.prod(self.dims)

    @classmethod
    def of(cls, system: SystemConfig, network: NetworkConfig) -> SysParams:
        return cls(int(system.endpoint_delay_ns), float(system.local_mem_bw_gbps), int(system.active_chunks_per_dimension),
                   int(system.preferred_dataset_splits), system.collective_optimization == "baseline",
                   system.scheduling_policy != "FIFO",
                   {AR: system.all_reduce, AG: system.all_gather, RS: system.reduce_scatter, A2A: system.all_to_all},
                   tuple(d.npus for d in network.dims))

    def reduce_ns(self, size: int) -> int:
        """Local memory time of one reduction of ``size`` bytes: read, read, write (PacketBundle)."""
        return 3 * int(size / (self.local_mem_bw * 1e9) * 1e9)


def chunking(params: SysParams, kind: str, size: int) -> tuple[int, int]:
    """(chunk bytes, bytes to cut) of a collective of ``size`` bytes (``Sys::determine_chunk_size``):
    a chunk is at least one byte per NPU (except for all-gather), which may raise the size."""
    chunk = size // params.splits
    if kind != AG and params.total_nodes > chunk:
        chunk = params.total_nodes
        size = params.splits * chunk
    if chunk <= 0:  # ASTRA-sim loops forever here (an all-gather smaller than its splits): one byte per chunk
        chunk = 1
    return chunk, size


def ring_order(groups, pg: str | None, world: int) -> tuple[int, ...]:
    """A group's members in the order its comm-group entry lists them (the order of its own ring)."""
    in_order = getattr(groups, "in_order", None)
    return in_order(pg, world) if in_order is not None else groups.members(pg, world)


class GroupPlan:
    """How a group runs collectives: the whole network's rings (``members`` None) or its own local ring."""

    __slots__ = ("members", "ring")

    def __init__(self, members: Sequence[int] | None) -> None:
        self.members = tuple(members) if members is not None else None
        self.ring = LogicalRing(self.members, local=True) if self.members is not None else None

    @property
    def whole(self) -> bool:
        return self.members is None


class Stream:
    """One chunk of one collective on one rank (ASTRA-sim's ``StreamBaseline``)."""

    __slots__ = ("sys", "dataset", "tag", "phases", "alg", "queue_id", "priority", "initialized", "mirrored")

    def __init__(self, sys: RankSys, dataset: _DataSet, tag: Hashable, phases: deque, priority: int, mirrored: bool) -> None:
        self.sys = sys
        self.dataset = dataset
        self.tag = tag
        self.phases = phases  # deque of (queue id, algorithm)
        self.alg: Algorithm | None = None
        self.queue_id = -1
        self.priority = priority
        self.initialized = False
        self.mirrored = mirrored
        for _, alg in phases:
            alg.bind(self)

    # -- what algorithms call ---------------------------------------------------------------------

    def bundle(self, processing: bool, size: int, fast: bool) -> None:
        sys = self.sys
        sys.ticks.register(FAST_BUNDLE_NS if fast else sys.params.endpoint_delay, sys.bundle_done,
                           (self.alg, processing, size))

    def exchange(self, dst: int, src: int, size: int) -> None:
        """Send ``size`` bytes to ``dst`` and post the receive of as many from ``src``."""
        sys, alg = self.sys, self.alg
        me = sys.rank
        sys.transport.send(self.tag, me, dst, size, None, None, src if self.mirrored else None)
        sys.transport.recv(self.tag, src, me, size, sys.received, alg)

    def send(self, dst: int, size: int) -> None:
        self.sys.transport.send(self.tag, self.sys.rank, dst, size, None, None)

    def receive(self, src: int, size: int) -> None:
        self.sys.transport.recv(self.tag, src, self.sys.rank, size, self.sys.received, self.alg)

    def phase_done(self) -> None:
        self.sys.proceed(self)

    def init(self) -> None:
        self.initialized = True
        self.alg.run_init()  # type: ignore[union-attr]  # (bound before the stream starts)


class _DataSet:
    __slots__ = ("total", "finished", "on_done")

    def __init__(self, on_done: Callable[[], None]) -> None:
        self.total = 0
        self.finished = 0
        self.on_done = on_done

    def stream_finished(self) -> None:
        self.finished += 1
        if self.finished == self.total:
            self.on_done()


class RankSys:
    """One rank's system layer: queues per dimension, batched events, per-rank counters."""

    __slots__ = ("rank", "params", "queue", "ticks", "transport", "active", "running", "priority_counter",
                 "tree_counter", "_rings")

    def __init__(self, rank: int, params: SysParams, queue: EventQueue, transport: Transport,
                 ticks: RankTicks | None = None) -> None:
        self.rank = rank
        self.params = params
        self.queue = queue
        self.ticks = ticks or RankTicks(queue)
        self.transport = transport
        ndims = max(len(params.dims), 1)
        self.active: list[list[Stream]] = [[] for _ in range(ndims)]
        self.running = [0] * ndims
        self.priority_counter = 0
        self.tree_counter: dict[tuple[str, int], int] = {}
        self._rings: dict[str, list[DimPlan]] = {}

    # -- events -----------------------------------------------------------------------------------

    def bundle_done(self, item: tuple[Algorithm, bool, int]) -> None:
        alg, processing, size = item
        if processing:
            self.ticks.register(self.params.reduce_ns(size), self.bundle_done, (alg, False, size))
        else:
            alg.run_general()

    @staticmethod
    def received(alg: Algorithm) -> None:
        alg.run_received()

    # -- collectives --------------------------------------------------------------------------------

    def dim_plans(self, kind: str) -> list[DimPlan]:
        plans = self._rings.get(kind)
        if plans is None:
            plans = self._rings[kind] = dimension_rings(self.rank, self.params.dims, self.params.impls[kind])
        return plans

    def _phase(self, kind: str, whole_kind: str, plan: DimPlan | LogicalRing, dim: int, impl: str, size: int,
               direction: int) -> Algorithm:
        name, window = split_algorithm(impl)
        if isinstance(plan, LogicalRing):
            ring = plan
        elif plan.trees is not None:
            key = (whole_kind, dim)
            count = self.tree_counter.get(key, 0)
            self.tree_counter[key] = count + 1
            return DoubleBinaryTree(self.rank, plan.trees[count % 2], size)
        else:
            ring = plan.ring  # type: ignore[assignment]  # (a plan without trees has a ring)
        if name == "direct":
            return Direct(kind, self.rank, ring, size, direction, window)
        if name == "halvingDoubling":
            return HalvingDoubling(kind, self.rank, ring, size)
        if name == "doubleBinaryTree":  # on a group's own ring (ASTRA-sim has no tree there): the ring
            return Ring(kind, self.rank, ring, size, direction)
        return Ring(kind, self.rank, ring, size, direction)

    def _phases(self, kind: str, group: GroupPlan, chunk: int) -> deque:
        p = self.params
        phases: deque = deque()
        if not group.whole:
            impls = p.impls[kind]
            impl = impls[0] if len(impls) == 1 else "ring"
            ring = group.ring
            assert ring is not None  # (a group that is not the whole network has its own ring)
            if ring.n > 1:
                phases.append((0, self._phase(kind, kind, ring, 0, impl, chunk, CLOCKWISE)))
            return phases
        plans = self.dim_plans(kind)
        impls = p.impls[kind]
        dims = [d for d in range(len(plans)) if plans[d].size > 1]
        remain = chunk
        if kind != AR or p.baseline:
            order = list(reversed(dims)) if kind == AG else dims
            for d in order:
                alg = self._phase(kind, kind, plans[d], d, impls[d], remain, CLOCKWISE)
                phases.append((d, alg))
                remain = alg.final_data_size
            return phases
        if not dims:
            return phases
        last = dims[-1]
        for d in dims[:-1]:
            alg = self._phase(RS, kind, plans[d], d, impls[d], remain, CLOCKWISE)
            phases.append((d, alg))
            remain = alg.final_data_size
        alg = self._phase(AR, kind, plans[last], last, impls[last], remain, CLOCKWISE)
        phases.append((last, alg))
        remain = alg.final_data_size
        for d in reversed(dims[:-1]):
            alg = self._phase(AG, kind, plans[d], d, impls[d], remain, ANTICLOCKWISE)
            phases.append((d, alg))
            remain = alg.final_data_size
        return phases

    def start(self, kind: str, size: int, group: GroupPlan, tag: Hashable, on_done: Callable[[], None],
              mirrored: bool = False) -> int:
        """Issue a collective (``Sys::generate_collective``); ``on_done()`` when its last chunk finished.
        Stream ``i`` uses tag ``(tag, i)``. Returns the number of chunks (0: nothing to do, done at once)."""
        p = self.params
        chunk, size = chunking(p, kind, size)
        dataset = _DataSet(on_done)
        if p.lifo:
            priority = self.priority_counter
            self.priority_counter += 1
        else:
            priority = self.priority_counter
            self.priority_counter -= 1
        count = 0
        while size > 0:
            size = 0 if chunk > size else size - chunk
            phases = self._phases(kind, group, chunk)
            if not phases:
                break
            stream = Stream(self, dataset, (tag, count), phases, priority, mirrored)
            count += 1
            dataset.total = count + 1  # not finished before every stream is issued
            self.proceed(stream)
        dataset.total = count
        if count == 0:
            on_done()
        elif dataset.finished == count:
            on_done()
        return count

    # -- queues (Sys::proceed_to_next_vnet_baseline and the scheduler unit) ---------------------------

    def proceed(self, stream: Stream) -> None:
        previous = stream.queue_id
        if not stream.phases:
            stream.dataset.stream_finished()
        if previous >= 0:
            self.active[previous].remove(stream)
        if not stream.phases:
            if previous >= 0:
                self._removed(previous)
            return
        queue_id, alg = stream.phases.popleft()
        stream.queue_id = queue_id
        stream.alg = alg
        stream.initialized = False
        self._insert(self.active[queue_id], stream)
        if previous >= 0:
            self._removed(previous)
        self._added(queue_id)

    @staticmethod
    def _insert(queue: list[Stream], stream: Stream) -> None:
        i, n, pri = 0, len(queue), stream.priority
        while i < n:
            other = queue[i]
            if other.initialized or other.priority >= pri:
                i += 1
                continue
            break
        queue.insert(i, stream)

    def _added(self, q: int) -> None:
        queue, limit = self.active[q], self.params.active_chunks
        i = self.running[q]
        while i < len(queue) and self.running[q] < limit:
            queue[i].init()
            self.running[q] += 1
            i += 1

    def _removed(self, q: int) -> None:
        self.running[q] -= 1
        self._added(q)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def symmetric_group(kind: str, group: GroupPlan, params: SysParams, network: NetworkConfig, rank: int,
                    aware: bool = False) -> bool:
    """Whether every member of ``group`` runs a ``kind`` collective exactly as ``rank`` does when all
    start together: every algorithm gives each member the same role (no double binary tree;
    halving-doubling on a power of two) and every member reaches the peers of each role over the same
    number of hops of the same dimension. ``aware``: also the same links, shifted: on a Ring dimension
    that takes a ring or direct algorithm on the dimension's own ring (halving-doubling pairs members
    whose paths round the ring differ from member to member)."""
    if aware and any(d.topology == "Ring" for d in network.dims):
        if not group.whole:
            return False
        impls = params.impls[kind]
        probe = RankSys(rank, params, EventQueue(), None)  # type: ignore[arg-type]
        for d, plan in enumerate(probe.dim_plans(kind)):
            name = split_algorithm(impls[d])[0]
            if plan.size > 1 and (impls[d].startswith("one") or (d < len(network.dims) and network.dims[d].topology == "Ring"
                                                                  and name not in ("ring", "direct"))):
                return False
    if group.whole:
        impls = params.impls[kind]
        probe = RankSys(rank, params, EventQueue(), None)  # type: ignore[arg-type]
        plans = probe.dim_plans(kind)
        rings = []
        for d, plan in enumerate(plans):
            if plan.size <= 1:
                continue
            if plan.trees is not None:
                return False
            rings.append((plan.ring, split_algorithm(impls[d])[0]))
    else:
        impls = params.impls[kind]
        name = split_algorithm(impls[0])[0] if len(impls) == 1 else "ring"
        if name == "doubleBinaryTree":
            name = "ring"
        rings = [(group.ring, name)] if group.ring is not None and group.ring.n > 1 else []
    for ring, name in rings:
        assert ring is not None
        n = ring.n
        peers: list[Callable[..., int]]
        if name == "halvingDoubling":
            if not _power_of_two(n):
                return False
            peers = [lambda i, k=1 << b: i ^ k for b in range(int(math.log2(n)))]
        elif name == "direct":
            peers = [lambda i, k=k: (i + k) % n for k in range(1, n)]
        else:
            peers = [lambda i: (i + 1) % n, lambda i: (i - 1) % n]
        m = ring.members
        for peer in peers:
            seen = {_route_signature(network, m[i], m[peer(i)]) for i in range(n)}
            if len(seen) > 1:
                return False
    return True


def _route_signature(network: NetworkConfig, src: int, dst: int) -> tuple:
    """What a message's time depends on, up to congestion: per dimension, the hops it crosses."""
    out = []
    for dim in network.dims:
        n = dim.npus
        a, b = src % n, dst % n
        out.append(0 if a == b else (min((b - a) % n, (a - b) % n) if dim.topology == "Ring" else 1))
        src //= n
        dst //= n
    return tuple(out)
