"""One collective on group layouts: the layout syntax, pg_name per rank, comm groups, p2p lowering."""

from __future__ import annotations

import json

import numpy as np
import pytest

from etkit.cli.main import main
from etkit.errors import UsageError
from etkit.format.schema import CommType, NodeType
from etkit.generate import collective, parse_groups, write_collective
from etkit.model import load_job
from etkit.units import parse_size
from etkit.validate import validate, validate_job

from .p2p_checks import assert_sends_match_recvs, ranks_before_end


@pytest.mark.parametrize(("text", "size"), [("1MiB", 1 << 20), ("1MB", 10**6), ("64KiB", 65_536), ("4096", 4096),
                                           ("2 GiB", 2 << 30), ("0.5KiB", 512), ("7b", 7)])
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["1MiBs", "-4", "0.3B", "MiB", ""])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_size(text)


def test_group_layouts() -> None:
    assert parse_groups(4) == [(0, 1, 2, 3)]
    assert parse_groups(8, ["0-3", "4-7"]) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert parse_groups(8, "0,2,4,6 1,3,5,7") == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert parse_groups(6, "0-1,4;2-3,5") == [(0, 1, 4), (2, 3, 5)]
    assert parse_groups(8, group_size=2) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert parse_groups(8, group_size=4, stride=2) == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert parse_groups(12, group_size=2, stride=3) == [(0, 3), (1, 4), (2, 5), (6, 9), (7, 10), (8, 11)]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"groups": "0-3 3-7"}, "must not overlap"),
    ({"groups": "0-3 4-6"}, "rank 7 is in no group"),
    ({"groups": "0-8"}, "outside 0..7"),
    ({"groups": "0-x"}, "not a rank or a range"),
    ({"groups": "3-1"}, "backwards"),
    ({"group_size": 3}, "multiple of 3"),
    ({"group_size": 2, "stride": 3}, "multiple of 6"),
    ({"groups": "0-7", "group_size": 2}, "not both"),
])
def test_group_layout_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_groups(8, **kwargs)


@pytest.mark.parametrize("comm", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("layout", [{}, {"groups": "0-3 4-7"}, {"group_size": 2, "stride": 2}])
def test_native_collective_on_layouts(comm: str, layout: dict) -> None:
    job = collective(comm, "1MiB", 8, **layout)
    groups = parse_groups(8, layout.get("groups"), group_size=layout.get("group_size"),
                          stride=layout.get("stride", 1))
    for rank, trace in job.traces.items():
        assert list(trace.types) == [NodeType.COMM_COLL_NODE]
        assert trace.comm_type[0] == CommType[comm.upper()] and trace.comm_size[0] == 1 << 20
        members = job.members(trace.pg_names()[0])
        assert rank in members and members in groups
    if len(groups) == 1:
        assert not job.groups.groups and trace.pg_idx[0] == -1
    assert validate_job(job).ok


@pytest.mark.parametrize("root", [0, 2])
def test_broadcast_stays_in_groups_and_reaches_every_member(root: int) -> None:
    groups = [(0, 2, 4, 6, 8), (1, 3, 5, 7, 9)]
    job = collective("broadcast", "3MB", 10, group_size=5, stride=2, root=root)
    sends = assert_sends_match_recvs(job)
    seen = ranks_before_end(job)
    for members in groups:
        root_rank = members[root]
        receivers = sorted(dst for src, dst, _, _ in sends if src in members)
        assert receivers == sorted(set(members) - {root_rank})
        assert all(dst in members for src, dst, _, _ in sends if src in members)
        assert all(root_rank in seen[r] for r in members)
    assert {size for *_, size in sends} == {3_000_000}
    assert validate_job(job).ok


def test_barrier_per_group() -> None:
    job = collective("barrier", 0, 9, groups="0-2 3-5 6-8")
    assert_sends_match_recvs(job)
    seen = ranks_before_end(job)
    for base in (0, 3, 6):
        for rank in range(base, base + 3):
            assert seen[rank] == set(range(base, base + 3))
    assert validate_job(job).ok


def test_collective_errors() -> None:
    with pytest.raises(UsageError, match="collective type"):
        collective("gossip", 10, 4)
    with pytest.raises(UsageError, match="at least 2 ranks"):
        collective("barrier", 0, 4, group_size=1)
    with pytest.raises(UsageError, match="root 4"):
        collective("broadcast", 10, 8, group_size=4, root=4)


def test_write_and_cli(tmp_path, capsys) -> None:
    paths = write_collective(tmp_path / "ar", "all_reduce", "1MiB", 8, groups=["0-3", "4-7"])
    assert [p.name for p in paths] == [f"ar.{r}.et" for r in range(8)]
    assert json.loads((tmp_path / "ar.comm_groups.json").read_text()) == {"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}
    job = load_job(tmp_path / "ar")
    assert job.members(job.traces[5].pg_names()[0]) == (4, 5, 6, 7)

    prefix = tmp_path / "cli"
    assert main(["generate", "collective", "--type", "all_to_all", "--size", "64KiB", "--npus", "8",
                 "--group-size", "4", "--stride", "2", "-o", str(prefix), "-q"]) == 0
    assert json.loads((tmp_path / "cli.comm_groups.json").read_text()) == {"1": [0, 2, 4, 6], "2": [1, 3, 5, 7]}
    assert validate(prefix).ok
    single = tmp_path / "world"
    assert main(["generate", "collective", "--type", "broadcast", "--npus", "4", "-o", str(single), "-q"]) == 0
    assert not (tmp_path / "world.comm_groups.json").exists()
    assert np.count_nonzero(load_job(single).traces[0].types == NodeType.COMM_SEND_NODE) == 2

    assert main(["generate", "collective", "--type", "all_reduce", "--npus", "8", "--groups", "0-3", "3-7",
                 "-o", str(tmp_path / "bad"), "-q"]) == 2
    assert "must not overlap" in capsys.readouterr().err
