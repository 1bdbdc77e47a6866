"""What a simulation says about inputs it accepted that probably do not mean what the user meant."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .config import Knobs, NetworkConfig
from .workload import K_GPU

__all__ = ["input_notes", "gpu_notes"]


def input_notes(network: NetworkConfig, world: int, knobs: Knobs) -> list[str]:
    """Notes on the network as given: more NPUs than the job has ranks (ASTRA-sim refuses such a run, wanting
    one ET per NPU; etkit runs rank r on NPU r and leaves the others idle, which changes ring distances)."""
    if not network.dims or not network.dims[-1].npus:  # sized to the job (a preset's last dimension)
        return []
    if network.npus > world:
        return [f"{network.source}: the network has {network.npus} NPUs but the job {world} ranks: NPUs {world}.."
                f"{network.npus - 1} stay idle (ASTRA-sim refuses this run: it wants one ET per NPU)"]
    return []


def gpu_notes(classes: Sequence[Any], knobs: Knobs) -> list[str]:
    """A device swap on a job without GPU compute (a CPU-only trace) changes nothing: say so."""
    if knobs.device is None or any(K_GPU in c.program.kind for c in classes):
        return []
    return [f"--device {knobs.device.name} had no effect: the job has no GPU compute nodes (a CPU-only trace); "
            "use --scale-compute to change CPU time"]
