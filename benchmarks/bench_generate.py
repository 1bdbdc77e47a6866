"""Generation time of synthetic LLM training steps (``etkit generate llm``), against the issue's targets.

Each case runs in a fresh child process (generation = building the stage templates + writing every rank
file and the comm groups), several times; the script prints the median wall time, the ratio to the
target (< 1 is within target), the peak memory of the child, the files' total size and nodes per second.

    .venv/bin/python benchmarks/bench_generate.py [--repeat 3] [--skip-16k] [--workers N]

Cases (targets from issue 4): Llama-3 70B, 80 layers, dp 8 x tp 4 x pp 4 = 128 ranks (<= 5 s);
the same model on 1,024 ranks, dp 64 x tp 4 x pp 4 (<= 20 s); GPT-3 175B on 16,384 ranks,
dp 128 x tp 8 x pp 16, global batch 1536 (<= 120 s, bounded memory).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = [
    ("llama3-70b, 80 layers, dp8 tp4 pp4 = 128 ranks", 5.0,
     dict(model="llama3-70b", dp=8, tp=4, pp=4, microbatches=8)),
    ("llama3-70b, 80 layers, dp64 tp4 pp4 = 1,024 ranks", 20.0,
     dict(model="llama3-70b", dp=64, tp=4, pp=4, microbatches=8)),
    ("gpt3-175b, 96 layers, dp128 tp8 pp16 = 16,384 ranks", 120.0,
     dict(model="gpt3-175b", dp=128, tp=8, pp=16, global_batch=1536)),
]

_CHILD = """
import json, sys, time
from etkit.executor import SerialExecutor, ProcessExecutor
from etkit.generate import llm
kwargs, prefix, workers = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
executor = SerialExecutor() if workers == 1 else ProcessExecutor(workers)
start = time.perf_counter()
job = llm(**kwargs)
job.write(prefix, executor=executor)
elapsed = time.perf_counter() - start
nodes = sum(len(t) * len(job.spec.layout.stage_ranks(0)) for t in job.templates().values())
print(json.dumps({"seconds": elapsed, "nodes": nodes}))
"""


def run_once(kwargs: dict, workers: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix="etkit-bench-llm-"))
    try:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(kwargs), str(out / "job"), str(workers)],
                                stdout=subprocess.PIPE)
        stdout = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise SystemExit(f"benchmark child failed with status {proc.returncode}")
        result = json.loads(stdout)
        result["max_rss_mb"] = usage.ru_maxrss / 1024  # kB on Linux
        result["bytes"] = sum(p.stat().st_size for p in out.iterdir())
        return result
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="writer processes (1 = in-process, the default)")
    parser.add_argument("--skip-16k", action="store_true", help="leave out the 16,384-rank case (2 GB of files)")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; writer processes: {args.workers}")
    print(f"{'case':55} {'median s':>9} {'target':>7} {'ratio':>6} {'peak MB':>8} {'files GB':>9} {'Mnodes/s':>9}")
    for name, target, kwargs in CASES:
        if args.skip_16k and "16,384" in name:
            continue
        runs = [run_once(kwargs, args.workers) for _ in range(args.repeat)]
        median = statistics.median(r["seconds"] for r in runs)
        peak = max(r["max_rss_mb"] for r in runs)
        print(f"{name:55} {median:9.2f} {target:7.0f} {median / target:6.3f} {peak:8.0f} "
              f"{runs[0]['bytes'] / 1e9:9.2f} {runs[0]['nodes'] / median / 1e6:9.2f}", flush=True)


if __name__ == "__main__":
    main()
