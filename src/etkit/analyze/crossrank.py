"""Which nodes on different ranks are the same communication: collective instances and p2p pairs, as
the one cross-rank matcher (:mod:`etkit.model.matching`) pairs them, in the form the analyses index.
"""

from __future__ import annotations

from dataclasses import field

from ..gcpause import gc_paused
from ..model.job import Job
from ..model.matching import comm_record, match_comm
from ..model.trace import Trace
from ..records import record

__all__ = ["CrossRank", "match_cross_rank", "pg_name_of"]


@record
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


@gc_paused
def match_cross_rank(job: Job) -> CrossRank:
    """Collective instances and send/recv pairs of ``job`` (:func:`etkit.model.matching.match_comm`)."""
    out = CrossRank()
    found = match_comm({rank: comm_record(trace, rank) for rank, trace in job.traces.items()}, job.groups,
                       job.world_size)
    short = 0
    for index, inst in enumerate(found.instances):
        if len(inst.members) < inst.expected:
            short += 1
        members = list(inst.members)
        out.collectives.append(members)
        out.collective_groups.append((inst.group, inst.expected))
        for member in members:
            out.instance_of[member] = index
    if short:
        out.notes.append(f"{short} collective call(s) were not issued by every member of their group")
    for send_rank, send_row, recv_rank, recv_row in found.pairs:
        out.p2p.append((send_rank, send_row, recv_rank, recv_row))
        out.send_of[(recv_rank, recv_row)] = (send_rank, send_row)
        out.recv_of[(send_rank, send_row)] = (recv_rank, recv_row)
    if found.unmatched:
        out.notes.append(f"{len(found.unmatched)} send/recv node(s) have no partner")
    return out
