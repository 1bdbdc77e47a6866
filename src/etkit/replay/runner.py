"""Launching a replay: one process per rank (gloo on loopback, or NCCL on GPUs), or inside torchrun.

:func:`replay_job` loads and plans the job in the calling process (so a job that cannot be replayed
fails before anything starts), then either

* spawns ``world`` rank processes that meet through a ``file://`` rendezvous in a private temporary
  folder, each loading only its own trace; results come back as pickles in that folder; or
* when the environment already is a torchrun rank (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``), replays
  that rank and gathers every rank's result with ``all_gather_object``.

A deadline bounds the whole run: collectives get ``timeout_s`` through the process group, and the
launcher terminates rank processes that outlive it, naming them in the error.
"""

from __future__ import annotations

import datetime
import os
import pickle
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import EtkitError, OptionError
from ..executor import SerialExecutor
from ..model.job import Job, load_job
from ..model.trace import load_trace
from ..progress import Progress
from ..rankprocs import start_ranks
from ..records import record
from ..units import format_bytes
from .plan import JobPlan, RankReplayPlan, largest_buffer, plan_job

__all__ = ["ReplayOptions", "replay_job", "in_torchrun"]


@record
class ReplayOptions:
    """Everything a rank needs besides its trace and plan (picklable)."""

    mode: str = "full"
    iters: int = 1
    warmup: int = 1
    backend: str | None = None  # default: nccl with cuda, else gloo
    device: str | None = None  # default: cuda when available, else cpu
    timeout_s: float = 120.0
    pool_bytes: int = 1 << 30
    threads: int = 1  # intra-op threads per rank (PyTorch traces are collected with 1 on this project's hosts)
    host_time: bool = True  # spin for containers' exclusive time (framework overhead around the ops)
    max_buffer_bytes: int | None = None  # per rank and communication; None: half this host's free memory per rank
    allow_mismatch: bool = False  # replay ranks that disagree about sizes or unmatched messages (plan_job)

    def resolved(self) -> ReplayOptions:
        """These options with backend and device decided, checked against this host."""
        import torch

        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        backend = self.backend or ("nccl" if device == "cuda" else "gloo")
        if device == "cuda" and not torch.cuda.is_available():
            raise OptionError("{device}: no CUDA device is available on this host", device=device)
        if backend == "nccl" and device != "cuda":
            raise OptionError("{backend} needs {device}", backend=backend, device="cuda")
        if self.iters < 1 or self.warmup < 0:
            raise OptionError("{iters} must be >= 1 and {warmup} >= 0", iters=self.iters, warmup=self.warmup)
        if self.max_buffer_bytes is not None and self.max_buffer_bytes <= 0:
            raise OptionError("{max_buffer_bytes} must be positive", max_buffer_bytes=self.max_buffer_bytes)
        return replace(self, backend=backend, device=device)


def _available_memory() -> int:
    """Bytes the kernel says can be allocated without swapping (``MemAvailable``), or all physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def buffer_limit(options: ReplayOptions, world: int) -> tuple[int, str]:
    """Bytes one communication of one rank may hold, and where the figure comes from. Automatic: half
    of the free memory of the device the ranks share, divided by the ranks that share it (the other
    half is left to the tensor pool, the replayed ops and the framework)."""
    if options.max_buffer_bytes is not None:
        return options.max_buffer_bytes, "--max-buffer-bytes"
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world)) if in_torchrun() else world
    if options.device == "cuda":
        import torch

        free = min(torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count()))
        sharing = -(-local // max(torch.cuda.device_count(), 1))
        return free // 2 // sharing, f"half the free GPU memory over {sharing} rank(s) per GPU"
    return _available_memory() // 2 // max(local, 1), f"half the available host memory over {local} rank(s)"


def check_buffers(job: Job, plan: JobPlan, options: ReplayOptions) -> None:
    """Refuse, before any process starts, a replay whose largest communication cannot fit: a rank
    killed for memory mid-collective would leave its peers waiting until the timeout."""
    largest = largest_buffer(plan)
    if largest is None:
        return
    need, rank, row, spec = largest
    limit, basis = buffer_limit(options, plan.world)
    if need > limit:
        node = int(job.traces[rank].ids[row])
        raise EtkitError(f"{job.traces[rank].path or job.prefix}: node {node} ({spec.kind} of {format_bytes(spec.nbytes)}"
                         f" on rank {rank}) needs {format_bytes(need)} of buffers, over the {format_bytes(limit)} "
                         f"allowed ({basis})" + ("" if options.max_buffer_bytes else
                                                  "; use a host with more memory, fewer ranks per host, "
                                                  "or set --max-buffer-bytes"))


def in_torchrun() -> bool:
    """Whether this process is one rank of an existing torchrun/torch.distributed launch."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def _device_for(options: ReplayOptions, rank: int) -> Any:
    import torch

    if options.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank)) % max(torch.cuda.device_count(), 1)
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device(options.device or "cpu")


def run_rank(plan: RankReplayPlan, groups: dict[str, tuple[int, ...]], world: int, options: ReplayOptions) -> Any:
    """Replay this process's rank once the default process group exists; returns its RankResult."""
    import torch
    import torch.distributed as dist

    from .comm import Communicator
    from .engine import RankReplayer
    from .pool import TensorPool

    torch.set_num_threads(max(1, options.threads))
    device = _device_for(options, plan.rank)
    pool = TensorPool(device, max_bytes=options.pool_bytes)
    trace = load_trace(plan.path)
    communicator = Communicator(plan.rank, world, groups, pool)
    replayer = RankReplayer(trace, plan, pool, communicator, host_time=options.host_time)
    with torch.no_grad():
        return replayer.replay(options.iters, options.warmup, barrier=dist.barrier)


