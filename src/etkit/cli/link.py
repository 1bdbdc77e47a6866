"""``etkit link``: join a host execution trace with its Kineto trace into one linked JSON."""

from __future__ import annotations

import argparse

from .common import write_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("link", help="link a host ET with its Kineto trace (linked JSON)",
                                   description="Match host ops to Kineto events, attach start time, inclusive "
                                               "and exclusive durations and GPU kernels, repair the op tree, "
                                               "and write the linked ('host + device') JSON.")
    parser.add_argument("--host", required=True, metavar="H.json[.gz]", help="host execution trace")
    parser.add_argument("--kineto", required=True, metavar="K.json[.gz]", help="Kineto trace of the same steps")
    parser.add_argument("-o", "--output", required=True, metavar="LINKED.json", help="output (.gz = gzip)")
    parser.add_argument("--rank", type=int, default=None, help="rank, used in messages")
    parser.add_argument("--report", metavar="FILE", default=None,
                        help="also write the link report as JSON to FILE ('-' = stdout)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..pytorch.jsonio import paused_gc
    from ..pytorch.link import link_files, write_linked_json

    with paused_gc():
        linked = link_files(args.host, args.kineto, rank=args.rank)
        report = write_linked_json(linked, args.output)
    print(f"{args.output}: {report.linked_ops} of {report.host_ops} host ops linked ({report.method}), "
          f"{report.unlinked_ops} unlinked, {report.roots} synthetic roots (never in Kineto); "
          f"{report.tree_repairs} parents repaired, {report.backend_ops_paired} backend ops paired, "
          f"kernels {report.kernels_linked}/{report.kernels} linked")
    for name, count in report.unlinked_names.items():
        print(f"  unlinked: {name} x{count}")
    for warning in report.warnings:
        print(f"  warning: {warning}")
    if args.report:
        write_json(report.to_json(), args.report)
    return 0
