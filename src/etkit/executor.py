"""One interface for per-rank work: ``executor.map(fn, items)``.

Tools never start processes themselves; they hand per-rank tasks to an :class:`Executor`. The default
is a local process pool; :class:`SerialExecutor` runs in-process (tests, tiny jobs), and a cluster
engine such as Dask fits behind the same two-method protocol without touching the tools.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Protocol, TypeVar

from .progress import Progress

__all__ = ["Executor", "SerialExecutor", "ProcessExecutor", "default_executor"]

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    def map(self, fn: Callable[[T], R], items: Iterable[T], *, desc: str = "") -> list[R]:
        """``[fn(x) for x in items]`` in order; ``fn`` and items must be picklable for remote executors."""
        ...


class SerialExecutor:
    """Runs every task in the calling process."""

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

    def __init__(self, workers: int | None = None, *, quiet: bool = True) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.quiet = quiet

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, desc: str = "") -> list[R]:
        seq: Sequence[Any] = list(items)
        if len(seq) <= 1 or self.workers <= 1:
            return SerialExecutor(quiet=self.quiet).map(fn, seq, desc=desc)
        results: list[Any] = [None] * len(seq)
        with ProcessPoolExecutor(max_workers=min(self.workers, len(seq))) as pool, \
                Progress(total=len(seq), desc=desc, quiet=self.quiet) as bar:
            futures = {pool.submit(fn, item): i for i, item in enumerate(seq)}
            from concurrent.futures import as_completed

            for future in as_completed(futures):
                results[futures[future]] = future.result()
                bar.advance()
        return results


def default_executor(workers: int | None = None, *, quiet: bool = True) -> Executor:
    """The executor tools use when the caller passes none: a local process pool."""
    return ProcessExecutor(workers, quiet=quiet)
