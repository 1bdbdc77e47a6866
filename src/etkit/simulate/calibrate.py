"""Calibrate the network model on this machine: time real collectives (``torch.distributed``, gloo,
ranks spawned on loopback) over a range of sizes, or read them from a measured job's trace, then fit
one network dimension (latency per hop and bandwidth) plus a fixed per-call overhead per collective
type (an etkit system extension, ``etkit-collective-overhead``) so that the simulator's own
collective model reproduces the measurements.

Why per-type overheads: a real backend's call costs depend on how it implements each collective, not
only on bytes and hops (gloo's ``_allgather_base``/``_reduce_scatter_base`` run on a worker thread
with extra copies and cost milliseconds where a 4-byte all-reduce costs 0.2 ms), so one latency fitted
over every type under-predicts the expensive types and over-predicts the cheap ones. The fit is a
non-negative least squares over the columns the model itself yields (hops on the critical path,
bytes at 1 GB/s, one indicator per type) with a tiny ridge on the network terms, so a fixed cost goes
to the type that shows it and the network keeps what sizes and hop counts explain. The system the fit assumes
(:data:`CALIBRATION_SYSTEM` plus the overheads, :meth:`Calibration.system`) is written beside the
network YAML so that a trace collected here can be simulated with both files and compared with its
measured step time.
"""

from __future__ import annotations

import os
import re
import socket
import statistics
import time
from collections.abc import Sequence
from dataclasses import field, replace
from pathlib import Path

import numpy as np
import orjson
import yaml

from ..errors import EtkitError, OptionError, UsageError
from ..fileio import atomic_output, read_bytes_maybe_gzip
from ..format.schema import CommType, NodeType
from ..model.edges import edges
from ..model.job import Job
from ..model.matching import CommRecord, comm_record, match_comm, match_p2p
from ..model.steps import STEP_PREFIX, step_number
from ..model.trace import Trace
from ..records import record
from .collectives import group_shape, p2p_time, plan_collective
from .config import (
    ERRORS_KEY,
    OVERHEAD_KEY,
    RESIDUALS_KEY,
    SLOTS_GROUP_KEY,
    SLOTS_RANK_KEY,
    Dimension,
    NetworkConfig,
    SystemConfig,
)

__all__ = ["measured_step_ns", "measured_steps_ns", "simulated_steps_ns", "step_rows", "calibrate_from_job", "calibrate_from_jobs", "holdout_errors", "recorded_step_ns",
           "messages_from_job", "comm_slots", "predict_errors", "compute_scale", "Measurement", "Calibration", "measure", "fit", "calibrate", "write_calibration", "CALIBRATION_SYSTEM",
           "DEFAULT_SIZES"]

#: System assumed by the fit: one chunk, no endpoint delay, ring everywhere.
CALIBRATION_SYSTEM = SystemConfig(endpoint_delay_ns=0.0, preferred_dataset_splits=1, active_chunks_per_dimension=1,
                                  local_mem_bw_gbps=1e6, source="etkit calibrate")
DEFAULT_SIZES = (1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22)
COLLECTIVES = {"all_reduce": CommType.ALL_REDUCE, "all_gather": CommType.ALL_GATHER, "broadcast": CommType.BROADCAST,
               "reduce_scatter": CommType.REDUCE_SCATTER, "all_to_all": CommType.ALL_TO_ALL, "send_recv": None}


@record(frozen=True)
class Measurement:
    collective: str  # a COLLECTIVES key or a CommType name
    size: int  # comm_size as an ET would carry it (all_gather: the per-rank shard)
    seconds: float  # median over repetitions (max over ranks per repetition)
    group: int = 0  # members (0 = every rank of the calibration)
    instance: int = -1  # from a trace: which recorded call (the members of one call share it)


@record
class Calibration:
    ranks: int
    backend: str
    measurements: list[Measurement]
    latency_ns: float = 0.0
    bandwidth_gbps: float = 0.0
    topology: str = "Switch"
    errors: list[float] = field(default_factory=list)  # relative error of the fit, per measurement
    overheads_ns: dict[str, float] = field(default_factory=dict)  # per call, by CommType name or "P2P"
    # from a trace: per (CommType name, group size) one vector per recorded call, each member's cost
    # minus the fitted model's time (ns): the spread the simulator draws from
    residuals_ns: dict[tuple[str, int], list[tuple[float, ...]]] = field(default_factory=dict)
    # comm ops a rank ran at once (any group / one group), as the backend showed (1: one at a time)
    slots_per_rank: int = 1
    slots_per_group: int = 1
    # held-out step-time errors (predicted / measured - 1) by job: what a prediction's interval comes from
    holdout: dict[str, float] = field(default_factory=dict)

    def network(self) -> NetworkConfig:
        return NetworkConfig((Dimension(self.topology, self.ranks, self.bandwidth_gbps, self.latency_ns),), "calibration")

    def system(self) -> SystemConfig:
        """:data:`CALIBRATION_SYSTEM` with the fitted per-call overheads, recorded spread, comm slots and
        held-out errors (what to simulate with)."""
        return replace(CALIBRATION_SYSTEM, collective_overhead_ns=tuple(sorted(self.overheads_ns.items())),
                       collective_residuals_ns=tuple((k, g, tuple(v)) for (k, g), v in sorted(self.residuals_ns.items())),
                       comm_slots_per_rank=self.slots_per_rank,
                       comm_slots_per_group=self.slots_per_group if self.slots_per_rank > 1 else 0,
                       prediction_errors=tuple(self.holdout.values()))


