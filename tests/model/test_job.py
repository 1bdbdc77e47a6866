"""Jobs: finding rank files from a prefix, loading them, process groups."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etkit.errors import UsageError
from etkit.executor import ProcessExecutor, SerialExecutor
from etkit.format.columnar import HOT_INT_ATTRS, NODE_COLUMNS
from etkit.format.schema import CommType
from etkit.model import ProcessGroups, discover, load_job
from etkit.model.groups import parse_process_group_init
from etkit.model.job import rank_batches
from etkit.model.trace import load_trace

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


def test_rank_batches_keep_the_order_and_split_by_size(tmp_path: Path) -> None:
    ranks = [[node(i) for i in range(1, 2 + (r * 37) % 50)] for r in range(40)]
    files, _ = discover(write_job(tmp_path / "j", ranks))
    sizes = {str(f.path): f.path.stat().st_size for f in files}
    for batch_bytes, min_batches in ((1 << 24, 16), (600, 1), (1, 1), (1 << 24, 1)):
        batches = rank_batches(files, batch_bytes=batch_bytes, min_batches=min_batches)
        assert [item for batch in batches for item in batch] == [(f.rank, str(f.path)) for f in files]
        target = max(1, min(batch_bytes, sum(sizes.values()) // min_batches))
        assert all(len(b) == 1 or sum(sizes[p] for _, p in b) <= target for b in batches)
        assert all(sum(sizes[p] for _, p in b) + sizes[n[0][1]] > target for b, n in zip(batches, batches[1:]))
    assert len(rank_batches(files)) >= 16 and len(rank_batches(files, min_batches=1)) == 1
    assert rank_batches(files[:1]) == [[(0, str(files[0].path))]]


@pytest.mark.shared_data
def test_load_job_reads_batches_as_load_trace_reads_each_file(upstream: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank files read together (one batch for the whole job) are the traces load_trace gives file by file:
    every column, the names, process-group names, metadata and record bytes."""
    monkeypatch.setattr("etkit.model.job.MIN_BATCHES", 1)
    for prefix in ("generated-by-stage-3a7f49c/tp4_pp2_recompute/workload",
                   "generated-by-upstream-chakra-21585d8/text_converter_npus4_passes1/Resnet50_DataParallel"):
        job = load_job(upstream / prefix, executor=SerialExecutor())
        files, _ = discover(upstream / prefix)
        assert len(files) > 1 and sorted(job.traces) == [f.rank for f in files]
        for f in files:
            got, one = job.traces[f.rank], load_trace(f.path)
            for column in NODE_COLUMNS + HOT_INT_ATTRS + ("rec_off", "rec_len"):
                if column not in ("name_idx", "strings", "pg_idx"):
                    assert np.array_equal(getattr(got, column), getattr(one, column)), (f.path, column)
            assert list(got.names) == list(one.names) and list(got.pg_names()) == list(one.pg_names())
            assert (got.blob, got.metadata, got.metadata_record, got.path) == (one.blob, one.metadata,
                                                                              one.metadata_record, one.path)
