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

``simulate(job, network, system, knobs=None, *, congestion=None, comm_groups=None, executor=None) ->
SimulationResult``: ``job`` is an :class:`etkit.model.job.Job`, or a prefix / file list (see
:func:`etkit.model.job.discover`; process groups from ``comm_groups`` or ``PREFIX.comm_groups.json`` and
METADATA nodes), which is streamed rank by rank in chunks without ever holding a file's bytes (large
files: docs/guide/simulate.md; ``executor`` reads the ranks' shapes in parallel);
``network``/``system`` are :class:`NetworkConfig`/:class:`SystemConfig` or paths to ASTRA-sim's network
YAML / system JSON. It raises :class:`SimulationBlocked` (an :class:`etkit.errors.EtkitError` with a
``report``) when ranks disagree (checked before the run with the matcher ``etkit validate`` uses;
``allow_mismatch=True`` simulates them anyway) or the graph cannot run, instead of hanging.

Layers (each replaceable): :mod:`.loader` (streaming columns of big files), :mod:`.workload` (graphs ->
programs, rank symmetry), :mod:`.engine`
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
from ..executor import Executor
from ..model.groups import ProcessGroups
from ..model.job import Job, discover, load_groups, rank_batches
from ..model.matching import CommRecord, comm_record, match_comm
from ..model.trace import Trace
from .config import PRESETS, Knobs, NetworkConfig, SystemConfig, load_config, load_network, load_system
from .engine import BlockedReport, SimulationBlocked, SymmetryBroken, disagreement_report, foldable, run_engine
from .loader import load_columns, load_ranks_many
from .notes import gpu_notes, input_notes
from .result import RankFigures, SimulationResult, build_schedule, figures_for
from .workload import RankShape, build_classes, rank_shape

__all__ = ["simulate", "prepare", "PreparedJob", "SimulationResult", "RankFigures", "SimulationBlocked", "BlockedReport", "Knobs",
           "NetworkConfig", "SystemConfig", "load_config", "load_network", "load_system", "PRESETS"]


class _Ranks:
    """The ranks to simulate: their :class:`RankShape` s, process groups, and each rank's trace on demand.

    From a :class:`Job`, the traces it holds. From files, each rank is read (:func:`.loader.load_ranks_many`:
    columns only, never the record bytes, nor the node names a shape does not read; small files a batch at a
    time) once to take its shape (through ``executor`` when given, one task per batch of files:
    :func:`~etkit.model.job.rank_batches`), and the first rank of each class once more (whole) to build its
    program; at most one rank's columns (or one batch's) are held at a time in this process.
    """

    allow_mismatch = False  # (a PreparedJob's may be True: see :func:`simulate`)

    def __init__(self, job: Job | str | os.PathLike[str] | Sequence[str], comm_groups: str | os.PathLike[str] | None,
                 executor: Executor | None = None) -> None:
        self._last: tuple[int, Trace] | None = None
        if isinstance(job, Job):
            self.traces: dict[int, Trace] | None = job.traces
            self.shapes = {rank: rank_shape(trace, rank) for rank, trace in sorted(job.traces.items())}
            self.groups = job.groups
            self.disagreement = disagreement_report(match_comm(
                {rank: comm_record(trace, rank) for rank, trace in job.traces.items()}, self.groups, self.world_size,
                instances=False))
            return
        files, prefix = discover(job)
        self.traces = None
        self.paths = {f.rank: f.path for f in files}
        self.shapes, declared = {}, ProcessGroups()
        if executor is not None and len(files) > 1:
            found = [r for part in executor.map(_file_shapes, rank_batches(files), desc="load") for r in part]
        else:  # in this process; a one-rank job keeps its columns, names too (it is then read once)
            found = []
            alone = len(files) == 1  # a shape reads no node names: the ranks of a bigger job are read without them
            for f, (loaded, record) in zip(files, load_ranks_many([(f.rank, f.path) for f in files], names=alone)):
                found.append((rank_shape(loaded.trace, f.rank), loaded.groups, record))
                if alone:
                    self._last = (f.rank, loaded.trace)
        records = {}
        for shape, groups, record in found:
            self.shapes[shape.rank] = shape
            records[shape.rank] = record
            declared = declared.merged(groups)
        self.groups = load_groups(declared, prefix, comm_groups, world_size=max(self.shapes) + 1)
        #: the pre-check's report (:func:`.engine.disagreement_report`), None when the ranks agree
        self.disagreement = disagreement_report(match_comm(records, self.groups, self.world_size, instances=False))

    @property
    def world_size(self) -> int:
        return max(self.shapes) + 1 if self.shapes else 0

    def trace(self, rank: int) -> Trace:
        if self.traces is not None:
            return self.traces[rank]
        last, self._last = self._last, None
        return last[1] if last is not None and last[0] == rank else load_columns(self.paths[rank]).trace


