"""Workload layer: walks every rank class's program the way ASTRA-sim's ``Workload`` walks an ET, hands
collectives to the system layer and messages to the network, and reports blocked ranks instead of hanging.

Per NPU there are three resources (one CPU op, one GPU compute op and one GPU communication op in
flight: a collective or a SEND; RECV and memory nodes take none; a system's ``etkit-comm-slots-per-rank``
lets a backend such as gloo run several comm ops at once, ``etkit-comm-slots-per-group`` at most that many
collectives of one group). Whenever one of a rank's nodes
finishes, the rank issues, smallest node id first, every node whose dependencies are done and whose
resource is free (ASTRA-sim's ``issue_dep_free_nodes``); METADATA and INVALID nodes finish at once
and, as in ASTRA-sim, their children wait for the rank's next finish (etkit issues them at once when
nothing else runs on the rank, where ASTRA-sim would stop). A compute node lasts ``duration_micros``
(0 counts as 1 ns) or its roofline time.

Collectives are not barriers: each member starts when it issues its node and finishes when its own
part is done (ASTRA-sim's system layer, :mod:`etkit.simulate.system`). In the congestion-unaware mode
a collective's members interact with nothing else, so each instance (the k-th collective on a
communicator) is timed once all its members issued it, as a function of when each did
(:func:`etkit.simulate.collectives.collective_times`, cached); no member can finish before the last
one issued. In the congestion-aware mode members run live on the shared links.

SEND and RECV meet on (source, destination, tag; a RECV without ``comm_src``/``comm_tag`` takes any)
in order, preferring a message of the same size: the SEND ends when the message has arrived, the RECV
when it has arrived and the RECV was posted. When no event is left but nodes remain, the engine raises
:class:`SimulationBlocked` with a report naming each blocked node, its rank and what it waits for.

Rank symmetry: the engine walks one representative per class of identical ranks
(:mod:`etkit.simulate.workload`). A collective of a group whose members form one class and behave
alike (:func:`etkit.simulate.system.symmetric_group`) is simulated for the representative alone
(mirrored sends, and in the aware mode every member's links folded onto the representative's, see
:class:`etkit.simulate.network.AwareNetwork`). Where members of one class would finish a collective
at different times the classes were wrong: the engine raises :class:`SymmetryBroken` and the caller
simulates again without merging ranks.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import field
from typing import Any

import numpy as np

from ..errors import EtkitError
from ..format.schema import CommType
from ..model.groups import ProcessGroups
from ..model.matching import Matching, summary
from ..model.trace import comm_type_name
from ..records import record
from .collectives import KIND, SUPPORTED, CollectiveStuck, decompose, run_alone
from .config import NetworkConfig, SystemConfig
from .events import EventQueue, RankTicks
from .network import Transport, make_network
from .system import GroupPlan, RankSys, SysParams, ring_order, symmetric_group
from .workload import K_COLL, K_INSTANT, K_RECV, K_SEND, PROGRAM_KIND_NAMES, RESOURCE_OF_KIND, RankClass

__all__ = ["BlockedNode", "BlockedReport", "SimulationBlocked", "SymmetryBroken", "EngineResult", "run_engine",
           "disagreement_report", "REFUSED"]


@record(frozen=True)
class BlockedNode:
    rank: int
    node_id: int
    name: str
    kind: str
    waits_for: str


@record
class BlockedReport:
    """Why a simulation could not finish: ``reason`` and the nodes that cannot make progress."""

    reason: str
    nodes: list[BlockedNode]
    time_ns: float = 0.0
    waiting_on_deps: dict[int, int] = field(default_factory=dict)  # rank -> nodes never ready
    #: the pre-check's findings (``rank R node N: [rule] message``): ranks that disagree about a call
    disagreements: list[str] = field(default_factory=list)

    def lines(self, limit: int = 40, *, allow: str = "allow_mismatch=True") -> list[str]:
        """The report, one line per blocked node or finding (``allow``: how the caller runs a refused job
        anyway, in its words; the CLI says ``--allow-mismatch``)."""
        if self.disagreements:
            out = [f"simulation refused ({self.reason}): {len(self.disagreements)} finding(s), as etkit validate "
                   f"reports them ({allow} simulates the job anyway)"]
            out += [f"  {d}" for d in self.disagreements[:limit]]
            if len(self.disagreements) > limit:
                out.append(f"  ... and {len(self.disagreements) - limit} more")
            return out
        out = [f"simulation blocked ({self.reason}) at {self.time_ns:,.0f} ns: {len(self.nodes)} blocked node(s)"]
        for b in self.nodes[:limit]:
            out.append(f"  rank {b.rank}: node {b.node_id} {b.name!r} ({b.kind}) waits for {b.waits_for}")
        if len(self.nodes) > limit:
            out.append(f"  ... and {len(self.nodes) - limit} more")
        if self.waiting_on_deps:
            counts = ", ".join(f"rank {r}: {n}" for r, n in sorted(self.waiting_on_deps.items())[:16])
            out.append(f"  nodes never ready (waiting on the blocked ones): {counts}")
        return out

    def to_dict(self) -> dict:
        out = {"reason": self.reason, "time_ns": self.time_ns,
               "blocked": [b.__dict__ for b in self.nodes], "waiting_on_deps": self.waiting_on_deps}
        if self.disagreements:
            out["disagreements"] = self.disagreements
        return out


#: What the pre-check refuses: the disagreements the engine would run through (a collective of another type
#: or size, a message whose receive expects another size); the others (:data:`etkit.model.matching.DISAGREEMENTS`:
#: a call some rank never makes, a message without a partner) block the run itself, with a report of the nodes.
REFUSED = frozenset({"collective-mismatch", "collective-size-mismatch", "p2p-size-mismatch"})


def disagreement_report(found: Matching) -> BlockedReport | None:
    """The pre-check: a report of the ranks' disagreements (:func:`etkit.model.matching.match_comm`, what
    ``etkit validate`` reports) that :data:`REFUSED` names, or None when they agree."""
    bad = found.errors(REFUSED)
    if not bad:
        return None
    return BlockedReport("ranks disagree", [], disagreements=summary(bad, len(bad)).splitlines())


class SimulationBlocked(EtkitError):
    """The job cannot run to the end: ranks disagree (unmatched message, missing collective member), the
    graph has a cycle or a missing dependency, or a node cannot be simulated. Carries a :class:`BlockedReport`."""

    def __init__(self, report: BlockedReport) -> None:
        self.report = report
        super().__init__("\n".join(report.lines()))


class SymmetryBroken(Exception):
    """Ranks merged into one class would not run alike (internal: the caller simulates them apart)."""


@record
class EngineResult:
    start: list[np.ndarray]  # per class, ns per row (NaN = never ran)
    end: list[np.ndarray]
    transfer: list[np.ndarray]  # comm rows: when the transfer could begin (the rest of the comm time is waiting)
    events: int
    warnings: list[str]


@record
class _Instance:
    members: tuple[int, ...]
    seq: int
    needed: frozenset[int]
    comm_type: int
    size: float
    serial: int
    arrived: dict[int, int] = field(default_factory=dict)  # class -> row
    at: dict[int, float] = field(default_factory=dict)  # class -> when it issued
    delays: dict[int, float] | None = None  # class -> release after its finish (overheads, recorded residuals)


@record
class _Message:
    cls: int
    row: int
    src: int
    dst: int
    tag: int
    size: float
    time: float
    recv: _Message | None = None  # the RECV it is matched with
    arrived: bool = False


class _Engine:
    def __init__(self, classes: list[RankClass], groups: ProcessGroups, world: int, network: NetworkConfig,
                 system: SystemConfig, congestion: str, rng: np.random.Generator | None = None,
                 folded: bool = False) -> None:
        self.classes = classes
        self.rng = rng if system.collective_residuals_ns else None
        self.residual_cache: dict[tuple[int, int], tuple[tuple[tuple[float, ...], ...], bool, float]] = {}
        self.groups = groups
        self.world = world
        self.network = network
        self.system = system
        self.params = SysParams.of(system, network)
        self.aware = congestion == "aware"
        self.class_of_rank = {r: i for i, c in enumerate(classes) for r in c.ranks}
        self.rep_of_class = [c.rank for c in classes]
        self.queue = EventQueue()
        self.warnings: list[str] = []
        n = len(classes)
        self.ticks = [RankTicks(self.queue) for _ in range(n)]
        self.indeg = [array("q", c.program.indegree) for c in classes]
        self.ready: list[list[list]] = [[[], [], []] for _ in range(n)]  # per resource: heap of (node id, row)
        self.free_ready: list[list] = [[] for _ in range(n)]  # ready nodes that take no resource: (node id, row)
        self.busy = [[0, 0, 0] for _ in range(n)]  # per resource: ops in flight
        # ops each resource runs at once: one CPU, one compute op, comm-slots-per-rank comm ops (1: ASTRA-sim)
        self.capacity = (1, 1, system.comm_slots_per_rank)
        self.group_slots = system.comm_slots_per_group  # collectives of one group at once (0: no own limit)
        self.group_busy: list[dict[str | None, int]] = [{} for _ in range(n)]
        self.inflight = [0] * n
        # per row, ns (NaN = not yet): compact arrays, handed to the result as numpy views without a copy
        self.start = [_nans(len(c.program)) for c in classes]
        self.end = [_nans(len(c.program)) for c in classes]
        self.transfer = [_nans(len(c.program)) for c in classes]  # comm rows: when data could start moving
        self.coll_seq: list[dict[tuple, int]] = [{} for _ in range(n)]
        self.instances: dict[tuple, _Instance] = {}
        self.serials = 0
        self.sends: dict[int, deque[_Message]] = {}  # unreceived messages by destination rank
        self.recvs: dict[int, deque[_Message]] = {}  # by receiving rank
        self.members_cache: dict[str | None, tuple[int, ...]] = {}
        self.needed_cache: dict[tuple[int, ...], frozenset[int]] = {}
        self.group_cache: dict[tuple[int, ...], GroupPlan] = {}
        self.component_cache: dict[tuple, tuple[int, ...]] = {}
        self.symmetric_cache: dict[tuple, bool] = {}
        self.time_cache: dict[tuple, Any] = {}  # (times, trees) per held-out part, or the aware time
        self.trees: dict = {}  # double-binary-tree alternation of the every-NPU group (the same on every rank)
        self.folded = folded  # aware: every collective is one class's, simulated for its representative
        canon = (lambda r: self.rep_of_class[self.class_of_rank.get(r, 0)]) if folded else None
        self.net = make_network(network, self.queue, congestion, canon)
        self.p2p_extra = system.overhead_ns("P2P")
        self.coll_transport = Transport(self.net) if self.aware else None
        self.rank_sys: list[RankSys | None] = [None] * n

    # -- helpers ------------------------------------------------------------------------------

    def members(self, pg: str | None) -> tuple[int, ...]:
        got = self.members_cache.get(pg)
        if got is None:
            got = ring_order(self.groups, pg, self.world)
            self.members_cache[pg] = got
        return got

    def group_plan(self, members: tuple[int, ...]) -> GroupPlan:
        plan = self.group_cache.get(members)
        if plan is None:
            whole = len(members) == self.params.total_nodes or any(members == c for c in self.component_cache.values())
            plan = self.group_cache[members] = GroupPlan(None if whole else members)
        return plan

    def symmetric(self, kind: str, members: tuple[int, ...]) -> bool:
        key = (kind, members)
        got = self.symmetric_cache.get(key)
        if got is None:
            got = self.symmetric_cache[key] = symmetric_group(kind, self.group_plan(members), self.params,
                                                              self.network, members[0], self.aware)
        return got

    def component(self, comm_type: int, rank: int, members: tuple[int, ...]) -> tuple[int, ...]:
        """The NPUs ``rank`` exchanges data with in a collective of every NPU: a system that lists fewer
        implementations than the network has dimensions runs the collective in the first dimensions
        only, as independent collectives of the NPUs that share the other coordinates (ASTRA-sim's
        logical topology), which finish without waiting for each other."""
        try:
            kind = KIND[CommType(decompose(comm_type, 0, len(members))[0][0])]
        except ValueError:
            return members
        impls = self.params.impls[kind]
        dims = self.params.dims
        if impls[0].startswith("one") or len(impls) >= len(dims):
            return members
        stride = math.prod(dims[:len(impls)])
        base = rank - rank % stride
        key = (kind, base)
        got = self.component_cache.get(key)
        if got is None:
            got = self.component_cache[key] = tuple(range(base, base + stride))
        return got

    # -- node life cycle (ASTRA-sim's Workload) ---------------------------------------------------

    def issue_ready(self, c: int) -> None:
        """Issue every ready node whose resource is free, smallest id first (``issue_dep_free_nodes``):
        the nodes ready when it starts; those an instant node frees wait for the rank's next finish."""
        busy, ready, capacity = self.busy[c], self.ready[c], self.capacity
        while True:
            picks = self.free_ready[c]
            self.free_ready[c] = []
            for res in (0, 1):
                if not busy[res] and ready[res]:
                    picks.append(heapq.heappop(ready[res]))
                    busy[res] = 1
            if busy[2] < capacity[2] and ready[2]:
                if self.group_slots:
                    self.take_comm(c, picks)
                else:
                    while busy[2] < capacity[2] and ready[2]:
                        picks.append(heapq.heappop(ready[2]))
                        busy[2] += 1
            if not picks:
                return
            if len(picks) > 1:
                picks.sort()
            deferred = False
            for _, row in picks:
                if self.issue(c, row):
                    deferred = True
            # etkit goes on where ASTRA-sim would stop: nothing left running on the rank to finish next
            if not deferred or self.inflight[c]:
                return

    def take_comm(self, c: int, picks: list) -> None:
        """Ready comm ops up to the rank's comm slots, smallest id first, passing over collectives of a
        group that already runs ``comm-slots-per-group`` of them (they stay ready)."""
        busy, ready, prog, per_group = self.busy[c], self.ready[c][2], self.classes[c].program, self.group_busy[c]
        passed = []
        while busy[2] < self.capacity[2] and ready:
            item = heapq.heappop(ready)
            if prog.kind[item[1]] == K_COLL:
                pg = prog.pg(item[1])
                if per_group.get(pg, 0) >= self.group_slots:
                    passed.append(item)
                    continue
                per_group[pg] = per_group.get(pg, 0) + 1
            picks.append(item)
            busy[2] += 1
        for item in passed:
            heapq.heappush(ready, item)

    def make_ready(self, c: int, row: int) -> None:
        prog = self.classes[c].program
        res = RESOURCE_OF_KIND[prog.kind[row]]
        if res < 0:
            self.free_ready[c].append((prog.ids[row], row))
        else:
            heapq.heappush(self.ready[c][res], (prog.ids[row], row))

    def issue(self, c: int, row: int) -> bool:
        """Start one node; True when it finished at once (an instant node)."""
        prog = self.classes[c].program
        self.start[c][row] = self.queue.now
        kind = prog.kind[row]
        if kind == K_INSTANT:
            self.finish_node(c, row)
            return True
        self.inflight[c] += 1
        if kind == K_COLL:
            self.join_collective(c, row)
        elif kind == K_SEND or kind == K_RECV:
            self.post_message(c, row, kind)
        else:
            self.ticks[c].register(prog.duration[row], self.node_done, (c, row))
        return False

    def finish_node(self, c: int, row: int) -> None:
        prog = self.classes[c].program
        self.end[c][row] = self.queue.now
        res = RESOURCE_OF_KIND[prog.kind[row]]
        if res >= 0:
            self.busy[c][res] -= 1
            if self.group_slots and prog.kind[row] == K_COLL:
                self.group_busy[c][prog.pg(row)] -= 1
        indeg = self.indeg[c]
        children = prog.child_idx
        for i in range(prog.child_ptr[row], prog.child_ptr[row + 1]):
            child = children[i]
            indeg[child] -= 1
            if indeg[child] == 0:
                self.make_ready(c, child)

    def node_done(self, item: tuple[int, int]) -> None:
        c, row = item
        self.inflight[c] -= 1
        self.finish_node(c, row)
        self.issue_ready(c)

    # -- collectives ----------------------------------------------------------------------------

    def join_collective(self, c: int, row: int) -> None:
        prog = self.classes[c].program
        pg = prog.pg(row)
        members = self.members(pg)
        communicator = (pg if pg not in (None, "", "0") else "0", members)  # equal members, other pg: another communicator
        counters = self.coll_seq[c]
        k = counters.get(communicator, 0)
        counters[communicator] = k + 1
        comm_type, size = prog.comm_type[row], prog.comm_size[row]
        if not self.aware and len(members) == self.params.total_nodes:
            members = self.component(comm_type, self.rep_of_class[c], members)
        key = (communicator, k, members)
        inst = self.instances.get(key)
        if inst is None:
            needed = self.needed_cache.get(members)
            if needed is None:
                needed = frozenset(self.class_of_rank[r] for r in members)
                self.needed_cache[members] = needed
            self.serials += 1
            inst = _Instance(members, k, needed, comm_type, size, self.serials)
            self.instances[key] = inst
        elif inst.comm_type != comm_type:
            self.warnings.append(f"rank {self.classes[c].rank} node {prog.ids[row]}: collective #{k} on group "
                                 f"{_short(members)} is {comm_type_name(comm_type)} but another member issued "
                                 f"{comm_type_name(inst.comm_type)}")
        elif size != inst.size:
            inst.size = max(size, inst.size)
        inst.arrived[c] = row
        inst.at[c] = self.queue.now
        if self.aware:
            self.run_live(inst, c, row)
        if len(inst.arrived) == len(inst.needed):
            del self.instances[key]
            now = self.queue.now
            for cls, arrived_row in inst.arrived.items():
                self.transfer[cls][arrived_row] = now
            if not self.aware:
                self.run_alone(inst)

    def _parts(self, inst: _Instance) -> tuple[tuple[int, int], ...]:
        return decompose(inst.comm_type, int(inst.size), len(inst.members))

    def run_alone(self, inst: _Instance) -> None:
        """Unaware: every member's finish from when each issued (cached), then each class's release."""
        members = inst.members
        class_of = self.class_of_rank
        starts = {m: inst.at[class_of[m]] for m in members}
        base = min(starts.values())
        finish = {m: starts[m] - base for m in members}
        if len(members) > 1:
            group = self.group_plan(members)
            for part_type, part_size in self._parts(inst):
                kind = KIND[CommType(part_type)]
                rel = tuple(finish[m] for m in members)
                tree_key = tuple(sorted(self.trees.items())) if group.whole else ()
                key = (kind, part_size, members, rel, tree_key)
                got = self.time_cache.get(key)
                if got is None:
                    one = len(set(rel)) == 1 and self.symmetric(kind, members)
                    trees = dict(self.trees) if group.whole else None
                    try:
                        times = run_alone(kind, part_size, members, group, self.params, self.network, "unaware",
                                          finish, one, trees)
                    except CollectiveStuck as exc:
                        nodes = [n for c, row in inst.arrived.items() for n in self._blocked(c, row, str(exc))]
                        raise SimulationBlocked(BlockedReport("a collective that cannot finish", nodes,
                                                              self.queue.now)) from None
                    got = self.time_cache[key] = (times, trees)
                finish, trees = got
                if trees is not None:
                    self.trees = dict(trees)
        ends = {c: base + finish[self.rep_of_class[c]] for c in inst.arrived}
        for m in members:
            if base + finish[m] != ends[class_of[m]]:
                raise SymmetryBroken(f"rank {m} would finish a collective at {base + finish[m]:,.0f} ns, "
                                     f"the first rank of its class at {ends[class_of[m]]:,.0f} ns")
        delays = self.release_delays(inst)
        now = self.queue.now
        for c, row in inst.arrived.items():
            when = max(ends[c], now) + delays.get(c, 0.0)
            self.ticks[c].register(when - now, self.node_done, (c, row))

    def run_live(self, inst: _Instance, c: int, row: int) -> None:
        """Aware: the member (class ``c``'s representative) starts its part now; the parts of a
        decomposed type run one after another."""
        sys = self.rank_sys[c]
        if sys is None:
            transport = self.coll_transport
            assert transport is not None  # (made with the aware backend that runs parts live)
            sys = self.rank_sys[c] = RankSys(self.rep_of_class[c], self.params, self.queue, transport, self.ticks[c])
        parts = self._parts(inst)
        members = inst.members
        group = self.group_plan(members)

        def part(i: int) -> None:
            if i == len(parts) or len(members) <= 1:
                self.live_done(inst, c, row)
                return
            part_type, part_size = parts[i]
            kind = KIND[CommType(part_type)]
            mirrored = self.folded and self.symmetric(kind, members)
            if mirrored and len(members) == self.world and self.net.idle():
                # every rank is in it and nothing else is on the links: it runs as it runs alone
                self.ticks[c].register(self.alone_ns(kind, part_size, members, group), part, i + 1)
                return
            sys.start(kind, part_size, group, (inst.serial, i), lambda: part(i + 1), mirrored)

        part(0)

    def alone_ns(self, kind: str, size: int, members: tuple[int, ...], group: GroupPlan) -> float:
        """Aware: a symmetric collective of every rank on idle links, timed once (cached)."""
        key = (kind, size, members)
        got = self.time_cache.get(key)
        if got is None:
            times = run_alone(kind, size, members, group, self.params, self.network, "aware",
                              {m: 0.0 for m in members}, True)
            got = self.time_cache[key] = times[members[0]]
        return got

    def live_done(self, inst: _Instance, c: int, row: int) -> None:
        delays = self.release_delays(inst)
        delay = delays.get(c, 0.0) if delays else 0.0
        self.ticks[c].register(delay, self.node_done, (c, row))

    def release_delays(self, inst: _Instance) -> dict[int, float]:
        """Per class, ns between its part's end and its release: the per-call overhead (an etkit system
        extension) and, in a Monte Carlo run, a recorded residual."""
        if inst.delays is not None:
            return inst.delays
        overhead = self.system.overhead_ns(CommType(inst.comm_type).name) if inst.comm_type in SUPPORTED else 0.0
        delays = {c: overhead for c in inst.needed} if overhead else {}
        if self.rng is not None:
            drawn = self.draw_residuals(inst)
            if drawn:
                delays = {c: overhead + d for c, d in drawn.items()}
        inst.delays = delays
        return delays

    def draw_residuals(self, inst: _Instance) -> dict[int, float]:
        """Draw each member's residual from the system's recorded ones (a whole recorded vector of a
        group of this size, members in random order, else independent draws). A residual changes the
        call's software cost (its overhead) only: no member returns before the network moved the
        bytes (a residual below minus the overhead is floored at the smallest one above it)."""
        key = (inst.comm_type, len(inst.members))
        found = self.residual_cache.get(key)
        if found is None:
            name = comm_type_name(inst.comm_type)
            found = self.system.residual_vectors(name, len(inst.members)) + (self.system.overhead_ns(name),)
            self.residual_cache[key] = found
        vectors, whole, overhead = found
        if not vectors:
            return {}
        rng = self.rng
        assert rng is not None  # (made for every system with recorded residuals)
        if whole:
            vec = vectors[int(rng.integers(len(vectors)))]
            drawn = dict(zip(inst.members, (vec[i] for i in rng.permutation(len(vec)))))
        else:
            drawn = dict(zip(inst.members, (vectors[i][0] for i in rng.integers(len(vectors), size=len(inst.members)))))
        per_class: dict[int, float] = {}
        for r, d in drawn.items():  # (simulate() does not merge ranks when drawing; a merged class takes its first member's)
            per_class.setdefault(self.class_of_rank[r], d)
        shift = max(min(per_class.values()), -overhead)
        return {c: max(d, shift) for c, d in per_class.items()}

    # -- point to point -------------------------------------------------------------------------
    # Sends are eager, as in ASTRA-sim: the message leaves when the SEND issues and the SEND ends when it
    # has arrived; a RECV ends when its message has arrived (at once if it already had).

    def post_message(self, c: int, row: int, kind: int) -> None:
        prog = self.classes[c].program
        rank = self.classes[c].rank
        peer, tag, size = prog.comm_peer[row], prog.comm_tag[row], prog.comm_size[row]
        now = self.queue.now
        if kind == K_SEND:
            self.transfer[c][row] = now
            msg = _Message(c, row, rank, peer, tag, size, now)
            msg.recv = _take(self.recvs.get(peer), size,
                             lambda r: r.src in (-1, rank) and (r.tag in (-1, tag) or tag == -1))
            if msg.recv is None:
                self.sends.setdefault(peer, deque()).append(msg)
            else:
                self.check_sizes(msg, msg.recv)
                self.transfer[msg.recv.cls][msg.recv.row] = now
            self.net.send(rank, peer, size, self.message_arrived, msg)
            return
        recv = _Message(c, row, peer, rank, tag, size, now)
        msg = _take(self.sends.get(rank), size, lambda s: peer in (-1, s.src) and (tag in (-1, s.tag) or s.tag == -1))
        if msg is None:
            self.recvs.setdefault(rank, deque()).append(recv)
            return
        self.check_sizes(msg, recv)
        self.transfer[c][row] = now
        if msg.arrived:
            self.queue.at(now, self.node_done, (c, row))
        else:
            msg.recv = recv

    def check_sizes(self, send: _Message, recv: _Message) -> None:
        if recv.size and send.size != recv.size:
            self.warnings.append(f"rank {send.src} -> {send.dst} tag {send.tag}: SEND of {send.size:.0f} bytes matched "
                                 f"a RECV of {recv.size:.0f} bytes")

    def message_arrived(self, msg: _Message) -> None:
        if self.p2p_extra:
            self.queue.at(self.queue.now + self.p2p_extra, self._delivered, msg)
        else:
            self._delivered(msg)

    def _delivered(self, msg: _Message) -> None:
        msg.arrived = True
        self.node_done((msg.cls, msg.row))
        if msg.recv is not None:
            self.node_done((msg.recv.cls, msg.recv.row))

    # -- main loop ------------------------------------------------------------------------------

    def run(self) -> None:
        queue = self.queue
        for c, cls in enumerate(self.classes):
            indeg = self.indeg[c]
            for row in range(len(cls.program)):
                if indeg[row] == 0:
                    self.make_ready(c, row)
            release = cls.program.release_ns
            if release > 0:
                queue.at(release, self.issue_ready, c)
        for c, cls in enumerate(self.classes):
            if cls.program.release_ns <= 0:
                self.issue_ready(c)
        queue.run()
        self.events = queue.processed
        self.now = queue.now

    # -- when it cannot finish ------------------------------------------------------------------

    def blocked_report(self) -> BlockedReport | None:
        nodes: list[BlockedNode] = []
        waiting: dict[int, int] = {}
        reasons: list[str] = []
        if self.instances:
            reasons.append("collective not issued by every member")
        if any(self.sends.values()):
            reasons.append("unmatched send")
        if any(self.recvs.values()):
            reasons.append("receive without a send")
        for inst in self.instances.values():
            missing = sorted(r for r in inst.members if self.class_of_rank[r] not in inst.arrived)
            for c, row in inst.arrived.items():
                nodes.extend(self._blocked(c, row, f"{comm_type_name(inst.comm_type)} #{inst.seq} on group "
                                                   f"{_short(inst.members)}: rank(s) {_short(tuple(missing))} never issued it"))
        for queue in self.sends.values():
            for m in queue:
                nodes.extend(self._blocked(m.cls, m.row, f"a RECV on rank {m.dst} from rank {m.src} tag {m.tag} "
                                                         "(the message was sent but never received)"))
        for queue in self.recvs.values():
            for m in queue:
                src = "any rank" if m.src == -1 else f"rank {m.src}"
                nodes.extend(self._blocked(m.cls, m.row, f"a SEND from {src} to rank {m.dst} tag {m.tag} (none posted)"))
        for c, cls in enumerate(self.classes):
            prog = cls.program
            for res, held in enumerate(self.ready[c]):
                if not held:  # (the search for the holder walks every row)
                    continue
                holder = next((r for r in range(len(prog)) if RESOURCE_OF_KIND[prog.kind[r]] == res
                               and not math.isnan(self.start[c][r]) and math.isnan(self.end[c][r])), None)
                for _, row in held:
                    what = f"node {prog.ids[holder]}" if holder is not None else "a blocked node"
                    nodes.extend(self._blocked(c, row, f"its {('CPU', 'compute', 'comm')[res]} resource, held by {what}"))
            never = sum(1 for d in self.indeg[c] if d > 0)
            if never:
                for r in cls.ranks:
                    waiting[r] = never
        if not nodes:  # started and never finished, with nothing else to blame: a collective that cannot end
            for c, cls in enumerate(self.classes):
                prog = cls.program
                start, end = self.start[c], self.end[c]
                for row in range(len(prog)):
                    if not math.isnan(start[row]) and math.isnan(end[row]):
                        nodes.extend(self._blocked(c, row, "its own end (it started and never finished)"))
            if nodes:
                reasons.append("a node never finished")
        if not nodes and not waiting:
            return None
        if not nodes:
            reasons.append("dependency cycle")
            nodes = self._cycle_nodes()
        reason = ", ".join(reasons) or "deadlock"
        return BlockedReport(reason, nodes, self.now, waiting)

    def _blocked(self, c: int, row: int, what: str) -> list[BlockedNode]:
        """The node as blocked on every rank of its class."""
        prog = self.classes[c].program
        return [BlockedNode(r, prog.ids[row], prog.name(row), PROGRAM_KIND_NAMES[prog.kind[row]], what)
                for r in self.classes[c].ranks]

    def _cycle_nodes(self) -> list[BlockedNode]:
        out = []
        for c, cls in enumerate(self.classes):
            prog = cls.program
            stuck = {r for r, d in enumerate(self.indeg[c]) if d > 0}
            # a stuck node whose unfinished parents are all stuck too lies on (or behind) a cycle
            parents: dict[int, list[int]] = {}
            for p in range(len(prog)):
                for i in range(prog.child_ptr[p], prog.child_ptr[p + 1]):
                    ch = prog.child_idx[i]
                    if ch in stuck and math.isnan(self.end[c][p]):
                        parents.setdefault(ch, []).append(p)
            for row in sorted(stuck)[:50]:
                waits = ", ".join(str(prog.ids[p]) for p in parents.get(row, [])[:5])
                out.extend(self._blocked(c, row, f"node(s) {waits} (a dependency cycle)"))
        return out


