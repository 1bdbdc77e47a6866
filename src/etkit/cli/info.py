"""``etkit info PREFIX|FILES...``: per-rank node counts, communication volume, durations, metadata."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .common import add_json, add_quiet, add_workers, executor_from, text_wanted, write_json

if TYPE_CHECKING:
    from rich.console import Console

    from ..analyze.summary import JobInfo


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("info", help="summarise the ranks of a job",
                                   description="Per-rank node counts by type, communication volume by collective, "
                                               "summed durations and the GlobalMetadata of each file.")
    parser.add_argument("inputs", nargs="+", metavar="PREFIX|FILE", help="job prefix (PREFIX.<rank>.et) or .et files")
    add_json(parser, "the summary")
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)



def _shown(text: str) -> str:
    """Trace text in a rich table: its markup and terminal controls shown, not obeyed."""
    from rich.markup import escape

    from ..safetext import printable

    return escape(printable(text))


def render(summary: JobInfo, console: Console) -> None:
    from rich.table import Table

    from ..units import format_bytes

    types = sorted(summary.by_type)
    table = Table(title=f"{len(summary.ranks)} rank(s), {summary.nodes:,} nodes")
    table.add_column("rank", justify="right")
    for t in types:
        table.add_column(t.replace("_NODE", ""), justify="right")
    table.add_column("Σ duration", justify="right")
    table.add_column("span", justify="right")
    for r in summary.ranks:
        span = f"{r.span_us:,} µs" if r.timestamps else "-"
        table.add_row(str(r.rank), *(f"{r.by_type.get(t, 0):,}" for t in types), f"{r.duration_us_total:,} µs", span)
    console.print(table)
    if summary.comm:
        comm = Table(title="communication (all ranks)")
        comm.add_column("kind")
        comm.add_column("count", justify="right")
        comm.add_column("volume", justify="right")
        for label, vol in sorted(summary.comm.items()):
            comm.add_row(_shown(label), f"{vol.count:,}", format_bytes(vol.bytes))
        console.print(comm)
    first = summary.ranks[0] if summary.ranks else None
    if first is not None:
        meta = _shown(", ".join(f"{k}={v}" for k, v in first.metadata.items()))
        console.print(f"metadata (rank {first.rank}): version={first.version!r}" + (f", {meta}" if meta else ""))


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..analyze.summary import info

    spec = args.inputs[0] if len(args.inputs) == 1 else args.inputs
    summary = info(spec, executor=executor_from(args))
    if args.json is not None:
        write_json(summary.to_json(), args.json)
        if not text_wanted(args):
            return 0
    render(summary, Console())
    return 0
