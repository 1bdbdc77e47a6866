"""The feeder walks traces in dependency order, in bounded windows, and never hangs."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from etkit.errors import DependencyError
from etkit.format.attrs import get_bool, get_int
from etkit.format.schema import GlobalMetadata, NodeType
from etkit.format.stream import write_trace
from etkit.model.feeder import Feeder

from ..builders import node


@pytest.fixture(scope="module")
def chakra0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ..conftest import UPSTREAM

    out = tmp_path_factory.mktemp("feeder")
    with tarfile.open(UPSTREAM / "mlcommons-chakra/tests/data/feeder_tests_trace.tar.gz") as tar:
        tar.extractall(out, filter="data")
    return next(out.rglob("chakra.0.et"))


@pytest.mark.shared_data
def test_reference_feeder_expectations(chakra0: Path) -> None:
    feeder = Feeder(chakra0)
    first = feeder.next_issuable()
    assert first.id == 216 and first.type == NodeType.COMP_NODE
    assert get_bool(first.attr, "is_cpu_op") is True and get_int(first.attr, "rf_id") == 2
    assert feeder.children(216)[:3] == [217, 430, 435]
    second = feeder.next_issuable()
    assert second.id == 432 and second.type == NodeType.COMM_COLL_NODE and get_int(second.attr, "rf_id") == 110


@pytest.mark.shared_data
@pytest.mark.parametrize("window", [1, 7, 64, 100_000])
def test_whole_trace_is_walked_in_dependency_order(chakra0: Path, window: int) -> None:
    feeder = Feeder(chakra0, window=window)
    done: set[int] = set()
    for n in feeder:
        assert all(d in done for d in n.data_deps)
        done.add(n.id)
        feeder.finish(n.id)
    assert len(done) == 3664


def test_ready_nodes_come_in_id_order_and_finish_releases_children(tmp_path: Path) -> None:
    write_trace(tmp_path / "t.et", GlobalMetadata(), [node(5), node(3), node(9, deps=[3, 5]), node(4, deps=[3])])
    feeder = Feeder(tmp_path / "t.et")
    assert feeder.issuable_ids() == [3, 5]
    assert feeder.next_issuable().id == 3
    assert feeder.finish(3) == [4]
    assert [feeder.next_issuable().id, feeder.next_issuable().id] == [4, 5]
    assert feeder.finish(5) == [9]
    assert feeder.finish(4) == []
    assert feeder.next_issuable().id == 9
    feeder.finish(9)
    assert not feeder.has_nodes_to_issue()


def test_forward_references_keep_reading_and_window_bounds_memory(tmp_path: Path) -> None:
    nodes = [node(1, deps=[50])] + [node(i) for i in range(2, 51)] + [node(i, deps=[i - 1]) for i in range(51, 200)]
    write_trace(tmp_path / "f.et", GlobalMetadata(), nodes)
    feeder = Feeder(tmp_path / "f.et", window=4)
    peak = 0
    order = []
    for n in feeder:
        peak = max(peak, len(feeder._nodes))
        order.append(n.id)
        feeder.finish(n.id)
    assert sorted(order) == list(range(1, 200)) and order.index(50) < order.index(1)
    assert peak <= 60  # the forward reference to 50 forces 50 nodes in, never the whole file


def test_missing_dependency_is_a_clear_error(tmp_path: Path) -> None:
    write_trace(tmp_path / "m.et", GlobalMetadata(), [node(1), node(2, deps=[77])])
    with pytest.raises(DependencyError, match="node 2 depends on node 77, which is not in the file"):
        Feeder(tmp_path / "m.et")


def test_cycle_raises_instead_of_hanging(tmp_path: Path) -> None:
    write_trace(tmp_path / "c.et", GlobalMetadata(), [node(1), node(2, deps=[3]), node(3, deps=[2])])
    feeder = Feeder(tmp_path / "c.et")
    feeder.finish(feeder.next_issuable().id)
    with pytest.raises(DependencyError, match="cycle"):
        list(feeder)


def test_ctrl_deps_count_in_data_plus_ctrl_mode(tmp_path: Path) -> None:
    write_trace(tmp_path / "k.et", GlobalMetadata(), [node(1), node(2, ctrl=[1])])
    assert Feeder(tmp_path / "k.et").issuable_ids() == [1, 2]
    assert Feeder(tmp_path / "k.et", deps="data+ctrl").issuable_ids() == [1]
