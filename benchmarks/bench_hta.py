"""etkit against HTA on the GPU traces of shared data: convert-and-analyse, whole process, side by side.

For each Kineto GPU trace in ``../shared/data`` (param's ``linear``, HTA's test traces), both tools run as
fresh processes on the same folder, several times, one tool's run after the other's (so both see the same
load); the medians of wall time, of CPU time (user + system: the steadier figure on a loaded machine) and
of peak RSS are printed (benchmarks/processes.py: to the microsecond, where GNU time's 10 ms steps were a
tenth of a small trace's run):

- etkit: ``etkit analyze TRACE --csv DIR`` (Kineto converted on the fly, then every analysis: breakdown,
  top ops, comm, critical path, stragglers and HTA's GPU figures, written as CSV tables);
- HTA 0.5.0 (``.venv-ref``, ``make refenv``): ``TraceAnalysis`` load plus the same analyses
  (tests/analyze/hta_reference.py: temporal, kernel, overlap, idle, launch and annotation breakdowns).

Targets (issue 11): etkit at least 5x faster end to end, peak memory at most HTA's. The machine is shared:
run it when it is quiet (the load average is printed).

    python benchmarks/bench_hta.py                 # every trace, 3 runs each
    python benchmarks/bench_hta.py --runs 5 --only hta-diff-test param-linear
    python benchmarks/bench_hta.py --baseline OLD/src   # also an older etkit tree, in the same alternation
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(REPO / "benchmarks"))

from processes import measure  # noqa: E402  (how a process is timed, one home)
from tests.conftest import KINETO_TRACES, REF_VENV  # noqa: E402  (the shared-data table, one place)

ETKIT = [sys.executable, "-m", "etkit"]
HTA = [str(REF_VENV / "bin" / "python"), str(REPO / "tests" / "analyze" / "hta_reference.py")]


def _measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds: user + system, peak RSS MiB) of one fresh process (benchmarks/processes.py)."""
    run = measure(cmd, env=env)
    return run.wall, run.cpu, run.peak_mb


def _medians(runs: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    return tuple(statistics.median(r[k] for r in runs) for k in range(3))  # type: ignore[return-value]


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
    p.add_argument("--baseline", type=Path, metavar="SRC",
                   help="also time the etkit of this src/ tree (e.g. a git worktree of main), alternating with the others")
    args = p.parse_args()
    if not (REF_VENV / "bin" / "python").exists():
        raise SystemExit(f"HTA's environment {REF_VENV} is missing: make refenv")
    names = args.only or [n for n in sorted(KINETO_TRACES) if n != "hta-cpu-only"]  # HTA needs GPU work
    print(f"load average {os.getloadavg()[0]:.1f}; {args.runs} runs each; medians")
    print(f"{'trace':24} {'etkit s':>8} {'HTA s':>8} {'wall x':>7} {'etkit cpu':>9} {'HTA cpu':>8} {'cpu x':>6} "
          f"{'etkit MiB':>9} {'HTA MiB':>8} {'mem ratio':>9}")
    totals = [0.0, 0.0, 0.0, 0.0]
    base_cpu: list[float] = []
    # both tools as installed: their modules' bytecode cached (PYTHONDONTWRITEBYTECODE would make every etkit
    # run compile its modules again, while HTA's site-packages hold compiled bytecode), warmed up by one run each
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    hta_env = {**env, "HTA_DISABLE_NS_ROUNDING": "1"}
    base_env = {**env, "PYTHONPATH": str(args.baseline.resolve())} if args.baseline else None
    with tempfile.TemporaryDirectory(prefix="etkit-bench-hta-") as tmp:
        root = Path(tmp)
        warm = True
        for name in names:
            d = _trace_dir(name, root)
            if warm:
                _measure([*ETKIT, "analyze", str(d), "-q", "-j", "1", "--csv", str(root / "warm-up")], env)
                _measure([*HTA, str(d)], hta_env)
                warm = False
            ours, theirs, base = [], [], []
            analyze = [*ETKIT, "analyze", str(d), "-q", "-j", "1", "--csv", str(root / f"{name}-csv")]
            for _ in range(args.runs):  # alternating, so that both tools see the same load
                ours.append(_measure(analyze, env))
                theirs.append(_measure([*HTA, str(d)], hta_env))
                if base_env is not None:
                    base.append(_measure(analyze, base_env))
            (ew, ec, em), (hw, hc, hm) = _medians(ours), _medians(theirs)
            if base:
                base_cpu.append(_medians(base)[1])
                print(f"{'':24} baseline etkit cpu {base_cpu[-1]:.3f} s ({base_cpu[-1] / ec:.2f}x of it now)")
            for k, v in enumerate((ew, hw, ec, hc)):
                totals[k] += v
            print(f"{name:24} {ew:8.3f} {hw:8.3f} {hw / ew:6.2f}x {ec:9.3f} {hc:8.3f} {hc / ec:5.2f}x "
                  f"{em:9.0f} {hm:8.0f} {em / hm:9.2f}", flush=True)
    ew, hw, ec, hc = totals
    print(f"{'all traces':24} {ew:8.3f} {hw:8.3f} {hw / ew:6.2f}x {ec:9.3f} {hc:8.3f} {hc / ec:5.2f}x   "
          f"(target >= 5x, memory ratio <= 1); load average now {os.getloadavg()[0]:.1f}")
    if base_cpu:
        print(f"{'baseline etkit':24} cpu {sum(base_cpu):.3f} s: HTA / baseline {hc / sum(base_cpu):.2f}x, "
              f"baseline / now {sum(base_cpu) / ec:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
