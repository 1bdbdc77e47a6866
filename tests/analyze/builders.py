"""Small constructed jobs with hand-checkable timing, built through the public writer API."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from etkit.format.attrs import make_attr
from etkit.format.schema import GlobalMetadata, Node, NodeType
from etkit.format.stream import TraceWriter
from etkit.model.job import Job, load_job

COMP, COLL, SEND, RECV = NodeType.COMP_NODE, NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE
MEM = NodeType.MEM_LOAD_NODE


@dataclass
class N:
    """One node: id, type, start and duration in us, deps and attributes."""

    id: int
    type: int
    start: int = 0
    dur: int = 0
    deps: Sequence[int] = ()
    name: str = ""
    attrs: dict = field(default_factory=dict)

    def node(self) -> Node:
        node = Node(id=self.id, name=self.name or f"{NodeType(self.type).name}_{self.id}", type=self.type,
                    start_time_micros=self.start, duration_micros=self.dur)
        node.data_deps.extend(self.deps)
        attrs = dict(self.attrs)
        attrs.setdefault("is_cpu_op", False)
        node.attr.extend(make_attr(k, v) for k, v in attrs.items())
        return node


def write_job(tmp: Path, ranks: dict[int, list[N]], prefix: str = "job") -> str:
    """Write ``<tmp>/<prefix>.<rank>.et`` for every rank and return the prefix."""
    for rank, nodes in ranks.items():
        with TraceWriter(tmp / f"{prefix}.{rank}.et", GlobalMetadata(version="1.0.0")) as w:
            for n in nodes:
                w.write(n.node())
    return str(tmp / prefix)


def build_job(tmp: Path, ranks: dict[int, list[N]], prefix: str = "job") -> Job:
    from etkit.executor import SerialExecutor

    return load_job(write_job(tmp, ranks, prefix), executor=SerialExecutor())


def coll(id: int, start: int, dur: int, deps: Sequence[int] = (), *, size: int = 1 << 20, ctype: int = 0,
         pg: str | None = None, name: str = "") -> N:
    attrs = {"comm_type": ctype, "comm_size": size}
    if pg is not None:
        attrs["pg_name"] = pg
    return N(id, COLL, start, dur, deps, name or "all_reduce", attrs)


def comp(id: int, start: int, dur: int, deps: Sequence[int] = (), name: str = "") -> N:
    return N(id, COMP, start, dur, deps, name)
