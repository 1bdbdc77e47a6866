"""Rules that tie ranks together: collectives agree within each process group, sends meet recvs.

Rules: ``unknown-group``, ``group-rank-missing``, ``not-in-group``, ``collective-missing``,
``collective-mismatch``, ``collective-size-mismatch`` (a warning for all-to-all, gather and scatter,
whose per-rank sizes legitimately differ), ``p2p-bad-peer``, ``unmatched-send``, ``unmatched-recv``,
``p2p-size-mismatch``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

import numpy as np

from ..format.schema import CommType
from ..model.groups import WORLD, ProcessGroups
from ..model.trace import MISSING, comm_type_name
from .findings import ERROR, WARNING, Finding
from .rank_rules import CommRecord

__all__ = ["check_collectives", "check_p2p"]

_UNEVEN = frozenset({int(CommType.ALL_TO_ALL), int(CommType.GATHER), int(CommType.SCATTER)})
_MAX_PER_RULE = 50


def _group_key(pg: str) -> str:
    return WORLD if pg in ("", WORLD) else pg


def check_collectives(records: Mapping[int, CommRecord], groups: ProcessGroups, world: int) -> list[Finding]:
    """Every member of each group issues the same collectives, in the same order, with equal sizes."""
    findings: list[Finding] = []
    # (rank, group) -> row indices into that rank's collective arrays
    per_group: dict[str, dict[int, np.ndarray]] = defaultdict(dict)
    for rank, rec in records.items():
        used = np.unique(rec.coll_pg_idx)  # the few distinct pg_names, not one string per collective
        keys = [_group_key(rec.pg_table[i]) for i in used.tolist()]
        for key in dict.fromkeys(keys):
            codes = used[[k == key for k in keys]]
            per_group[key][rank] = np.flatnonzero(np.isin(rec.coll_pg_idx, codes))
    for key, by_rank in sorted(per_group.items()):
        try:
            members = groups.members(key, world)
        except KeyError:
            for rank, rows in sorted(by_rank.items()):
                findings.append(Finding(rank, int(records[rank].coll_ids[rows[0]]), "unknown-group",
                                        f"pg_name {key!r} is not a known process group ({len(rows)} collectives)"))
            continue
        member_set = set(members)
        for rank, rows in sorted(by_rank.items()):
            if rank not in member_set:
                findings.append(Finding(rank, int(records[rank].coll_ids[rows[0]]), "not-in-group",
                                        f"rank {rank} issues collectives on pg {key!r} whose members are {list(members)}"))
        present = [r for r in members if r in records]
        for r in members:
            if r not in records:
                findings.append(Finding(r, None, "group-rank-missing",
                                        f"pg {key!r} includes rank {r} but the job has no trace for it"))
        findings.extend(_compare_sequences(key, present, by_rank, records))
    return findings


def _compare_sequences(key: str, ranks: list[int], by_rank: Mapping[int, np.ndarray],
                       records: Mapping[int, CommRecord]) -> list[Finding]:
    empty = np.zeros(0, dtype=np.int64)
    types = {r: records[r].coll_type[by_rank[r]] if r in by_rank else empty for r in ranks}
    modal_bytes, _ = Counter(types[r].tobytes() for r in ranks).most_common(1)[0] if ranks else (b"", 0)
    reference = next((r for r in ranks if types[r].tobytes() == modal_bytes), None)
    if reference is None:
        return []
    ref_types = types[reference]
    ref_rows = by_rank.get(reference, empty)
    ref_rec = records[reference]
    out: list[Finding] = []
    for rank in ranks:
        rows = by_rank.get(rank, empty)
        rec = records[rank]
        mine = types[rank]
        n = min(len(mine), len(ref_types))
        diff = np.flatnonzero(mine[:n] != ref_types[:n])
        if len(diff):
            i = int(diff[0])
            out.append(Finding(rank, int(rec.coll_ids[rows[i]]), "collective-mismatch",
                               f"collective #{i + 1} on pg {key!r} is {comm_type_name(int(mine[i]))} but rank "
                               f"{reference} issues {comm_type_name(int(ref_types[i]))} (node {int(ref_rec.coll_ids[ref_rows[i]])})"))
            continue
        if len(mine) < len(ref_types):
            i = len(mine)
            out.append(Finding(rank, None, "collective-missing",
                               f"rank issues {len(mine)} collectives on pg {key!r}, rank {reference} issues "
                               f"{len(ref_types)}; first missing: {comm_type_name(int(ref_types[i]))} of "
                               f"{int(ref_rec.coll_size[ref_rows[i]])} bytes (rank {reference} node "
                               f"{int(ref_rec.coll_ids[ref_rows[i]])})"))
        elif len(mine) > len(ref_types):
            i = len(ref_types)
            out.append(Finding(rank, int(rec.coll_ids[rows[i]]), "collective-missing",
                               f"rank issues {len(mine)} collectives on pg {key!r} but the other members issue "
                               f"{len(ref_types)}; this one has no partner"))
        sizes = rec.coll_size[rows[:n]]
        ref_sizes = ref_rec.coll_size[ref_rows[:n]]
        reported = 0
        for i in np.flatnonzero(sizes != ref_sizes):
            if reported >= _MAX_PER_RULE:
                break
            uneven = int(mine[i]) in _UNEVEN
            out.append(Finding(rank, int(rec.coll_ids[rows[i]]), "collective-size-mismatch",
                               f"{comm_type_name(int(mine[i]))} #{i + 1} on pg {key!r} moves {int(sizes[i])} bytes, "
                               f"rank {reference} moves {int(ref_sizes[i])}" + (" (uneven splits?)" if uneven else ""),
                               WARNING if uneven else ERROR))
            reported += 1
    return out


def check_p2p(records: Mapping[int, CommRecord], world: int) -> list[Finding]:
    """Each send meets a recv on its peer with the same tag, in order, with the same size."""
    findings: list[Finding] = []
    sends: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    for rank, rec in records.items():
        for node_id, peer, tag, size in zip(rec.send_ids.tolist(), rec.send_peer.tolist(), rec.send_tag.tolist(),
                                            rec.send_size.tolist()):
            if peer == MISSING:
                continue  # reported by p2p-missing-peer
            if not 0 <= peer < world:
                findings.append(Finding(rank, node_id, "p2p-bad-peer", f"send to rank {peer}, outside 0..{world - 1}"))
                continue
            sends[(rank, peer, tag)].append((node_id, size))
        for node_id, peer, tag, size in zip(rec.recv_ids.tolist(), rec.recv_peer.tolist(), rec.recv_tag.tolist(),
                                            rec.recv_size.tolist()):
            if peer == MISSING:
                continue
            if not 0 <= peer < world:
                findings.append(Finding(rank, node_id, "p2p-bad-peer", f"recv from rank {peer}, outside 0..{world - 1}"))
                continue
            recvs[(peer, rank, tag)].append((node_id, size))
    for key in sorted(set(sends) | set(recvs)):
        src, dst, tag = key
        s_list, r_list = sends.get(key, []), recvs.get(key, [])
        for (s_id, s_size), (r_id, r_size) in zip(s_list, r_list):
            if s_size != r_size:
                findings.append(Finding(src, s_id, "p2p-size-mismatch",
                                        f"send to rank {dst} tag {tag} is {s_size} bytes but its recv "
                                        f"(rank {dst} node {r_id}) expects {r_size}"))
        for s_id, s_size in s_list[len(r_list):]:
            findings.append(Finding(src, s_id, "unmatched-send",
                                    f"send of {s_size} bytes to rank {dst} tag {tag} has no matching recv on rank {dst}"))
        for r_id, r_size in r_list[len(s_list):]:
            findings.append(Finding(dst, r_id, "unmatched-recv",
                                    f"recv of {r_size} bytes from rank {src} tag {tag} has no matching send on rank {src}"))
    return findings


SEVERITIES = (ERROR, WARNING)
