"""Constructed jobs for checks and benchmarks of the simulator: a chain of ``steps`` x (COMP ->
collective) on every rank, built in memory with :meth:`Trace.from_nodes`; and a converter-like rank of
any size streamed to a file (:func:`write_pytorch_like`), for the large-file path."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence

from ..format.attrs import make_attr
from ..format.schema import CommType, GlobalMetadata, Node, NodeType
from ..format.stream import TraceWriter
from ..model.groups import ProcessGroups
from ..model.job import Job
from ..model.trace import Trace

__all__ = ["chain_nodes", "chain_job", "pytorch_like_nodes", "write_pytorch_like"]


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


def pytorch_like_nodes(n: int) -> Iterator[Node]:
    """``n`` nodes shaped like a PyTorch conversion: timestamps, ``tid``, a data chain with skip edges every
    fifth node, ctrl deps to each tenth node, every third node an all-reduce, input metadata on the rest."""
    cpu = make_attr("is_cpu_op", False)
    for i in range(1, n + 1):
        node = Node(id=i, name="aten::linear" if i % 3 else "nccl:all_reduce", start_time_micros=1_000 + 2 * i,
                    duration_micros=i % 97 + 1, attr=[make_attr("tid", 1), cpu])
        node.data_deps.extend([i - 1] if i > 1 else [])
        node.data_deps.extend([i - 7] if i > 8 and i % 5 == 0 else [])
        node.ctrl_deps.extend([i - i % 10] if i % 10 and i > 10 else [])
        if i % 3 == 0:
            node.type = NodeType.COMM_COLL_NODE
            node.attr.extend([make_attr("comm_type", int(CommType.ALL_REDUCE)), make_attr("comm_size", 1 << 20)])
        else:
            node.type = NodeType.COMP_NODE
            node.inputs.values = "[[1, 2, 0, 64, 4, 'cpu']]"
        yield node


def write_pytorch_like(path: str | os.PathLike[str], n: int) -> None:
    """Write one rank of :func:`pytorch_like_nodes` to ``path``, streamed (constant memory)."""
    with TraceWriter(path, GlobalMetadata(version="0.0.4")) as writer:
        for node in pytorch_like_nodes(n):
            writer.write(node)
