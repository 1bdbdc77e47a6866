"""Logical topologies the collective algorithms run on, as ASTRA-sim builds them per rank.

* :class:`LogicalRing`: the members of one ring in order. For the group of every NPU, one ring per
  network dimension: the NPUs that share every other coordinate (ASTRA-sim's homogeneous
  ``RingTopology``); ``oneRing``/``oneDirect``/``oneHalvingDoubling`` use one ring over every NPU
  instead. A smaller group is one ring over its members in the order its comm-group entry lists them,
  marked *local* (ASTRA-sim's ``Dimension::Local``: packet bundles then cost 10 ns, not
  ``endpoint-delay``).
* :class:`BinaryTree`: one of the two trees of ``doubleBinaryTree`` (ASTRA-sim's ``BinaryTree``: a
  full binary tree of ``2**(depth-1) - 1`` nodes under a root with one child, ids given in in-order
  from ``start`` with ``stride``; ``RootMax`` hangs the tree to the root's left, ``RootMin`` to its right).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["LogicalRing", "BinaryTree", "dimension_rings", "DimPlan", "CLOCKWISE", "ANTICLOCKWISE"]

CLOCKWISE, ANTICLOCKWISE = 0, 1


class LogicalRing:
    """Members of one ring (``local``: a group's own ring, not a network dimension's)."""

    __slots__ = ("members", "n", "local", "_index")

    def __init__(self, members: Sequence[int], local: bool = False) -> None:
        self.members = tuple(members)
        self.n = len(self.members)
        self.local = local
        self._index = {m: i for i, m in enumerate(self.members)}

    def index(self, node: int) -> int:
        return self._index[node]

    def receiver(self, node: int, direction: int = CLOCKWISE) -> int:
        i = self._index[node] + (1 if direction == CLOCKWISE else -1)
        return self.members[i % self.n]

    def sender(self, node: int, direction: int = CLOCKWISE) -> int:
        i = self._index[node] + (-1 if direction == CLOCKWISE else 1)
        return self.members[i % self.n]

    def __repr__(self) -> str:
        return f"LogicalRing({list(self.members)}{', local' if self.local else ''})"


class BinaryTree:
    """One tree of a double binary tree over ``total`` ids ``start, start+stride, ...``."""

    __slots__ = ("nodes",)

    def __init__(self, total: int, start: int, stride: int, root_max: bool) -> None:
        depth, tmp = 1, total
        while tmp > 1:
            depth += 1
            tmp //= 2
        # nodes as [id, parent, left, right] lists; the root (id assigned in order like the others) has one child
        root: list = [-1, None, None, None]

        def grow(level: int, parent: list) -> list:
            node = [-1, parent, None, None]
            if level > 1:
                node[2] = grow(level - 1, node)
                node[3] = grow(level - 1, node)
            return node

        if root_max:
            root[2] = grow(depth - 1, root)
        else:
            root[3] = grow(depth - 1, root)
        counter = [start]
        self.nodes: dict[int, list] = {}

        def number(node: list) -> None:  # in-order, as ASTRA-sim's build_tree
            if node[2] is not None:
                number(node[2])
            node[0] = counter[0]
            self.nodes[counter[0]] = node
            counter[0] += stride
            if node[3] is not None:
                number(node[3])

        number(root)

    def node(self, rank: int) -> tuple[int, int, int, str]:
        """(parent, left child, right child, role) of ``rank``; -1 where there is none."""
        node = self.nodes[rank]
        parent = node[1][0] if node[1] is not None else -1
        left = node[2][0] if node[2] is not None else -1
        right = node[3][0] if node[3] is not None else -1
        if node[1] is None:
            role = "root"
        elif node[2] is None and node[3] is None:
            role = "leaf"
        else:
            role = "intermediate"
        return parent, left, right, role


class DimPlan:
    """One dimension of the every-NPU group's logical topology: a ring, or a pair of trees."""

    __slots__ = ("ring", "trees", "size")

    def __init__(self, size: int, ring: LogicalRing | None = None, trees: tuple[BinaryTree, BinaryTree] | None = None) -> None:
        self.size = size
        self.ring = ring
        self.trees = trees


def dimension_rings(rank: int, dims: Sequence[int], impls: Sequence[str]) -> list[DimPlan]:
    """ASTRA-sim's ``GeneralComplexTopology`` for ``rank``: one :class:`DimPlan` per configured
    implementation (a system that lists fewer implementations than the network has dimensions uses
    only the first ones; a ``one*`` implementation is one ring over every NPU and ends the list)."""
    plans: list[DimPlan] = []
    offset = 1
    impls = impls[:len(dims)]  # (ASTRA-sim asserts on more implementations than dimensions)
    last = len(impls) - 1
    for d, impl in enumerate(impls):
        size = dims[d]
        if impl.startswith("one"):
            total = 1
            for n in dims:
                total *= n
            plans.append(DimPlan(total, ring=LogicalRing(range(total))))
            return plans
        if impl == "doubleBinaryTree":
            start = rank % offset if d == last else (rank - rank % (offset * size)) + rank % offset
            plans.append(DimPlan(size, trees=(BinaryTree(size, start, offset, True), BinaryTree(size, start, offset, False))))
        else:
            index = (rank % (offset * size)) // offset
            base = rank - index * offset
            plans.append(DimPlan(size, ring=LogicalRing([base + k * offset for k in range(size)])))
        offset *= size
    return plans
