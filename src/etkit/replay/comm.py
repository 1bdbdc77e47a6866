"""Issuing a trace's communication through ``torch.distributed``, and recording every call.

:class:`Communicator` creates the job's process groups (every rank creates every group, in the same
order, as ``new_group`` requires) and turns a :class:`~etkit.replay.plan.CommSpec` into the matching
asynchronous collective or point-to-point call on buffers lent by the tensor pool. Each call is appended
to :attr:`Communicator.calls` as a :class:`CommCall` (op, bytes, group ranks, peer), which the report
carries and tests count. The same code runs on gloo/CPU and on NCCL/CUDA: only the pool's device differs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ..model.groups import WORLD
from ..records import record
from .plan import CommSpec
from .pool import TensorPool

__all__ = ["Communicator", "CommCall"]

# PyTorch >= 2.12 names the flat-tensor forms *_single and deprecates the old names (with a warning per call).
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@record(frozen=True)
class CommCall:
    """One issued communication: what the instrumentation hook records."""

    iteration: int
    node_id: int
    op: str
    nbytes: int  # bytes of this rank's input buffer (send buffer for p2p), as issued
    group: tuple[int, ...]
    peer: int = -1
    tag: int = 0


class Communicator:
    """Process groups of the job, and async issue of each communication node."""

    def __init__(self, rank: int, world: int, groups: dict[str, tuple[int, ...]], pool: TensorPool) -> None:
        self.rank = rank
        self.world = world
        self.pool = pool
        self.handles: dict[str, Any] = {WORLD: dist.group.WORLD}
        for name, members in groups.items():  # collective call: same order on every rank
            handle = dist.new_group(list(members))
            if rank in members:
                self.handles[name] = handle
        self.calls: list[CommCall] = []
        self.iteration = 0

    def _buffer(self, numel: int, dtype: torch.dtype, lent: list[torch.Tensor]) -> torch.Tensor:
        tensor = self.pool.take((numel,), dtype)
        lent.append(tensor)
        return tensor

    def issue(self, node_id: int, spec: CommSpec) -> tuple[Any, list[torch.Tensor]]:
        """Start the communication of ``spec``; returns its work handle and the buffers it holds."""
        dtype = getattr(torch, spec.dtype)
        group = self.handles.get(spec.group, dist.group.WORLD)
        size = len(spec.members)
        numel = sum(spec.in_splits) if spec.in_splits else -(-spec.nbytes // spec.itemsize)
        if spec.kind in ("REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "ALL_TO_ALL") and not spec.in_splits:
            numel = -(-numel // size) * size  # the buffer must split evenly over the group
        lent: list[torch.Tensor] = []
        work = self._start(spec, group, size, numel, dtype, lent)
        self.calls.append(CommCall(self.iteration, node_id, spec.kind, numel * spec.itemsize, spec.members,
                                   spec.peer if spec.kind in ("SEND", "RECV") else -1, spec.tag))
        return work, lent

    def _start(self, spec: CommSpec, group: Any, size: int, numel: int, dtype: torch.dtype,
               lent: list[torch.Tensor]) -> Any:
        kind = spec.kind
        buf = self._buffer(numel, dtype, lent)
        if kind == "SEND":
            return dist.isend(buf, dst=spec.peer, group=group, tag=spec.tag)
        if kind == "RECV":
            return dist.irecv(buf, src=spec.peer, group=group, tag=spec.tag)
        if kind == "ALL_REDUCE":
            return dist.all_reduce(buf, group=group, async_op=True)
        if kind == "ALL_GATHER":
            out = self._buffer(numel * size, dtype, lent)
            return _ALL_GATHER(out, buf, group=group, async_op=True)
        if kind in ("REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK"):
            out = self._buffer(numel // size, dtype, lent)
            return _REDUCE_SCATTER(out, buf, group=group, async_op=True)
        if kind == "ALL_TO_ALL":
            out = self._buffer(sum(spec.out_splits) if spec.in_splits else numel, dtype, lent)
            return dist.all_to_all_single(out, buf, list(spec.out_splits) or None, list(spec.in_splits) or None,
                                          group=group, async_op=True)
        if kind == "BROADCAST":
            return dist.broadcast(buf, src=spec.peer, group=group, async_op=True)
        if kind == "REDUCE":
            return dist.reduce(buf, dst=spec.peer, group=group, async_op=True)
        if kind == "GATHER":
            parts = [self._buffer(numel, dtype, lent) for _ in range(size)] if self.rank == spec.peer else None
            return dist.gather(buf, parts, dst=spec.peer, group=group, async_op=True)
        if kind == "SCATTER":
            parts = [self._buffer(numel, dtype, lent) for _ in range(size)] if self.rank == spec.peer else None
            return dist.scatter(buf, parts, src=spec.peer, group=group, async_op=True)
        if kind == "BARRIER":
            return dist.barrier(group=group, async_op=True)
        raise ValueError(f"no replay for collective {kind}")

    def release(self, lent: list[torch.Tensor]) -> None:
        for tensor in lent:
            self.pool.give_back(tensor)
