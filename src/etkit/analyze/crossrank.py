"""Which nodes on different ranks are the same communication: collective instances and p2p pairs.

The k-th collective a rank issues in process group G (in file order, which is issue order for every
producer) is the same call as the k-th collective of G on every other member. A send from rank s to d
with tag t pairs with the receive of the same (s, d, t) and the same ordinal on rank d. Ranks are
global; ``comm_src`` of a send and ``comm_dst`` of a receive default to the node's own rank.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..format.schema import NodeType
from ..model.job import Job
from ..model.trace import MISSING, Trace
from .gcpause import gc_paused

__all__ = ["CrossRank", "match_cross_rank", "pg_name_of"]


@dataclass
class CrossRank:
    """Cross-rank links of a job."""

    #: per instance, the (rank, row) of each member that joined it
    collectives: list[list[tuple[int, int]]] = field(default_factory=list)
    #: per instance, its process group name and how many members the group has
    collective_groups: list[tuple[str, int]] = field(default_factory=list)
    #: (rank, row) -> instance index
    instance_of: dict[tuple[int, int], int] = field(default_factory=dict)
    #: (send_rank, send_row, recv_rank, recv_row)
    p2p: list[tuple[int, int, int, int]] = field(default_factory=list)
    #: recv (rank, row) -> send (rank, row)
    send_of: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    #: send (rank, row) -> recv (rank, row)
    recv_of: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def pg_name_of(trace: Trace, row: int) -> str:
    """Process-group name of a row; absent or "" means the whole job ("0")."""
    idx = int(trace.pg_idx[row])
    name = trace.strings[idx] if idx >= 0 else ""
    return name or "0"


def _group_size(job: Job, pg: str, seen_ranks: set[int]) -> int:
    try:
        members = job.members(pg)
    except KeyError:
        return len(seen_ranks)
    present = [r for r in members if r in job.traces]
    return len(present) or len(seen_ranks)


@gc_paused
def match_cross_rank(job: Job) -> CrossRank:
    """Collective instances and send/recv pairs of ``job``."""
    out = CrossRank()
    by_key: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    sends: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    for rank, trace in sorted(job.traces.items()):
        types = trace.types
        coll = np.flatnonzero(types == NodeType.COMM_COLL_NODE)
        counters: dict[str, int] = defaultdict(int)
        for row in coll.tolist():
            pg = pg_name_of(trace, row)
            by_key[(pg, counters[pg])].append((rank, row))
            counters[pg] += 1
        for row in np.flatnonzero(types == NodeType.COMM_SEND_NODE).tolist():
            src = _peer(trace.comm_src[row], rank)
            sends[(src, _peer(trace.comm_dst[row], -1), int(trace.comm_tag[row]))].append((rank, row))
        for row in np.flatnonzero(types == NodeType.COMM_RECV_NODE).tolist():
            dst = _peer(trace.comm_dst[row], rank)
            recvs[(_peer(trace.comm_src[row], -1), dst, int(trace.comm_tag[row]))].append((rank, row))
    pg_ranks: dict[str, set[int]] = defaultdict(set)
    for (pg, _), members in by_key.items():
        pg_ranks[pg].update(r for r, _ in members)
    short = 0
    sizes = {pg: _group_size(job, pg, ranks) for pg, ranks in pg_ranks.items()}
    for (pg, _), members in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        size = sizes[pg]
        if len(members) < size:
            short += 1
        index = len(out.collectives)
        out.collectives.append(members)
        out.collective_groups.append((pg, size))
        for member in members:
            out.instance_of[member] = index
    if short:
        out.notes.append(f"{short} collective call(s) were not issued by every member of their group")
    unmatched = 0
    for key, send_nodes in sends.items():
        recv_nodes = recvs.get(key, [])
        unmatched += abs(len(send_nodes) - len(recv_nodes))
        for send, recv in zip(send_nodes, recv_nodes):
            out.p2p.append((*send, *recv))
            out.send_of[recv] = send
            out.recv_of[send] = recv
    unmatched += sum(len(v) for k, v in recvs.items() if k not in sends)
    if unmatched:
        out.notes.append(f"{unmatched} send/recv node(s) have no partner")
    return out


def _peer(value: np.int64, default: int) -> int:
    return default if value == MISSING else int(value)
