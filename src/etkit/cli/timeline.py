"""``etkit timeline PREFIX -o trace.json``: a Chrome/Perfetto trace of the job, to open in ui.perfetto.dev.

One process per rank, one thread per track (host thread, stream or simulated resource), flow arrows
for send/recv pairs and collectives across ranks. JSON over ``--max-mb`` (256) is split into files of
whole ranks (``trace.part0.json``, ...); a ``.pftrace`` name (or ``--format proto``) writes Perfetto's
protobuf format instead, one file of any size. ``.gz`` compresses either.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .analyze import add_job_arguments, load_with_schedule
from .common import default_output, explicit_executor, positive_float


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("timeline", help="write a Perfetto/Chrome JSON timeline of a job",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(p)
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output file: .json / .json.gz (Chrome JSON) or .pftrace (Perfetto protobuf); "
                        "default: the job's name + .trace.json, in the current folder")
    p.add_argument("--format", choices=("json", "proto"), help="override the format the output name implies")
    p.add_argument("--max-mb", type=positive_float, default=256, metavar="MB", help="split past this size (default 256)")
    p.add_argument("--no-flows", action="store_true", help="leave out the cross-rank arrows")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..viz.timeline import timeline_format, write_timeline

    output = args.output or default_output(args.prefix, ".trace.json")
    if args.format is None:
        timeline_format(Path(output))  # a name of another kind (x.html) stops here, before any loading
    job, schedule = load_with_schedule(args)
    result = write_timeline(job, output, schedule=schedule, max_bytes=int(args.max_mb * (1 << 20)),
                            flows=not args.no_flows, fmt=args.format, executor=explicit_executor(args))
    for note in result.notes:
        print(note)
    print(f"{result.events} slices, {result.flows} arrows")
    for path in result.paths:
        print(f"wrote {path}")
    return 0
