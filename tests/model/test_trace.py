"""The columnar Trace: columns match the nodes, lookups work, records are kept losslessly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etkit.format.schema import CommType, GlobalMetadata, NodeType
from etkit.model.trace import MISSING, Trace, load_trace

from ..builders import coll, node, send


def _trace() -> Trace:
    return Trace.from_nodes(GlobalMetadata(version="v"), [
        node(10, duration=3, start=5), coll(20, CommType.ALL_GATHER, 4096, deps=[10], pg="7"),
        send(30, 0, 1, 64, tag=3, deps=[20, 10]), node(40, ctrl=[30], is_cpu_op=True)])


def test_columns_hold_the_node_fields() -> None:
    t = _trace()
    assert len(t) == 4 and t.ids.tolist() == [10, 20, 30, 40]
    assert t.types.tolist() == [NodeType.COMP_NODE, NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE,
                                NodeType.COMP_NODE]
    assert t.names.tolist() == ["COMP_NODE_10", "COMM_COLL_NODE_20", "COMM_SEND_NODE_30", "COMP_NODE_40"]
    assert t.duration.tolist() == [3, 0, 0, 0] and t.start.tolist() == [5, 0, 0, 0]
    assert t.deps_of(2).tolist() == [20, 10] and t.deps_of(3, "ctrl").tolist() == [30]
    assert t.edge_sources().tolist() == [1, 2, 2]
    assert t.comm_type.tolist() == [MISSING, CommType.ALL_GATHER, MISSING, MISSING]
    assert t.comm_size.tolist() == [MISSING, 4096, 64, MISSING]
    assert t.comm_dst[2] == 1 and t.comm_tag[2] == 3
    assert t.is_cpu_op.tolist() == [0, 0, 0, 1]
    assert t.pg_names().tolist() == [None, "7", None, None]
    assert t.comm_rows().tolist() == [1, 2]


def test_lookups() -> None:
    t = _trace()
    assert t.rows_of([40, 10, 99]).tolist() == [3, 0, -1]
    assert t.row_of(30) == 2 and t.name(1) == "COMM_COLL_NODE_20"
    assert t.node(1).id == 20
    empty = Trace.from_nodes(None, [])
    assert len(empty) == 0 and empty.rows_of([1]).tolist() == [-1]



@pytest.mark.parametrize("ids", [[5, 6, 7, 8], [1, 3, 9, 2**63 + 1], [7, 3, 9, 3, 1], [2**64 - 2, 2**64 - 1], [0]],
                         ids=["dense", "increasing", "unordered-repeated", "top-of-range", "single"])
def test_rows_of_agrees_with_a_first_occurrence_lookup(ids: list[int]) -> None:
    t = Trace.from_nodes(None, [node(i) for i in ids])
    first = {}
    for row, node_id in enumerate(ids):
        first.setdefault(node_id, row)
    query = sorted({q for i in ids for q in (i - 1, i, i + 1) if 0 <= q < 2**64} | {0, 2**64 - 1})
    assert t.rows_of(query).tolist() == [first.get(q, -1) for q in query]


def test_write_and_reload_is_identical(tmp_path: Path) -> None:
    t = _trace()
    t.write(tmp_path / "t.0.et")
    back = load_trace(tmp_path / "t.0.et")
    assert back.metadata.version == "v"
    for column in ("ids", "types", "data_ptr", "data_deps", "ctrl_deps", "comm_size", "comm_tag", "is_cpu_op"):
        assert np.array_equal(getattr(back, column), getattr(t, column)), column
    assert list(back.records()) == list(t.records())
