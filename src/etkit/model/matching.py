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
from dataclasses import field

import numpy as np

from ..format.schema import CommType, NodeType
from ..records import record
from .groups import ProcessGroups, communicator_key
from .trace import MISSING, Trace, TraceBatch, comm_type_name, is_comm

__all__ = ["CommRecord", "comm_record", "comm_records", "Mismatch", "Instance", "Matching", "match_comm", "match_p2p",
           "collectives_by_group", "ERROR", "WARNING", "DISAGREEMENTS"]

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


@record(frozen=True)
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
    comm = is_comm(types)
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


def comm_records(batch: TraceBatch, ranks: Sequence[int]) -> list[CommRecord]:
    """:func:`comm_record` of each file of ``batch`` (as rank ``ranks[i]``, in id order), from the joined columns
    at once. The records hold the same calls; only the order of a record's ``pg_table`` may differ (the batch's
    string order, not the file's: the name each collective's ``coll_pg_idx`` gives is the same)."""
    if not batch.joint:
        return [comm_record(trace, rank) for trace, rank in zip(batch.traces(), ranks, strict=True)]
    cols, bounds = batch.columns, batch.bounds
    types, ids = cols.types, cols.ids
    rows = np.flatnonzero(is_comm(types))
    file = np.searchsorted(bounds, rows, side="right") - 1
    order = np.lexsort((ids[rows], file))  # by file, then id (stable, as comm_record's argsort)
    rows, file = rows[order], file[order]
    kinds = types[rows]
    files = np.arange(len(ranks) + 1)
    comm_type, comm_size, comm_src, comm_dst, comm_tag = (
        batch.int_column(name) for name in ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag"))

    def per_file(kind: int, *columns: np.ndarray) -> tuple[list[int], list[np.ndarray]]:
        """Where each file's rows of ``kind`` begin, and their rows in the file, ids and ``columns``."""
        pick = kinds == kind
        joined, of = rows[pick], file[pick]
        return np.searchsorted(of, files).tolist(), [joined - bounds[of], ids[joined], *(c[joined] for c in columns)]

    coll_cut, coll = per_file(_COLL, comm_type, comm_size, cols.pg_idx)
    send_cut, send = per_file(_SEND, comm_dst, comm_tag, comm_size)
    recv_cut, recv = per_file(_RECV, comm_src, comm_tag, comm_size)
    width = len(cols.strings) + 1  # a collective's (file, pg_name) as one key; an absent pg_name (-1) first
    keys, inverse = np.unique(file[kinds == _COLL] * width + coll.pop() + 1, return_inverse=True)
    key_cut = np.searchsorted(keys // width, files).tolist()
    inverse = inverse.ravel()
    table = ["", *cols.strings]
    out = []
    for i, rank in enumerate(ranks):
        c0, c1, s0, s1, r0, r1 = coll_cut[i], coll_cut[i + 1], send_cut[i], send_cut[i + 1], recv_cut[i], recv_cut[i + 1]
        rows_, ids_, type_, size_ = (a[c0:c1] for a in coll)
        pg_table = [table[k] for k in (keys[key_cut[i]:key_cut[i + 1]] % width).tolist()]
        out.append(CommRecord(rank, rows_, ids_, inverse[c0:c1] - key_cut[i], pg_table, type_, size_,
                              *(a[s0:s1] for a in send), *(a[r0:r1] for a in recv)))
    return out


@record(frozen=True)
class Mismatch:
    """One broken cross-rank rule (``node_id`` None: the rank as a whole)."""

    rank: int
    node_id: int | None
    rule: str
    message: str
    severity: str = ERROR


@record(frozen=True)
class Instance:
    """One collective call: the ``seq``-th on ``group``; ``members`` the (rank, row) of each rank that issued
    it, in rank order; ``expected`` how many ranks of the job the group holds."""

    group: str
    seq: int
    members: tuple[tuple[int, int], ...]
    expected: int


@record
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


def match_comm(records: Mapping[int, CommRecord], groups: ProcessGroups, world: int, *,
               instances: bool = True) -> Matching:
    """Collective instances, send/recv pairs and every disagreement of the ranks in ``records``
    (``instances=False``: the disagreements and pairs only, for a caller that needs no instance list: one
    tuple per member of every collective call is what a large job's matching spends most on)."""
    out = Matching()
    _match_collectives(records, groups, world, out, instances)
    _match_p2p(records, world, out)
    return out


def match_p2p(records: Mapping[int, CommRecord], world: int) -> Matching:
    """The point-to-point half of :func:`match_comm`: send/recv pairs, lone ends and their findings
    (for a caller that only moves messages, e.g. the ASTRA-sim export)."""
    out = Matching()
    _match_p2p(records, world, out)
    return out


def collectives_by_group(rec: CommRecord) -> dict[str, np.ndarray]:
    """Communicator key -> indices into ``rec``'s collective arrays of the calls on it, in issue order
    (the k-th index of a group on every member is one :class:`Instance`)."""
    keys = list(dict.fromkeys(communicator_key(pg) for pg in rec.pg_table))  # the few groups, not one per call
    key_of = np.asarray([keys.index(communicator_key(pg)) for pg in rec.pg_table], dtype=np.int64)[rec.coll_pg_idx]
    order = np.argsort(key_of, kind="stable")
    bounds = np.searchsorted(key_of[order], np.arange(len(keys) + 1))
    return {key: order[bounds[k]:bounds[k + 1]] for k, key in enumerate(keys) if bounds[k + 1] > bounds[k]}


def summary(mismatches: Sequence[Mismatch], limit: int = 5) -> str:
    """The first ``limit`` mismatches, one per line (``rank R node N: [rule] message``)."""
    lines = [f"rank {m.rank}" + (f" node {m.node_id}" if m.node_id is not None else "") + f": [{m.rule}] {m.message}"
             for m in mismatches[:limit]]
    if len(mismatches) > limit:
        lines.append(f"... and {len(mismatches) - limit} more")
    return "\n".join(lines)


# -- collectives -------------------------------------------------------------------------------------

def _match_collectives(records: Mapping[int, CommRecord], groups: ProcessGroups, world: int, out: Matching,
                       instances: bool) -> None:
    per_group: dict[str, dict[int, np.ndarray]] = defaultdict(dict)  # group -> rank -> indices into its arrays
    for rank in sorted(records):
        for key, idx in collectives_by_group(records[rank]).items():
            per_group[key][rank] = idx
    found = out.mismatches
    for key, by_rank in sorted(per_group.items()):
        try:
            members = groups.members(key, world)
        except KeyError:
            members = None
        present = [r for r in members if r in records] if members is not None else []
        if instances:
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

@record
class _Ends:
    """Every send (or every receive) of the job in issue order, ranks in order: one array per field."""

    rank: np.ndarray
    row: np.ndarray
    node_id: np.ndarray  # uint64
    peer: np.ndarray  # the other end's rank (_ANY: any)
    tag: np.ndarray  # (_ANY: any)
    size: np.ndarray
    partner: np.ndarray  # index of the paired end on the other side, -1: none

    def __len__(self) -> int:
        return len(self.rank)


def _ends(records: Mapping[int, CommRecord], world: int, out: Matching, what: str) -> _Ends:
    ranks = sorted(records)
    pick = [(records[r].send_rows, records[r].send_ids, records[r].send_peer, records[r].send_tag,
             records[r].send_size) if what == "send" else
            (records[r].recv_rows, records[r].recv_ids, records[r].recv_peer, records[r].recv_tag,
             records[r].recv_size) for r in ranks]
    rank = np.repeat(np.asarray(ranks, dtype=np.int64), [len(p[0]) for p in pick])
    row, node_id, peer, tag, size = (np.concatenate([np.asarray(p[i], dtype=np.uint64 if i == 1 else np.int64)
                                                     for p in pick]) if pick else np.zeros(0, np.int64)
                                     for i in range(5))
    missing = peer == MISSING
    bad = ~missing & ((peer < 0) | (peer >= world))
    for i in np.flatnonzero(bad).tolist():
        out.mismatches.append(Mismatch(int(rank[i]), int(node_id[i]), "p2p-bad-peer",
                                       f"{what} {'to' if what == 'send' else 'from'} rank {int(peer[i])}, "
                                       f"outside 0..{world - 1}"))
    keep = ~bad & ~missing if what == "send" else ~bad  # a send without a destination is a per-rank problem
    peer = np.where(missing, _ANY, peer)
    tag = np.where(tag == MISSING, _ANY, tag)
    return _Ends(rank[keep], row[keep], node_id[keep], peer[keep], tag[keep], size[keep],
                 np.full(int(keep.sum()), -1, dtype=np.int64))


def _bad_peers_in_rank_order(out: Matching, first: int) -> None:
    """p2p-bad-peer findings rank by rank (sends, then receives, of each rank)."""
    found = out.mismatches[first:]
    found.sort(key=lambda m: m.rank)  # stable: a rank's sends stay before its receives
    out.mismatches[first:] = found


def _ordinals(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """Per entry, how many earlier entries share its key (entries are in issue order)."""
    n = len(keys[0])
    if not n:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(n), *reversed(keys)))
    sorted_keys = [k[order] for k in keys]
    new = np.ones(n, dtype=bool)
    new[1:] = np.any([k[1:] != k[:-1] for k in sorted_keys], axis=0)
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n) - start
    return out


