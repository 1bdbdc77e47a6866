"""Figures on real traces: converted PyTorch jobs against Kineto's own timings (read here independently),
and upstream ASTRA-sim vectors against closed forms and ASTRA-sim's published results."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from decimal import Decimal

import numpy as np
import pytest

from etkit.analyze import analyze_job, comm_summary, critical_path
from etkit.analyze.timing import schedule_from_simulation
from etkit.executor import SerialExecutor
from etkit.model.job import Job, load_job

from ..conftest import PYTORCH_JOBS, UPSTREAM

pytestmark = pytest.mark.shared_data
JOBS = ("ddp_mlp_ws2", "pp_sendrecv_ws2", "tp_transformer_ws2")
ASTRA = UPSTREAM / "astra-sim-astra-sim" / "examples"


@pytest.fixture(scope="module")
def converted(converted_job) -> dict[str, Job]:
    return {name: load_job(converted_job(name), executor=SerialExecutor()) for name in JOBS}


def _kineto(job: str, rank: int) -> list[dict]:
    path = next((PYTORCH_JOBS / job).glob(f"rank-{rank}.kineto.json*"))
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return [e for e in json.loads(raw)["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]


def _kineto_times(events: list[dict]) -> tuple[Counter, Counter, Counter]:
    """Per op name: inclusive (dur), exclusive (dur minus directly nested events on its thread), count."""
    total, excl, count = Counter(), Counter(), Counter()
    by_tid = defaultdict(list)
    for e in events:
        by_tid[e["tid"]].append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for e in evs:
            total[e["name"]] += e["dur"]
            excl[e["name"]] += e["dur"]
            count[e["name"]] += 1
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                excl[stack[-1]["name"]] -= e["dur"]
            stack.append(e)
    return total, excl, count


@pytest.mark.parametrize("name", JOBS)
def test_pytorch_figures_match_kineto(converted, name):
    job = converted[name]
    for rank in sorted(job.traces):
        events = _kineto(name, rank)
        one = analyze_job(Job({rank: job.traces[rank]}, job.groups, job.prefix))
        assert one.source == "trace timestamps"
        total, excl, count = _kineto_times(events)
        ops = [o for o in one.top_ops.by_name if o.kind != "comm"]
        assert len(ops) > 20
        for o in ops:  # ET times are whole microseconds: allow 1 us per event
            slack = 1.0 * o.count + 0.01
            assert o.count == count[o.name], o.name
            assert abs(o.exclusive_ns / 1e3 - excl[o.name]) <= slack, (o.name, o.exclusive_ns, excl[o.name])
            # inclusive: exact for leaves; a caller's is rebuilt from its callees (the ET keeps self time
            # only), which misses time folded into collectives and mis-nested async callees
            assert o.total_ns / 1e3 <= 1.05 * total[o.name] + slack, o.name
            if excl[o.name] == total[o.name]:
                assert abs(o.total_ns / 1e3 - total[o.name]) <= slack, o.name
        # communication time is the backend's (gloo:*) execution
        gloo = [e for e in events if e["name"].startswith("gloo:")]
        comm = one.comm.by_rank[rank]
        assert comm.count == len(gloo)
        assert abs(comm.time_ns / 1e3 - sum(e["dur"] for e in gloo)) <= len(gloo) + 0.01
        # the span: within Kineto's first-to-last event window, and not much shorter
        k_span = max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)
        span = one.breakdown.ranks[rank].span_ns / 1e3
        assert 0.98 * k_span <= span <= k_span + 1


@pytest.mark.parametrize("name", JOBS)
def test_measured_times_are_kineto_s_to_the_nanosecond(converted, name):
    """A ``ProfilerStep#``'s inclusive time is Kineto's own, to the ns (callees on other threads and the
    main thread's collectives included), and times are not rounded to float64 epoch ns (multiples of 256)."""
    job = converted[name]
    for rank in sorted(job.traces):
        steps = [e for e in _kineto(name, rank) if e["name"].startswith("ProfilerStep#")]
        one = analyze_job(Job({rank: job.traces[rank]}, job.groups, job.prefix))
        got = {o.name: o.total_ns for o in one.top_ops.by_name if o.name.startswith("ProfilerStep#")}
        assert got == {e["name"]: int(Decimal(repr(e["dur"])) * 1000) for e in steps} != {}
    starts = np.asarray(analyze_job(job).critical_path.start_ns, dtype=np.int64)
    assert len(starts) > 10 and np.mean(starts % 256 == 0) < 0.05


@pytest.mark.parametrize("name", JOBS)
def test_pytorch_critical_path_is_consistent(converted, name):
    a = analyze_job(converted[name])
    p = a.critical_path
    assert len(p) > 10
    assert p.on_path_ns.sum() + p.wait_after_ns.sum() == pytest.approx(p.length_ns)
    assert p.length_ns <= a.makespan_ns + 1
    assert p.length_ns >= 0.9 * max(b.span_ns for b in a.breakdown.ranks.values())
    assert np.all(np.diff(p.start_ns) >= -1.0)  # in time order
    b = a.breakdown.total
    assert b.compute_ns + b.exposed_comm_ns + b.memory_ns + b.waiting_ns + b.host_ns + b.idle_ns == b.span_ns


def test_pp_send_recv_pairs_cross_ranks(converted):
    job = converted["pp_sendrecv_ws2"]
    c = comm_summary(job)
    sends = {r: int((t.types == 5).sum()) for r, t in job.traces.items()}
    assert sends[0] and sends[1]
    assert c.matrix[0, 1] > 0 and c.matrix[1, 0] > 0  # activations forward, gradients back
    assert c.by_type["SEND"].count == sum(sends.values())


