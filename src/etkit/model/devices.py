"""Device models: how long a compute node takes on an accelerator (the generators' durations, the
simulator's device swap ``--device``/``--trace-device``).

A device is a roofline: peak dense throughput, memory bandwidth and an efficiency factor (the fraction of
the roofline real kernels reach). A node that does ``flops`` operations and touches ``nbytes`` bytes takes
``max(flops / peak, nbytes / bandwidth) / efficiency``. Presets carry the public dense bf16 figures of
the SXM parts (``docs/llm-workloads.md``) and their memory capacity (what a serving engine's KV cache
gets: :mod:`etkit.generate.serve`). A leaf of the model layer: producers and consumers both import it.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UsageError
from ..records import record

__all__ = ["Device", "DEVICES", "get_device"]


@record(frozen=True)
class Device:
    """A roofline device model: ``peak_tflops`` (dense, for the training dtype), ``memory_gbps``, ``efficiency``,
    and ``memory_gb`` of device memory (GB = 1e9 bytes, as vendors quote it)."""

    name: str
    peak_tflops: float
    memory_gbps: float
    efficiency: float = 0.5
    memory_gb: float = 80.0

    def __post_init__(self) -> None:
        if not (self.peak_tflops > 0 and self.memory_gbps > 0 and self.memory_gb > 0):
            raise UsageError(f"device {self.name}: peak TFLOP/s, memory GB/s and memory GB must be positive")
        if not 0 < self.efficiency <= 1:
            raise UsageError(f"device {self.name}: efficiency must be in (0, 1], got {self.efficiency}")

    def time_us(self, flops: np.ndarray | float, nbytes: np.ndarray | float) -> np.ndarray:
        """Roofline time in microseconds of each (flops, bytes) pair, at least 1 µs (0 means 'free' to simulators)."""
        compute = np.asarray(flops, dtype=np.float64) / (self.peak_tflops * 1e6)   # TFLOP/s = 1e6 FLOP/µs
        memory = np.asarray(nbytes, dtype=np.float64) / (self.memory_gbps * 1e3)   # GB/s = 1e3 B/µs
        micros = np.maximum(np.ceil(np.maximum(compute, memory) / self.efficiency), 1)
        if not np.all(micros < 2.0**63):  # also NaN
            from ..errors import ValueRangeError

            worst = float(np.max(np.where(np.isnan(micros), np.inf, micros)))
            raise ValueRangeError(f"device {self.name}: an operation would take {worst:.3g} µs, more than a trace's "
                                  "64-bit durations hold (are the model's dimensions too large?)")
        return micros.astype(np.uint64)

    def duration_us(self, flops: float, nbytes: float) -> int:
        """:meth:`time_us` of one (flops, bytes) pair as a Python int (the same float operations, no numpy)."""
        micros = max(flops / (self.peak_tflops * 1e6), nbytes / (self.memory_gbps * 1e3)) / self.efficiency
        if not 0 <= micros < 2.0**62:  # NaN, negative or past 64 bits: time_us says what is wrong
            return int(self.time_us(flops, nbytes))
        return max(math.ceil(micros), 1)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * 1e9)

    def with_efficiency(self, efficiency: float) -> Device:
        return Device(self.name, self.peak_tflops, self.memory_gbps, efficiency, self.memory_gb)


#: Presets (dense bf16 peak, HBM bandwidth, HBM capacity), efficiency 0.5 by default.
DEVICES: dict[str, Device] = {
    "A100": Device("A100", 312.0, 2000.0, memory_gb=80.0),
    "H100": Device("H100", 989.0, 3350.0, memory_gb=80.0),
    "H200": Device("H200", 989.0, 4800.0, memory_gb=141.0),
    "MI300X": Device("MI300X", 1307.0, 5300.0, memory_gb=192.0),
}


def get_device(name: str | Device, efficiency: float | None = None) -> Device:
    """A preset by name (case-insensitive) or a given :class:`Device`, optionally with another efficiency."""
    if isinstance(name, Device):
        device = name
    else:
        found = next((d for key, d in DEVICES.items() if key.lower() == name.lower()), None)
        if found is None:
            raise UsageError(f"unknown device {name!r}; presets: {', '.join(DEVICES)}")
        device = found
    return device if efficiency is None else device.with_efficiency(efficiency)
