"""Small builders for constructed traces in tests (planted faults, known graphs)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from etkit.format.attrs import make_attr
from etkit.format.schema import CommType, GlobalMetadata, Node, NodeType
from etkit.format.stream import write_trace


def node(node_id: int, kind: NodeType = NodeType.COMP_NODE, *, deps: Sequence[int] = (), ctrl: Sequence[int] = (),
         name: str | None = None, duration: int = 0, start: int = 0, **attrs: Any) -> Node:
    n = Node(id=node_id, name=name or f"{kind.name}_{node_id}", type=kind, duration_micros=duration,
             start_time_micros=start)
    n.data_deps.extend(deps)
    n.ctrl_deps.extend(ctrl)
    if kind != NodeType.METADATA_NODE:
        n.attr.append(make_attr("is_cpu_op", attrs.pop("is_cpu_op", False)))
    for key, value in attrs.items():
        n.attr.append(make_attr(key, int(value) if isinstance(value, CommType) else value))
    return n


def coll(node_id: int, comm_type: CommType, size: int, *, deps: Sequence[int] = (), pg: str | None = None,
         **kw: Any) -> Node:
    extra = {"pg_name": pg} if pg is not None else {}
    return node(node_id, NodeType.COMM_COLL_NODE, deps=deps, comm_type=int(comm_type), comm_size=size, **extra, **kw)


def send(node_id: int, src: int, dst: int, size: int, tag: int = 0, *, deps: Sequence[int] = ()) -> Node:
    return node(node_id, NodeType.COMM_SEND_NODE, deps=deps, comm_src=src, comm_dst=dst, comm_tag=tag, comm_size=size)


def recv(node_id: int, src: int, dst: int, size: int, tag: int = 0, *, deps: Sequence[int] = ()) -> Node:
    return node(node_id, NodeType.COMM_RECV_NODE, deps=deps, comm_src=src, comm_dst=dst, comm_tag=tag, comm_size=size)


def write_job(prefix: Path, ranks: Iterable[Sequence[Node]], version: str = "1.0.0") -> Path:
    for rank, nodes in enumerate(ranks):
        write_trace(f"{prefix}.{rank}.et", GlobalMetadata(version=version), nodes)
    return prefix
