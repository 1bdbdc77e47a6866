"""One interface for per-rank work: ``executor.map(fn, items)``.

Tools never start processes themselves; they hand per-rank tasks to an :class:`Executor`. The default
is a local process pool (:class:`ProcessExecutor`); :class:`SerialExecutor` runs in-process (tests, tiny
jobs), and :class:`DaskExecutor` runs the same tasks on a Dask cluster (``pip install 'etkit[dask]'``).

Choosing one by name (the CLI's ``--executor`` and ``ETKIT_EXECUTOR``): :func:`executor_from_spec`
takes ``serial``, ``local`` / ``local:N`` (a pool of N processes) or ``dask://HOST:PORT`` (the address of
a running ``dask scheduler``; ``tcp://``, ``tls://`` and ``ucx://`` addresses are taken as they are).

A task is a module-level function and small, picklable items: paths of rank files, not traces. On a
cluster the workers read and write those paths themselves (a file system shared at the same paths), and
send back only what the task returns (a report, findings, a summary row). An executor whose tasks run on
other machines says so with ``remote = True``; work whose results are whole traces (loading a job into
this process) then runs in this process's own pool instead (:func:`in_client`), since the traces must end
up here anyway and the shared file system is the cheaper way to bring them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from .errors import EtkitError, UsageError
from .progress import Progress

__all__ = ["Executor", "SerialExecutor", "ProcessExecutor", "DaskExecutor", "default_executor",
           "executor_from_spec", "check_executor_spec", "in_client", "EXECUTOR_ENV"]

T = TypeVar("T")
R = TypeVar("R")

#: Environment variable naming the executor when ``--executor`` is not given (same syntax).
EXECUTOR_ENV = "ETKIT_EXECUTOR"
_DASK_SCHEMES = ("dask://", "tcp://", "tls://", "ucx://", "inproc://")
_SPEC_HELP = "serial, local, local:N or dask://HOST:PORT"


class Executor(Protocol):
    def map(self, fn: Callable[[T], R], items: Iterable[T], *, desc: str = "") -> list[R]:
        """``[fn(x) for x in items]`` in order; ``fn`` and items must be picklable for remote executors."""
        ...


class SerialExecutor:
    """Runs every task in the calling process."""

    remote = False

    def __init__(self, *, quiet: bool = True) -> None:
        self.quiet = quiet

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, desc: str = "") -> list[R]:
        seq = list(items)
        out: list[R] = []
        with Progress(total=len(seq), desc=desc, quiet=self.quiet) as bar:
            for item in seq:
                out.append(fn(item))
                bar.advance()
        return out


class ProcessExecutor:
    """A local process pool (``workers`` defaults to the CPU count); falls back to serial for one task."""

    remote = False

    def __init__(self, workers: int | None = None, *, quiet: bool = True) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.quiet = quiet

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, desc: str = "") -> list[R]:
        seq: Sequence[Any] = list(items)
        if len(seq) <= 1 or self.workers <= 1:
            return SerialExecutor(quiet=self.quiet).map(fn, seq, desc=desc)
        results: list[Any] = [None] * len(seq)
        from concurrent.futures import ProcessPoolExecutor, as_completed  # here: costly to import

        with ProcessPoolExecutor(max_workers=min(self.workers, len(seq))) as pool, \
                Progress(total=len(seq), desc=desc, quiet=self.quiet) as bar:
            futures = {pool.submit(fn, item): i for i, item in enumerate(seq)}
            try:
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    bar.advance()
            except BaseException:  # a failed task or a signal: the tasks not started never start
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        return results


class DaskExecutor:
    """Tasks on a Dask cluster: ``DaskExecutor("tcp://10.0.0.5:8786")`` (or ``dask://``), or a ``Client``.

    The connection opens at the first :meth:`map` (so building one costs nothing) and is kept for the
    executor's life; :meth:`close` (or ``with``) ends it when this executor opened it. Tasks run where the
    scheduler puts them; a worker that dies has its tasks re-run elsewhere by the scheduler (up to its
    ``distributed.scheduler.allowed-failures``, then a one-line error). A task that raises re-raises the
    same exception here (an :class:`~etkit.errors.EtkitError` keeps its one-line message naming rank and
    file), and the tasks not yet done are cancelled. The progress bar advances as futures complete.

    Items go to the cluster in chunks (``chunk`` items per task; default: about four tasks per worker
    thread), so that a job of many small ranks does not pay the scheduler's round trip per rank; a chunk
    fails with its first failing item's exception, and a dead worker's chunks are re-run whole.
    ``local_workers`` sizes the local pool of :func:`in_client` (work whose results are whole traces).
    """

    remote = True

    def __init__(self, address: Any, *, quiet: bool = True, local_workers: int | None = None,
                 timeout: float = 30.0, chunk: int | None = None) -> None:
        if isinstance(address, str):
            self.address = _dask_address(address)
            self._client: Any = None
            self._owned = True
        else:  # a distributed.Client the caller manages
            self.address = str(getattr(address, "scheduler", None) and address.scheduler.address)
            self._client, self._owned = address, False
        self.quiet = quiet
        self.local_workers = local_workers
        self.timeout = timeout
        self.chunk = chunk

    def __repr__(self) -> str:
        return f"DaskExecutor({self.address!r})"

    @property
    def client(self) -> Any:
        """The ``distributed.Client`` (connected on first use)."""
        if self._client is None:
            distributed = _import_distributed(self.address)
            try:
                self._client = distributed.Client(self.address, timeout=self.timeout, set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise EtkitError(f"{self.address}: no Dask scheduler answers there ({_one_line(exc)})") from None
            _warn_if_elsewhere(self._client)
        return self._client

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, desc: str = "") -> list[R]:
        seq = list(items)
        if not seq:
            return []
        from distributed import as_completed as dask_completed

        client = self.client
        size = self.chunk or max(1, len(seq) // (4 * max(1, sum(client.nthreads().values()))))
        chunks = [seq[i:i + size] for i in range(0, len(seq), size)]
        import uuid

        tag = f"{desc or getattr(fn, '__name__', 'task')}-{uuid.uuid4().hex[:12]}"
        futures = client.map(_chunk_task, [(fn, chunk) for chunk in chunks],
                             key=[f"etkit-{tag}-{i}" for i in range(len(chunks))], pure=False)
        where = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(chunks)
        try:
            with Progress(total=len(seq), desc=desc, quiet=self.quiet) as bar:
                for future in dask_completed(futures, loop=client.loop):
                    i = where[future.key]
                    results[i] = _result(future, fn, chunks[i])
                    future.release()
                    bar.advance(len(chunks[i]))
        except BaseException:
            client.cancel(futures)
            raise
        return [r for chunk in results for r in chunk]

    def close(self) -> None:
        """Close the connection this executor opened (a caller's ``Client`` is left open)."""
        if self._client is not None and self._owned:
            self._client.close()
        self._client = None if self._owned else self._client

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chunk_task(task: tuple[Callable[[Any], Any], list[Any]]) -> list[Any]:
    """One cluster task: ``fn`` over a chunk of items, in order (the first item that fails fails the chunk)."""
    fn, chunk = task
    return [fn(item) for item in chunk]


def _result(future: Any, fn: Callable, item: Any) -> Any:
    """A finished future's value; a task's own exception re-raised as it is, the cluster's as one line."""
    from distributed.scheduler import KilledWorker

    try:
        return future.result()
    except KilledWorker as exc:
        raise EtkitError(f"dask: task {getattr(fn, '__name__', fn)}({_short(item)}) ended the worker "
                         f"running it each time it was tried ({_one_line(exc)})") from None
    except RuntimeError as exc:
        if "deserialization" not in str(exc):
            raise
        raise EtkitError(f"dask: the cluster cannot load etkit's task ({_one_line(exc.__cause__ or exc)}): the scheduler "
                         "and every worker need the same etkit installed as this client") from None


def _short(item: Any, limit: int = 120) -> str:
    text = repr(item)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _import_distributed(address: str) -> Any:
    try:
        import distributed
    except ImportError:
        raise UsageError(f"executor {address}: Dask is not installed (pip install 'etkit[dask]')") from None
    return distributed


def _warn_if_elsewhere(client: Any) -> None:
    """Relative paths resolve in each worker's directory: say so once when that is not this one."""
    here = os.getcwd()
    try:
        dirs = set(client.run(os.getcwd).values())
    except Exception:  # a scheduler that does not allow run(): nothing to say
        return
    if dirs and dirs != {here}:
        print(f"etkit: Dask workers run in {', '.join(sorted(dirs))}, not in {here}: relative paths resolve there "
              "(give absolute paths, or start the workers here)", file=sys.stderr)


def _dask_address(spec: str) -> str:
    return "tcp://" + spec[len("dask://"):] if spec.startswith("dask://") else spec


def check_executor_spec(spec: str) -> str:
    """``spec`` when it names an executor (:func:`executor_from_spec`), else a one-line :class:`UsageError`."""
    text = spec.strip()
    if text in ("serial", "local"):
        return text
    if text.startswith("local:"):
        count = text[len("local:"):]
        if not count.isdigit() or int(count) < 1:
            raise UsageError(f"executor {spec!r}: local:N needs N, a whole number of at least 1")
        return text
    for scheme in _DASK_SCHEMES:
        if text.startswith(scheme):
            host, _, port = text[len(scheme):].rpartition(":")
            if scheme != "inproc://" and (not host or not port.isdigit()):
                raise UsageError(f"executor {spec!r}: expected {scheme}HOST:PORT, e.g. dask://127.0.0.1:8786")
            return text
    raise UsageError(f"executor {spec!r}: expected {_SPEC_HELP}")


def executor_from_spec(spec: str | None, *, workers: int | None = None, quiet: bool = True) -> Executor:
    """The executor ``spec`` names (``None`` = the default local pool); ``workers`` sizes local pools.

    ``serial``: in-process. ``local``: a pool of ``workers`` processes (default the CPU count; 1 = serial).
    ``local:N``: a pool of N. ``dask://HOST:PORT`` (or a ``tcp://`` ... address): :class:`DaskExecutor`.
    """
    text = check_executor_spec(spec) if spec is not None else "local"
    if text == "serial":
        return SerialExecutor(quiet=quiet)
    if text.startswith("local"):
        count = int(text[len("local:"):]) if text.startswith("local:") else workers
        return SerialExecutor(quiet=quiet) if count == 1 else ProcessExecutor(count, quiet=quiet)
    return DaskExecutor(text, quiet=quiet, local_workers=workers)


def in_client(executor: Executor | None, *, quiet: bool | None = None) -> Executor:
    """The executor for tasks whose results are whole traces that this process keeps (loading a job).

    ``executor`` itself when its tasks run on this machine; for a remote one (``remote = True``) a local
    pool (its ``local_workers`` processes), so that traces come from the shared file system rather than
    through the cluster's scheduler.
    """
    if executor is None:
        return default_executor(quiet=True if quiet is None else quiet)
    if not getattr(executor, "remote", False):
        return executor
    workers = getattr(executor, "local_workers", None)
    quiet = getattr(executor, "quiet", True) if quiet is None else quiet
    local = SerialExecutor(quiet=quiet) if workers == 1 else ProcessExecutor(workers, quiet=quiet)
    if not quiet and not getattr(executor, "_told_local", False):
        executor._told_local = True  # type: ignore[attr-defined]
        count = getattr(local, "workers", 1)
        print(f"etkit: whole traces are needed in this process: reading them here ({count} local process"
              f"{'es' if count != 1 else ''}), not on {getattr(executor, 'address', 'the cluster')}", file=sys.stderr)
    return local


def default_executor(workers: int | None = None, *, quiet: bool = True) -> Executor:
    """The executor tools use when the caller passes none: a local process pool."""
    return ProcessExecutor(workers, quiet=quiet)
