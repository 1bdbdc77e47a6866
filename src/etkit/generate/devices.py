"""Device models for synthetic workloads: how long a compute node takes on an accelerator.

A device is a roofline: peak dense throughput, memory bandwidth and an efficiency factor (the fraction of
the roofline real kernels reach). A node that does ``flops`` operations and touches ``nbytes`` bytes takes
``max(flops / peak, nbytes / bandwidth) / efficiency``. Presets carry the public dense bf16 figures of
the SXM parts (``docs/llm-workloads.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UsageError

__all__ = ["Device", "DEVICES", "get_device"]


@dataclass(frozen=True)
class Device:
    """A roofline device model: ``peak_tflops`` (dense, for the training dtype), ``memory_gbps``, ``efficiency``."""

    name: str
    peak_tflops: float
    memory_gbps: float
    efficiency: float = 0.5

    def __post_init__(self) -> None:
        if self.peak_tflops <= 0 or self.memory_gbps <= 0:
            raise UsageError(f"device {self.name}: peak TFLOP/s and memory GB/s must be positive")
        if not 0 < self.efficiency <= 1:
            raise UsageError(f"device {self.name}: efficiency must be in (0, 1], got {self.efficiency}")

    def time_us(self, flops: np.ndarray | float, nbytes: np.ndarray | float) -> np.ndarray:
        """Roofline time in microseconds of each (flops, bytes) pair, at least 1 µs (0 means 'free' to simulators)."""
        compute = np.asarray(flops, dtype=np.float64) / (self.peak_tflops * 1e6)   # TFLOP/s = 1e6 FLOP/µs
        memory = np.asarray(nbytes, dtype=np.float64) / (self.memory_gbps * 1e3)   # GB/s = 1e3 B/µs
        return np.maximum(np.ceil(np.maximum(compute, memory) / self.efficiency), 1).astype(np.uint64)

    def with_efficiency(self, efficiency: float) -> Device:
        return Device(self.name, self.peak_tflops, self.memory_gbps, efficiency)


#: Presets (dense bf16 peak, HBM bandwidth), efficiency 0.5 by default.
DEVICES: dict[str, Device] = {
    "A100": Device("A100", 312.0, 2000.0),
    "H100": Device("H100", 989.0, 3350.0),
    "H200": Device("H200", 989.0, 4800.0),
    "MI300X": Device("MI300X", 1307.0, 5300.0),
}


def get_device(name: str | Device, efficiency: float | None = None) -> Device:
    """A preset by name (case-insensitive) or a given :class:`Device`, optionally with another efficiency."""
    if isinstance(name, Device):
        device = name
    else:
        device = next((d for key, d in DEVICES.items() if key.lower() == name.lower()), None)
        if device is None:
            raise UsageError(f"unknown device {name!r}; presets: {', '.join(DEVICES)}")
    return device if efficiency is None else device.with_efficiency(efficiency)
