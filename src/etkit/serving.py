"""Serving what-ifs: simulate a serving run and read its serving figures; sweep request rate and the
prefill:decode split, regenerating the run for each point (what serving papers plot: goodput vs rate).

This module composes a producer (:mod:`etkit.generate.serve`) with consumers (:mod:`etkit.simulate`,
:mod:`etkit.analyze.serving`), so it sits above both, like :mod:`etkit.demo`.

- :func:`simulate_serving` (``etkit simulate`` on a serving job): the simulation and its
  :class:`~etkit.analyze.serving.ServingMetrics`.
- :func:`serve_sweep` (``etkit simulate PREFIX --sweep rate=... --sweep split=P:D``): every point of the grid
  regenerated from the settings the job's ETs record, with the scheduler's clock on the swept system, then
  simulated; one task per point through the executor.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .analyze.serving import ServingMetrics, serving_metrics
from .errors import UsageError
from .executor import Executor, SerialExecutor
from .format.stream import open_trace
from .generate.serve import llm_serve_from_settings, settings_of
from .model.job import discover
from .records import record
from .simulate import SimulationResult, simulate
from .simulate.config import Knobs, NetworkConfig, SystemConfig
from .simulate.probe import comm_cost

__all__ = ["ServePoint", "simulate_serving", "serve_sweep", "sweep_table", "plot_goodput", "job_settings",
           "is_serving_job"]


@record(frozen=True)
class ServePoint:
    """One point of a serving sweep: its rate (requests/s), split (prefill:decode GPUs or None) and figures."""

    rate: float | None
    split: tuple[int, int] | None
    metrics: dict
    makespan_ns: float


def job_settings(prefix: str | os.PathLike[str] | Sequence[str]) -> dict | None:
    """The recorded generation settings of a serving job (from its first rank file), or None."""
    files, _ = discover(prefix)
    with open_trace(files[0].path) as reader:
        return settings_of(reader.metadata)


def is_serving_job(prefix: str | os.PathLike[str] | Sequence[str]) -> bool:
    """Whether the job's first rank was written by ``etkit generate llm-serve``."""
    from .format.attrs import attr_value, find_attr

    files, _ = discover(prefix)
    with open_trace(files[0].path) as reader:
        found = find_attr(reader.metadata.attr, "workload")
    return found is not None and attr_value(found) == "llm-serve"


def simulate_serving(prefix: str | os.PathLike[str] | Sequence[str], network: NetworkConfig, system: SystemConfig,
                     knobs: Knobs | None = None, *, slo_ttft_ms: float | None = None,
                     slo_tpot_ms: float | None = None) -> tuple[SimulationResult, ServingMetrics]:
    """Simulate a serving job and compute its per-request figures from the simulated schedule."""
    result = simulate(prefix, network, system, knobs)
    return result, serving_metrics(prefix, result.schedule, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms)


def _point(task: tuple[dict, float | None, tuple[int, int] | None, NetworkConfig, SystemConfig, Knobs | None,
                       float | None, float | None]) -> ServePoint:
    settings, rate, split, network, system, knobs, slo_ttft, slo_tpot = task
    probe_world = _world(settings, split)
    job = llm_serve_from_settings(settings, rate=rate, disaggregated=split,
                                  comm_ns=comm_cost(network, system, probe_world, knobs))
    with tempfile.TemporaryDirectory(prefix="etkit-serve-") as folder:
        prefix = os.path.join(folder, "point")
        job.write(prefix)
        result, metrics = simulate_serving(prefix, network, system, knobs, slo_ttft_ms=slo_ttft, slo_tpot_ms=slo_tpot)
    return ServePoint(rate, split, metrics.to_dict(), result.makespan_ns)


def _world(settings: dict, split: tuple[int, int] | None) -> int:
    per = int(settings["tp"]) * int(settings["pp"])
    chosen = split if split is not None else settings.get("disaggregated")
    return int(sum(chosen)) if chosen else per * int(settings["instances"])


def serve_sweep(prefix: str | os.PathLike[str] | Sequence[str], network: NetworkConfig, system: SystemConfig, *,
                rates: Sequence[float] = (), splits: Sequence[tuple[int, int]] = (), knobs: Knobs | None = None,
                slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
                executor: Executor | None = None) -> list[ServePoint]:
    """Every (rate, split) of the grid: the job regenerated there and simulated (rates x splits points)."""
    settings = job_settings(prefix)
    if settings is None:
        raise UsageError(f"{prefix}: not a serving job with recorded settings (write it with "
                         f"`etkit generate llm-serve`); only such jobs sweep rate= and split=")
    rate_values: list[float | None] = [*rates] or [None]
    split_values: list[tuple[int, int] | None] = [*splits] or [None]
    grid = list(itertools.product(rate_values, split_values))
    tasks = [(settings, rate, split, network, system, knobs, slo_ttft_ms, slo_tpot_ms) for rate, split in grid]
    return (executor or SerialExecutor()).map(_point, tasks, desc="serving sweep")


def sweep_table(points: Sequence[ServePoint]) -> list[str]:
    """One line per point: rate, split, TTFT/TPOT p50/p99, throughput, goodput and SLO attainment."""
    head = (f"{'rate/s':>8} {'split':>9} {'TTFT p50':>10} {'TTFT p99':>10} {'TPOT p50':>9} {'TPOT p99':>9} "
            f"{'tokens/s':>10} {'goodput/s':>10} {'SLO met':>8}")
    rows = [head, f"{'':>8} {'P:D GPUs':>9} {'(ms)':>10} {'(ms)':>10} {'(ms)':>9} {'(ms)':>9}"]
    for p in points:
        m = p.metrics
        rows.append(f"{p.rate if p.rate is not None else 'as is':>8} "
                    f"{f'{p.split[0]}:{p.split[1]}' if p.split else 'as is':>9} "
                    f"{m['ttft_ms'][50]:>10,.1f} {m['ttft_ms'][99]:>10,.1f} {m['tpot_ms'][50]:>9,.2f} "
                    f"{m['tpot_ms'][99]:>9,.2f} {m['throughput_tokens_s']:>10,.0f} {m['goodput_rps']:>10,.3f} "
                    f"{m['slo_attainment']:>8.1%}")
    return rows


def plot_goodput(points: Sequence[ServePoint], path: str | os.PathLike[str]) -> None:
    """Goodput (and SLO attainment) against request rate, one line per split (PNG/SVG/PDF by suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .fileio import atomic_output

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for split, group in itertools.groupby(sorted(points, key=lambda p: (str(p.split), p.rate or 0)),
                                          key=lambda p: p.split):
        series = list(group)
        label = f"{split[0]}:{split[1]} GPUs" if split else "as generated"
        rates = [p.rate or 0 for p in series]
        ax.plot(rates, [p.metrics["goodput_rps"] for p in series], marker="o", label=label)
        ax2.plot(rates, [100 * p.metrics["slo_attainment"] for p in series], marker="o", label=label)
    ax.set_xlabel("request rate (requests/s)")
    ax.set_ylabel("goodput (requests/s meeting the SLOs)")
    ax2.set_xlabel("request rate (requests/s)")
    ax2.set_ylabel("SLO attainment (%)")
    ax2.set_ylim(0, 105)
    for a in (ax, ax2):
        a.grid(alpha=0.3)
        a.legend()
    fig.tight_layout()
    target = Path(path)
    with atomic_output(target, compress=False) as out:
        fig.savefig(out, format=target.suffix.lstrip(".") or "png")
    plt.close(fig)
