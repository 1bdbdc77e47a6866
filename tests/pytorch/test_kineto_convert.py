"""``etkit convert kineto``: Chakra ETs from Kineto traces alone, checked against the raw traces and against
the host-trace path.

- every GPU kernel, copy and set of every real Kineto trace is a node on its stream, at its measured ns
  start and duration (read here independently from the JSON), copies and sets as memory nodes; CUDA
  runtime calls are host ops, each kernel's launcher;
- every file passes ``etkit validate``'s per-file rules, a whole job every rule;
- on the shared CPU (gloo) jobs, the communication nodes (type, size, group, peers, tag, start and
  duration) are the same as converting the host execution trace with its Kineto trace;
- NCCL collectives take their size and group from record_param_comms / the kernel's args.
"""

from __future__ import annotations

import gzip
from decimal import Decimal
from pathlib import Path

import numpy as np
import orjson
import pytest

from etkit.format.attrs import PROFILER_CATEGORIES
from etkit.format.schema import CommType, NodeType
from etkit.model.job import load_job
from etkit.model.trace import MISSING, load_trace
from etkit.validate import validate, validate_trace

from ..conftest import KINETO_TRACES, PYTORCH_JOBS
from .raw import stream_order_breaks

pytestmark = pytest.mark.shared_data
GPU = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME = PROFILER_CATEGORIES.index("cuda_runtime")


def _events(path: Path) -> tuple[list[dict], int]:
    if path.is_dir():
        (path,) = [p for p in path.iterdir() if p.name.endswith((".json", ".json.gz"))]
    raw = path.read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"], int(doc.get("baseTimeNanoseconds") or 0)


def _ns(value) -> int:
    return int(Decimal(repr(value)) * 1000)


def _rank_file(prefix: Path) -> Path:
    (path,) = sorted(prefix.parent.glob(prefix.name + ".*.et"))
    return path


@pytest.mark.parametrize("name", sorted(KINETO_TRACES))
def test_every_gpu_event_is_a_node_of_its_stream(kineto_converted, name):
    prefix = kineto_converted(name)
    trace = load_trace(_rank_file(prefix))
    events, base = _events(KINETO_TRACES[name])
    wanted = sorted((int(e["args"]["stream"]), base + _ns(e["ts"]), _ns(e["dur"]), e["name"]) for e in events
                    if e.get("cat") in GPU or (e.get("cat") == "cuda_sync" and e["args"].get("stream", -1) >= 0))
    on_stream = np.flatnonzero((trace.stream != MISSING) & (trace.cat != PROFILER_CATEGORIES.index("gpu_user_annotation")))
    comm = set(trace.comm_rows().tolist())  # an NCCL kernel is its collective's COMM node, named by the call
    got = sorted((int(trace.stream[r]), int(trace.ts_ns[r]), int(trace.dur_ns[r]), trace.name(r)) for r in on_stream)
    assert [g[:3] for g in got] == [w[:3] for w in wanted]
    named = {g for g, r in zip(got, sorted(on_stream, key=lambda r: (int(trace.stream[r]), int(trace.ts_ns[r]),
                                                                     int(trace.dur_ns[r]), trace.name(r))))
             if r not in comm}
    assert named <= set(wanted)
    memory = (trace.types == NodeType.MEM_LOAD_NODE) | (trace.types == NodeType.MEM_STORE_NODE)
    copies = sum(1 for e in events if e.get("cat") in ("gpu_memcpy", "gpu_memset"))
    assert int(memory.sum()) == copies
    runtime = int((trace.cat == RUNTIME).sum())
    assert runtime == sum(1 for e in events if e.get("cat") == "cuda_runtime")
    # a kernel launched by a runtime call in the trace hangs under it
    kernels = np.asarray([r for r in on_stream if r not in comm], dtype=np.int64)
    launched = kernels[trace.ctrl_ptr[kernels + 1] > trace.ctrl_ptr[kernels]]
    parents = trace.rows_of(trace.ctrl_deps[trace.ctrl_ptr[launched]])
    assert (trace.cat[parents] == RUNTIME).all()
    assert validate_trace(trace) == []  # every per-file rule of etkit validate


@pytest.mark.parametrize("name", sorted(KINETO_TRACES))
def test_every_gpu_activity_follows_the_one_before_it_on_its_stream(kineto_converted, name):
    """Also where nodes are written in another order: a COMM node that ran as a kernel comes at its call, maybe
    before kernels that ran ahead of it on its stream (hta-diff-test), and still depends on the one before it."""
    pairs, breaks = stream_order_breaks(load_trace(_rank_file(kineto_converted(name))))
    assert breaks == [], (pairs, breaks[:3])


@pytest.mark.parametrize("job", ["ddp_mlp_ws2", "pp_sendrecv_ws2", "tp_transformer_ws4", "all_to_all_ws4"])
def test_cpu_job_comm_is_the_same_as_from_the_host_trace(tmp_path, converted_job, job):
    from etkit.executor import SerialExecutor
    from etkit.pytorch.kineto_convert import convert_kineto

    convert_kineto(PYTORCH_JOBS / job, tmp_path / "k", executor=SerialExecutor())
    host = load_job(converted_job(job), executor=SerialExecutor())
    alone = load_job(tmp_path / "k", executor=SerialExecutor())
    assert validate(tmp_path / "k").ok
    for rank, trace in host.traces.items():
        other = alone.traces[rank]

        def comm(t):
            rows = t.comm_rows()
            return [(int(t.types[r]), int(t.comm_type[r]), int(t.comm_size[r]), t.pg_names()[r], int(t.comm_src[r]),
                     int(t.comm_dst[r]), int(t.comm_tag[r]), int(t.start[r]), int(t.duration[r])) for r in rows]
        assert comm(other) == comm(trace) != []
    assert alone.groups == host.groups


