"""etkit against HTA on the GPU traces of shared data: convert-and-analyse, whole process, side by side.

For each Kineto GPU trace in ``../shared/data`` (param's ``linear``, HTA's test traces), both tools run as
fresh processes on the same folder, several times; the medians of wall time and of peak RSS are printed:

- etkit: ``etkit analyze TRACE --csv DIR`` (Kineto converted on the fly, then every analysis: breakdown,
  top ops, comm, critical path, stragglers and HTA's GPU figures, written as CSV tables);
- HTA 0.5.0 (``.venv-ref``, ``make refenv``): ``TraceAnalysis`` load plus the same analyses
  (tests/analyze/hta_reference.py: temporal, kernel, overlap, idle, launch and annotation breakdowns).

Targets (issue 11): etkit at least 5x faster end to end, peak memory at most HTA's. The machine is shared:
run it when it is quiet (the load average is printed).

    python benchmarks/bench_hta.py                 # every trace, 3 runs each
    python benchmarks/bench_hta.py --runs 5 --only hta-diff-test param-linear
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import KINETO_TRACES, REF_VENV  # noqa: E402  (the shared-data table, one place)

ETKIT = [sys.executable, "-m", "etkit"]
HTA = [str(REF_VENV / "bin" / "python"), str(REPO / "tests" / "analyze" / "hta_reference.py")]
TIME = shutil.which("time") and "/usr/bin/time"


def _measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one fresh process, by GNU time."""
    out = tempfile.NamedTemporaryFile(prefix="etkit-bench-time-", delete=False)
    out.close()
    try:
        done = subprocess.run([TIME or "/usr/bin/time", "-f", "%e %M", "-o", out.name, *cmd], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr[-500:]}")
        wall, rss_kb = Path(out.name).read_text().split()[-2:]
        return float(wall), float(rss_kb) / 1024
    finally:
        os.unlink(out.name)


def _trace_dir(name: str, root: Path) -> Path:
    """A folder with the trace's Kineto files only (HTA reads every trace file of its folder)."""
    from etkit.pytorch.kineto_convert import kineto_files

    d = root / name
    d.mkdir()
    for k in kineto_files(KINETO_TRACES[name]):
        (d / k.path.name).symlink_to(k.path)
    return d


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="runs per tool and trace (medians printed)")
    p.add_argument("--only", nargs="+", choices=sorted(KINETO_TRACES), help="these traces only")
    args = p.parse_args()
    if not (REF_VENV / "bin" / "python").exists():
        raise SystemExit(f"HTA's environment {REF_VENV} is missing: make refenv")
    names = args.only or [n for n in sorted(KINETO_TRACES) if n != "hta-cpu-only"]  # HTA needs GPU work
    print(f"load average {os.getloadavg()[0]:.1f}; {args.runs} runs each; medians")
    print(f"{'trace':24} {'etkit s':>8} {'HTA s':>8} {'speed-up':>8} {'etkit MiB':>10} {'HTA MiB':>8} {'mem ratio':>9}")
    totals = [0.0, 0.0]
    env = {**os.environ, "HTA_DISABLE_NS_ROUNDING": "1"}
    with tempfile.TemporaryDirectory(prefix="etkit-bench-hta-") as tmp:
        root = Path(tmp)
        for name in names:
            d = _trace_dir(name, root)
            ours = [_measure([*ETKIT, "analyze", str(d), "-q", "-j", "1", "--csv", str(root / f"{name}-csv")])
                    for _ in range(args.runs)]
            theirs = [_measure([*HTA, str(d)], env) for _ in range(args.runs)]
            ew, em = statistics.median(w for w, _ in ours), statistics.median(m for _, m in ours)
            hw, hm = statistics.median(w for w, _ in theirs), statistics.median(m for _, m in theirs)
            totals[0] += ew
            totals[1] += hw
            print(f"{name:24} {ew:8.2f} {hw:8.2f} {hw / ew:7.2f}x {em:10.0f} {hm:8.0f} {em / hm:9.2f}")
    print(f"{'all traces':24} {totals[0]:8.2f} {totals[1]:8.2f} {totals[1] / totals[0]:7.2f}x   (target >= 5x, "
          "memory ratio <= 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