def measured_step_ns(job_dir: str | os.PathLike[str]) -> float:
    """The measured time of a collected PyTorch job's profiled steps: per rank the sum of its Kineto
    ``ProfilerStep#N`` spans (files ``rank-<r>.kineto.json[.gz]``), the slowest rank's, in ns."""
    best = 0.0
    for events in _kineto_events(job_dir):
        best = max(best, sum(float(e.get("dur", 0)) for e in events if str(e.get("name", "")).startswith(STEP_PREFIX)))
    return best * 1000.0


def _kineto_events(job_dir: str | os.PathLike[str]):
    for path in sorted(Path(job_dir).glob("rank-*.kineto.json*")):
        yield orjson.loads(read_bytes_maybe_gzip(path)).get("traceEvents", [])


def measured_steps_ns(job_dir: str | os.PathLike[str]) -> dict[int, float]:
    """Per profiled step N (Kineto ``ProfilerStep#N``) the slowest rank's span, in ns."""
    out: dict[int, float] = {}
    for events in _kineto_events(job_dir):
        for e in events:
            step = step_number(str(e.get("name", "")))
            if step is not None:
                out[step] = max(out.get(step, 0.0), float(e.get("dur", 0)) * 1000.0)
    return dict(sorted(out.items()))


def step_rows(trace) -> dict[int, int]:
    """Row of each ``ProfilerStep#N`` annotation of a converted trace, by N."""
    out = {}
    for row in np.flatnonzero(trace.types == NodeType.COMP_NODE):
        step = step_number(trace.name(int(row)))
        if step is not None:
            out[step] = int(row)
    return dict(sorted(out.items()))


def simulated_steps_ns(job: Job, result) -> dict[int, float]:
    """Per profiled step N the slowest rank's simulated span: from its ``ProfilerStep#N`` annotation's
    simulated start (the first step: from the rank's entry) to the next step's (the last: its finish)."""
    out: dict[int, float] = {}
    for rank, trace in job.traces.items():
        rows = step_rows(trace)
        sched, fig = result.schedule.ranks[rank], result.ranks[rank]
        bounds = [fig.start_ns] + [float(sched.start_ns[r]) for r in list(rows.values())[1:]] + [fig.finish_ns]
        for i, step in enumerate(rows):
            out[step] = max(out.get(step, 0.0), bounds[i + 1] - bounds[i])
    return dict(sorted(out.items()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, backend: str, sizes: tuple[int, ...], reps: int, queue,
            collectives: tuple[str, ...] = tuple(COLLECTIVES)) -> None:
    import warnings

    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # the *_tensor forms jobs call are deprecated names
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    out: list[tuple[str, int, list[float]]] = []
    try:
        for name in collectives:
            for size in sizes:
                elems = max(size // 4 // world, 1) * world  # whole shards for reduce-scatter and all-to-all
                tensor = torch.ones(elems, dtype=torch.float32)
                call = _call(dist, name, tensor, rank, world)
                times = []
                for rep in range(reps + 1):
                    dist.barrier()
                    began = time.perf_counter()
                    call()
                    if rep:  # the first call warms up connections and buffers
                        times.append(time.perf_counter() - began)
                out.append((name, elems * 4, times))
    finally:
        dist.destroy_process_group()
    queue.put((rank, out))


def _call(dist, name: str, tensor, rank: int, world: int):
    """One call of ``name`` on ``tensor`` as a PyTorch job makes it (the tensor forms FSDP, tensor and
    sequence parallelism use: ``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_to_all_single``;
    P2P: rank 0 sends to rank 1). Its ``comm_size`` as a converted ET carries it: the whole tensor, the
    shard for an all-gather."""
    import torch

    if name == "all_reduce":
        return lambda: dist.all_reduce(tensor)
    if name == "broadcast":
        return lambda: dist.broadcast(tensor, 0)
    if name == "all_gather":
        full = torch.empty(tensor.numel() * world)
        return lambda: dist.all_gather_into_tensor(full, tensor)
    if name == "reduce_scatter":
        shard = torch.empty(tensor.numel() // world)
        return lambda: dist.reduce_scatter_tensor(shard, tensor)
    if name == "all_to_all":
        received = torch.empty_like(tensor)
        return lambda: dist.all_to_all_single(received, tensor)
    if rank == 0:
        return lambda: dist.send(tensor, 1)
    return (lambda: dist.recv(tensor, 0)) if rank == 1 else (lambda: None)


def measure(ranks: int = 2, *, backend: str = "gloo", sizes: tuple[int, ...] = DEFAULT_SIZES, reps: int = 5,
            timeout_s: float = 600.0, collectives: tuple[str, ...] = tuple(COLLECTIVES)) -> list[Measurement]:
    """Time each of ``collectives`` (:data:`COLLECTIVES` keys; ``send_recv``: a message from rank 0 to
    rank 1) at each size on ``ranks`` spawned processes (median over ``reps``)."""
    if ranks < 2:
        raise OptionError("{ranks}: calibrate needs at least 2 ranks", ranks=ranks)
    unknown = [c for c in collectives if c not in COLLECTIVES]
    if unknown:
        raise UsageError(f"unknown collective(s) {', '.join(unknown)}; choose from {', '.join(COLLECTIVES)}")
    try:
        import torch.multiprocessing as mp
    except ImportError:
        raise EtkitError("calibrate needs PyTorch (pip install etkit[torch])") from None
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, ranks, port, backend, tuple(sizes), reps, queue, tuple(collectives))) for r in range(ranks)]
    for p in procs:
        p.start()
    results: dict[int, list] = {}
    try:
        deadline = time.monotonic() + timeout_s
        while len(results) < ranks:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not any(p.is_alive() for p in procs) and queue.empty():
                raise EtkitError(f"calibration ranks did not report within {timeout_s:.0f} s (backend {backend})")
            try:
                rank, data = queue.get(timeout=min(remaining, 1.0))
                results[rank] = data
            except Exception:  # queue.Empty: keep waiting while ranks run
                continue
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    out = []
    for i, (name, size, _) in enumerate(results[0]):
        per_rep = np.max([results[r][i][2] for r in range(ranks)], axis=0)  # a collective ends when all ranks do
        out.append(Measurement(name, size, float(statistics.median(per_rep))))
    return out


