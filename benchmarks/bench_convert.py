"""PyTorch conversion throughput and memory, end to end from the two JSON files of each rank.

1. every shared job (../shared/data/pytorch), all ranks converted in this process: nodes/s;
2. linking alone: Kineto events/s (read Kineto + link);
3. a synthetic host trace of ``--nodes`` nodes (default 500,000) built by repeating a real rank
   (tp_transformer_ws2 rank 0, host + Kineto) with fresh ids, record-function ids and timestamps:
   nodes/s and peak memory (max RSS of a fresh process minus its RSS after imports) per 100,000 nodes.

Prints medians of ``--runs`` runs and the ratio to each target (>= 1 meets it).

    python benchmarks/bench_convert.py [--nodes 500000] [--runs 3] [--skip-synthetic]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from etkit.executor import SerialExecutor
from etkit.fileio import read_bytes_maybe_gzip
from etkit.gcpause import paused_gc
from etkit.pytorch.host import load_host_trace
from etkit.pytorch.job import convert_job
from etkit.pytorch.kineto import load_kineto
from etkit.pytorch.link import ROOT_MARKERS, link

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO.parent / "shared" / "data" / "pytorch"
BASE = JOBS / "tp_transformer_ws2"
TARGET_NODES_PER_S = 30_000
TARGET_MB_PER_100K = 300
TARGET_LINK_EVENTS_PER_S = 100_000


def median_time(fn, runs: int) -> tuple[float, float]:
    """Median wall-clock and median CPU seconds of ``runs`` calls (CPU time is what contention leaves alone)."""
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def bench_shared(runs: int, out: Path) -> None:
    print(f"== shared jobs, all ranks in one process (median of {runs})")
    total_nodes = total_wall = total_cpu = 0.0
    for job in sorted(p for p in JOBS.iterdir() if p.is_dir()):
        nodes = convert_job(job, out / job.name, executor=SerialExecutor()).nodes
        wall, cpu = median_time(lambda: convert_job(job, out / job.name, executor=SerialExecutor()), runs)
        total_nodes += nodes
        total_wall += wall
        total_cpu += cpu
        print(f"  {job.name:22} {nodes:7d} nodes {wall * 1000:8.1f} ms {nodes / wall:9.0f} nodes/s wall "
              f"{nodes / cpu:9.0f} nodes/s CPU")
    for label, secs in (("wall", total_wall), ("CPU", total_cpu)):
        rate = total_nodes / secs
        print(f"  all jobs: {rate:.0f} nodes/s {label} (target {TARGET_NODES_PER_S}: ratio {rate / TARGET_NODES_PER_S:.2f})")


def bench_link(runs: int) -> None:
    print(f"== link: read Kineto + link (median of {runs})")
    events = wall = cpu = 0.0
    for job in sorted(p for p in JOBS.iterdir() if p.is_dir()):
        host_path = next(job.glob("rank-0.et.json*"))
        kineto_path = next(job.glob("rank-0.kineto.json*"))
        host = load_host_trace(host_path)
        n_events = len(orjson.loads(read_bytes_maybe_gzip(kineto_path))["traceEvents"])
        with paused_gc():
            w, c = median_time(lambda: link(host, load_kineto(kineto_path)), runs)
        events += n_events
        wall += w
        cpu += c
    for label, secs in (("wall", wall), ("CPU", cpu)):
        rate = events / secs
        print(f"  {int(events)} Kineto events: {rate:.0f} events/s {label} (target {TARGET_LINK_EVENTS_PER_S}: "
              f"ratio {rate / TARGET_LINK_EVENTS_PER_S:.2f})")


def build_synthetic(nodes: int, folder: Path) -> tuple[Path, Path, int]:
    """Repeat BASE rank 0 until ``nodes`` host nodes: roots once, every other node per copy with ids,
    parents, record-function ids, tensor ids and Kineto timestamps shifted."""
    host = orjson.loads(read_bytes_maybe_gzip(BASE / "rank-0.et.json.gz"))
    kin = orjson.loads(read_bytes_maybe_gzip(BASE / "rank-0.kineto.json.gz"))
    roots = [n for n in host["nodes"] if n["name"].startswith(ROOT_MARKERS) or "process_group:init" in n["name"]]
    body = [n for n in host["nodes"] if n not in roots]
    root_ids = {n["id"] for n in roots}
    id_step = max(n["id"] for n in host["nodes"]) + 1
    rf_step = max(a["value"] for n in host["nodes"] for a in n["attrs"] if a["name"] == "rf_id") + 1
    cpu = [e for e in kin["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    other = [e for e in kin["traceEvents"] if e not in cpu]
    span = max(e["ts"] + e["dur"] for e in cpu) - min(e["ts"] for e in cpu) + 1000.0
    copies = max(1, (nodes - len(roots)) // len(body))
    host_path, kin_path = folder / "rank-0.et.json", folder / "rank-0.kineto.json"

    def shift_tensors(values, k):
        if isinstance(values, list):
            if len(values) == 6 and isinstance(values[5], str) and isinstance(values[0], int):
                return [values[0] + k * id_step, values[1] + k * id_step] + values[2:]
            return [shift_tensors(v, k) for v in values]
        return values

    def copy_node(n, k):
        m = dict(n, id=n["id"] + k * id_step)
        if n["ctrl_deps"] not in root_ids:
            m["ctrl_deps"] = n["ctrl_deps"] + k * id_step
        m["attrs"] = [dict(a, value=a["value"] + k * rf_step) if a["name"] == "rf_id" else a for a in n["attrs"]]
        m["inputs"] = dict(n["inputs"], values=shift_tensors(n["inputs"]["values"], k))
        m["outputs"] = dict(n["outputs"], values=shift_tensors(n["outputs"]["values"], k))
        return m

    def copy_event(e, k):
        args = dict(e.get("args", {}))
        for key in ("Record function id", "External id"):
            if key in args:
                args[key] += k * rf_step
        return dict(e, ts=e["ts"] + k * span, args=args)

    _write_repeated(host_path, host, "nodes", roots, body, copies, copy_node)
    _write_repeated(kin_path, kin, "traceEvents", other, cpu, copies, copy_event)
    return host_path, kin_path, len(roots) + copies * len(body)


def _write_repeated(path: Path, doc: dict, key: str, once: list, repeated: list, copies: int, make_copy) -> None:
    """Write ``doc`` with its ``key`` array = ``once`` + ``copies`` shifted copies of ``repeated``, one element
    per line (the layout PyTorch writes)."""
    with open(path, "wb") as out:
        head = {k: v for k, v in doc.items() if k != key}
        out.write(orjson.dumps(head)[:-1] + b', "' + key.encode() + b'": [\n  ')
        out.write(b",\n  ".join(orjson.dumps(x) for x in once))
        for k in range(copies):
            out.write(b",\n  " + b",\n  ".join(orjson.dumps(make_copy(x, k)) for x in repeated))
        out.write(b"\n]}\n")


_CHILD = r"""
import resource, sys, time
from etkit.pytorch.job import convert_rank
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start, cpu = time.perf_counter(), time.process_time()
report = convert_rank((0, sys.argv[1], sys.argv[2], sys.argv[3]))
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(report.nodes, elapsed, cpu, (peak - base) / 1024)
"""


def bench_synthetic(nodes: int, runs: int, folder: Path) -> None:
    print(f"== synthetic host trace of ~{nodes} nodes (fresh process per run, median of {runs})")
    host_path, kin_path, n = build_synthetic(nodes, folder)
    size_mb = (host_path.stat().st_size + kin_path.stat().st_size) / 1e6
    print(f"  built {n} host nodes, {size_mb:.0f} MB of JSON")
    results = []
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(host_path), str(kin_path), str(folder / "out.0.et")],
                              capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        written, secs, cpu, mb = proc.stdout.split()
        results.append((int(written), float(secs), float(cpu), float(mb)))
    written = results[0][0]
    secs = statistics.median(r[1] for r in results)
    cpu = statistics.median(r[2] for r in results)
    mb = statistics.median(r[3] for r in results)
    rate, cpu_rate = written / secs, written / cpu
    per100k = mb / (written / 100_000)
    print(f"  {written} nodes written in {secs:.1f} s wall, {cpu:.1f} s CPU: {rate:.0f} nodes/s wall "
          f"(target {TARGET_NODES_PER_S}: ratio {rate / TARGET_NODES_PER_S:.2f}), {cpu_rate:.0f} nodes/s of CPU "
          f"time (ratio {cpu_rate / TARGET_NODES_PER_S:.2f})")
    print(f"  peak memory {mb:.0f} MB = {per100k:.0f} MB per 100k nodes "
          f"(target {TARGET_MB_PER_100K}: ratio {TARGET_MB_PER_100K / per100k:.2f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-synthetic", action="store_true")
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (figures scale with contention)")
    with tempfile.TemporaryDirectory(prefix="etkit-bench-convert-") as tmp:
        bench_shared(args.runs, Path(tmp))
        bench_link(args.runs)
        if not args.skip_synthetic:
            bench_synthetic(args.nodes, args.runs, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
