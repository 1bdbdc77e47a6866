"""Out of sample (issue 17): comm ops a backend runs at once, a call's time on its thread, point-to-point
costs, one model fitted to several jobs, and the interval every prediction carries."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from etkit.errors import EtkitError
from etkit.executor import SerialExecutor
from etkit.format.attrs import make_attr
from etkit.format.schema import CommType, GlobalMetadata, Node, NodeType
from etkit.model.groups import ProcessGroups
from etkit.model.job import Job, load_job
from etkit.model.trace import Trace
from etkit.simulate import Knobs, simulate
from etkit.simulate.calibrate import (
    CALIBRATION_SYSTEM,
    calibrate_from_job,
    calibrate_from_jobs,
    comm_slots,
    compute_scale,
    messages_from_job,
    recorded_step_ns,
    write_calibration,
)
from etkit.simulate.config import SystemConfig, load_config, system_from_dict

from ..conftest import PYTORCH_JOBS
from .helpers import coll, job, net
from .test_calibrate_pytorch import _raw_events

#: 4-byte all-reduce on a 2-NPU Switch, latency 10 us, (virtually) infinite bandwidth: 4 hops = 40 us.
LATENCY = 10_000.0
ONE_CALL = 4 * LATENCY


def _ends(j: Job, system: SystemConfig) -> list[float]:
    result = simulate(j, net(("Switch", 2, 1e9, LATENCY)), system, Knobs(samples=0))
    return sorted(float(e) for e in result.schedule.ranks[0].end_ns)


@pytest.mark.parametrize("slots, per_group, groups, expected", [
    (1, 0, ("a", "a"), [ONE_CALL, 2 * ONE_CALL]),  # ASTRA-sim: one comm op per rank at a time
    (2, 0, ("a", "a"), [ONE_CALL, ONE_CALL]),
    (2, 1, ("a", "a"), [ONE_CALL, 2 * ONE_CALL]),  # one call of a group at a time
    (2, 1, ("a", "b"), [ONE_CALL, ONE_CALL]),  # ... but two groups side by side
])
def test_comm_slots_run_independent_calls_side_by_side(slots, per_group, groups, expected) -> None:
    two = job({r: [coll(1, CommType.ALL_REDUCE, 4, pg=groups[0]), coll(2, CommType.ALL_REDUCE, 4, pg=groups[1])]
               for r in range(2)}, {"a": [0, 1], "b": [0, 1]})
    system = replace(CALIBRATION_SYSTEM, comm_slots_per_rank=slots, comm_slots_per_group=per_group)
    assert _ends(two, system) == pytest.approx(expected)


@pytest.mark.parametrize("groups, per_group, expected", [
    (("a", "a"), 2, [ONE_CALL, ONE_CALL]),  # a group's direct chain is its issue order: both run at once
    (("a", "a"), 1, [ONE_CALL, 2 * ONE_CALL]),  # one call of a group at a time: the chain holds
    (("a", "b"), 2, [ONE_CALL, 2 * ONE_CALL]),  # a dependency across groups is data: it holds
])
def test_a_groups_chained_calls_overlap_only_where_the_backend_runs_them_side_by_side(groups, per_group, expected) -> None:
    chained = job({r: [coll(1, CommType.ALL_REDUCE, 4, pg=groups[0]), coll(2, CommType.ALL_REDUCE, 4, deps=[1], pg=groups[1])]
                   for r in range(2)}, {"a": [0, 1], "b": [0, 1]})
    system = replace(CALIBRATION_SYSTEM, comm_slots_per_rank=2, comm_slots_per_group=per_group)
    assert _ends(chained, system) == pytest.approx(expected)
    assert _ends(chained, CALIBRATION_SYSTEM) == pytest.approx([ONE_CALL, 2 * ONE_CALL])


def test_comm_slots_and_errors_are_read_from_the_system_file() -> None:
    cfg = system_from_dict({"etkit-comm-slots-per-rank": 4, "etkit-comm-slots-per-group": 2,
                            "etkit-prediction-errors": [-0.1, 0.05, 0.02]}, "s.json")
    assert (cfg.comm_slots_per_rank, cfg.comm_slots_per_group) == (4, 2) and cfg.concurrent_group_calls()
    assert SystemConfig().comm_slots_per_rank == 1 and not SystemConfig().concurrent_group_calls()
    low, high, coverage = cfg.prediction_interval(90.0)
    assert (low, high, coverage) == pytest.approx((90 / 1.1, 100.0, 0.75))  # 3 held-out errors: 3/4 of new jobs
    assert SystemConfig().prediction_interval(90.0) is None
    for bad, message in (({"etkit-comm-slots-per-rank": 0}, "at least 1"),
                         ({"etkit-comm-slots-per-group": 1.5}, "whole number"),
                         ({"etkit-prediction-errors": []}, "non-empty list"),
                         ({"etkit-prediction-errors": [-1.0]}, "above -1")):
        with pytest.raises(EtkitError, match=message):
            system_from_dict(bad, "s.json")


def _measured(nodes: list[tuple[int, str, int, int, list[int]]]) -> list[Node]:
    """Measured-trace nodes (id, kind, start us, duration us, deps) on thread 1."""
    out = []
    for nid, kind, start, dur, deps in nodes:
        if kind == "cpu":
            node = Node(id=nid, name=f"op{nid}", type=NodeType.COMP_NODE, attr=[make_attr("is_cpu_op", True)])
        else:
            node = coll(nid, CommType.ALL_REDUCE, 4, pg="0")
        node.start_time_micros, node.duration_micros = start, dur
        node.data_deps.extend(deps)
        node.attr.append(make_attr("tid", 1))
        out.append(node)
    return out


def _two_ranks(nodes) -> Job:
    return Job({r: Trace.from_nodes(GlobalMetadata(version="0.0.4"), _measured(nodes)) for r in range(2)},
               ProcessGroups.from_mapping({"0": [0, 1]}))


def test_an_async_calls_time_on_its_thread_stays_there() -> None:
    """op 1 (10 us), then an async all-reduce issued at 1,010 us that returned to the thread only at
    1,500 us (a loaded host descheduled it; its gloo record ran until 3,000 us), then op 3 (10 us) that
    does not wait for it: the thread was busy in the call from 1,010 to 1,500 us, so op 3 ends at 510 us
    after the rank's start, as recorded, not 20 us."""
    nodes = [(1, "cpu", 1_000, 10, []), (2, "coll", 1_010, 1_990, [1]), (3, "cpu", 1_500, 10, [1])]
    two = _two_ranks(nodes)
    result = simulate(two, net(("Switch", 2, 1e9, 1.0)), CALIBRATION_SYSTEM, Knobs(samples=0))
    op3 = result.schedule.ranks[0].end_ns[2] - result.schedule.ranks[0].start_ns[0]
    assert op3 == pytest.approx(510_000.0)