def _kind(m: Measurement) -> str:
    """The overhead key of a measurement: a CommType name or ``P2P``."""
    kind = COLLECTIVES.get(m.collective, m.collective)
    return "P2P" if kind is None else getattr(kind, "name", kind)  # type: ignore[arg-type]


def _model_ns(m: Measurement, network: NetworkConfig, ranks: int, system: SystemConfig = CALIBRATION_SYSTEM) -> float:
    kind = _kind(m)
    if kind == "P2P":
        return p2p_time(network, system, 0, 1, m.size)[0]
    layout = group_shape(tuple(range(m.group or ranks)), network)
    comm_type = CommType[kind]
    return plan_collective(comm_type, m.size, layout, system).time_ns


#: Weight of the ridge that settles how a fixed cost splits between the network and the overheads.
_OVERHEAD_RIDGE = 1e-3


def fit(measurements: list[Measurement], ranks: int, *, topology: str = "Switch", backend: str = "gloo",
        relative: bool = True, per_type: bool = False) -> Calibration:
    """Latency and bandwidth of one ``topology`` dimension (and, ``per_type``, a fixed overhead per
    collective type) that best reproduce ``measurements``.

    The model's time is linear in latency, in 1/bandwidth (``hops * L + bytes / B`` per round) and in
    each overhead, so the coefficients of each measurement are read off the model itself and the fit
    is a non-negative least squares, on relative errors (sizes over decades: every size counts) or on
    absolute ones (``relative=False``: the fitted model reproduces the total time per type, what a
    step-time prediction needs). Latency and the overheads are collinear when every measurement of a
    type crosses the same hops; a tiny ridge on latency and 1/bandwidth then leaves the network only
    what sizes and hop counts show, and each type's fixed cost in its overhead (so that messages and
    types the fit never saw, e.g. point-to-point, do not inherit another type's software cost).
    """
    from scipy.optimize import nnls

    def at(latency: float, bandwidth: float) -> np.ndarray:
        probe = NetworkConfig((Dimension(topology, ranks, bandwidth, latency),))
        return np.asarray([_model_ns(m, probe, ranks) for m in measurements])

    huge = 1e12
    base = at(0.0, huge)
    per_latency = (at(1e6, huge) - base) / 1e6  # hops on the critical path
    per_inverse_bw = (at(0.0, 1e-3) - base) * 1e-3  # ns at 1 GB/s
    kinds = sorted({_kind(m) for m in measurements}) if per_type else []
    indicator = np.asarray([[float(_kind(m) == k) for k in kinds] for m in measurements]).reshape(len(measurements), len(kinds))
    measured = np.asarray([m.seconds * 1e9 for m in measurements])
    scale = measured if relative else np.ones_like(measured)
    a = np.column_stack([per_latency, per_inverse_bw, indicator]) / scale[:, None]
    b = (measured - base) / scale
    if kinds:  # a tiny ridge on latency and 1/bandwidth: only what the sizes and hops show goes to the network
        ridge = _OVERHEAD_RIDGE * np.sqrt(np.mean(a[:, :2] ** 2, axis=0))
        a = np.vstack([a, np.column_stack([np.diag(ridge), np.zeros((2, len(kinds)))])])
        b = np.append(b, [0.0, 0.0])
    solution, _ = nnls(a, b)
    latency, inverse_bw = solution[:2]
    bandwidth = 1.0 / inverse_bw if inverse_bw > 0 else huge
    overheads = {k: float(v) for k, v in zip(kinds, solution[2:]) if v > 0}
    cal = Calibration(ranks, backend, measurements, float(latency), float(bandwidth), topology, overheads_ns=overheads)
    net, system = cal.network(), cal.system()
    cal.errors = [_model_ns(m, net, ranks, system) / max(m.seconds * 1e9, 1.0) - 1.0 for m in measurements]
    return cal


