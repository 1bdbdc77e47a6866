"""LLM serving (issue 18): generate and simulate a 10-minute run at 10 requests/s on 16 GPUs.

Each step runs as its own CLI process (what a user runs), several times; the script prints the median
wall and CPU time and the peak RSS of each, against the targets (both under 30 s, bounded memory), and
how far the simulated makespan is from the generator's clock.

    .venv/bin/python benchmarks/bench_serve.py [--runs 3] [--duration 600] [--rate 10]

The run: Llama-3 70B, two colocated instances of TP 8 on H100 (``--serving-preset llama3-70b-h100``),
prompts lognormal (median 512, sigma 0.8), outputs lognormal (median 200, sigma 0.6); then the same load
disaggregated 8:8.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ETKIT = [sys.executable, "-m", "etkit"]
TARGET_S = 30.0


_TIME = Path("/usr/bin/time")


def _timed(args: list[str], cwd: Path) -> tuple[float, float, int, str]:
    """(wall s, CPU s, peak RSS MB, stdout) of one process (through /usr/bin/time where there is one: a
    child's RSS high-water mark otherwise starts at its parent's)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "time"
        wrapped = [str(_TIME), "-f", "%U %S %M", "-o", str(report), *args] if _TIME.exists() else args
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(wrapped, cwd=cwd, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - start
        if _TIME.exists():
            user, system, peak_kb = report.read_text().split()[-3:]
            return wall, float(user) + float(system), int(peak_kb) // 1024, proc.stdout
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return wall, cpu, after.ru_maxrss // 1024, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of arrivals (default 600)")
    parser.add_argument("--rate", type=float, default=10.0, help="requests per second (default 10)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {args.runs} run(s) each")
    load = ["--rate", str(args.rate), "--duration", str(args.duration), "--prompt-len", "lognormal:512:0.8",
            "--output-len", "lognormal:200:0.6", "--serving-preset", "llama3-70b-h100", "-q"]
    layouts = {"colocated 2 x tp8": ["--instances", "2"], "disaggregated 8:8": ["--disaggregated", "8:8"]}
    with tempfile.TemporaryDirectory(prefix="etkit-bench-serve-") as folder:
        cwd = Path(folder)
        for label, layout in layouts.items():
            gen, sim = [], []
            summary = clock = makespan = ""
            for _ in range(args.runs):
                gen.append(_timed([*ETKIT, "generate", "llm-serve", *load, *layout, "-o", "run"], cwd))
                sim.append(_timed([*ETKIT, "simulate", "run", "--preset", "hgx-h100", "--slo-ttft", "500",
                                   "--slo-tpot", "25", "-q"], cwd))
                summary = gen[-1][3]
                clock = re.search(r"([\d,.]+) s on the scheduler's clock", summary).group(1)  # type: ignore[union-attr]
                makespan = re.search(r"makespan ([\d,]+) ns", sim[-1][3]).group(1)  # type: ignore[union-attr]
            requests = re.search(r"([\d,]+) requests", summary).group(1)  # type: ignore[union-attr]
            steps = re.search(r"([\d,]+) engine steps", summary).group(1)  # type: ignore[union-attr]
            drift = abs(int(makespan.replace(",", "")) / 1e9 - float(clock.replace(",", ""))) / float(clock.replace(",", ""))
            print(f"\n{label}: {requests} requests, {steps} engine steps, {args.duration:g} s at {args.rate:g}/s")
            for what, runs in (("generate", gen), ("simulate", sim)):
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                rss = max(r[2] for r in runs)
                verdict = "met" if wall < TARGET_S else "NOT met"
                print(f"  {what:<9} wall {wall:6.1f} s (target < {TARGET_S:.0f} s: {verdict}), CPU {cpu:6.1f} s, "
                      f"peak RSS {rss} MB")
            print(f"  simulated makespan {int(makespan.replace(',', '')) / 1e9:,.3f} s vs the generator's clock "
                  f"{clock} s ({drift:.4%} apart)")
            print("  " + "\n  ".join(line for line in sim[-1][3].splitlines() if line.startswith(("TTFT", "TPOT", "goodput"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
