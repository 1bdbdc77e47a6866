"""Simulator benchmarks: speed (simulated nodes/s, peak memory) and accuracy.

  (a) 16 NPUs x 1,000 x (COMP 10 us -> ALL_REDUCE 1 MiB), Ring 16 (ASTRA-sim: ~12,000 nodes/s)
  (b) 128-rank LLM job from ``etkit generate llm`` (ASTRA-sim: ~40,000 nodes/s)
  (c) 1,024 ranks of a real LLM layout (target: under a minute)
  accuracy: ASTRA-sim reference table (docs/simulation.md), and every shared PyTorch job converted,
  simulated with this machine's calibrated network and compared with Kineto's ProfilerStep# time.

Each figure is the median of ``--runs`` runs; ratios are to the target. Run from the repository root:
``.venv/bin/python benchmarks/bench_simulate.py [--runs 3] [--skip-accuracy] [--skip-1024]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from etkit.executor import SerialExecutor  # noqa: E402
from etkit.format.schema import CommType  # noqa: E402
from etkit.model.job import load_job  # noqa: E402
from etkit.simulate import Knobs, load_config, simulate  # noqa: E402
from etkit.simulate.synthetic import chain_job  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
EXAMPLES = SHARED / "upstream" / "astra-sim-astra-sim" / "examples"
RING_SYSTEM = EXAMPLES / "system" / "native_collectives" / "Ring_4chunks.json"
REFERENCE = {("all_reduce", 4): 43_000, ("all_reduce", 8): 64_440, ("all_reduce", 16): 99_640,
             ("all_gather", 4): 64_744, ("all_gather", 8): 151_016, ("all_gather", 16): 323_560,
             ("reduce_scatter", 4): 22_240, ("reduce_scatter", 8): 33_080, ("reduce_scatter", 16): 50_740,
             ("all_to_all", 4): 41_560, ("all_to_all", 8): 125_480, ("all_to_all", 16): 391_240}


def timed(job, network, system, knobs: Knobs, runs: int) -> tuple[float, float, float, object]:
    """(median wall s, nodes/s, peak MiB of the simulation itself, last result)."""
    walls, result = [], None
    for _ in range(runs):
        began = time.perf_counter()
        result = simulate(job, network, system, knobs)
        walls.append(time.perf_counter() - began)
    tracemalloc.start()
    simulate(job, network, system, knobs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    wall = statistics.median(walls)
    return wall, result.nodes / wall, peak / 2**20, result


def report_speed(label: str, job, network, system, runs: int, target: float | None) -> None:
    for sym in (True, False):
        wall, rate, peak, result = timed(job, network, system, Knobs(symmetry=sym), runs)
        ratio = f"  x{rate / target:,.1f} of target {target:,.0f}/s" if target else ""
        print(f"{label:<44} symmetry={'on ' if sym else 'off'} nodes {result.nodes:>9,}  classes {result.classes:>5}  "
              f"wall {wall:7.3f} s  {rate:>11,.0f} nodes/s  peak {peak:7.1f} MiB{ratio}  makespan {result.makespan_ns / 1e6:,.3f} ms")


def bench_chain(runs: int) -> None:
    network, system, _ = load_config(EXAMPLES / "network" / "analytical" / "Ring_16npus.yml", RING_SYSTEM)
    job = chain_job(16, 1000, comp_us=10, comm_type=CommType.ALL_REDUCE, size=1 << 20)
    report_speed("(a) 16 x 1000 x (COMP -> ALL_REDUCE 1 MiB)", job, network, system, runs, 12_000)


def llm_job(dp: int, tp: int, pp: int, model: str, **fields):
    from etkit.generate.llm import llm

    began = time.perf_counter()
    job = llm(model, dp=dp, tp=tp, pp=pp, **fields).to_job()
    print(f"    generated {model} dp={dp} tp={tp} pp={pp}: {len(job.traces)} ranks in {time.perf_counter() - began:.1f} s")
    return job


def bench_llm(runs: int, big: bool) -> None:
    network, system, _ = load_config(preset="hgx-h100")
    report_speed("(b) 128-rank LLM (llama3-8b dp4 tp8 pp4)", llm_job(4, 8, 4, "llama3-8b"), network, system, runs, 40_000)
    if big:
        job = llm_job(16, 8, 8, "llama3-70b")
        wall, rate, peak, result = timed(job, network, system, Knobs(), 1)
        print(f"{'(c) 1024-rank LLM (llama3-70b dp16 tp8 pp8)':<44} nodes {result.nodes:>9,}  wall {wall:7.2f} s "
              f"({60 / wall:,.1f}x under the 60 s target)  {rate:>11,.0f} nodes/s  peak {peak:7.1f} MiB  "
              f"makespan {result.makespan_ns / 1e6:,.1f} ms")


def bench_parity() -> None:
    worst = 0.0
    for (coll, npus), expected in sorted(REFERENCE.items()):
        prefix = EXAMPLES / "workload" / "microbenchmarks" / coll / f"{npus}npus_1MB" / coll
        result = simulate(str(prefix), EXAMPLES / "network" / "analytical" / f"Ring_{npus}npus.yml", RING_SYSTEM)
        err = max(abs(f.finish_ns - expected) / expected for f in result.ranks.values())
        worst = max(worst, err)
    print(f"parity: 12 ASTRA-sim reference cases, worst per-rank finish-time error {worst:.4%} (target < 1%)")


def bench_accuracy() -> None:
    """Error of the simulated step time against Kineto's, per job, with two network calibrations:
    ``machine`` = ``etkit calibrate`` (gloo on loopback, now) and ``trace`` = fitted to the job's own
    recorded communication (``etkit calibrate --from-trace``)."""
    from etkit.pytorch.job import convert_job
    from etkit.simulate.calibrate import calibrate, calibrate_from_job, measured_step_ns

    jobs = sorted(p for p in (SHARED / "pytorch").iterdir() if p.is_dir())
    with tempfile.TemporaryDirectory() as tmp:
        machine: dict[int, object] = {}
        errors: dict[str, list[float]] = {"machine": [], "trace": []}
        print(f"{'job':<20} {'ranks':>5} {'measured ms':>12} {'machine-cal ms':>15} {'error':>8} {'trace-cal ms':>13} {'error':>8}")
        for job_dir in jobs:
            prefix = Path(tmp) / job_dir.name
            convert_job(job_dir, prefix, executor=SerialExecutor())
            job = load_job(prefix, executor=SerialExecutor())
            world = max(len(job.traces), 2)
            if world not in machine:
                machine[world] = calibrate(world)
                print(f"    calibrated gloo x{world}: latency {machine[world].latency_ns:,.0f} ns, "
                      f"bandwidth {machine[world].bandwidth_gbps:.3f} GB/s")
            measured = measured_step_ns(job_dir)
            row = f"{job_dir.name:<20} {len(job.traces):>5} {measured / 1e6:>12.2f}"
            for label, cal in (("machine", machine[world]), ("trace", calibrate_from_job(job) if len(job.traces) > 1 else machine[world])):
                result = simulate(job, cal.network(), cal.system())
                err = result.step_ns / measured - 1.0
                errors[label].append(abs(err))
                row += f" {result.step_ns / 1e6:>14.2f} {err:>+8.1%}"
            print(row)
        for label, errs in errors.items():
            within = sum(e <= 0.10 for e in errs)
            print(f"accuracy ({label} calibration): median |error| {statistics.median(errs):.1%}, worst {max(errs):.1%}, "
                  f"{within}/{len(errs)} jobs within the 10% target")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--skip-1024", action="store_true")
    args = parser.parse_args()
    bench_parity()
    bench_chain(args.runs)
    bench_llm(args.runs, not args.skip_1024)
    if not args.skip_accuracy:
        bench_accuracy()


if __name__ == "__main__":
    main()