@record
class _Instance:
    kind: str
    size: int
    group: int
    step: int | None = None  # the profiled step (ProfilerStep#N) it ran in, on the first rank that recorded it
    starts: list[float] = field(default_factory=list)  # µs, per member
    ends: list[float] = field(default_factory=list)
    used: list[float] = field(default_factory=list)  # µs, per member: when its rank first ran an op depending on it


def _collective_instances(job: Job) -> list[_Instance]:
    """Every timed collective instance with its members' times: the matcher's instances
    (:func:`~etkit.model.matching.match_comm`) with each rank's timed collectives in start order, so the
    k-th a rank started on a communicator is its member of the k-th call; listed in the order the first
    rank (then the next with an instance not yet listed) started them. A member of an unknown ``comm_type``
    is left out; an instance whose members all are is not listed."""
    records = _timed_records(job, (NodeType.COMM_COLL_NODE,))
    position = {rank: dict(zip(rec.coll_rows.tolist(), range(len(rec.coll_rows)))) for rank, rec in records.items()}
    known = {int(c) for c in CommType}
    listed: list[tuple[tuple[int, int], _Instance]] = []
    steps = {rank: _Steps.of(trace) for rank, trace in job.traces.items()}
    used = {rank: _first_use_us(trace) for rank, trace in job.traces.items()}
    turn = {rank: i for i, rank in enumerate(job.traces)}
    for found in match_comm(records, job.groups, job.world_size).instances:
        inst = None
        for rank, row in sorted(found.members, key=lambda member: turn[member[0]]):
            trace = job.traces[rank]
            comm_type = int(trace.comm_type[row])
            if comm_type not in known:
                continue
            if inst is None:
                inst = _Instance(CommType(comm_type).name, max(int(trace.comm_size[row]), 0),
                                 len(job.groups.members(found.group, job.world_size)), steps[rank].at(float(trace.start[row])))
                listed.append(((turn[rank], position[rank][row]), inst))
            inst.starts.append(float(trace.start[row]))
            inst.ends.append(float(trace.start[row] + trace.duration[row]))
            inst.used.append(float(used[rank][row]))
    return [inst for _, inst in sorted(listed, key=lambda item: item[0])]


def _timed_records(job: Job, node_types: tuple[NodeType, ...]) -> dict[int, CommRecord]:
    """Per rank the :class:`~etkit.model.matching.CommRecord` of its timed nodes (a recorded start) of
    ``node_types``, in start order: the issue order the matcher pairs them in."""
    out = {}
    for rank, trace in job.traces.items():
        rows = np.flatnonzero(np.isin(trace.types, [int(t) for t in node_types]) & (trace.start > 0))
        out[rank] = comm_record(trace, rank, rows[np.argsort(trace.start[rows], kind="stable")])
    return out


def _in_channel_order(records: dict[int, CommRecord], pairs: list[tuple[int, int, int, int]]
                      ) -> list[tuple[int, int, int, int]]:
    """``pairs`` (the matcher's: channel by channel, each in issue order) with the channels (source,
    destination, tag) in the order they first appear rank by rank, each rank's sends before its receives."""
    first: dict[tuple[int, int, int], int] = {}
    for rank, rec in records.items():
        for peer, tag in zip(rec.send_peer.tolist(), rec.send_tag.tolist()):
            first.setdefault((rank, peer, tag), len(first))
        for peer, tag in zip(rec.recv_peer.tolist(), rec.recv_tag.tolist()):
            first.setdefault((peer, rank, tag), len(first))
    tag_of = {(rank, row): tag for rank, rec in records.items()
              for row, tag in zip(rec.send_rows.tolist(), rec.send_tag.tolist())}
    return sorted(pairs, key=lambda p: first[(p[0], p[2], tag_of[(p[0], p[1])])])