@pytest.mark.parametrize("knobs", [Knobs(samples=0, scale_compute=2.0), Knobs(samples=0, stragglers={0: 2.0})])
def test_the_compute_factor_scales_a_measured_threads_timeline(knobs) -> None:
    """--scale-compute and --straggler reach a measured trace's thread: op 1 (its 10 us to the call), the
    510 us the thread held before op 3 ended, all twice as long on rank 0 (op 3 ends at 1,020 us, not 510);
    compute_scale finds that factor between the job and the same job recorded on a host twice as slow."""
    nodes = [(1, "cpu", 1_000, 10, []), (2, "coll", 1_010, 1_990, [1]), (3, "cpu", 1_500, 10, [1])]
    two = _two_ranks(nodes)
    network = net(("Switch", 2, 1e9, 1.0))
    sched = simulate(two, network, CALIBRATION_SYSTEM, knobs).schedule.ranks[0]
    assert sched.end_ns[2] - sched.start_ns[0] == pytest.approx(1_020_000.0)
    slow = _two_ranks([(i, k, 1_000 + 2 * (s - 1_000), 2 * d, deps) for i, k, s, d, deps in nodes])
    assert compute_scale(two, slow, network) == pytest.approx(2.0)
    assert compute_scale(two, two, network) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def jobs(converted_job):
    return {name: load_job(converted_job(name), executor=SerialExecutor())
            for name in ("ddp_mlp_ws2", "all_to_all_ws2", "pp_sendrecv_ws2")}


def _overlapping_records(job_name: str, rank: int) -> list[tuple[int, int]]:
    """Pairs (k, k') of the rank's ``gloo:*`` records, by start, that ran at once on two worker threads."""
    records = sorted((e["ts"], e["ts"] + float(e["dur"]), e["tid"]) for e in _raw_events(job_name, rank)
                     if e["name"].startswith("gloo:"))
    return [(k, k2) for k, a in enumerate(records) for k2, b in enumerate(records)
            if k < k2 and b[0] < a[1] - 1.0 and a[2] != b[2]]


