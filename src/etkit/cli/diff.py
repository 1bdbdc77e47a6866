"""``etkit diff A_PREFIX B_PREFIX``: what changed from job A (before) to job B (after).

Node counts by type, makespan and critical-path length, the time breakdown, operator time deltas
(largest first) and communication volume and time by type. Each job's times come from its own
timestamps, or from ``--simulate`` applied to both, or from durations.
"""

from __future__ import annotations

import argparse

from .analyze import add_schedule_arguments, load_with_schedule
from .common import add_json, explicit_executor, positive_int, text_wanted, write_json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("diff", help="compare two jobs: node counts, op times, comm volume, critical path",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", metavar="A_PREFIX", help="the job before")
    p.add_argument("b", metavar="B_PREFIX", help="the job after")
    add_schedule_arguments(p)
    add_json(p, "the diff")
    p.add_argument("--top", type=positive_int, default=20, metavar="N", help="operators listed (default 20)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..analyze import analyze_job, diff_analyses
    from ..analyze.text import render_diff

    a_job, a_sched = load_with_schedule(args, args.a)
    b_job, b_sched = load_with_schedule(args, args.b)
    executor = explicit_executor(args)
    d = diff_analyses(analyze_job(a_job, a_sched, executor=executor), analyze_job(b_job, b_sched, executor=executor))
    if text_wanted(args):
        print(render_diff(d, top=args.top), end="")
    if args.json:
        write_json(d.to_json(), args.json)
    return 0