@record(frozen=True)
class _Steps:
    """One rank's profiled steps (:func:`step_rows`): their numbers and recorded starts, in order."""

    numbers: list[int]
    starts: np.ndarray

    @classmethod
    def of(cls, trace: Trace) -> _Steps:
        steps = step_rows(trace)
        return cls(list(steps), trace.start[list(steps.values())].astype(np.float64))

    def at(self, start: float) -> int | None:
        """The step in which an op that started at ``start`` ran: the last one that started at or before it
        (None: before the first)."""
        k = int(np.searchsorted(self.starts, start, side="right")) - 1
        return self.numbers[k] if k >= 0 else None


def _first_use_us(trace) -> np.ndarray:
    """Per row, the recorded start (µs) of the earliest timed compute op that depends on it (inf: none).

    For a collective that is its first consumer on that rank: DDP's copy of a reduced bucket back
    into the gradients, a GPU kernel reading the result, or an op that only holds the pending result
    (a functional collective's wrapper), which is why :func:`_returned` checks when it started."""
    out = np.full(len(trace), np.inf)
    data = edges(trace, "data").resolved(self_loops=True)
    parents, children = data.parent, data.child
    timed = (trace.types[children] == NodeType.COMP_NODE) & (trace.start[children] > 0)
    np.minimum.at(out, parents[timed], trace.start[children[timed]].astype(np.float64))
    return out


#: Collectives with a root: the root may return before the others arrive (a broadcast's root only
#: sends), so they say nothing about the ranks' clocks.
_ROOTED = {"BROADCAST", "REDUCE", "GATHER", "SCATTER"}


#: Converted traces round start and duration to whole µs: comparisons across ranks allow this much.
_ROUNDING_US = 1.0


def _one_clock(instances: list[_Instance]) -> bool:
    """Whether the ranks' timestamps come from one clock: no member of a collective that synchronises
    every member (not a rooted one) ended before another member had started it (1 µs of rounding allowed)."""
    return all(max(i.starts) <= min(i.ends) + _ROUNDING_US for i in instances
               if len(i.starts) > 1 and i.kind not in _ROOTED)


def _returned(inst: _Instance) -> list[float]:
    """When each member's rank had the result (µs, one clock): its recorded end, or earlier the start of
    the first op on that rank that depends on the call, if that op started once a member had returned.

    A backend's record of a call can end well after the data arrived: gloo completes the work's future
    (which wakes the waiting thread) and only then closes its ``gloo:*`` record, from a worker thread
    that a loaded host may not schedule for milliseconds. Meanwhile the rank went on: in
    ddp_mlp_ws2 rank 1's main thread copied a reduced bucket into the gradients and ran the whole
    optimizer step before its ``gloo:all_reduce`` record of that bucket ended. The simulator releases
    a member's dependants when the member returns, so that tail, which held nobody, is not part of
    the call's cost. An op that started before any member had returned did not consume the result
    (the result did not exist anywhere yet; e.g. ``_c10d_functional::_wrap_tensor_autograd`` only
    wraps the pending tensor) and says nothing."""
    first = min(inst.ends) - _ROUNDING_US
    return [min(e, u) if u >= first else e for e, u in zip(inst.ends, inst.used)]


def _member_costs(inst: _Instance, aligned: bool) -> list[float]:
    """Each member's cost in µs: from the last member's arrival until it returned (one clock, see
    :func:`_returned`), else the shortest member duration for every member (the last member to arrive
    waits for nobody)."""
    if aligned:
        last = max(inst.starts)
        return [max(r - last, 0.0) for r in _returned(inst)]
    return [min(e - s for s, e in zip(inst.starts, inst.ends))] * len(inst.starts)


def recorded_step_ns(job: Job) -> float | None:
    """The measured time of a converted job's profiled steps, from its own trace: per rank the sum of its
    ``ProfilerStep#N`` annotations' inclusive spans (``dur_ns``), the slowest rank's (what
    :func:`measured_step_ns` reads from the Kineto files); None when no rank has such annotations."""
    best = None
    for trace in job.traces.values():
        rows = list(step_rows(trace).values())
        if rows:
            spans = np.where(trace.dur_ns[rows] >= 0, trace.dur_ns[rows], trace.duration[rows].astype(np.int64) * 1000)
            best = max(best or 0.0, float(spans.sum()))
    return best


