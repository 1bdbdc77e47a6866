"""Small constructed jobs for checks and benchmarks of the simulator: a chain of ``steps`` x (COMP ->
collective) on every rank, built in memory with :meth:`Trace.from_nodes`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..format.attrs import make_attr
from ..format.schema import CommType, GlobalMetadata, Node, NodeType
from ..model.groups import ProcessGroups
from ..model.job import Job
from ..model.trace import Trace

__all__ = ["chain_nodes", "chain_job"]


def chain_nodes(steps: int, comp_us: int, comm_type: int = CommType.ALL_REDUCE, size: int = 1 << 20,
                pg_name: str | None = None) -> list[Node]:
    """``steps`` x (COMP of ``comp_us`` -> COMM_COLL of ``size`` bytes), each node depending on the previous."""
    nodes: list[Node] = []
    for i in range(steps):
        comp = Node(id=2 * i, name=f"comp_{i}", type=NodeType.COMP_NODE, duration_micros=comp_us,
                    attr=[make_attr("is_cpu_op", False)])
        if i:
            comp.data_deps.append(2 * i - 1)
        attrs = [make_attr("is_cpu_op", False), make_attr("comm_type", int(comm_type)), make_attr("comm_size", size)]
        if pg_name is not None:
            attrs.append(make_attr("pg_name", pg_name))
        comm = Node(id=2 * i + 1, name=f"{CommType(comm_type).name.lower()}_{i}", type=NodeType.COMM_COLL_NODE,
                    data_deps=[2 * i], attr=attrs)
        nodes += [comp, comm]
    return nodes


def chain_job(npus: int, steps: int, comp_us: int = 10, comm_type: int = CommType.ALL_REDUCE, size: int = 1 << 20,
              *, pg_names: Mapping[int, str] | None = None, groups: Mapping[str, Sequence[int]] | None = None) -> Job:
    """A job of ``npus`` ranks running :func:`chain_nodes` (rank ``r`` uses ``pg_names[r]`` when given)."""
    meta = GlobalMetadata(version="0.0.4")
    traces = {r: Trace.from_nodes(meta, chain_nodes(steps, comp_us, comm_type, size, (pg_names or {}).get(r)))
              for r in range(npus)}
    return Job(traces, ProcessGroups.from_mapping(groups or {}))
