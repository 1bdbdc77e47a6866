"""``etkit generate collective --type T --size S --ranks N [--groups ...]``: one collective on a group layout."""

from __future__ import annotations

import argparse

from ..vocab import COLLECTIVE_TYPES
from .common import add_quiet, add_ranks, add_workers, executor_from, prefix_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "collective", help="one collective on any group layout",
        description="Write PREFIX.<rank>.et (+ PREFIX.comm_groups.json when there are several groups) for one "
                    "collective per group. Broadcast and barrier are written as SEND/RECV (binomial tree, "
                    "dissemination barrier).")
    parser.add_argument("--type", required=True, choices=COLLECTIVE_TYPES, dest="comm", help="the collective")
    parser.add_argument("--size", default="1MiB", help="comm_size in bytes, units B/KB/MB/GB (decimal) or "
                        "KiB/MiB/GiB (binary); default 1MiB")
    add_ranks(parser, npus_alias=True, required=True, help="number of ranks (--npus: ASTRA-sim's name)")
    parser.add_argument("-o", "--output", type=prefix_arg, metavar="PREFIX",
                        help="output prefix (default: the collective's name, e.g. all_reduce, in the current folder)")
    layout = parser.add_mutually_exclusive_group()
    layout.add_argument("--groups", nargs="+", metavar="GROUP",
                        help="explicit groups, one argument each: comma-separated ranks and a-b ranges, "
                             "e.g. --groups 0-3 4-7 or --groups 0,2,4,6 1,3,5,7; must cover every rank once")
    layout.add_argument("--group-size", type=int, metavar="K", help="groups of K consecutive ranks "
                        "(with --stride S: K ranks S apart)")
    parser.add_argument("--stride", type=int, default=1, metavar="S",
                        help="distance between members with --group-size (default 1)")
    parser.add_argument("--root", type=int, default=0, help="broadcast root, as a position in each group (default 0)")
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..generate.collective import write_collective

    output = args.output or args.comm
    paths = write_collective(output, args.comm, args.size, args.ranks, groups=args.groups,
                             group_size=args.group_size, stride=args.stride, root=args.root,
                             executor=executor_from(args))
    print(f"wrote {len(paths)} ranks to {output}.<rank>.et")
    return 0
