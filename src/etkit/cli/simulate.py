"""``etkit simulate PREFIX --network NET.yml --system SYS.json``: predict how a job runs on a system.

Prints per-rank finish, compute, exposed communication and idle time and the makespan; ``--json``
writes all of it, ``--timeline`` a Perfetto trace. What-if knobs change the run without editing files;
``--sweep KEY=v1,v2`` re-runs per value and prints a table and a plot; several ``--sweep`` keys make a
grid (their cross product), ``--sweep network=a.yml,b.yml`` sweeps whole files, and speed-ups are
relative to the unmodified system. The job is read once per sweep; ``--executor dask://HOST:PORT`` runs
the points on a Dask cluster. A job whose ranks disagree about a call (what ``etkit validate`` reports) exits 1
with the list before anything runs (``--allow-mismatch`` simulates it anyway); one that cannot run to the end
exits 1 with a report of the blocked nodes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from .common import (
    add_json,
    add_quiet,
    add_simulation_inputs,
    add_workers,
    executor_from,
    explicit_executor,
    knobs_from,
    non_negative_int,
    positive_float,
    simulation_from,
    text_wanted,
    write_json,
)

if TYPE_CHECKING:
    from ..simulate import SimulationBlocked


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("simulate", help="simulate a job's ETs on a network/system, with what-if knobs",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prefix", help="job prefix (PREFIX.<rank>.et) or one .et file")
    add_simulation_inputs(p)
    p.add_argument("--comm-groups", metavar="G.json", help="comm groups JSON {\"<pg_name>\": [ranks]} (default PREFIX.comm_groups.json)")
    p.add_argument("--deps", choices=("both", "data"), default="both",
                   help="dependencies that gate a node: data+ctrl (ASTRA-sim HEAD, default) or data only")
    p.add_argument("--raw-durations", action="store_true",
                   help="replay duration_micros as written (measured traces: do not keep the time between ops of a "
                        "thread or drop recorded blocking on comm)")
    p.add_argument("--measured-start", action="store_true",
                   help="measured traces: each rank enters at its recorded start instead of 0 (one clock needed)")
    p.add_argument("--samples", type=non_negative_int, default=32, metavar="N",
                   help="systems with recorded cost residuals (etkit calibrate --from-trace): Monte Carlo runs; the "
                        "result is the run with the median step time (default 32; 0 = one deterministic run)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first Monte Carlo run (default 0)")
    add_json(p, "per-rank figures and the configuration")
    p.add_argument("--timeline", metavar="OUT.trace.json", help="write the simulated schedule as a Perfetto/Chrome trace")
    p.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2",
                   help="re-run per value (repeatable: several keys make a grid): bandwidth, bandwidth<i>, latency, "
                        "latency<i>, scale-compute, scale-bandwidth, scale-latency, splits, active-chunks, device, "
                        "network (files), system (files); speed-ups are relative to the unmodified system")
    p.add_argument("--plot", metavar="OUT.png", help="where --sweep writes its plot (default sweep-<KEY>[-<KEY>...].png)")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="simulate a job whose ranks disagree about a call (a collective of another type or size, a "
                        "receive of another size than its send: what etkit validate reports) instead of exiting 1 "
                        "with the list; the engine takes the largest size and the first type issued, with a note")
    serving = p.add_argument_group("serving jobs (etkit generate llm-serve)",
                                   "TTFT, TPOT, latency, throughput and goodput are printed for every serving job; "
                                   "--sweep rate=R1,R2 and --sweep split=P:D,P:D regenerate the run per point")
    serving.add_argument("--slo-ttft", type=positive_float, metavar="MS", help="time-to-first-token SLO for goodput (ms)")
    serving.add_argument("--slo-tpot", type=positive_float, metavar="MS", help="time-per-output-token SLO for goodput (ms)")
    add_quiet(p)
    add_workers(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..model.job import load_job, require_whole_job
    from ..simulate import SimulationBlocked, simulate
    from ..simulate.whatif import parse_sweeps

    require_whole_job(args.prefix)
    serving = _serving_job(args)
    if any(s.split("=", 1)[0].strip() in _SERVING_KEYS for s in args.sweep):
        return _run_serving_sweep(args, serving)
    axes = parse_sweeps(args.sweep)
    if args.plot and not axes:
        raise UsageError("--plot draws a sweep: give --sweep KEY=V1,V2,... too")
    if args.timeline and axes:
        raise UsageError("--timeline writes the schedule of one run and --sweep makes many: "
                         "simulate the point you want without --sweep")
    if axes:
        return _run_sweep(args, axes)
    if args.timeline:
        from ..viz.timeline import timeline_format

        timeline_format(Path(args.timeline))  # a name of another kind (x.html) stops here, before any work
    network, system, knobs = simulation_from(args)
    # a single run streams the files (columns only, rank by rank); a timeline needs the loaded job
    job = load_job(args.prefix, comm_groups=args.comm_groups, executor=executor_from(args)) if args.timeline else None
    try:
        result = simulate(job or args.prefix, network, system, knobs, comm_groups=args.comm_groups,
                          executor=executor_from(args), allow_mismatch=args.allow_mismatch)
    except SimulationBlocked as blocked:
        return _blocked(blocked, args)
    if text_wanted(args):
        print("\n".join(result.table()))
        print(f"simulated {result.nodes:,} nodes ({result.simulated_nodes:,} walked, {result.classes} rank class(es)) "
              f"in {result.wall_s:.2f} s")
    if result.step_samples_ns and text_wanted(args):
        steps = sorted(result.step_samples_ns)
        print(f"{len(steps)} Monte Carlo runs (recorded cost spread): step time median {result.step_ns / 1e6:,.3f} ms, "
              f"mean {sum(steps) / len(steps) / 1e6:,.3f} ms, range {steps[0] / 1e6:,.3f}-{steps[-1] / 1e6:,.3f} ms")
    if result.step_interval_ns and text_wanted(args):
        low, high, coverage = result.step_interval_ns
        print(f"out-of-sample interval (the calibration's held-out errors): a measured step time of "
              f"{low / 1e6:,.3f}-{high / 1e6:,.3f} ms for {coverage:.0%} of jobs like those it was checked on")
    for w in result.warnings[:10]:
        print(f"warning: {w}", file=sys.stderr)
    figures = result.to_dict()
    if serving:
        from ..analyze.serving import serving_metrics

        metrics = serving_metrics(job or args.prefix, result.schedule, slo_ttft_ms=args.slo_ttft,
                                  slo_tpot_ms=args.slo_tpot)
        figures["serving"] = metrics.to_dict()
        if text_wanted(args):
            print("\n".join(metrics.lines()))
    if args.json:
        write_json(figures, args.json)
    if args.timeline:  # the file `etkit timeline` writes from the same simulation
        from ..viz.timeline import write_timeline

        assert job is not None  # (loaded above for the timeline)
        timeline = write_timeline(job, args.timeline, schedule=result.schedule, executor=explicit_executor(args))
        if text_wanted(args):
            for note in timeline.notes[1:]:  # (the first says where the times came from: this simulation)
                print(note)
    return 0


#: Sweep keys that regenerate a serving job (rate: requests/s, split: PREFILL_GPUS:DECODE_GPUS).
_SERVING_KEYS = ("rate", "split")


def _serving_job(args: argparse.Namespace) -> bool:
    """Whether the job is a serving run; the serving options are refused on any other job."""
    from ..serving import is_serving_job

    serving = is_serving_job(args.prefix)
    if not serving and (args.slo_ttft or args.slo_tpot):
        raise UsageError(f"{args.prefix}: --slo-ttft/--slo-tpot apply to serving jobs (etkit generate llm-serve); "
                         "this job is not one")
    return serving


def _run_serving_sweep(args: argparse.Namespace, serving: bool) -> int:
    """``--sweep rate=... --sweep split=P:D,...`` on a serving job: each point regenerated and simulated."""
    from ..serving import plot_goodput, serve_sweep, sweep_table

    if not serving:
        raise UsageError(f"{args.prefix}: rate= and split= sweeps regenerate a serving job (etkit generate llm-serve); "
                         "this job is not one")
    values: dict[str, list[str]] = {}
    for text in args.sweep:
        key, _, listed = text.partition("=")
        key = key.strip()
        if key not in _SERVING_KEYS:
            raise UsageError(f"--sweep {text}: a serving sweep takes rate= and split= only (they regenerate the job; "
                             "other keys re-run one job)")
        if key in values:
            raise UsageError(f"--sweep {key}= given twice: give every value in one list")
        values[key] = [v.strip() for v in listed.split(",") if v.strip()]
        if not values[key]:
            raise UsageError(f"--sweep {text}: no values")
    try:
        rates = [float(v) for v in values.get("rate", [])]
        splits = [tuple(int(x) for x in v.split(":")) for v in values.get("split", [])]
    except ValueError:
        raise UsageError("--sweep rate= takes requests per second, split= PREFILL_GPUS:DECODE_GPUS values") from None
    if any(not (r > 0 and r < float("inf")) for r in rates) or any(len(s) != 2 or min(s) < 1 for s in splits):
        raise UsageError("--sweep rate= takes positive requests per second, split= two positive GPU counts P:D")
    network, system, knobs = simulation_from(args)
    points = serve_sweep(args.prefix, network, system, rates=rates, splits=splits, knobs=knobs,  # type: ignore[arg-type]
                         slo_ttft_ms=args.slo_ttft, slo_tpot_ms=args.slo_tpot, executor=executor_from(args))
    plot = args.plot or "sweep-" + "-".join(values) + ".png"
    plot_goodput(points, plot)
    if text_wanted(args):
        print(f"serving sweep of {args.prefix} on {network.source}: {len(points)} point(s), each regenerated")
        print("\n".join(sweep_table(points)))
        print(f"plot: {plot}")
    if args.json:
        write_json({"points": [{"rate": p.rate, "split": p.split, "makespan_ns": p.makespan_ns, **p.metrics}
                               for p in points]}, args.json)
    return 0


def _blocked(blocked: SimulationBlocked, args: argparse.Namespace) -> int:
    print("\n".join(blocked.report.lines(allow="--allow-mismatch")), file=sys.stderr)
    if args.json:
        write_json({"blocked": blocked.report.to_dict()}, args.json)
    return 1


def _run_sweep(args: argparse.Namespace, axes: list) -> int:
    """``--sweep``: every point of the grid, the job read once; a table, a plot and (``--json``) every point."""
    from ..simulate import SimulationBlocked, prepare
    from ..simulate.config import SystemConfig
    from ..simulate.whatif import load_system_file, plot_sweep, sweep, with_device

    try:
        network, system, knobs = simulation_from(args)
    except UsageError:  # no network given: the network axis names it, speed-ups are relative to its first point
        if "network" not in dict(axes):
            raise
        knobs = knobs_from(args)
        network, system = None, with_device(load_system_file(args.system) if args.system else SystemConfig(), knobs)
    try:
        job = prepare(args.prefix, comm_groups=args.comm_groups, executor=executor_from(args),
                      allow_mismatch=True) if args.allow_mismatch else args.prefix
        result = sweep(job, network, system, knobs, axes, comm_groups=args.comm_groups,
                       executor=executor_from(args), quiet=args.quiet)
    except SimulationBlocked as blocked:
        return _blocked(blocked, args)
    plot = args.plot or "sweep-" + "-".join(key for key, _ in axes) + ".png"
    plot_sweep(result, plot)
    if text_wanted(args):
        print("\n".join(result.table()))
        print(f"plot: {plot}")
    if args.json:
        write_json(result.to_json(), args.json)
    return 0
