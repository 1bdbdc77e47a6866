"""The template writer the generators share: stamped nodes equal nodes built directly, files equal memory."""

from __future__ import annotations

import pytest

from etkit.executor import ProcessExecutor
from etkit.format.attrs import make_attr
from etkit.format.schema import CommType, GlobalMetadata, Node, NodeType
from etkit.format.stream import open_trace
from etkit.model import load_job
from etkit.model.template import Param, RankPlan, TraceTemplate, attr_field, build_job, write_job


def _template() -> TraceTemplate:
    tpl = TraceTemplate(GlobalMetadata(version="1.0.0"))
    fwd = tpl.comp("fwd", 120, num_ops=4_000_000, tensor_size=65_536)
    tpl.send("send_act", 1 << 20, src=Param("me"), dst=Param("next"), tag=7, deps=[fwd])
    tpl.coll("grads", CommType.ALL_REDUCE, 1 << 26, pg_name=Param("dp"), deps=[fwd])
    tpl.comp("opt", 3, deps=[fwd])
    return tpl


def _expected(me: int, nxt: int, dp: str) -> list[Node]:
    def node(i: int, name: str, t: NodeType, deps: list[int], dur: int, attrs: list) -> Node:
        n = Node(id=i, name=name, type=t, duration_micros=dur)
        n.data_deps.extend(deps)
        n.attr.extend(make_attr(k, v) for k, v in attrs)
        return n

    return [
        node(0, "fwd", NodeType.COMP_NODE, [], 120, [("is_cpu_op", False), ("num_ops", 4_000_000),
                                                      ("tensor_size", 65_536)]),
        node(1, "send_act", NodeType.COMM_SEND_NODE, [0], 0,
             [("is_cpu_op", False), ("comm_size", 1 << 20), ("tensor_size", 1 << 20), ("comm_tag", 7),
              ("comm_src", me), ("comm_dst", nxt)]),
        node(2, "grads", NodeType.COMM_COLL_NODE, [0], 0, [("is_cpu_op", False), ("comm_type", 0),
                                                           ("comm_size", 1 << 26), ("pg_name", dp)]),
        node(3, "opt", NodeType.COMP_NODE, [0], 3, [("is_cpu_op", False)]),
    ]


def test_stamped_nodes_equal_directly_built_nodes() -> None:
    tpl = _template()
    for me, nxt, dp in ((0, 4, "1"), (5, 9, "12")):
        got = [Node.FromString(p) for p in tpl.payloads({"me": me, "next": nxt, "dp": dp})]
        # Stamped attributes come after the fixed ones; as sets of (name, value) the nodes agree fully.
        for a, b in zip(got, _expected(me, nxt, dp)):
            assert (a.id, a.name, a.type, list(a.data_deps), a.duration_micros) == \
                   (b.id, b.name, b.type, list(b.data_deps), b.duration_micros)
            assert sorted(x.SerializeToString() for x in a.attr) == sorted(x.SerializeToString() for x in b.attr)


def test_attr_field_is_the_node_encoding() -> None:
    node = Node(id=1)
    node.attr.append(make_attr("comm_dst", 300))
    assert Node(id=1).SerializeToString() + attr_field("comm_dst", 300) == node.SerializeToString()
    assert attr_field("pg_name", 3) == attr_field("pg_name", "3")


def test_missing_param_is_named() -> None:
    with pytest.raises(KeyError, match="'next'"):
        _template().payloads({"me": 0, "dp": "1"})


def test_files_equal_memory_through_a_process_pool(tmp_path) -> None:
    tpl = _template()
    other = TraceTemplate(GlobalMetadata(version="1.0.0"))
    other.comp("idle", 1)
    plans = [RankPlan(r, "worker" if r % 3 else "idle", {"me": r, "next": (r + 1) % 10, "dp": str(r % 2 + 1)})
             for r in range(10)]
    templates = {"worker": tpl, "idle": other}
    groups = {"1": [0, 2, 4, 6, 8], "2": [1, 3, 5, 7, 9]}
    paths = write_job(tmp_path / "job", plans, templates, groups=groups, executor=ProcessExecutor(2), chunk=3)
    assert [p.name for p in paths] == [f"job.{r}.et" for r in range(10)]
    on_disk = load_job(tmp_path / "job")
    memory = build_job(plans, templates, groups=groups)
    assert on_disk.groups == memory.groups
    for r in range(10):
        assert list(on_disk.traces[r].records()) == list(memory.traces[r].records())
    with open_trace(paths[0]) as reader:
        assert reader.metadata.version == "1.0.0"
    with pytest.raises(KeyError, match="no template"):
        write_job(tmp_path / "x", [RankPlan(0, "nobody")], templates)
