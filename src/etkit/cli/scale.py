"""``etkit scale PREFIX --dp M | --tp M | --pp M | --ranks M -o OUT``: the same training step at another degree.

Reads where each rank sits from its process groups (members, sizes) and point-to-point peers (or
--layout tp2,dp4,pp2, fastest dimension first), then writes the job with one dimension at its new
degree: ranks replicated (or dropped) along dp and tp, pipeline stages merged for a smaller pp (the new
pp must divide the old); process groups, comm_src/comm_dst and process_group:init nodes rewritten.

What changes per rank: --dp with --keep per-rank-batch (default) nothing but ZeRO's parameter
all-gathers (their comm_size is the per-rank shard); with --keep global-batch each rank computes
old/new of the samples (compute, tensor-parallel collectives and pipeline sends shrink alike). --tp
divides compute and the gradient collectives of the other groups by new/old; tensor-parallel
collectives keep their size except all-gathers (the per-rank shard). --ranks M scales dp to reach M ranks.
"""

from __future__ import annotations

import argparse

from .common import (
    add_json,
    add_quiet,
    add_workers,
    default_output,
    executor_from,
    positive_int,
    prefix_arg,
    text_wanted,
    write_json,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("scale", help="the same training step at another degree of one parallel dimension",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prefix", help="job prefix (PREFIX.<rank>.et)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--dp", type=positive_int, metavar="M", help="new data-parallel degree")
    which.add_argument("--tp", type=positive_int, metavar="M", help="new tensor-parallel degree")
    which.add_argument("--pp", type=positive_int, metavar="M", help="new pipeline degree (must divide the old: stages merge)")
    which.add_argument("--ranks", type=positive_int, metavar="M", help="new world size, reached by scaling dp")
    p.add_argument("-o", "--output", type=prefix_arg, metavar="OUT", help="prefix of the new job (OUT.<rank>.et, "
                   "OUT.comm_groups.json); not the input's (default: the job's name + -<dim><M>, e.g. llm-dp16, "
                   "in the current folder)")
    p.add_argument("--keep", choices=("per-rank-batch", "global-batch"), default="per-rank-batch",
                   help="--dp/--ranks: keep each rank's batch (default) or the global batch (per-rank compute and "
                        "activation messages scaled by old/new)")
    p.add_argument("--layout", metavar="tp2,dp4,pp2", help="the input's layout, fastest dimension first, when its "
                   "groups do not show it (a one-group job is read as dp)")
    p.add_argument("--comm-groups", metavar="G.json", help="comm groups JSON of the input (default PREFIX.comm_groups.json)")
    p.add_argument("--dry-run", action="store_true", help="print the layouts and the new groups' count; write nothing")
    p.add_argument("--no-validate", action="store_true", help="do not validate the new job across ranks")
    add_json(p, "the report")
    add_quiet(p)
    add_workers(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..scale import plan_scale, scale

    degrees = {"dp": args.dp, "tp": args.tp, "pp": args.pp, "ranks": args.ranks}
    if args.dry_run:
        plan, _, _ = plan_scale(args.prefix, **degrees, keep=args.keep, layout=args.layout,
                                comm_groups=args.comm_groups, executor=executor_from(args))
        print(f"layout {plan.old.text()} ({plan.old.world_size} ranks) -> {plan.new.text()} "
              f"({plan.new.world_size:,} ranks), {len(plan.groups.groups):,} process group(s)")
        return 0
    dim = next(k for k, v in degrees.items() if v is not None)
    output = args.output or default_output(args.prefix, f"-{dim}{degrees[dim]}")
    report = scale(args.prefix, output, **degrees, keep=args.keep, layout=args.layout,
                   comm_groups=args.comm_groups, validate=not args.no_validate, executor=executor_from(args))
    if text_wanted(args):
        print("\n".join(report.lines()))
    if args.json:
        write_json(report.to_json(), args.json)
    return 0 if report.valid is not False else 1
