"""Trace-driven cluster simulator: predict how a job's ETs run on a given system, and ask what-if.

Public API (what ``etkit simulate`` and ``etkit analyze --simulate`` call)::

    from etkit.simulate import simulate, load_config, Knobs
    network, system, device = load_config("NET.yml", "SYS.json")   # or an etkit system YAML / preset
    result = simulate(job, network, system, knobs=Knobs(scale_bandwidth=2))
    result.makespan_ns, result.ranks[0].finish_ns, result.schedule   # Schedule(source="simulation")
    result.step_ns      # slowest rank's finish minus its start (measured traces start ranks where they did)
    result.step_samples_ns  # Monte Carlo: every run's step time (systems with recorded cost residuals)

A system calibrated from a measured job (``etkit calibrate --from-trace``) carries the recorded spread
of each collective type's cost (``collective_residuals_ns``): then ``Knobs.samples`` runs (default 32,
seeds ``Knobs.seed`` + i) each release every collective member at its own drawn time, and the result
is the run whose step time is the median.

``simulate(job, network, system, knobs=None, *, congestion=None) -> SimulationResult``: ``job`` is an
:class:`etkit.model.job.Job` (or a prefix / file list, loaded with :func:`etkit.model.job.load_job`),
``network``/``system`` are :class:`NetworkConfig`/:class:`SystemConfig` or paths to ASTRA-sim's network
YAML / system JSON. It raises :class:`SimulationBlocked` (an :class:`etkit.errors.EtkitError` with a
``report``) when ranks disagree or the graph cannot run, instead of hanging.

Layers (each replaceable): :mod:`.workload` (graphs -> programs, rank symmetry), :mod:`.engine`
(discrete events, resources, matching, blocked reports), :mod:`.collectives` (system layer:
algorithms per dimension, chunking, hierarchy), :mod:`.network` (congestion-aware link sharing),
:mod:`.config` (ASTRA-sim inputs, etkit presets), :mod:`.whatif` (sweeps), :mod:`.timeline`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..errors import UsageError
from ..model.job import Job, load_job
from .config import PRESETS, Knobs, NetworkConfig, SystemConfig, load_config, load_network, load_system
from .engine import BlockedReport, SimulationBlocked, run_engine
from .result import RankFigures, SimulationResult, build_schedule, figures_for
from .workload import rank_classes

__all__ = ["simulate", "SimulationResult", "RankFigures", "SimulationBlocked", "BlockedReport", "Knobs",
           "NetworkConfig", "SystemConfig", "load_config", "load_network", "load_system", "PRESETS"]


def _as_job(job: Job | str | os.PathLike[str] | Sequence[str]) -> Job:
    if isinstance(job, Job):
        return job
    from ..executor import SerialExecutor

    return load_job(job, executor=SerialExecutor())


def simulate(job: Job | str | os.PathLike[str] | Sequence[str], network: NetworkConfig | str | Path,
             system: SystemConfig | str | Path | None = None, knobs: Knobs | None = None, *,
             congestion: str | None = None) -> SimulationResult:
    """Simulate ``job`` on ``network`` + ``system``; see the module docstring."""
    job = _as_job(job)
    if not isinstance(network, NetworkConfig):
        network = load_network(network)
    if system is None:
        system = SystemConfig()
    elif not isinstance(system, SystemConfig):
        system = load_system(system)
    knobs = knobs or Knobs()
    if congestion is not None:
        knobs = replace(knobs, congestion=congestion)
    world = job.world_size
    network = network.with_npus(world)
    if network.npus < world:
        raise UsageError(f"{network.source}: the network has {network.npus} NPUs but the job has {world} ranks")
    if knobs.scale_bandwidth != 1.0 or knobs.scale_latency != 1.0:
        network = network.scaled(knobs.scale_bandwidth, knobs.scale_latency)
    if knobs.scale_latency != 1.0:
        system = system.scaled_overheads(knobs.scale_latency)
    bad = [r for r in knobs.stragglers if r not in job.traces]
    if bad:
        raise UsageError(f"straggler rank(s) {bad} not in the job (ranks 0..{world - 1})")
    began = time.perf_counter()
    runs = knobs.samples if system.collective_residuals_ns else 0
    # each member draws its own cost: ranks with identical graphs no longer run identically
    classes = rank_classes(job, system, replace(knobs, symmetry=False) if runs else knobs)
    if runs:
        import numpy as np

        outs = [run_engine(classes, job.groups, world, network, system, knobs.congestion,
                           np.random.default_rng(knobs.seed + i)) for i in range(runs)]
        steps = [_run_step(classes, o) for o in outs]
        out = outs[int(np.argsort(steps, kind="stable")[(runs - 1) // 2])]  # the run with the median step time
    else:
        out = run_engine(classes, job.groups, world, network, system, knobs.congestion)
        steps = []
    figures = {}
    for cls, s, e, x in zip(classes, out.start, out.end, out.transfer):
        f = figures_for(cls, s, e, x)
        for r in cls.ranks:
            figures[r] = f
    nodes = sum(len(job.traces[r]) for r in job.traces)
    simulated = sum(len(c.program) for c in classes)
    config = {"network": network.to_yaml_dict(), "system": system.source, "congestion": knobs.congestion,
              "scale_compute": knobs.scale_compute, "scale_bandwidth": knobs.scale_bandwidth,
              "scale_latency": knobs.scale_latency, "collective_overhead_ns": dict(system.collective_overhead_ns),
              "stragglers": knobs.stragglers, "samples": runs, "seed": knobs.seed, "device": knobs.device.name if knobs.device else None}
    return SimulationResult(figures, build_schedule(classes, out.start, out.end), out.events, nodes, simulated,
                            len(classes), time.perf_counter() - began, out.warnings, config, steps)


def _run_step(classes, out) -> float:
    """Step time of one engine run: the longest class's finish minus its entry."""
    import numpy as np

    return max(float(np.nanmax(e, initial=0.0)) - c.program.release_ns for c, e in zip(classes, out.end))
