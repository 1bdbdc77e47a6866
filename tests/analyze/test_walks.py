"""The analyses' fast paths give exactly what their plain forms give, on real jobs and on the corners: the walks
in C (``etkit.analyze._walks``: topological order, the dependency-bound schedule, the critical path's walk)
against their Python loops, the predecessor choice and the track keys against the sorts they replace."""

from __future__ import annotations

import numpy as np
import pytest

from etkit.analyze import analyze_job, critical_path, timing
from etkit.errors import DependencyError
from etkit.executor import SerialExecutor
from etkit.model.job import load_job

from .test_real_traces import _upstream_jobs

cp = __import__("etkit.analyze.critical_path", fromlist=["KERNEL"])
needs_kernel = pytest.mark.skipif(timing.KERNEL is None, reason="etkit.analyze._walks is not built")


def _without_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "KERNEL", None)
    monkeypatch.setattr(cp, "KERNEL", None)


@needs_kernel
@pytest.mark.shared_data
def test_every_upstream_vector_and_shared_job_analyses_the_same_without_the_kernel(monkeypatch, converted_job,
                                                                                   kineto_job):
    from ..conftest import KINETO_TRACES

    jobs = [load_job(spec, executor=SerialExecutor()) for spec in _upstream_jobs()]  # durations: cross-rank waits
    jobs += [load_job(converted_job(name), executor=SerialExecutor()) for name in ("pp_sendrecv_ws2", "hybrid_dp_tp_ws4")]
    jobs += [kineto_job(name) for name in ("hta-nccl", "hta-diff-test", "hta-cpu-only")]
    with_c = [analyze_job(job).to_json() for job in jobs]
    schedules = [timing.schedule_from_durations(job) for job in jobs]
    _without_kernel(monkeypatch)
    assert [analyze_job(job).to_json() for job in jobs] == with_c
    for job, fast in zip(jobs, schedules):
        plain = timing.schedule_from_durations(job)
        for r, s in fast.ranks.items():
            for a, b in ((s.start_ns, plain.ranks[r].start_ns), (s.end_ns, plain.ranks[r].end_ns),
                         (s.ran, plain.ranks[r].ran)):
                assert a.dtype == b.dtype and np.array_equal(a, b)
    assert len(KINETO_TRACES) > 3


def _chain_job(tmp_path, deps: dict[int, list[int]]):  # type: ignore[no-untyped-def]
    from etkit.format.schema import GlobalMetadata, Node, NodeType
    from etkit.format.stream import write_trace

    nodes = []
    for i in sorted(deps):
        node = Node(id=i, name=f"n{i}", type=NodeType.COMP_NODE, duration_micros=i + 1)
        node.data_deps.extend(deps[i])
        nodes.append(node)
    path = tmp_path / "j.0.et"
    write_trace(path, GlobalMetadata(version="0.0.4"), nodes)
    return load_job(str(path), executor=SerialExecutor())


@needs_kernel
def test_out_of_order_dependencies_and_cycles(tmp_path, monkeypatch):
    ordered = _chain_job(tmp_path, {1: [4], 2: [1, 4], 3: [], 4: [3], 5: [2, 3]})  # not in file order
    fast = timing.topological_order(ordered.traces[0]).tolist()
    path = critical_path(ordered).to_json()
    cyclic = _chain_job(tmp_path, {1: [2], 2: [1], 3: []})
    with pytest.raises(DependencyError, match="2 node"):
        timing.topological_order(cyclic.traces[0])
    _without_kernel(monkeypatch)
    assert timing.topological_order(ordered.traces[0]).tolist() == fast == [2, 3, 0, 1, 4]
    assert critical_path(ordered).to_json() == path
    with pytest.raises(DependencyError, match="2 node"):
        timing.topological_order(cyclic.traces[0])


@needs_kernel
def test_kernel_topo_and_chase_against_the_loops():
    rng = np.random.default_rng(7)
    n = 2000
    src = rng.integers(0, n - 1, 6000)
    dst = np.minimum(src + rng.integers(1, 50, len(src)), n - 1)  # a DAG, edges in random order
    perm = rng.permutation(n)
    src, dst = perm[src], perm[dst]
    indeg = np.bincount(dst, minlength=n)
    by_src = np.argsort(src, kind="stable")
    ptr = np.concatenate(([0], np.cumsum(np.bincount(src, minlength=n))))
    got = np.frombuffer(timing.KERNEL.topo(dst[by_src].astype(np.int64), ptr.astype(np.int64),
                                           indeg.astype(np.int64)), dtype=np.int64)
    assert got.tolist() == timing._kahn(dst[by_src].tolist(), ptr.tolist(), indeg).tolist()
    pred = np.arange(-1, n - 1, dtype=np.int64)  # a chain down to row 0
    start = rng.integers(0, 10**15, n).astype(np.int64)
    stop = np.zeros(n, dtype=np.uint8)
    stop[[700, 300]] = 1
    seen = np.zeros(n, dtype=np.uint8)
    seen[1500] = 1
    rows, limits, row, limit = timing.KERNEL.chase(pred, start, stop, seen, n - 1, 5)
    rows = np.frombuffer(rows, dtype=np.int64)
    assert rows.tolist() == list(range(n - 1, 1500, -1)) and row == 1500
    assert np.frombuffer(limits, dtype=np.int64).tolist() == [5] + start[rows[:-1]].tolist() and limit == start[1501]
    assert seen[1501:].all() and seen.sum() == n - 1500
    with pytest.raises(IndexError):
        timing.KERNEL.chase(np.full(n, n + 5, dtype=np.int64), start, stop, np.zeros(n, dtype=np.uint8), 10, 0)


def test_latest_predecessor_is_the_lexsort_choice():
    rng = np.random.default_rng(3)
    n, m = 500, 4000
    dst, src = rng.integers(0, n, m), rng.integers(0, n, m)
    end = rng.integers(0, 20, n).astype(np.int64)  # many ties
    is_dep = rng.integers(0, 2, m).astype(np.int8)
    parts = [(dst[is_dep == 1], src[is_dep == 1]), (dst[is_dep == 0], src[is_dep == 0])]  # data deps, then the rest
    listed = np.concatenate([np.flatnonzero(is_dep == 1), np.flatnonzero(is_dep == 0)])
    dst, src, is_dep = dst[listed], src[listed], is_dep[listed]
    order = np.lexsort((-np.arange(m), is_dep, end[src], dst))  # the last of each dst: what the walk took
    last = np.ones(m, dtype=bool)
    last[:-1] = dst[order[1:]] != dst[order[:-1]]
    want = np.full(n, -1, dtype=np.int64)
    want[dst[order[last]]] = src[order[last]]
    assert cp._latest(n, parts, end).tolist() == want.tolist()


def test_track_time_keys_order_as_time_codes():
    from etkit.analyze.tracks import _track_time_keys

    rng = np.random.default_rng(5)
    t = np.sort(rng.integers(0, 4, 300))
    s = rng.integers(-10, 10, 300).astype(np.int64) + (1 << 60)
    e = s + rng.integers(0, 5, 300)
    for a, b in ((s, e), (s - (1 << 61), e + (1 << 61))):  # keys by offsets; too wide for them: by time codes
        both = np.concatenate(_track_time_keys(t, a, b))
        codes = np.unique(np.concatenate((a, b)), return_inverse=True)[1]
        want = np.concatenate((t, t)) * (len(both) + 1) + codes
        assert (np.sign(both[:, None] - both[None, :]) == np.sign(want[:, None] - want[None, :])).all()