def messages_from_job(job: Job, steps: set[int] | None = None) -> list[Measurement]:
    """What a measured job says its point-to-point messages cost: one ``P2P`` :class:`Measurement` per
    message (a SEND and the RECV it met, as :func:`~etkit.model.matching.match_p2p` pairs them with each
    rank's recorded messages in start order: the k-th of each (source, destination, tag) on either side), from
    when both sides had posted it until the receiver returned (the simulator delivers a message to both
    at that moment). A blocking gloo SEND records its wait for the receiver, so the sender's record
    says nothing more; a loaded host makes even a 512-byte message cost milliseconds (its threads must
    be scheduled on both sides)."""
    steps_of = {rank: _Steps.of(trace) for rank, trace in job.traces.items()}
    records = _timed_records(job, (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE))
    out = []
    for s_rank, s_row, r_rank, r_row in _in_channel_order(records, match_p2p(records, job.world_size).pairs):
        send, recv = job.traces[s_rank], job.traces[r_rank]
        if steps is None or steps_of[r_rank].at(float(recv.start[r_row])) in steps:
            s0, r0 = float(send.start[s_row]), float(recv.start[r_row])
            r1 = float(recv.start[r_row] + recv.duration[r_row])
            out.append(Measurement("P2P", max(int(send.comm_size[s_row]), 0), max(r1 - max(s0, r0), 0.0) * 1e-6, 2))
    return out


def backend_slots(backend: str) -> int:
    """Collectives of one group a backend runs at once: gloo's worker threads per group (two per
    device, one CPU device: ProcessGroupGloo's default), 1 for any other (NCCL: one stream per communicator)."""
    from ..pytorch.convert import GLOO_THREADS_PER_GROUP

    return GLOO_THREADS_PER_GROUP if backend == "gloo" else 1


_BACKEND_CONFIG = re.compile(r'backend_config\\?"\s*:\s*\\?"([^"\\]*)')


def job_backend(job: Job) -> str:
    """The backend a converted PyTorch job's collectives ran on, from its ``process_group:init``
    METADATA node's ``backend_config`` (``cpu:gloo,cuda:gloo``: "gloo", ``cuda:nccl``: "nccl", the first
    device's); "" when no rank says."""
    for trace in job.traces.values():
        for row in np.flatnonzero(trace.types == NodeType.METADATA_NODE)[:4]:
            found = _BACKEND_CONFIG.search(trace.node(int(row)).inputs.values)
            if found and found.group(1):
                return found.group(1).split(",")[0].split(":")[-1]
    return ""


def comm_slots(job: Job) -> tuple[int, int]:
    """How many collectives a rank of ``job`` may run at once: (on any of its groups, on one group). The
    most its recorded COMM nodes (a backend's records, e.g. ``gloo:all_reduce``, on its worker threads)
    ran at once, and at least what the job's backend allows (:func:`backend_slots` per group, on each of
    the rank's groups: a job whose calls never had the chance to overlap still ran on a backend that
    would have let them). Calls that overlap
    by the trace's rounding (1 µs) or less are not counted as concurrent."""
    allowed = backend_slots(job_backend(job))
    groups = job.groups.to_json().values()
    most_groups = max((sum(r in g for g in groups) for r in job.traces), default=1)
    per_rank, per_group = allowed * max(most_groups, 1), allowed
    for trace in job.traces.values():
        rows = np.flatnonzero((trace.types == NodeType.COMM_COLL_NODE) & (trace.start > 0))
        pgs = trace.pg_names()
        by_group: dict[str, list[int]] = {}
        for row in rows:
            by_group.setdefault(str(pgs[row] or "0"), []).append(int(row))
        per_rank = max(per_rank, _most_at_once(trace, rows))
        per_group = max([per_group] + [_most_at_once(trace, np.asarray(g)) for g in by_group.values()])
    return per_rank, per_group


def _most_at_once(trace, rows: np.ndarray) -> int:
    """The most of ``rows``' recorded intervals open at one time (those touching within 1 µs count apart)."""
    if len(rows) < 2:
        return len(rows)
    starts = trace.start[rows].astype(np.float64)
    ends = np.maximum(starts + trace.duration[rows].astype(np.float64) - _ROUNDING_US, starts)
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(len(rows)), -np.ones(len(rows))])
    order = np.lexsort((steps, times))  # at equal times an interval closes before the next opens
    return int(np.max(np.cumsum(steps[order])))


def measurements_from_job(job: Job, steps: set[int] | None = None) -> list[Measurement]:
    """What a measured job says its collectives cost: one :class:`Measurement` per member of every
    recorded instance (the k-th collective of a communicator; ``instance`` numbers them), only those
    of the profiled ``steps`` when given.

    The simulator starts a collective when its last member arrives, so a member's cost is measured
    from the last arrival until that member returned (its recorded end, or earlier when its rank
    demonstrably had the result: :func:`_returned`). Members return at different times (a gloo
    worker thread scheduled late, a copy-out), and the simulator releases each at its own drawn time
    (:func:`calibrate_from_job`). This needs the ranks' timestamps on one clock (one host, or
    synchronised hosts); when they visibly are not, every member gets the shortest member duration.
    Point-to-point ops are left out: a blocking SEND records its wait for the receiver, not the message.
    """
    instances = [i for i in _collective_instances(job) if i.group > 1 and len(i.starts) == i.group]
    aligned = _one_clock(instances)
    out: list[Measurement] = []
    for number, inst in enumerate(instances):
        if steps is not None and inst.step not in steps:
            continue
        costs = _member_costs(inst, aligned)
        if max(costs) > 0:
            out.extend(Measurement(inst.kind, inst.size, c * 1e-6, inst.group, number) for c in costs)
    return out


