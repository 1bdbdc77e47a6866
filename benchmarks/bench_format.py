"""Format-core throughput and memory: read, write, to-json, validate on a generated 1M-node trace and on
the upstream vectors. Prints medians of several runs and the ratio to each target.

    python benchmarks/bench_format.py [--nodes 1000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from etkit.executor import SerialExecutor
from etkit.format.attrs import make_attr
from etkit.format.jsontwin import to_json
from etkit.format.schema import CommType, GlobalMetadata, Node, NodeType
from etkit.format.stream import TraceWriter, open_trace
from etkit.model.trace import load_trace
from etkit.validate import validate

REPO = Path(__file__).resolve().parents[1]
UPSTREAM = REPO.parent / "shared" / "data" / "upstream"

TARGETS = {  # nodes per second
    "read (streaming Node messages)": 500_000,
    "write (TraceWriter.write of Node messages)": 300_000,
    "to-json": 150_000,
    "validate (load + all rules)": 300_000,
}


def make_nodes(n: int) -> list[Node]:
    """A PyTorch-converter-like mix: compute nodes with the converter's attributes, every third a collective."""
    cpu = make_attr("is_cpu_op", False)
    nodes = []
    for i in range(1, n + 1):
        node = Node(id=i, name="aten::linear" if i % 3 else "nccl:all_reduce", start_time_micros=1_000 + 2 * i,
                    duration_micros=i % 97 + 1)
        node.data_deps.append(i - 1) if i > 1 else None
        if i > 8 and i % 5 == 0:
            node.data_deps.append(i - 7)
        node.ctrl_deps.append(max(1, i - i % 10)) if i % 10 else None
        node.attr.extend([make_attr("rf_id", i), make_attr("tid", 1), cpu])
        if i % 3 == 0:
            node.type = NodeType.COMM_COLL_NODE
            node.attr.extend([make_attr("comm_type", int(CommType.ALL_REDUCE)), make_attr("comm_size", 1 << 20),
                              make_attr("pg_name", "0")])
        else:
            node.type = NodeType.COMP_NODE
            node.inputs.values = "[[1, 2, 0, 64, 4, 'cpu']]"
            node.inputs.shapes = "[[8, 8]]"
            node.inputs.types = "['Tensor(float)']"
        nodes.append(node)
    return nodes


def median_rate(n: int, fn: Callable[[], object], runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    return n / med, med


# ru_maxrss survives exec (a child would report this process's peak), so read the child's own VmHWM.
_PEAK = ("def peak():\n    for line in open('/proc/self/status'):\n        if line.startswith('VmHWM'):\n"
         "            return int(line.split()[1]) / 1024\n")


def streaming_peak_mb(path: Path) -> float:
    code = (_PEAK + "import sys\nfrom etkit.format.stream import open_trace\n"
            "with open_trace(sys.argv[1]) as r:\n    for node in r: pass\nprint(peak())")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def baseline_mb() -> float:
    code = _PEAK + "import etkit.format.stream\nprint(peak())"
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def report(name: str, rate: float, seconds: float) -> None:
    target = TARGETS.get(name)
    ratio = f"  {rate / target:4.2f}x target {target:,}/s" if target else ""
    print(f"{name:48s} {rate:12,.0f} nodes/s  ({seconds:6.2f} s){ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    n = args.nodes
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        path = tmp_path / "big.0.et"
        print(f"building {n:,} nodes ...", file=sys.stderr)
        nodes = make_nodes(n)

        def write() -> None:
            with TraceWriter(path, GlobalMetadata(version="1.0.0")) as writer:
                for node in nodes:  # noqa: F821 (called before the del)
                    writer.write(node)

        report("write (TraceWriter.write of Node messages)", *median_rate(n, write, args.runs))
        del nodes
        print(f"file: {path.stat().st_size / 1e6:.1f} MB", file=sys.stderr)

        def read() -> None:
            with open_trace(path) as reader:
                for _ in reader:
                    pass

        report("read (streaming Node messages)", *median_rate(n, read, args.runs))
        report("load (columnar Trace, whole file)", *median_rate(n, lambda: load_trace(path), args.runs))
        trace = load_trace(path)
        report("write (Trace.write, lossless records)", *median_rate(n, lambda: trace.write(tmp_path / "c.et"),  # noqa: F821
                                                                      args.runs))
        del trace
        report("to-json", *median_rate(n, lambda: to_json(path, tmp_path / "big.json"), args.runs))
        report("validate (load + all rules)",
               *median_rate(n, lambda: validate(tmp_path / "big", executor=SerialExecutor()), args.runs))
        peak, base = streaming_peak_mb(path), baseline_mb()
        print(f"{'streaming read peak RSS':48s} {peak:12.0f} MB (interpreter + imports alone: {base:.0f} MB; "
              f"target < 200 MB: {'met' if peak < 200 else 'MISSED'})")

    if UPSTREAM.is_dir():
        files = sorted(p for p in UPSTREAM.rglob("*") if p.name.endswith((".et", ".et.gz")))
        count = sum(len(load_trace(p)) for p in files)

        def read_all() -> None:
            for p in files:
                load_trace(p)

        rate, seconds = median_rate(count, read_all, args.runs)
        print(f"{'upstream vectors: load all ' + str(len(files)) + ' files':48s} {rate:12,.0f} nodes/s  "
              f"({seconds:6.2f} s, {count:,} nodes; per-file overhead dominates)")
    print(f"peak RSS of this benchmark: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
