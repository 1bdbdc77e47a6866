"""``etkit convert pytorch``: PyTorch host ET (+ Kineto) of every rank -> ``PREFIX.<rank>.et``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from .common import add_quiet, add_workers, executor_from, write_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "pytorch", help="PyTorch execution traces (+ Kineto) -> Chakra ET per rank",
        description="Convert a PyTorch job directory (rank-<r>.et.json + rank-<r>.kineto.json, or host.<r>.json + "
                    "device.<r>.json) or a single host/linked trace to PREFIX.<rank>.et plus "
                    "PREFIX.comm_groups.json.")
    parser.add_argument("input", metavar="JOB_DIR|HOST.json", help="job directory, or one host / linked JSON file")
    parser.add_argument("-o", "--output", required=True, metavar="PREFIX", help="output prefix")
    parser.add_argument("--kineto", metavar="K.json", default=None, help="Kineto trace (single-file form only)")
    parser.add_argument("--rank", type=int, default=None, help="rank of a single file (default: from its name, else 0)")
    parser.add_argument("--gzip", action="store_true", help="write PREFIX.<rank>.et.gz")
    parser.add_argument("--report", metavar="FILE", default=None, help="write the per-rank report as JSON ('-' = stdout)")
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..pytorch.job import convert_files, convert_job

    if Path(args.input).is_dir():
        for option, value in (("--kineto", args.kineto), ("--rank", args.rank)):
            if value is not None:
                raise UsageError(f"{option} applies to a single host trace, not to the job directory {args.input} "
                                 "(its ranks pair rank-<r>.et.json with rank-<r>.kineto.json by name)")
        report = convert_job(args.input, args.output, executor=executor_from(args), compress=args.gzip)
    else:
        report = convert_files(args.input, args.output, kineto=args.kineto, rank=args.rank, compress=args.gzip)
    print(f"{'rank':>4} {'host ops':>8} {'linked':>7} {'unlinked':>8} {'roots':>5} {'ET nodes':>8}  comm nodes")
    for r in report.ranks:
        comm = ", ".join(f"{k} {v}" for k, v in sorted(r.comm_nodes.items())) or "-"
        print(f"{r.rank:>4} {r.host_ops:>8} {r.linked_ops:>7} {r.unlinked_ops:>8} {r.roots:>5} {r.nodes:>8}  {comm}")
        for warning in r.warnings:
            print(f"     warning: {warning}")
    print("host ops = linked (Kineto time known) + unlinked + roots (synthetic, never in Kineto); ET nodes = "
          "host ops - ops folded into their collective's COMM node + GPU kernels (+ a METADATA node from Kineto)")
    print(f"wrote {len(report.files)} ET files {report.prefix}.<rank>.et"
          + (f" and {report.comm_groups}" if report.comm_groups else ""))
    if report.removed:
        print(f"removed {len(report.removed)} file(s) of an older job under that prefix: {', '.join(report.removed)}")
    if args.report:
        write_json(report.to_json(), args.report)
    return 0
