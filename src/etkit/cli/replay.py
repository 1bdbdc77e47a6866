"""``etkit replay PREFIX --ranks N``: run a trace again on real hardware and compare with the trace."""

from __future__ import annotations

import argparse
import os
import sys

from .common import (
    add_json,
    add_quiet,
    add_ranks,
    non_negative_int,
    positive_float,
    positive_int,
    size_arg,
    text_wanted,
    write_json,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay", help="replay a job's ETs on real hardware through PyTorch and compare with the trace",
        description="Spawn one process per rank (or join an existing torchrun launch), build the trace's process "
                    "groups, walk every rank's graph in dependency order issuing the recorded communication and "
                    "running the recorded compute, then report replayed vs trace time (see docs/guide/replay.md).")
    parser.add_argument("prefix", metavar="PREFIX", help="job prefix (PREFIX.<rank>.et) or a single .et file")
    add_ranks(parser, default=None, help="number of ranks to spawn; must equal the job's rank count (default: that count)")
    parser.add_argument("--mode", choices=("comm", "compute", "full"), default="full",
                        help="comm: only communication; compute: only compute; full: both (default)")
    parser.add_argument("--iters", type=positive_int, default=3, metavar="K", help="measured iterations (default 3)")
    parser.add_argument("--warmup", type=non_negative_int, default=1, metavar="W", help="warm-up iterations (default 1)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                        help="torch.distributed backend (default: nccl with --device cuda, else gloo)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="where tensors live (default: cuda when available, else cpu)")
    parser.add_argument("--comm-groups", default=None, metavar="JSON",
                        help="comm-groups JSON (default: PREFIX.comm_groups.json when present)")
    parser.add_argument("--timeout", type=positive_float, default=120.0, metavar="S",
                        help="seconds a collective may wait before the replay fails (default 120)")
    parser.add_argument("--no-host-time", action="store_true",
                        help="do not spin for containers' own time (the framework work around the recorded ops)")
    parser.add_argument("--max-buffer-bytes", type=size_arg, default=None, metavar="SIZE",
                        help="most memory one communication of one rank may hold, e.g. 4GiB (default: half of "
                             "this host's available memory, or the GPU's free memory, over the ranks sharing it); "
                             "a larger message stops the replay before any rank starts")
    parser.add_argument("--allow-mismatch", action="store_true",
                        help="replay a job whose ranks disagree about a collective's size (every member gets the "
                             "largest) or a send/recv without a partner (left out and listed) instead of refusing it, "
                             "as etkit validate does (a collective sequence that differs is always refused)")
    parser.add_argument("--threads", type=positive_int, default=1, metavar="T", help="intra-op CPU threads per rank (default 1)")
    add_json(parser, "the full report")
    parser.add_argument("--timeline", default=None, metavar="OUT.json",
                        help="write the last measured iteration as a Chrome trace (open in Perfetto)")
    add_quiet(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..replay import ReplayOptions, in_torchrun, replay_job

    options = ReplayOptions(mode=args.mode, iters=args.iters, warmup=args.warmup, backend=args.backend,
                            device=args.device, timeout_s=args.timeout, threads=args.threads,
                            host_time=not args.no_host_time, max_buffer_bytes=args.max_buffer_bytes,
                            allow_mismatch=args.allow_mismatch)
    report = replay_job(args.prefix, ranks=args.ranks, options=options, comm_groups=args.comm_groups,
                        quiet=args.quiet)
    if in_torchrun() and os.environ["RANK"] != "0":
        return 0  # every torchrun rank gets the report; rank 0 prints and writes it
    if args.timeline:
        report.write_timeline(args.timeline)
    if args.json:
        write_json(report.to_json(), args.json)
    if text_wanted(args):
        sys.stdout.write(report.render_text())
    return 0
