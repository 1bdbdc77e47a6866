"""Throughput of ``etkit anonymize`` and ``etkit scale`` (issue 16): nodes per second, and a 1,024-rank
generated job scaled to 16,384 ranks. Prints medians of several runs and the ratio to each target.

    .venv/bin/python benchmarks/bench_share_scale.py [--runs 3] [--nodes 200000] [--ranks 4] [--skip-16k]

- anonymize: a PyTorch-converter-like job (``--ranks`` ranks of ``--nodes`` nodes each: ATen ops with
  IOInfo, op_schema, rf_id, seq_id, tid; every tenth node a collective), default policy, everything the
  verb does included: the survey, the rewrite, the proof (every input string searched in every output
  byte) and the validation of the output; then the same as ``etkit anonymize`` in a process of its own (its
  start-up, imports and pools included: the figure a user sees);
- scale, nodes per second: the same job scaled dp ``ranks`` -> 2 x ``ranks`` (every source rank read,
  every node written twice);
- scale 1,024 -> 16,384 ranks: Llama-3 70B at dp 16 x tp 8 x pp 8 (generated, 1.23M nodes), scaled to
  dp 256 (19.7M nodes), validation not included.

Both verbs run on the default executor (a local process pool, one task per rank). Peak memory is this
process's and its workers' high-water mark as /proc reports it (the largest single process).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from etkit.anonymize import anonymize
from etkit.executor import default_executor
from etkit.format.attrs import make_attr
from etkit.format.schema import CommType, GlobalMetadata, Node, NodeType
from etkit.format.stream import TraceWriter
from etkit.generate import llm
from etkit.model.groups import ProcessGroups
from etkit.scale import scale

TARGET_NODES_PER_S = 200_000
TARGET_16K_S = 60.0
_OPS = ("aten::linear", "aten::addmm", "aten::relu", "aten::view", "aten::copy_", "AddmmBackward0")


def make_job(prefix: Path, ranks: int, nodes: int) -> int:
    """A data-parallel PyTorch-like job: every rank the same op mix, every tenth node an all-reduce."""
    for rank in range(ranks):
        meta = GlobalMetadata(version="")
        meta.attr.append(make_attr("schema", "1.1.1-chakra.0.0.4"))
        with TraceWriter(f"{prefix}.{rank}.et", meta) as writer:
            for i in range(1, nodes + 1):
                op = _OPS[i % len(_OPS)]
                node = Node(id=i, name=op, start_time_micros=1_700_000_000_000_000 + 3 * i, duration_micros=i % 37 + 1)
                if 0 < i - i % 7 < i:  # the first node of its group of 7 is its parent
                    node.ctrl_deps.append(i - i % 7)
                if i > 1:
                    node.data_deps.append(i - 1)
                node.attr.extend([make_attr("rf_id", i), make_attr("seq_id", i // 3), make_attr("tid", 1),
                                  make_attr("op_schema", f"{op}(Tensor self) -> Tensor")])
                if i % 10 == 0:
                    node.type = NodeType.COMM_COLL_NODE
                    node.attr.extend([make_attr("is_cpu_op", False), make_attr("comm_type", int(CommType.ALL_REDUCE)),
                                      make_attr("comm_size", 1 << 20), make_attr("pg_name", "0")])
                else:
                    node.type = NodeType.COMP_NODE
                    node.attr.append(make_attr("is_cpu_op", True))
                    node.inputs.values = f"[[{i}, {i // 2}, 0, 4096, 4, 'cpu'], [{i + 1}, {i // 2 + 1}, 0, 64, 4, 'cpu'], 1]"
                    node.inputs.shapes = "[[64, 64], [64], []]"
                    node.inputs.types = "['Tensor(float)', 'Tensor(float)', 'Int']"
                    node.outputs.values = f"[[{i + 2}, {i // 2 + 2}, 0, 4096, 4, 'cpu']]"
                    node.outputs.shapes = "[[64, 64]]"
                    node.outputs.types = "['Tensor(float)']"
                writer.write(node)
    ProcessGroups.from_mapping({"0": range(ranks)}).write(f"{prefix}.comm_groups.json")
    return ranks * nodes


def _peak_mb() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


def _cpu() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def median_run(fn, runs: int) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds (this process and its workers) of ``runs`` calls."""
    times, cpus = [], []
    for _ in range(runs):
        c, t = _cpu(), time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        cpus.append(_cpu() - c)
    return statistics.median(times), statistics.median(cpus)


def _cli(*argv: str) -> None:
    """``etkit ARGV`` in a process of its own (start-up, imports and its pool included), as a user runs it."""
    import subprocess

    subprocess.run([sys.executable, "-m", "etkit", *argv], check=True, stdout=subprocess.DEVNULL)


def _line(what: str, nodes: int, seconds: float, cpu: float) -> str:
    rate = nodes / seconds
    return (f"{what:<46} {nodes:>10,} nodes  {seconds:7.2f} s  {rate:>10,.0f} nodes/s  x{rate / TARGET_NODES_PER_S:.2f} "
            f"of {TARGET_NODES_PER_S:,}  (CPU {cpu:.1f} s: {nodes / cpu:,.0f} nodes per CPU-second)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=200_000, help="nodes per rank of the PyTorch-like job")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--skip-16k", action="store_true", help="skip the 1,024 -> 16,384 ranks run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-share-scale-"))
    executor = default_executor()
    try:
        total = make_job(work / "job", args.ranks, args.nodes)
        seconds, cpu = median_run(lambda: anonymize(work / "job", work / "anon", executor=executor), args.runs)
        print(_line("anonymize, PyTorch-like job", total, seconds, cpu))
        seconds, cpu = median_run(lambda: _cli("anonymize", str(work / "job"), "-o", str(work / "cli"), "--quiet"),
                                  args.runs)
        print(_line("anonymize, the whole etkit process", total, seconds, cpu))
        seconds, cpu = median_run(lambda: scale(work / "job", work / "x2", dp=2 * args.ranks, validate=False,
                                                executor=executor), args.runs)
        print(_line("scale dp x2, PyTorch-like job (nodes written)", 2 * total, seconds, cpu))
        shutil.rmtree(work)
        work.mkdir()
        if not args.skip_16k:
            began = time.perf_counter()
            llm("llama3-70b", dp=16, tp=8, pp=8).write(work / "g1k", executor=executor)
            print(f"{'generate llama3-70b dp16 tp8 pp8 (1,024 ranks)':<46} {time.perf_counter() - began:7.2f} s")
            times, cpus = [], []
            for i in range(max(1, min(args.runs, 3))):
                out = work / f"s16k{i}"
                c, t = _cpu(), time.perf_counter()
                report = scale(work / "g1k", out, dp=256, validate=False, executor=executor)
                times.append(time.perf_counter() - t)
                cpus.append(_cpu() - c)
                shutil.rmtree(work / f"s16k{i}", ignore_errors=True)
                for p in work.glob(f"s16k{i}.*"):
                    p.unlink()
            seconds, cpu = statistics.median(times), statistics.median(cpus)
            print(f"{'scale 1,024 -> 16,384 ranks (dp 16 -> 256)':<46} {report.nodes:>10,} nodes  {seconds:7.2f} s  "
                  f"{report.nodes / seconds:>10,.0f} nodes/s  target < {TARGET_16K_S:.0f} s: "
                  f"{'met' if seconds < TARGET_16K_S else 'NOT met'}  (CPU {cpu:.1f} s)")
        print(f"peak memory of one process: {_peak_mb():,.0f} MB")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
