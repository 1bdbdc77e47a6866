"""A pool of reusable tensors, so that replaying a long trace does not allocate (and exhaust) memory.

Replayed operators get their inputs from the pool by (shape, dtype, device). A tensor is lent to one
operator (or one in-flight collective) at a time and comes back afterwards; the pool keeps at most
``max_bytes`` of idle tensors and drops the least recently used ones beyond that. Values do not matter
for timing, but they must not make ops fail: floating tensors hold ones (no NaN from log/sqrt/div),
integer and bool tensors hold zeros (always a valid index).
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from ..records import record

__all__ = ["TensorPool", "PoolStats"]

Key = tuple[tuple[int, ...], torch.dtype]


@record
class PoolStats:
    allocations: int = 0
    reuses: int = 0
    allocated_bytes: int = 0
    peak_idle_bytes: int = 0


class TensorPool:
    """Lend and take back tensors of a given shape and dtype on one device (hot path: keep it lean)."""

    def __init__(self, device: torch.device | str = "cpu", *, max_bytes: int = 1 << 30) -> None:
        self.device = torch.device(device)
        self.max_bytes = max_bytes
        self._idle: OrderedDict[int, tuple[Key, int, torch.Tensor]] = OrderedDict()  # LRU order
        self._by_key: dict[Key, list[torch.Tensor]] = {}
        self._idle_bytes = 0
        self.stats = PoolStats()

    def take(self, shape: tuple[int, ...] | list[int], dtype: torch.dtype) -> torch.Tensor:
        """A tensor of ``shape`` and ``dtype`` that nobody else holds until it is given back."""
        key: Key = (tuple(shape), dtype)
        stack = self._by_key.get(key)
        if stack:
            tensor = stack.pop()
            self._idle_bytes -= self._idle.pop(id(tensor))[1]
            self.stats.reuses += 1
            return tensor
        tensor = _fresh(key[0], dtype, self.device)
        self.stats.allocations += 1
        self.stats.allocated_bytes += tensor.nbytes
        return tensor

    def give_back(self, tensor: torch.Tensor, shape: tuple[int, ...] | list[int] | None = None) -> None:
        """Return ``tensor``; one whose shape or layout an op changed in place (``resize_``) is dropped."""
        size = tensor.shape  # torch.Size is a tuple: usable as the key directly
        if (shape is not None and size != tuple(shape)) or not tensor.is_contiguous():
            return
        handle = id(tensor)
        if handle in self._idle:
            return
        key: Key = (size, tensor.dtype)
        nbytes = tensor.nbytes
        self._idle[handle] = (key, nbytes, tensor)
        self._by_key.setdefault(key, []).append(tensor)
        self._idle_bytes += nbytes
        if self._idle_bytes > self.max_bytes:
            self._evict()
        if self._idle_bytes > self.stats.peak_idle_bytes:
            self.stats.peak_idle_bytes = self._idle_bytes

    def _evict(self) -> None:
        while self._idle_bytes > self.max_bytes and self._idle:
            _, (key, nbytes, tensor) = self._idle.popitem(last=False)
            self._by_key[key].remove(tensor)
            self._idle_bytes -= nbytes

    @property
    def idle_bytes(self) -> int:
        return self._idle_bytes


def _fresh(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if dtype.is_floating_point or dtype.is_complex:
        return torch.ones(shape, dtype=dtype, device=device)
    return torch.zeros(shape, dtype=dtype, device=device)
