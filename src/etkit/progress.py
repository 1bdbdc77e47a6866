"""A progress bar on stderr for long work; silent when ``quiet`` or when there is nothing to show.

On a terminal the bar is rich's live one. Anywhere else (a pipe, a log file, CI) a live bar cannot redraw, so
rich would print only its last frame; that frame is written here as one plain line instead (the same bar,
count and elapsed time), with a line at most every :data:`LOG_EVERY_S` seconds of long work before it, and
rich is not imported at all.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, TextIO

#: Width of the bar, in cells (rich's ``BarColumn`` default).
BAR_WIDTH = 40
#: Off a terminal, the least time between two progress lines of the same work, in seconds.
LOG_EVERY_S = 30.0


class Progress:
    """``with Progress(total=n, desc="convert") as bar: ... bar.advance()``."""

    def __init__(self, *, total: int | None, desc: str = "", quiet: bool = False) -> None:
        self.total = total
        self.desc = desc or "working"
        self.quiet = quiet
        self._bar: Any = None  # rich.progress.Progress on a terminal, imported only then
        self._task: Any = None
        self._log: _LogLines | None = None

    def __enter__(self) -> Progress:
        if self.quiet:
            return self
        if not sys.stderr.isatty():
            self._log = _LogLines(sys.stderr, self.desc, self.total)
            return self
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
        elif self._log is not None:
            self._log.advance(amount)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
        elif self._log is not None:
            self._log.write()


class _LogLines:
    """Progress as whole lines on a stream that is not a terminal: ``convert ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 8/8 0:00:12``."""

    def __init__(self, stream: TextIO, desc: str, total: int | None) -> None:
        self.stream, self.desc, self.total = stream, desc, total
        self.done = 0
        self.start = self.last = time.monotonic()

    def advance(self, amount: int) -> None:
        self.done += amount
        if time.monotonic() - self.last >= LOG_EVERY_S:
            self.write()

    def write(self) -> None:
        self.last = now = time.monotonic()
        print(progress_line(self.desc, self.done, self.total, now - self.start), file=self.stream, flush=True)


def progress_line(desc: str, done: int, total: int | None, elapsed_s: float) -> str:
    """One plain progress line: the description, a bar of :data:`BAR_WIDTH` cells (a full bar when the total
    is unknown and the work is done), ``done/total`` (``done/?`` when unknown) and the elapsed ``H:MM:SS``."""
    fraction = min(done / total, 1.0) if total else 1.0
    filled = round(fraction * BAR_WIDTH)
    seconds = int(elapsed_s)
    clock = f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    bar = "━" * filled + " " * (BAR_WIDTH - filled)
    return f"{desc} {bar} {done}/{'?' if total is None else total} {clock}"
