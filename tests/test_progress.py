"""etkit.progress: rich's live bar on a terminal; elsewhere (a pipe, a log) one plain line of the same look, at
the end of the work and at most every LOG_EVERY_S seconds before it, and no rich import."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from etkit import progress
from etkit.progress import BAR_WIDTH, Progress, progress_line


def test_a_line_shows_the_bar_the_count_and_the_elapsed_time():
    assert progress_line("convert", 8, 8, 12.9) == f"convert {'━' * BAR_WIDTH} 8/8 0:00:12"
    assert progress_line("convert", 1, 4, 3725.0) == f"convert {'━' * 10}{' ' * 30} 1/4 1:02:05"
    assert progress_line("sweep", 0, 3, 0.0) == f"sweep {' ' * BAR_WIDTH} 0/3 0:00:00"
    assert progress_line("replay", 5, None, 1.0) == f"replay {'━' * BAR_WIDTH} 5/? 0:00:01"
    assert progress_line("x", 9, 4, 0.0).startswith(f"x {'━' * BAR_WIDTH} 9/4")  # (more done than said: full)
    assert progress_line("x", 0, 0, 0.0) == f"x {'━' * BAR_WIDTH} 0/0 0:00:00"


def _run(monkeypatch: pytest.MonkeyPatch, steps: int, *, quiet: bool = False, clock: list[float] | None = None) -> str:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    if clock is not None:
        monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    with Progress(total=steps, desc="convert", quiet=quiet) as bar:
        for _ in range(steps):
            if clock is not None:
                clock[0] += 20.0
            bar.advance()
    return err.getvalue()


def test_off_a_terminal_the_work_ends_with_one_line(monkeypatch):
    assert _run(monkeypatch, 3, clock=[0.0]).splitlines() == [
        f"convert {'━' * 27}{' ' * 13} 2/3 0:00:40", f"convert {'━' * BAR_WIDTH} 3/3 0:01:00"]


def test_short_work_writes_only_its_last_line(monkeypatch):
    assert _run(monkeypatch, 4).splitlines() == [f"convert {'━' * BAR_WIDTH} 4/4 0:00:00"]


def test_quiet_writes_nothing(monkeypatch):
    assert _run(monkeypatch, 4, quiet=True) == ""


def test_a_pipe_gets_the_plain_line_and_rich_is_not_imported():
    code = ("import sys\nfrom etkit.progress import Progress\nwith Progress(total=2, desc='work') as bar:\n"
            "    bar.advance(); bar.advance()\nprint(any(m.startswith('rich') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert done.stdout.strip() == "False"
    assert done.stderr == f"work {'━' * BAR_WIDTH} 2/2 0:00:00\n"


def test_a_terminal_gets_richs_live_bar():
    """Run under a pseudo-terminal: rich draws (and redraws) the bar itself."""
    pty = pytest.importorskip("pty")
    code = ("import sys\nfrom etkit.progress import Progress\nwith Progress(total=2, desc='work') as bar:\n"
            "    bar.advance(); bar.advance()\nprint('rich' in sys.modules, file=sys.stderr)")
    main, child = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-c", code], stdin=child, stdout=child, stderr=child, check=True,
                              env={**os.environ, "TERM": "xterm", "COLUMNS": "100"}, timeout=60)
        assert done.returncode == 0
        out = b""
        os.set_blocking(main, False)
        while True:
            try:
                chunk = os.read(main, 65536)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(main)
        os.close(child)
    text = out.decode("utf-8", "replace")
    assert "True" in text and "2/2" in text and "work" in text
