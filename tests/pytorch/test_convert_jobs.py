"""Every shared PyTorch job converts, and what comes out matches the raw traces that went in."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from etkit import load_job
from etkit.executor import SerialExecutor
from etkit.format.schema import CommType, Node, NodeType
from etkit.model.trace import MISSING
from etkit.pytorch.job import convert_job
from etkit.validate import validate_job

from ..conftest import PYTORCH_JOBS
from .raw import host_collectives, kineto_collective_count, load_json, rank_files

JOBS = sorted(p.name for p in PYTORCH_JOBS.iterdir() if p.is_dir()) if PYTORCH_JOBS.is_dir() else []
pytestmark = pytest.mark.shared_data


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Each job converted once (serially: the test machine is small), keyed by job name."""
    cache = {}

    def get(name: str):
        if name not in cache:
            prefix = tmp_path_factory.mktemp(name) / "job"
            report = convert_job(PYTORCH_JOBS / name, prefix, executor=SerialExecutor())
            cache[name] = (report, load_job(str(prefix), executor=SerialExecutor()))
        return cache[name]

    return get


def _comm_by_kind(trace) -> list[tuple[str, int, int]]:
    """(kind, size, row) of every comm node, in id order."""
    out = []
    for row in np.argsort(trace.ids, kind="stable"):
        t = int(trace.types[row])
        if t == NodeType.COMM_COLL_NODE:
            out.append((CommType(int(trace.comm_type[row])).name, int(trace.comm_size[row]), int(row)))
        elif t in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
            out.append(("SEND" if t == NodeType.COMM_SEND_NODE else "RECV", int(trace.comm_size[row]), int(row)))
    return out


def test_all_shared_jobs_are_present():
    assert len(JOBS) >= 10


@pytest.mark.parametrize("name", JOBS)
def test_comm_nodes_match_the_collectives_the_job_issued(name, converted):
    report, job = converted(name)
    files = rank_files(PYTORCH_JOBS / name)
    assert sorted(job.traces) == sorted(files)
    for rank, (host, kineto) in files.items():
        calls = host_collectives(host)
        issued = Counter(c["kind"] for c in calls)
        # a second witness: Kineto saw the same c10d calls
        assert sum(kineto_collective_count(kineto).values()) == len(calls)
        nodes = _comm_by_kind(job.traces[rank])
        assert Counter(k for k, _, _ in nodes) == issued, f"rank {rank}"
        # in issue order, kind by kind, the sizes are the tensors' bytes
        assert [(k, s) for k, s, _ in nodes] == [(c["kind"], c["bytes"]) for c in calls], f"rank {rank}"
        rank_report = report.ranks[[r.rank for r in report.ranks].index(rank)]
        assert sum(rank_report.comm_nodes.values()) == len(calls)


@pytest.mark.parametrize("name", JOBS)
def test_whole_job_validates(name, converted):
    _, job = converted(name)
    result = validate_job(job)
    assert result.ok, [str(f) for f in result.errors][:5]
    for trace in job.traces.values():
        comm = np.isin(trace.types, [NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE])
        assert (trace.is_cpu_op[comm] == 0).all()
        assert (trace.comm_size[comm] != MISSING).all()
        assert (trace.pg_idx[comm] >= 0).all()
        # ids are dense and every dependency points backwards: a DAG by construction, no dangling dep
        ids = trace.ids
        assert np.array_equal(np.sort(ids), np.arange(ids.min(), ids.min() + len(ids)))
        for ptr, deps in ((trace.data_ptr, trace.data_deps), (trace.ctrl_ptr, trace.ctrl_deps)):
            owners = np.repeat(ids, np.diff(ptr))
            assert (deps < owners).all()
            assert np.isin(deps, ids).all()


