"""Planning a replay: what each node of each rank will do, in which order, and whether ranks agree.

Everything here works on the columnar :class:`~etkit.model.trace.Trace` and needs no PyTorch, so the
launcher can check a whole job before it starts any process:

* the dependency graph a rank walks is ``data_deps`` united with ``ctrl_deps`` (as ASTRA-sim's feeder v3
  does); ids that name no node are dropped and counted;
* the walk order is a topological order that follows the recorded start times (file order when the trace
  has none), so every rank issues its collectives in the order it recorded them;
* each node gets an :class:`Action`; communication nodes get a :class:`CommSpec` (size, dtype, group,
  peer); nodes that cannot be replayed get a reason, and the report lists them;
* across ranks, the one cross-rank matcher (:mod:`etkit.model.matching`, what ``etkit validate`` checks)
  pairs collectives and messages in walk order; ranks that disagree about a call the replay would issue
  (type, size, count, an unmatched send or receive) would hang real hardware, so the job is refused
  before launching; a node whose partner is not replayed is left out and listed.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import field, replace
from enum import IntEnum

import numpy as np

from ..arrays import distinct
from ..errors import EtkitError
from ..format.schema import CommType, NodeType
from ..literal import LiteralError, parse_literal
from ..model.edges import edges
from ..model.groups import WORLD
from ..model.job import Job
from ..model.matching import DISAGREEMENTS, Matching, comm_record, match_comm
from ..model.steps import is_step_name
from ..model.trace import MISSING, Trace, comm_type_name
from ..records import record

__all__ = ["Action", "CommSpec", "RankReplayPlan", "JobPlan", "plan_job", "plan_rank", "largest_buffer", "MODES",
           "ACTION_KIND"]

MODES = ("comm", "compute", "full")


class Action(IntEnum):
    """What the replayer does with a node."""

    NOOP = 0  # completes at once: metadata, containers whose children carry the work, zero-work nodes
    ATEN = 1  # the recorded ATen operator with tensors of the recorded shapes
    KERNEL = 2  # a calibrated matmul/copy (num_ops, tensor_size or duration)
    MEMORY = 3  # MEM_LOAD/MEM_STORE: a copy of tensor_size bytes
    COLL = 4
    SEND = 5
    RECV = 6
    COVERED = 7  # runs inside a replayed ancestor ATen op
    SKIP = 8  # cannot be replayed; listed in the report with its reason
    OFF = 9  # not replayed in this mode (compute nodes in comm mode and vice versa)
    HOST = 10  # a container's own (exclusive) time: framework/Python work around its children, spun on the CPU


#: Report category of each action ("collective" is refined by comm type).
ACTION_KIND = {Action.ATEN: "aten", Action.KERNEL: "kernel", Action.MEMORY: "memory", Action.COLL: "collective",
               Action.SEND: "send", Action.RECV: "recv", Action.HOST: "host"}

_TENSOR_DTYPE = re.compile(r"Tensor\(([^()]*)\)")
_ET_DTYPE_NAMES = {"float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
                   "long int": "int64", "int": "int32", "short int": "int16", "signed char": "int8",
                   "unsigned char": "uint8", "bool": "bool"}
_ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
             "int8": 1, "uint8": 1, "bool": 1}
_P2P_TYPES: dict[int, str] = {NodeType.COMM_SEND_NODE: "SEND", NodeType.COMM_RECV_NODE: "RECV"}
_COMPUTE_TYPES = (NodeType.COMP_NODE, NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE)


@record(frozen=True)
class CommSpec:
    """One communication as it will be issued. ``nbytes`` is per the convention of ``comm_size``:
    the per-rank input for ALL_GATHER/GATHER, the whole buffer for the others."""

    kind: str  # CommType name, "SEND" or "RECV"
    nbytes: int
    dtype: str
    group: str
    members: tuple[int, ...]
    peer: int = -1  # global rank: destination of a send, source of a receive, root of a rooted collective
    tag: int = 0
    #: ALL_TO_ALL only: elements sent to / received from each member, in member order
    in_splits: tuple[int, ...] = ()
    out_splits: tuple[int, ...] = ()

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.dtype]

    def buffer_bytes(self) -> int:
        """Bytes of the tensors issuing this communication holds on this rank (input and output), as
        :class:`etkit.replay.comm.Communicator` allocates them: an all-gather's output is the group's
        inputs together, a root's gather/scatter holds one part per member."""
        size = len(self.members)
        numel = sum(self.in_splits) if self.in_splits else -(-self.nbytes // self.itemsize)
        if self.kind == "ALL_GATHER":
            numel *= 1 + size
        elif self.kind in ("REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK"):
            numel = -(-numel // size) * (size + 1)
        elif self.kind == "ALL_TO_ALL":
            numel += sum(self.out_splits) if self.in_splits else numel
        elif self.kind in ("GATHER", "SCATTER"):
            numel *= 1 + size  # at the root; other members hold one part (the bound is for the root)
        return numel * self.itemsize


@record
class RankReplayPlan:
    """The static part of one rank's replay (picklable; PyTorch-free)."""

    rank: int
    path: str
    order: np.ndarray  # rows in walk order
    dep_ptr: np.ndarray  # CSR: deps of row r are dep_rows[dep_ptr[r]:dep_ptr[r+1]]
    dep_rows: np.ndarray
    action: np.ndarray  # int8 Action per row
    reasons: dict[int, str] = field(default_factory=dict)  # row -> why it is SKIP
    comm: dict[int, CommSpec] = field(default_factory=dict)
    dangling_deps: int = 0
    steps: int = 1
    trace_iteration_us: float = 0.0
    trace_time_basis: str = "timestamps"  # or "critical path of durations"


@record
class JobPlan:
    world: int
    groups: dict[str, tuple[int, ...]]  # every non-world group the job uses, created on every rank in order
    ranks: dict[int, RankReplayPlan]
    notes: list[str] = field(default_factory=list)


# -- one rank ----------------------------------------------------------------------------------------

def _dependency_csr(trace: Trace) -> tuple[np.ndarray, np.ndarray, int]:
    """Parents (as rows) of every row from data and ctrl deps, deduplicated; and the dangling count."""
    found = edges(trace)
    dangling = int((found.parent < 0).sum())
    found = found.resolved()
    children, parents = found.child, found.parent
    n = len(trace)
    pairs = distinct(children * max(n, 1) + parents)
    children, parents = pairs // max(n, 1), pairs % max(n, 1)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(ptr, children + 1, 1)
    return np.cumsum(ptr), parents.astype(np.int64), dangling


def walk_order(trace: Trace, dep_ptr: np.ndarray, dep_rows: np.ndarray) -> np.ndarray:
    """A topological order of rows that follows start times (then file order); raises on a cycle."""
    n = len(trace)
    key = trace.start.astype(np.float64)
    order = np.lexsort((np.arange(n), key))
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    children = np.repeat(np.arange(n), np.diff(dep_ptr))
    if not len(dep_rows) or bool((position[dep_rows] < position[children]).all()):
        return order
    # The recorded order breaks a dependency: Kahn's algorithm with the recorded order as priority.
    indegree = np.diff(dep_ptr).copy()
    by_parent = np.argsort(dep_rows, kind="stable")
    child_ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(child_ptr, dep_rows + 1, 1)
    child_ptr = np.cumsum(child_ptr)
    child_rows = children[by_parent]
    heap = [(int(position[r]), int(r)) for r in np.flatnonzero(indegree == 0)]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, row = heapq.heappop(heap)
        out.append(row)
        for child in child_rows[child_ptr[row]:child_ptr[row + 1]].tolist():
            indegree[child] -= 1
            if indegree[child] == 0:
                heapq.heappush(heap, (int(position[child]), child))
    if len(out) != n:
        stuck = np.flatnonzero(indegree > 0)[:5]
        ids = ", ".join(str(int(trace.ids[r])) for r in stuck)
        raise EtkitError(f"{trace.path}: dependency cycle; nodes never ready include ids {ids}")
    return np.asarray(out, dtype=np.int64)


def mark_ancestors(parent: np.ndarray, rows: np.ndarray, max_depth: int = 4096) -> np.ndarray:
    """Boolean per row: is it a strict ancestor (via ``parent``) of any of ``rows``."""
    marked = np.zeros(len(parent), dtype=bool)
    cur = parent[rows]
    for _ in range(max_depth):
        cur = cur[cur >= 0]
        cur = cur[~marked[cur]]  # stop where an earlier walk already went up
        if not len(cur):
            break
        marked[cur] = True
        cur = parent[cur]
    return marked


def nearest_marked_ancestor(parent: np.ndarray, marked: np.ndarray, max_depth: int = 4096) -> np.ndarray:
    """Row of each node's nearest strict ancestor with ``marked`` true, -1 where there is none."""
    found = np.full(len(parent), -1, dtype=np.int64)
    cur = parent.copy()
    for _ in range(max_depth):
        live = cur >= 0
        if not live.any():
            break
        hit = live & (found < 0)
        hit &= np.where(live, marked[np.maximum(cur, 0)], False)
        found[hit] = cur[hit]
        cur = np.where(live & (found < 0), parent[np.maximum(cur, 0)], -1)
    return found


def _comm_dtype(trace: Trace, row: int, nbytes: int) -> str:
    node = trace.node(row)
    if node.HasField("inputs"):
        m = _TENSOR_DTYPE.search(node.inputs.types)
        if m and m.group(1) in _ET_DTYPE_NAMES:
            dtype = _ET_DTYPE_NAMES[m.group(1)]
            if dtype != "bool" and nbytes % _ITEMSIZE[dtype] == 0:
                return dtype
    return "float32" if nbytes % 4 == 0 else "uint8"


def _int(column: np.ndarray, row: int, default: int) -> int:
    value = int(column[row])
    return default if value == MISSING else value


def _comm_spec(trace: Trace, row: int, rank: int, job: Job) -> CommSpec | str:
    """The :class:`CommSpec` of a comm row, or the reason it cannot be replayed."""
    pg = trace.strings[int(trace.pg_idx[row])] if trace.pg_idx[row] >= 0 else WORLD
    pg = pg or WORLD
    try:
        members = job.members(pg)
    except KeyError:
        return f"unknown process group {pg!r}"
    if rank not in members:
        return f"rank {rank} is not in process group {pg!r}"
    nbytes = max(_int(trace.comm_size, row, 0), 0)
    node_type = int(trace.types[row])
    dtype = _comm_dtype(trace, row, nbytes) if nbytes else "float32"
    tag = _int(trace.comm_tag, row, 0)
    if node_type in _P2P_TYPES:
        kind = _P2P_TYPES[node_type]
        peer = _int(trace.comm_dst if kind == "SEND" else trace.comm_src, row, -1)
        if peer < 0:
            return f"{kind.lower()} without {'comm_dst' if kind == 'SEND' else 'comm_src'}"
        if peer == rank or peer >= job.world_size:
            return f"{kind.lower()} peer {peer} is not another rank of the job"
        if nbytes <= 0:
            return "no comm_size"
        return CommSpec(kind, nbytes, dtype, pg, members, peer, tag)
    ctype = _int(trace.comm_type, row, -1)
    try:
        kind = CommType(ctype).name
    except ValueError:
        return f"unknown comm_type {comm_type_name(ctype)}"
    if kind != "BARRIER" and nbytes <= 0:
        return "no comm_size"
    root = _int(trace.comm_src, row, _int(trace.comm_dst, row, members[0]))
    if root not in members:
        root = members[0]
    return CommSpec(kind, nbytes, dtype, pg, members, root, tag)


def _iteration_time(trace: Trace, order: np.ndarray, dep_ptr: np.ndarray, dep_rows: np.ndarray) -> tuple[float, str]:
    timed = trace.start > 0
    if timed.any():
        ends = trace.start[timed] + trace.duration[timed]
        return float(ends.max() - trace.start[timed].min()), "timestamps"
    finish = np.zeros(len(trace), dtype=np.float64)
    duration = trace.duration.astype(np.float64)
    for row in order.tolist():
        deps = dep_rows[dep_ptr[row]:dep_ptr[row + 1]]
        finish[row] = (finish[deps].max() if len(deps) else 0.0) + duration[row]
    return float(finish.max()) if len(finish) else 0.0, "critical path of durations"


def plan_rank(trace: Trace, rank: int, job: Job, mode: str) -> RankReplayPlan:
    """Order, actions and comm specs of one rank (ATen parsing happens later, in the rank process)."""
    if mode not in MODES:
        raise EtkitError(f"unknown replay mode {mode!r} (choose from {', '.join(MODES)})")
    dep_ptr, dep_rows, dangling = _dependency_csr(trace)
    order = walk_order(trace, dep_ptr, dep_rows)
    types = trace.types
    action = np.full(len(trace), Action.NOOP, dtype=np.int8)
    plan = RankReplayPlan(rank, trace.path, order, dep_ptr, dep_rows, action, dangling_deps=dangling)
    compute = np.isin(types, np.asarray(_COMPUTE_TYPES, dtype=types.dtype))
    comm = np.isin(types, np.asarray([NodeType.COMM_COLL_NODE, *_P2P_TYPES], dtype=types.dtype))
    known = compute | comm | (types == NodeType.METADATA_NODE)
    for row in np.flatnonzero(~known).tolist():
        action[row] = Action.SKIP
        plan.reasons[row] = f"node type {int(types[row])} has no replay"
    if mode == "comm":
        action[compute] = Action.OFF
    else:
        # Compute actions are refined in the rank process (ATen ops need IOInfo and PyTorch).
        action[compute] = Action.KERNEL
        action[types == NodeType.MEM_LOAD_NODE] = Action.MEMORY
        action[types == NodeType.MEM_STORE_NODE] = Action.MEMORY
    if mode == "compute":
        action[comm] = Action.OFF
    else:
        for row in np.flatnonzero(comm).tolist():
            spec = _comm_spec(trace, row, rank, job)
            if isinstance(spec, str):
                action[row] = Action.SKIP
                plan.reasons[row] = spec
            else:
                plan.comm[row] = spec
                action[row] = {"SEND": Action.SEND, "RECV": Action.RECV}.get(spec.kind, Action.COLL)
    names = trace.strings
    plan.steps = max(1, sum(1 for i in distinct(trace.name_idx).tolist() if is_step_name(names[i])))
    plan.trace_iteration_us, plan.trace_time_basis = _iteration_time(trace, order, dep_ptr, dep_rows)
    return plan


# -- across ranks ------------------------------------------------------------------------------------

def _refuse_disagreements(job: Job, plans: dict[int, RankReplayPlan], found: Matching, rules: frozenset[str]) -> None:
    """Refuse a job whose ranks disagree (by ``rules``) about a call it would replay (what ``etkit validate``
    reports): replaying it would hang or abort. Nodes the plan skips anyway (with a reason) are not
    replayed, so their disagreements do not count."""
    skipped = {rank: {int(job.traces[rank].ids[row]) for row in plan.reasons} for rank, plan in plans.items()}
    bad = [m for m in found.errors(rules) if m.node_id is None or m.node_id not in skipped.get(m.rank, ())]
    if bad:
        first = bad[0]
        where = plans[first.rank].path if first.rank in plans else (job.prefix or "job")
        node = f"node {first.node_id}: " if first.node_id is not None else ""
        more = f" (and {len(bad) - 1} more: etkit validate lists them)" if len(bad) > 1 else ""
        raise EtkitError(f"{where}: {node}{first.message} [{first.rule}]{more}; replaying it would hang "
                         "(--allow-mismatch replays it anyway where sizes differ or a message has no partner)")


def _positions(plans: dict[int, RankReplayPlan], found: Matching) -> list[list[tuple[int, int]]]:
    """The same collective on every member that replays it: [(rank, row), ...] per instance."""
    out = []
    for inst in found.instances:
        members = [(rank, row) for rank, row in inst.members
                   if (spec := plans[rank].comm.get(row)) is not None and spec.kind not in ("SEND", "RECV")]
        if members:
            out.append(members)
    return out


def _harmonise_sizes(plans: dict[int, RankReplayPlan], positions: list[list[tuple[int, int]]]) -> list[str]:
    """Collectives whose members must pass equal buffers get the largest recorded size on every member
    (gloo aborts the process on a size mismatch); each change is noted."""
    notes = []
    for participants in positions:
        specs = [plans[rank].comm[row] for rank, row in participants]
        if specs[0].kind == "ALL_TO_ALL" or len({(s.nbytes, s.dtype) for s in specs}) == 1:
            continue
        widest = max(specs, key=lambda s: s.nbytes)
        for (rank, row), spec in zip(participants, specs):
            plans[rank].comm[row] = replace(spec, nbytes=widest.nbytes, dtype=widest.dtype)
        notes.append(f"{specs[0].kind} on group {specs[0].group!r} (rank {participants[0][0]} node row "
                     f"{participants[0][1]}): members recorded {sorted({s.nbytes for s in specs})} bytes; "
                     f"replayed with {widest.nbytes}")
    return notes


def _match_point_to_point(plans: dict[int, RankReplayPlan], found: Matching) -> list[str]:
    """Sends and receives as the matcher pairs them: the receive takes the send's size, dtype and tag;
    a node whose partner is missing or not replayed is left out (listed with its reason)."""
    notes = []
    alone = list(found.unmatched)
    for srank, srow, rrank, rrow in sorted(found.pairs, key=lambda p: (p[0], p[2])):
        send_spec, recv_spec = plans[srank].comm.get(srow), plans[rrank].comm.get(rrow)
        if send_spec is None or recv_spec is None:
            alone += [(srank, srow)] if recv_spec is None else [(rrank, rrow)]
            continue
        if recv_spec.nbytes != send_spec.nbytes or recv_spec.dtype != send_spec.dtype or recv_spec.tag != send_spec.tag:
            # the receive buffer must match what is sent; the sender's record wins
            plans[rrank].comm[rrow] = replace(recv_spec, nbytes=send_spec.nbytes, dtype=send_spec.dtype, tag=send_spec.tag)
            if recv_spec.nbytes != send_spec.nbytes or recv_spec.dtype != send_spec.dtype:
                notes.append(f"rank {rrank} recv {(srank, rrank, send_spec.tag)}: size {recv_spec.nbytes} B replaced by "
                             f"the send's {send_spec.nbytes} B")
    for rank, row in alone:
        plan = plans[rank]
        spec = plan.comm.pop(row, None)
        if spec is not None:
            plan.action[row] = Action.SKIP
            src, dst = (rank, spec.peer) if spec.kind == "SEND" else (spec.peer, rank)
            plan.reasons[row] = f"{spec.kind.lower()} {src}->{dst} tag {spec.tag} has no matching peer node"
    return notes


def _recorded_alltoall_bytes(trace: Trace, row: int, size: int) -> tuple[list[int], list[int]] | None:
    """Bytes sent to and received from each peer, from a converted node's IOInfo (``alltoall_base_`` split
    sizes, or the tensor lists of list ``alltoall_``); ``None`` when the node does not record them."""
    node = trace.node(row)
    try:
        values = parse_literal(node.inputs.values) if node.inputs.values else None
        shapes = parse_literal(node.inputs.shapes) if node.inputs.shapes else None
    except LiteralError:
        return None
    if not isinstance(values, list) or not isinstance(shapes, list) or len(values) < 2:
        return None

    def nbytes(t: object) -> int | None:
        ok = isinstance(t, list) and len(t) == 6 and isinstance(t[3], int) and isinstance(t[4], int)
        return t[3] * t[4] if ok else None  # type: ignore[index]

    out, inp = values[0], values[1]
    if isinstance(out, list) and out and isinstance(out[0], list):  # list form: one tensor per peer
        sent, got = [nbytes(t) for t in inp], [nbytes(t) for t in out]
        if len(sent) == len(got) == size and None not in sent + got:
            return sent, got  # type: ignore[return-value]
        return None
    if len(values) < 5 or nbytes(out) is None or nbytes(inp) is None:
        return None

    def per_peer(total: int, shape: object, splits: object) -> list[int] | None:
        if not splits:
            return [total // size] * size if total % size == 0 else None
        rows = shape[0] if isinstance(shape, list) and shape and isinstance(shape[0], int) else 0
        if not isinstance(splits, list) or len(splits) != size or rows <= 0 or total % rows:
            return None
        return [int(k) * (total // rows) for k in splits]

    sent_bytes = per_peer(nbytes(inp), shapes[1], values[4])  # type: ignore[arg-type]
    got_bytes = per_peer(nbytes(out), shapes[0], values[3])  # type: ignore[arg-type]
    return (sent_bytes, got_bytes) if sent_bytes is not None and got_bytes is not None else None


def _assign_alltoall_splits(job: Job, plans: dict[int, RankReplayPlan], positions: list[list[tuple[int, int]]]) -> None:
    """Give every ALL_TO_ALL the per-peer split sizes that make the members agree.

    The recorded splits of converted traces are used when every member has them and they agree (what
    rank i sends to j is what j receives from i); otherwise each rank sends ``comm_size / N`` to every
    member, so what it receives from member m is m's ``comm_size / N``.
    """
    for participants in positions:
        specs = {rank: plans[rank].comm[row] for rank, row in participants}
        if next(iter(specs.values())).kind != "ALL_TO_ALL":
            continue
        members = next(iter(specs.values())).members
        size = len(members)
        recorded = {rank: _recorded_alltoall_bytes(job.traces[rank], row, size) for rank, row in participants}
        index = {m: i for i, m in enumerate(members)}
        agree = all(r is not None for r in recorded.values()) and all(
            recorded[a][0][index[b]] == recorded[b][1][index[a]] for a in specs for b in specs)  # type: ignore[index]
        if agree:
            sent_bytes = {rank: recorded[rank][0] for rank in specs}  # type: ignore[index]
            got_bytes = {rank: recorded[rank][1] for rank in specs}  # type: ignore[index]
        else:
            chunk = {rank: -(-spec.nbytes // size) for rank, spec in specs.items()}
            sent_bytes = {rank: [chunk[rank]] * size for rank in specs}
            got_bytes = {rank: [chunk.get(m, 0) for m in members] for rank in specs}
        dtype = next(iter(specs.values())).dtype
        itemsize = _ITEMSIZE[dtype]
        if any(b % itemsize for v in (*sent_bytes.values(), *got_bytes.values()) for b in v):
            dtype, itemsize = "uint8", 1
        for rank, row in participants:
            plans[rank].comm[row] = replace(specs[rank], dtype=dtype, nbytes=sum(sent_bytes[rank]),
                                            in_splits=tuple(b // itemsize for b in sent_bytes[rank]),
                                            out_splits=tuple(b // itemsize for b in got_bytes[rank]))


def plan_job(job: Job, mode: str, *, allow_mismatch: bool = False) -> JobPlan:
    """Plan every rank of ``job`` and check that the ranks can replay together: ranks that disagree
    about a call (:mod:`etkit.model.matching`) are refused unless ``allow_mismatch``; then collective
    sizes are made equal and unmatched sends and receives are left out, each with a note or reason
    (a collective sequence that differs still cannot replay)."""
    plans = {rank: plan_rank(trace, rank, job, mode) for rank, trace in sorted(job.traces.items())}
    missing = [r for r in range(job.world_size) if r not in plans]
    if missing:
        raise EtkitError(f"{job.prefix or 'job'}: no trace for rank(s) {missing}; replay needs every rank")
    found = match_comm({rank: comm_record(job.traces[rank], rank, plan.order) for rank, plan in plans.items()},
                       job.groups, job.world_size)
    _refuse_disagreements(job, plans, found, frozenset({"collective-mismatch", "collective-missing", "group-rank-missing"})
                          if allow_mismatch else DISAGREEMENTS)
    positions = _positions(plans, found)
    notes = _harmonise_sizes(plans, positions)
    _assign_alltoall_splits(job, plans, positions)
    notes += _match_point_to_point(plans, found)
    used = sorted({spec.group for p in plans.values() for spec in p.comm.values()} - {WORLD},
                  key=lambda g: (len(g), g))
    groups = {g: job.members(g) for g in used}
    return JobPlan(job.world_size, groups, plans, notes)


def largest_buffer(plan: JobPlan) -> tuple[int, int, int, CommSpec] | None:
    """``(bytes, rank, row, spec)`` of the communication that holds the most memory on one rank."""
    best = None
    for rank, rank_plan in plan.ranks.items():
        for row, spec in rank_plan.comm.items():
            need = spec.buffer_bytes()
            if best is None or need > best[0]:
                best = (need, rank, row, spec)
    return best