def calibrate_from_job(job: Job, *, steps: set[int] | None = None) -> Calibration:
    """Fit the network to the communication recorded in a measured job (``etkit calibrate --from-trace``),
    only that of the profiled ``steps`` when given (to check a prediction out of sample).

    Two parts: (1) latency, bandwidth and a per-type overhead fitted to every member's cost on
    absolute errors (the model's time is then the mean member cost of each type); (2) the spread
    around it: per recorded call the vector of its members' residuals (cost minus the model's time),
    by type and group size. The simulator draws one recorded vector per call, in random member
    order, and releases each member at the model's time plus its residual; over Monte Carlo runs
    this reproduces the distribution, including the expected slowest member and the correlation
    between members of one call (on a loaded host they are slow together), that a mean cannot.
    """
    return calibrate_from_jobs([job], steps=steps)


def calibrate_from_jobs(jobs: Sequence[Job], *, steps: set[int] | None = None, holdout: bool = False,
                        samples: int = 32, progress=None) -> Calibration:
    """One model fitted to the communication of several measured jobs at once (``etkit calibrate
    --from-trace P1 P2 ...``; :func:`calibrate_from_job` is this for one job): every job's members'
    costs and messages in one fit, every job's recorded calls in the spread, and as many comm ops at
    once per rank and per group as any job ran (:func:`comm_slots`).

    ``holdout`` (two jobs or more): each job is also predicted by the model fitted on the others
    (``samples`` Monte Carlo runs) and its error against its recorded step time kept in
    :attr:`Calibration.holdout` (written as ``etkit-prediction-errors``): the spread of those errors is
    the interval every later prediction carries (:meth:`SystemConfig.prediction_interval`)."""
    if not jobs:
        raise OptionError("{jobs}: give at least one measured job", jobs=...)
    measurements: list[Measurement] = []
    for job in jobs:
        offset = 1 + max((m.instance for m in measurements), default=-1)
        measurements.extend(replace(m, instance=m.instance + offset) for m in measurements_from_job(job, steps))
    if len({m.instance for m in measurements}) < 2:
        names = ", ".join(str(j.prefix) for j in jobs)
        raise UsageError(f"{names}: fewer than two timed collectives to calibrate from")
    messages = [m for job in jobs for m in messages_from_job(job, steps)]
    ranks = max(max(j.world_size for j in jobs), 2)
    cal = fit(measurements + messages, ranks, backend="trace", relative=False, per_type=True)
    cal.measurements = measurements + messages
    network, system = cal.network(), cal.system()
    calls: dict[int, list[Measurement]] = {}
    for m in measurements:
        calls.setdefault(m.instance, []).append(m)
    for members in calls.values():
        model = _model_ns(members[0], network, ranks, system)
        cal.residuals_ns.setdefault((_kind(members[0]), members[0].group), []).append(
            tuple(round(m.seconds * 1e9 - model, 1) for m in members))
    slots = [comm_slots(job) for job in jobs]
    cal.slots_per_rank, cal.slots_per_group = max(s[0] for s in slots), max(s[1] for s in slots)
    if holdout and len(jobs) > 1:
        cal.holdout = holdout_errors(jobs, steps=steps, samples=samples, progress=progress)
    return cal


def job_name(job: Job) -> str:
    return Path(str(job.prefix)).name


def holdout_errors(jobs: Sequence[Job], *, steps: set[int] | None = None, samples: int = 32,
                   progress=None) -> dict[str, float]:
    """Leave one job out: per job with a recorded step time, predicted by the model fitted on the other
    jobs / its recorded step time - 1 (jobs the others cannot be fitted without, or without a recorded
    step time, are left out)."""
    from . import simulate
    from .config import Knobs

    out: dict[str, float] = {}
    for i, job in enumerate(jobs):
        measured = recorded_step_ns(job)
        others = [j for k, j in enumerate(jobs) if k != i]
        try:
            cal = calibrate_from_jobs(others, steps=steps)
        except UsageError:
            cal = None
        if measured and cal is not None:
            result = simulate(job, cal.network(), cal.system(), Knobs(samples=samples))
            out[job_name(job)] = result.step_ns / measured - 1.0
        if progress is not None:
            progress.advance()
    return out


def predict_errors(cal: Calibration, jobs: Sequence[Job], *, samples: int = 32, progress=None) -> dict[str, float]:
    """Per job with a recorded step time: ``cal``'s prediction / the recorded step time - 1 (jobs the
    calibration never saw: out-of-sample errors, e.g. of a micro-benchmark fit, ``etkit calibrate --check``)."""
    from . import simulate
    from .config import Knobs

    out: dict[str, float] = {}
    system = replace(cal.system(), prediction_errors=())
    for job in jobs:
        measured = recorded_step_ns(job)
        if measured:  # a larger job: the fitted Switch with as many ports (its links as fitted)
            network = replace(cal, ranks=max(cal.ranks, job.world_size)).network()
            out[job_name(job)] = simulate(job, network, system, Knobs(samples=samples)).step_ns / measured - 1.0
        if progress is not None:
            progress.advance()
    return out


