"""What-if questions: knobs from the command line (``--straggler 3:1.3``) and design-space sweeps.

A sweep is one or more axes ``KEY=v1,v2,...`` (``--sweep`` once per key); several axes make a grid, their
cross product, the first axis varying slowest. Each point is the unmodified configuration (what the
command line sets) with the point's settings applied, network and system files first. The job is read
once for the whole sweep (:func:`etkit.simulate.prepare`); with an executor the points run as tasks (on a
Dask cluster each worker reads the files it needs once, not once per point), and each task returns three
figures. Speed-ups are relative to the unmodified configuration (or, when the sweep alone names the
network, to the first point, and the result says so).

Sweep keys (:data:`SWEEP_KEYS`): ``bandwidth`` (GB/s of every dimension; ``bandwidth0``, ``bandwidth1``...
one dimension), ``latency`` (ns, every dimension; ``latency<i>`` one), ``scale-compute``,
``scale-bandwidth``, ``scale-latency``, ``splits`` (``preferred-dataset-splits``), ``active-chunks``,
``device`` (a preset name), ``network`` (files: ASTRA-sim network YAMLs, or the network of etkit system
YAMLs) and ``system`` (files: ASTRA-sim system JSONs, or the system of etkit system YAMLs).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..executor import Executor, SerialExecutor, in_client
from ..model.devices import get_device
from ..progress import Progress
from ..records import record
from .config import Knobs, NetworkConfig, SystemConfig, load_config, load_etkit_system, load_system

__all__ = ["parse_straggler", "parse_sweep", "parse_sweeps", "apply_setting", "plan_sweep", "sweep", "with_device",
           "load_system_file",
           "SweepPoint", "SweepResult", "plot_sweep", "describe_network", "SWEEP_KEYS"]

SWEEP_KEYS = ("bandwidth", "bandwidth<i>", "latency", "latency<i>", "scale-compute", "scale-bandwidth",
              "scale-latency", "splits", "active-chunks", "device", "network", "system")
#: Axes whose values are files (applied before the others, so ``bandwidth`` changes each swept network).
FILE_KEYS = ("network", "system")
_ALIASES = {"chunks": "splits"}

#: One axis: a key and its values, as typed.
Axis = tuple[str, tuple[str, ...]]


def parse_straggler(text: str) -> tuple[int, float]:
    """``RANK:FACTOR`` (e.g. ``3:1.3`` = rank 3 computes 30% slower)."""
    try:
        rank, factor = text.split(":")
        return int(rank), float(factor)
    except ValueError:
        raise UsageError(f"--straggler {text!r}: expected RANK:FACTOR, e.g. 3:1.3") from None


def parse_sweep(text: str) -> Axis:
    """One ``KEY=v1,v2,...``: the key known and every value valid for it (numbers in range, known devices)."""
    key, _, values = text.partition("=")
    key = _ALIASES.get(key.strip(), key.strip())
    items = tuple(v.strip() for v in values.split(",") if v.strip())
    if not key or not items:
        raise UsageError(f"--sweep {text!r}: expected KEY=v1,v2,... with KEY one of {', '.join(SWEEP_KEYS)}")
    kind = _kind(key)
    for value in items:
        _check_value(key, kind, value)
    if len(set(items)) != len(items):
        raise UsageError(f"--sweep {key}: a value is given twice ({', '.join(items)})")
    return key, items


def parse_sweeps(texts: Sequence[str]) -> list[Axis]:
    """Every ``--sweep`` of a command line; a key given twice is an error (several keys make a grid)."""
    axes = [parse_sweep(t) for t in texts]
    seen: set[str] = set()
    for key, _ in axes:
        if key in seen:
            raise UsageError(f"--sweep {key} is given twice: give each key once (several keys make a grid)")
        seen.add(key)
    return axes


def _kind(key: str) -> str:
    """The kind of value ``key`` takes; an unknown key is a one-line error listing the known ones."""
    base = key.rstrip("0123456789")
    if base in ("bandwidth", "latency") and (base == key or key[len(base):].isdigit()):
        return "positive" if base == "bandwidth" else "non-negative"
    kinds = {"scale-compute": "positive", "scale-bandwidth": "positive", "scale-latency": "non-negative",
             "splits": "count", "active-chunks": "count", "device": "device", "network": "file", "system": "file"}
    if key not in kinds:
        raise UsageError(f"--sweep: unknown key {key!r}; keys: {', '.join(SWEEP_KEYS)}")
    return kinds[key]


def _check_value(key: str, kind: str, value: str) -> None:
    if kind == "device":
        get_device(value)
        return
    if kind == "file":
        if not Path(value).is_file():
            raise UsageError(f"--sweep {key}: {value}: no such file")
        return
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    wanted = {"positive": "a number above 0", "non-negative": "a number of at least 0",
              "count": "a whole number of at least 1"}[kind]
    ok = math.isfinite(number) and (number > 0 if kind == "positive" else number >= 0)
    if kind == "count":
        ok = ok and number >= 1 and number.is_integer()
    if not ok:
        raise UsageError(f"--sweep {key}: {value!r} is not {wanted}")


def _check_dimension(key: str, network: NetworkConfig) -> None:
    """``bandwidth<i>`` / ``latency<i>`` name a dimension the network has."""
    base = key.rstrip("0123456789")
    if base == key or base not in ("bandwidth", "latency"):
        return
    n = len(network.dims)
    if int(key[len(base):]) >= n:
        valid = ", ".join([base] + [f"{base}{i}" for i in range(n)])
        raise UsageError(f"--sweep {key}: the network ({network.source}) has {n} dimension{'s' if n != 1 else ''}; "
                         f"valid keys: {valid}")


def apply_setting(key: str, value: str, network: NetworkConfig, system: SystemConfig,
                  knobs: Knobs) -> tuple[NetworkConfig, SystemConfig, Knobs]:
    """The configuration with one sweep setting applied (values as :func:`parse_sweep` checked them)."""
    kind = _kind(key)
    _check_value(key, kind, value)
    if key == "network":
        return load_config(value)[0], system, knobs
    if key == "system":
        return network, with_device(load_system_file(value), knobs), knobs
    if key == "device":
        device = get_device(value)
        if knobs.trace_device is None and not system.roofline_enabled:
            raise UsageError("--sweep device needs --trace-device (or a preset naming the trace's device)")
        return network, with_device(system, replace(knobs, device=device)), replace(knobs, device=device)
    base = key.rstrip("0123456789")
    if base in ("bandwidth", "latency"):
        _check_dimension(key, network)
        which = key[len(base):]
        field = "bandwidth_gbps" if base == "bandwidth" else "latency_ns"
        dims = tuple(replace(d, **{field: float(value)}) if not which or int(which) == i else d  # type: ignore[arg-type]
                     for i, d in enumerate(network.dims))
        return replace(network, dims=dims), system, knobs
    if key.startswith("scale-"):
        return network, system, replace(knobs, **{key.replace("-", "_"): float(value)})  # type: ignore[arg-type]
    if key == "splits":
        return network, replace(system, preferred_dataset_splits=int(float(value))), knobs
    return network, replace(system, active_chunks_per_dimension=int(float(value))), knobs  # active-chunks


def load_system_file(path: str | os.PathLike[str]) -> SystemConfig:
    """A system alone: an ASTRA-sim system JSON, or the ``system`` part of an etkit system YAML."""
    return load_system(path) if Path(path).suffix == ".json" else load_etkit_system(path)[1]  # type: ignore[arg-type]


def with_device(system: SystemConfig, knobs: Knobs) -> SystemConfig:
    """``system`` with the swapped device's peak and memory bandwidth (what ``--device`` does)."""
    if knobs.device is None:
        return system
    return replace(system, peak_perf_tflops=knobs.device.peak_tflops, local_mem_bw_gbps=knobs.device.memory_gbps)


