"""What kind of work each node is: compute, host CPU, communication, memory or other.

Every analysis groups time by these kinds, so the rule lives here once. Range markers
(``ProfilerStep#N``, and the ``record_function`` ranges a profile records as user annotations) nest their ops on their thread's track like any call, but their own time is the
thread between ops (Python, blocking waits), so :func:`time_kinds` makes it "other". A COMP node with
``is_cpu_op`` true is host work ("cpu") on a rank that also has device compute; on a rank whose COMP
nodes all run on the CPU (a CPU-only PyTorch job) host work *is* the compute, so it counts as
"compute" there (the kinds and that rule are :mod:`etkit.model.accounting`'s).
"""

from __future__ import annotations

import numpy as np

from ..format.attrs import PROFILER_CATEGORIES
from ..format.schema import CommType, NodeType
from ..model.accounting import COMM, COMPUTE, CPU, KIND_NAMES, MEMORY, OTHER, host_counts_as_compute
from ..model.steps import STEP_PREFIX
from ..model.trace import Trace

__all__ = ["KIND_NAMES", "COMPUTE", "CPU", "COMM", "MEMORY", "OTHER", "node_kinds", "comm_label", "time_kinds", "annotation_rows"]

_SYNC = PROFILER_CATEGORIES.index("cuda_sync")
_USER_ANNOTATION = PROFILER_CATEGORIES.index("user_annotation")
_TYPE_KIND = np.full(16, OTHER, dtype=np.int8)
_TYPE_KIND[NodeType.COMP_NODE] = COMPUTE
_TYPE_KIND[[NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE]] = COMM
_TYPE_KIND[[NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE]] = MEMORY


#: Name prefixes of nodes that only mark a range (the profiler's iteration marker): their own time is
#: the thread between ops (Python, blocking waits), not compute.
ANNOTATION_PREFIXES = (STEP_PREFIX,)


def annotation_rows(trace: Trace) -> np.ndarray:
    """Boolean per row: the node is a range marker: a ``ProfilerStep#3``, or a compute node a profile records
    as a user annotation (``record_function`` ranges, ``cat`` user_annotation)."""
    marks = np.fromiter((s.startswith(ANNOTATION_PREFIXES) for s in trace.strings), dtype=bool, count=len(trace.strings))
    out = marks[trace.name_idx] if marks.any() else np.zeros(len(trace), dtype=bool)
    return out | ((trace.cat == _USER_ANNOTATION) & (trace.types == NodeType.COMP_NODE))


def node_kinds(trace: Trace) -> np.ndarray:
    """Kind code (``COMPUTE`` ... ``OTHER``) of every row, as int8."""
    types = trace.types
    kinds = _TYPE_KIND[np.clip(types, 0, len(_TYPE_KIND) - 1)].copy()
    kinds[(types < 0) | (types >= len(_TYPE_KIND))] = OTHER
    kinds[(kinds == COMPUTE) & (trace.is_cpu_op == 1)] = CPU
    kinds[trace.cat == _SYNC] = OTHER  # a stream waiting (cuda_sync on a stream) is not compute
    if host_counts_as_compute(kinds):
        kinds[kinds == CPU] = COMPUTE
    return kinds


def time_kinds(trace: Trace, kinds: np.ndarray) -> np.ndarray:
    """``kinds`` for counting time: range markers' own time is not compute (it is "other", i.e. idle)."""
    marks = annotation_rows(trace)
    if not marks.any():
        return kinds
    out = kinds.copy()
    out[marks] = OTHER
    return out


def comm_label(node_type: int, comm_type: int) -> str:
    """``ALL_REDUCE`` ... for collectives, ``SEND`` / ``RECV`` for point-to-point nodes."""
    if node_type == NodeType.COMM_SEND_NODE:
        return "SEND"
    if node_type == NodeType.COMM_RECV_NODE:
        return "RECV"
    if comm_type < 0:
        return "UNKNOWN"
    try:
        return CommType(comm_type).name
    except ValueError:
        return f"UNKNOWN({comm_type})"