def compute_scale(job: Job, like: Job, network: NetworkConfig, system: SystemConfig = CALIBRATION_SYSTEM) -> float:
    """How much longer the host that measured ``like`` took for the compute of ``job``: the compute time the
    simulator replays for ``like`` (every rank's ``compute_ns``: its ops and the measured time between them,
    waits on communication left out) over that of ``job``, per rank on average. ``job`` is the same program
    recorded elsewhere, e.g. a job ``etkit scale`` made from a smaller one, whose op times are those of the
    smaller job's host: 4 ranks on a 2-core host run each op about twice as long as 2 ranks did. Predicting
    ``like`` from ``job`` needs ``Knobs(scale_compute=compute_scale(job, like, ...))`` as it needs a
    network fitted to ``like``'s host."""
    from . import simulate
    from .config import Knobs

    def total(j: Job) -> float:
        ranks = simulate(j, network, system, Knobs(samples=0)).ranks.values()
        return float(sum(f.compute_ns for f in ranks)) / max(len(ranks), 1)

    mine = total(job)
    if mine <= 0:
        raise UsageError(f"{job.prefix}: no compute to compare with {like.prefix}")
    return total(like) / mine


def calibrate(ranks: int = 2, *, backend: str = "gloo", sizes: tuple[int, ...] = DEFAULT_SIZES, reps: int = 5) -> Calibration:
    """Measure and fit (what ``etkit calibrate`` runs): latency, bandwidth and a fixed overhead per call
    type (relative errors: every size counts), and the comm ops the backend runs at once
    (:func:`backend_slots` per group; the calibration's one group)."""
    cal = fit(measure(ranks, backend=backend, sizes=sizes, reps=reps), ranks, backend=backend, per_type=True)
    cal.slots_per_rank = cal.slots_per_group = backend_slots(backend)
    return cal


def write_calibration(cal: Calibration, path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write the network YAML (ASTRA-sim keys, measurements as comments) and ``<stem>.system.json`` beside it."""
    path = Path(path)
    lines = [f"# etkit calibrate: {cal.backend}, {cal.ranks} ranks on loopback; fitted on {len(cal.measurements)} medians",
             "# use with the system file written beside it (one chunk, no endpoint delay)"]
    for m, err in zip(cal.measurements, cal.errors):
        lines.append(f"#   {m.collective:<10} {m.size:>9} B  {m.seconds * 1e6:>10.1f} us  fit error {err:+.1%}")
    for name, err in cal.holdout.items():
        lines.append(f"# held out: {name} predicted {err:+.1%} off its recorded step time")
    body = yaml.safe_dump(cal.network().to_yaml_dict(), default_flow_style=None, sort_keys=False)
    with atomic_output(path, compress=False) as out:
        out.write(("\n".join(lines) + "\n" + body).encode())
    system_path = path.with_name(path.stem + ".system.json")
    s = CALIBRATION_SYSTEM
    system = {"scheduling-policy": s.scheduling_policy, "endpoint-delay": s.endpoint_delay_ns,
              "active-chunks-per-dimension": s.active_chunks_per_dimension,
              "preferred-dataset-splits": s.preferred_dataset_splits, "all-reduce-implementation": list(s.all_reduce),
              "all-gather-implementation": list(s.all_gather), "reduce-scatter-implementation": list(s.reduce_scatter),
              "all-to-all-implementation": list(s.all_to_all), "collective-optimization": s.collective_optimization,
              "local-mem-bw": s.local_mem_bw_gbps, "roofline-enabled": 0, "peak-perf": s.peak_perf_tflops}
    if cal.overheads_ns:
        system[OVERHEAD_KEY] = {k: round(v, 1) for k, v in sorted(cal.overheads_ns.items())}
    if cal.slots_per_rank > 1:
        system[SLOTS_RANK_KEY] = cal.slots_per_rank
        system[SLOTS_GROUP_KEY] = cal.slots_per_group
    if cal.holdout:
        system[ERRORS_KEY] = [round(e, 5) for e in cal.holdout.values()]
    if cal.residuals_ns:
        residuals: dict[str, dict[str, list]] = {}
        for (kind, group), vectors in sorted(cal.residuals_ns.items()):
            residuals.setdefault(kind, {})[str(group)] = [list(v) for v in vectors]
        system[RESIDUALS_KEY] = residuals
    with atomic_output(system_path, compress=False) as out:
        out.write(orjson.dumps(system, option=orjson.OPT_INDENT_2) + b"\n")
    return path, system_path
