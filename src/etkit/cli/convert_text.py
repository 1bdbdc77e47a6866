"""``etkit convert text W.txt -o PREFIX --ranks N --passes P``: ASTRA-sim 1.0 text workloads to Chakra ET."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import add_quiet, add_ranks, add_workers, executor_from, positive_int, prefix_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "text", help="convert an ASTRA-sim 1.0 text workload (every mode)",
        description="Write PREFIX.<rank>.et for every rank (+ PREFIX.comm_groups.json when the workload has "
                    "model/data-parallel groups).")
    parser.add_argument("input", metavar="W.txt", help="the text workload")
    parser.add_argument("-o", "--output", type=prefix_arg, metavar="PREFIX",
                        help="output prefix (default: the workload's name without .txt, in the current folder)")
    add_ranks(parser, npus_alias=True, required=True, help="number of ranks (--npus: ASTRA-sim's name)")
    parser.add_argument("--passes", type=positive_int, default=1, metavar="P", help="training passes (default 1)")
    parser.add_argument("--model-parallel-group", type=int, metavar="M",
                        help="model-parallel group size: overrides the HYBRID_TRANSFORMER header, or splits "
                             "HYBRID_DATA_MODEL / HYBRID_MODEL_DATA / HYBRID_CUSTOMIZED collectives into "
                             "groups (default: those span all ranks)")
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..filekind import require
    from ..text.convert import write_text

    require(args.input, {"text-workload", "yaml"}, wanted="an ASTRA-sim 1.0 text workload")
    output = args.output or Path(args.input).name.removesuffix(".txt")
    paths = write_text(args.input, output, args.ranks, args.passes,
                       model_parallel_group=args.model_parallel_group, executor=executor_from(args))
    print(f"wrote {len(paths)} ranks to {output}.<rank>.et")
    return 0