def test_custom_ring_sends_equal_the_ring_expansion_of_all_reduce():
    # ASTRA-sim's hand-written ring all-reduce (SEND/RECV nodes) and its 1 MiB ALL_REDUCE
    # micro-benchmark must put the same bytes on each ring link: 2(p-1)/p * 1 MiB
    ring = load_job(ASTRA / "system/custom_collectives/custom_ring_allreduce_8npus_1MB/custom_allreduce",
                    executor=SerialExecutor())
    coll = load_job(ASTRA / "workload/microbenchmarks/all_reduce/8npus_1MB/all_reduce", executor=SerialExecutor())
    expected = np.zeros((8, 8))
    for r in range(8):
        expected[r, (r + 1) % 8] = 2 * 7 / 8 * 1048576
    assert comm_summary(ring).matrix.tolist() == expected.tolist()
    assert comm_summary(coll, algorithm="ring").matrix.tolist() == expected.tolist()


@pytest.mark.parametrize("npus,finish_ns", [(4, 43_000), (8, 64_440)])
def test_simulated_schedule_critical_path_matches_astra_sim(npus, finish_ns):
    job = load_job(ASTRA / f"workload/microbenchmarks/all_reduce/{npus}npus_1MB/all_reduce", executor=SerialExecutor())
    schedule = schedule_from_simulation(job, ASTRA / f"network/analytical/Ring_{npus}npus.yml",
                                        ASTRA / "system/native_collectives/Ring_4chunks.json")
    assert schedule.source == "simulation"
    p = critical_path(job, schedule)
    assert p.source == "simulation"
    assert p.length_ns == pytest.approx(finish_ns, rel=1e-6)  # simulation.md reference table
    assert p.share_by_kind() == {"comm": pytest.approx(finish_ns, rel=1e-6)}


def test_cli_simulate_and_simulated_timeline(tmp_path, capsys):
    from etkit.cli.main import main

    prefix = str(ASTRA / "workload/microbenchmarks/all_gather/4npus_1MB/all_gather")
    sim = ["--network", str(ASTRA / "network/analytical/Ring_4npus.yml"),
           "--system", str(ASTRA / "system/native_collectives/Ring_4chunks.json")]
    assert main(["analyze", prefix, "-q", "-j", "1", *sim]) == 0
    out = capsys.readouterr().out
    assert "times from: simulation" in out and "makespan 64.7 us" in out  # ASTRA-sim: 64,744 ns
    trace = tmp_path / "t.json"
    assert main(["timeline", prefix, "-q", "-j", "1", *sim, "-o", str(trace)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    threads = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert threads == {"comm"}  # the simulator's resource
    assert sum(1 for e in events if e["ph"] == "X") == 4
    assert sum(1 for e in events if e["ph"] == "s") == 3  # last-arriving member -> the other three


def _upstream_jobs() -> list[str]:
    import re

    files = [p for p in UPSTREAM.rglob("*.et*") if p.name.endswith((".et", ".et.gz"))]
    return sorted({re.sub(r"\.\d+\.et(\.gz)?$", "", str(p)) if re.search(r"\.\d+\.et(\.gz)?$", p.name) else str(p)
                   for p in files})


def test_every_upstream_vector_analyses_and_renders(tmp_path):
    from etkit.analyze.text import render_analysis
    from etkit.viz.report import write_report
    from etkit.viz.timeline import write_timeline

    specs = _upstream_jobs()
    assert len(specs) >= 50
    for spec in specs:
        job = load_job(spec, executor=SerialExecutor())
        a = analyze_job(job)
        assert render_analysis(a)
        b = a.breakdown.total
        assert b.compute_ns + b.exposed_comm_ns + b.memory_ns + b.waiting_ns + b.host_ns + b.idle_ns == b.span_ns
        p = a.critical_path
        assert p.on_path_ns.sum() + p.wait_after_ns.sum() == pytest.approx(p.length_ns, abs=1.0), spec
        assert p.length_ns <= a.makespan_ns + 1.0, spec
        write_report(job, tmp_path / "r.html")
        write_timeline(job, tmp_path / "t.pftrace")


def _critical_path_holds(a) -> None:  # type: ignore[no-untyped-def]
    p = a.critical_path
    on_path = list(zip(p.rank.tolist(), p.row.tolist()))
    assert len(set(on_path)) == len(on_path)  # a simple path: no node twice
    busiest = max(b.busy_ns for b in a.breakdown.ranks.values())
    assert busiest <= p.length_ns <= a.makespan_ns
    assert int(p.on_path_ns.sum() + p.wait_after_ns.sum()) == p.length_ns


@pytest.mark.parametrize("name", ["ddp_mlp_ws2", "pp_sendrecv_ws2", "tp_transformer_ws2", "tp_transformer_ws4",
                                  "all_to_all_ws4", "fsdp2_mlp_ws2", "hybrid_dp_tp_ws4", "cnn_single"])
def test_critical_path_of_every_shared_job_is_a_simple_path_between_busy_and_makespan(converted_job, name):
    _critical_path_holds(analyze_job(load_job(converted_job(name), executor=SerialExecutor())))


def test_critical_path_of_every_kineto_trace_is_a_simple_path_between_busy_and_makespan(kineto_job):
    from ..conftest import KINETO_TRACES

    for name in KINETO_TRACES:
        _critical_path_holds(analyze_job(kineto_job(name)))
