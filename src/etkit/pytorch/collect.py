"""Recording real PyTorch jobs: the :func:`profile` context manager and the built-in example jobs.

``profile`` wraps a user's training loop and records, for the same profiled steps of this rank, the host
execution trace (``rank-<r>.et.json``) and the Kineto trace (``rank-<r>.kineto.json``), optionally
gzipped. It avoids the known pitfalls (pytorch-traces.md §1): the schedule uses ``repeat=1`` (with the
default ``repeat=0`` a final ``step()`` starts a new cycle that overwrites the Kineto file), and exactly
one ``ExecutionTraceObserver`` is created per rank and handed to the profiler, which starts and stops it
together with Kineto so that both files cover the same steps.

:func:`run_example` runs one of the example workloads of :mod:`etkit.pytorch.examples` on CPU with gloo,
one spawned process per rank (loopback ``file://`` rendezvous), with a progress bar and a clear message
for every rank that fails. PyTorch is imported only when these functions run.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import EtkitError
from ..fileio import atomic_output, check_writable, job_output
from ..progress import Progress
from ..rankprocs import rank_context
from ..records import record

__all__ = ["profile", "Recorder", "run_example", "WORKLOADS", "CollectError"]

#: Built-in example workloads (see :mod:`etkit.pytorch.examples`).
WORKLOADS = ("ddp", "tp", "pp", "moe", "fsdp", "cnn")


class CollectError(EtkitError):
    """A collection run that failed; the message says which rank and why."""


@record
class Recorder:
    """Handle yielded by :func:`profile`: call :meth:`step` once at the end of every loop iteration."""

    host_path: Path
    kineto_path: Path
    total_steps: int
    _prof: Any = None
    steps_done: int = 0

    def step(self) -> None:
        self.steps_done += 1
        self._prof.step()


def _rank_default() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


@contextlib.contextmanager
def profile(output_dir: str | os.PathLike[str], *, rank: int | None = None, steps: int = 2, wait: int = 1,
            warmup: int = 1, compress: bool = False, record_shapes: bool = True) -> Iterator[Recorder]:
    """Record ``steps`` training steps of this rank into ``output_dir``.

    The loop must call ``recorder.step()`` once per iteration and run at least ``wait + warmup + steps``
    iterations: the first ``wait`` are skipped, the next ``warmup`` warm the profiler up, the next
    ``steps`` are recorded. ``rank`` defaults to ``torch.distributed.get_rank()`` (0 without a process
    group). With ``compress`` the files are gzipped (``.json.gz``) afterwards.

    >>> with profile("traces", steps=2) as rec:          # doctest: +SKIP
    ...     for batch in loader:
    ...         train_step(batch)
    ...         rec.step()
    """
    if steps < 1 or wait < 0 or warmup < 0:
        raise EtkitError(f"profile: steps must be >= 1 and wait/warmup >= 0 (got {steps}, {wait}, {warmup})")
    import torch
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, schedule

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    r = _rank_default() if rank is None else rank
    host_path = out / f"rank-{r}.et.json"
    kineto_path = out / f"rank-{r}.kineto.json"
    # PyTorch writes both files in place as it records; under names no job reader matches until they are
    # complete, so a rank killed mid-way never leaves a truncated rank-<r>.*.json behind.
    host_partial, kineto_partial = _partial(host_path), _partial(kineto_path)
    for stale in (host_path, kineto_path, Path(f"{host_path}.gz"), Path(f"{kineto_path}.gz"), host_partial,
                  kineto_partial):
        stale.unlink(missing_ok=True)
    observer = ExecutionTraceObserver().register_callback(str(host_partial))
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    recorder = Recorder(host_path, kineto_path, wait + warmup + steps)

    def export(prof: Any) -> None:
        prof.export_chrome_trace(str(kineto_partial))

    try:
        with torch.profiler.profile(activities=activities, schedule=schedule(wait=wait, warmup=warmup,
                                                                              active=steps, repeat=1),
                                    on_trace_ready=export, record_shapes=record_shapes,
                                    execution_trace_observer=observer) as prof:
            recorder._prof = prof
            yield recorder
        # the profiler has stopped the observer and closed both files: they are complete
        if recorder.steps_done < recorder.total_steps:
            raise EtkitError(f"profile: the loop ran {recorder.steps_done} steps but wait+warmup+steps = "
                             f"{recorder.total_steps}; nothing complete was recorded in {out}")
        for partial, path in ((host_partial, host_path), (kineto_partial, kineto_path)):
            if not partial.is_file():
                raise EtkitError(f"profile: {path} was not written (did the loop call step() every iteration?)")
            if compress:
                with open(partial, "rb") as src, atomic_output(f"{path}.gz", compress=True) as dst:
                    shutil.copyfileobj(src, dst)
            else:
                os.replace(partial, path)
    finally:
        host_partial.unlink(missing_ok=True)
        kineto_partial.unlink(missing_ok=True)
    if compress:
        recorder.host_path = Path(f"{host_path}.gz")
        recorder.kineto_path = Path(f"{kineto_path}.gz")


def _partial(path: Path) -> Path:
    """Where a trace is recorded before it is complete (``rank-0.et.json`` -> ``rank-0.et.json.partial``)."""
    return path.with_name(path.name + ".partial")


# -- example jobs ----------------------------------------------------------------------------------------


def _rank_main(rank: int, workload: str, world: int, out_dir: str, init_file: str, steps: int,
               compress: bool, queue: Any) -> None:
    """Body of one spawned rank: set up gloo, run the workload under :func:`profile`, report progress."""
    started = time.perf_counter()
    _redirect_output(Path(out_dir) / f"rank-{rank}.log")
    try:
        import torch
        import torch.distributed as dist

        from .examples import build_workload

        torch.set_num_threads(1)
        distributed = world > 1 or workload != "cnn"
        if distributed:
            dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
        torch.manual_seed(1234 + rank)
        step_fn = build_workload(workload, rank, world)
        setup_s = time.perf_counter() - started
        step_s = []
        with profile(out_dir, rank=rank, steps=steps, compress=compress) as rec:
            for i in range(rec.total_steps):
                began = time.perf_counter()
                step_fn(i)
                step_s.append(time.perf_counter() - began)
                rec.step()
                queue.put(("step", rank, i))
        if distributed:
            dist.barrier()
            dist.destroy_process_group()
        queue.put(("done", rank, {"setup_s": setup_s, "step_s": step_s, "total_s": time.perf_counter() - started}))
    except BaseException as exc:  # reported to the parent, which names the rank
        queue.put(("error", rank, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        raise


def _redirect_output(log: Path) -> None:
    """Send this process's stdout/stderr (PyTorch's C++ warnings included) to ``log``."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)


