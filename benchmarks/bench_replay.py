"""Replay speed: the walk's own cost per node, ATen replay against the trace, a converted job's step time.

Figures (medians of ``--repeat`` runs, with the ratio to the target):

* walk overhead: a 20,000-node chain of nodes that do nothing (NOOP) and of 8x8 matmul kernels, replayed
  in-process; target <= 3 us per idle node (the walk must not dominate real traces);
* peak memory of a 20,000-node chain whose kernels all differ in size (the pool must keep it bounded);
* ATen replay of the converted cnn_single job (compute mode, in-process): replayed op time / trace op time;
  target <= 1.0 (the profiled trace's op times include profiler overhead, the replay does not);
* a converted 2-rank DDP job replayed end to end (spawned, gloo): step time / the measured step time of the
  profiled steps in meta.json; target within 2x.

    python benchmarks/bench_replay.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "pytorch"


def _chain(path: Path, n: int, num_ops: int | None, vary: bool = False) -> None:
    from etkit.format.attrs import make_attr
    from etkit.format.schema import GlobalMetadata, Node, NodeType
    from etkit.format.stream import TraceWriter

    with TraceWriter(path, GlobalMetadata(version="1.0.0")) as w:
        for i in range(1, n + 1):
            node = Node(id=i, name="COMP_NODE", type=NodeType.COMP_NODE)
            if i > 1:
                node.data_deps.append(i - 1)
            node.attr.append(make_attr("is_cpu_op", False))
            if num_ops:
                node.attr.append(make_attr("num_ops", num_ops * (1 + (i % 64) if vary else 1)))
            w.write(node)


def _replayer(prefix: str, mode: str):
    import torch

    from etkit.executor import SerialExecutor
    from etkit.model.job import load_job
    from etkit.replay.engine import RankReplayer
    from etkit.replay.plan import plan_job
    from etkit.replay.pool import TensorPool

    torch.set_num_threads(1)
    job = load_job(prefix, executor=SerialExecutor())
    plan = plan_job(job, mode)
    return RankReplayer(job.traces[0], plan.ranks[0], TensorPool("cpu"), None), job


def walk_overhead(repeat: int) -> None:
    n = 20_000
    with tempfile.TemporaryDirectory() as tmp:
        for label, ops in (("idle", None), ("8x8 matmul", 2 * 8**3)):
            _chain(Path(tmp) / f"c{label[0]}.0.et", n, ops)
            replayer, _ = _replayer(str(Path(tmp) / f"c{label[0]}"), "full")
            replayer.run_iteration(0)
            per_node = statistics.median(replayer.run_iteration(i + 1)[0] / n for i in range(repeat))
            target = 3.0 if label == "idle" else 20.0
            print(f"walk, {label:10s}: {per_node:.2f} us/node (target <= {target}: ratio {per_node / target:.2f})")


def pool_memory() -> None:
    n = 20_000
    with tempfile.TemporaryDirectory() as tmp:
        _chain(Path(tmp) / "m.0.et", n, 2 * 64**3, vary=True)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        replayer, _ = _replayer(str(Path(tmp) / "m"), "full")
        replayer.run_iteration(0)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        stats = replayer.pool.stats
        sizes = len({k.size for k in replayer.kernels.values()})
        target = 3 * sizes + 3 * 6  # a, b, out per matmul size, plus the bank's six calibration sizes
        print(f"pool, {n} kernels of {sizes} sizes: peak RSS +{(after - before) / 1024:.1f} MiB, "
              f"{stats.allocations} allocations, {stats.reuses} reuses (target <= {target} allocations: "
              f"ratio {stats.allocations / target:.2f})")


def aten_ratio(repeat: int) -> None:
    from etkit.executor import SerialExecutor
    from etkit.pytorch.job import convert_job
    from etkit.replay.plan import Action

    with tempfile.TemporaryDirectory() as tmp:
        convert_job(SHARED / "cnn_single", f"{tmp}/cnn", executor=SerialExecutor())
        replayer, _ = _replayer(f"{tmp}/cnn", "compute")
        aten = replayer.action == Action.ATEN
        trace_us = float(replayer.trace_us[aten].sum())
        replayer.run_iteration(0)
        runs = []
        for i in range(repeat):
            _, start, end = replayer.run_iteration(i + 1)
            runs.append(float(((end - start)[aten]).sum()) / 1e3)
        replay_us = statistics.median(runs)
        print(f"aten, cnn_single: {int(aten.sum())} ops, replay {replay_us / 1e3:.2f} ms vs trace "
              f"{trace_us / 1e3:.2f} ms (target <= 1.0: ratio {replay_us / trace_us:.2f})")


def job_step(repeat: int) -> None:
    from etkit.executor import SerialExecutor
    from etkit.pytorch.job import convert_job
    from etkit.replay import ReplayOptions, replay_job

    meta = json.loads((SHARED / "ddp_mlp_ws2" / "meta.json").read_text())
    measured = statistics.mean(s for r in meta["rank_timings"].values() for s in r["step_s"][2:4]) * 1e6
    with tempfile.TemporaryDirectory() as tmp:
        convert_job(SHARED / "ddp_mlp_ws2", f"{tmp}/ddp", executor=SerialExecutor())
        steps = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            report = replay_job(f"{tmp}/ddp", options=ReplayOptions(iters=3, warmup=1))
            wall = time.perf_counter() - t0
            steps.append(report.step_us)
        step = statistics.median(steps)
        print(f"job, ddp_mlp_ws2 (2 ranks, gloo): step {step / 1e3:.2f} ms vs measured {measured / 1e3:.2f} ms "
              f"(target within 2x: ratio {step / measured:.2f}); last replay took {wall:.1f} s wall")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    walk_overhead(args.repeat)
    pool_memory()
    if SHARED.is_dir():
        aten_ratio(args.repeat)
        job_step(args.repeat)
    else:
        print(f"skipped the real-trace figures: {SHARED} is missing", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