@pytest.mark.shared_data
def test_ddp_buckets_run_side_by_side_as_gloo_ran_them(jobs) -> None:
    """ddp_mlp_ws2, raw Kineto: rank 0 ran DDP's second bucket all-reduce of step 3 on one gloo worker
    thread while the first still ran on the other. Calibration learns two calls at once per group
    (gloo's worker threads), and the simulation runs those two buckets side by side on rank 0 too; with
    ASTRA-sim's one comm op per rank (the default) the same calls run one after the other."""
    pairs = _overlapping_records("ddp_mlp_ws2", 0)
    assert pairs, "the case exists: two of rank 0's gloo:all_reduce records overlap on two threads"
    job = jobs["ddp_mlp_ws2"]
    cal = calibrate_from_job(job)
    assert (cal.slots_per_rank, cal.slots_per_group) == comm_slots(job) == (2, 2)
    trace = job.traces[0]
    rows = np.flatnonzero(trace.types == NodeType.COMM_COLL_NODE)
    rows = rows[np.argsort(trace.start[rows], kind="stable")]
    recorded = [(float(trace.start[r]), float(trace.start[r] + trace.duration[r])) for r in rows]
    assert all(recorded[b][0] < recorded[a][1] for a, b in pairs)  # the converted trace keeps the overlap
    for system, overlap in ((cal.system(), True), (replace(cal.system(), comm_slots_per_rank=1), False)):
        sched = simulate(job, cal.network(), system, Knobs(samples=0)).schedule.ranks[0]
        start, end = sched.start_ns[rows], sched.end_ns[rows]
        assert all((start[b] < end[a]) == overlap for a, b in pairs), (system.comm_slots_per_rank, pairs)
        if not overlap:  # one at a time: no comm op of the rank starts before the one before it ended
            order = np.argsort(start, kind="stable")
            assert (start[order][1:] >= end[order][:-1] - 1e-6).all()


@pytest.mark.shared_data
def test_messages_cost_from_both_posted_until_the_receiver_returned(jobs) -> None:
    """pp_sendrecv_ws2: per message (the k-th gloo:send and gloo:recv between two ranks, raw Kineto, one
    clock), from the later of the two posts until the receiver's record ended; the fit gives
    point-to-point messages an overhead of that mean (they cost nothing in the network terms alone)."""
    raw = {r: sorted((e["ts"], e["ts"] + float(e["dur"]), e["name"]) for e in _raw_events("pp_sendrecv_ws2", r)
                     if e["name"] in ("gloo:send", "gloo:recv")) for r in range(2)}
    expected = []
    for src, dst in ((0, 1), (1, 0)):
        sends = [x for x in raw[src] if x[2] == "gloo:send"]
        recvs = [x for x in raw[dst] if x[2] == "gloo:recv"]
        assert len(sends) == len(recvs) == 4
        expected += [max(r1 - max(s0, r0), 0.0) for (s0, _, _), (r0, r1, _) in zip(sends, recvs)]
    job = jobs["pp_sendrecv_ws2"]
    found = messages_from_job(job)
    assert sorted(m.seconds * 1e6 for m in found) == pytest.approx(sorted(expected), abs=2.0)  # whole µs in the ET
    assert calibrate_from_job(job).overheads_ns["P2P"] > 0.2 * np.mean(expected) * 1e3


@pytest.mark.shared_data
def test_one_model_fitted_to_several_jobs_and_its_interval(jobs, tmp_path) -> None:
    """calibrate --from-trace A B: one fit of both jobs' calls (every recorded vector of both in the
    spread); each job predicted by the model fitted on the other gives the held-out errors written to the
    system file, and a prediction of a third job with it carries the interval they give."""
    from etkit.cli import main

    a, b, c = (jobs[n] for n in ("ddp_mlp_ws2", "all_to_all_ws2", "pp_sendrecv_ws2"))
    pooled = calibrate_from_jobs([a, b])
    for key in set(calibrate_from_job(a).residuals_ns) | set(calibrate_from_job(b).residuals_ns):
        assert len(pooled.residuals_ns[key]) == sum(len(calibrate_from_job(j).residuals_ns.get(key, []))
                                                     for j in (a, b))
    out = tmp_path / "ab.yml"
    assert main.main(["calibrate", "--from-trace", str(a.prefix), str(b.prefix), "--samples", "2", "-o", str(out), "-q"]) == 0
    system_file = json.loads(out.with_name("ab.system.json").read_text())
    errors = system_file["etkit-prediction-errors"]
    assert len(errors) == 2 and system_file["etkit-comm-slots-per-group"] == 2
    # the held-out error of ddp is that of the model fitted on all_to_all alone
    alone = calibrate_from_jobs([b])
    held = simulate(a, alone.network(), alone.system(), Knobs(samples=2)).step_ns / recorded_step_ns(a) - 1
    assert errors[0] == pytest.approx(held, abs=1e-5)
    network, system, _ = load_config(out, out.with_name("ab.system.json"))
    result = simulate(c, network, system, Knobs(samples=2))
    worst = max(abs(e) for e in errors)
    assert result.step_interval_ns == pytest.approx((result.step_ns / (1 + worst), result.step_ns / (1 - worst), 2 / 3))
    assert result.to_dict()["step_interval"]["coverage"] == pytest.approx(2 / 3)
    write_calibration(replace(pooled, holdout={}), tmp_path / "none.yml")
    assert "etkit-prediction-errors" not in json.loads((tmp_path / "none.system.json").read_text())


@pytest.mark.shared_data
def test_recorded_step_time_is_kinetos(jobs) -> None:
    from etkit.simulate.calibrate import measured_step_ns

    for name, loaded in jobs.items():
        assert recorded_step_ns(loaded) == pytest.approx(measured_step_ns(PYTORCH_JOBS / name), abs=1_000.0)
