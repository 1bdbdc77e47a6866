"""The 14 micro-benchmark cases of the reference Chakra generator, each runnable by a simulator.

Same case names, node kinds and attribute kinds as the reference generator (``chakra_generator``), with
the defects that stop a simulator fixed:

* every COMP node also carries ``num_ops`` and ``tensor_size`` (a 64x64x64 fp32 matmul), so a
  roofline model has something to compute with; ``duration_micros`` stays 5 for replay;
* SEND/RECV nodes carry ``comm_src``, ``comm_dst``, ``comm_tag`` and ``comm_size`` and every send has its
  matching recv on the peer rank (the reference writes a lone send on every rank, which hangs);
* BROADCAST is a binomial tree of SEND/RECV from rank 0 and BARRIER a dissemination barrier
  (see :mod:`etkit.generate.collective`): the reference's BARRIER aborts ASTRA-sim and its BROADCAST
  costs 1 ns whatever the size.

``one_comm_send_node``: even ranks ``r`` send one message to ``(r+1) % N`` which receives it;
``one_comm_recv_node`` is its mirror (even ranks receive from ``(r+1) % N``). With an odd N, rank 0
therefore holds both a send and a recv.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import UsageError
from ..executor import Executor
from ..fileio import job_output
from ..format.attrs import make_attr
from ..format.schema import CommType, Node, NodeType
from ..model.job import Job
from ..model.template import RankPlan, TraceTemplate, WriteTask, build_job, plan_writes, run_writes, synthetic_metadata
from ..records import record
from .collective import add_barrier, add_broadcast

__all__ = ["MICRO_CASES", "MicroParams", "micro", "write_micro"]

#: FLOPs and bytes of the stand-in COMP node: C = A @ B with 64x64 fp32 matrices.
_MATMUL_N = 64
COMP_NUM_OPS = 2 * _MATMUL_N**3
COMP_TENSOR_BYTES = 3 * _MATMUL_N * _MATMUL_N * 4


@record(frozen=True)
class MicroParams:
    """Sizes and durations of the micro cases (defaults: the reference generator's values)."""

    npus: int
    coll_size: int = 65_536
    p2p_size: int = 1_024
    mem_size: int = 1_024
    comp_us: int = 5


def _metadata_all_kinds(tpl: TraceTemplate, rank: int, p: MicroParams) -> None:
    """One METADATA node carrying one attribute of every value kind (a reader's torture test)."""
    node = Node(id=0, name="METADATA_NODE", type=NodeType.METADATA_NODE)
    values = {
        "double": (1.2345, [1.2345, 2.3456]), "float": (1.2345, [1.2345, 2.3456]),
        "int32": (12345, [12345, 23456]), "int64": (9876543210, [9876543210, 1234567890]),
        "uint32": (12345, [12345, 23456]), "uint64": (9876543210, [9876543210, 1234567890]),
        "sint32": (-12345, [12345, -23456]), "sint64": (-9876543210, [9876543210, -1234567890]),
        "fixed32": (12345, [12345, 23456]), "fixed64": (9876543210, [9876543210, 1234567890]),
        "sfixed32": (-12345, [12345, -23456]), "sfixed64": (-9876543210, [9876543210, -1234567890]),
        "bool": (True, [i % 2 == 0 for i in range(10)]),
        "string": ("12345", [str(12345 + i) for i in range(10)]),
        "bytes": (b"12345", [str(12345 + i).encode() for i in range(10)]),
    }
    for kind, (scalar, listed) in values.items():
        node.attr.append(make_attr(kind, scalar, f"{kind}_val"))
        node.attr.append(make_attr(f"{kind}_list", listed, f"{kind}_list"))
    tpl.add(node)


def _mem(node_type: NodeType) -> Callable[[TraceTemplate, int, MicroParams], None]:
    def build(tpl: TraceTemplate, rank: int, p: MicroParams) -> None:
        tpl.node(node_type.name, node_type, attrs=[("is_cpu_op", False), ("tensor_size", p.mem_size)])
    return build


def _comp(tpl: TraceTemplate, p: MicroParams, deps: Iterable[int] = ()) -> int:
    return tpl.comp("COMP_NODE", p.comp_us, num_ops=COMP_NUM_OPS, tensor_size=COMP_TENSOR_BYTES, deps=deps)


def _one_comp(tpl: TraceTemplate, rank: int, p: MicroParams) -> None:
    _comp(tpl, p)


def _two_comp_independent(tpl: TraceTemplate, rank: int, p: MicroParams) -> None:
    _comp(tpl, p)
    _comp(tpl, p)


def _two_comp_dependent(tpl: TraceTemplate, rank: int, p: MicroParams) -> None:
    _comp(tpl, p, [_comp(tpl, p)])


def _native(comm: CommType) -> Callable[[TraceTemplate, int, MicroParams], None]:
    def build(tpl: TraceTemplate, rank: int, p: MicroParams) -> None:
        tpl.coll(comm.name, comm, p.coll_size)
    return build


def _broadcast(tpl: TraceTemplate, rank: int, p: MicroParams) -> None:
    add_broadcast(tpl, range(p.npus), rank, p.coll_size, root=0, tag=int(CommType.BROADCAST))


def _barrier(tpl: TraceTemplate, rank: int, p: MicroParams) -> None:
    add_barrier(tpl, range(p.npus), rank, tag=int(CommType.BARRIER))


def _p2p_pairs(npus: int, even_sends: bool) -> list[tuple[int, int]]:
    """(src, dst) of the one-message cases: even ranks and their right neighbour."""
    pairs = [(r, (r + 1) % npus) for r in range(0, npus, 2)]
    return pairs if even_sends else [(dst, src) for src, dst in pairs]


def _p2p(even_sends: bool) -> Callable[[TraceTemplate, int, MicroParams], None]:
    def build(tpl: TraceTemplate, rank: int, p: MicroParams) -> None:
        for src, dst in _p2p_pairs(p.npus, even_sends):
            if src == rank:
                tpl.send("COMM_SEND_NODE", p.p2p_size, src=src, dst=dst, tag=0)
            if dst == rank:
                tpl.recv("COMM_RECV_NODE", p.p2p_size, src=src, dst=dst, tag=0)
    return build


#: Case name -> builder of one rank's nodes, in the reference generator's order.
MICRO_CASES: dict[str, Callable[[TraceTemplate, int, MicroParams], None]] = {
    "one_metadata_node_all_types": _metadata_all_kinds,
    "one_remote_mem_load_node": _mem(NodeType.MEM_LOAD_NODE),
    "one_remote_mem_store_node": _mem(NodeType.MEM_STORE_NODE),
    "one_comp_node": _one_comp,
    "two_comp_nodes_independent": _two_comp_independent,
    "two_comp_nodes_dependent": _two_comp_dependent,
    "ALL_REDUCE": _native(CommType.ALL_REDUCE),
    "ALL_TO_ALL": _native(CommType.ALL_TO_ALL),
    "ALL_GATHER": _native(CommType.ALL_GATHER),
    "REDUCE_SCATTER": _native(CommType.REDUCE_SCATTER),
    "BROADCAST": _broadcast,
    "BARRIER": _barrier,
    "one_comm_send_node": _p2p(even_sends=True),
    "one_comm_recv_node": _p2p(even_sends=False),
}


def _case_plans(case: str, p: MicroParams) -> tuple[list[RankPlan], dict[str, TraceTemplate]]:
    build = MICRO_CASES[case]
    templates: dict[str, TraceTemplate] = {}
    plans: list[RankPlan] = []
    seen: dict[bytes, str] = {}
    for rank in range(p.npus):
        tpl = TraceTemplate(synthetic_metadata("etkit.generate.micro", case=case))
        build(tpl, rank, p)
        # Ranks with identical content share one template (most cases are rank-symmetric).
        key = tpl.render()
        role = seen.setdefault(key, str(rank))
        templates.setdefault(role, tpl)
        plans.append(RankPlan(rank, role))
    return plans, templates


def _checked(npus: int, cases: Iterable[str] | None) -> list[str]:
    if npus < 2:
        raise UsageError(f"micro-benchmarks need at least 2 NPUs (send/recv pairs), not {npus}")
    chosen = list(cases) if cases is not None else list(MICRO_CASES)
    unknown = [c for c in chosen if c not in MICRO_CASES]
    if unknown:
        raise UsageError(f"unknown micro case {unknown[0]!r}; cases: {', '.join(MICRO_CASES)}")
    return chosen


def micro(npus: int, *, cases: Iterable[str] | None = None, coll_size: int = 65_536, p2p_size: int = 1_024,
          mem_size: int = 1_024, comp_us: int = 5) -> dict[str, Job]:
    """The micro-benchmark jobs (case name -> :class:`Job` of ``npus`` ranks), all cases by default."""
    params = MicroParams(npus, coll_size, p2p_size, mem_size, comp_us)
    jobs = {}
    for case in _checked(npus, cases):
        plans, templates = _case_plans(case, params)
        jobs[case] = build_job(plans, templates, prefix=case)
    return jobs


def write_micro(out_dir: str | os.PathLike[str], npus: int, *, cases: Iterable[str] | None = None,
                coll_size: int = 65_536, p2p_size: int = 1_024, mem_size: int = 1_024, comp_us: int = 5,
                executor: Executor | None = None) -> dict[str, list[Path]]:
    """Write every case as ``OUT_DIR/<case>.<rank>.et``; returns case -> rank files.

    The cases are written as one unit (:func:`~etkit.fileio.job_output` on the folder): interrupted,
    ``OUT_DIR`` keeps what it held; done, older rank files of these cases that this run lacks are gone.
    """
    params = MicroParams(npus, coll_size, p2p_size, mem_size, comp_us)
    tasks: list[WriteTask] = []
    written = {}
    with job_output(out_dir, folder=True) as out:
        for case in _checked(npus, cases):
            plans, templates = _case_plans(case, params)
            out.claim(Path(out_dir) / case)
            case_tasks, written[case] = plan_writes(Path(out_dir) / case, plans, templates, out=out)
            tasks.extend(case_tasks)
        run_writes(tasks, executor, desc="micro")
    return written
