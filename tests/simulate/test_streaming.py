"""Large files: ranks streamed in chunks as columns only, programs in compact arrays, results identical
to simulating the loaded job."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from etkit.errors import TraceFormatError
from etkit.executor import SerialExecutor
from etkit.model.job import groups_from_trace, load_job
from etkit.model.trace import load_trace
from etkit.simulate import Knobs, load_config, loader, simulate
from etkit.simulate.loader import load_columns
from etkit.simulate.synthetic import write_pytorch_like
from etkit.simulate.workload import build_program

JOBS = ("pp_sendrecv_ws2", "hybrid_dp_tp_ws4", "tp_transformer_ws2", "cnn_single")
COLUMNS = ("ids", "types", "start", "duration", "data_ptr", "data_deps", "ctrl_ptr", "ctrl_deps", "is_cpu_op",
           "comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "num_ops", "tensor_size", "tid")


@pytest.fixture(scope="module")
def converted(converted_job) -> dict[str, Path]:
    return {name: converted_job(name) for name in JOBS}


def same_results(a, b) -> None:
    assert a.ranks == b.ranks
    for rank, sched in a.schedule.ranks.items():
        other = b.schedule.ranks[rank]
        assert np.array_equal(sched.start_ns, other.start_ns) and np.array_equal(sched.end_ns, other.end_ns)
        assert np.array_equal(sched.ran, other.ran)


@pytest.mark.shared_data
@pytest.mark.parametrize("chunk", [97, 1 << 17])
def test_streamed_columns_equal_the_loaded_trace(converted, chunk: int) -> None:
    for path in sorted(p for prefix in converted.values() for p in prefix.parent.glob(f"{prefix.name}.*.et")):
        trace, rank = load_trace(path), load_columns(path, chunk)
        for name in COLUMNS:
            assert np.array_equal(getattr(trace, name), getattr(rank.trace, name)), (path.name, name)
        assert [trace.name(i) for i in range(len(trace))] == [rank.trace.name(i) for i in range(len(trace))]
        assert list(trace.pg_names()) == list(rank.trace.pg_names())
        assert rank.groups.groups == groups_from_trace(trace).groups
        assert rank.trace.blob == b"" and not len(rank.trace.rec_off)  # the record bytes are not kept


@pytest.mark.shared_data
@pytest.mark.parametrize("name", JOBS)
def test_streamed_simulation_equals_the_loaded_job(converted, name: str, monkeypatch) -> None:
    monkeypatch.setattr(loader, "CHUNK_RECORDS", 97)  # several chunks per rank
    network, system, _ = load_config(preset="hgx-h100")
    prefix = converted[name]
    for knobs in (Knobs(), Knobs(measured_start=True, symmetry=False)):
        streamed = simulate(str(prefix), network, system, knobs)
        loaded = simulate(load_job(prefix, executor=SerialExecutor()), network, system, knobs)
        same_results(streamed, loaded)
        assert streamed.nodes == loaded.nodes == sum(len(load_trace(p)) for p in prefix.parent.glob(f"{name}.*.et"))


def test_generated_llm_job_streams_the_same(tmp_path, monkeypatch) -> None:
    from etkit.generate.llm import llm

    monkeypatch.setattr(loader, "CHUNK_RECORDS", 50)
    job = llm("llama3-8b", dp=2, tp=2, pp=2, microbatches=4, layers=2).to_job()
    job.write(tmp_path / "llm")
    network, system, _ = load_config(preset="hgx-h100")
    loaded = simulate(job, network, system)
    same_results(simulate(str(tmp_path / "llm"), network, system), loaded)
    same_results(simulate(str(tmp_path / "llm"), network, system, executor=SerialExecutor()), loaded)  # one task a rank


def test_program_is_compact_and_keeps_no_trace(tmp_path) -> None:
    path = tmp_path / "big.0.et"
    n = 60_000
    write_pytorch_like(path, n)
    trace = load_columns(path).trace
    network, system, _ = load_config(preset="hgx-h100")
    program = build_program(trace, 0, system, Knobs())
    assert not any(v is trace for v in vars(program).values())
    edges = len(program.child_idx)
    held = sum(a.itemsize * len(a) for a in vars(program).values() if hasattr(a, "itemsize"))
    assert held <= 81 * n + 8 * (edges + 1)  # the documented cost: 81 bytes a node + 8 a dependency
    tracemalloc.start()
    result = simulate(str(path), network, system)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.nodes == n and result.schedule.ranks[0].ran.all()
    # the documented budget: columns while the program is built, then the program and results, plus a
    # chunk being decoded (a loaded Trace and list program took about 750 bytes a node here)
    assert peak < 300 * n + 10 * 2**20


@pytest.mark.shared_data
def test_small_files_read_whole_give_the_streamed_columns(upstream: Path) -> None:
    """Small plain files are loaded whole (vectorised framing and decoding); the columns, names, process groups
    and metadata are those of the chunked stream."""
    files = sorted(p for p in upstream.rglob("*.et"))
    assert len(files) > 100
    kept = ("ids", "types", "start", "duration", "data_ptr", "data_deps", "ctrl_ptr", "ctrl_deps", "is_cpu_op",
            "comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "num_ops", "tensor_size", "tid")
    for path in files:
        assert loader._small_plain_file(path)
        whole, streamed = load_columns(path), load_columns(path, chunk=loader.CHUNK_RECORDS)
        for column in kept:
            assert np.array_equal(getattr(whole.trace, column), getattr(streamed.trace, column)), (path, column)
        assert list(whole.trace.names) == list(streamed.trace.names)
        assert list(whole.trace.pg_names()) == list(streamed.trace.pg_names())
        assert whole.groups == streamed.groups and whole.trace.blob == streamed.trace.blob == b""
        assert (whole.trace.metadata, whole.trace.metadata_record) == (streamed.trace.metadata,
                                                                      streamed.trace.metadata_record)


@pytest.mark.shared_data
def test_many_files_loaded_together_give_each_file_s_columns(upstream: Path, tmp_path: Path) -> None:
    """load_ranks_many reads runs of small plain files together: per file, the columns, names, groups and
    metadata of load_columns, and the calls comm_record finds; a gzip file between them is streamed in its
    place, and an unreadable file raises its own error after the files before it."""
    from etkit.model.matching import comm_record

    files = sorted(upstream.glob("generated-by-stage-3a7f49c/*/*.et"))
    files += sorted(upstream.glob("generated-by-upstream-chakra-21585d8/text_converter_npus4_passes1/Resnet50*.et"))
    gz = tmp_path / "x.0.et.gz"
    gz.write_bytes(gzip.compress(files[0].read_bytes()))
    paths = [*files[:5], gz, *files[5:]]
    many = list(loader.load_ranks_many(list(enumerate(paths))))
    assert len(many) == len(paths)
    for rank, (path, (got, record)) in enumerate(zip(paths, many)):
        one = load_columns(path)
        alone = comm_record(one.trace, rank)
        for name in ("coll_rows", "coll_ids", "coll_type", "coll_size", "send_rows", "send_ids", "send_peer",
                     "send_tag", "send_size", "recv_rows", "recv_ids", "recv_peer", "recv_tag", "recv_size"):
            assert np.array_equal(getattr(record, name), getattr(alone, name)), (path, name)
        assert [record.pg_table[i] for i in record.coll_pg_idx] == [alone.pg_table[i] for i in alone.coll_pg_idx]
        for column in COLUMNS:
            assert np.array_equal(getattr(got.trace, column), getattr(one.trace, column)), (path, column)
        assert list(got.trace.names) == list(one.trace.names) and got.trace.path == str(path)
        assert list(got.trace.pg_names()) == list(one.trace.pg_names()) and got.groups == one.groups
        assert (got.trace.metadata, got.trace.metadata_record) == (one.trace.metadata, one.trace.metadata_record)
    bad = tmp_path / "bad.1.et"
    bad.write_bytes(files[1].read_bytes()[:-3])
    seen = []
    with pytest.raises(TraceFormatError, match="bad.1.et"):
        for got, _ in loader.load_ranks_many(list(enumerate([files[0], bad, files[2]]))):
            seen.append(got.trace.path)
    assert seen == [str(files[0])]


@pytest.mark.shared_data
def test_ranks_taken_without_names_have_the_same_shapes(upstream: Path, tmp_path: Path) -> None:
    """The simulator takes each rank's shape from columns loaded without node names (names=False: whole files,
    runs of small files, a gzip file streamed in chunks): every other column, the pg names, the groups and the
    shape (digest, pg names, peers) are those of the columns with names."""
    from etkit.model.matching import comm_record
    from etkit.simulate import _Ranks
    from etkit.simulate.workload import rank_shape

    files = sorted(upstream.glob("generated-by-stage-3a7f49c/*/*.et"))
    gz = tmp_path / "x.0.et.gz"
    gz.write_bytes(gzip.compress(files[0].read_bytes()))
    paths = [*files[:3], gz, *files[3:]]
    for path, (bare, _), (named, _) in zip(paths, loader.load_ranks_many(list(enumerate(paths)), names=False),
                                           loader.load_ranks_many(list(enumerate(paths)))):
        for column in COLUMNS:
            assert np.array_equal(getattr(bare.trace, column), getattr(named.trace, column)), (path, column)
        if path != gz:  # (a streamed chunk of few records is parsed record by record: names and all)
            assert (bare.trace.name_idx == -1).all() and (named.trace.name_idx >= 0).any()
        assert list(bare.trace.pg_names()) == list(named.trace.pg_names()) and bare.groups == named.groups
        assert rank_shape(bare.trace, 3) == rank_shape(named.trace, 3)
        a, b = comm_record(bare.trace, 3), comm_record(named.trace, 3)
        assert [a.pg_table[i] for i in a.coll_pg_idx] == [b.pg_table[i] for i in b.coll_pg_idx]
    big = next(upstream.glob("generated-by-upstream-chakra-21585d8/pytorch_converter/resnet_2gpu*host_only.et.gz"))
    streamed, named_stream = loader.load_columns(big, names=False), loader.load_columns(big)  # decoded in chunks
    assert (streamed.trace.name_idx == -1).all() and rank_shape(streamed.trace, 0) == rank_shape(named_stream.trace, 0)
    one = _Ranks([files[0]], None)  # a one-rank job keeps its columns, names too, for its program
    assert list(one.trace(0).names) == list(load_trace(files[0]).names)
