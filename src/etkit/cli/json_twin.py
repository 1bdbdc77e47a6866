"""``etkit to-json`` and ``etkit from-json``: the lossless JSON twin of an ``.et`` file."""

from __future__ import annotations

import argparse
import sys



def register(subparsers: argparse._SubParsersAction) -> None:
    to = subparsers.add_parser("to-json", help="write the JSON twin of an .et file",
                               description="Write one JSON document (metadata + nodes, one node per line, 64-bit "
                                           "integers as strings) that from-json turns back into the same bytes.")
    to.add_argument("input", metavar="X.et", help=".et file (plain or gzip)")
    to.add_argument("-o", "--output", metavar="X.json", default=None,
                    help="output path (default: the input with .json; '.gz' suffix = gzip)")
    to.set_defaults(func=run_to_json)
    back = subparsers.add_parser("from-json", help="write the .et file of a JSON twin (or jsonizer output)",
                                 description="Restore the exact .et bytes from a JSON twin written by to-json; also "
                                             "reads the reference jsonizer's concatenated JSON objects.")
    back.add_argument("input", metavar="X.json", help="JSON twin or jsonizer output (plain or gzip)")
    back.add_argument("-o", "--output", metavar="X.et", required=True, help="output .et path ('.gz' suffix = gzip)")
    back.set_defaults(func=run_from_json)


def run_to_json(args: argparse.Namespace) -> int:
    from ..format.jsontwin import default_json_path, to_json

    out = args.output or str(default_json_path(args.input))
    count = to_json(args.input, out)
    print(f"{count:,} nodes -> {out}", file=sys.stderr)
    return 0


def run_from_json(args: argparse.Namespace) -> int:
    from ..format.jsontwin import from_json

    count = from_json(args.input, args.output)
    print(f"{count:,} nodes -> {args.output}", file=sys.stderr)
    return 0
