"""Constructed jobs and configs for simulator tests."""

from __future__ import annotations

from etkit.format.attrs import make_attr
from etkit.format.schema import GlobalMetadata, Node, NodeType
from etkit.model.groups import ProcessGroups
from etkit.model.job import Job
from etkit.model.trace import Trace
from etkit.simulate.config import Dimension, NetworkConfig, SystemConfig

GIB = 2**30 / 1e9  # ASTRA-sim's GB/s -> bytes/ns


def net(*dims: tuple[str, int, float, float]) -> NetworkConfig:
    return NetworkConfig(tuple(Dimension(*d) for d in dims))


def system(algo: str = "ring", *, splits: int = 1, active: int = 1, endpoint: float = 10.0, mem: float = 1600.0,
           roofline: bool = False, peak: float = 900.0) -> SystemConfig:
    algos = (algo,)
    return SystemConfig(endpoint_delay_ns=endpoint, active_chunks_per_dimension=active, preferred_dataset_splits=splits,
                        all_reduce=algos, all_gather=algos, reduce_scatter=algos, all_to_all=algos,
                        local_mem_bw_gbps=mem, roofline_enabled=roofline, peak_perf_tflops=peak)


def comp(nid: int, us: int, deps=(), **attrs) -> Node:
    node = Node(id=nid, name=f"comp{nid}", type=NodeType.COMP_NODE, duration_micros=us, data_deps=list(deps),
                attr=[make_attr("is_cpu_op", attrs.pop("cpu", False))])
    for k, v in attrs.items():
        node.attr.append(make_attr(k, v))
    return node


def coll(nid: int, comm_type: int, size: int, deps=(), pg: str | None = None) -> Node:
    attrs = [make_attr("is_cpu_op", False), make_attr("comm_type", int(comm_type)), make_attr("comm_size", size)]
    if pg is not None:
        attrs.append(make_attr("pg_name", pg))
    return Node(id=nid, name=f"coll{nid}", type=NodeType.COMM_COLL_NODE, data_deps=list(deps), attr=attrs)


def p2p(nid: int, kind: str, size: int, deps=(), *, src: int | None = None, dst: int | None = None,
        tag: int | None = None) -> Node:
    node_type = NodeType.COMM_SEND_NODE if kind == "send" else NodeType.COMM_RECV_NODE
    attrs = [make_attr("comm_size", size)]
    for name, value in (("comm_src", src), ("comm_dst", dst), ("comm_tag", tag)):
        if value is not None:
            attrs.append(make_attr(name, value))
    return Node(id=nid, name=f"{kind}{nid}", type=node_type, data_deps=list(deps), attr=attrs)


def job(per_rank: dict[int, list[Node]], groups: dict[str, list[int]] | None = None) -> Job:
    meta = GlobalMetadata(version="0.0.4")
    return Job({r: Trace.from_nodes(meta, nodes) for r, nodes in per_rank.items()},
               ProcessGroups.from_mapping(groups or {}))


def one_collective(npus: int, comm_type: int, size: int) -> Job:
    return job({r: [coll(1, comm_type, size)] for r in range(npus)})