def test_nccl_collectives_take_size_and_group_from_the_trace(kineto_converted):
    trace = load_trace(_rank_file(kineto_converted("hta-nccl")))
    events, _ = _events(KINETO_TRACES["hta-nccl"])
    itemsize = {"Float": 4, "Long": 8}
    kernels = sorted((e["args"]["Collective name"], e["args"]["In msg nelems"] * itemsize[e["args"]["dtype"]])
                     for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl"))
    rows = trace.comm_rows()
    names = {CommType.ALL_REDUCE: "allreduce", CommType.BROADCAST: "broadcast"}
    got = sorted((names[CommType(int(trace.comm_type[r]))], int(trace.comm_size[r])) for r in rows)
    assert got == kernels  # every NCCL kernel is one COMM node of its collective
    assert set(trace.pg_names()[rows]) == {"0"} and (trace.stream[rows] == 40).all()


def test_cli_converts_a_folder_and_says_what_it_wrote(tmp_path, capsys):
    from etkit.cli.main import main

    assert main(["convert", "kineto", str(KINETO_TRACES["hta-event-sync-streams"]), "-o", str(tmp_path / "s"),
                 "-q", "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "GPU: 7 kernels/copies/sets/stream syncs (3 copies/sets as MEM nodes)" in out and "wrote 1 ET files" in out
    trace = load_trace(tmp_path / "s.0.et")
    # the multi-stream event syncs are dependencies: a kernel waits for the other stream's work
    gpu = np.flatnonzero(trace.stream != MISSING)
    streams = {int(trace.stream[r]) for r in gpu}
    crossing = [r for r in gpu for d in trace.deps_of(r) if int(trace.stream[trace.row_of(int(d))])
                not in (MISSING, int(trace.stream[r]))]
    assert len(streams) == 3 and crossing


def _same_trace(a, b) -> None:
    """Every column, the record bytes and the metadata of two traces are equal (their paths aside; the metadata
    decoded, which a trace in memory does when it is first read)."""
    assert a.metadata == b.metadata
    for name in a.__dataclass_fields__:
        if name in ("path", "_order", "metadata_message"):
            continue
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), name
        else:
            assert x == y, name


@pytest.mark.parametrize("name", ["hta-nccl", "hta-event-sync-streams", "pp_sendrecv_ws2", "hybrid_dp_tp_ws4"])
def test_a_job_converted_in_memory_is_the_one_written_and_read_back(tmp_path, name):
    """What analyze/report/timeline/diff hold of a Kineto input (converted in memory, no file) is what
    ``etkit convert kineto`` writes, read back: every rank's columns and record bytes, and the process groups
    (NCCL, cross-stream waits, gloo send/recv in pp_sendrecv, several groups in hybrid_dp_tp)."""
    from etkit.executor import SerialExecutor
    from etkit.model.groups import ProcessGroups
    from etkit.pytorch.kineto_convert import convert_kineto, load_kineto_job

    spec = KINETO_TRACES.get(name) or PYTORCH_JOBS / name
    report = convert_kineto(spec, tmp_path / "k", executor=SerialExecutor())
    job = load_kineto_job(spec, executor=SerialExecutor())
    assert sorted(job.traces) == sorted(r.rank for r in report.ranks)
    for r in report.ranks:
        _same_trace(load_trace(r.path), job.traces[r.rank])
        assert not Path(job.traces[r.rank].path).exists()  # named after its Kineto file, never a file itself
    assert job.groups == (ProcessGroups.load(report.comm_groups) if report.comm_groups else ProcessGroups())
    assert sorted(load_kineto_job(spec, executor=SerialExecutor(), ranks=[max(job.traces)]).traces) == [max(job.traces)]


@pytest.mark.parametrize("name", ["hta-nccl", "hta-event-sync-streams", "hybrid_dp_tp_ws4"])
def test_linking_a_kineto_trace_alone_gives_what_the_general_linking_gives(monkeypatch, name):
    """link_kineto's shortcut (every host op is its own Kineto CPU row, so parents and the runtime calls' owners
    come from the nesting as arrays) links exactly as the general host-trace path does on the same rows:
    the same ops (parents, runtime calls), tree, GPU activity and report (the gloo job pairs backend ops)."""
    import dataclasses
    import importlib

    from etkit.pytorch.kineto import load_kineto
    from etkit.pytorch.kineto_convert import kineto_files, link_kineto

    link = importlib.import_module("etkit.pytorch.link")
    path = kineto_files(KINETO_TRACES.get(name) or PYTORCH_JOBS / name)[0].path

    def linked() -> tuple:
        rank = link_kineto(load_kineto(path))
        return ([dataclasses.astuple(op) for op in rank.host.ops], rank.parent.tolist(), rank.thread.tolist(),
                rank.cat.tolist(), [dataclasses.astuple(g) for g in rank.gpu], rank.report.to_json(), rank.runtime_rows)

    shortcut = linked()
    monkeypatch.setattr(link, "_rows_are_ops", lambda rows, k_parent: False)
    general = linked()
    assert shortcut[5]["backend_ops_paired"] or name != "hybrid_dp_tp_ws4"
    assert shortcut == general
