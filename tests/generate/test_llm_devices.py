"""Device roofline presets."""

from __future__ import annotations

import numpy as np
import pytest

from etkit.errors import UsageError
from etkit.model.devices import DEVICES, Device, get_device


def test_presets_are_the_public_figures() -> None:
    assert {n: (d.peak_tflops, d.memory_gbps) for n, d in DEVICES.items()} == {
        "A100": (312, 2000), "H100": (989, 3350), "H200": (989, 4800), "MI300X": (1307, 5300)}


def test_roofline_time() -> None:
    h100 = get_device("h100", efficiency=0.5)
    # compute bound: 989e12 FLOP at 989 TFLOP/s = 1 s, halved efficiency -> 2 s
    assert int(h100.time_us(989e12, 1)) == 2_000_000
    # memory bound: 3.35e9 bytes at 3.35 TB/s = 1 ms -> 2 ms
    assert int(h100.time_us(1, 3.35e9)) == 2_000
    assert int(h100.time_us(0, 0)) == 1  # never 0: simulators read 0 as "no duration"
    times = h100.time_us(np.array([989e6, 0]), np.array([0, 3.35e6]))
    assert times.tolist() == [2, 2]


def test_bad_devices() -> None:
    with pytest.raises(UsageError):
        get_device("TPU")
    with pytest.raises(UsageError):
        Device("x", 100, 100, efficiency=0)
