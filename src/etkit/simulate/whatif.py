"""What-if questions: knobs from the command line (``--straggler 3:1.3``) and sweeps of one parameter
(``--sweep bandwidth=100,200,400``) that re-run the simulation per value, tabulate and plot it.

Sweep keys: ``bandwidth`` (GB/s of every dimension; ``bandwidth0``, ``bandwidth1``... one dimension),
``latency`` (ns, every dimension), ``scale-compute``, ``scale-bandwidth``, ``splits``
(``preferred-dataset-splits``), ``active-chunks`` and ``device`` (a preset name).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ..errors import UsageError
from ..generate.devices import get_device
from ..model.job import Job
from .config import Knobs, NetworkConfig, SystemConfig
from .result import SimulationResult

__all__ = ["parse_straggler", "parse_sweep", "SweepPoint", "sweep", "plot_sweep", "apply_setting", "SWEEP_KEYS"]

SWEEP_KEYS = ("bandwidth", "bandwidth<i>", "latency", "scale-compute", "scale-bandwidth", "splits", "active-chunks", "device")


def parse_straggler(text: str) -> tuple[int, float]:
    """``RANK:FACTOR`` (e.g. ``3:1.3`` = rank 3 computes 30% slower)."""
    try:
        rank, factor = text.split(":")
        return int(rank), float(factor)
    except ValueError:
        raise UsageError(f"--straggler {text!r}: expected RANK:FACTOR, e.g. 3:1.3") from None


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """``KEY=v1,v2,...``."""
    key, _, values = text.partition("=")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not key or not items:
        raise UsageError(f"--sweep {text!r}: expected KEY=v1,v2,... with KEY one of {', '.join(SWEEP_KEYS)}")
    return key.strip(), items


def _number(key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise UsageError(f"--sweep {key}: {value!r} is not a number") from None


def apply_setting(key: str, value: str, network: NetworkConfig, system: SystemConfig,
                  knobs: Knobs) -> tuple[NetworkConfig, SystemConfig, Knobs]:
    """The configuration with one sweep setting applied."""
    if key == "device":
        device = get_device(value)
        if knobs.trace_device is None and not system.roofline_enabled:
            raise UsageError("--sweep device needs --trace-device (or a preset naming the trace's device)")
        return network, replace(system, peak_perf_tflops=device.peak_tflops, local_mem_bw_gbps=device.memory_gbps), \
            replace(knobs, device=device)
    if key.startswith("bandwidth"):
        which = key[len("bandwidth"):]
        dims = tuple(replace(d, bandwidth_gbps=_number(key, value)) if not which or int(which) == i else d
                     for i, d in enumerate(network.dims))
        return replace(network, dims=dims), system, knobs
    if key == "latency":
        return replace(network, dims=tuple(replace(d, latency_ns=_number(key, value)) for d in network.dims)), system, knobs
    if key == "scale-compute":
        return network, system, replace(knobs, scale_compute=_number(key, value))
    if key == "scale-bandwidth":
        return network, system, replace(knobs, scale_bandwidth=_number(key, value))
    if key in ("splits", "chunks"):
        return network, replace(system, preferred_dataset_splits=int(_number(key, value))), knobs
    if key == "active-chunks":
        return network, replace(system, active_chunks_per_dimension=int(_number(key, value))), knobs
    raise UsageError(f"--sweep: unknown key {key!r}; keys: {', '.join(SWEEP_KEYS)}")


@dataclass(frozen=True)
class SweepPoint:
    value: str
    makespan_ns: float
    mean_exposed_comm_ns: float
    mean_compute_ns: float


def sweep(job: Job, network: NetworkConfig, system: SystemConfig, knobs: Knobs, key: str,
          values: list[str]) -> list[SweepPoint]:
    """Simulate once per value of ``key``."""
    from . import simulate

    points = []
    for value in values:
        net, sys_cfg, kn = apply_setting(key, value, network, system, knobs)
        result: SimulationResult = simulate(job, net, sys_cfg, kn)
        n = max(len(result.ranks), 1)
        points.append(SweepPoint(value, result.makespan_ns,
                                 sum(f.exposed_comm_ns for f in result.ranks.values()) / n,
                                 sum(f.compute_ns for f in result.ranks.values()) / n))
    return points


def sweep_table(key: str, points: list[SweepPoint]) -> list[str]:
    base = points[0].makespan_ns if points else 0.0
    rows = [f"{key:>16} {'makespan ns':>16} {'speedup':>8} {'exposed comm ns':>16} {'compute ns':>16}"]
    for p in points:
        speed = base / p.makespan_ns if p.makespan_ns else float("nan")
        rows.append(f"{p.value:>16} {p.makespan_ns:>16,.0f} {speed:>8.3f} {p.mean_exposed_comm_ns:>16,.0f} {p.mean_compute_ns:>16,.0f}")
    return rows


def plot_sweep(key: str, points: list[SweepPoint], path: str | os.PathLike[str]) -> None:
    """Makespan and exposed communication against the swept value, as an image (matplotlib, loaded lazily)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..fileio import atomic_output

    labels = [p.value for p in points]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(labels, [p.makespan_ns / 1e6 for p in points], marker="o", label="makespan")
    ax.plot(labels, [p.mean_exposed_comm_ns / 1e6 for p in points], marker="s", label="exposed comm (mean)")
    ax.set_xlabel(key)
    ax.set_ylabel("ms")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fmt = os.path.splitext(str(path))[1].lstrip(".") or "png"
    with atomic_output(path, compress=False) as out:
        fig.savefig(out, format=fmt)
    plt.close(fig)
