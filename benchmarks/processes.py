"""How the benchmarks time a fresh process: wall time, CPU time and peak memory of one run of a command.

One home for ``bench_real.py``, ``bench_hta.py`` and ``bench_serve.py``:

- wall time by ``time.perf_counter`` around the process, from its start to its reaping;
- CPU time (user + system) from the kernel's accounting of the reaped child (``os.wait4``), to the
  microsecond: GNU time's ``%U``/``%S`` have 10 ms steps, as much as a tenth of a small trace's run;
- peak RSS from GNU time's ``%M`` where ``/usr/bin/time`` is installed (the command then runs under it: a child's
  RSS high-water mark starts at its parent's, Linux keeps it across exec, and that parent is then ``time``, not
  the benchmark), else from the child's own accounting.

``time`` itself adds about a millisecond of wall and CPU time to every command, whichever tool it runs.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TIME = Path("/usr/bin/time")


@dataclass
class Run:
    cpu: float  # user + system seconds of the process (and the children it waited for)
    peak_mb: float  # its peak resident set, MiB
    wall: float  # seconds
    stdout: str = ""  # what it printed, where asked for (``measure(..., capture=True)``)


def measure(cmd: list[str], cwd: Path | None = None, ok: tuple[int, ...] = (0,), *,
            env: dict[str, str] | None = None, capture: bool = False) -> Run:
    """Run ``cmd`` to completion (stdout discarded, or kept in :attr:`Run.stdout` with ``capture``; stderr kept
    for the error of a failed run): its :class:`Run`. A run whose exit status is not in ``ok`` raises
    ``RuntimeError`` with the end of its stderr. (Both streams go to files: a pipe could fill while the child is
    waited for.)"""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "time"
        wrapped = [str(TIME), "-f", "%M", "-o", str(report), *cmd] if TIME.exists() else cmd
        with open(Path(scratch) / "err", "w+b") as err, open(Path(scratch) / "out", "w+b") as out:
            start = time.perf_counter()
            proc = subprocess.Popen(wrapped, cwd=cwd, env=env, stdout=out if capture else subprocess.DEVNULL,
                                    stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode not in ok:
                err.seek(0)
                raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}: {err.read().decode()[-2000:]}")
            out.seek(0)
            printed = out.read().decode() if capture else ""
        cpu = usage.ru_utime + usage.ru_stime
        peak_kb = int(report.read_text().split()[-1]) if TIME.exists() else usage.ru_maxrss
    return Run(cpu, peak_kb / 1024, wall, printed)
