"""The one cross-rank matcher: which communication nodes on different ranks are the same call.

Every verb that ties ranks together calls :func:`match_comm` (``validate``'s cross-rank rules, the
simulator's pre-check, ``replay``'s plan, ``analyze``'s links), so a job one of them accepts is a job the
others accept. The rule:

- A rank issues its communication in *issue order*: node id order (every producer numbers nodes in the
  order they are issued), or the order a caller gives :func:`comm_record` (replay's walk order).
- Collectives run on the group :func:`~etkit.model.groups.communicator_key` names (a missing, "" or "0"
  ``pg_name`` is the whole job). The k-th collective a member issues on group G is the k-th of every
  other member: one :class:`Instance` per (G, k). Each member's sequence is compared with the group's
  most common one (its lowest rank holding it is the reference): a different type is a
  ``collective-mismatch``, a shorter or longer sequence ``collective-missing``, a different size
  ``collective-size-mismatch`` (a warning for all-to-all, gather and scatter, whose per-rank sizes
  legitimately differ).
- A send on rank s to ``comm_dst`` d with ``comm_tag`` t pairs with a receive on d from ``comm_src`` s with
  tag t, in issue order. A missing tag takes any tag and a receive without ``comm_src`` takes a send from
  any rank (the simulator's wildcards): exact channels pair first, then wildcards with the first free
  partner in issue order. Leftovers are ``unmatched-send`` / ``unmatched-recv``, pairs of different sizes
  ``p2p-size-mismatch``, peers outside the job ``p2p-bad-peer``; a send without ``comm_dst`` goes nowhere
  (a per-rank problem, not matched).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..format.schema import CommType, NodeType
from .groups import ProcessGroups, communicator_key
from .trace import MISSING, Trace, comm_type_name

__all__ = ["CommRecord", "comm_record", "Mismatch", "Instance", "Matching", "match_comm", "ERROR", "WARNING",
           "DISAGREEMENTS"]

ERROR = "error"
WARNING = "warning"
#: Rules by which ranks disagree about a call (what the consumers refuse to run; the other rules name
#: input a verb may handle on its own: an unknown group, a rank outside its group, a peer outside the job).
DISAGREEMENTS = frozenset({"collective-mismatch", "collective-missing", "collective-size-mismatch",
                           "group-rank-missing", "unmatched-send", "unmatched-recv", "p2p-size-mismatch"})

_COLL, _SEND, _RECV = int(NodeType.COMM_COLL_NODE), int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)
_UNEVEN = frozenset({int(CommType.ALL_TO_ALL), int(CommType.GATHER), int(CommType.SCATTER)})
_MAX_PER_RULE = 50
_ANY = -1  # a missing tag or receive source: matches anything


@dataclass(frozen=True)
class CommRecord:
    """The communication of one rank in issue order: what the matcher compares (a few arrays, picklable)."""

    rank: int
    coll_rows: np.ndarray
    coll_ids: np.ndarray
    coll_pg_idx: np.ndarray  # index into pg_table of each collective's pg_name ("" where absent)
    pg_table: list[str]
    coll_type: np.ndarray
    coll_size: np.ndarray
    send_rows: np.ndarray
    send_ids: np.ndarray
    send_peer: np.ndarray  # comm_dst (MISSING where absent)
    send_tag: np.ndarray  # MISSING where absent
    send_size: np.ndarray
    recv_rows: np.ndarray
    recv_ids: np.ndarray
    recv_peer: np.ndarray  # comm_src
    recv_tag: np.ndarray
    recv_size: np.ndarray


def comm_record(trace: Trace, rank: int, order: np.ndarray | None = None) -> CommRecord:
    """The :class:`CommRecord` of ``trace`` as rank ``rank``; ``order``: rows in issue order (default: by id)."""
    types = trace.types
    comm = np.isin(types, np.array([_COLL, _SEND, _RECV], dtype=types.dtype))
    if order is None:
        rows = np.flatnonzero(comm)
        rows = rows[np.argsort(trace.ids[rows], kind="stable")]
    else:
        rows = np.asarray(order, dtype=np.int64)
        rows = rows[comm[rows]]
    kinds = types[rows]
    coll, send, recv = rows[kinds == _COLL], rows[kinds == _SEND], rows[kinds == _RECV]
    used, coll_pg_idx = np.unique(trace.pg_idx[coll], return_inverse=True)  # -1 (absent) sorts first
    pg_table = ["" if i < 0 else trace.strings[i] for i in used.tolist()]
    return CommRecord(rank, coll, trace.ids[coll], coll_pg_idx.ravel(), pg_table, trace.comm_type[coll],
                      trace.comm_size[coll],
                      send, trace.ids[send], trace.comm_dst[send], trace.comm_tag[send], trace.comm_size[send],
                      recv, trace.ids[recv], trace.comm_src[recv], trace.comm_tag[recv], trace.comm_size[recv])


@dataclass(frozen=True)
class Mismatch:
    """One broken cross-rank rule (``node_id`` None: the rank as a whole)."""

    rank: int
    node_id: int | None
    rule: str
    message: str
    severity: str = ERROR


@dataclass(frozen=True)
class Instance:
    """One collective call: the ``seq``-th on ``group``; ``members`` the (rank, row) of each rank that issued
    it, in rank order; ``expected`` how many ranks of the job the group holds."""

    group: str
    seq: int
    members: tuple[tuple[int, int], ...]
    expected: int


@dataclass
class Matching:
    """What :func:`match_comm` found."""

    instances: list[Instance] = field(default_factory=list)
    #: (send rank, send row, recv rank, recv row)
    pairs: list[tuple[int, int, int, int]] = field(default_factory=list)
    #: (rank, row) of every send and receive without a partner
    unmatched: list[tuple[int, int]] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)

    def errors(self, rules: frozenset[str] | None = None) -> list[Mismatch]:
        """Errors (of ``rules`` only, when given)."""
        return [m for m in self.mismatches if m.severity == ERROR and (rules is None or m.rule in rules)]


def match_comm(records: Mapping[int, CommRecord], groups: ProcessGroups, world: int) -> Matching:
    """Collective instances, send/recv pairs and every disagreement of the ranks in ``records``."""
    out = Matching()
    _match_collectives(records, groups, world, out)
    _match_p2p(records, world, out)
    return out


def summary(mismatches: Sequence[Mismatch], limit: int = 5) -> str:
    """The first ``limit`` mismatches, one per line (``rank R node N: [rule] message``)."""
    lines = [f"rank {m.rank}" + (f" node {m.node_id}" if m.node_id is not None else "") + f": [{m.rule}] {m.message}"
             for m in mismatches[:limit]]
    if len(mismatches) > limit:
        lines.append(f"... and {len(mismatches) - limit} more")
    return "\n".join(lines)


# -- collectives -------------------------------------------------------------------------------------

def _match_collectives(records: Mapping[int, CommRecord], groups: ProcessGroups, world: int, out: Matching) -> None:
    per_group: dict[str, dict[int, np.ndarray]] = defaultdict(dict)  # group -> rank -> indices into its arrays
    for rank in sorted(records):
        rec = records[rank]
        used = np.unique(rec.coll_pg_idx)  # the few distinct pg_names, not one string per collective
        keys = [communicator_key(rec.pg_table[i]) for i in used.tolist()]
        for key in dict.fromkeys(keys):
            codes = used[[k == key for k in keys]]
            per_group[key][rank] = np.flatnonzero(np.isin(rec.coll_pg_idx, codes))
    found = out.mismatches
    for key, by_rank in sorted(per_group.items()):
        try:
            members = groups.members(key, world)
        except KeyError:
            members = None
        present = [r for r in members if r in records] if members is not None else []
        _add_instances(key, by_rank, records, len(present) or len(by_rank), out)
        if members is None:
            for rank, idx in sorted(by_rank.items()):
                found.append(Mismatch(rank, int(records[rank].coll_ids[idx[0]]), "unknown-group",
                                      f"pg_name {key!r} is not a known process group ({len(idx)} collectives)"))
            continue
        member_set = set(members)
        for rank, idx in sorted(by_rank.items()):
            if rank not in member_set:
                found.append(Mismatch(rank, int(records[rank].coll_ids[idx[0]]), "not-in-group",
                                      f"rank {rank} issues collectives on pg {key!r} whose members are {list(members)}"))
        for r in members:
            if r not in records:
                found.append(Mismatch(r, None, "group-rank-missing",
                                      f"pg {key!r} includes rank {r} but the job has no trace for it"))
        found.extend(_compare_sequences(key, present, by_rank, records))


def _add_instances(key: str, by_rank: Mapping[int, np.ndarray], records: Mapping[int, CommRecord], expected: int,
                   out: Matching) -> None:
    calls = max((len(idx) for idx in by_rank.values()), default=0)
    rows = {rank: records[rank].coll_rows[idx].tolist() for rank, idx in by_rank.items()}
    for k in range(calls):
        members = tuple((rank, rows[rank][k]) for rank in sorted(rows) if k < len(rows[rank]))
        out.instances.append(Instance(key, k, members, expected))


def _compare_sequences(key: str, ranks: list[int], by_rank: Mapping[int, np.ndarray],
                       records: Mapping[int, CommRecord]) -> list[Mismatch]:
    empty = np.zeros(0, dtype=np.int64)
    types = {r: records[r].coll_type[by_rank[r]] if r in by_rank else empty for r in ranks}
    modal_bytes, _ = Counter(types[r].tobytes() for r in ranks).most_common(1)[0] if ranks else (b"", 0)
    reference = next((r for r in ranks if types[r].tobytes() == modal_bytes), None)
    if reference is None:
        return []
    ref_types = types[reference]
    ref_idx = by_rank.get(reference, empty)
    ref_rec = records[reference]
    out: list[Mismatch] = []
    for rank in ranks:
        idx = by_rank.get(rank, empty)
        rec = records[rank]
        mine = types[rank]
        n = min(len(mine), len(ref_types))
        diff = np.flatnonzero(mine[:n] != ref_types[:n])
        if len(diff):
            i = int(diff[0])
            out.append(Mismatch(rank, int(rec.coll_ids[idx[i]]), "collective-mismatch",
                                f"collective #{i + 1} on pg {key!r} is {comm_type_name(int(mine[i]))} but rank "
                                f"{reference} issues {comm_type_name(int(ref_types[i]))} (node "
                                f"{int(ref_rec.coll_ids[ref_idx[i]])})"))
            continue
        if len(mine) < len(ref_types):
            i = len(mine)
            out.append(Mismatch(rank, None, "collective-missing",
                                f"rank issues {len(mine)} collectives on pg {key!r}, rank {reference} issues "
                                f"{len(ref_types)}; first missing: {comm_type_name(int(ref_types[i]))} of "
                                f"{int(ref_rec.coll_size[ref_idx[i]])} bytes (rank {reference} node "
                                f"{int(ref_rec.coll_ids[ref_idx[i]])})"))
        elif len(mine) > len(ref_types):
            i = len(ref_types)
            out.append(Mismatch(rank, int(rec.coll_ids[idx[i]]), "collective-missing",
                                f"rank issues {len(mine)} collectives on pg {key!r} but the other members issue "
                                f"{len(ref_types)}; this one has no partner"))
        sizes = rec.coll_size[idx[:n]]
        ref_sizes = ref_rec.coll_size[ref_idx[:n]]
        for i in np.flatnonzero(sizes != ref_sizes)[:_MAX_PER_RULE].tolist():
            uneven = int(mine[i]) in _UNEVEN
            out.append(Mismatch(rank, int(rec.coll_ids[idx[i]]), "collective-size-mismatch",
                                f"{comm_type_name(int(mine[i]))} #{i + 1} on pg {key!r} moves {int(sizes[i])} bytes, "
                                f"rank {reference} moves {int(ref_sizes[i])}" + (" (uneven splits?)" if uneven else ""),
                                WARNING if uneven else ERROR))
    return out


# -- point to point ----------------------------------------------------------------------------------

@dataclass
class _End:
    """One send or receive: its rank, row, id, the other end's rank (_ANY: any), tag (_ANY: any), size."""

    rank: int
    row: int
    node_id: int
    peer: int
    tag: int
    size: int
    partner: _End | None = None


