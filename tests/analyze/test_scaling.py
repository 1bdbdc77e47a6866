"""Time that grows with N, not N^2 (issue 19 item 4): analyze, timeline, report and graph on N and 4N nodes.

Two shapes that were quadratic: N nodes that all overlap on one track (a lane each: the lanes are found
with heaps of end times and free lanes), and a chain of N nodes linked only by ctrl deps (no timestamps:
the dependency schedule honours ctrl deps, as ASTRA-sim's feeder does, so the chain runs one after another
instead of all at once). The check compares 4N with N (quadratic would be 16x; allowed: under 8x), never
absolute times; each size is timed three times and the fastest kept, the machine being shared: in this thread's CPU time (a
test process may hold other tests' threads, a Dask cluster's, whose CPU the process's time would count), with the
garbage collector paused (its passes would charge the sizes for what the whole process holds; `etkit analyze`
pauses it too).
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest

from etkit.analyze import analyze_job, critical_path
from etkit.executor import SerialExecutor
from etkit.format.attrs import make_attr
from etkit.format.schema import GlobalMetadata, Node, NodeType
from etkit.format.stream import TraceWriter
from etkit.model.job import load_job
from etkit.viz.graph import write_graph
from etkit.viz.report import write_report
from etkit.viz.timeline import write_timeline

#: N per shape (all-overlapping nodes each get a lane and a timeline thread: the heavier shape)
N = {"overlap": 3_000, "ctrl-chain": 10_000}


def _write(path: Path, n: int, shape: str) -> None:
    cpu = make_attr("is_cpu_op", False)
    with TraceWriter(path, GlobalMetadata(version="1.0.0")) as w:
        for i in range(1, n + 1):
            node = Node(id=i, name=f"op{i % 7}", type=NodeType.COMP_NODE, duration_micros=3)
            if shape == "overlap":  # each starts 1 us after the previous and outlasts them all: no nesting
                node.start_time_micros, node.duration_micros = 1000 + i, n + 10
            elif i > 1:
                node.ctrl_deps.append(i - 1)
            node.attr.append(cpu)
            w.write(node)


def _seconds(tmp: Path, n: int, shape: str) -> float:
    path = tmp / f"{shape}{n}.0.et"
    _write(path, n, shape)
    job = load_job([str(path)], executor=SerialExecutor())
    best = float("inf")
    gc.collect()
    gc.disable()  # (the collector's passes cost what the whole test process holds, not what these calls make)
    try:
        for _ in range(3):
            t = time.thread_time()
            analyze_job(job)
            write_timeline(job, tmp / "t.json")
            write_report(job, tmp / "r.html")
            critical = critical_path(job)
            write_graph(job.traces[0], tmp / "g.dot", around=n // 2, depth=2, critical_rows=set(critical.row.tolist()))
            best = min(best, time.thread_time() - t)
    finally:
        gc.enable()
    return best


@pytest.mark.parametrize("shape", ["overlap", "ctrl-chain"])
def test_four_times_the_nodes_is_not_sixteen_times_the_time(tmp_path, shape):
    small, big = _seconds(tmp_path, N[shape], shape), _seconds(tmp_path, 4 * N[shape], shape)
    assert big / small < 8, (small, big)


def test_a_ctrl_chain_runs_one_node_after_another(tmp_path):
    _write(tmp_path / "c.0.et", 100, "ctrl-chain")
    a = analyze_job(load_job([str(tmp_path / "c.0.et")], executor=SerialExecutor()))
    assert a.makespan_ns == 100 * 3000 and len(a.critical_path) == 100
