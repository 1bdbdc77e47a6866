"""One collective on any group layout, and the point-to-point forms of broadcast and barrier.

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and ALL_TO_ALL become one COMM_COLL_NODE per rank: every
simulator runs them. BROADCAST and BARRIER carry no root and no size semantics that simulators agree
on (ASTRA-sim aborts on BARRIER and charges BROADCAST 1 ns whatever its size), so they are written as
what libraries actually run, in SEND/RECV nodes with ``comm_src``/``comm_dst``/``comm_tag``/
``comm_size`` that every simulator matches point to point:

* broadcast: a binomial tree from the root, ``ceil(log2 p)`` rounds; a rank forwards only after it
  received (its sends depend on its recv), every message carries the whole buffer;
* barrier: a dissemination barrier, ``ceil(log2 p)`` rounds; in round ``k`` member ``i`` sends a
  4-byte token to member ``i + 2**k`` and receives from member ``i - 2**k`` (mod ``p``), with tag
  ``base + k``; round ``k+1`` waits for round ``k``'s token, so no rank leaves before all arrived.

Group layouts (:func:`parse_groups`): explicit member lists (``0-3 4-7``, ``0,2,4,6 1,3,5,7``),
consecutive blocks (``group_size``) or strided blocks (``group_size`` + ``stride``). Groups must
partition the ranks; each gets ``pg_name`` "1", "2", ... in ``PREFIX.comm_groups.json``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import UsageError
from ..executor import Executor
from ..format.schema import CommType
from ..model.groups import ProcessGroups
from ..model.job import Job
from ..model.template import Param, RankPlan, TraceTemplate, build_job, synthetic_metadata, write_job
from ..records import record
from ..units import parse_size

__all__ = [
    "BARRIER_TOKEN_BYTES",
    "COLLECTIVE_TYPES",
    "CollectiveSpec",
    "add_barrier",
    "add_broadcast",
    "collective",
    "parse_groups",
    "parse_size",
    "write_collective",
]

#: Size of the token each barrier round sends (a 32-bit flag, as MPI dissemination barriers do).
BARRIER_TOKEN_BYTES = 4

#: Collectives written as one COMM_COLL_NODE per rank.
NATIVE_TYPES = {
    "all_reduce": CommType.ALL_REDUCE,
    "all_gather": CommType.ALL_GATHER,
    "reduce_scatter": CommType.REDUCE_SCATTER,
    "all_to_all": CommType.ALL_TO_ALL,
}
#: Every ``--type`` accepted (broadcast and barrier are lowered to SEND/RECV).
COLLECTIVE_TYPES = (*NATIVE_TYPES, "broadcast", "barrier")

def _parse_members(spec: str, npus: int) -> list[int]:
    ranks: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None:
            raise UsageError(f"group {spec!r}: {part!r} is not a rank or a range a-b")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise UsageError(f"group {spec!r}: range {part!r} runs backwards")
        if hi >= npus:
            raise UsageError(f"group {spec!r}: rank {hi} is outside 0..{npus - 1}")
        ranks.extend(range(lo, hi + 1))
    return ranks


def parse_groups(npus: int, groups: str | Sequence[str] | None = None, *, group_size: int | None = None,
                 stride: int = 1) -> list[tuple[int, ...]]:
    """The groups of a layout, each a tuple of global ranks in the order given.

    ``groups``: one spec per group (a string may hold several separated by spaces or ``;``), each a
    comma-separated list of ranks and ``a-b`` ranges. Or ``group_size`` K (with ``stride`` S):
    ``npus / (K*S)`` blocks of ``K*S`` consecutive ranks, each split into S groups of K ranks S apart
    (S=1: consecutive blocks; ``npus=8, K=4, S=2`` gives ``(0,2,4,6), (1,3,5,7)``). Neither: one group
    of all ranks. Groups must partition ``0..npus-1``.
    """
    if npus < 1:
        raise UsageError(f"npus must be at least 1, not {npus}")
    if groups is not None and group_size is not None:
        raise UsageError("give either explicit groups or a group size, not both")
    if groups is not None:
        specs = re.split(r"[;\s]+", groups.strip()) if isinstance(groups, str) else \
            [s for g in groups for s in re.split(r"[;\s]+", g.strip())]
        result = [tuple(_parse_members(s, npus)) for s in specs if s]
        if not result:
            raise UsageError("no group given")
    elif group_size is not None:
        if group_size < 1 or stride < 1:
            raise UsageError("group size and stride must be positive")
        block = group_size * stride
        if npus % block:
            raise UsageError(f"{npus} ranks cannot be cut into groups of {group_size} with stride {stride} "
                             f"(npus must be a multiple of {block})")
        result = [tuple(base + offset + i * stride for i in range(group_size))
                  for base in range(0, npus, block) for offset in range(stride)]
    else:
        return [tuple(range(npus))]
    seen: dict[int, int] = {}
    for index, members in enumerate(result):
        for rank in members:
            if rank in seen:
                raise UsageError(f"rank {rank} is in group {seen[rank] + 1} and group {index + 1}; "
                                 "groups must not overlap")
            seen[rank] = index
    missing = sorted(set(range(npus)) - set(seen))
    if missing:
        raise UsageError(f"rank {missing[0]} is in no group ({len(missing)} ranks uncovered); "
                         "groups must cover every rank")
    return result


def add_broadcast(tpl: TraceTemplate, members: Sequence[int], rank: int, size: int, *, root: int = 0,
                  tag: int = 0, deps: Iterable[int] = (), name: str = "BROADCAST") -> list[int]:
    """Append ``rank``'s part of a binomial-tree broadcast from member ``root`` of ``members``.

    ``root`` is a position in ``members``; ``comm_src``/``comm_dst`` are global ranks. Returns the ids
    of the nodes that end ``rank``'s part (its last recv and its sends), for callers to depend on.
    """
    p = len(members)
    me = (members.index(rank) - root) % p  # position relative to the root
    deps = list(deps)
    ends: list[int] = []
    mask = 1
    if me:
        # Receive from the member that differs in the highest set bit of ``me``.
        while mask <= me:
            mask <<= 1
        mask >>= 1
        parent = members[(me - mask + root) % p]
        got = tpl.recv(f"{name}_recv_from_{parent}", size, src=parent, dst=rank, tag=tag, deps=deps)
        deps = [got]
        ends.append(got)
        mask <<= 1
    # ``mask`` now exceeds ``me``: forward to every member ``me + mask``, ``me + 2*mask``, ... below p.
    while me + mask < p:
        child = members[(me + mask + root) % p]
        ends.append(tpl.send(f"{name}_send_to_{child}", size, src=rank, dst=child, tag=tag, deps=deps))
        mask <<= 1
    return ends or deps


def add_barrier(tpl: TraceTemplate, members: Sequence[int], rank: int, *, tag: int = 0,
                deps: Iterable[int] = (), name: str = "BARRIER") -> list[int]:
    """Append ``rank``'s part of a dissemination barrier over ``members``; returns its final node ids."""
    p = len(members)
    me = members.index(rank)
    deps = list(deps)
    step, round_ = 1, 0
    while step < p:
        peer_to = members[(me + step) % p]
        peer_from = members[(me - step) % p]
        # One tag per round, so even a matcher that ignores the round order pairs the right tokens.
        sent = tpl.send(f"{name}_send_to_{peer_to}", BARRIER_TOKEN_BYTES, src=rank, dst=peer_to,
                        tag=tag + round_, deps=deps)
        got = tpl.recv(f"{name}_recv_from_{peer_from}", BARRIER_TOKEN_BYTES, src=peer_from, dst=rank,
                       tag=tag + round_, deps=deps)
        deps = [sent, got]
        step <<= 1
        round_ += 1
    return deps


