"""Every shared PyTorch job converts, and what comes out matches the raw traces that went in."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from etkit import load_job
from etkit.executor import SerialExecutor
from etkit.format.schema import CommType, NodeType
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


@pytest.mark.parametrize("name", ["pp_sendrecv_ws2", "hybrid_dp_tp_ws4", "fsdp2_mlp_ws2"])
def test_host_traces_alone_convert_to_the_same_communication(name, tmp_path):
    """Without Kineto there is no nesting to repair the tree with: gloo ops are still paired with their c10d
    op by tensor identity, so each collective is still exactly one COMM node."""
    job_dir = tmp_path / "hosts"
    job_dir.mkdir()
    files = rank_files(PYTORCH_JOBS / name)
    for rank, (host, _) in files.items():
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
