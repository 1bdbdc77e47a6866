"""The dependency-resolving node feeder that simulators and replayers walk a trace with.

:class:`Feeder` streams nodes from an ``.et`` file in windows, links each node to its parents, and
hands out *issuable* nodes (all parents finished) in ascending id order; ``finish(id)`` releases the
node's children. Memory stays bounded by the window (plus forward references, which keep reading
until they resolve), and a dependency that can never resolve raises :class:`DependencyError` that
names the node and the parent it waits for, instead of hanging.

Dependencies are ``data_deps`` by default (what feeder v2 schedules); ``deps="data+ctrl"`` also
honours ``ctrl_deps`` (what feeder v3, used by ASTRA-sim HEAD, does).
"""

from __future__ import annotations

import heapq
import os
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import DependencyError, UsageError
from ..format.stream import open_trace

if TYPE_CHECKING:
    from ..format.schema import Node

__all__ = ["Feeder"]

_DEP_MODES = ("data", "data+ctrl")


class Feeder:
    """``for node in Feeder(path): ...; feeder.finish(node.id)`` walks a trace in dependency order.

    Parameters: ``window`` is how many nodes are loaded ahead at a time; ``deps`` is ``"data"`` or
    ``"data+ctrl"``.
    """

    def __init__(self, path: str | os.PathLike[str], window: int = 65_536, deps: str = "data") -> None:
        if window < 1:
            raise UsageError(f"feeder window must be at least 1, got {window}")
        if deps not in _DEP_MODES:
            raise UsageError(f"feeder deps must be one of {_DEP_MODES}, got {deps!r}")
        self.path = str(path)
        self.window = window
        self._use_ctrl = deps == "data+ctrl"
        self._reader = open_trace(path)
        self.metadata = self._reader.metadata
        self._source: Iterator[Node] | None = iter(self._reader)
        self._nodes: dict[int, Node] = {}  # loaded, not yet finished
        self._waiting_on: dict[int, int] = {}  # node id -> number of unfinished parents
        self._children: dict[int, list[int]] = defaultdict(list)
        self._unseen_parent: dict[int, list[int]] = defaultdict(list)  # parent id not read yet -> children
        self._finished: set[int] = set()
        self._issued: set[int] = set()
        self._ready: list[int] = []
        self._queued: set[int] = set()
        self._read_window()

    # -- loading ------------------------------------------------------------------------------

    def _parents(self, node: Node) -> list[int]:
        parents = list(dict.fromkeys(node.data_deps))
        if self._use_ctrl:
            parents.extend(p for p in dict.fromkeys(node.ctrl_deps) if p not in parents)
        return parents

    def _add(self, node: Node) -> None:
        node_id = node.id
        if node_id in self._nodes or node_id in self._finished:
            raise DependencyError(f"{self.path}: node id {node_id} appears twice")
        self._nodes[node_id] = node
        pending = 0
        for parent in self._parents(node):
            if parent == node_id:
                raise DependencyError(f"{self.path}: node {node_id} depends on itself")
            if parent in self._finished:
                continue
            pending += 1
            if parent in self._nodes:
                self._children[parent].append(node_id)
            else:
                self._unseen_parent[parent].append(node_id)
        self._waiting_on[node_id] = pending
        for child in self._unseen_parent.pop(node_id, ()):
            self._children[node_id].append(child)
        if pending == 0:
            self._push(node_id)

    def _push(self, node_id: int) -> None:
        if node_id not in self._queued:
            self._queued.add(node_id)
            heapq.heappush(self._ready, node_id)

    def _read_window(self) -> None:
        """Load ``window`` more nodes, and keep loading while a loaded node waits for an unread parent."""
        if self._source is None:
            return
        loaded = 0
        for node in self._source:
            self._add(node)
            loaded += 1
            if loaded >= self.window and not self._unseen_parent:
                return
        self._source = None
        self._reader.close()
        if self._unseen_parent:
            parent, children = next(iter(self._unseen_parent.items()))
            raise DependencyError(
                f"{self.path}: node {children[0]} depends on node {parent}, which is not in the file"
                + (f" ({len(self._unseen_parent)} missing parents in all)" if len(self._unseen_parent) > 1 else ""))

    @property
    def exhausted(self) -> bool:
        """True once the whole file has been read."""
        return self._source is None

    # -- the simulator-facing API ---------------------------------------------------------------

    def has_nodes_to_issue(self) -> bool:
        """Whether any node is still loaded-and-unfinished, ready, or unread."""
        return bool(self._nodes) or bool(self._ready) or self._source is not None

    def next_issuable(self) -> Node | None:
        """The ready node with the smallest id (marked issued), or ``None`` if none is ready now.

        Raises :class:`DependencyError` when nothing is ready, nothing issued is still running and
        nodes remain: they wait on each other (a cycle) and would never run.
        """
        if not self._ready and self._source is not None and len(self._nodes) - len(self._issued) < self.window:
            self._read_window()
        if self._ready:
            node_id = heapq.heappop(self._ready)
            self._queued.discard(node_id)
            self._issued.add(node_id)
            return self._nodes[node_id]
        if self._nodes and not self._issued:
            blocked = sorted(self._nodes)[:10]
            raise DependencyError(f"{self.path}: {len(self._nodes)} nodes can never be issued (their dependencies "
                                  f"form a cycle); first blocked ids: {blocked}")
        return None

    def issuable_ids(self) -> list[int]:
        """Ids of all nodes ready now, ascending (nothing is marked issued)."""
        return sorted(self._ready)

    def push_back(self, node_id: int) -> None:
        """Return an issued node to the ready queue (the simulator could not start it yet)."""
        if node_id not in self._issued:
            raise UsageError(f"node {node_id} was not issued")
        self._issued.discard(node_id)
        self._push(node_id)

    def lookup(self, node_id: int) -> Node:
        """A loaded, unfinished node by id."""
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KeyError(f"{self.path}: node {node_id} is not loaded (finished or not read yet)") from None

    def children(self, node_id: int) -> list[int]:
        """Ids of the loaded nodes that wait for ``node_id``, ascending."""
        return sorted(set(self._children.get(node_id, ())))

    def finish(self, node_id: int) -> list[int]:
        """Mark ``node_id`` done; returns the children that became issuable."""
        if node_id not in self._nodes:
            raise UsageError(f"{self.path}: finish({node_id}) for a node that is not loaded or already finished")
        del self._nodes[node_id]
        self._issued.discard(node_id)
        self._waiting_on.pop(node_id, None)
        self._finished.add(node_id)
        released = []
        for child in dict.fromkeys(self._children.pop(node_id, ())):
            left = self._waiting_on[child] - 1
            self._waiting_on[child] = left
            if left == 0:
                self._push(child)
                released.append(child)
        return released

    def __iter__(self) -> Iterator[Node]:
        """Issuable nodes until the trace is done; the caller must ``finish`` each one it receives."""
        while self.has_nodes_to_issue():
            node = self.next_issuable()
            if node is None:
                if self._issued:
                    raise UsageError(f"{self.path}: iterate-and-finish: finish() every node before asking for "
                                     f"the next (still running: {sorted(self._issued)[:5]})")
                return
            yield node

    def close(self) -> None:
        self._reader.close()
        self._source = None

    def __enter__(self) -> Feeder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
