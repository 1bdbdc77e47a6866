"""``etkit analyze PREFIX``: where time goes in a job and why it is slow.

Prints, per rank and for the job: the time breakdown (compute, exposed / overlapped communication,
memory, host, idle), top operators by total and exclusive time, communication by type, process group
and message size with the rank x rank traffic matrix, the critical path across ranks, and load
imbalance with stragglers. Times come from the traces' timestamps when they have them, from a
simulation with ``--simulate NET.yml SYS.json``, else from node durations; the output says which.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..vocab import ANALYZE_ALGORITHMS
from .common import (add_json, add_quiet, add_simulation_inputs, add_workers, executor_from, non_negative_float,
                     positive_int, simulation_from, text_wanted, wants_simulation, write_json)

if TYPE_CHECKING:
    from ..model.job import Job
    from ..model.schedule import Schedule


def add_job_arguments(parser: argparse.ArgumentParser, *, prefix_help: str = "job prefix (PREFIX.<rank>.et) or one .et file") -> None:
    """The options every analysis verb shares: the job, its groups, where times come from."""
    parser.add_argument("prefix", help=prefix_help)
    add_schedule_arguments(parser)


def add_schedule_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--comm-groups", metavar="G.json",
                        help='comm groups JSON {"<pg_name>": [ranks]} (default PREFIX.comm_groups.json)')
    add_simulation_inputs(parser)  # with any of them, times come from a simulation instead of the traces
    add_quiet(parser)
    add_workers(parser)


def load_with_schedule(args: argparse.Namespace, prefix: str | None = None) -> tuple[Job, Schedule | None]:
    """Load the job named on the command line and, with ``--simulate``, simulate it."""
    from ..model.job import load_job, require_whole_job

    job = load_job(prefix or args.prefix, comm_groups=args.comm_groups, executor=executor_from(args))
    if not wants_simulation(args):
        return job, None
    require_whole_job(prefix or args.prefix)
    from ..analyze.timing import schedule_from_simulation

    network, system, knobs = simulation_from(args)
    return job, schedule_from_simulation(job, network, system, knobs=knobs)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("analyze", help="time breakdown, top ops, comm matrix, critical path, stragglers",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(p)
    add_json(p, "every figure")
    p.add_argument("--algorithm", choices=ANALYZE_ALGORITHMS, default="ring",
                   help="how collectives are expanded into rank-to-rank traffic (default ring)")
    p.add_argument("--straggler-threshold", type=non_negative_float, default=0.05, metavar="F",
                   help="a rank is a straggler when its busy or finish time exceeds the median by F (default 0.05)")
    p.add_argument("--top", type=positive_int, default=15, metavar="N", help="rows per table (default 15)")
    p.add_argument("--max-ranks", type=positive_int, default=16, metavar="N", help="ranks listed per table (default 16)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..analyze import analyze_job
    from ..analyze.text import render_analysis

    job, schedule = load_with_schedule(args)
    analysis = analyze_job(job, schedule, algorithm=args.algorithm, straggler_threshold=args.straggler_threshold)
    if text_wanted(args):
        print(render_analysis(analysis, max_ranks=args.max_ranks, top=args.top), end="")
    if args.json:
        write_json(analysis.to_json(), args.json)
    return 0