def _ends(records: Mapping[int, CommRecord], world: int, out: Matching) -> tuple[list[_End], list[_End]]:
    sends: list[_End] = []
    recvs: list[_End] = []
    for rank in sorted(records):
        rec = records[rank]
        for what, ends, rows, ids, peers, tags, sizes in (
                ("send", sends, rec.send_rows, rec.send_ids, rec.send_peer, rec.send_tag, rec.send_size),
                ("recv", recvs, rec.recv_rows, rec.recv_ids, rec.recv_peer, rec.recv_tag, rec.recv_size)):
            for row, node_id, peer, tag, size in zip(rows.tolist(), ids.tolist(), peers.tolist(), tags.tolist(),
                                                     sizes.tolist()):
                if peer == MISSING:
                    if what == "send":
                        continue  # a send without a destination (a per-rank problem)
                    peer = _ANY
                elif not 0 <= peer < world:
                    out.mismatches.append(Mismatch(rank, node_id, "p2p-bad-peer",
                                                   f"{what} {'to' if what == 'send' else 'from'} rank {peer}, "
                                                   f"outside 0..{world - 1}"))
                    continue
                ends.append(_End(rank, row, node_id, peer, _ANY if tag == MISSING else tag, size))
    return sends, recvs


def _tag(tag: int) -> str:
    return "any" if tag == _ANY else str(tag)


