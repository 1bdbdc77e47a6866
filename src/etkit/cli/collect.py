"""``etkit collect example``: run a built-in example job on CPU and record its traces."""

from __future__ import annotations

import argparse
import sys

from ..vocab import WORKLOADS
from .common import add_quiet, add_ranks, positive_float, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("collect", help="record real PyTorch jobs (host ET + Kineto per rank)",
                                   description="Record PyTorch execution traces. In your own code use "
                                               "etkit.pytorch.collect.profile(); 'example' runs a built-in job.")
    sub = parser.add_subparsers(dest="what", metavar="WHAT")
    sub.required = True
    ex = sub.add_parser("example", help="run a built-in example job on CPU (gloo, spawned ranks)",
                        description="Run a tiny built-in training job with N spawned CPU ranks (gloo, loopback "
                                    "rendezvous) and write rank-<r>.et.json + rank-<r>.kineto.json per rank.")
    ex.add_argument("--workload", required=True, choices=WORKLOADS,
                    help="ddp: DDP MLP; tp: sequence/tensor parallel; pp: pipeline send/recv; "
                         "moe: all_to_all experts; fsdp: FSDP2; cnn: small CNN (DDP with >1 rank)")
    add_ranks(ex, default=2, help="number of ranks (default 2)")
    ex.add_argument("-o", "--output", metavar="DIR",
                    help="output directory (default traces/<workload>); the files of an earlier collection there "
                         "that this one replaces are removed")
    ex.add_argument("--steps", type=positive_int, default=2, help="profiled steps (after 1 wait + 1 warm-up step; default 2)")
    ex.add_argument("--gzip", action="store_true", help="write .json.gz files")
    ex.add_argument("--timeout", type=positive_float, default=600.0, metavar="S", help="give up after S seconds (default 600)")
    add_quiet(ex)
    ex.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import orjson

    from ..pytorch.collect import run_example

    out = run_example(args.workload, args.ranks, args.output or f"traces/{args.workload}", steps=args.steps, quiet=args.quiet,
                      compress=args.gzip, timeout_s=args.timeout)
    files = sorted(p.name for p in out.iterdir() if ".json" in p.name and p.name != "meta.json")
    print(f"{args.workload}: {args.ranks} ranks, {args.steps} profiled steps -> {out}/ ({len(files)} trace files)")
    for name in files:
        print(f"  {name}")
    removed = orjson.loads((out / "meta.json").read_bytes()).get("removed", [])
    if removed:
        print(f"removed {len(removed)} file(s) of an earlier collection there: {', '.join(removed)}")
    sys.stdout.flush()
    return 0
