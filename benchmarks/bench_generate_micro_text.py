"""Timing of the micro-benchmark generator, the collective generator and the text converter.

Prints the median of several runs of each (wall seconds, files and nodes per second). No target is set
for these producers in the issue; the ratio column compares with 1 s, the budget a user waits without
noticing, for the sizes below.

    .venv/bin/python benchmarks/bench_generate_micro_text.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from etkit.executor import SerialExecutor
from etkit.generate import write_collective, write_micro
from etkit.text import write_text

TEXT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "upstream" / "mlcommons-chakra" / \
    "eg_converter" / "input_files" / "Text"


def _median_seconds(fn: Callable[[Path], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        out = Path(tempfile.mkdtemp(prefix="etkit-bench-"))
        try:
            start = time.perf_counter()
            fn(out)
            times.append(time.perf_counter() - start)
        finally:
            shutil.rmtree(out, ignore_errors=True)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    serial = SerialExecutor()
    cases: list[tuple[str, Callable[[Path], object], int, int]] = [
        ("micro, 14 cases x 256 ranks", lambda d: write_micro(d, 256, executor=serial), 14 * 256, 0),
        ("all_reduce 1MiB, 4096 ranks, groups of 8",
         lambda d: write_collective(d / "ar", "all_reduce", "1MiB", 4096, group_size=8, executor=serial), 4096, 4096),
        ("barrier, 1024 ranks", lambda d: write_collective(d / "b", "barrier", 0, 1024, executor=serial), 1024,
         1024 * 2 * 10),
    ]
    transformer = TEXT_DIR / "Transformer_HybridParallel.txt"
    if transformer.is_file():
        per_rank = 482 // 2 * 10  # nodes of one pass x 10 passes
        cases.append(("text Transformer, 1024 ranks x 10 passes",
                      lambda d: write_text(transformer, d / "tr", 1024, 10, executor=serial), 1024, 1024 * per_rank))
    print(f"{'workload':44} {'median s':>9} {'files/s':>9} {'nodes/s':>11} {'x 1 s':>6}")
    for name, fn, files, nodes in cases:
        seconds = _median_seconds(fn, args.repeat)
        rate = f"{nodes / seconds:,.0f}" if nodes else "-"
        print(f"{name:44} {seconds:9.3f} {files / seconds:9,.0f} {rate:>11} {seconds / 1.0:6.2f}")


if __name__ == "__main__":
    main()
