"""Parallel layouts of a training job: how ranks split the work, and the process groups that follow.

A :class:`ParallelLayout` says how many ways the job is split (data ``dp``, tensor ``tp``, pipeline
``pp``, expert ``ep``), and how: Megatron sequence parallelism, ZeRO stage (3 = FSDP), activation
recomputation, pipeline schedule (1F1B or GPipe), gradient bucket size.

Ranks are numbered the Megatron way, tensor-parallel fastest, then data-parallel, then pipeline stage:
``rank = tp_rank + tp * (dp_rank + dp * pp_rank)``. Expert parallelism is carved out of data
parallelism (``ep`` divides ``dp``): the ``ep`` consecutive data-parallel ranks of one tensor/pipeline
position form an expert-parallel group, and ranks holding the same experts form the expert-data-parallel
group that reduces expert gradients.

:func:`build_groups` numbers every process group of a layout (``pg_name`` "1", "2", ...; "0" stays
"every rank", as simulators read it) and :func:`pipeline_order` gives the forward/backward order of
micro-batches on a stage.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..arrays import distinct
from ..errors import UsageError
from ..model.groups import ProcessGroups
from ..records import record

__all__ = [
    "GROUP_KINDS",
    "GroupTable",
    "ParallelLayout",
    "RankCoords",
    "build_groups",
    "pipeline_order",
]

RECOMPUTE_MODES = ("none", "selective", "full")
SCHEDULES = ("1f1b", "gpipe")

#: Process-group kinds, in numbering order: tensor, data, expert, expert-data, tied-embedding.
GROUP_KINDS = ("tp", "dp", "ep", "edp", "emb")


@record(frozen=True)
class ParallelLayout:
    """How a training job is split over ``dp * tp * pp`` ranks, and the memory/time trade-offs it makes.

    ``zero``: 0 = plain data parallel (gradient all-reduce), 1/2 = gradients reduce-scattered and
    parameters all-gathered after the update (ZeRO-1 and -2 differ in memory, not in traffic per step),
    3 = parameters also gathered before every layer's forward and backward (ZeRO-3, FSDP).
    ``recompute``: "none", "selective" (attention core recomputed), "full" (whole layers).
    ``bucket_mb``: gradients are reduced in buckets of at least this many MB (10^6 bytes), launched as
    backward produces them.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    sequence_parallel: bool = False
    zero: int = 0
    recompute: str = "none"
    schedule: str = "1f1b"
    bucket_mb: float = 25.0

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "ep"):
            if getattr(self, name) < 1:
                raise UsageError(f"layout: {name} must be >= 1, got {getattr(self, name)}")
        if self.dp % self.ep:
            raise UsageError(f"layout: expert parallel {self.ep} must divide data parallel {self.dp}")
        if self.sequence_parallel and self.tp == 1:
            raise UsageError("layout: sequence parallelism needs tensor parallelism (tp > 1)")
        if self.zero not in (0, 1, 2, 3):
            raise UsageError(f"layout: ZeRO stage must be 0, 1, 2 or 3, got {self.zero}")
        if self.recompute not in RECOMPUTE_MODES:
            raise UsageError(f"layout: recompute must be one of {', '.join(RECOMPUTE_MODES)}")
        if self.schedule not in SCHEDULES:
            raise UsageError(f"layout: schedule must be one of {', '.join(SCHEDULES)}")
        if self.bucket_mb <= 0:
            raise UsageError("layout: bucket size must be positive")

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def bucket_bytes(self) -> int:
        return int(self.bucket_mb * 1e6)

    def rank_of(self, tp_rank: int, dp_rank: int, pp_rank: int) -> int:
        return tp_rank + self.tp * (dp_rank + self.dp * pp_rank)

    def coords(self, rank: int) -> RankCoords:
        tp_rank = rank % self.tp
        dp_rank = (rank // self.tp) % self.dp
        return RankCoords(tp_rank, dp_rank, rank // (self.tp * self.dp), dp_rank % self.ep, dp_rank // self.ep)

    def stage_ranks(self, stage: int) -> range:
        """Global ranks of pipeline stage ``stage`` (contiguous in Megatron order)."""
        width = self.tp * self.dp
        return range(stage * width, (stage + 1) * width)


@record(frozen=True)
class RankCoords:
    """Position of a rank in each parallel dimension."""

    tp: int
    dp: int
    pp: int
    ep: int
    edp: int


@record(frozen=True)
class GroupTable:
    """Every process group of a layout: ``groups`` for the comm-groups JSON, ``names[kind][rank]`` per rank
    (the group's number, -1 where the rank has no group of that kind)."""

    groups: ProcessGroups
    names: dict[str, np.ndarray]

    def name(self, kind: str, rank: int) -> str:
        """``pg_name`` of the ``kind`` group of ``rank`` ("" when the layout has no such group)."""
        table = self.names.get(kind)
        value = -1 if table is None else int(table[rank])
        return "" if value < 0 else str(value)


def _group_keys(layout: ParallelLayout, kind: str, ranks: np.ndarray) -> np.ndarray | None:
    """For each rank, the index of its ``kind`` group (None when that kind has no group of 2+ ranks)."""
    tp_r = ranks % layout.tp
    dp_r = (ranks // layout.tp) % layout.dp
    pp_r = ranks // (layout.tp * layout.dp)
    ep_r, edp_r = dp_r % layout.ep, dp_r // layout.ep
    edp = layout.dp // layout.ep
    if kind == "tp" and layout.tp > 1:
        return dp_r + layout.dp * pp_r
    if kind == "dp" and layout.dp > 1:
        return tp_r + layout.tp * pp_r
    if kind == "ep" and layout.ep > 1:
        return tp_r + layout.tp * (edp_r + edp * pp_r)
    if kind == "edp" and layout.ep > 1 and edp > 1:
        return tp_r + layout.tp * (ep_r + layout.ep * pp_r)
    if kind == "emb" and layout.pp > 1:
        # First and last stage of one tensor/data position share the tied embedding.
        keys = tp_r + layout.tp * dp_r
        return np.where((pp_r == 0) | (pp_r == layout.pp - 1), keys, -1)
    return None


def build_groups(layout: ParallelLayout, kinds: Iterable[str] = GROUP_KINDS) -> GroupTable:
    """Number the process groups of ``kinds`` that ``layout`` has (groups of one rank are left out).

    Groups get decimal names from "1" in the order of ``GROUP_KINDS``, then by group index; ranks that
    are not in any group of a kind (only the middle stages for "emb") get "".
    """
    ranks = np.arange(layout.world_size, dtype=np.int64)
    wanted = set(kinds)
    groups: dict[str, tuple[int, ...]] = {}
    names: dict[str, np.ndarray] = {}
    next_name = 1
    for kind in GROUP_KINDS:
        if kind not in wanted:
            continue
        keys = _group_keys(layout, kind, ranks)
        if keys is None:
            continue
        used = distinct(keys[keys >= 0])
        label = np.full(int(keys.max()) + 1, -1, dtype=np.int64)
        label[used] = np.arange(next_name, next_name + len(used))
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        for key, name in zip(used.tolist(), label[used].tolist()):
            lo, hi = np.searchsorted(sorted_keys, [key, key + 1])
            groups[str(name)] = tuple(sorted(order[lo:hi].tolist()))
        names[kind] = np.where(keys >= 0, label[np.maximum(keys, 0)], -1)
        next_name += len(used)
    return GroupTable(ProcessGroups(groups), names)


def pipeline_order(stage: int, stages: int, microbatches: int, schedule: str = "1f1b") -> list[tuple[str, int]]:
    """The ``("F"|"B", micro-batch)`` order of forward and backward passes on pipeline ``stage``.

    GPipe runs every forward, then every backward. 1F1B runs ``stages - stage - 1`` warm-up forwards,
    then alternates one forward and one backward, then drains the remaining backwards, so at most
    ``stages - stage`` micro-batches are in flight on a stage.
    """
    m = microbatches
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warmup = min(stages - stage - 1, m)
    order = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        order += [("F", warmup + i), ("B", i)]
    order += [("B", i) for i in range(m - warmup, m)]
    return order