def _file_shapes(batch: list[tuple[int, str]]) -> list[tuple[RankShape, ProcessGroups, CommRecord]]:
    """Executor task: per ``(rank, path)`` of a batch, the rank's shape, the groups its METADATA nodes declare,
    and its communication."""
    return [(rank_shape(loaded.trace, rank), loaded.groups, record)
            for (rank, _), (loaded, record) in zip(batch, load_ranks_many(batch, names=False))]


class PreparedJob(_Ranks):
    """A job read once for many simulations (a sweep: ``simulate(prepare(job), network, ...)`` per point).

    Every rank's shape and the process groups are taken once (:class:`_Ranks`); the trace of each rank a
    simulation builds a program from (the first rank of each class) is kept after its first read, so later
    points read no file. Pickled (sent to another process), it carries the shapes, groups and file paths but
    not the kept traces: that process reads what it needs from the same paths. ``identity`` names the rank
    files and their state (paths, sizes, modification times), so that a process can tell it holds this job.
    """

    def __init__(self, job: Job | str | os.PathLike[str] | Sequence[str], comm_groups: str | os.PathLike[str] | None = None,
                 executor: Executor | None = None, allow_mismatch: bool = False) -> None:
        super().__init__(job, comm_groups, executor)
        self.allow_mismatch = allow_mismatch
        self._kept: dict[int, Trace] = {}
        self.identity: tuple = (("memory", id(job)),) if self.traces is not None else tuple(
            (rank, str(path), *_file_state(path)) for rank, path in sorted(self.paths.items()))

    def trace(self, rank: int) -> Trace:
        kept = self._kept.get(rank)
        if kept is None:
            kept = self._kept[rank] = super().trace(rank)
        return kept

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_kept": {}, "_last": None}


def _file_state(path: str | os.PathLike[str]) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def prepare(job: Job | str | os.PathLike[str] | Sequence[str], *, comm_groups: str | os.PathLike[str] | None = None,
            executor: Executor | None = None, allow_mismatch: bool = False) -> PreparedJob:
    """Read ``job`` once for several :func:`simulate` calls (see :class:`PreparedJob`)."""
    return PreparedJob(job, comm_groups, executor, allow_mismatch)


