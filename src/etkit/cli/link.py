"""``etkit link``: join a host execution trace with its Kineto trace into one linked JSON."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import add_quiet, text_wanted, write_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("link", help="link a host ET with its Kineto trace (linked JSON)",
                                   description="Match host ops to Kineto events, attach start time, inclusive "
                                               "and exclusive durations and GPU kernels, repair the op tree, "
                                               "and write the linked ('host + device') JSON.")
    parser.add_argument("--host", required=True, metavar="H.json[.gz]", help="host execution trace")
    parser.add_argument("--kineto", required=True, metavar="K.json[.gz]", help="Kineto trace of the same steps")
    parser.add_argument("-o", "--output", metavar="LINKED.json",
                        help="output (.gz = gzip; default: the host trace's name with .linked.json)")
    parser.add_argument("--rank", type=int, default=None, help="rank, used in messages")
    parser.add_argument("--json", "--report", nargs="?", const="-", default=None, metavar="FILE", dest="json",
                        help="write the link report as JSON to FILE; no FILE or '-': to stdout, which then holds "
                             "only the JSON (--report is the old name)")
    add_quiet(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..gcpause import paused_gc
    from ..pytorch.link import link_files, write_linked_json
    from ..pytorch.pairing import check_pair

    check_pair(args.host, args.kineto)
    output = args.output or default_linked_path(args.host)
    with paused_gc():
        linked = link_files(args.host, args.kineto, rank=args.rank)
        report = write_linked_json(linked, output)
    if args.json:
        write_json(report.to_json(), args.json)
    if not text_wanted(args):
        return 0
    print(f"{output}: {report.linked_ops} of {report.host_ops} host ops linked ({report.method}), "
          f"{report.unlinked_ops} unlinked, {report.roots} synthetic roots (never in Kineto); "
          f"{report.tree_repairs} parents repaired, {report.backend_ops_paired} backend ops paired, "
          f"kernels {report.kernels_linked}/{report.kernels} linked")
    for name, count in report.unlinked_names.items():
        print(f"  unlinked: {name} x{count}")
    for warning in report.warnings:
        print(f"  warning: {warning}")
    return 0


def default_linked_path(host: str) -> str:
    """``traces/rank-0.et.json`` -> ``rank-0.linked.json`` (in the current folder)."""
    name = Path(host).name
    for suffix in (".et.json.gz", ".et.json", ".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)] + ".linked.json"
    return name + ".linked.json"
