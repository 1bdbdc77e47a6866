"""Calibrate the network model on this machine: time real collectives (``torch.distributed``, gloo,
ranks spawned on loopback) over a range of sizes, then fit one network dimension (latency per hop and
bandwidth) so that the simulator's own collective model reproduces the measurements.

The fit minimises the relative error of :func:`etkit.simulate.collectives.plan_collective` against
every (collective, size) median, in log space, with ``scipy.optimize.least_squares``; the system the
fit assumes (:data:`CALIBRATION_SYSTEM`) is written beside the network YAML so that a trace collected
here can be simulated with both files and compared with its measured step time.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import yaml

from ..errors import EtkitError, UsageError
from ..fileio import atomic_output
from ..format.schema import CommType
from .collectives import group_layout, plan_collective
from .config import Dimension, NetworkConfig, SystemConfig
from ..format.schema import NodeType
from ..model.job import Job

__all__ = ["measured_step_ns", "Measurement", "Calibration", "measure", "fit", "calibrate", "write_calibration", "CALIBRATION_SYSTEM",
           "DEFAULT_SIZES"]

#: System assumed by the fit: one chunk, no endpoint delay, ring everywhere.
CALIBRATION_SYSTEM = SystemConfig(endpoint_delay_ns=0.0, preferred_dataset_splits=1, active_chunks_per_dimension=1,
                                  local_mem_bw_gbps=1e6, source="etkit calibrate")
DEFAULT_SIZES = (1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22)
COLLECTIVES = {"all_reduce": CommType.ALL_REDUCE, "all_gather": CommType.ALL_GATHER, "broadcast": CommType.BROADCAST}


@dataclass(frozen=True)
class Measurement:
    collective: str  # a COLLECTIVES key or a CommType name
    size: int  # comm_size as an ET would carry it (all_gather: the per-rank shard)
    seconds: float  # median over repetitions (max over ranks per repetition)
    group: int = 0  # members (0 = every rank of the calibration)


@dataclass
class Calibration:
    ranks: int
    backend: str
    measurements: list[Measurement]
    latency_ns: float = 0.0
    bandwidth_gbps: float = 0.0
    topology: str = "Switch"
    errors: list[float] = field(default_factory=list)  # relative error of the fit, per measurement

    def network(self) -> NetworkConfig:
        return NetworkConfig((Dimension(self.topology, self.ranks, self.bandwidth_gbps, self.latency_ns),), "calibration")


def measured_step_ns(job_dir: str | os.PathLike[str]) -> float:
    """The measured time of a collected PyTorch job's profiled steps: per rank the sum of its Kineto
    ``ProfilerStep#N`` spans (files ``rank-<r>.kineto.json[.gz]``), the slowest rank's, in ns."""
    import gzip

    best = 0.0
    for path in sorted(Path(job_dir).glob("rank-*.kineto.json*")):
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as fh:
            events = orjson.loads(fh.read()).get("traceEvents", [])
        best = max(best, sum(float(e.get("dur", 0)) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")))
    return best * 1000.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, backend: str, sizes: tuple[int, ...], reps: int, queue) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    out: list[tuple[str, int, list[float]]] = []
    try:
        for name in COLLECTIVES:
            for size in sizes:
                elems = max(size // 4, 1)
                tensor = torch.ones(elems, dtype=torch.float32)
                gathered = [torch.empty(elems) for _ in range(world)] if name == "all_gather" else None
                times = []
                for rep in range(reps + 1):
                    dist.barrier()
                    began = time.perf_counter()
                    if name == "all_reduce":
                        dist.all_reduce(tensor)
                    elif name == "all_gather":
                        dist.all_gather(gathered, tensor)
                    else:
                        dist.broadcast(tensor, 0)
                    if rep:  # the first call warms up connections and buffers
                        times.append(time.perf_counter() - began)
                out.append((name, elems * 4, times))
    finally:
        dist.destroy_process_group()
    queue.put((rank, out))


def measure(ranks: int = 2, *, backend: str = "gloo", sizes: tuple[int, ...] = DEFAULT_SIZES, reps: int = 5,
            timeout_s: float = 120.0) -> list[Measurement]:
    """Time each collective at each size on ``ranks`` spawned processes (median over ``reps``)."""
    if ranks < 2:
        raise UsageError("calibrate needs at least 2 ranks")
    try:
        import torch.multiprocessing as mp
    except ImportError:
        raise EtkitError("calibrate needs PyTorch (pip install etkit[torch])") from None
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, ranks, port, backend, tuple(sizes), reps, queue)) for r in range(ranks)]
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


def _model_ns(m: Measurement, network: NetworkConfig, ranks: int) -> float:
    layout = group_layout(tuple(range(m.group or ranks)), network)
    comm_type = COLLECTIVES[m.collective] if m.collective in COLLECTIVES else CommType[m.collective]
    return plan_collective(comm_type, m.size, layout, CALIBRATION_SYSTEM).time_ns