def run_example(workload: str, ranks: int, out_dir: str | os.PathLike[str], *, steps: int = 2,
                quiet: bool = False, compress: bool = False, timeout_s: float = 600.0) -> Path:
    """Run the example ``workload`` with ``ranks`` spawned CPU/gloo processes and record ``steps`` steps.

    Writes ``rank-<r>.et.json`` and ``rank-<r>.kineto.json`` for every rank plus ``meta.json`` into
    ``out_dir`` and returns it. Raises :class:`CollectError` naming each rank that failed.

    The collection is one unit (:func:`etkit.fileio.job_output`): the ranks record into a hidden folder
    whose files replace the older collection's only when every rank succeeded; failed or interrupted, the
    older traces stay (the failed ranks' logs are kept in ``out_dir`` for the error message).
    """
    if workload not in WORKLOADS:
        raise CollectError(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")
    if type(steps) is not int or steps < 1:
        raise CollectError(f"steps must be a whole number of at least 1 (got {steps!r})")
    if not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise CollectError(f"timeout must be a number of seconds above 0 (got {timeout_s!r})")
    from .examples import check_world

    check_world(workload, ranks)
    out = Path(out_dir)
    with job_output(out, folder=True) as job:
        return _collect(job, out, workload, ranks, steps, quiet, compress, timeout_s)


def _collect(job: Any, out: Path, workload: str, ranks: int, steps: int, quiet: bool, compress: bool,
             timeout_s: float) -> Path:
    """The body of :func:`run_example`, recording into ``job``'s staging folder."""
    suffix = ".gz" if compress else ""
    for r in range(ranks):  # before any rank starts: a file that could not be replaced in the end
        for name in (f"rank-{r}.et.json{suffix}", f"rank-{r}.kineto.json{suffix}", f"rank-{r}.log"):
            check_writable(out / name)
    work = job.staging
    total_steps = steps + 2
    started = time.perf_counter()
    ctx = rank_context()
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="etkit-rdzv-") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        procs = [ctx.Process(target=_rank_main, args=(r, workload, ranks, str(work), init_file, steps, compress,
                                                      queue), daemon=False) for r in range(ranks)]
        for p in procs:
            p.start()
        errors, timings, late = _watch(procs, queue, ranks * total_steps, f"collect {workload} x{ranks}",
                                       quiet, timeout_s)
    if late or errors:  # the logs the message points to go where it says; the traces are dropped
        for log in work.glob("rank-*.log"):
            os.replace(log, out / log.name)
    if late:
        raise CollectError(f"{workload} job in {out} timed out after {timeout_s:g} s; ranks "
                           f"{', '.join(map(str, late))} had not finished (logs: {out}/rank-<r>.log)")
    if errors:
        # errors arrive in the order the ranks failed: the first is the cause, the others usually follow from it
        lines = [f"rank {r}: {msg.splitlines()[0]} (log: {out / f'rank-{r}.log'})" for r, msg in errors.items()]
        raise CollectError(f"{workload} job in {out} failed on {len(errors)} of {ranks} ranks; first "
                           + "; then ".join(lines))
    import torch

    for path in sorted(work.iterdir()):
        job.path(out / path.name)  # every file the ranks wrote is part of the collection
    removed = stale_rank_files(out, ranks, compress=compress)
    job.replaces(removed)
    meta = {"workload": workload, "world_size": ranks, "backend": "gloo", "profiled_steps": steps,
            "schedule": {"wait": 1, "warmup": 1, "active": steps, "repeat": 1},
            "torch_version": torch.__version__, "collection_wall_s": round(time.perf_counter() - started, 3),
            "rank_timings": {f"rank-{r}": t for r, t in sorted(timings.items())}, "compressed": compress,
            "removed": [p.name for p in removed]}
    with atomic_output(job.path(out / "meta.json"), compress=False) as dst:
        dst.write(orjson.dumps(meta, option=orjson.OPT_INDENT_2) + b"\n")
    return out