@record(frozen=True)
class CollectiveSpec:
    """One collective job: type (see :data:`COLLECTIVE_TYPES`), ``comm_size`` bytes, ranks, groups."""

    comm: str
    size: int
    npus: int
    groups: tuple[tuple[int, ...], ...]
    root: int = 0

    def __post_init__(self) -> None:
        if self.comm not in COLLECTIVE_TYPES:
            raise UsageError(f"collective type {self.comm!r}: expected one of {', '.join(COLLECTIVE_TYPES)}")
        if self.comm == "broadcast" and any(not 0 <= self.root < len(g) for g in self.groups):
            raise UsageError(f"broadcast root {self.root} is not a position in every group")

    @property
    def process_groups(self) -> ProcessGroups:
        """``pg_name`` "1", "2", ... per group; none when a single group spans every rank."""
        if len(self.groups) == 1:
            return ProcessGroups()
        return ProcessGroups.from_mapping({str(i + 1): g for i, g in enumerate(self.groups)})


def _plans(spec: CollectiveSpec) -> tuple[list[RankPlan], dict[str, TraceTemplate]]:
    meta = synthetic_metadata("etkit.generate.collective", collective=spec.comm, comm_size=spec.size)
    grouped = len(spec.groups) > 1
    if spec.comm in NATIVE_TYPES:
        tpl = TraceTemplate(meta)
        tpl.coll(spec.comm.upper(), NATIVE_TYPES[spec.comm], spec.size, pg_name=Param("pg") if grouped else None)
        plans = [RankPlan(rank, "all", {"pg": str(i + 1)}) for i, g in enumerate(spec.groups) for rank in g]
        return plans, {"all": tpl}
    templates: dict[str, TraceTemplate] = {}
    plans = []
    for members in spec.groups:
        for rank in members:
            tpl = TraceTemplate(meta)
            if spec.comm == "broadcast":
                add_broadcast(tpl, members, rank, spec.size, root=spec.root)
            else:
                add_barrier(tpl, members, rank)
            templates[str(rank)] = tpl
            plans.append(RankPlan(rank, str(rank)))
    return plans, templates


