"""Constructed jobs for replay tests, written through the public TraceWriter API.

``converted_like_job`` imitates what the PyTorch converter writes (nested ATen ops with op_schema and
IOInfo strings, a collective whose dependent waits on it); expectations in the tests come from these
literal definitions, not from replay output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from etkit.format.attrs import make_attr
from etkit.format.schema import CommType, GlobalMetadata, Node, NodeType
from etkit.format.stream import TraceWriter

LINEAR_SCHEMA = "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"
ADDMM_SCHEMA = ("aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor")
MUL_SCHEMA = "aten::mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)"
T_SCHEMA = "aten::t(Tensor(a) self) -> Tensor(a)"


def tensor(tid: int, numel: int, itemsize: int = 4) -> list[Any]:
    return [tid, tid, 0, numel, itemsize, "cpu"]


def node(nid: int, name: str, ntype: NodeType, *, deps: tuple[int, ...] = (), parent: int | None = None,
         start: int = 0, dur: int = 0, schema: str | None = None, inputs: tuple[list, list, list] | None = None,
         **attrs: Any) -> Node:
    n = Node(id=nid, name=name, type=ntype, start_time_micros=start, duration_micros=dur)
    n.data_deps.extend(deps)
    if parent is not None:
        n.ctrl_deps.append(parent)
    if inputs is not None:
        n.inputs.values, n.inputs.shapes, n.inputs.types = (str(x) for x in inputs)
    if schema is not None:
        n.attr.append(make_attr("op_schema", schema))
    attrs.setdefault("is_cpu_op", ntype == NodeType.COMP_NODE)  # converted host ops are CPU ops
    n.attr.extend(make_attr(k, v) for k, v in attrs.items())
    return n


def converted_like_nodes(allreduce_bytes: int) -> list[Node]:
    """Step container > linear (> t, addmm) > all_reduce > mul_ waiting on it; plus ops that cannot run."""
    comp = NodeType.COMP_NODE
    linear_in = ([tensor(10, 16 * 64), tensor(11, 128 * 64), tensor(12, 128)], [[16, 64], [128, 64], [128]],
                 ["Tensor(float)", "Tensor(float)", "Tensor(float)"])
    addmm_in = ([tensor(12, 128), tensor(10, 16 * 64), tensor(13, 64 * 128), 1, 1],
                [[128], [16, 64], [64, 128], [], []], ["Tensor(float)"] * 3 + ["Int", "Int"])
    mul_in = ([tensor(14, 16 * 128), tensor(15, 16 * 128)], [[16, 128], [16, 128]], ["Tensor(float)"] * 2)
    numel = allreduce_bytes // 4
    return [
        node(1, "ProfilerStep#1", comp, start=100, dur=100),
        node(2, "aten::linear", comp, deps=(1,), parent=1, start=110, dur=3, schema=LINEAR_SCHEMA, inputs=linear_in),
        node(3, "aten::t", comp, deps=(2,), parent=2, start=111, dur=2, schema=T_SCHEMA,
             inputs=([tensor(11, 128 * 64)], [[128, 64]], ["Tensor(float)"])),
        node(4, "aten::addmm", comp, deps=(3,), parent=2, start=114, dur=40, schema=ADDMM_SCHEMA, inputs=addmm_in),
        node(5, "c10d::allreduce_", NodeType.COMM_COLL_NODE, deps=(4,), parent=1, start=160, dur=50,
             inputs=([[tensor(16, numel)], "<Object>", "<Object>", "<None>", False, -1],
                     [[[numel]], [], [], [], [], []],
                     ["GenericList[Tensor(float)]", "Object", "Object", "None", "Bool", "Int"]),
             comm_type=int(CommType.ALL_REDUCE), comm_size=allreduce_bytes, pg_name="0"),
        node(6, "aten::mul_", comp, deps=(5,), parent=1, start=215, dur=20, schema=MUL_SCHEMA, inputs=mul_in),
        # an op unknown to PyTorch, and a non-ATen leaf with a duration: both run a calibrated kernel
        node(7, "aten::no_such_op_in_torch", comp, deps=(6,), parent=1, start=240, dur=30,
             schema="aten::no_such_op_in_torch(Tensor self) -> Tensor",
             inputs=([tensor(17, 4)], [[4]], ["Tensor(float)"])),
        node(8, "user_annotation_leaf", comp, deps=(7,), parent=1, start=275, dur=25),
    ]


def write_converted_like_job(folder: Path, world: int = 2, allreduce_bytes: int = 4096) -> str:
    prefix = folder / "conv"
    for rank in range(world):
        with TraceWriter(f"{prefix}.{rank}.et", GlobalMetadata()) as writer:
            for n in converted_like_nodes(allreduce_bytes):
                writer.write(n)
    return str(prefix)


def write_nodes_job(folder: Path, name: str, nodes_by_rank: dict[int, list[Node]]) -> str:
    prefix = folder / name
    for rank, nodes in nodes_by_rank.items():
        with TraceWriter(f"{prefix}.{rank}.et", GlobalMetadata()) as writer:
            for n in nodes:
                writer.write(n)
    return str(prefix)