@pytest.mark.parametrize("name", [n for n in JOBS if "pp_" in n])
def test_send_recv_peers_match_across_ranks(name, converted):
    _, job = converted(name)
    sends, recvs = Counter(), Counter()
    for rank, trace in job.traces.items():
        for row in range(len(trace)):
            t = int(trace.types[row])
            key = (int(trace.comm_src[row]), int(trace.comm_dst[row]), int(trace.comm_tag[row]),
                   int(trace.comm_size[row]))
            if t == NodeType.COMM_SEND_NODE:
                assert key[0] == rank
                sends[key] += 1
            elif t == NodeType.COMM_RECV_NODE:
                assert key[1] == rank
                recvs[key] += 1
    assert sends and sends == recvs
    # and the peers are the ones the raw traces name (group-local == global: world group only)
    for rank, (host, _) in rank_files(PYTORCH_JOBS / name).items():
        raw = Counter((c["kind"], c["peer"], c["tag"], c["bytes"]) for c in host_collectives(host)
                      if c["kind"] in ("SEND", "RECV"))
        mine = Counter()
        for (src, dst, tag, size), n in sends.items():
            if src == rank:
                mine[("SEND", dst, tag, size)] += n
        for (src, dst, tag, size), n in recvs.items():
            if dst == rank:
                mine[("RECV", src, tag, size)] += n
        assert mine == raw


def test_subgroup_collectives_get_their_process_group(converted):
    """hybrid_dp_tp_ws4: tp groups {0,1},{2,3}, dp groups {0,2},{1,3}. Tensor-parallel collectives
    (all_gather / reduce_scatter / the token broadcast) run on the rank's tp group."""
    _, job = converted("hybrid_dp_tp_ws4")
    for rank, trace in job.traces.items():
        info = load_json(rank_files(PYTORCH_JOBS / "hybrid_dp_tp_ws4")[rank][1])["distributedInfo"]
        tp = next(g["pg_name"] for g in info["pg_config"] if g["pg_desc"].startswith("tp") and rank in g["ranks"])
        names = trace.pg_names()
        for row in range(len(trace)):
            if int(trace.types[row]) == NodeType.COMM_COLL_NODE and int(trace.comm_type[row]) in (
                    CommType.ALL_GATHER, CommType.REDUCE_SCATTER, CommType.BROADCAST):
                assert names[row] == tp
        expected = next(g["ranks"] for g in info["pg_config"] if g["pg_name"] == tp)
        assert list(job.groups.members(tp, 4)) == sorted(expected)


def test_timing_comes_from_kineto(converted):
    """A COMM node starts when its gloo work starts (Kineto ts + baseTimeNanoseconds, in µs)."""
    _, job = converted("ddp_mlp_ws2")
    for rank, (_, kineto) in rank_files(PYTORCH_JOBS / "ddp_mlp_ws2").items():
        doc = load_json(kineto)
        base = doc["baseTimeNanoseconds"] / 1000
        gloo = sorted(round(e["ts"] + base) for e in doc["traceEvents"] if e.get("name") == "gloo:all_reduce")
        trace = job.traces[rank]
        coll = trace.types == NodeType.COMM_COLL_NODE
        assert sorted(trace.start[coll].tolist()) == gloo
        comp = trace.types == NodeType.COMP_NODE
        assert (trace.start[comp] > 0).mean() > 0.99


def _self_time(step: dict, events: list[dict]) -> float:
    """Kineto duration of ``step`` minus its direct children's (events on its thread inside it, not inside
    another such event)."""
    end = step["ts"] + step["dur"]
    inside = sorted((e for e in events if e is not step and e["tid"] == step["tid"] and step["ts"] <= e["ts"] < end),
                    key=lambda e: (e["ts"], -e["dur"]))
    covered, reach = 0.0, -1.0
    for e in inside:
        if e["ts"] >= reach:  # a direct child (the previous one has ended)
            covered += min(e["dur"], end - e["ts"])
            reach = e["ts"] + e["dur"]
    return step["dur"] - covered