@record(frozen=True)
class PointConfig:
    """One point of a sweep: its settings and the configuration they make."""

    settings: tuple[tuple[str, str], ...]
    network: NetworkConfig
    system: SystemConfig
    knobs: Knobs


def plan_sweep(axes: Sequence[Axis], network: NetworkConfig | None, system: SystemConfig, knobs: Knobs) -> list[PointConfig]:
    """Every point of the grid of ``axes`` (cross product, first axis slowest), checked before anything runs.

    ``network`` is the unmodified one (None when the ``network`` axis alone gives it)."""
    if network is None and "network" not in {k for k, _ in axes}:
        raise UsageError("give a network (--network, --preset) or sweep over network files (--sweep network=A.yml,B.yml)")
    order = sorted(range(len(axes)), key=lambda i: axes[i][0] not in FILE_KEYS)  # file axes apply first
    points = []
    for combo in itertools.product(*(values for _, values in axes)):
        net, sys_cfg, kn = network, system, knobs
        for i in order:
            net, sys_cfg, kn = apply_setting(axes[i][0], combo[i], net, sys_cfg, kn)  # type: ignore[arg-type]
        points.append(PointConfig(tuple((axes[i][0], combo[i]) for i in range(len(axes))), net, sys_cfg, kn))  # type: ignore[arg-type]
    return points