def _pair_exact(sends: _Ends, recvs: _Ends) -> None:
    """The k-th send of a channel (source, destination, tag) with the k-th receive of it."""
    s_idx = np.flatnonzero(sends.tag != _ANY)
    r_idx = np.flatnonzero((recvs.tag != _ANY) & (recvs.peer != _ANY))
    src = np.concatenate((sends.rank[s_idx], recvs.peer[r_idx]))
    dst = np.concatenate((sends.peer[s_idx], recvs.rank[r_idx]))
    tag = np.concatenate((sends.tag[s_idx], recvs.tag[r_idx]))
    side = np.concatenate((np.zeros(len(s_idx), np.int64), np.ones(len(r_idx), np.int64)))
    ordinal = np.concatenate((_ordinals((sends.rank[s_idx], sends.peer[s_idx], sends.tag[s_idx])),
                              _ordinals((recvs.peer[r_idx], recvs.rank[r_idx], recvs.tag[r_idx]))))
    if len(side) < 2:
        return
    order = np.lexsort((side, ordinal, tag, dst, src))
    a, b = order[:-1], order[1:]
    hit = (side[a] == 0) & (side[b] == 1) & (src[a] == src[b]) & (dst[a] == dst[b]) & (tag[a] == tag[b]) & \
        (ordinal[a] == ordinal[b])
    s_of, r_of = s_idx[a[hit]], r_idx[b[hit] - len(s_idx)]
    sends.partner[s_of] = r_of
    recvs.partner[r_of] = s_of


