"""ASTRA-sim's own configuration files for an exported job: network YAML, system JSON, remote-memory JSON.

They say what etkit's :class:`~etkit.simulate.config.NetworkConfig` and
:class:`~etkit.simulate.config.SystemConfig` say, in the form ASTRA-sim 2.x reads, so that
``etkit simulate`` and ASTRA-sim run the export on the same machine:

* the network is sized to the job (a last dimension of 0 NPUs filled in) and loses its dimensions of
  one NPU (ASTRA-sim refuses ``npus_count`` 1) together with their algorithm entries; a one-NPU network
  gets a second NPU (ASTRA-sim needs two); a Ring of two NPUs is written FullyConnected (one link each
  way, one hop, as the ring has; the congestion-aware backend asserts on the ring's doubled link);
* the system JSON names one algorithm per remaining dimension for each collective (etkit repeats the
  last entry; ASTRA-sim would index past the end); etkit's own keys (per-call overheads, recorded
  residuals) are left out, ASTRA-sim has no such model;
* MEM_LOAD / MEM_STORE nodes take ``tensor_size / local-mem-bw`` in etkit; the remote-memory JSON
  gives ASTRA-sim the same (per-NPU memory at ``local-mem-bw``, no latency), where its default,
  NO_MEMORY_EXPANSION, exits on the first such node.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..records import record
from ..simulate.config import Dimension, NetworkConfig, SystemConfig

__all__ = ["AstraMachine", "astra_machine", "network_yaml", "system_json", "memory_json", "astra_command",
           "ASTRA_BINARIES"]

#: ASTRA-sim's analytical binaries, by congestion mode.
ASTRA_BINARIES = {"unaware": "AstraSim_Analytical_Congestion_Unaware", "aware": "AstraSim_Analytical_Congestion_Aware"}


@record(frozen=True)
class AstraMachine:
    """The network and system as ASTRA-sim gets them (``dims``: which of the original dimensions remain)."""

    network: NetworkConfig
    system: SystemConfig
    dims: tuple[int, ...]


def astra_machine(network: NetworkConfig, system: SystemConfig, ranks: int) -> AstraMachine:
    """``network`` sized for ``ranks`` and without one-NPU dimensions; ``system``'s algorithms to match."""
    sized = network.with_npus(ranks)
    keep = tuple(i for i, d in enumerate(sized.dims) if d.npus > 1)
    if not keep:  # a one-NPU machine: ASTRA-sim needs two
        first = sized.dims[0] if sized.dims else Dimension("Switch", 1, 1.0, 0.0)
        sized, keep = replace(sized, dims=(replace(first, npus=2),)), (0,)
    dims = tuple(_two_npu_ring(sized.dims[i]) for i in keep)
    return AstraMachine(replace(sized, dims=dims), _per_dim(system, keep), keep)


def _two_npu_ring(dim: Dimension) -> Dimension:
    return replace(dim, topology="FullyConnected") if dim.topology == "Ring" and dim.npus == 2 else dim


_FAMILIES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def _per_dim(system: SystemConfig, keep: tuple[int, ...]) -> SystemConfig:
    return replace(system, **{f: tuple(system.algorithm(f, i) for i in keep) for f in _FAMILIES})  # type: ignore[arg-type]


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def network_yaml(network: NetworkConfig) -> str:
    """ASTRA-sim's analytical network YAML for ``network``."""
    def row(values: list) -> str:
        return "[ " + ", ".join(str(v) for v in values) + " ]"
    return (f"topology: {row([d.topology for d in network.dims])}\n"
            f"npus_count: {row([d.npus for d in network.dims])}\n"
            f"bandwidth: {row([float(d.bandwidth_gbps) for d in network.dims])}  # GB/s\n"
            f"latency: {row([float(d.latency_ns) for d in network.dims])}  # ns\n")


def system_json(system: SystemConfig) -> dict[str, Any]:
    """ASTRA-sim's system JSON keys for ``system`` (its algorithm lists one entry per network dimension)."""
    return {
        "scheduling-policy": system.scheduling_policy,
        "endpoint-delay": _number(system.endpoint_delay_ns),
        "active-chunks-per-dimension": system.active_chunks_per_dimension,
        "preferred-dataset-splits": system.preferred_dataset_splits,
        "all-reduce-implementation": list(system.all_reduce),
        "all-gather-implementation": list(system.all_gather),
        "reduce-scatter-implementation": list(system.reduce_scatter),
        "all-to-all-implementation": list(system.all_to_all),
        "collective-optimization": system.collective_optimization,
        "local-mem-bw": _number(system.local_mem_bw_gbps),
        "boost-mode": 0,
        "roofline-enabled": int(system.roofline_enabled),
        "peak-perf": _number(system.peak_perf_tflops),
    }


def memory_json(system: SystemConfig) -> dict[str, Any]:
    """ASTRA-sim's remote-memory JSON that times a MEM node as etkit does: ``tensor_size / local-mem-bw``."""
    return {"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 0,
            "remote-mem-bw": _number(system.local_mem_bw_gbps)}


def astra_command(prefix: str | Path, *, network: str | Path, system: str | Path, memory: str | Path,
                  comm_groups: str | Path | None, congestion: str = "unaware", binary: str | None = None) -> str:
    """The shell command that runs the export on ASTRA-sim."""
    args = [binary or ASTRA_BINARIES[congestion], f"--workload-configuration={prefix}",
            f"--system-configuration={system}", f"--network-configuration={network}",
            f"--remote-memory-configuration={memory}"]
    if comm_groups is not None:
        args.append(f"--comm-group-configuration={comm_groups}")
    return " ".join(shlex.quote(str(a)) for a in args)
