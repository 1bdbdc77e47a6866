"""What kind of work a node is and which resource it occupies: the one vocabulary of both.

:class:`NodeKind` is what every analysis groups time by (:mod:`etkit.model.accounting`,
:mod:`etkit.analyze.kinds` decides each node's); :class:`Resource` is where a simulator runs a node (the
``resource`` column of :class:`etkit.model.schedule.RankSchedule`, a timeline's thread per resource). Both
are small integers in numpy columns (int8); the names are what reports print.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["NodeKind", "KIND_NAMES", "Resource", "RESOURCE_NAMES"]


class NodeKind(IntEnum):
    """What a node's time is: device compute, host (CPU) work, communication, memory copies, or other."""

    COMPUTE = 0
    CPU = 1
    COMM = 2
    MEMORY = 3
    OTHER = 4


#: Printed names, indexed by :class:`NodeKind`.
KIND_NAMES = tuple(k.name.lower() for k in NodeKind)


class Resource(IntEnum):
    """What a simulated node occupies while it runs (ASTRA-sim's per-NPU resources, and memory)."""

    CPU = 0
    COMPUTE = 1
    COMM = 2
    MEMORY = 3


#: Printed names, indexed by :class:`Resource`.
RESOURCE_NAMES = tuple(r.name.lower() for r in Resource)
