"""``etkit convert text W.txt -o PREFIX --npus N --passes P``: ASTRA-sim 1.0 text workloads to Chakra ET."""

from __future__ import annotations

import argparse
import sys

from ..text.convert import write_text
from .common import add_quiet, add_workers, executor_from, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "text", help="convert an ASTRA-sim 1.0 text workload (every mode)",
        description="Write PREFIX.<rank>.et for every rank (+ PREFIX.comm_groups.json when the workload has "
                    "model/data-parallel groups).")
    parser.add_argument("input", metavar="W.txt", help="the text workload")
    parser.add_argument("-o", "--output", required=True, metavar="PREFIX", help="output prefix")
    parser.add_argument("--npus", type=positive_int, required=True, metavar="N", help="number of ranks")
    parser.add_argument("--passes", type=positive_int, default=1, metavar="P", help="training passes (default 1)")
    parser.add_argument("--model-parallel-group", type=int, metavar="M",
                        help="model-parallel group size: overrides the HYBRID_TRANSFORMER header, or splits "
                             "HYBRID_DATA_MODEL / HYBRID_MODEL_DATA / HYBRID_CUSTOMIZED collectives into "
                             "groups (default: those span all ranks)")
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    paths = write_text(args.input, args.output, args.npus, args.passes,
                       model_parallel_group=args.model_parallel_group, executor=executor_from(args))
    if not args.quiet:
        print(f"wrote {len(paths)} ranks to {args.output}.<rank>.et", file=sys.stderr)
    return 0
