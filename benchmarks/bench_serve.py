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
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from processes import measure  # noqa: E402  (how a process is timed, one home)

ETKIT = [sys.executable, "-m", "etkit"]
TARGET_S = 30.0


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
                gen.append(measure([*ETKIT, "generate", "llm-serve", *load, *layout, "-o", "run"], cwd, capture=True))
                sim.append(measure([*ETKIT, "simulate", "run", "--preset", "hgx-h100", "--slo-ttft", "500",
                                    "--slo-tpot", "25", "-q"], cwd, capture=True))
                summary = gen[-1].stdout
                clock = re.search(r"([\d,.]+) s on the scheduler's clock", summary).group(1)  # type: ignore[union-attr]
                makespan = re.search(r"makespan ([\d,]+) ns", sim[-1].stdout).group(1)  # type: ignore[union-attr]
            requests = re.search(r"([\d,]+) requests", summary).group(1)  # type: ignore[union-attr]
            steps = re.search(r"([\d,]+) engine steps", summary).group(1)  # type: ignore[union-attr]
            drift = abs(int(makespan.replace(",", "")) / 1e9 - float(clock.replace(",", ""))) / float(clock.replace(",", ""))
            print(f"\n{label}: {requests} requests, {steps} engine steps, {args.duration:g} s at {args.rate:g}/s")
            for what, runs in (("generate", gen), ("simulate", sim)):
                wall = statistics.median(r.wall for r in runs)
                cpu = statistics.median(r.cpu for r in runs)
                rss = round(max(r.peak_mb for r in runs))
                verdict = "met" if wall < TARGET_S else "NOT met"
                print(f"  {what:<9} wall {wall:6.1f} s (target < {TARGET_S:.0f} s: {verdict}), CPU {cpu:6.1f} s, "
                      f"peak RSS {rss} MB")
            print(f"  simulated makespan {int(makespan.replace(',', '')) / 1e9:,.3f} s vs the generator's clock "
                  f"{clock} s ({drift:.4%} apart)")
            print("  " + "\n  ".join(line for line in sim[-1].stdout.splitlines() if line.startswith(("TTFT", "TPOT", "goodput"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
