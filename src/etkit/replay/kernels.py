"""Stand-in compute for nodes that carry no operator: a matmul or a memory copy of a calibrated size.

Generated traces describe compute by ``num_ops`` (FLOPs), ``tensor_size`` (bytes touched) or only
``duration_micros``. :class:`KernelBank` measures, once per rank, how long square matmuls and copies take
on the replay device, then serves a kernel that does the recorded work (``num_ops`` -> matmul FLOPs,
``tensor_size`` -> bytes copied) or, failing both, lasts the recorded duration. Buffers come from the
tensor pool, so long traces reuse the same few allocations.
"""

from __future__ import annotations

import math
import time

import torch

from ..records import record
from .pool import TensorPool

__all__ = ["KernelBank", "KernelChoice"]

_MATMUL_SIZES = (16, 32, 64, 128, 256, 512)
_MAX_MATMUL = 2048
_MAX_COPY_BYTES = 64 << 20


@record(frozen=True)
class KernelChoice:
    """What a node runs: ``reps`` times a ``kind`` ("matmul"/"copy") of ``size`` (matrix side or bytes)."""

    kind: str
    size: int
    reps: int
    basis: str  # "num_ops", "tensor_size" or "duration"


class KernelBank:
    """Chooses and runs calibrated stand-in kernels on one device."""

    def __init__(self, pool: TensorPool, *, calibrate: bool = True) -> None:
        self.pool = pool
        self.device = pool.device
        self.dtype = torch.float32
        #: seconds per square matmul of side n, measured on this device.
        self.matmul_s: dict[int, float] = {}
        if calibrate:
            self.calibrate()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def calibrate(self, budget_s: float = 0.05) -> None:
        """Time each calibration matmul size (median of a few runs, bounded by ``budget_s`` per size)."""
        for n in _MATMUL_SIZES:
            a = self.pool.take((n, n), self.dtype)
            b = self.pool.take((n, n), self.dtype)
            out = self.pool.take((n, n), self.dtype)
            samples: list[float] = []
            start_all = time.perf_counter()
            torch.mm(a, b, out=out)  # warm up
            # at least one sample: on a busy host the warm-up alone may use up the budget
            while not samples or (len(samples) < 5 and (time.perf_counter() - start_all) < budget_s):
                self._sync()
                t0 = time.perf_counter()
                torch.mm(a, b, out=out)
                self._sync()
                samples.append(time.perf_counter() - t0)
            for t in (a, b, out):
                self.pool.give_back(t)
            self.matmul_s[n] = sorted(samples)[len(samples) // 2]

    def choose(self, num_ops: int, tensor_size: int, duration_us: int) -> KernelChoice | None:
        """The kernel for a node; ``None`` when the node records no work at all."""
        if num_ops > 0:
            side = max(1, min(_MAX_MATMUL, round((num_ops / 2) ** (1 / 3))))
            reps = max(1, round(num_ops / (2 * side ** 3)))
            return KernelChoice("matmul", side, reps, "num_ops")
        if tensor_size > 0:
            size = min(tensor_size, _MAX_COPY_BYTES)
            return KernelChoice("copy", size, max(1, math.ceil(tensor_size / size)), "tensor_size")
        if duration_us > 0:
            target = duration_us * 1e-6
            # the largest calibrated matmul not longer than the target, repeated to fill it
            side, seconds = min(self.matmul_s.items())
            for n, s in sorted(self.matmul_s.items()):
                if s <= target:
                    side, seconds = n, s
            return KernelChoice("matmul", side, max(1, round(target / max(seconds, 1e-9))), "duration")
        return None

    def run(self, choice: KernelChoice) -> None:
        if choice.kind == "matmul":
            n = choice.size
            a = self.pool.take((n, n), self.dtype)
            b = self.pool.take((n, n), self.dtype)
            out = self.pool.take((n, n), self.dtype)
            try:
                for _ in range(choice.reps):
                    torch.mm(a, b, out=out)
            finally:
                for t in (a, b, out):
                    self.pool.give_back(t)
            return
        src = self.pool.take((choice.size,), torch.uint8)
        dst = self.pool.take((choice.size,), torch.uint8)
        try:
            for _ in range(choice.reps):
                dst.copy_(src)
        finally:
            self.pool.give_back(src)
            self.pool.give_back(dst)
