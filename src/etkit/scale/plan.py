"""What each rank of the scaled job is: its source rank(s), its groups, its peers, what is rescaled.

:func:`make_plan` turns the old :class:`~etkit.scale.layout.GridLayout`, the groups and the asked degree
into a :class:`ScalePlan`:

- **dp / tp** (replicate or merge along the dimension): the new rank at coordinate ``c`` of the scaled
  dimension is a copy of the old rank at ``c mod n`` (its other coordinates unchanged). A group that
  lies across the dimension (a data-parallel group when ``dp`` changes; every rank's group "0") becomes
  the same group over the new positions; a group within one position of it (a tensor-parallel group when
  ``dp`` changes) gets one copy per new position, the copy at the old position keeping its name.
  Point-to-point peers move with their rank. Sizes and compute are rescaled by ``n / m`` where the
  work per rank changes with the degree (see :class:`Rescale`).
- **pp** (merge stages; the new degree divides the old): new stage ``s`` runs old stages
  ``s*k .. s*k+k-1`` on one rank, one after another; messages between them become local hand-offs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import field
from functools import cached_property

import numpy as np

from ..arrays import distinct
from ..errors import OptionError, UsageError
from ..format.schema import CommType
from ..model.groups import WORLD, ProcessGroups
from ..records import record
from .layout import GridLayout

__all__ = ["ScalePlan", "Rescale", "make_plan", "KEEP_MODES"]

KEEP_MODES = ("per-rank-batch", "global-batch")


@record(frozen=True)
class Rescale:
    """Factors applied on a source rank: ``compute`` to COMP nodes (duration, ``num_ops``, ``tensor_size``),
    ``along`` to collectives of groups across the scaled dimension (``ALL_GATHER`` only: its ``comm_size``
    is the per-rank shard, which shrinks as the group grows; a reduce-scatter or all-reduce moves the
    whole buffer), ``across`` to collectives of the other groups (all types), ``p2p`` to sends and
    receives."""

    compute: float = 1.0
    along_gather: float = 1.0
    across: float = 1.0
    p2p: float = 1.0

    @property
    def identity(self) -> bool:
        return self.compute == self.along_gather == self.across == self.p2p == 1.0


def rescale_for(dim: str, old: int, new: int, keep: str) -> Rescale:
    """What changes per rank when ``dim`` goes from ``old`` to ``new`` ways.

    dp with a fixed per-rank batch: nothing but ZeRO's parameter shards (all-gathers across dp); with a
    fixed global batch, each rank gets ``old/new`` of the samples: its compute, its activation messages
    (tensor-parallel collectives, pipeline sends) shrink alike. tp: each rank holds ``old/new`` of every
    weight, so its compute and its gradient collectives (over the other dimensions' groups) shrink; the
    tensor-parallel collectives move whole activations (all-gather: the rank's sequence shard). pp merges
    stages: nothing is rescaled."""
    f = old / new
    if dim == "dp":
        if keep == "global-batch":
            return Rescale(compute=f, along_gather=f, across=f, p2p=f)
        return Rescale(along_gather=f)
    if dim == "tp":
        return Rescale(compute=f, along_gather=f, across=f)
    return Rescale()


@record
class ScalePlan:
    old: GridLayout
    new: GridLayout
    dim: str
    keep: str
    rescale: Rescale
    groups: ProcessGroups  # the new job's groups (comm-groups JSON)
    #: per old group name: "along" (lies across the scaled dimension) or "within"
    placement: dict[str, str] = field(default_factory=dict)
    #: per old group name and new coordinate along the dimension: the new name ("within" groups);
    #: "along" groups keep their name
    copies: dict[str, dict[int, str]] = field(default_factory=dict)
    #: pp merges: old group name -> new name
    merged_names: dict[str, str] = field(default_factory=dict)

    @property
    def merge(self) -> int:
        """How many old pipeline stages one new rank runs (1 unless pp shrinks)."""
        if self.dim != "pp":
            return 1
        return self.old.size("pp") // self.new.size("pp")

    @property
    def axis(self) -> int:
        return self.new.index(self.dim)

    @cached_property
    def _arrays(self) -> tuple[list[int], np.ndarray, list[int], list[int], int]:
        """Per new rank its coordinate along the dimension and its source rank(s); per old rank its
        coordinate along the dimension and its new rank without that coordinate's term; the new stride."""
        a, k = self.axis, self.merge
        old_layout = self.old.with_dim(self.dim)
        new_coords = self.new.coords(np.arange(self.new.world_size, dtype=np.int64))
        along = new_coords[:, a].copy()
        old_strides, new_strides = old_layout.strides(), self.new.strides()
        others = (new_coords * old_strides[None, :]).sum(axis=1) - along * old_strides[a]
        if k > 1:
            sources = others[:, None] + (along[:, None] * k + np.arange(k)[None, :]) * old_strides[a]
        else:
            sources = (others + (along % old_layout.size(self.dim)) * old_strides[a])[:, None]
        old_coords = old_layout.coords(np.arange(old_layout.world_size, dtype=np.int64))
        old_along = old_coords[:, a]
        base = (old_coords * new_strides[None, :]).sum(axis=1) - old_along * new_strides[a]
        if k > 1:
            base = base + (old_along // k) * new_strides[a]
        return along.tolist(), sources, old_along.tolist(), base.tolist(), int(new_strides[a])

    def sources(self, new_rank: int) -> list[int]:
        """The old rank(s) whose nodes new rank ``new_rank`` runs (several: merged pipeline stages)."""
        return self._arrays[1][new_rank].tolist()

    def targets_by_source(self) -> dict[int, list[int]]:
        """For each old rank, the new ranks that copy it (pp merges: keyed by the first stage's rank)."""
        first = self._arrays[1][:, 0]
        order = np.argsort(first, kind="stable")
        keys, starts = np.unique(first[order], return_index=True)
        groups = np.split(order, starts[1:])
        return {int(k): g.tolist() for k, g in zip(keys.tolist(), groups)}

    def pg_name(self, old_name: str, new_rank: int) -> str:
        if self.merge > 1:
            return self.merged_names.get(old_name, old_name)
        if self.placement.get(old_name, "along") == "along":
            return old_name
        return self.copies[old_name][self._arrays[0][new_rank]]

    def peer(self, old_peer: int, new_rank: int) -> int:
        """The new rank of an old rank's point-to-point peer, seen from ``new_rank``."""
        along, sources, old_along, base, stride = self._arrays
        if self.merge > 1:
            return base[old_peer]
        src = int(sources[new_rank, 0])
        if old_along[old_peer] != old_along[src]:
            raise UsageError(f"rank {src} exchanges point-to-point messages with rank {old_peer} along {self.dim}: "
                             f"etkit scale cannot resize a dimension whose ranks send to each other (only pp merges)")
        return base[old_peer] + along[new_rank] * stride

    def collective_factor(self, old_name: str | None, comm_type: int) -> float:
        if self.merge > 1:
            return 1.0
        along = self.placement.get(old_name or WORLD, "along") == "along"
        if along:
            return self.rescale.along_gather if comm_type == CommType.ALL_GATHER else 1.0
        return self.rescale.across


def _fresh_names(groups: ProcessGroups) -> Iterator[str]:
    numeric = [int(n) for n in groups.groups if n.isdigit()]
    start = max(numeric, default=0) + 1
    return iter(str(i) for i in range(start, 1 << 62))


def make_plan(old: GridLayout, groups: ProcessGroups, names: set[str], dim: str, new_size: int,
              keep: str = "per-rank-batch", *, used: set[str] | None = None) -> ScalePlan:
    """The plan of scaling ``dim`` of a job laid out as ``old`` to ``new_size`` ways.

    ``names``: every group name the job uses or lists; each of ``used`` (default: all) must lie across the
    whole scaled dimension or within one position of it; a listed group that no node uses and that does
    neither is left out of the new job."""
    if keep not in KEEP_MODES:
        raise OptionError(f"{{keep}} must be one of {', '.join(KEEP_MODES)}", keep=keep)
    if new_size < 1:
        raise OptionError(f"{{{dim}}} must be at least 1", **{dim: new_size})
    old_full = old.with_dim(dim)
    n = old_full.size(dim)
    new = old_full.resized(dim, new_size)
    a = new.index(dim)
    if dim == "pp" and new_size != n:
        if new_size > n or n % new_size:
            raise UsageError(f"pp {n} -> {new_size}: pipeline stages can only be merged (the new pp must divide {n}); "
                             "splitting a stage needs its layers, which a trace does not record")
    plan = ScalePlan(old, new, dim, keep, rescale_for(dim, n, new_size, keep), ProcessGroups())
    world = old_full.world_size
    fresh = _fresh_names(groups)
    out: dict[str, tuple[int, ...]] = {}
    for name in sorted(names, key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0, s)):
        members = np.asarray(groups.members(name, world) if name in groups.groups or name in ("", WORLD)
                             else (), dtype=np.int64)
        if not members.size:
            continue
        coords = old_full.coords(members)
        if plan.merge > 1:
            coords[:, a] //= plan.merge
            ranks = tuple(sorted(set(new.ranks(coords).tolist())))
            key = ranks
            new_name = next((k for k, v in out.items() if v == key), None)
            if new_name is None:
                new_name = name
                out[name] = ranks
            plan.merged_names[name] = new_name
            continue
        along_values = distinct(coords[:, a])
        rest = np.delete(coords, a, axis=1)
        distinct_rest = np.unique(rest, axis=0) if rest.shape[1] else np.zeros((1, 0), dtype=np.int64)
        if along_values.size == 1:
            plan.placement[name] = "within"
            c0 = int(along_values[0])
            copies: dict[int, str] = {}
            for c in range(new_size):
                if c % n != c0:
                    continue
                label = name if c == c0 else next(fresh)
                moved = coords.copy()
                moved[:, a] = c
                out[label] = tuple(sorted(new.ranks(moved).tolist()))
                copies[c] = label
            plan.copies[name] = copies
        elif along_values.size == n and len(members) == len(distinct_rest) * n:
            plan.placement[name] = "along"
            grid = np.repeat(distinct_rest, new_size, axis=0)
            full = np.insert(grid, a, np.tile(np.arange(new_size), len(distinct_rest)), axis=1)
            if name not in ("", WORLD) or name in groups.groups:
                out[name] = tuple(sorted(new.ranks(full).tolist()))
        elif used is not None and name not in used:
            continue
        else:
            raise UsageError(f"process group {name!r} (ranks {_short(members)}) spans {along_values.size} of the "
                             f"{n} positions along {dim}: etkit scale can only resize groups that lie across the "
                             f"whole dimension or within one position of it")
    if WORLD in out and len(out[WORLD]) == new.world_size and WORLD not in groups.groups:
        del out[WORLD]
    plan.groups = ProcessGroups(out)
    return plan


def _short(members: np.ndarray) -> str:
    text = ", ".join(str(int(m)) for m in members[:8])
    return f"[{text}{', ...' if len(members) > 8 else ''}]"