def test_profiler_steps_keep_kinetos_start_and_self_time(converted):
    """ddp_mlp_ws4 rank 1: ProfilerStep#3 lasts 47.9 ms in Kineto and 24.3 ms in the ET. Both are right: a COMP
    node's duration is the op's self time (its Kineto duration minus its children's), and it starts at the same
    instance's Kineto ts on the Unix clock. The trace's last node ends when the last Kineto op ends (the gloo
    all_reduce on its worker thread); Kineto records nothing between then and the step's end, so that tail
    (7.7 ms) is untraced time in the profiler's own data, not a converter loss."""
    _, job = converted("ddp_mlp_ws4")
    doc = load_json(PYTORCH_JOBS / "ddp_mlp_ws4" / "rank-1.kineto.json")
    base = doc["baseTimeNanoseconds"] / 1000
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    steps = {e["name"]: e for e in events if e["name"].startswith("ProfilerStep#")}
    trace = job.traces[1]
    names = [trace.strings[i] for i in trace.name_idx.tolist()]
    rows = {name: row for row, name in enumerate(names) if name.startswith("ProfilerStep#")}
    assert sorted(rows) == sorted(steps) == ["ProfilerStep#2", "ProfilerStep#3"]
    for name, step in steps.items():
        row = rows[name]
        assert abs(int(trace.start[row]) - (step["ts"] + base)) <= 1
        assert abs(int(trace.duration[row]) - _self_time(step, events)) <= 1
    step3 = steps["ProfilerStep#3"]
    assert step3["dur"] > 47_000 and 24_000 < int(trace.duration[rows["ProfilerStep#3"]]) < 25_000
    last_op_end = max(e["ts"] + e["dur"] for e in events if not e["name"].startswith("ProfilerStep#"))
    assert abs(int((trace.start + trace.duration).max()) - (last_op_end + base)) <= 1
    assert step3["ts"] + step3["dur"] - last_op_end > 5_000  # the untraced tail lies in Kineto itself


def test_records_are_what_protobuf_writes(converted):
    """Nodes are assembled from pre-encoded pieces: each record must equal protobuf's serialization of the
    Node it decodes to (field order, omitted defaults, packed deps, attribute framing)."""
    for name in ("ddp_mlp_ws2", "pp_sendrecv_ws2", "cnn_single"):
        _, job = converted(name)
        for trace in job.traces.values():
            for record in trace.records():
                assert Node.FromString(record).SerializeToString() == record


def test_convert_job_removes_files_of_an_older_bigger_job(converted, tmp_path):
    """A 2-rank job written over a 4-rank one (plain and gzip files) leaves only its own ranks."""
    report4, _ = converted("ddp_mlp_ws4")
    prefix = tmp_path / "job"
    for rank, path in enumerate(report4.files):
        shutil.copy(path, f"{prefix}.{rank}.et")
    shutil.copy(report4.files[0], f"{prefix}.0.et.gz")  # the other compression of a rank written again
    shutil.copy(report4.comm_groups, f"{prefix}.comm_groups.json")
    report = convert_job(PYTORCH_JOBS / "ddp_mlp_ws2", prefix, executor=SerialExecutor())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.0.et", "job.1.et", "job.comm_groups.json"]
    assert sorted(Path(p).name for p in report.removed) == ["job.0.et.gz", "job.2.et", "job.3.et"]
    assert sorted(load_job(str(prefix), executor=SerialExecutor()).traces) == [0, 1]
    # a job without process groups also drops the old groups file
    single = convert_job(PYTORCH_JOBS / "cnn_single", prefix, executor=SerialExecutor())
    assert single.comm_groups is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.0.et"]


@pytest.mark.parametrize("name", ["pp_sendrecv_ws2", "hybrid_dp_tp_ws4", "fsdp2_mlp_ws2"])
def test_host_traces_alone_convert_to_the_same_communication(name, tmp_path):
    """Without Kineto there is no nesting to repair the tree with: gloo ops are still paired with their c10d
    op by tensor identity, so each collective is still exactly one COMM node."""
    job_dir = tmp_path / "hosts"
    job_dir.mkdir()
    files = rank_files(PYTORCH_JOBS / name)
    for host, _ in files.values():
        (job_dir / host.name).write_bytes(host.read_bytes())
    report = convert_job(job_dir, tmp_path / "job", executor=SerialExecutor())
    job = load_job(str(tmp_path / "job"), executor=SerialExecutor())
    for rank, (host, _) in files.items():
        calls = host_collectives(host)
        assert [(k, s) for k, s, _ in _comm_by_kind(job.traces[rank])] == [(c["kind"], c["bytes"]) for c in calls]
        rank_report = report.ranks[rank]
        assert not rank_report.durations_known
        if name.startswith("hybrid"):  # subgroups, and no Kineto worker threads to tell them apart
            assert rank_report.pg_assumed == len(calls) and rank_report.warnings
    assert validate_job(job).ok
