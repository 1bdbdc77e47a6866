"""``etkit analyze PREFIX``: where time goes in a job and why it is slow.

Prints, per rank and for the job: the time breakdown (compute, exposed / overlapped communication,
memory, host, idle), top operators by total and exclusive time, communication by type, process group
and message size with the rank x rank traffic matrix, the critical path across ranks, and load
imbalance with stragglers (who arrived last at each collective and receive, and how long the others waited)
and, for a profile with GPU activity, HTA's GPU figures (temporal and idle-time breakdown, kernels,
communication/computation overlap, launch statistics). Times come from the traces' timestamps when they
have them, from a simulation with ``--network``/``--system``/``--preset``, else from node durations; the
output says which. A Kineto trace (or a folder of them) is converted on the fly (``etkit convert kineto``
keeps the ETs); ``--ranks`` analyses some ranks only; ``--csv DIR`` writes every table as CSV.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..vocab import ANALYZE_ALGORITHMS
from .common import (
    add_json,
    add_quiet,
    add_simulation_inputs,
    add_workers,
    executor_from,
    explicit_executor,
    non_negative_float,
    positive_int,
    simulation_from,
    text_wanted,
    wants_simulation,
    write_json,
)

if TYPE_CHECKING:
    from ..model.job import Job
    from ..model.schedule import Schedule


def add_job_arguments(parser: argparse.ArgumentParser, *,
                      prefix_help: str = "job prefix (PREFIX.<rank>.et), one .et file, or a Kineto trace or folder "
                                         "of them (converted on the fly)") -> None:
    """The options every analysis verb shares: the job, its groups, where times come from, which ranks."""
    parser.add_argument("prefix", help=prefix_help)
    parser.add_argument("--ranks", type=rank_set, metavar="SET",
                        help="only these ranks, e.g. 0-7,12 (cross-rank figures then see these ranks only)")
    add_schedule_arguments(parser)


def rank_set(text: str) -> list[int]:
    """argparse ``type=`` for a set of ranks: ``0-7,12,16-19``."""
    ranks: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a set of ranks such as 0-7,12") from None
        if a < 0 or b < a:
            raise argparse.ArgumentTypeError(f"{part!r} is not a rank or a range of ranks a-b with a <= b")
        ranks.update(range(a, b + 1))
    return sorted(ranks)


def add_schedule_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--comm-groups", metavar="G.json",
                        help='comm groups JSON {"<pg_name>": [ranks]} (default PREFIX.comm_groups.json)')
    add_simulation_inputs(parser)  # with any of them, times come from a simulation instead of the traces
    add_quiet(parser)
    add_workers(parser)


def load_job_arg(spec: str, args: argparse.Namespace) -> Job:
    """The job ``spec`` names: ET files, or Kineto traces converted on the fly; only ``--ranks`` when given."""
    import sys

    from ..model.job import discover, load_job
    from ..pytorch.kineto_convert import is_kineto_input, load_kineto_job

    ranks = getattr(args, "ranks", None)
    if is_kineto_input(spec):
        if not getattr(args, "quiet", False):
            print(f"{spec}: a Kineto trace, converted on the fly (etkit convert kineto {spec} -o PREFIX keeps "
                  "the ETs)", file=sys.stderr)
        return load_kineto_job(spec, executor=executor_from(args), ranks=ranks)
    if ranks is None:
        return load_job(spec, comm_groups=args.comm_groups, executor=executor_from(args))
    files, prefix = discover(spec)
    chosen = [str(f.path) for f in files if f.rank in ranks]
    if not chosen:
        from ..errors import UsageError

        raise UsageError(f"{spec}: --ranks {','.join(map(str, ranks))} names none of its ranks "
                         f"({files[0].rank}..{files[-1].rank})")
    return load_job(chosen, comm_groups=args.comm_groups, executor=executor_from(args))


def load_with_schedule(args: argparse.Namespace, prefix: str | None = None) -> tuple[Job, Schedule | None]:
    """Load the job named on the command line and, with ``--network``/``--system``/``--preset``, simulate it."""
    from ..model.job import require_whole_job

    job = load_job_arg(prefix or args.prefix, args)
    if not wants_simulation(args):
        return job, None
    if getattr(args, "ranks", None) is not None:
        from ..errors import UsageError

        raise UsageError("--ranks cannot go with a simulation: its collectives need every rank (simulate the job, "
                         "then select ranks in the output)")
    from ..pytorch.kineto_convert import is_kineto_input

    if not is_kineto_input(prefix or args.prefix):
        require_whole_job(prefix or args.prefix)
    from ..analyze.timing import schedule_from_simulation

    network, system, knobs = simulation_from(args)
    return job, schedule_from_simulation(job, network, system, knobs=knobs)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("analyze", help="time breakdown, top ops, comm matrix, critical path, stragglers",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(p)
    add_json(p, "every figure")
    p.add_argument("--algorithm", choices=ANALYZE_ALGORITHMS, default="ring",
                   help="how collectives are expanded into rank-to-rank traffic (default ring)")
    p.add_argument("--straggler-threshold", type=non_negative_float, default=0.05, metavar="F",
                   help="a rank is a straggler when the waiting it makes others do, beyond the median of the ranks "
                        "doing the same work, exceeds F of the median rank span (default 0.05)")
    p.add_argument("--csv", metavar="DIR", help="also write every table as DIR/<table>.csv")
    p.add_argument("--top", type=positive_int, default=15, metavar="N", help="rows per table (default 15)")
    p.add_argument("--max-ranks", type=positive_int, default=16, metavar="N", help="ranks listed per table (default 16)")
    p.set_defaults(func=run, option_flags={"folder": "--csv"})  # the library's names of the flags that differ


def run(args: argparse.Namespace) -> int:
    """The verb, with the cyclic collector paused: its imports, the load and the analyses make no garbage in
    cycles, and the collections they would trigger cost 8-10 % of the CPU of a small Kineto trace's run."""
    from ..gcpause import gc_paused

    return int(gc_paused(_analyze)(args))


def _analyze(args: argparse.Namespace) -> int:
    from ..analyze import analyze_job
    from ..analyze.text import render_analysis

    job, schedule = load_with_schedule(args)
    analysis = analyze_job(job, schedule, algorithm=args.algorithm, straggler_threshold=args.straggler_threshold,
                           executor=explicit_executor(args))
    if text_wanted(args):
        print(render_analysis(analysis, max_ranks=args.max_ranks, top=args.top), end="")
    if args.json:
        write_json(analysis.to_json(), args.json)
    if args.csv:
        from ..analyze.tables import write_csv

        paths = write_csv(analysis.tables(), args.csv)
        if text_wanted(args):
            print(f"wrote {len(paths)} tables to {args.csv}/")
    return 0
