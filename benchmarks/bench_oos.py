"""Out-of-sample accuracy of ``etkit simulate`` on measured PyTorch jobs (issue 17): three protocols, each
beside the in-sample figure (the model fitted on the job it predicts).

  (a) leave one job out: every shared job (../shared/data/pytorch) predicted by the model fitted on all
      the other shared jobs of its world size (``etkit calibrate --from-trace P1 P2 ...``);
  (b) from micro-benchmarks (``--micro``, slow): ``etkit calibrate --ranks N`` on this machine, then every
      job of N ranks predicted: jobs collected fresh in this run (``etkit collect example``, so that
      machine and load match) and the shared ones;
  (c) across scale: each example workload collected fresh at 2, 4 and 8 ranks; the model fitted on its
      2-rank job predicting its 4- and 8-rank jobs (and the model fitted on every workload's 2-rank job).

Every prediction carries the interval its calibration gives (``etkit-prediction-errors``: the held-out
errors of the calibration's own jobs; for (b) the micro-benchmark model's errors on the shared jobs):
the tables count how often the measured step time falls inside it against how often it claims to.
Errors are predicted / measured - 1 of the step time (simulated slowest rank's finish minus its start
against Kineto's ``ProfilerStep#N`` spans, slowest rank). The machine is shared: the load average is
printed before and after, and the figures move with it.

Run from the repository root: ``.venv/bin/python benchmarks/bench_oos.py [--quick] [--micro] [--skip-scale]
[--workloads ddp,tp,pp,moe,fsdp] [--scales 2,4,8] [--samples 32] [--keep DIR]``. ``--quick`` (a minute or two):
table (a) only, for the 2-rank jobs, with 4 Monte Carlo runs per prediction.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from etkit.executor import SerialExecutor  # noqa: E402
from etkit.model.job import Job, load_job  # noqa: E402
from etkit.simulate import Knobs, simulate  # noqa: E402
from etkit.simulate.calibrate import (  # noqa: E402
    Calibration,
    calibrate,
    calibrate_from_jobs,
    job_name,
    predict_errors,
    recorded_step_ns,
)

SHARED = REPO.parent / "shared" / "data" / "pytorch"


@dataclass
class Prediction:
    job: str
    ranks: int
    measured_ns: float
    predicted_ns: float
    interval: tuple[float, float, float] | None

    @property
    def error(self) -> float:
        return self.predicted_ns / self.measured_ns - 1.0

    @property
    def inside(self) -> bool | None:
        if self.interval is None:
            return None
        return self.interval[0] <= self.measured_ns <= self.interval[1]


def predict(job: Job, cal: Calibration, samples: int) -> Prediction:
    """``cal``'s prediction of ``job`` (a larger job: the fitted Switch with as many ports)."""
    network = replace(cal, ranks=max(cal.ranks, job.world_size)).network()
    result = simulate(job, network, cal.system(), Knobs(samples=samples))
    measured = recorded_step_ns(job)
    assert measured, f"{job.prefix}: no ProfilerStep annotations"
    return Prediction(job_name(job), job.world_size, measured, float(result.step_ns), result.step_interval_ns)


def in_sample(job: Job, samples: int) -> Prediction:
    return predict(job, calibrate_from_jobs([job]), samples)


def row(label: str, p: Prediction, ref: Prediction | None = None) -> str:
    interval = "" if p.interval is None else (f"  [{p.interval[0] / 1e6:8.2f}, {p.interval[1] / 1e6:8.2f}] ms "
                                              f"{'in ' if p.inside else 'OUT'}")
    base = f"  in sample {ref.error:+6.1%}" if ref is not None else ""
    return (f"  {label:<26} {p.ranks:>3} {p.measured_ns / 1e6:>10.2f} {p.predicted_ns / 1e6:>10.2f} "
            f"{p.error:>+8.1%}{base}{interval}")


def header() -> str:
    return f"  {'job':<26} {'np':>3} {'meas. ms':>10} {'pred. ms':>10} {'error':>8}"


def summary(label: str, preds: list[Prediction], target: float | None = None) -> str:
    if not preds:
        return f"  {label}: no predictions"
    mags = [abs(p.error) for p in preds]
    out = (f"  {label}: median |error| {statistics.median(mags):.1%}, worst {max(mags):.1%}, "
           f"{sum(m <= 0.10 for m in mags)}/{len(mags)} within 10%")
    if target is not None:
        out += f" (target: worst <= {target:.0%})"
    covered = [p for p in preds if p.interval is not None]
    if covered:
        claimed = statistics.mean(p.interval[2] for p in covered)
        out += (f"; measured inside the interval {sum(bool(p.inside) for p in covered)}/{len(covered)} "
                f"= {sum(bool(p.inside) for p in covered) / len(covered):.0%} (claimed {claimed:.0%})")
    return out


def convert(raw: Path, prefix: Path) -> Job:
    from etkit.pytorch.job import convert_job

    if not any(prefix.parent.glob(prefix.name + ".*.et")):
        convert_job(raw, prefix, executor=SerialExecutor())
    return load_job(prefix, executor=SerialExecutor())


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def leave_one_out(work: Path, samples: int, worlds: set[int] | None = None) -> None:
    print("(a) leave one job out: each shared job predicted by the model fitted on the other shared jobs of its "
          "world size; interval from that model's own held-out errors")
    jobs = {d.name: convert(d, work / d.name) for d in sorted(SHARED.iterdir()) if d.is_dir()}
    by_world: dict[int, list[str]] = {}
    for name, job in jobs.items():
        if job.world_size > 1 and (worlds is None or job.world_size in worlds):
            by_world.setdefault(job.world_size, []).append(name)
    ins, outs = [], []
    print(header())
    for _world, names in sorted(by_world.items()):
        for name in names:
            began = time.perf_counter()
            cal = calibrate_from_jobs([jobs[o] for o in names if o != name], holdout=True, samples=samples)
            ref, p = in_sample(jobs[name], samples), predict(jobs[name], cal, samples)
            ins.append(ref)
            outs.append(p)
            print(row(name, p, ref) + f"  ({time.perf_counter() - began:.0f} s)", flush=True)
    print(summary("in sample", ins))
    print(summary("out of sample (a)", outs, 0.10))