def fit(measurements: list[Measurement], ranks: int, *, topology: str = "Switch", backend: str = "gloo",
        relative: bool = True) -> Calibration:
    """Latency and bandwidth of one ``topology`` dimension that best reproduce ``measurements``.

    The model's time is linear in latency and in 1/bandwidth (``hops * L + bytes / B`` per round), so
    the coefficients of each measurement are read off the model itself and the fit is a non-negative
    least squares, on relative errors (sizes over decades: every size counts) or on absolute ones
    (``relative=False``: the fitted model reproduces the total time, what a step-time prediction needs).
    """
    from scipy.optimize import nnls

    def at(latency: float, bandwidth: float) -> np.ndarray:
        probe = NetworkConfig((Dimension(topology, ranks, bandwidth, latency),))
        return np.asarray([_model_ns(m, probe, ranks) for m in measurements])

    huge = 1e12
    base = at(0.0, huge)
    per_latency = (at(1e6, huge) - base) / 1e6  # hops on the critical path
    per_inverse_bw = (at(0.0, 1e-3) - base) * 1e-3  # ns at 1 GB/s
    measured = np.asarray([m.seconds * 1e9 for m in measurements])
    scale = measured if relative else np.ones_like(measured)
    a = np.stack([per_latency, per_inverse_bw], axis=1) / scale[:, None]
    (latency, inverse_bw), _ = nnls(a, (measured - base) / scale)
    bandwidth = 1.0 / inverse_bw if inverse_bw > 0 else huge
    cal = Calibration(ranks, backend, measurements, float(latency), float(bandwidth), topology)
    net = cal.network()
    cal.errors = [_model_ns(m, net, ranks) / (m.seconds * 1e9) - 1.0 for m in measurements]
    return cal


def measurements_from_job(job: Job) -> list[Measurement]:
    """What a measured job says its communication costs: per collective instance (the k-th collective of
    a communicator) the shortest recorded duration over its members, since the last rank to arrive waits
    for nobody. Point-to-point ops are left out: a blocking SEND records its wait for the receiver."""
    by_instance: dict[tuple, list[float]] = {}
    info: dict[tuple, tuple[str, int, int]] = {}
    for rank, trace in job.traces.items():
        timed = trace.start > 0
        pgs = trace.pg_names()
        counters: dict[tuple, int] = {}
        rows = np.flatnonzero((trace.types == NodeType.COMM_COLL_NODE) & timed)
        for row in rows[np.argsort(trace.start[rows], kind="stable")]:
            pg = pgs[row] if pgs[row] not in (None, "") else "0"
            members = job.groups.members(pg, job.world_size)
            k = counters.get(pg, 0)
            counters[pg] = k + 1
            key = (pg, k)
            by_instance.setdefault(key, []).append(float(trace.duration[row]) * 1e-6)
            comm_type = int(trace.comm_type[row])
            if comm_type in set(CommType):
                info[key] = (CommType(comm_type).name, max(int(trace.comm_size[row]), 0), len(members))
    return [Measurement(info[k][0], info[k][1], min(v), info[k][2]) for k, v in by_instance.items()
            if k in info and info[k][2] > 1 and min(v) > 0]


def calibrate_from_job(job: Job) -> Calibration:
    """Fit the network to the communication recorded in a measured job (``etkit calibrate --from-trace``),
    on absolute errors so that the model's total communication time matches the recorded one."""
    measurements = measurements_from_job(job)
    if len(measurements) < 2:
        raise UsageError(f"{job.prefix}: fewer than two timed collectives to calibrate from")
    return fit(measurements, max(job.world_size, 2), backend="trace", relative=False)


def calibrate(ranks: int = 2, *, backend: str = "gloo", sizes: tuple[int, ...] = DEFAULT_SIZES, reps: int = 5) -> Calibration:
    """Measure and fit (what ``etkit calibrate`` runs)."""
    return fit(measure(ranks, backend=backend, sizes=sizes, reps=reps), ranks, backend=backend)


def write_calibration(cal: Calibration, path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write the network YAML (ASTRA-sim keys, measurements as comments) and ``<stem>.system.json`` beside it."""
    path = Path(path)
    lines = [f"# etkit calibrate: {cal.backend}, {cal.ranks} ranks on loopback; fitted on {len(cal.measurements)} medians",
             "# use with the system file written beside it (one chunk, no endpoint delay)"]
    for m, err in zip(cal.measurements, cal.errors):
        lines.append(f"#   {m.collective:<10} {m.size:>9} B  {m.seconds * 1e6:>10.1f} us  fit error {err:+.1%}")
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
    with atomic_output(system_path, compress=False) as out:
        out.write(orjson.dumps(system, option=orjson.OPT_INDENT_2) + b"\n")
    return path, system_path
