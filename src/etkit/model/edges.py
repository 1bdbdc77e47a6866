"""A trace's dependencies as rows, with named ends, and the ctrl-dep parent (the caller in converted traces).

Every dependency ``d`` that node ``c`` lists (in ``data_deps`` or ``ctrl_deps``) is one edge: ``parent`` is
the row of node ``d`` (the one depended on, which runs first), ``child`` the row of ``c`` (the one that lists
it). :func:`edges` gives them all, in list order (data deps, then ctrl deps); ``parent`` is -1 where ``d``
names no node of the trace.
"""

from __future__ import annotations

import numpy as np

from ..records import record
from .trace import Trace

__all__ = ["Edges", "edges", "ctrl_parent", "DEP_KINDS"]

#: Which dependency lists: "data", "ctrl", or "both" (data then ctrl: what ASTRA-sim's feeder v3 honours).
DEP_KINDS = ("data", "ctrl", "both")


@record(frozen=True)
class Edges:
    """Dependency edges of one trace, one entry per listed dependency (see the module docstring)."""

    parent: np.ndarray  # int64 row of the node depended on; -1: the id names no node of the trace
    child: np.ndarray  # int64 row of the node that lists the dependency
    ids: np.ndarray  # the dependency's id as listed (uint64)

    def __len__(self) -> int:
        return len(self.child)

    def resolved(self, *, self_loops: bool = False) -> Edges:
        """The edges whose parent is a node of the trace (and is not the child itself, unless ``self_loops``)."""
        keep = self.parent >= 0
        if not self_loops:
            keep &= self.parent != self.child
        return Edges(self.parent[keep], self.child[keep], self.ids[keep])


def edges(trace: Trace, kind: str = "both") -> Edges:
    """The dependency edges of ``trace`` of ``kind`` (:data:`DEP_KINDS`)."""
    if kind == "data":
        return Edges(trace.rows_of(trace.data_deps), trace.edge_sources("data"), trace.data_deps)
    if kind == "ctrl":
        return Edges(trace.rows_of(trace.ctrl_deps), trace.edge_sources("ctrl"), trace.ctrl_deps)
    if kind != "both":
        raise ValueError(f"dependency kind must be one of {DEP_KINDS}, not {kind!r}")
    data, ctrl = edges(trace, "data"), edges(trace, "ctrl")
    return Edges(np.concatenate((data.parent, ctrl.parent)), np.concatenate((data.child, ctrl.child)),
                 np.concatenate((data.ids, ctrl.ids)))


def ctrl_parent(trace: Trace) -> np.ndarray:
    """Row of each node's first ctrl dep (its caller in converted traces), -1 for none or itself."""
    n = len(trace)
    has = np.diff(trace.ctrl_ptr) > 0
    parent = np.full(n, -1, dtype=np.int64)
    first = trace.ctrl_deps[trace.ctrl_ptr[:-1][has]]
    parent[has] = trace.rows_of(first)
    parent[parent == np.arange(n)] = -1
    return parent
