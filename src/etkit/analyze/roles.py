"""Ranks that do the same work: classes of ranks with one role (a pipeline stage, a data-parallel replica).

Two ranks have the same role when they issue the same sequence of communication: node type, collective
type, message size (but for all-to-all, whose splits differ) and process-group size of every
communication node, in issue order (peers and group names differ between replicas, so they are left out). That groups the ranks of one pipeline stage
across all replicas and tensor-parallel groups, and all ranks of a data-parallel job, whatever their
compute does. Stragglers are judged against their class (:mod:`.imbalance`) and the report shows
distributions per class (:mod:`etkit.viz.report`).
"""

from __future__ import annotations

import numpy as np

from ..format.schema import CommType, NodeType
from ..model.job import Job
from ..model.trace import MISSING, Trace
from ..records import record
from .crossrank import pg_name_of

__all__ = ["RoleClass", "role_classes", "rank_signature", "format_ranks"]


@record
class RoleClass:
    """Ranks that share one role; ``index`` numbers classes in order of their lowest rank."""

    index: int
    ranks: list[int]

    @property
    def label(self) -> str:
        return f"class {self.index} ({len(self.ranks)} rank{'s' if len(self.ranks) != 1 else ''}: " \
               f"{format_ranks(self.ranks)})"


def format_ranks(ranks: list[int], limit: int = 6) -> str:
    """``0-31, 64-95`` style: runs of consecutive ranks, at most ``limit`` runs (then "...")."""
    runs: list[tuple[int, int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    return ", ".join(text) + (", ..." if len(runs) > limit else "")


def rank_signature(trace: Trace, group_sizes: dict[str, int]) -> bytes:
    """A digest of the rank's communication sequence (see the module docstring)."""
    import hashlib  # here: a job of one rank needs no digest, and hashlib's OpenSSL costs a few ms to load

    rows = trace.comm_rows()
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.ascontiguousarray(trace.types[rows], dtype=np.int64).tobytes())
    digest.update(np.ascontiguousarray(trace.comm_type[rows], dtype=np.int64).tobytes())
    uneven = trace.comm_type[rows] == CommType.ALL_TO_ALL  # its split sizes differ from rank to rank
    digest.update(np.ascontiguousarray(np.where(uneven, 0, trace.comm_size[rows]), dtype=np.int64).tobytes())
    pgs = trace.pg_idx[rows]
    if len(rows) and (pgs >= 0).any():
        sizes = {int(i): group_sizes.get(pg_name_of(trace, int(r)), 0) for i, r in
                 zip(*np.unique(pgs, return_index=True)) for r in [rows[r]]}
        digest.update(np.asarray([sizes[int(p)] for p in pgs.tolist()], dtype=np.int64).tobytes())
    return digest.digest()


def _p2p_peers(trace: Trace, rank: int) -> np.ndarray:
    """The other end of every send (its ``comm_dst``) and receive (its ``comm_src``), in row order."""
    rows = trace.comm_rows()
    types = trace.types[rows]
    peer = np.where(types == NodeType.COMM_SEND_NODE, trace.comm_dst[rows],
                    np.where(types == NodeType.COMM_RECV_NODE, trace.comm_src[rows], MISSING))
    peer = peer[peer != MISSING]
    return np.where(peer < 0, rank, peer)


def role_classes(job: Job, *, rounds: int = 4) -> list[RoleClass]:
    """The classes of ``job``'s ranks, in order of their lowest rank.

    Ranks first group by their own communication sequence; then, a few rounds, by the classes of the
    peers their sends and receives talk to, in order, so pipeline stages with the same sequence but a
    different place in the pipeline (stage 1 talks to stages 0 and 2, stage 2 to 1 and 3) part.
    """
    ranks = sorted(job.traces)
    if len(ranks) == 1:
        return [RoleClass(0, ranks)]
    import hashlib

    sizes = {name: len(job.members(name)) for name in job.groups.groups}
    sig = {r: rank_signature(job.traces[r], sizes) for r in ranks}
    peers = {r: _p2p_peers(job.traces[r], r) for r in ranks}
    cls = _number(sig, ranks)
    if any(len(p) for p in peers.values()):
        for _ in range(rounds):
            lookup = np.full(max(ranks) + 1, -1, dtype=np.int64)
            lookup[ranks] = [cls[r] for r in ranks]
            refined = {}
            for r in ranks:
                p = peers[r]
                known = (p >= 0) & (p < len(lookup))
                refined[r] = sig[r] + hashlib.blake2b(np.where(known, lookup[np.where(known, p, 0)], -2)
                                                      .astype(np.int64).tobytes(), digest_size=16).digest()
            new = _number(refined, ranks)
            if len(set(new.values())) == len(set(cls.values())):
                break
            cls = new
    by_class: dict[int, list[int]] = {}
    for r in ranks:
        by_class.setdefault(cls[r], []).append(r)
    return [RoleClass(i, members) for i, members in enumerate(sorted(by_class.values(), key=lambda m: m[0]))]


def _number(keys: dict[int, bytes], ranks: list[int]) -> dict[int, int]:
    """Class numbers for per-rank keys, in order of each key's lowest rank."""
    seen: dict[bytes, int] = {}
    return {r: seen.setdefault(keys[r], len(seen)) for r in ranks}
