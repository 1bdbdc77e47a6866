"""``etkit validate PREFIX|FILES...``: per-file and cross-rank checks; exit 0 clean, 1 findings, 2 unreadable."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .common import add_json, add_quiet, add_workers, executor_from, non_negative_int, text_wanted, write_json

if TYPE_CHECKING:
    from rich.console import Console

    from ..validate import ValidationReport


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate", help="check ET files and the job across ranks",
        description="Check each file (unique ids, existing deps, no cycles, comm attributes, known enums, "
                    "non-empty nodes) and the job (collectives agree in every process group, every send meets "
                    "its recv). Exit status: 0 clean (warnings allowed), 1 errors found, 2 unreadable input.")
    parser.add_argument("inputs", nargs="+", metavar="PREFIX|FILE", help="job prefix (PREFIX.<rank>.et) or .et files")
    parser.add_argument("--comm-groups", metavar="JSON", default=None,
                        help="process groups {pg_name: [ranks]} (default: PREFIX.comm_groups.json when present)")
    add_json(parser, "the findings")
    parser.add_argument("--max-findings", type=non_negative_int, default=200, metavar="N",
                        help="print at most N findings (all go to --json); default 200")
    add_workers(parser)
    add_quiet(parser)
    parser.set_defaults(func=run)


def render(report: ValidationReport, console: Console, limit: int) -> None:
    from rich.markup import escape

    from ..safetext import printable

    for finding in report.findings[:limit]:
        style = "red" if finding.severity == "error" else "yellow"
        console.print(f"[{style}]{finding.severity}[/{style}] {escape(printable(str(finding)))}", highlight=False)
    if len(report.findings) > limit:
        console.print(f"... {len(report.findings) - limit} more findings (use --json for all)")
    verdict = "[green]OK[/green]" if report.ok else "[red]FAILED[/red]"
    console.print(f"{verdict}: {report.ranks} rank(s), {report.nodes:,} nodes, {len(report.errors)} error(s), "
                  f"{len(report.warnings)} warning(s)")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..validate import validate

    spec = args.inputs[0] if len(args.inputs) == 1 else args.inputs
    report = validate(spec, comm_groups=args.comm_groups, executor=executor_from(args))
    if args.json is not None:
        write_json(report.to_json(), args.json)
    if text_wanted(args):
        render(report, Console(highlight=False, soft_wrap=True), args.max_findings)
    return 0 if report.ok else 1
