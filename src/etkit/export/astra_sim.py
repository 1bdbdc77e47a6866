"""``etkit export astra-sim``: a job written so that ASTRA-sim 2.x runs it to the end, at etkit's cost.

:func:`astra_sim` reads the job rank by rank through the executor twice (pass 1: a small summary per
rank, :mod:`.plan`; pass 2: each rank rewritten as the plan says, :mod:`.rewrite`), never holding more
than one rank's columns per worker, and writes ``OUT.<rank>.et`` and ``OUT.comm_groups.json`` as one
unit (:func:`etkit.fileio.job_output`: written aside, moved into place together, the older job's
other files removed). With a network and a system (or a preset) it also writes ``OUT.network.yml``,
``OUT.system.json`` and ``OUT.memory.json`` and the command that runs ASTRA-sim on them.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

import orjson

from ..executor import Executor, default_executor
from ..fileio import atomic_output, job_output
from ..model.groups import ProcessGroups
from ..model.job import discover, load_groups
from ..records import record
from ..simulate.config import NetworkConfig, SystemConfig, load_network, load_system
from .astra_config import astra_command, astra_machine, memory_json, network_yaml, system_json
from .plan import ExportError, RankSummary, plan_export, summarise
from .rewrite import RankWritten, write_rank

__all__ = ["AstraSimExport", "astra_sim"]


@record
class AstraSimExport:
    """What :func:`astra_sim` wrote."""

    prefix: str
    files: list[str]
    comm_groups: str
    groups: dict[str, list[int]]
    job_ranks: int
    nodes_in: int
    nodes_out: int
    changes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    network: str | None = None
    system: str | None = None
    memory: str | None = None
    command: str | None = None

    @property
    def ranks(self) -> int:
        return len(self.files)

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "files": self.files, "comm_groups": self.comm_groups, "groups": self.groups,
                "job_ranks": self.job_ranks, "ranks": self.ranks, "nodes_in": self.nodes_in,
                "nodes_out": self.nodes_out, "changes": self.changes, "notes": self.notes, "network": self.network,
                "system": self.system, "memory": self.memory, "command": self.command}


def astra_sim(job: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
              comm_groups: str | os.PathLike[str] | None = None, network: NetworkConfig | str | Path | None = None,
              system: SystemConfig | str | Path | None = None, congestion: str = "unaware",
              binary: str | None = None, executor: Executor | None = None) -> AstraSimExport:
    """Export the job ``job`` (a prefix, a file or a list of files; groups from ``comm_groups``,
    ``PREFIX.comm_groups.json`` and METADATA nodes) for ASTRA-sim as ``OUT.<rank>.et`` +
    ``OUT.comm_groups.json``.

    With ``network`` (and ``system``, else ASTRA-sim's defaults as etkit reads them) the export is sized
    to that machine (idle ranks for NPUs without a trace) and ``OUT.network.yml``, ``OUT.system.json``,
    ``OUT.memory.json`` are written, with :attr:`AstraSimExport.command` to run them (``binary``: the
    ASTRA-sim executable to name there; ``congestion`` picks the analytical backend). Raises
    :class:`~etkit.export.plan.ExportError` naming rank and node when ASTRA-sim could not run the job.
    """
    files, prefix = discover(job)
    source = prefix or str(files[0].path)
    executor = executor or default_executor()
    if isinstance(network, (str, Path)):
        network = load_network(network)
    if network is not None and system is None:
        system = SystemConfig()
    elif isinstance(system, (str, Path)):
        system = load_system(system)
    found: list[RankSummary] = executor.map(summarise, [(f.rank, str(f.path)) for f in files], desc="export: read")
    summaries = {s.rank: s for s in found}
    declared = ProcessGroups()
    for s in found:
        declared = declared.merged(s.groups)
    groups = load_groups(declared, prefix, comm_groups)
    world = max(summaries) + 1
    machine = astra_machine(network, system, world) if network is not None else None  # type: ignore[arg-type]
    if machine is not None and len(machine.network.dims) > 1 and congestion == "aware":
        raise ExportError(f"{network.source}: ASTRA-sim's congestion-aware backend takes a network of one "  # type: ignore[union-attr]
                          f"dimension, this one has {len(machine.network.dims)}")
    npus = machine.network.npus if machine is not None else max(world, 2)
    out_prefix = Path(out)
    with job_output(out_prefix) as staged:
        plan = plan_export(summaries, groups, npus=npus, source=source, system=machine.system if machine else None,
                           network=machine.network if machine else None, target_of=lambda r: staged.rank_path(r))
        written: list[RankWritten] = executor.map(write_rank, plan.tasks, desc="export: write")
        groups_file = staged.groups_path()
        with atomic_output(groups_file, compress=False) as fh:
            fh.write(orjson.dumps({k: list(v) for k, v in plan.groups.items()}) + b"\n")
        result = AstraSimExport(str(out_prefix), [str(staged.final(t.target)) for t in plan.tasks],
                                str(staged.final(groups_file)), {k: list(v) for k, v in plan.groups.items()},
                                len(plan.job_ranks), sum(w.nodes_in for w in written),
                                sum(w.nodes_out for w in written), _changes(plan.changes, written), list(plan.notes))
        if machine is not None:
            _write_machine(staged, out_prefix, machine, result, congestion, binary)
        elif result.changes.get("all-gathers under 64 bytes (need --system)"):
            result.notes.append("ASTRA-sim never finishes an ALL_GATHER smaller than its preferred-dataset-splits "
                                "bytes: export with --system (or --preset) to grow them to it")
    return result


def _changes(planned: dict[str, int], written: list[RankWritten]) -> dict[str, int]:
    total: Counter = Counter()
    for w in written:
        total.update(w.changes)
    for key, value in planned.items():
        if key not in total:
            total[key] = value
    return {k: v for k, v in sorted(total.items()) if v}


def _write_machine(staged: Any, out_prefix: Path, machine: Any, result: AstraSimExport, congestion: str,
                   binary: str | None) -> None:
    paths = {name: Path(f"{out_prefix}.{name}") for name in ("network.yml", "system.json", "memory.json")}
    contents = {"network.yml": network_yaml(machine.network).encode(),
                "system.json": orjson.dumps(system_json(machine.system), option=orjson.OPT_INDENT_2) + b"\n",
                "memory.json": orjson.dumps(memory_json(machine.system), option=orjson.OPT_INDENT_2) + b"\n"}
    for name, final in paths.items():
        with atomic_output(staged.path(final), compress=False) as fh:
            fh.write(contents[name])
    result.network, result.system, result.memory = (str(paths[n]) for n in ("network.yml", "system.json", "memory.json"))
    result.command = astra_command(out_prefix, network=result.network, system=result.system, memory=result.memory,
                                   comm_groups=result.comm_groups, congestion=congestion, binary=binary)