def _match_p2p(records: Mapping[int, CommRecord], world: int, out: Matching) -> None:
    sends, recvs = _ends(records, world, out)
    # exact channels (source, destination, tag) first, in issue order
    channel_sends: dict[tuple[int, int, int], list[_End]] = defaultdict(list)
    channel_recvs: dict[tuple[int, int, int], list[_End]] = defaultdict(list)
    for s in sends:
        if s.tag != _ANY:
            channel_sends[(s.rank, s.peer, s.tag)].append(s)
    for r in recvs:
        if r.tag != _ANY and r.peer != _ANY:
            channel_recvs[(r.peer, r.rank, r.tag)].append(r)
    for key, s_list in channel_sends.items():
        for s, r in zip(s_list, channel_recvs.get(key, ())):
            s.partner, r.partner = r, s
    # then wildcards: each free receive, in issue order, takes the first free send it accepts
    _pair_wildcards(sends, recvs)
    channel: dict[tuple[int, int, int], int] = {}
    for s in sends:  # pairs are listed channel by channel, channels in the order their first send was issued
        channel.setdefault((s.rank, s.peer, s.tag), len(channel))
    paired = sorted(((channel[(s.rank, s.peer, s.tag)], i, s) for i, s in enumerate(sends) if s.partner is not None),
                    key=lambda t: t[:2])
    for _, _, s in paired:
        r = s.partner
        assert r is not None
        out.pairs.append((s.rank, s.row, r.rank, r.row))
    _p2p_findings(sends, recvs, out)


