"""Simulator benchmarks: speed (simulated nodes/s, peak memory) and accuracy.

  (a) 16 NPUs x 1,000 x (COMP 10 us -> ALL_REDUCE 1 MiB), Ring 16 (ASTRA-sim: ~12,000 nodes/s)
  (b) 128-rank LLM job from ``etkit generate llm`` (ASTRA-sim: ~40,000 nodes/s)
  (c) 1,024 ranks of a real LLM layout (target: under a minute)
  (d) one rank of ``--large`` nodes (default 1,000,000) streamed from its file: wall and peak memory per node
  accuracy: ASTRA-sim reference table (docs/simulation.md), and every shared PyTorch job converted,
  simulated with this machine's calibrated network and compared with Kineto's ProfilerStep# time.

Each figure is the median of ``--runs`` runs; ratios are to the target. Run from the repository root:
``.venv/bin/python benchmarks/bench_simulate.py [--runs 3] [--skip-accuracy] [--skip-1024] [--large N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from etkit.executor import SerialExecutor  # noqa: E402
from etkit.format.schema import CommType  # noqa: E402
from etkit.model.job import load_job  # noqa: E402
from etkit.simulate import Knobs, load_config, simulate  # noqa: E402
from etkit.simulate.calibrate import CALIBRATION_SYSTEM  # noqa: E402
from etkit.simulate.config import Dimension, NetworkConfig  # noqa: E402
from etkit.simulate.synthetic import chain_job, write_pytorch_like  # noqa: E402

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
        print(f"{'(c) 1024-rank LLM (llama3-70b dp16 tp8 pp8)':<44} nodes {result.nodes:>9,}  classes {result.classes:>5}  "
              f"walked {result.simulated_nodes:>9,}  wall {wall:7.2f} s "
              f"({60 / wall:,.1f}x under the 60 s target)  {rate:>11,.0f} nodes/s  peak {peak:7.1f} MiB  "
              f"makespan {result.makespan_ns / 1e6:,.1f} ms")


def bench_large(nodes: int, runs: int) -> None:
    """A converter-like rank of ``nodes`` nodes written to a file, simulated from the file (streamed)."""
    network, system, _ = load_config(preset="hgx-h100")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "large.0.et"
        write_pytorch_like(path, nodes)
        wall, rate, peak, result = timed(str(path), network, system, Knobs(), runs)
        print(f"{'(d) one rank streamed from its file':<44} nodes {result.nodes:>9,}  wall {wall:7.2f} s  {rate:>11,.0f} nodes/s  "
              f"peak {peak:7.1f} MiB = {peak * 2**20 / nodes:,.0f} B/node (file {path.stat().st_size / nodes:,.0f} B/node)")


def bench_parity() -> None:
    worst = 0.0
    for (coll, npus), expected in sorted(REFERENCE.items()):
        prefix = EXAMPLES / "workload" / "microbenchmarks" / coll / f"{npus}npus_1MB" / coll
        result = simulate(str(prefix), EXAMPLES / "network" / "analytical" / f"Ring_{npus}npus.yml", RING_SYSTEM)
        err = max(abs(f.finish_ns - expected) / expected for f in result.ranks.values())
        worst = max(worst, err)
    print(f"parity: 12 ASTRA-sim reference cases, worst per-rank finish-time error {worst:.4%} (target < 1%)")


def _err(predicted: float, measured: float) -> float:
    return predicted / measured - 1.0


def _summary(label: str, errs: list[float]) -> str:
    within = sum(abs(e) <= 0.10 for e in errs)
    mags = [abs(e) for e in errs]
    return (f"  {label:<46} median |error| {statistics.median(mags):5.1%}, worst {max(mags):5.1%}, "
            f"{within}/{len(errs)} within the 10% target")


def bench_accuracy(machine_too: bool) -> None:
    """Error of the simulated step time against Kineto's, per job.

    ``trace`` = network, per-type overheads and recorded spread fitted to the job's own communication
    (``etkit calibrate --from-trace``), simulated with 32 Monte Carlo runs (median run): in sample.
    ``mean only`` = the same fit without the spread (one deterministic run). Out of sample: fitted on
    profiled step 2 only, the predicted step 3 against Kineto's ProfilerStep#3 (and 3 -> 2); and
    fitted on the 2-rank job, the 4-rank job of the same model. ``machine`` (``--machine``) =
    ``etkit calibrate`` (gloo on loopback, now)."""
    from etkit.pytorch.job import convert_job
    from etkit.simulate.calibrate import calibrate_from_job, measured_step_ns, measured_steps_ns, simulated_steps_ns

    def predict(job, cal, **knobs):
        return simulate(job, cal.network(), cal.system(), Knobs(**knobs))

    jobs = sorted(p for p in (SHARED / "pytorch").iterdir() if p.is_dir())
    errors: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        loaded = {}
        print(f"{'job':<20} {'ranks':>5} {'measured ms':>12} {'trace ms':>9} {'error':>7} {'(spread)':>8} "
              f"{'mean only':>9} {'fit#2->#3':>9} {'fit#3->#2':>9}" + ("  machine" if machine_too else ""))
        for job_dir in jobs:
            prefix = Path(tmp) / job_dir.name
            convert_job(job_dir, prefix, executor=SerialExecutor())
            job = loaded[job_dir.name] = load_job(prefix, executor=SerialExecutor())
            measured, steps = measured_step_ns(job_dir), measured_steps_ns(job_dir)
            row = f"{job_dir.name:<20} {len(job.traces):>5} {measured / 1e6:>12.2f}"
            if len(job.traces) < 2:  # compute only: nothing to calibrate
                result = simulate(job, NetworkConfig((Dimension("Switch", 2, 1.0, 50_000.0),)), CALIBRATION_SYSTEM)
                errors.setdefault("in sample (trace, spread)", []).append(_err(result.step_ns, measured))
                print(row + f" {result.step_ns / 1e6:>9.2f} {_err(result.step_ns, measured):>+7.1%}  (compute only)")
                continue
            cal = calibrate_from_job(job)
            mc, det = predict(job, cal), predict(job, cal, samples=0)
            spread = statistics.pstdev(mc.step_samples_ns) / measured
            errors.setdefault("in sample (trace, spread)", []).append(_err(mc.step_ns, measured))
            errors.setdefault("in sample (trace, mean only)", []).append(_err(det.step_ns, measured))
            row += f" {mc.step_ns / 1e6:>9.2f} {_err(mc.step_ns, measured):>+7.1%} {spread:>7.1%}  {_err(det.step_ns, measured):>+8.1%}"
            for fit_on, check in ((2, 3), (3, 2)):
                try:
                    part = calibrate_from_job(job, steps={fit_on})
                except Exception:  # one collective per step (pp_sendrecv): nothing to fit on one step
                    row += f" {'n/a':>9}"
                    continue
                err = _err(simulated_steps_ns(job, predict(job, part))[check], steps[check])
                errors.setdefault("out of sample (fit one step, predict the other)", []).append(err)
                row += f" {err:>+9.1%}"
            if machine_too:
                result = simulate(job, *machine_calibration(len(job.traces)))
                errors.setdefault("machine calibration", []).append(_err(result.step_ns, measured))
                row += f" {_err(result.step_ns, measured):>+8.1%}"
            print(row)
        print("out of sample across world sizes (fitted on the 2-rank job, predicting the 4-rank one):")
        for name in sorted(loaded):
            if name.endswith("_ws4") and name[:-1] + "2" in loaded:
                cal = replace(calibrate_from_job(loaded[name[:-1] + "2"]), ranks=4)  # the fitted Switch, 4 ports
                mc = predict(loaded[name], cal)
                err = _err(mc.step_ns, measured_step_ns(SHARED / "pytorch" / name))
                errors.setdefault("out of sample (ws2 fit -> ws4 job)", []).append(err)
                print(f"  {name:<20} {err:>+7.1%}")
    for label, errs in errors.items():
        print(_summary(label, errs))


_MACHINE: dict[int, object] = {}


def machine_calibration(world: int):
    from etkit.simulate.calibrate import calibrate

    if world not in _MACHINE:
        _MACHINE[world] = calibrate(max(world, 2))
    cal = _MACHINE[world]
    return cal.network(), cal.system()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--skip-1024", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--large", type=int, default=1_000_000, metavar="N", help="nodes of the streamed rank (d); 0 skips it")
    parser.add_argument("--machine", action="store_true", help="accuracy also with etkit calibrate (spawns gloo ranks)")
    args = parser.parse_args()
    bench_parity()
    if not args.skip_speed:
        bench_chain(args.runs)
        bench_llm(args.runs, not args.skip_1024)
        if args.large:
            bench_large(args.large, args.runs)
    if not args.skip_accuracy:
        bench_accuracy(args.machine)


if __name__ == "__main__":
    main()