def _spec(comm: str, size: int | str, npus: int, groups: str | Sequence[str] | None, group_size: int | None,
          stride: int, root: int) -> CollectiveSpec:
    layout = parse_groups(npus, groups, group_size=group_size, stride=stride)
    spec = CollectiveSpec(comm.lower(), parse_size(size), npus, tuple(layout), root)
    if spec.comm in ("broadcast", "barrier") and min(len(g) for g in layout) < 2:
        raise UsageError(f"a {spec.comm} needs groups of at least 2 ranks")
    return spec


def collective(comm: str, size: int | str, npus: int, *, groups: str | Sequence[str] | None = None,
               group_size: int | None = None, stride: int = 1, root: int = 0) -> Job:
    """A job of ``npus`` ranks running one collective ``comm`` of ``size`` bytes in each group.

    See :func:`parse_groups` for the layouts; ``root`` is the broadcast root's position in each group.
    """
    spec = _spec(comm, size, npus, groups, group_size, stride, root)
    plans, templates = _plans(spec)
    return build_job(plans, templates, groups=spec.process_groups)


def write_collective(prefix: str | os.PathLike[str], comm: str, size: int | str, npus: int, *,
                     groups: str | Sequence[str] | None = None, group_size: int | None = None, stride: int = 1,
                     root: int = 0, executor: Executor | None = None) -> list[Path]:
    """Write :func:`collective` as ``PREFIX.<rank>.et`` (+ ``PREFIX.comm_groups.json`` when grouped)."""
    spec = _spec(comm, size, npus, groups, group_size, stride, root)
    plans, templates = _plans(spec)
    return write_job(prefix, plans, templates, groups=spec.process_groups, executor=executor)