def _pair_wildcards(sends: _Ends, recvs: _Ends) -> None:
    """Each free receive, in issue order, takes the first free send it accepts (a missing tag or source
    accepts any); only ends with a wildcard are left to pair here."""
    free_s = np.flatnonzero(sends.partner < 0)
    free_r = np.flatnonzero(recvs.partner < 0)
    wild_r = (recvs.peer[free_r] == _ANY) | (recvs.tag[free_r] == _ANY)
    if not len(free_s) or not len(free_r) or not (wild_r.any() or (sends.tag[free_s] == _ANY).any()):
        return
    by_dst: dict[int, list[int]] = defaultdict(list)
    for i in free_s.tolist():
        by_dst[int(sends.peer[i])].append(i)
    for j, wild in zip(free_r.tolist(), wild_r.tolist()):
        candidates = by_dst.get(int(recvs.rank[j]))
        if not candidates:
            continue
        peer, tag = int(recvs.peer[j]), int(recvs.tag[j])
        for k, i in enumerate(candidates):
            s_tag = int(sends.tag[i])
            if peer in (_ANY, int(sends.rank[i])) and (tag in (_ANY, s_tag) or s_tag == _ANY) and (wild or s_tag == _ANY):
                sends.partner[i], recvs.partner[j] = j, i
                del candidates[k]
                break