@record(frozen=True)
class SweepPoint:
    """One simulated point: its settings, what it ran on, and its figures."""

    settings: tuple[tuple[str, str], ...]
    network: str
    system: str
    makespan_ns: float
    mean_exposed_comm_ns: float
    mean_compute_ns: float
    speedup: float = math.nan  # the baseline's makespan over this one's

    @property
    def value(self) -> str:
        """The settings' values, comma-joined (one axis: its value)."""
        return ",".join(v for _, v in self.settings)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["settings"] = dict(self.settings)
        out["speedup"] = None if math.isnan(self.speedup) else self.speedup
        return out


@record
class SweepResult:
    """Every point of a sweep and the baseline its speed-ups are relative to."""

    axes: list[Axis]
    points: list[SweepPoint]
    baseline: SweepPoint
    #: "unmodified": the configuration without any sweep setting; "first point": no network was given
    baseline_kind: str
    network: str  # the unmodified configuration's network, described (or "swept")
    system: str

    def table(self) -> list[str]:
        widths = [max(16, len(key), *(len(v) for v in values)) for key, values in self.axes]
        rows = [f"network: {self.network}", f"system: {self.system}",
                f"speed-up relative to {self._baseline_text()}: makespan {self.baseline.makespan_ns:,.0f} ns",
                " ".join(f"{key:>{w}}" for (key, _), w in zip(self.axes, widths))
                + f" {'makespan ns':>16} {'speedup':>8} {'exposed comm ns':>16} {'compute ns':>16}"]
        for p in self.points:
            cells = " ".join(f"{v:>{w}}" for (_, v), w in zip(p.settings, widths))
            rows.append(f"{cells} {p.makespan_ns:>16,.0f} {p.speedup:>8.3f} {p.mean_exposed_comm_ns:>16,.0f} "
                        f"{p.mean_compute_ns:>16,.0f}")
        return rows

    def _baseline_text(self) -> str:
        if self.baseline_kind == "unmodified":
            return "the unmodified system"
        return "the first point (" + ", ".join(f"{k}={v}" for k, v in self.baseline.settings) + "; no --network given)"

    def to_json(self) -> dict[str, Any]:
        return {"sweep": {key: list(values) for key, values in self.axes}, "network": self.network,
                "system": self.system, "baseline_kind": self.baseline_kind, "baseline": self.baseline.to_json(),
                "points": [p.to_json() for p in self.points]}


def describe_network(network: NetworkConfig) -> str:
    """``source (Switch 8 x 900 GB/s 500 ns, Switch 16 x 50 GB/s 1000 ns)``: what a sweep ran on."""
    dims = ", ".join(f"{d.topology} {d.npus} x {d.bandwidth_gbps:g} GB/s {d.latency_ns:g} ns" for d in network.dims)
    return f"{network.source} ({dims})"


