"""``etkit convert kineto TRACE|DIR -o PREFIX``: Chakra ETs from Kineto (PyTorch profiler) traces alone."""

from __future__ import annotations

import argparse

from .common import add_json, add_quiet, add_workers, executor_from, prefix_arg, text_wanted, write_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "kineto", help="Kineto traces alone (no host execution trace) -> Chakra ET per rank",
        description="Convert a Kineto trace, or a folder of them (one per rank; the rank is distributedInfo.rank, "
                    "else the order of the names), to PREFIX.<rank>.et plus PREFIX.comm_groups.json, rebuilding the "
                    "graph from the trace alone: ops nested on their threads, CUDA runtime calls with the kernels, "
                    "copies and sets they launched on their streams, cross-stream and host-device waits, and one "
                    "COMM node per collective or send/recv with its type, size, process group and peers (NCCL "
                    "record_param_comms and kernel args, gloo's c10d ops). Every rank is converted in parallel.")
    parser.add_argument("input", metavar="TRACE|DIR", help="a Kineto trace (.json or .json.gz) or a folder of them")
    parser.add_argument("-o", "--output", type=prefix_arg, metavar="PREFIX",
                        help="output prefix (default: the trace's or folder's name, in the current folder)")
    parser.add_argument("--gzip", action="store_true", help="write PREFIX.<rank>.et.gz")
    add_json(parser, "the per-rank report")
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..pytorch.kineto_convert import convert_kineto, default_prefix
    from .convert_pytorch import print_report

    report = convert_kineto(args.input, args.output or default_prefix(args.input), executor=executor_from(args),
                            compress=args.gzip)
    if args.json:
        write_json(report.to_json(), args.json)
    if text_wanted(args):
        print_report(report)
    return 0