def _tag(tag: int) -> str:
    return "any" if tag == _ANY else str(tag)


def _match_p2p(records: Mapping[int, CommRecord], world: int, out: Matching) -> None:
    first = len(out.mismatches)
    sends = _ends(records, world, out, "send")
    recvs = _ends(records, world, out, "recv")
    _bad_peers_in_rank_order(out, first)
    _pair_exact(sends, recvs)
    _pair_wildcards(sends, recvs)
    # pairs channel by channel, channels in the order their first send was issued, then in issue order
    if len(sends):
        _, first_index, inverse = np.unique(np.stack((sends.rank, sends.peer, sends.tag)), axis=1, return_index=True,
                                            return_inverse=True)
        channel_first = first_index[inverse.ravel()]
        paired = np.flatnonzero(sends.partner >= 0)
        paired = paired[np.lexsort((paired, channel_first[paired]))]
        r = sends.partner[paired]
        out.pairs.extend(zip(sends.rank[paired].tolist(), sends.row[paired].tolist(), recvs.rank[r].tolist(),
                             recvs.row[r].tolist()))
    _p2p_findings(sends, recvs, out)


def _p2p_findings(sends: _Ends, recvs: _Ends, out: Matching) -> None:
    """Findings channel by channel (sorted), each channel's size mismatches, then its lone sends, then its
    lone receives, as validate lists them."""
    s_partner = sends.partner
    paired = np.flatnonzero(s_partner >= 0)
    mismatch = paired[sends.size[paired] != recvs.size[s_partner[paired]]]
    lone_s = np.flatnonzero(s_partner < 0)
    lone_r = np.flatnonzero(recvs.partner < 0)
    events = [(sends.rank[mismatch], sends.peer[mismatch], sends.tag[mismatch], 0, mismatch),
              (sends.rank[lone_s], sends.peer[lone_s], sends.tag[lone_s], 1, lone_s),
              (recvs.peer[lone_r], recvs.rank[lone_r], recvs.tag[lone_r], 2, lone_r)]
    src = np.concatenate([e[0] for e in events])
    if not len(src):
        return
    dst = np.concatenate([e[1] for e in events])
    tag = np.concatenate([e[2] for e in events])
    what = np.concatenate([np.full(len(e[4]), e[3], dtype=np.int64) for e in events])
    index = np.concatenate([e[4] for e in events])
    found = out.mismatches
    for i in np.lexsort((index, what, tag, dst, src)).tolist():
        s_or_r, d, t, w = int(index[i]), int(dst[i]), int(tag[i]), int(what[i])
        if w == 0:
            r = int(s_partner[s_or_r])
            found.append(Mismatch(int(sends.rank[s_or_r]), int(sends.node_id[s_or_r]), "p2p-size-mismatch",
                                  f"send to rank {d} tag {_tag(t)} is {int(sends.size[s_or_r])} bytes but its recv "
                                  f"(rank {int(recvs.rank[r])} node {int(recvs.node_id[r])}) expects {int(recvs.size[r])}"))
        elif w == 1:
            out.unmatched.append((int(sends.rank[s_or_r]), int(sends.row[s_or_r])))
            found.append(Mismatch(int(sends.rank[s_or_r]), int(sends.node_id[s_or_r]), "unmatched-send",
                                  f"send of {int(sends.size[s_or_r])} bytes to rank {d} tag {_tag(t)} has no matching "
                                  f"recv on rank {d}"))
        else:
            s = int(src[i])
            out.unmatched.append((int(recvs.rank[s_or_r]), int(recvs.row[s_or_r])))
            source = "any rank" if s == _ANY else f"rank {s}"
            found.append(Mismatch(int(recvs.rank[s_or_r]), int(recvs.node_id[s_or_r]), "unmatched-recv",
                                  f"recv of {int(recvs.size[s_or_r])} bytes from {source} tag {_tag(t)} has no "
                                  "matching send" + ("" if s == _ANY else f" on rank {s}")))