def _nans(n: int) -> array:
    return array("d", [math.nan]) * n


def _view(values: array) -> np.ndarray:
    """A float64 numpy view of ``values`` (no copy)."""
    return np.frombuffer(values, dtype=np.float64) if len(values) else np.empty(0)


def _take(queue: deque | None, size: float, ok: Callable[[Any], bool]) -> Any:
    """The first message of ``queue`` that ``ok`` accepts, one of ``size`` bytes preferred (ASTRA-sim
    matches sizes exactly; etkit pairs a message of another size too, with a warning)."""
    if not queue:
        return None
    first = None
    for i, item in enumerate(queue):
        if ok(item):
            if item.size == size:
                del queue[i]
                return item
            if first is None:
                first = i
    if first is None:
        return None
    item = queue[first]
    del queue[first]
    return item


def _short(ranks: tuple[int, ...]) -> str:
    if len(ranks) > 8:
        return f"[{', '.join(map(str, ranks[:6]))}, ... ({len(ranks)} ranks)]"
    return f"[{', '.join(map(str, ranks))}]"


def _check(classes: list[RankClass], groups: ProcessGroups, world: int) -> list[BlockedNode]:
    """Problems found before running: unsupported comm types, unknown groups, bad p2p fields, missing deps."""
    out: list[BlockedNode] = []
    present = {r for cls in classes for r in cls.ranks}  # a job of some ranks' files: the others are absent
    for cls in classes:
        prog = cls.program
        out.extend(BlockedNode(p.rank, p.node_id, p.name, "invalid", p.message) for p in prog.problems)
        seen: set = set()
        for row, kind in enumerate(prog.kind):
            if kind == K_COLL:
                ct, pg = prog.comm_type[row], prog.pg(row)
                if ct not in SUPPORTED and (ct, "t") not in seen:
                    seen.add((ct, "t"))
                    out.append(BlockedNode(cls.rank, prog.ids[row], prog.name(row), "collective",
                                           f"a known comm_type (got {comm_type_name(ct)})"))
                if pg not in seen:
                    seen.add(pg)
                    try:
                        members = groups.members(pg, world)
                    except KeyError:
                        out.append(BlockedNode(cls.rank, prog.ids[row], prog.name(row), "collective",
                                               f"process group {pg!r}, which no comm-groups file or METADATA node defines"))
                        continue
                    bad = [r for r in members if r not in present]
                    if bad:
                        out.append(BlockedNode(cls.rank, prog.ids[row], prog.name(row), "collective",
                                               f"rank(s) {bad} of group {pg!r}, which are not in the job"))
                    if cls.rank not in members:  # (a class's other ranks use their own groups, alike)
                        out.append(BlockedNode(cls.rank, prog.ids[row], prog.name(row), "collective",
                                               f"its group, but rank {cls.rank} is not in process group {pg!r} "
                                               f"({_short(members)})"))
            elif kind == K_SEND and prog.comm_peer[row] not in present and prog.comm_peer[row] != -1:
                out.append(BlockedNode(cls.rank, prog.ids[row], prog.name(row), "send",
                                       f"rank {prog.comm_peer[row]}, which is not in the job"))
    return out


