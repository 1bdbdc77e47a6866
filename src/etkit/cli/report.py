"""``etkit report PREFIX -o report.html``: one self-contained HTML page about a job.

Breakdown charts, the timeline of one iteration (``--iteration N``, default the last ``ProfilerStep#``),
the comm matrix heat map, message-size histogram, critical-path table, top operators, stragglers and,
with ``--baseline OTHER_PREFIX``, the diff from that job to this one. No network is needed to view it.
"""

from __future__ import annotations

import argparse

from ..errors import UsageError
from ..vocab import ANALYZE_ALGORITHMS
from .analyze import add_job_arguments, load_with_schedule
from .common import default_output, explicit_executor


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="write a self-contained HTML report of a job (and a diff)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(p)
    p.add_argument("-o", "--output", metavar="OUT.html",
                   help="the page to write (.html; default: the job's name + .report.html, in the current folder)")
    p.add_argument("--baseline", metavar="PREFIX", help="a job to compare against (shown as baseline -> this job)")
    p.add_argument("--iteration", type=int, metavar="N", help="index of the ProfilerStep# drawn (default: the last)")
    p.add_argument("--title", help="page title")
    p.add_argument("--algorithm", choices=ANALYZE_ALGORITHMS, default="ring", help="collective expansion for the matrix")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..viz.report import write_report

    output = args.output or default_output(args.prefix, ".report.html")
    if not output.endswith((".html", ".htm")):
        raise UsageError(f"{output}: the report is an HTML page: name it .html")
    job, schedule = load_with_schedule(args)
    baseline, baseline_schedule = load_with_schedule(args, args.baseline) if args.baseline else (None, None)
    path = write_report(job, output, schedule=schedule, baseline=baseline, baseline_schedule=baseline_schedule,
                        iteration=args.iteration, title=args.title, algorithm=args.algorithm,
                        executor=explicit_executor(args))
    print(f"wrote {path}")
    return 0
