"""Analysis speed and memory: a 1,000,000-node trace and a 128-rank job.

Targets (issue 6): >= 200,000 nodes/s on a 1,000,000-node trace with <= 1 GB peak memory; a 128-rank
job in <= 10 s. Each case runs in a fresh subprocess (so its peak RSS is its own); the analysis is
repeated and the median printed, with the ratio to the target. Loading is timed separately.

    python benchmarks/bench_analyze.py            # both cases
    python benchmarks/bench_analyze.py --nodes 200000 --ranks 16   # smaller
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCK = 10  # 8 chained compute nodes, an all-reduce, and a node that waits for both


def _write_rank(path: Path, n_nodes: int, rank: int, timestamps: bool) -> None:
    from etkit.format.attrs import make_attr
    from etkit.format.schema import GlobalMetadata, Node, NodeType
    from etkit.format.stream import TraceWriter

    cpu = make_attr("is_cpu_op", False)
    coll_attrs = [cpu, make_attr("comm_type", 0), make_attr("comm_size", 1 << 20)]
    t = 1_000_000
    with TraceWriter(path, GlobalMetadata(version="1.0.0")) as w:
        node = Node()
        for i in range(1, n_nodes + 1):
            k = (i - 1) % BLOCK
            node.Clear()
            node.id = i
            if k == 8:
                node.name, node.type, dur, deps = "all_reduce", NodeType.COMM_COLL_NODE, 30, [i - 1]
                node.attr.extend(coll_attrs)
            else:
                node.name, node.type = f"op{k}", NodeType.COMP_NODE
                dur = 5 + (k + rank) % 7
                deps = [i - 2, i - 1] if k == 9 else ([i - 1] if i > 1 else [])
                node.attr.append(cpu)
            node.data_deps.extend(deps)
            node.duration_micros = dur
            if timestamps:
                node.start_time_micros = t
                t += dur if k != 8 else 0  # the all-reduce overlaps the next compute node
            w.write(node)


def _case(kind: str, nodes: int, ranks: int, repeats: int) -> dict:
    from etkit.analyze import analyze_job
    from etkit.executor import SerialExecutor
    from etkit.model.job import load_job

    with tempfile.TemporaryDirectory(prefix="etkit-bench-") as tmp:
        prefix = Path(tmp) / "job"
        began = time.perf_counter()
        for r in range(ranks):
            _write_rank(Path(f"{prefix}.{r}.et"), nodes // ranks, r, kind == "timestamps")
        build_s = time.perf_counter() - began
        began = time.perf_counter()
        job = load_job(prefix, executor=SerialExecutor())
        load_s = time.perf_counter() - began
        load_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        total = sum(len(t) for t in job.traces.values())
        times = []
        for _ in range(repeats):
            began = time.perf_counter()
            analysis = analyze_job(job)
            times.append(time.perf_counter() - began)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"case": kind, "ranks": ranks, "nodes": total, "build_s": build_s, "load_s": load_s,
            "analyze_s": statistics.median(times), "runs": times, "peak_rss_mb": peak_mb, "load_peak_mb": load_peak_mb,
            "source": analysis.source, "critical_path_ns": analysis.critical_path.length_ns}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=128)
    parser.add_argument("--rank-nodes", type=int, default=2_000, help="nodes per rank in the multi-rank case")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("KIND", "NODES", "RANKS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, nodes, ranks = args.child
        print(json.dumps(_case(kind, int(nodes), int(ranks), args.repeats)))
        return 0
    cases = [("timestamps", args.nodes, 1), ("durations", args.nodes, 1),
             ("durations", args.ranks * args.rank_nodes, args.ranks)]
    for kind, nodes, ranks in cases:
        done = subprocess.run([sys.executable, __file__, "--child", kind, str(nodes), str(ranks),
                               "--repeats", str(args.repeats)], capture_output=True, text=True, check=True)
        r = json.loads(done.stdout)
        rate = r["nodes"] / r["analyze_s"]
        print(f"{r['ranks']:>4} rank(s) {r['nodes']:>9,} nodes, times from {r['source'].split(' (')[0]}:")
        print(f"     analyse median {r['analyze_s']:.2f} s of {len(r['runs'])} ({rate:,.0f} nodes/s), "
              f"load {r['load_s']:.2f} s, peak RSS {r['peak_rss_mb']:,.0f} MB ({r['load_peak_mb']:,.0f} MB after "
              f"writing and loading)")
        if ranks == 1:
            print(f"     target 200,000 nodes/s: ratio {rate / 200_000:.2f}; "
                  f"target 1,024 MB peak: ratio {r['peak_rss_mb'] / 1024:.2f}")
        else:
            print(f"     target 10 s for the job: analyse ratio {r['analyze_s'] / 10:.2f}, "
                  f"load + analyse ratio {(r['load_s'] + r['analyze_s']) / 10:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
