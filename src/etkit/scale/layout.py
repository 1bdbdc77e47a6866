"""Where each rank of a traced job sits in its parallel layout, read from its process groups and peers.

A job's ranks are a grid: every parallel dimension (tensor ``tp``, data ``dp``, pipeline ``pp``) has a
size and a stride, and ``rank = sum(coord[d] * stride[d])`` (Megatron's order is tensor fastest, then
data, then pipeline: :class:`~etkit.generate.layout.ParallelLayout`). A traced job does not say which is
which, but its communication does: a process group is a line of the grid (its members are evenly spaced
by the stride of the dimension it spans), and pipeline stages exchange point-to-point messages at the
stride of the pipeline dimension. :func:`infer_layout` walks the strides from 1 up: at each, the groups
of that stride give the size of a dimension; where no group has it, the point-to-point peers do (a
pipeline); what is left without any communication is one more dimension. Names: the dimension with the
peers is ``pp``; the others, fastest first, are ``tp`` then ``dp`` (one alone is ``dp``, as in a DDP
job). ``parse_layout("tp2,dp4,pp2")`` states a layout instead when the communication is ambiguous.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from ..errors import OptionError, UsageError
from ..model.groups import WORLD, ProcessGroups
from ..records import record

__all__ = ["Dim", "GridLayout", "infer_layout", "parse_layout", "DIM_NAMES"]

#: Dimension names, in Megatron's rank order (fastest first).
DIM_NAMES = ("tp", "dp", "pp")


@record(frozen=True)
class Dim:
    name: str
    size: int


@record(frozen=True)
class GridLayout:
    """Dimensions fastest first; ``rank = sum(coord[d] * stride[d])`` with ``stride[d]`` the product of the sizes before ``d``."""

    dims: tuple[Dim, ...]

    @property
    def world_size(self) -> int:
        return int(np.prod([d.size for d in self.dims], dtype=np.int64)) if self.dims else 1

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    def size(self, name: str) -> int:
        return next((d.size for d in self.dims if d.name == name), 1)

    def strides(self) -> np.ndarray:
        sizes = np.asarray([d.size for d in self.dims], dtype=np.int64)
        return np.concatenate([[1], np.cumprod(sizes)[:-1]]).astype(np.int64) if len(sizes) else sizes

    def coords(self, ranks: np.ndarray | Iterable[int]) -> np.ndarray:
        """``(len(ranks), len(dims))`` coordinates of ``ranks``."""
        r = np.asarray(list(ranks) if not isinstance(ranks, np.ndarray) else ranks, dtype=np.int64)
        sizes = np.asarray([d.size for d in self.dims], dtype=np.int64)
        return (r[:, None] // self.strides()[None, :]) % sizes[None, :]

    def ranks(self, coords: np.ndarray) -> np.ndarray:
        return (np.asarray(coords, dtype=np.int64) * self.strides()[None, :]).sum(axis=1)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def with_dim(self, name: str) -> GridLayout:
        """This layout with dimension ``name`` added at its Megatron place (size 1) if it has none."""
        if name in self.names:
            return self
        order = {n: i for i, n in enumerate(DIM_NAMES)}
        dims = list(self.dims)
        at = next((i for i, d in enumerate(dims) if order.get(d.name, 99) > order[name]), len(dims))
        dims.insert(at, Dim(name, 1))
        return GridLayout(tuple(dims))

    def resized(self, name: str, size: int) -> GridLayout:
        return GridLayout(tuple(Dim(d.name, size if d.name == name else d.size) for d in self.with_dim(name).dims))

    def text(self) -> str:
        """``tp2,dp4,pp2`` (dimensions of size 1 left out)."""
        return ",".join(f"{d.name}{d.size}" for d in self.dims if d.size > 1) or "one rank"


def parse_layout(text: str, world_size: int | None = None) -> GridLayout:
    """``tp2,dp4,pp2`` (fastest first) as a :class:`GridLayout`; its ranks must be ``world_size``."""
    dims: list[Dim] = []
    for part in text.replace(" ", "").split(","):
        name = part.rstrip("0123456789")
        if name not in DIM_NAMES or name == part:
            raise UsageError(f"layout {text!r}: each part is a dimension (tp, dp, pp) and its size, e.g. tp2,dp4,pp2")
        if name in (d.name for d in dims):
            raise UsageError(f"layout {text!r}: {name} given twice")
        size = int(part[len(name):])
        if size < 1:
            raise UsageError(f"layout {text!r}: {name} must be at least 1")
        dims.append(Dim(name, size))
    layout = GridLayout(tuple(d for d in dims if d.size > 1))
    if world_size is not None and layout.world_size != world_size:
        raise UsageError(f"layout {text!r} has {layout.world_size} ranks, the job {world_size}")
    return layout


def _progression(members: tuple[int, ...]) -> tuple[int, int] | None:
    """(stride, size) when ``members`` are evenly spaced, else None."""
    if len(members) < 2:
        return None
    steps = np.diff(np.asarray(members, dtype=np.int64))
    return (int(steps[0]), len(members)) if (steps == steps[0]).all() and steps[0] > 0 else None


def infer_layout(world_size: int, groups: ProcessGroups, used: Iterable[str],
                 peers: Iterable[tuple[int, int]]) -> GridLayout:
    """The layout the job's groups in ``used`` (pg_names on its nodes) and its point-to-point ``peers`` show.

    Raises :class:`UsageError` naming what does not fit a grid (then ``--layout`` can say it).
    """
    lines: dict[int, set[int]] = {}  # stride -> sizes of the groups spanning it
    world = False  # a group of every rank says nothing about the dimensions, unless it is the only one
    for name in sorted(set(used)):  # in name order: the group an error names is the same every run
        members = _members(groups, name, world_size)
        if len(members) == world_size:
            world = True
            continue
        line = _progression(members)
        if line is not None:
            lines.setdefault(line[0], set()).add(line[1])
    if world and not lines and world_size > 1:
        lines[1] = {world_size}
    distances = {abs(a - b) for a, b in peers if a != b}
    dims: list[tuple[int, int, bool]] = []  # (stride, size, has peers)
    stride = 1
    while stride < world_size:
        sizes = sorted(s for s in lines.get(stride, ()) if world_size % (stride * s) == 0)
        if sizes:
            size = sizes[-1]
        elif stride in distances:
            size = world_size // stride
            multiples = sorted(d for d in distances if d % stride == 0 and d > stride)
            if multiples:  # a second pipeline-like distance: the pipeline ends where it starts
                size = multiples[0] // stride
            if world_size % (stride * size):
                raise UsageError(f"point-to-point peers {stride} ranks apart do not tile {world_size} ranks")
        else:
            bigger = [s for s in sorted(lines) if s > stride and s % stride == 0 and world_size % s == 0]
            bigger += [d for d in sorted(distances) if d > stride and d % stride == 0 and world_size % d == 0]
            size = (min(bigger) if bigger else world_size) // stride
        dims.append((stride, size, stride in distances))
        stride *= size
    if stride != world_size:
        raise OptionError(f"the process groups do not tile the {world_size} ranks into a grid; give {{layout}}", layout=...)
    p2p_dims = [i for i, d in enumerate(dims) if d[2]]
    if len(p2p_dims) > 1:
        raise OptionError("point-to-point messages along more than one dimension; give {layout} (e.g. tp2,dp2,pp2)",
                          layout=...)
    others = [i for i in range(len(dims)) if i not in p2p_dims]
    if len(others) > 2:
        raise UsageError(f"{len(others)} dimensions with collectives (strides "
                         f"{', '.join(str(dims[i][0]) for i in others)}); give --layout")
    names = {p2p_dims[0]: "pp"} if p2p_dims else {}
    for i, name in zip(others, ("tp", "dp") if len(others) == 2 else ("dp",)):
        names[i] = name
    return GridLayout(tuple(Dim(names[i], size) for i, (_, size, _) in enumerate(dims)))


def _members(groups: ProcessGroups, name: str, world_size: int) -> tuple[int, ...]:
    try:
        return groups.members(name, world_size)
    except KeyError:
        if name in ("", WORLD):
            return tuple(range(world_size))
        raise UsageError(f"process group {name!r} is used by nodes but its members are listed nowhere "
                         "(no comm-groups JSON entry, no process_group:init node)") from None


def group_members(groups: ProcessGroups, names: Iterable[str], world_size: int) -> Mapping[str, tuple[int, ...]]:
    """Members of every group in ``names`` (every rank for "0" / ""). A group listed nowhere is an error
    naming the first such group in name order (not in the order of a set, which changes from run to run)."""
    names = list(names)
    try:
        return {name: _members(groups, name, world_size) for name in names}
    except UsageError:
        for name in sorted(names):
            _members(groups, name, world_size)
        raise