def collect(work: Path, workload: str, ranks: int) -> Job:
    from etkit.pytorch.collect import run_example

    raw = work / f"{workload}_np{ranks}"
    if not (raw / "meta.json").exists():
        began = time.perf_counter()
        run_example(workload, ranks, raw, quiet=True)
        print(f"    collected {workload} on {ranks} ranks in {time.perf_counter() - began:.0f} s ({load()})", flush=True)
    return convert(raw, work / f"fresh_{workload}_np{ranks}")


def across_scale(work: Path, workloads: list[str], scales: list[int], samples: int) -> dict[tuple[str, int], Job]:
    print(f"(c) across scale: {', '.join(workloads)} collected fresh at {', '.join(map(str, scales))} ranks; "
          f"fitted on the {scales[0]}-rank job")
    fresh = {(w, n): collect(work, w, n) for w in workloads for n in scales}
    small = [fresh[(w, scales[0])] for w in workloads]
    joint = calibrate_from_jobs(small, holdout=len(small) > 1, samples=samples)
    own_preds, joint_preds, ins = [], [], []
    print(header() + "   (own: the workload's own small job; all: every workload's small job, with interval)")
    for w in workloads:
        own = calibrate_from_jobs([fresh[(w, scales[0])]])
        ref = in_sample(fresh[(w, scales[0])], samples)
        print(row(f"{w} {scales[0]} (fitted)", ref))
        for n in scales[1:]:
            job = fresh[(w, n)]
            ref = in_sample(job, samples)
            ins.append(ref)
            p_own, p_all = predict(job, own, samples), predict(job, joint, samples)
            own_preds.append(p_own)
            joint_preds.append(p_all)
            print(row(f"{w} {n} own", p_own, ref))
            print(row(f"{w} {n} all", p_all), flush=True)
    print(summary("in sample (the larger jobs)", ins))
    print(summary("out of sample (c), own small job", own_preds, 0.15))
    print(summary("out of sample (c), all small jobs", joint_preds, 0.15))
    return fresh


def micro(work: Path, fresh: dict[tuple[str, int], Job], workloads: list[str], scales: list[int], samples: int) -> None:
    print("(b) from micro-benchmarks: etkit calibrate --ranks N here and now, predicting the jobs of N ranks "
          "(fresh: collected in this run; shared: ../shared/data/pytorch); interval from the shared jobs' errors")
    shared = {d.name: convert(d, work / d.name) for d in sorted(SHARED.iterdir()) if d.is_dir()}
    fresh_preds, shared_preds = [], []
    print(header())
    for n in scales:
        began = time.perf_counter()
        cal = calibrate(n)
        print(f"    calibrated {n} ranks in {time.perf_counter() - began:.0f} s ({load()})", flush=True)
        mine = [j for j in shared.values() if j.world_size == n]
        cal.holdout = predict_errors(cal, mine, samples=samples) if mine else {}
        for j in mine:
            p = predict(j, replace(cal, holdout={}), samples)
            shared_preds.append(p)
            print(row(f"shared {job_name(j)}", p, in_sample(j, samples)), flush=True)
        for w in workloads:
            job = fresh.get((w, n)) or collect(work, w, n)
            p = predict(job, cal, samples)
            fresh_preds.append(p)
            print(row(f"fresh {w} {n}", p, in_sample(job, samples)), flush=True)
    print(summary("out of sample (b), shared jobs", shared_preds, 0.15))
    print(summary("out of sample (b), fresh jobs", fresh_preds, 0.15))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="table (a) only, 2-rank jobs, 4 Monte Carlo runs (a check that it runs, not the figures)")
    parser.add_argument("--micro", action="store_true", help="also table (b), from micro-benchmarks (slow)")
    parser.add_argument("--skip-scale", action="store_true", help="skip table (c) (collects 15 jobs)")
    parser.add_argument("--workloads", default="ddp,tp,pp,moe,fsdp", help="example workloads of (b) and (c)")
    parser.add_argument("--scales", default="2,4,8", help="rank counts of (c), the first is fitted (b: those of 2 and 4)")
    parser.add_argument("--samples", type=int, default=32, help="Monte Carlo runs per prediction (default 32)")
    parser.add_argument("--keep", metavar="DIR", help="keep (and reuse) converted and collected jobs here")
    args = parser.parse_args()
    if args.quick:
        args.skip_scale, args.micro, args.samples = True, False, 4
    workloads = [w for w in args.workloads.split(",") if w]
    scales = [int(x) for x in args.scales.split(",") if x]
    began = time.perf_counter()
    print(f"bench_oos: {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        leave_one_out(work, args.samples, {2} if args.quick else None)
        fresh: dict[tuple[str, int], Job] = {}
        if not args.skip_scale:
            fresh = across_scale(work, workloads, scales, args.samples)
        if args.micro:
            micro(work, fresh, workloads, [n for n in scales if n in (2, 4)], args.samples)
    print(f"bench_oos: done in {time.perf_counter() - began:.0f} s; {load()}")


if __name__ == "__main__":
    main()
