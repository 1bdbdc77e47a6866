"""``etkit simulate PREFIX --network NET.yml --system SYS.json``: predict how a job runs on a system.

Prints per-rank finish, compute, exposed communication and idle time and the makespan; ``--json``
writes all of it, ``--timeline`` a Perfetto trace. What-if knobs change the run without editing files;
``--sweep KEY=v1,v2`` re-runs per value and prints a table and a plot. A job whose ranks disagree exits
1 with a report of the blocked nodes.
"""

from __future__ import annotations

import argparse
import sys

from ..generate.devices import get_device
from ..model.job import load_job
from ..simulate import Knobs, SimulationBlocked, load_config, simulate
from ..simulate.config import PRESETS
from ..simulate.whatif import parse_straggler, parse_sweep, plot_sweep, sweep, sweep_table
from .common import add_quiet, add_workers, executor_from, non_negative_int, positive_float, write_json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("simulate", help="simulate a job's ETs on a network/system, with what-if knobs",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prefix", help="job prefix (PREFIX.<rank>.et) or one .et file")
    p.add_argument("--network", metavar="NET.yml", help="ASTRA-sim analytical network YAML (or an etkit system YAML)")
    p.add_argument("--system", metavar="SYS", help="ASTRA-sim system JSON, or an etkit system YAML (device + network + system)")
    p.add_argument("--preset", choices=sorted(PRESETS), help="etkit system preset instead of / under the files")
    p.add_argument("--comm-groups", metavar="G.json", help="comm groups JSON {\"<pg_name>\": [ranks]} (default PREFIX.comm_groups.json)")
    p.add_argument("--congestion", choices=("unaware", "aware"), default="unaware",
                   help="aware: concurrent flows share links (default: unaware, like ASTRA-sim's analytical backend)")
    p.add_argument("--deps", choices=("both", "data"), default="both",
                   help="dependencies that gate a node: data+ctrl (ASTRA-sim HEAD, default) or data only")
    p.add_argument("--raw-durations", action="store_true",
                   help="replay duration_micros as written (measured traces: do not keep the time between ops of a "
                        "thread or drop recorded blocking on comm)")
    p.add_argument("--scale-compute", type=positive_float, default=1.0, metavar="X", help="multiply every compute time by X")
    p.add_argument("--scale-bandwidth", type=positive_float, default=1.0, metavar="X", help="multiply every link bandwidth by X")
    p.add_argument("--scale-latency", type=positive_float, default=1.0, metavar="X",
                   help="multiply every link latency and per-call overhead by X (with --scale-bandwidth 10, "
                        "--scale-latency 0.1 is a network 10x faster in both terms)")
    p.add_argument("--measured-start", action="store_true",
                   help="measured traces: each rank enters at its recorded start instead of 0 (one clock needed)")
    p.add_argument("--samples", type=non_negative_int, default=32, metavar="N",
                   help="systems with recorded cost residuals (etkit calibrate --from-trace): Monte Carlo runs; the "
                        "result is the run with the median step time (default 32; 0 = one deterministic run)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first Monte Carlo run (default 0)")
    p.add_argument("--straggler", action="append", default=[], metavar="RANK:F",
                   help="rank RANK computes F times slower (repeatable)")
    p.add_argument("--device", metavar="NAME", help="swap the device (A100, H100, H200, MI300X): compute rescaled by roofline")
    p.add_argument("--trace-device", metavar="NAME", help="device the trace's durations come from (default: the preset's)")
    p.add_argument("--json", metavar="OUT.json", help="write per-rank figures and the configuration as JSON ('-' = stdout)")
    p.add_argument("--timeline", metavar="OUT.trace.json", help="write the simulated schedule as a Perfetto/Chrome trace")
    p.add_argument("--sweep", metavar="KEY=V1,V2", help="re-run per value: bandwidth, bandwidth<i>, latency, scale-compute, "
                   "scale-bandwidth, splits, active-chunks, device")
    p.add_argument("--plot", metavar="OUT.png", help="where --sweep writes its plot (default sweep-<KEY>.png)")
    add_quiet(p)
    add_workers(p)
    p.set_defaults(func=run)


def _knobs(args: argparse.Namespace, preset_device) -> Knobs:
    stragglers = dict(parse_straggler(s) for s in args.straggler)
    device = get_device(args.device) if args.device else None
    trace_device = get_device(args.trace_device) if args.trace_device else preset_device
    if device is not None and trace_device is None:
        from ..errors import UsageError

        raise UsageError("--device needs --trace-device (or a preset / etkit system file naming the trace's device)")
    return Knobs(args.scale_compute, args.scale_bandwidth, stragglers, device, trace_device, args.congestion, args.deps,
                 measured_gaps=not args.raw_durations, strip_waits=not args.raw_durations,
                 scale_latency=args.scale_latency, measured_start=args.measured_start, samples=args.samples,
                 seed=args.seed)


def run(args: argparse.Namespace) -> int:
    network, system, device = load_config(args.network, args.system, preset=args.preset)
    knobs = _knobs(args, device)
    if knobs.device is not None:
        from dataclasses import replace

        system = replace(system, peak_perf_tflops=knobs.device.peak_tflops, local_mem_bw_gbps=knobs.device.memory_gbps)
    # a single run streams the files (columns only, rank by rank); sweeps and timelines need the loaded job
    job = load_job(args.prefix, comm_groups=args.comm_groups, executor=executor_from(args)) if args.sweep or args.timeline else None
    try:
        if args.sweep:
            key, values = parse_sweep(args.sweep)
            points = sweep(job, network, system, knobs, key, values)
            print("\n".join(sweep_table(key, points)))
            plot = args.plot or f"sweep-{key}.png"
            plot_sweep(key, points, plot)
            print(f"plot: {plot}")
            if args.json:
                write_json({"sweep": key, "points": [p.__dict__ for p in points]}, args.json)
            return 0
        result = simulate(job or args.prefix, network, system, knobs, comm_groups=args.comm_groups,
                          executor=executor_from(args))
    except SimulationBlocked as blocked:
        print("\n".join(blocked.report.lines()), file=sys.stderr)
        if args.json:
            write_json({"blocked": blocked.report.to_dict()}, args.json)
        return 1
    print("\n".join(result.table()))
    print(f"simulated {result.nodes:,} nodes ({result.simulated_nodes:,} walked, {result.classes} rank class(es)) "
          f"in {result.wall_s:.2f} s")
    if result.step_samples_ns:
        steps = sorted(result.step_samples_ns)
        print(f"{len(steps)} Monte Carlo runs (recorded cost spread): step time median {result.step_ns / 1e6:,.3f} ms, "
              f"mean {sum(steps) / len(steps) / 1e6:,.3f} ms, range {steps[0] / 1e6:,.3f}-{steps[-1] / 1e6:,.3f} ms")
    for w in result.warnings[:10]:
        print(f"warning: {w}", file=sys.stderr)
    if args.json:
        write_json(result.to_dict(), args.json)
    if args.timeline:
        from ..simulate.timeline import write_timeline

        write_timeline(job, result.schedule, args.timeline)
    return 0