def _init_timeout(options: ReplayOptions) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(1.0, options.timeout_s))


def _spawned_rank(rank: int, world: int, folder: str, options: ReplayOptions) -> None:
    """Entry point of a spawned rank process (module level, so it pickles)."""
    import torch.distributed as dist

    out = Path(folder)
    try:
        with open(out / f"plan.{rank}.pkl", "rb") as f:
            plan, groups = pickle.load(f)
        dist.init_process_group(options.backend, init_method=f"file://{out / 'rendezvous'}", rank=rank,
                                world_size=world, timeout=_init_timeout(options))
        result = run_rank(plan, groups, world, options)
        with open(out / f"result.{rank}.pkl.tmp", "wb") as f:
            pickle.dump(result, f)
        os.replace(out / f"result.{rank}.pkl.tmp", out / f"result.{rank}.pkl")
    except BaseException:
        (out / f"error.{rank}.txt").write_text(traceback.format_exc())
        raise
    # Leave together: a rank that closed its connections while a peer was still finishing the last
    # barrier would make that peer fail. The result is saved already, so teardown errors do not count.
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the peer's teardown race, after every result is written
        pass


def _wait_for_ranks(context: Any, out: Path, world: int, deadline: float, quiet: bool) -> str | None:
    """Join the rank processes (progress as their results appear); the failure to report, if any."""
    with Progress(total=world, desc="replay: ranks done", quiet=quiet) as bar:
        done = 0
        try:
            while not context.join(timeout=0.5):
                finished = len(list(out.glob("result.*.pkl")))
                bar.advance(finished - done)
                done = finished
                if time.monotonic() > deadline:
                    alive = [i for i, p in enumerate(context.processes) if p.is_alive()]
                    return f"replay did not finish in time; rank(s) {alive} still running were stopped"
        except Exception as exc:  # a rank failed: report its own traceback's last line
            if len(list(out.glob("result.*.pkl"))) == world:
                return None  # a crash in teardown, after every rank saved its result
            errors = sorted(out.glob("error.*.txt"), key=lambda p: int(p.name.split(".")[1]))
            if not errors:
                return f"a rank failed: {str(exc).splitlines()[0]}"
            details = [f"rank {p.name.split('.')[1]}: {p.read_text().strip().splitlines()[-1]}" for p in errors[:3]]
            return "replay failed: " + "; ".join(details)
        bar.advance(world - done)
    return None


def _spawn(plan: JobPlan, options: ReplayOptions, quiet: bool) -> list[Any]:
    with tempfile.TemporaryDirectory(prefix="etkit-replay-") as folder:
        out = Path(folder)
        for rank, rank_plan in plan.ranks.items():
            with open(out / f"plan.{rank}.pkl", "wb") as f:
                pickle.dump((rank_plan, plan.groups), f)
        context = start_ranks(_spawned_rank, (plan.world, folder, options), plan.world, join=False)
        deadline = time.monotonic() + options.timeout_s + 60.0 + 10.0 * plan.world
        try:
            failure = _wait_for_ranks(context, out, plan.world, deadline, quiet)
        finally:
            for process in context.processes:  # only the rank processes this call started
                if process.is_alive():
                    process.terminate()
            for process in context.processes:
                process.join(timeout=5.0)
        if failure:
            raise EtkitError(failure)
        results = []
        for rank in sorted(plan.ranks):
            path = out / f"result.{rank}.pkl"
            if not path.is_file():
                raise EtkitError(f"rank {rank} ended without a result")
            with open(path, "rb") as f:
                results.append(pickle.load(f))
        return results


def _torchrun(plan: JobPlan, options: ReplayOptions) -> list[Any]:
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != plan.world:
        raise EtkitError(f"torchrun world size {world} differs from the trace's {plan.world} ranks")
    created = not dist.is_initialized()
    if created:
        dist.init_process_group(options.backend, timeout=_init_timeout(options))
    try:
        result = run_rank(plan.ranks[rank], plan.groups, world, options)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, result)
    finally:
        if created:
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a peer's teardown race; the results are gathered already
                pass
    return gathered


def replay_job(spec: str | os.PathLike[str] | list[str] | Job, *, ranks: int | None = None,
               options: ReplayOptions | None = None, comm_groups: str | None = None, quiet: bool = True) -> Any:
    """Replay the job at ``spec`` (prefix or files) on real hardware and compare it with the trace.

    Returns a :class:`~etkit.replay.report.ReplayReport`. ``ranks`` must equal the job's rank count when
    given. Inside torchrun every rank calls this and gets the same report.
    """
    from .report import build_report

    options = (options or ReplayOptions()).resolved()
    job = spec if isinstance(spec, Job) else load_job(spec, comm_groups=comm_groups, executor=SerialExecutor())
    if ranks is not None and ranks != job.world_size:
        where = str(job.prefix or "job").replace("{", "{{").replace("}", "}}")
        raise OptionError(f"{where}: {{ranks}} but the trace has {job.world_size} ranks", ranks=ranks)
    plan = plan_job(job, options.mode, allow_mismatch=options.allow_mismatch)
    check_buffers(job, plan, options)
    results = _torchrun(plan, options) if in_torchrun() else _spawn(plan, options, quiet)
    return build_report(job, plan, options, results)