_RANK_FILE = re.compile(r"^rank-(?P<rank>\d+)\.(?:(?P<trace>et\.json|kineto\.json)(?P<gz>\.gz)?|log)$")


def remove_stale_rank_files(out_dir: str | os.PathLike[str], ranks: int, *, compress: bool) -> list[Path]:
    """After a collection of ``ranks`` ranks into ``out_dir``: delete what an earlier collection there left that
    this one replaces (traces and logs of ranks ``>= ranks``, the other compression of a rank's traces), so that
    the folder holds one run only. Returns the removed paths."""
    removed = stale_rank_files(out_dir, ranks, compress=compress)
    for path in removed:
        path.unlink()
    return removed


def stale_rank_files(out_dir: str | os.PathLike[str], ranks: int, *, compress: bool) -> list[Path]:
    """What :func:`remove_stale_rank_files` removes, without removing it."""
    stale = []
    for path in sorted(Path(out_dir).iterdir()) if Path(out_dir).is_dir() else ():
        m = _RANK_FILE.match(path.name)
        if m is not None and path.is_file() and (
                int(m.group("rank")) >= ranks or (m.group("trace") is not None and bool(m.group("gz")) != compress)):
            stale.append(path)
    return stale


def _watch(procs: list[Any], queue: Any, total: int, desc: str, quiet: bool,
           timeout_s: float) -> tuple[dict[int, str], dict[int, Any], list[int]]:
    """Follow the ranks until all exit: (errors by rank, timings by rank, the ranks still running when the job
    timed out: empty if it did not)."""
    errors: dict[int, str] = {}
    timings: dict[int, Any] = {}
    timed_out = False
    late: list[int] = []
    deadline = time.monotonic() + timeout_s
    with Progress(total=total, desc=desc, quiet=quiet) as bar:
        while True:
            while not queue.empty():
                kind, rank, payload = queue.get()
                if kind == "step":
                    bar.advance()
                elif kind == "done":
                    timings[rank] = payload
                else:
                    errors[rank] = payload
            alive = [p for p in procs if p.is_alive()]
            if not alive:
                break
            if errors or time.monotonic() > deadline:
                timed_out = not errors
                if timed_out:  # (the ranks may end during the grace below: they were late all the same)
                    late = [r for r, p in enumerate(procs) if p.is_alive()]
                time.sleep(2.0)  # let the other ranks report, then stop the job
                for p in alive:
                    if p.is_alive():
                        p.terminate()
            time.sleep(0.05)
    for p in procs:
        p.join()
    while not queue.empty():
        kind, rank, payload = queue.get()
        if kind == "error":
            errors[rank] = payload
        elif kind == "done":
            timings[rank] = payload
    for r, p in enumerate(procs):
        if p.exitcode not in (0, None) and r not in errors and not timed_out:
            errors[r] = f"process exited with status {p.exitcode} (killed, or stopped after another rank failed)"
    return errors, timings, late