def sweep(job: Any, network: NetworkConfig | None, system: SystemConfig, knobs: Knobs, axes: Sequence[Axis], *,
          comm_groups: str | os.PathLike[str] | None = None, executor: Executor | None = None,
          quiet: bool = True) -> SweepResult:
    """Simulate every point of the grid of ``axes`` (see the module docstring) and the unmodified system.

    ``job`` is a :class:`~etkit.simulate.PreparedJob` or anything :func:`etkit.simulate.prepare` takes;
    it is read once (shapes through ``executor``). The points run through ``executor`` (default: in this
    process); a job held in memory runs its points in this machine's pool, never through a cluster.
    """
    from . import PreparedJob, prepare

    axes = [(k, tuple(v)) for k, v in axes]
    points = plan_sweep(axes, network, system, knobs)  # every setting checked before the job is read
    prepared = job if isinstance(job, PreparedJob) else prepare(job, comm_groups=comm_groups, executor=executor)
    world = prepared.world_size
    base = PointConfig((), network, system, knobs) if network is not None else None
    same = [i for i, c in enumerate(points) if base is not None and (c.network, c.system, c.knobs) == (network, system, knobs)]
    configs = points + ([base] if base is not None and not same else [])
    figures = _run(prepared, configs, executor, quiet)
    results = [SweepPoint(c.settings, c.network.source, c.system.source, *f) for c, f in zip(configs, figures)]
    baseline = results[-1] if base is not None and not same else results[same[0] if same else 0]
    baseline = replace(baseline, settings=() if base is not None else baseline.settings, speedup=1.0)
    done = [replace(p, speedup=baseline.makespan_ns / p.makespan_ns if p.makespan_ns else math.nan)
            for p in results[:len(points)]]
    swept = {k for k, _ in axes}
    net_text = describe_network(network.with_npus(world)) if network is not None else "none given"
    return SweepResult(axes, done, baseline, "unmodified" if base is not None else "first point",
                       f"swept (the network column); unmodified: {net_text}" if "network" in swept else net_text,
                       f"swept (the system column); unmodified: {system.source}" if "system" in swept else system.source)


def _run(prepared: Any, configs: list[PointConfig], executor: Executor | None, quiet: bool) -> list[tuple[float, float, float]]:
    """Figures of every configuration: in this process, or one executor task per point."""
    if prepared.traces is not None:  # a job in memory: its traces stay on this machine
        executor = in_client(executor) if executor is not None else None
    if executor is None or isinstance(executor, SerialExecutor) or len(configs) == 1:
        with Progress(total=len(configs), desc="sweep", quiet=quiet) as bar:
            out = []
            for c in configs:
                out.append(_figures(prepared, c))
                bar.advance()
            return out
    try:
        return executor.map(_point_task, [(prepared, c) for c in configs], desc="sweep")
    finally:
        _HELD.clear()  # tasks that ran in this process leave nothing held here


#: The prepared job this process holds between point tasks (a worker reads a job's files once per sweep).
_HELD: list[Any] = []


def _point_task(task: tuple[Any, PointConfig]) -> tuple[float, float, float]:
    """Executor task: one point's figures, on the job this process already holds when it is the same."""
    prepared, config = task
    if _HELD and _HELD[0].identity == prepared.identity and _HELD[0].groups == prepared.groups:
        prepared = _HELD[0]
    elif prepared.traces is None:
        _HELD[:] = [prepared]
    return _figures(prepared, config)


def _figures(prepared: Any, config: PointConfig) -> tuple[float, float, float]:
    """Makespan, mean exposed communication and mean compute of one point."""
    from . import simulate

    result = simulate(prepared, config.network, config.system, config.knobs)
    n = max(len(result.ranks), 1)
    return (result.makespan_ns, sum(f.exposed_comm_ns for f in result.ranks.values()) / n,
            sum(f.compute_ns for f in result.ranks.values()) / n)


def plot_sweep(result: SweepResult, path: str | os.PathLike[str]) -> None:
    """Makespan against the first axis, one line per combination of the others (matplotlib, loaded lazily);
    one axis also draws the mean exposed communication."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..fileio import atomic_output

    first, values = result.axes[0]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    groups: dict[tuple[tuple[str, str], ...], list[SweepPoint]] = {}
    for p in result.points:
        groups.setdefault(p.settings[1:], []).append(p)
    labels = [_label(v) for v in values]
    for rest, pts in groups.items():
        name = ", ".join(f"{k}={_label(v)}" for k, v in rest)
        ax.plot(labels, [p.makespan_ns / 1e6 for p in pts], marker="o", label=f"makespan {name}".strip())
        if len(result.axes) == 1:
            ax.plot(labels, [p.mean_exposed_comm_ns / 1e6 for p in pts], marker="s", label="exposed comm (mean)")
    ax.axhline(result.baseline.makespan_ns / 1e6, color="grey", linestyle=":", linewidth=1, label="baseline")
    ax.set_xlabel(first)
    ax.set_ylabel("ms")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fmt = os.path.splitext(str(path))[1].lstrip(".") or "png"
    with atomic_output(path, compress=False) as out:
        fig.savefig(out, format=fmt)
    plt.close(fig)


def _label(value: str) -> str:
    """A file value by its name, anything else as typed."""
    return Path(value).name if os.sep in value else value
