"""``etkit calibrate --backend gloo --ranks N -o NET.yml``: measure this machine's collectives and fit
the simulator's network model (writes NET.yml and NET.system.json)."""

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
    p.add_argument("--from-trace", metavar="PREFIX", help="instead of measuring, fit the communication recorded in a "
                   "measured job (per collective member, from the last member's arrival until it returned; "
                   "latency, bandwidth, a fixed overhead per collective type and the recorded spread around it)")
    p.add_argument("--steps", metavar="N,M", help="with --from-trace: fit only the collectives of these profiled "
                   "steps (ProfilerStep#N), e.g. to check the prediction of the others out of sample")
    p.add_argument("-o", "--output", metavar="NET.yml",
                   help="network YAML to write, with NET.system.json beside it (default: PREFIX's name + "
                        "-net.yml with --from-trace, else calibrated-net.yml)")
    add_quiet(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..simulate.calibrate import calibrate, write_calibration

    if args.from_trace:
        from ..executor import SerialExecutor
        from ..model.job import load_job
        from ..simulate.calibrate import calibrate_from_job

        steps = {int(x) for x in args.steps.split(",") if x} if args.steps else None
        cal = calibrate_from_job(load_job(args.from_trace, executor=SerialExecutor()), steps=steps)
    else:
        cal = calibrate(args.ranks, backend=args.backend, sizes=args.sizes, reps=args.reps)
    output = args.output or (f"{Path(args.from_trace).name}-net.yml" if args.from_trace else "calibrated-net.yml")
    net_path, sys_path = write_calibration(cal, output)
    print(f"{'collective':<11} {'bytes':>9} {'measured us':>12} {'fit error':>10}")
    for m, err in list(zip(cal.measurements, cal.errors))[:40]:
        print(f"{m.collective:<11} {m.size:>9} {m.seconds * 1e6:>12.1f} {err:>+10.1%}")
    print(f"fitted: {cal.topology} x {cal.ranks}, latency {cal.latency_ns:,.0f} ns/hop, bandwidth {cal.bandwidth_gbps:.3f} GB/s")
    if cal.overheads_ns:
        print("per-call overheads: " + ", ".join(f"{k} {v / 1e3:,.0f} us" for k, v in sorted(cal.overheads_ns.items())))
    for (kind, group), vectors in sorted(cal.residuals_ns.items()):
        flat = sorted(x for v in vectors for x in v)
        print(f"spread of {kind} on {group} ranks: {len(vectors)} calls, member residual {flat[0] / 1e3:+,.0f} .. "
              f"{flat[-1] / 1e3:+,.0f} us (median {flat[len(flat) // 2] / 1e3:+,.0f} us)")
    print(f"wrote {net_path} and {sys_path}")
    return 0
