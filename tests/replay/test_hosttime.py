"""Waits for communication inside a host op's own time, on hand-timed traces (closed-form answers)."""

from __future__ import annotations

import numpy as np

from etkit.executor import SerialExecutor
from etkit.format.schema import CommType, NodeType
from etkit.model.job import load_job
from etkit.replay.hosttime import blocked_us

from .builders import node, write_nodes_job

COMP, COLL = NodeType.COMP_NODE, NodeType.COMM_COLL_NODE


def _trace(tmp_path, next_op_start: int):
    # container [1000, next_op_start + 180): mul [1000, 1100), all_reduce on the backend [1050, 1800),
    # add [next_op_start, +180); the container's own time is everything else
    own = (next_op_start + 180 - 1000) - 100 - 180
    nodes = [node(1, "step", COMP, start=1000, dur=own),
             node(2, "aten::mul", COMP, parent=1, deps=(1,), start=1000, dur=100),
             node(3, "c10d::allreduce_", COLL, parent=1, deps=(2,), start=1050, dur=750,
                  comm_type=int(CommType.ALL_REDUCE), comm_size=64),
             node(4, "aten::add", COMP, parent=1, deps=(3,), start=next_op_start, dur=180)]
    return load_job(write_nodes_job(tmp_path, f"h{next_op_start}", {0: nodes}), executor=SerialExecutor()).traces[0]


def test_a_gap_that_ends_right_after_a_collective_is_a_wait(tmp_path):
    trace = _trace(tmp_path, next_op_start=1820)  # resumes 20 us after the all_reduce ended
    blocked = blocked_us(trace)
    assert blocked[0] == 1800 - 1100  # from mul's end to the collective's end
    assert trace.duration[0] - blocked[0] == 20  # what is left to spin: the wake-up
    assert not blocked[1:].any()


def test_a_gap_that_goes_on_long_after_the_collective_is_work(tmp_path):
    trace = _trace(tmp_path, next_op_start=2500)  # 700 us after the end: the thread was busy
    assert not blocked_us(trace).any()


def test_no_timestamps_no_waits(tmp_path):
    nodes = [node(1, "c", COMP, dur=5), node(2, "ar", COLL, deps=(1,), dur=9, comm_type=0, comm_size=64)]
    trace = load_job(write_nodes_job(tmp_path, "n", {0: nodes}), executor=SerialExecutor()).traces[0]
    assert np.array_equal(blocked_us(trace), np.zeros(2))
