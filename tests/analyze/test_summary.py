"""info's per-rank summary (counts by type, durations, communication volume) against a plain computation."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from etkit.analyze.summary import _INFO_ATTRS, summarize_batch, summarize_trace
from etkit.format.schema import NodeType
from etkit.model.trace import MISSING, comm_type_name, load_batches, load_trace, load_traces, node_type_name


def _plain(trace) -> tuple[dict, dict, dict]:  # type: ignore[no-untyped-def]
    """by_type, duration_us_by_type and comm, one row at a time in Python integers (no wrap-around)."""
    by_type: Counter[str] = Counter()
    durations: dict[int, int] = {}
    comm: dict[tuple[int, int], list[int]] = {}
    for t, d, ct, size in zip(trace.types.tolist(), trace.duration.tolist(), trace.comm_type.tolist(),
                              trace.comm_size.tolist()):
        durations[t] = durations.get(t, 0) + d
        by_type[t] += 1
        size = 0 if size == MISSING else size
        if t == NodeType.COMM_COLL_NODE:
            key = (0, ct)
        elif t in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
            key = (1, t)
        else:
            continue
        entry = comm.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += size
    labels = {(0, ct): "UNKNOWN" if ct == MISSING else comm_type_name(ct) for _, ct in comm if _ == 0}
    labels.update({(1, NodeType.COMM_SEND_NODE): "SEND", (1, NodeType.COMM_RECV_NODE): "RECV"})
    return ({node_type_name(t): by_type[t] for t in sorted(by_type)},
            {node_type_name(t): durations[t] for t in sorted(durations)},
            {labels[k]: (v[0], v[1]) for k, v in sorted(comm.items())})


@pytest.mark.shared_data
def test_summary_equals_a_plain_count_on_every_upstream_vector(upstream: Path) -> None:
    """Every upstream ET: the per-type counts and exact duration sums (in type order), the communication volume
    per collective kind then SEND and RECV, and the total; also with durations near 2**64 (sums past 64 bits)."""
    files = sorted(p for p in upstream.rglob("*") if p.name.endswith((".et", ".et.gz")))
    assert len(files) > 100
    for path in files[::3]:
        trace = load_trace(path)
        for big in (False, True):
            if big:
                trace.duration = trace.duration | np.uint64(1 << 63)
            got = summarize_trace(trace, 5)
            by_type, durations, comm = _plain(trace)
            assert (got.by_type, got.duration_us_by_type) == (by_type, durations), path
            assert list(got.by_type) == list(by_type) and list(got.duration_us_by_type) == list(durations)
            assert {k: (v.count, v.bytes) for k, v in got.comm.items()} == comm and list(got.comm) == list(comm)
            assert got.duration_us_total == sum(durations.values()) and got.nodes == len(trace)


@pytest.mark.shared_data
def test_batch_summary_equals_the_per_rank_summaries(upstream: Path) -> None:
    """``summarize_batch`` (info's: a batch of files at once, only the columns it counts decoded) gives exactly
    ``summarize_trace`` of each file's full trace, on jobs of several files loaded together and on a file alone;
    also with durations near 2**64 and timestamps whose ends pass 2**64 (exact sums and spans)."""
    jobs = sorted({p.parent for p in upstream.rglob("*.et")})
    assert len(jobs) > 10
    for job in jobs[::2]:
        paths = sorted(str(p) for p in job.glob("*.et"))[:8]
        for big in (False, True):
            for batch in load_batches(paths, names=False, attrs=_INFO_ATTRS, deps=False):
                if big:
                    cols = batch.columns
                    cols.duration |= np.uint64(1 << 63)
                    cols.start[cols.start > 0] |= np.uint64(1 << 63)
                want = []
                for trace in load_traces(batch.paths):
                    if big:
                        trace.duration = trace.duration | np.uint64(1 << 63)
                        trace.start = np.where(trace.start > 0, trace.start | np.uint64(1 << 63), trace.start)
                    want.append(summarize_trace(trace, len(want) + 3))
                got = summarize_batch(batch, list(range(3, 3 + len(batch.paths))))
                assert repr(got) == repr(want), (job, big)
    alone = load_trace(paths[0])
    batch = next(load_batches(paths[:1], names=False, attrs=_INFO_ATTRS, deps=False))
    assert repr(summarize_batch(batch, [0])) == repr([summarize_trace(alone, 0)])
