"""``etkit demo -o DIR``: the main job end to end on built-in defaults (see :mod:`etkit.demo`)."""

from __future__ import annotations

import argparse

from .common import add_quiet, add_ranks, add_workers, executor_from, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the main job end to end (collect, convert, validate, analyse, simulate, report)",
        description="Collect a small PyTorch job on this machine's CPUs, convert and validate it, analyse it, "
                    "simulate it on other systems, and write an HTML report and timelines into one folder.")
    parser.add_argument("-o", "--output", default="demo-out", metavar="DIR", help="output folder (default demo-out)")
    parser.add_argument("--workload", default="tp", choices=("ddp", "tp", "pp", "moe", "fsdp", "cnn"),
                        help="example job to collect (default tp: tensor/sequence-parallel transformer block)")
    add_ranks(parser, default=4, help="CPU ranks (default 4)")
    parser.add_argument("--steps", type=positive_int, default=2, metavar="K", help="profiled training steps (default 2)")
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    run_demo(args.output, workload=args.workload, ranks=args.ranks, steps=args.steps, quiet=args.quiet,
             executor=executor_from(args))
    return 0
