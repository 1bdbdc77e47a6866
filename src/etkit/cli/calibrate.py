"""``etkit calibrate --backend gloo --ranks N -o NET.yml``: measure this machine's collectives and fit
the simulator's network model (writes NET.yml and NET.system.json); ``--from-trace P1 P2 ...`` fits one
model to the communication recorded in measured jobs instead, and predicts each job from the others to
give every later prediction its interval."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..vocab import CALIBRATION_SIZES
from .common import add_quiet, add_ranks, positive_int, sizes_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help="time real collectives here and fit the simulator's network model",
                              description=__doc__)
    p.add_argument("--backend", default="gloo", help="torch.distributed backend (default gloo)")
    add_ranks(p, default=2, help="processes to spawn on loopback (default 2)")
    p.add_argument("--sizes", type=sizes_arg, default=CALIBRATION_SIZES, metavar="S1,S2",
                   help="message sizes, e.g. 1KiB,64KiB,4MiB (default 1KiB..4MiB, 5 sizes)")
    p.add_argument("--reps", type=positive_int, default=5, help="timed repetitions per size (median; default 5)")
    p.add_argument("--from-trace", nargs="+", metavar="PREFIX", help="instead of measuring, fit one model to the "
                   "communication recorded in these measured jobs (per collective member, from the last member's "
                   "arrival until it returned, and per message; latency, bandwidth, a fixed overhead per type, the "
                   "recorded spread, and the comm ops a rank ran at once). With two jobs or more each is also "
                   "predicted by the model fitted on the others: those held-out errors give every prediction "
                   "made with the output its interval")
    p.add_argument("--steps", metavar="N,M", help="with --from-trace: fit only the collectives of these profiled "
                   "steps (ProfilerStep#N), e.g. to check the prediction of the others out of sample")
    p.add_argument("--check", nargs="+", metavar="PREFIX",
                   help="measured jobs the fitted model predicts (jobs it was not fitted on): their errors give "
                        "every prediction made with the output its interval, instead of the held-out errors")
    p.add_argument("--no-holdout", action="store_true",
                   help="with several --from-trace jobs: skip predicting each from the others (no interval)")
    p.add_argument("--samples", type=positive_int, default=32, metavar="N",
                   help="Monte Carlo runs of each held-out or --check prediction (default 32)")
    p.add_argument("-o", "--output", metavar="NET.yml",
                   help="network YAML to write, with NET.system.json beside it (default: the first PREFIX's name + "
                        "-net.yml with --from-trace, else calibrated-net.yml)")
    add_quiet(p)
    p.set_defaults(func=run, option_flags={"jobs": "--from-trace"})  # the library's names of the flags that differ


def run(args: argparse.Namespace) -> int:
    from ..executor import SerialExecutor
    from ..model.job import load_job
    from ..progress import Progress
    from ..simulate.calibrate import calibrate, calibrate_from_jobs, predict_errors, write_calibration

    def jobs(prefixes: list[str]):
        return [load_job(p, executor=SerialExecutor()) for p in prefixes]

    if args.from_trace:
        steps = {int(x) for x in args.steps.split(",") if x} if args.steps else None
        fitted = jobs(args.from_trace)
        holdout = len(fitted) > 1 and not args.no_holdout and not args.check
        with Progress(total=len(fitted) if holdout else None, desc="held-out predictions",
                      quiet=args.quiet or not holdout) as bar:
            cal = calibrate_from_jobs(fitted, steps=steps, holdout=holdout, samples=args.samples, progress=bar)
    else:
        cal = calibrate(args.ranks, backend=args.backend, sizes=args.sizes, reps=args.reps)
    if args.check:
        checked = jobs(args.check)
        with Progress(total=len(checked), desc="checked predictions", quiet=args.quiet) as bar:
            cal.holdout = predict_errors(cal, checked, samples=args.samples, progress=bar)
    output = args.output or (f"{Path(args.from_trace[0]).name}-net.yml" if args.from_trace else "calibrated-net.yml")
    net_path, sys_path = write_calibration(cal, output)
    print(f"{'collective':<11} {'bytes':>9} {'measured us':>12} {'fit error':>10}")
    for m, err in list(zip(cal.measurements, cal.errors))[:40]:
        print(f"{m.collective:<11} {m.size:>9} {m.seconds * 1e6:>12.1f} {err:>+10.1%}")
    if len(cal.measurements) > 40:
        print(f"... and {len(cal.measurements) - 40} more (all of them in {net_path})")
    print(f"fitted: {cal.topology} x {cal.ranks}, latency {cal.latency_ns:,.0f} ns/hop, bandwidth {cal.bandwidth_gbps:.3f} GB/s")
    if cal.overheads_ns:
        print("per-call overheads: " + ", ".join(f"{k} {v / 1e3:,.0f} us" for k, v in sorted(cal.overheads_ns.items())))
    for (kind, group), vectors in sorted(cal.residuals_ns.items()):
        flat = sorted(x for v in vectors for x in v)
        print(f"spread of {kind} on {group} ranks: {len(vectors)} calls, member residual {flat[0] / 1e3:+,.0f} .. "
              f"{flat[-1] / 1e3:+,.0f} us (median {flat[len(flat) // 2] / 1e3:+,.0f} us)")
    if cal.slots_per_rank > 1:
        print(f"comm ops at once: {cal.slots_per_rank} per rank, {cal.slots_per_group} per group")
    if cal.holdout:
        what = "checked jobs" if args.check else "each job predicted by the model fitted on the others"
        print(f"out of sample ({what}):")
        for name, err in cal.holdout.items():
            print(f"  {name:<24} {err:+.1%}")
        interval = cal.system().prediction_interval(1.0)
        assert interval is not None
        print(f"interval of every prediction with this calibration: measured = predicted x "
              f"{interval[0]:.3f} .. {interval[1]:.3f} ({interval[2]:.0%} of jobs like these)")
    print(f"wrote {net_path} and {sys_path}")
    return 0
