"""A progress bar on stderr for long work; silent when ``quiet`` or when there is nothing to show."""

from __future__ import annotations

from types import TracebackType
from typing import Any


class Progress:
    """``with Progress(total=n, desc="convert") as bar: ... bar.advance()``."""

    def __init__(self, *, total: int | None, desc: str = "", quiet: bool = False) -> None:
        self.total = total
        self.desc = desc or "working"
        self.quiet = quiet
        self._bar: Any = None  # rich.progress.Progress, imported only when shown
        self._task: Any = None

    def __enter__(self) -> Progress:
        if not self.quiet:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.desc, total=self.total)
        return self

    def advance(self, amount: int = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, amount)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
