"""The discrete-event engine: walks every rank class's program, hands collectives and messages to the
system and network layers, and reports blocked ranks instead of hanging.

Per NPU there are three resources (one CPU op, one GPU compute op and one GPU comm op in flight; RECV
is exempt). A node becomes ready when its dependencies finished and issues, smallest node id first,
when its resource is free. A collective starts when every member of its group has issued its k-th
collective on that group and ends after the system layer's time; SEND and RECV are matched by
(src, dst, tag) in order (a RECV without ``comm_src``/``comm_tag`` matches any) and both end when the
message has arrived (rendezvous). When no event is left but nodes remain, the engine raises
:class:`SimulationBlocked` with a report naming each blocked node, its rank and what it waits for.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import EtkitError
from ..model.groups import ProcessGroups
from ..model.trace import comm_type_name
from .collectives import SUPPORTED, CollectivePlan, group_layout, p2p_time, plan_collective
from .config import NetworkConfig, SystemConfig
from .network import LinkSharing, collective_ports, p2p_ports
from .workload import K_COLL, K_RECV, K_SEND, KIND_NAMES, RESOURCE_OF_KIND, RankClass

__all__ = ["BlockedNode", "BlockedReport", "SimulationBlocked", "EngineResult", "run_engine"]

_DONE, _COLL_DONE, _P2P_DONE, _FLOW_DONE, _RELEASE = range(5)


@dataclass(frozen=True)
class BlockedNode:
    rank: int
    node_id: int
    name: str
    kind: str
    waits_for: str


@dataclass
class BlockedReport:
    """Why a simulation could not finish: ``reason`` and the nodes that cannot make progress."""

    reason: str
    nodes: list[BlockedNode]
    time_ns: float = 0.0
    waiting_on_deps: dict[int, int] = field(default_factory=dict)  # rank -> nodes never ready

    def lines(self, limit: int = 40) -> list[str]:
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
        return {"reason": self.reason, "time_ns": self.time_ns,
                "blocked": [b.__dict__ for b in self.nodes], "waiting_on_deps": self.waiting_on_deps}


class SimulationBlocked(EtkitError):
    """The job cannot run to the end: ranks disagree (unmatched message, missing collective member), the
    graph has a cycle or a missing dependency, or a node cannot be simulated. Carries a :class:`BlockedReport`."""

    def __init__(self, report: BlockedReport) -> None:
        self.report = report
        super().__init__("\n".join(report.lines()))


@dataclass
class EngineResult:
    start: list[np.ndarray]  # per class, ns per row (NaN = never ran)
    end: list[np.ndarray]
    transfer: list[np.ndarray]  # comm rows: when the transfer could begin (the rest of the comm time is waiting)
    events: int
    warnings: list[str]


@dataclass
class _Instance:
    members: tuple[int, ...]
    seq: int
    needed: frozenset[int]
    comm_type: int
    size: float
    arrived: dict[int, int] = field(default_factory=dict)  # class -> row
    issued_at: float = 0.0
    delays: dict[int, float] | None = None  # class -> release after the instance's end (recorded residuals)


@dataclass
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
                 system: SystemConfig, congestion: str, rng: np.random.Generator | None = None) -> None:
        self.classes = classes
        self.rng = rng if system.collective_residuals_ns else None
        self.residual_cache: dict[tuple[int, int], tuple[tuple[tuple[float, ...], ...], bool, float]] = {}
        self.groups = groups
        self.world = world
        self.network = network
        self.system = system
        self.aware = congestion == "aware"
        self.class_of_rank = {r: i for i, c in enumerate(classes) for r in c.ranks}
        self.heap: list[tuple] = []
        self.seq = 0
        self.now = 0.0
        self.warnings: list[str] = []
        n = len(classes)
        self.indeg = [array("q", c.program.indegree) for c in classes]
        self.ready = [[[], [], []] for _ in range(n)]
        self.busy = [[False, False, False] for _ in range(n)]
        # per row, ns (NaN = not yet): compact arrays, handed to the result as numpy views without a copy
        self.start = [_nans(len(c.program)) for c in classes]
        self.end = [_nans(len(c.program)) for c in classes]
        self.transfer = [_nans(len(c.program)) for c in classes]  # comm rows: when data could start moving
        self.coll_seq: list[dict[tuple, int]] = [{} for _ in range(n)]
        self.instances: dict[tuple, _Instance] = {}
        self.running: dict[int, object] = {}
        self.next_id = 0
        self.sends: dict[int, deque[_Message]] = {}  # unreceived messages by destination rank
        self.recvs: dict[int, deque[_Message]] = {}  # by receiving rank
        self.members_cache: dict[str | None, tuple[int, ...]] = {}
        self.needed_cache: dict[tuple[int, ...], frozenset[int]] = {}
        self.plan_cache: dict[tuple, CollectivePlan] = {}
        self.sharing = LinkSharing() if self.aware else None
        self.events = 0

    # -- helpers ------------------------------------------------------------------------------

    def push(self, t: float, etype: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, etype, a, b))

    def members(self, pg: str | None) -> tuple[int, ...]:
        got = self.members_cache.get(pg)
        if got is None:
            got = self.groups.members(pg, self.world)
            self.members_cache[pg] = got
        return got

    def plan(self, comm_type: int, size: float, members: tuple[int, ...]) -> CollectivePlan:
        key = (comm_type, size, members)
        plan = self.plan_cache.get(key)
        if plan is None:
            plan = plan_collective(comm_type, size, group_layout(members, self.network), self.system)
            self.plan_cache[key] = plan
        return plan

    # -- node life cycle ------------------------------------------------------------------------

    def make_ready(self, c: int, row: int) -> None:
        prog = self.classes[c].program
        res = RESOURCE_OF_KIND[prog.kind[row]]
        if res < 0:
            self.issue(c, row)
        else:
            heapq.heappush(self.ready[c][res], (prog.ids[row], row))
            if not self.busy[c][res]:
                self.dispatch(c, res)

    def dispatch(self, c: int, res: int) -> None:
        queue = self.ready[c][res]
        if queue and not self.busy[c][res]:
            self.busy[c][res] = True
            _, row = heapq.heappop(queue)
            self.issue(c, row)

    def issue(self, c: int, row: int) -> None:
        prog = self.classes[c].program
        now = self.now
        self.start[c][row] = now
        kind = prog.kind[row]
        if kind == K_COLL:
            self.join_collective(c, row)
        elif kind == K_SEND or kind == K_RECV:
            self.post_message(c, row, kind)
        else:
            self.push(now + prog.duration[row], _DONE, c, row)

    def complete(self, c: int, row: int) -> None:
        prog = self.classes[c].program
        self.end[c][row] = self.now
        res = RESOURCE_OF_KIND[prog.kind[row]]
        indeg = self.indeg[c]
        children = prog.child_idx
        for i in range(prog.child_ptr[row], prog.child_ptr[row + 1]):
            child = children[i]
            indeg[child] -= 1
            if indeg[child] == 0:
                self.make_ready(c, child)
        if res >= 0:
            self.busy[c][res] = False
            self.dispatch(c, res)

    # -- collectives ----------------------------------------------------------------------------

    def join_collective(self, c: int, row: int) -> None:
        prog = self.classes[c].program
        pg = prog.pg(row)
        members = self.members(pg)
        communicator = (pg if pg not in (None, "", "0") else "0", members)  # equal members, other pg: another communicator
        counters = self.coll_seq[c]
        k = counters.get(communicator, 0)
        counters[communicator] = k + 1
        key = (communicator, k)
        inst = self.instances.get(key)
        comm_type, size = prog.comm_type[row], prog.comm_size[row]
        if inst is None:
            needed = self.needed_cache.get(members)
            if needed is None:
                needed = frozenset(self.class_of_rank[r] for r in members)
                self.needed_cache[members] = needed
            inst = _Instance(members, k, needed, comm_type, size)
            self.instances[key] = inst
        elif inst.comm_type != comm_type:
            self.warnings.append(f"rank {self.classes[c].rank} node {prog.ids[row]}: collective #{k} on group "
                                 f"{_short(members)} is {comm_type_name(comm_type)} but another member issued "
                                 f"{comm_type_name(inst.comm_type)}")
        elif size != inst.size:
            inst.size = max(size, inst.size)
        inst.arrived[c] = row
        inst.issued_at = self.now
        if len(inst.arrived) == len(inst.needed):
            del self.instances[key]
            for cls, arrived_row in inst.arrived.items():
                self.transfer[cls][arrived_row] = self.now
            plan = self.plan(inst.comm_type, inst.size, members)
            fid = self.next_id
            self.next_id += 1
            self.running[fid] = inst
            aware = self.sharing is not None and bool(plan.dims)
            shift = self.draw_delays(inst) if self.rng is not None else 0.0
            if not aware:
                self.push(self.now + plan.time_ns + shift, _COLL_DONE, fid)
            else:
                self.start_flow(fid, collective_ports(members, plan.dims), plan.time_ns - plan.bandwidth_ns + shift,
                                plan.bandwidth_ns)

    def draw_delays(self, inst: _Instance) -> float:
        """Draw each member's residual from the system's recorded ones (a whole recorded vector of a
        group of this size, members in random order, else independent draws). A residual changes the
        call's software cost (its overhead) only: no member returns before the network moved the
        bytes. Returns the shift of the instance's end (the smallest residual) and sets each class's
        release after that end in ``inst.delays``."""
        key = (inst.comm_type, len(inst.members))
        found = self.residual_cache.get(key)
        if found is None:
            name = comm_type_name(inst.comm_type)
            found = self.system.residual_vectors(name, len(inst.members)) + (self.system.overhead_ns(name),)
            self.residual_cache[key] = found
        vectors, whole, overhead = found
        if not vectors:
            return 0.0
        rng = self.rng
        if whole:
            vec = vectors[int(rng.integers(len(vectors)))]
            drawn = dict(zip(inst.members, (vec[i] for i in rng.permutation(len(vec)))))
        else:
            drawn = dict(zip(inst.members, (vectors[i][0] for i in rng.integers(len(vectors), size=len(inst.members)))))
        per_class: dict[int, float] = {}
        for r, d in drawn.items():  # (simulate() does not merge ranks when drawing; a merged class takes its first member's)
            per_class.setdefault(self.class_of_rank[r], d)
        shift = max(min(per_class.values()), -overhead)
        inst.delays = {c: max(d, shift) - shift for c, d in per_class.items()}
        return shift

    # -- point to point -------------------------------------------------------------------------
    # Sends are eager, as in ASTRA-sim: the message leaves when the SEND issues and the SEND ends when it
    # has arrived; a RECV ends when its message has arrived (at once if it already had).

    def post_message(self, c: int, row: int, kind: int) -> None:
        prog = self.classes[c].program
        rank = self.classes[c].rank
        peer, tag = prog.comm_peer[row], prog.comm_tag[row]
        if kind == K_SEND:
            self.transfer[c][row] = self.now
            msg = _Message(c, row, rank, peer, tag, prog.comm_size[row], self.now)
            msg.recv = _take(self.recvs.get(peer), lambda r: r.src in (-1, rank) and (r.tag in (-1, tag) or tag == -1))
            if msg.recv is None:
                self.sends.setdefault(peer, deque()).append(msg)
            else:
                self.transfer[msg.recv.cls][msg.recv.row] = self.now
            self.start_message(msg)
            return
        recv = _Message(c, row, peer, rank, tag, prog.comm_size[row], self.now)
        msg = _take(self.sends.get(rank), lambda s: peer in (-1, s.src) and (tag in (-1, s.tag) or s.tag == -1))
        if msg is None:
            self.recvs.setdefault(rank, deque()).append(recv)
            return
        self.check_sizes(msg, recv)
        self.transfer[c][row] = self.now
        if msg.arrived:
            self.push(self.now, _DONE, c, row)
        else:
            msg.recv = recv

    def check_sizes(self, send: _Message, recv: _Message) -> None:
        if recv.size and send.size != recv.size:
            self.warnings.append(f"rank {send.src} -> {send.dst} tag {send.tag}: SEND of {send.size:.0f} bytes matched "
                                 f"a RECV of {recv.size:.0f} bytes")

    def start_message(self, send: _Message) -> None:
        if send.recv is not None:
            self.check_sizes(send, send.recv)
        total, bandwidth, dims = p2p_time(self.network, self.system, send.src, send.dst, send.size)
        fid = self.next_id
        self.next_id += 1
        self.running[fid] = send
        if self.sharing is None or not dims:
            self.push(self.now + total, _P2P_DONE, fid)
        else:
            self.start_flow(fid, p2p_ports(send.src, send.dst, dims), total - bandwidth, bandwidth)

    # -- congestion-aware flows -----------------------------------------------------------------

    def start_flow(self, fid: int, ports, fixed: float, bandwidth: float) -> None:
        for other, finish, version in self.sharing.add(fid, ports, fixed, bandwidth, self.now):
            self.push(finish, _FLOW_DONE, other, version)

    def finish(self, fid: int) -> None:
        item = self.running.pop(fid)
        if isinstance(item, _Instance):
            delays = item.delays
            for c, row in item.arrived.items():
                if delays and delays[c] > 0:
                    self.push(self.now + delays[c], _DONE, c, row)
                else:
                    self.complete(c, row)
        else:
            item.arrived = True
            self.complete(item.cls, item.row)
            if item.recv is not None:
                self.complete(item.recv.cls, item.recv.row)

    # -- main loop ------------------------------------------------------------------------------

    def run(self) -> None:
        for c, cls in enumerate(self.classes):
            indeg = self.indeg[c]
            release = cls.program.release_ns
            for row in range(len(cls.program)):
                if indeg[row] == 0:
                    if release > 0:
                        self.push(release, _RELEASE, c, row)
                    else:
                        self.make_ready(c, row)
        heap = self.heap
        pop = heapq.heappop
        events = 0
        while heap:
            t, _, etype, a, b = pop(heap)
            self.now = t
            events += 1
            if etype == _DONE:
                self.complete(a, b)
            elif etype == _RELEASE:
                self.make_ready(a, b)
            elif etype == _FLOW_DONE:
                if self.sharing.current(a, b):
                    for other, finish, version in self.sharing.remove(a, t):
                        self.push(finish, _FLOW_DONE, other, version)
                    self.finish(a)
            else:
                self.finish(a)
        self.events = events

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
            for res, queue in enumerate(self.ready[c]):
                if not queue:  # (the search for the holder walks every row)
                    continue
                holder = next((r for r in range(len(prog)) if RESOURCE_OF_KIND[prog.kind[r]] == res
                               and not math.isnan(self.start[c][r]) and math.isnan(self.end[c][r])), None)
                for _, row in queue:
                    what = f"node {prog.ids[holder]}" if holder is not None else "a blocked node"
                    nodes.extend(self._blocked(c, row, f"its {('CPU', 'compute', 'comm')[res]} resource, held by {what}"))
            never = sum(1 for d in self.indeg[c] if d > 0)
            if never:
                for r in cls.ranks:
                    waiting[r] = never
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
        return [BlockedNode(r, prog.ids[row], prog.name(row), KIND_NAMES[prog.kind[row]], what)
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


def _take(queue: deque | None, ok) -> object | None:
    if not queue:
        return None
    for i, item in enumerate(queue):
        if ok(item):
            del queue[i]
            return item
    return None


def _short(ranks: tuple[int, ...]) -> str:
    if len(ranks) > 8:
        return f"[{', '.join(map(str, ranks[:6]))}, ... ({len(ranks)} ranks)]"
    return f"[{', '.join(map(str, ranks))}]"


def _check(classes: list[RankClass], groups: ProcessGroups, world: int) -> list[BlockedNode]:
    """Problems found before running: unsupported comm types, unknown groups, bad p2p fields, missing deps."""
    out = []
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
                    bad = [r for r in members if r < 0 or r >= world]
                    if bad:
                        out.append(BlockedNode(cls.rank, prog.ids[row], prog.name(row), "collective",
                                               f"rank(s) {bad} of group {pg!r}, which are not in the job"))
            elif kind == K_SEND and not (0 <= prog.comm_peer[row] < world) and prog.comm_peer[row] != -1:
                out.append(BlockedNode(cls.rank, prog.ids[row], prog.name(row), "send",
                                       f"rank {prog.comm_peer[row]}, which is not in the job"))
    return out


def run_engine(classes: list[RankClass], groups: ProcessGroups, world: int, network: NetworkConfig,
               system: SystemConfig, congestion: str = "unaware", rng: np.random.Generator | None = None) -> EngineResult:
    """Simulate; raise :class:`SimulationBlocked` when the job cannot run to the end. With ``rng`` and
    a system with recorded residuals (``collective_residuals_ns``), each collective member is
    released at its own drawn time (one Monte Carlo run)."""
    problems = _check(classes, groups, world)
    if problems:
        raise SimulationBlocked(BlockedReport("invalid input", problems))
    engine = _Engine(classes, groups, world, network, system, congestion, rng)
    engine.run()
    report = engine.blocked_report()
    if report is not None:
        raise SimulationBlocked(report)
    return EngineResult([_view(s) for s in engine.start], [_view(e) for e in engine.end],
                        [_view(x) for x in engine.transfer], engine.events, engine.warnings)