def run_engine(classes: list[RankClass], groups: ProcessGroups, world: int, network: NetworkConfig,
               system: SystemConfig, congestion: str = "unaware", rng: np.random.Generator | None = None,
               folded: bool = False) -> EngineResult:
    """Simulate; raise :class:`SimulationBlocked` when the job cannot run to the end (and
    :class:`SymmetryBroken` when merged ranks would not run alike). With ``rng`` and a system with
    recorded residuals (``collective_residuals_ns``), each collective member is released at its own
    drawn time (one Monte Carlo run). ``folded`` (aware mode): every collective group is one class,
    simulated for its first rank on the links of the classes' first ranks."""
    problems = _check(classes, groups, world)
    if problems:
        raise SimulationBlocked(BlockedReport("invalid input", problems))
    engine = _Engine(classes, groups, world, network, system, congestion, rng, folded)
    engine.run()
    report = engine.blocked_report()
    if report is not None:
        raise SimulationBlocked(report)
    return EngineResult([_view(s) for s in engine.start], [_view(e) for e in engine.end],
                        [_view(x) for x in engine.transfer], engine.events, engine.warnings)



def foldable(classes: list[RankClass], groups: ProcessGroups, world: int, network: NetworkConfig,
             system: SystemConfig) -> bool:
    """Congestion-aware mode: whether the links of every class can be folded onto its first rank's
    (``run_engine(folded=True)``): every group a collective runs on is one class and symmetric
    (:func:`etkit.simulate.system.symmetric_group`), and a network with a Ring dimension has one
    class only (a Ring's links are shared by the messages of neighbours)."""
    if all(len(c.ranks) == 1 for c in classes):
        return True
    if any(d.topology == "Ring" for d in network.dims) and len(classes) > 1:
        return False
    params = SysParams.of(system, network)
    class_of = {r: i for i, c in enumerate(classes) for r in c.ranks}
    seen: set[tuple] = set()
    for cls in classes:
        prog = cls.program
        kind = np.frombuffer(prog.kind, dtype=np.int8)
        for row in np.flatnonzero(kind == K_COLL).tolist():
            key = (prog.pg(row), prog.comm_type[row])
            if key in seen:
                continue
            seen.add(key)
            try:
                members = ring_order(groups, key[0], world)
                parts = decompose(key[1], 0, len(members))
            except (KeyError, ValueError):
                return False
            if len(members) <= 1:
                continue
            if len({class_of.get(m) for m in members}) > 1:
                return False
            whole = len(members) == params.total_nodes
            plan = GroupPlan(None if whole else members)
            for part_type, _ in parts:
                if not symmetric_group(KIND[CommType(part_type)], plan, params, network, members[0], aware=True):
                    return False
    return True
