"""What every rank's file must say so that ASTRA-sim runs the job: decided once, from small per-rank summaries.

Pass 1 (:func:`summarise`, one executor task per rank) streams a rank's columns (never its record bytes)
and returns a :class:`RankSummary`: the rank's validation findings and communication record
(:mod:`etkit.validate`), the groups its METADATA nodes declare, and its node count and largest id.
:func:`plan_export` then decides, from the summaries alone, and refuses with one :class:`ExportError`
naming rank and node whatever ASTRA-sim would refuse or hang on that cannot be fixed:

* **groups**: every communicator used gets an id from 1 (a positive-integer name below 500 is kept);
  the communicator of every NPU of the network becomes ASTRA-sim's default group (``pg_name`` "");
  a one-member group is dropped (ASTRA-sim never finishes a collective of one rank; it moves nothing).
  Ids stay below 2,148 and no two groups with ids 500 apart share two members (ASTRA-sim tags a
  group's packets ``id * 10**6 + n``, an ``int``, and folds tags modulo ``5 * 10**8``);
* **collective sizes**: the k-th collective of a group gets the largest size any member gives it
  (etkit's engine runs the instance at that size; ASTRA-sim matches packets by size and hangs on
  uneven ones, such as an all-to-all with uneven splits);
* **point to point**: each SEND meets the k-th RECV with its (source, destination, tag), as
  ``etkit validate`` pairs them (:func:`etkit.model.matching.match_p2p`; a missing tag is 0, as ASTRA-sim
  reads it); a RECV without ``comm_src`` takes the only rank
  that sends to it; the RECV's size becomes its SEND's, and an empty message one byte (ASTRA-sim
  asserts on empty ones) or, with the network known, as many bytes as its fastest link moves in one ns
  (ASTRA-sim's congestion-aware backend asserts on a transfer that takes no time: +1 ns for such a
  message in both simulators);
* **padding**: a network with more NPUs than the job has ranks gets idle ranks (ASTRA-sim reads one
  file per NPU).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import field, replace

import numpy as np

from ..arrays import distinct
from ..errors import EtkitError
from ..format.schema import NodeType
from ..model.groups import ProcessGroups, communicator_key
from ..model.matching import CommRecord, collectives_by_group, comm_record, match_comm, match_p2p
from ..model.trace import MISSING
from ..records import record
from ..simulate.config import NetworkConfig, SystemConfig
from ..simulate.loader import load_columns
from ..validate.findings import ERROR, Finding, FindingSink
from ..validate.rank_rules import check_trace

__all__ = ["ExportError", "RankSummary", "RankTask", "ExportPlan", "summarise", "plan_export",
           "MAX_GROUP_ID", "TAG_LIMIT"]

#: ASTRA-sim numbers a group's packet streams ``id * 1_000_000 + n`` in an ``int``.
MAX_GROUP_ID = 2147
#: Tags are folded modulo this (``Sys::front_end_sim_send``): one band for messages, one for collectives.
TAG_LIMIT = 500_000_000
_KEEP_BELOW = TAG_LIMIT // 1_000_000

#: Validation rules the export repairs itself (the rest of the errors stop it).
_REPAIRED = frozenset({"duplicate-dep", "comm-on-cpu", "collective-size-mismatch", "comm-missing-size",
                       "p2p-missing-tag", "p2p-missing-peer"})
#: Nodes dropped from every rank (ASTRA-sim aborts on METADATA nodes at the end of a run, and holds
#: INVALID ones for the rank's communication slot, which etkit's engine does not).
DROPPED_TYPES = (int(NodeType.METADATA_NODE), int(NodeType.INVALID_NODE))


class ExportError(EtkitError):
    """The job cannot be written so that ASTRA-sim runs it; the message names rank and node."""


@record
class RankSummary:
    """What pass 1 learns about one rank."""

    rank: int
    path: str
    nodes: int
    max_id: int
    record: CommRecord
    findings: list[Finding]
    groups: ProcessGroups
    mem_rows: int  # MEM_LOAD / MEM_STORE nodes


def summarise(item: tuple[int, str]) -> RankSummary:
    """Executor task: the :class:`RankSummary` of one rank file."""
    rank, path = item
    loaded = load_columns(path)
    trace = loaded.trace
    sink = FindingSink(rank)
    check_trace(trace, sink)
    mem = np.isin(trace.types, (int(NodeType.MEM_LOAD_NODE), int(NodeType.MEM_STORE_NODE)))
    return RankSummary(rank, str(path), len(trace), int(trace.ids.max()) if len(trace) else -1,
                       comm_record(trace, rank), sink.done(), loaded.groups, int(mem.sum()))


@record
class RankTask:
    """What pass 2 needs to write one rank (arrays are indexed like the rank's :class:`CommRecord`)."""

    rank: int
    source: str | None  # None: an idle rank (a network NPU without a trace)
    target: str
    groups: dict[str, tuple[str | None, int]]  # communicator key -> (pg_name in the export or None = dropped, members)
    coll_ids: np.ndarray
    coll_size: np.ndarray
    send_ids: np.ndarray
    send_size: np.ndarray
    recv_ids: np.ndarray
    recv_src: np.ndarray
    recv_size: np.ndarray
    next_id: int  # first id free for the nodes the export adds
    system: SystemConfig = field(default_factory=SystemConfig)  # what etkit's replay of measured traces assumes
    mem_min_bytes: int = 0  # MEM nodes smaller than this grow to it (0: leave them)
    known_system: bool = False  # ``system`` is the one ASTRA-sim gets (else etkit's defaults)


@record
class ExportPlan:
    npus: int
    job_ranks: list[int]
    groups: dict[str, tuple[int, ...]]  # the export's comm groups: id -> members
    renamed: dict[str, str | None]  # source communicator -> export pg_name ("" default, None dropped)
    tasks: list[RankTask]
    changes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _fail(prefix: str, problems: Sequence[str]) -> ExportError:
    more = f" (and {len(problems) - 1} more; `etkit validate` lists the job's problems)" if len(problems) > 1 else ""
    return ExportError(f"{prefix}: cannot export for ASTRA-sim: {problems[0]}{more}")


def _p2p_rule(rule: str) -> bool:
    """Point-to-point findings: :func:`_pair_messages` reports them in ASTRA-sim's words."""
    return rule.startswith(("p2p-", "unmatched-"))


def _where(rank: int, node: int | None) -> str:
    return f"rank {rank}" + (f" node {node}" if node is not None else "")


def plan_export(summaries: Mapping[int, RankSummary], groups: ProcessGroups, *, npus: int | None, source: str,
                target_of, system: SystemConfig | None = None, network: NetworkConfig | None = None) -> ExportPlan:
    """Decide every rank's rewrite (see the module docstring); ``target_of(rank)`` is where a rank is written."""
    job_ranks = sorted(summaries)
    world = job_ranks[-1] + 1 if job_ranks else 0
    npus = npus or world
    if npus < world:
        raise ExportError(f"{source}: the network has {npus} NPUs but the job has {world} ranks")
    records = {r: s.record for r, s in summaries.items()}
    problems = [f"{_where(f.rank, f.node_id)}: [{f.rule}] {f.message}"
                for s in summaries.values() for f in s.findings if f.severity == ERROR and f.rule not in _REPAIRED]
    problems += [f"{_where(f.rank, f.node_id)}: [{f.rule}] {f.message}"
                 for f in match_comm(records, groups, world, instances=False).errors() if f.rule not in _REPAIRED and not _p2p_rule(f.rule)]
    if problems:
        raise _fail(source, problems)
    changes: dict[str, int] = defaultdict(int)
    notes: list[str] = []
    used = _used_communicators(records, groups, world)
    renamed, export_groups = _name_groups(used, npus, source)
    changes["single-rank collectives dropped"] = sum(
        int(np.isin(rec.coll_pg_idx, [i for i, pg in enumerate(rec.pg_table) if renamed[communicator_key(pg)] is None]).sum())
        for rec in records.values())
    coll_size = _equal_sizes(records, used, changes)
    least = math.ceil(max(d.bytes_per_ns for d in network.dims)) if network is not None else 1
    send_size, recv_src, recv_size = _pair_messages(records, world, source, changes, least)
    mem_min = int(np.ceil(system.local_mem_bw_gbps)) if system is not None else 0
    tasks = []
    for rank in range(npus):
        s = summaries.get(rank)
        key_groups = {key: (renamed[key], len(members)) for key, members in used.items()}
        if s is None:
            empty = np.zeros(0, dtype=np.int64)
            tasks.append(RankTask(rank, None, str(target_of(rank)), key_groups, empty, empty, empty, empty, empty,
                                  empty, empty, 0))
            continue
        rec = s.record
        tasks.append(RankTask(rank, s.path, str(target_of(rank)), key_groups, rec.coll_ids, coll_size[rank],
                              rec.send_ids, send_size[rank], rec.recv_ids, recv_src[rank], recv_size[rank],
                              s.max_id + 1, system or SystemConfig(), mem_min, system is not None))
    if npus > world or len(job_ranks) < world:
        changes["idle ranks"] = npus - len(job_ranks)
    if system is not None and system.collective_overhead_ns:
        notes.append("the system's etkit-collective-overhead is etkit's own (ASTRA-sim has no such key): "
                     "left out of the written system JSON")
    return ExportPlan(npus, job_ranks, export_groups, renamed, tasks, dict(changes), notes)


def _used_communicators(records: Mapping[int, CommRecord], groups: ProcessGroups, world: int) -> dict[str, tuple[int, ...]]:
    """Communicator key -> members, for every communicator some collective runs on."""
    used: dict[str, tuple[int, ...]] = {}
    for rec in records.values():
        for pg in rec.pg_table:
            key = communicator_key(pg)
            if key not in used:
                used[key] = tuple(groups.members(key, world))
    return used


def _tag_or_zero(tags: np.ndarray) -> np.ndarray:
    """Tags as ASTRA-sim reads them: a missing ``comm_tag`` is 0."""
    return np.where(tags == MISSING, 0, tags)


def _canonical_id(name: str) -> int | None:
    return int(name) if name.isdigit() and str(int(name)) == name and 1 <= int(name) < _KEEP_BELOW else None


def _name_groups(used: Mapping[str, tuple[int, ...]], npus: int, source: str
                 ) -> tuple[dict[str, str | None], dict[str, tuple[int, ...]]]:
    """Export pg_name of every used communicator, and the export's comm groups (id -> members)."""
    everyone = tuple(range(npus))
    renamed: dict[str, str | None] = {}
    by_id: dict[int, tuple[int, ...]] = {}
    pending = []
    for key, members in sorted(used.items()):
        if len(members) <= 1:
            renamed[key] = None
        elif key == communicator_key(None) and members == everyone:
            renamed[key] = ""
        elif (gid := _canonical_id(key)) is not None:
            by_id[gid] = members
            renamed[key] = key
        else:
            pending.append(key)
    classes: dict[int, list[frozenset[int]]] = defaultdict(list)
    for gid, members in by_id.items():
        classes[gid % _KEEP_BELOW].append(frozenset(members))
    candidate = 1
    for key in pending:
        member_set = frozenset(used[key])
        while candidate in by_id or candidate % _KEEP_BELOW == 0 or \
                any(len(member_set & other) > 1 for other in classes[candidate % _KEEP_BELOW]):
            candidate += 1
        if candidate > MAX_GROUP_ID:
            raise ExportError(f"{source}: cannot export for ASTRA-sim: {len(used)} communicators need more than "
                              f"{MAX_GROUP_ID} group ids (ASTRA-sim numbers group packets id * 10**6 in an int)")
        by_id[candidate] = used[key]
        classes[candidate % _KEEP_BELOW].append(member_set)
        renamed[key] = str(candidate)
    return renamed, {str(gid): by_id[gid] for gid in sorted(by_id)}


def _equal_sizes(records: Mapping[int, CommRecord], used: Mapping[str, tuple[int, ...]], changes: dict[str, int]) -> dict[int, np.ndarray]:
    """Per rank, the size of each collective (record order): the largest of its instance's members."""
    sizes = {r: np.where(rec.coll_size == MISSING, 0, rec.coll_size).astype(np.int64) for r, rec in records.items()}
    rows = {r: collectives_by_group(rec) for r, rec in records.items()}
    for key, members in used.items():
        present = [r for r in members if r in records and key in rows[r]]
        if not present:
            continue
        stacked = np.stack([sizes[r][rows[r][key]] for r in present])  # equal lengths: validation checked
        largest = stacked.max(axis=0)
        changes["collective sizes equalised"] += int((stacked != largest).sum())
        for r in present:
            sizes[r][rows[r][key]] = largest
    return sizes


def _pair_messages(records: Mapping[int, CommRecord], world: int, source: str, changes: dict[str, int], least: int
                   ) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray], dict[int, np.ndarray]]:
    """(SEND sizes, at least ``least`` bytes; RECV sources; RECV sizes) per rank, record order; SENDs meet
    RECVs as the matcher pairs them (the tags as ASTRA-sim reads them), RECVs without a source first taking the
    only rank that sends to them."""
    senders: dict[int, set[int]] = defaultdict(set)
    for rank, rec in records.items():
        for dst in distinct(rec.send_peer[rec.send_peer != MISSING]).tolist():
            senders[int(dst)].add(rank)
    problems: list[str] = []
    send_size = {r: np.where(rec.send_size == MISSING, 0, rec.send_size).astype(np.int64) for r, rec in records.items()}
    for sizes in send_size.values():
        small = sizes < least
        changes[f"messages grown to {least} bytes" if least > 1 else "empty messages grown to 1 byte"] += int(small.sum())
        sizes[small] = least
    tag_of = {r: (_tag_or_zero(rec.send_tag), _tag_or_zero(rec.recv_tag)) for r, rec in records.items()}
    recv_src = {r: rec.recv_peer.astype(np.int64).copy() for r, rec in records.items()}
    recv_size = {r: np.zeros(len(rec.recv_ids), dtype=np.int64) for r, rec in records.items()}
    for rank, rec in records.items():
        for i in np.flatnonzero(rec.send_peer == MISSING)[:5]:
            problems.append(f"{_where(rank, int(rec.send_ids[i]))}: SEND without comm_dst (no destination to send to)")
        bad = np.flatnonzero((rec.send_peer != MISSING) & ((rec.send_peer < 0) | (rec.send_peer >= world)))
        for i in bad[:5]:
            problems.append(f"{_where(rank, int(rec.send_ids[i]))}: SEND to rank {int(rec.send_peer[i])}, "
                            f"which is not in the job (ranks 0..{world - 1})")
        for tags, ids in zip(tag_of[rank], (rec.send_ids, rec.recv_ids)):
            for i in np.flatnonzero((tags < 0) | (tags >= TAG_LIMIT))[:5]:
                problems.append(f"{_where(rank, int(ids[i]))}: comm_tag {int(tags[i])} is outside 0..{TAG_LIMIT - 1} "
                                "(ASTRA-sim folds message tags modulo 5*10**8)")
        unknown = np.flatnonzero(recv_src[rank] == MISSING)
        for i in unknown:
            found = senders.get(rank, set())
            if len(found) != 1:
                who = f"ranks {sorted(found)} send to it" if found else "no rank sends to it"
                problems.append(f"{_where(rank, int(rec.recv_ids[i]))}: RECV without comm_src and {who}: "
                                "give the source rank")
                break
            recv_src[rank][i] = next(iter(found))
        changes["RECV sources derived"] += len(unknown)
        src = recv_src[rank]
        for i in np.flatnonzero((src != MISSING) & ((src < 0) | (src >= world)))[:5]:
            problems.append(f"{_where(rank, int(rec.recv_ids[i]))}: RECV from rank {int(src[i])}, "
                            f"which is not in the job (ranks 0..{world - 1})")
    if problems:
        raise _fail(source, problems)
    as_read = {r: replace(rec, send_tag=tag_of[r][0], recv_tag=tag_of[r][1], recv_peer=recv_src[r])
               for r, rec in records.items()}
    matching = match_p2p(as_read, world)  # no wildcards left: the k-th SEND and RECV of each (source, destination, tag)
    send_at = {r: _index_of_row(rec.send_rows) for r, rec in records.items()}
    recv_at = {r: _index_of_row(rec.recv_rows) for r, rec in records.items()}
    for sr, s_row, rr, r_row in matching.pairs:
        si, ri = send_at[sr][s_row], recv_at[rr][r_row]
        size = int(send_size[sr][si])
        if int(records[rr].recv_size[ri]) != size:
            changes["RECV sizes set to their SEND's"] += 1
        recv_size[rr][ri] = size
    listed: dict[tuple[int, ...], int] = defaultdict(int)  # lone ends named per channel and side
    for rank, row in matching.unmatched:  # channel by channel, its SENDs before its RECVs, in issue order
        is_send = row in send_at[rank]
        i = send_at[rank][row] if is_send else recv_at[rank][row]
        channel = (rank, int(records[rank].send_peer[i]), int(tag_of[rank][0][i])) if is_send else \
            (int(recv_src[rank][i]), rank, int(tag_of[rank][1][i]))
        listed[channel + (is_send,)] += 1
        if listed[channel + (is_send,)] > 5:
            continue
        src, dst, tag = channel
        if is_send:
            problems.append(f"{_where(rank, int(records[rank].send_ids[i]))}: SEND to rank {dst} tag {tag} has no "
                            f"RECV on rank {dst} (ASTRA-sim would wait for it forever)")
        else:
            problems.append(f"{_where(rank, int(records[rank].recv_ids[i]))}: RECV from rank {src} tag {tag} has no "
                            f"SEND on rank {src} (ASTRA-sim would wait for it forever)")
    if problems:
        raise _fail(source, problems)
    return send_size, recv_src, recv_size


def _index_of_row(rows: np.ndarray) -> dict[int, int]:
    """Row -> its position in a :class:`CommRecord`'s arrays."""
    return {row: i for i, row in enumerate(rows.tolist())}

