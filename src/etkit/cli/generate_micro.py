"""``etkit generate micro --ranks N -o DIR``: the 14 micro-benchmark cases, simulator-ready."""

from __future__ import annotations

import argparse

from ..vocab import MICRO_CASES
from .common import add_quiet, add_ranks, add_workers, executor_from, non_negative_int, size_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "micro", help="the reference generator's 14 micro-benchmark cases, runnable by a simulator",
        description="Write OUT_DIR/<case>.<rank>.et for every micro-benchmark case (see docs/guide/generate-micro-text.md).")
    add_ranks(parser, npus_alias=True, required=True, help="number of ranks, at least 2 (--npus: ASTRA-sim's name)")
    parser.add_argument("-o", "--output", default="micro", metavar="DIR", help="output directory (default micro)")
    parser.add_argument("--case", action="append", choices=MICRO_CASES, metavar="CASE", dest="cases",
                        help="write only this case (repeatable; default: all 14)")
    parser.add_argument("--size", type=size_arg, default="64KiB", help="comm_size of the collective cases and the broadcast "
                        "(default 64KiB)")
    parser.add_argument("--p2p-size", type=size_arg, default="1KiB", help="bytes of each send/recv case message (default 1KiB)")
    parser.add_argument("--mem-size", type=size_arg, default="1KiB", help="tensor_size of the memory load/store cases (default 1KiB)")
    parser.add_argument("--comp-us", type=non_negative_int, default=5, help="duration of each COMP node in µs (default 5)")
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..generate.micro import write_micro

    written = write_micro(args.output, args.ranks, cases=args.cases, coll_size=args.size,
                          p2p_size=args.p2p_size, mem_size=args.mem_size,
                          comp_us=args.comp_us, executor=executor_from(args))
    files = sum(len(paths) for paths in written.values())
    print(f"wrote {len(written)} cases x {args.ranks} ranks ({files} files) to {args.output}")
    return 0