def simulate(job: PreparedJob | Job | str | os.PathLike[str] | Sequence[str], network: NetworkConfig | str | Path,
             system: SystemConfig | str | Path | None = None, knobs: Knobs | None = None, *,
             congestion: str | None = None, comm_groups: str | os.PathLike[str] | None = None,
             executor: Executor | None = None, allow_mismatch: bool = False) -> SimulationResult:
    """Simulate ``job`` on ``network`` + ``system``; see the module docstring (``job`` may be :func:`prepare` d).

    Ranks that disagree about a call (a collective of another type or size, a receive of another size than
    its send: :func:`etkit.model.matching.match_comm`, what ``etkit validate`` reports) raise
    :class:`SimulationBlocked` before anything runs, unless ``allow_mismatch`` (then they are notes and the
    engine runs them as it can: the largest size, the first issued type)."""
    ranks = job if isinstance(job, _Ranks) else _Ranks(job, comm_groups, executor)
    if ranks.disagreement is not None and not (allow_mismatch or ranks.allow_mismatch):
        raise SimulationBlocked(ranks.disagreement)
    if not isinstance(network, NetworkConfig):
        network = load_network(network)
    if system is None:
        system = SystemConfig()
    elif not isinstance(system, SystemConfig):
        system = load_system(system)
    knobs = knobs or Knobs()
    if congestion is not None:
        knobs = replace(knobs, congestion=congestion)
    world = ranks.world_size
    notes = input_notes(network, world, knobs)
    if ranks.disagreement is not None:
        shown = ranks.disagreement.disagreements
        notes.append(f"ranks disagree, simulated anyway (allow_mismatch): {shown[0]}"
                     + (f" (and {len(shown) - 1} more)" if len(shown) > 1 else ""))
    network = network.with_npus(world)
    if network.npus < world:
        raise UsageError(f"{network.source}: the network has {network.npus} NPUs but the job has {world} ranks")
    if knobs.scale_bandwidth != 1.0 or knobs.scale_latency != 1.0:
        network = network.scaled(knobs.scale_bandwidth, knobs.scale_latency)
    if knobs.scale_latency != 1.0:
        system = system.scaled_overheads(knobs.scale_latency)
    bad = [r for r in knobs.stragglers if r not in ranks.shapes]
    if bad:
        raise UsageError(f"straggler rank(s) {bad} not in the job (ranks 0..{world - 1})")
    began = time.perf_counter()
    runs = knobs.samples if system.collective_residuals_ns else 0
    # each member draws its own cost: ranks with identical graphs no longer run identically
    run_knobs = replace(knobs, symmetry=False) if runs else knobs
    classes = build_classes(ranks.shapes, ranks.groups, ranks.trace, system, run_knobs, network)
    folded = False
    if knobs.congestion == "aware" and any(len(c.ranks) > 1 for c in classes):
        folded = foldable(classes, ranks.groups, world, network, system)
        if not folded:  # links are not the same from every member: simulate every rank
            classes = build_classes(ranks.shapes, ranks.groups, ranks.trace, system, replace(run_knobs, symmetry=False), network)

    def run(rng=None):
        return run_engine(classes, ranks.groups, world, network, system, knobs.congestion, rng, folded)

    try:
        if runs:
            import numpy as np

            outs = [run(np.random.default_rng(knobs.seed + i)) for i in range(runs)]
        else:
            outs = [run()]
    except SymmetryBroken:  # merged ranks would not run alike (a group that looks different from its members)
        classes = build_classes(ranks.shapes, ranks.groups, ranks.trace, system, replace(run_knobs, symmetry=False), network)
        folded = False
        if runs:
            import numpy as np

            outs = [run(np.random.default_rng(knobs.seed + i)) for i in range(runs)]
        else:
            outs = [run()]
    if runs:
        import numpy as np

        steps = [_run_step(classes, o) for o in outs]
        out = outs[int(np.argsort(steps, kind="stable")[(runs - 1) // 2])]  # the run with the median step time
    else:
        out = outs[0]
        steps = []
    figures = {}
    for cls, s, e, x in zip(classes, out.start, out.end, out.transfer):
        f = figures_for(cls, s, e, x)
        for r in cls.ranks:
            figures[r] = f
    nodes = sum(s.nodes for s in ranks.shapes.values())
    simulated = sum(len(c.program) for c in classes)
    config = {"network": network.to_yaml_dict(), "system": system.source, "congestion": knobs.congestion,
              "scale_compute": knobs.scale_compute, "scale_bandwidth": knobs.scale_bandwidth,
              "scale_latency": knobs.scale_latency, "collective_overhead_ns": dict(system.collective_overhead_ns),
              "stragglers": knobs.stragglers, "samples": runs, "seed": knobs.seed, "device": knobs.device.name if knobs.device else None}
    result = SimulationResult(figures, build_schedule(classes, out.start, out.end), out.events, nodes, simulated,
                              len(classes), time.perf_counter() - began, notes + gpu_notes(classes, knobs) + out.warnings,
                              config, steps)
    result.step_interval_ns = system.prediction_interval(result.step_ns)
    return result


def _run_step(classes, out) -> float:
    """Step time of one engine run: the longest class's finish minus its entry."""
    import numpy as np

    return max(float(np.nanmax(e, initial=0.0)) - c.program.release_ns for c, e in zip(classes, out.end))
