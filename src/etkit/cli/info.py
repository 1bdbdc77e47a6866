"""``etkit info PREFIX|FILES...``: per-rank node counts, communication volume, durations, metadata."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .common import add_json, add_quiet, add_workers, executor_from, text_wanted, write_json

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

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
    title = f"{len(summary.ranks)} rank(s), {summary.nodes:,} nodes"
    headers = ["rank", *(t.replace("_NODE", "") for t in types), "Σ duration", "span"]
    rows = [[str(r.rank), *(f"{r.by_type.get(t, 0):,}" for t in types), f"{r.duration_us_total:,} µs",
             f"{r.span_us:,} µs" if r.timestamps else "-"] for r in summary.ranks]
    _print_rank_table(console, title, headers, rows)
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


def _rank_table(title: str, headers: list[str], rows: list[list[str]]) -> Table:
    from rich.table import Table

    table = Table(title=title)
    for header in headers:
        table.add_column(header, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def _print_rank_table(console: Console, title: str, headers: list[str], rows: list[list[str]]) -> None:
    """The per-rank table (right-justified plain cells), as rich prints it, without rich laying out every row.

    Rich sizes each column by its widest cell, so a table of the header and one row of the widest cells has
    the widths of the whole table: rich prints that one (title, borders, header, styles), and the other rows
    are formatted as its row line. Where that line is not what the plain format gives (a column squeezed
    to fit the console, a cell wrapped), the whole table goes through rich.
    """
    from rich.cells import cell_len

    if len(rows) < 2:
        console.print(_rank_table(title, headers, rows))
        return
    widths = [max(map(cell_len, column)) for column in zip(headers, *rows)]
    widest = [max(column, key=cell_len) for column in zip(*rows)]
    with console.capture() as capture:
        console.print(_rank_table(title, headers, [widest]))
    lines = capture.get().split("\n")
    if len(lines) < 4 or lines[-1] or lines[-3] != _plain_row(widest, widths):
        console.print(_rank_table(title, headers, rows))
        return
    console.file.write("\n".join([*lines[:-3], *(_plain_row(row, widths) for row in rows), lines[-2], ""]))


def _plain_row(cells: list[str], widths: list[int]) -> str:
    """A row line of rich's default box: each cell right-justified in its width, one space of padding each side."""
    from rich.cells import cell_len

    return "│" + "│".join(f" {' ' * (w - cell_len(c))}{c} " for c, w in zip(cells, widths)) + "│"


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
