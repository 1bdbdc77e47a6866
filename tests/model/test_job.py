"""Jobs: finding rank files from a prefix, loading them, process groups."""

from __future__ import annotations

from pathlib import Path

import pytest

from etkit.errors import UsageError
from etkit.executor import ProcessExecutor, SerialExecutor
from etkit.format.schema import CommType
from etkit.model import ProcessGroups, discover, load_job
from etkit.model.groups import parse_process_group_init

from ..builders import coll, node, write_job


def test_discover_prefix_files_and_gzip(tmp_path: Path) -> None:
    write_job(tmp_path / "j", [[node(1)]] * 3)
    (tmp_path / "j.2.et").rename(tmp_path / "j.2.et.gz")
    (tmp_path / "j.x.et").write_bytes(b"")
    (tmp_path / "jj.0.et").write_bytes(b"")
    files, prefix = discover(tmp_path / "j")
    assert [f.rank for f in files] == [0, 1, 2] and prefix == str(tmp_path / "j")
    files, _ = discover([tmp_path / "j.1.et", tmp_path / "j.0.et"])
    assert [f.rank for f in files] == [0, 1]
    with pytest.raises(UsageError, match="no file"):
        discover(tmp_path / "nope")


def test_load_job_in_processes_matches_serial(tmp_path: Path) -> None:
    write_job(tmp_path / "j", [[node(1), coll(2, CommType.ALL_REDUCE, 8, deps=[1], pg="1")]] * 4)
    ProcessGroups.from_mapping({"1": [0, 1, 2, 3]}).write(tmp_path / "j.comm_groups.json")
    a = load_job(tmp_path / "j", executor=ProcessExecutor(2))
    b = load_job(tmp_path / "j", executor=SerialExecutor())
    assert a.ranks == b.ranks == [0, 1, 2, 3] and a.world_size == 4
    assert a.members("1") == (0, 1, 2, 3) and a.members("") == (0, 1, 2, 3)
    assert [list(t.comm_size) for t in a.traces.values()] == [list(t.comm_size) for t in b.traces.values()]
    a.write(tmp_path / "copy")
    assert (tmp_path / "copy.3.et").read_bytes() == (tmp_path / "j.3.et").read_bytes()
    assert ProcessGroups.load(tmp_path / "copy.comm_groups.json").groups == {"1": (0, 1, 2, 3)}


def test_process_group_init_is_parsed_safely() -> None:
    groups = parse_process_group_init(str(['[{"pg_name": "0", "ranks": []}, {"pg_name": "3", "ranks": [2, 0]}]']))
    assert groups.members("3", 4) == (0, 2) and groups.members("0", 4) == (0, 1, 2, 3)
    assert parse_process_group_init("__import__('os').system('false')").groups == {}


def test_writing_a_smaller_job_over_a_bigger_one_leaves_no_stale_ranks(tmp_path: Path) -> None:
    from etkit.model.job import Job
    from etkit.model.trace import Trace

    write_job(tmp_path / "j", [[node(1)]] * 4)
    ProcessGroups.from_mapping({"1": [0, 1]}).write(tmp_path / "j.comm_groups.json")
    (tmp_path / "j.1.et.gz").write_bytes(b"")  # the other compression of a rank about to be written
    (tmp_path / "other.0.et").write_bytes(b"")  # another job's file stays
    small = Job({0: Trace.from_nodes(None, [node(1)]), 1: Trace.from_nodes(None, [node(2)])})
    small.write(tmp_path / "j")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.0.et", "j.1.et", "other.0.et"]
    assert load_job(tmp_path / "j", executor=SerialExecutor()).ranks == [0, 1]