def _pair_wildcards(sends: list[_End], recvs: list[_End]) -> None:
    free_sends: dict[int, list[_End]] = defaultdict(list)  # destination -> free sends in issue order
    for s in sends:
        if s.partner is None:
            free_sends[s.peer].append(s)
    if not free_sends:
        return
    for r in recvs:
        if r.partner is not None:
            continue
        candidates = free_sends.get(r.rank)
        if not candidates:
            continue
        wild = r.peer == _ANY or r.tag == _ANY
        for i, s in enumerate(candidates):
            if s.partner is None and (r.peer in (_ANY, s.rank)) and (r.tag in (_ANY, s.tag) or s.tag == _ANY) \
                    and (wild or s.tag == _ANY):
                s.partner, r.partner = r, s
                del candidates[i]
                break


def _p2p_findings(sends: list[_End], recvs: list[_End], out: Matching) -> None:
    """Findings channel by channel (sorted), as validate lists them."""
    by_key: dict[tuple[int, int, int], tuple[list[_End], list[_End]]] = defaultdict(lambda: ([], []))
    for s in sends:
        by_key[(s.rank, s.peer, s.tag)][0].append(s)
    for r in recvs:
        by_key[(r.peer, r.rank, r.tag)][1].append(r)
    found = out.mismatches
    for key in sorted(by_key):
        src, dst, tag = key
        s_list, r_list = by_key[key]
        lone: list[Mismatch] = []  # listed after the key's size mismatches
        for s in s_list:
            r = s.partner
            if r is None:
                out.unmatched.append((s.rank, s.row))
                lone.append(Mismatch(s.rank, s.node_id, "unmatched-send",
                                     f"send of {s.size} bytes to rank {dst} tag {_tag(tag)} has no matching recv "
                                     f"on rank {dst}"))
            elif s.size != r.size:
                found.append(Mismatch(s.rank, s.node_id, "p2p-size-mismatch",
                                      f"send to rank {dst} tag {_tag(tag)} is {s.size} bytes but its recv "
                                      f"(rank {r.rank} node {r.node_id}) expects {r.size}"))
        found.extend(lone)
        for r in r_list:
            if r.partner is None:
                out.unmatched.append((r.rank, r.row))
                source = "any rank" if src == _ANY else f"rank {src}"
                found.append(Mismatch(r.rank, r.node_id, "unmatched-recv",
                                      f"recv of {r.size} bytes from {source} tag {_tag(tag)} has no matching send"
                                      + ("" if src == _ANY else f" on rank {src}")))
