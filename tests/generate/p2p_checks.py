"""Cross-rank checks of point-to-point traffic, computed from the raw columns (shared by the generator tests)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from etkit.format.schema import NodeType
from etkit.model import Job


def messages(job: Job, node_type: NodeType) -> Counter:
    """(src, dst, tag, size) of every send (or recv) node, with the rank that holds it checked."""
    out: Counter = Counter()
    for rank, trace in job.traces.items():
        rows = np.flatnonzero(trace.types == node_type)
        for row in rows:
            src, dst = int(trace.comm_src[row]), int(trace.comm_dst[row])
            owner = src if node_type == NodeType.COMM_SEND_NODE else dst
            assert owner == rank, f"rank {rank} holds a {node_type.name} for {src}->{dst}"
            out[(src, dst, int(trace.comm_tag[row]), int(trace.comm_size[row]))] += 1
    return out


def assert_sends_match_recvs(job: Job) -> Counter:
    """Every send has exactly one recv with the same (src, dst, tag, size), and the other way round."""
    sends = messages(job, NodeType.COMM_SEND_NODE)
    recvs = messages(job, NodeType.COMM_RECV_NODE)
    assert sends == recvs, f"unmatched: sends-recvs={sends - recvs}, recvs-sends={recvs - sends}"
    assert all(n == 1 for n in sends.values()), "a (src, dst, tag) key is used twice"
    return sends


def ranks_before_end(job: Job) -> dict[int, set[int]]:
    """For each rank, the ranks with a node that happens before the end of that rank's graph.

    Happens-before = dependency edges within a rank plus send -> matching recv across ranks.
    """
    preds: dict[tuple[int, int], list[tuple[int, int]]] = {}
    recv_of: dict[tuple[int, int, int], tuple[int, int]] = {}
    for rank, trace in job.traces.items():
        for row in range(len(trace)):
            key = (rank, int(trace.ids[row]))
            preds[key] = [(rank, int(d)) for d in trace.deps_of(row)]
            if trace.types[row] == NodeType.COMM_RECV_NODE:
                recv_of[(int(trace.comm_src[row]), rank, int(trace.comm_tag[row]))] = key
    for rank, trace in job.traces.items():
        for row in np.flatnonzero(trace.types == NodeType.COMM_SEND_NODE):
            target = recv_of[(rank, int(trace.comm_dst[row]), int(trace.comm_tag[row]))]
            preds[target].append((rank, int(trace.ids[row])))
    seen_by: dict[int, set[int]] = {}
    for rank, trace in job.traces.items():
        stack = [(rank, int(i)) for i in trace.ids]
        seen: set[tuple[int, int]] = set()
        # Only sinks matter, but walking from every node of the rank gives the same union.
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            stack.extend(preds[node])
        seen_by[rank] = {r for r, _ in seen}
    return seen_by
