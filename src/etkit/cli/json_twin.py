"""``etkit to-json`` and ``etkit from-json``: the lossless JSON twin of an ``.et`` file."""

from __future__ import annotations

import argparse

from .common import add_quiet


def register(subparsers: argparse._SubParsersAction) -> None:
    to = subparsers.add_parser("to-json", help="write the JSON twin of an .et file",
                               description="Write one JSON document (metadata + nodes, one node per line, 64-bit "
                                           "integers as strings) that from-json turns back into the same bytes; "
                                           "or, with --format jsonizer, exactly what Chakra's chakra_jsonizer writes.")
    to.add_argument("input", metavar="X.et", help=".et file (plain or gzip)")
    to.add_argument("-o", "--output", metavar="X.json", default=None,
                    help="output path (default: the input with .json instead of .et, .jsonized.txt with "
                         "--format jsonizer; '.gz' suffix = gzip)")
    to.add_argument("--format", choices=("twin", "jsonizer"), default="twin",
                    help="twin (default): etkit's lossless JSON twin; jsonizer: chakra_jsonizer's output byte for "
                         "byte (concatenated pretty-printed objects; unknown fields and non-canonical bytes are lost)")
    add_quiet(to)
    to.set_defaults(func=run_to_json)
    back = subparsers.add_parser("from-json", help="write the .et file of a JSON twin (or jsonizer output)",
                                 description="Restore the exact .et bytes from a JSON twin written by to-json; also "
                                             "reads the reference jsonizer's concatenated JSON objects.")
    back.add_argument("input", metavar="X.json", help="JSON twin or jsonizer output (plain or gzip)")
    back.add_argument("-o", "--output", metavar="X.et", default=None,
                      help="output .et path (default: the input with .et instead of .json; '.gz' suffix = gzip)")
    add_quiet(back)
    back.set_defaults(func=run_from_json)


def run_to_json(args: argparse.Namespace) -> int:
    from ..filekind import require
    from ..format.jsontwin import default_json_path, to_json

    require(args.input, {"chakra-et"}, wanted="a Chakra ET (.et) file")
    jsonizer = args.format == "jsonizer"
    out = args.output or str(default_json_path(args.input, ".jsonized.txt" if jsonizer else ".json"))
    if jsonizer:
        from ..format.jsonizer import to_jsonizer  # (protobuf: imported only for this layout)
        count = to_jsonizer(args.input, out)
    else:
        count = to_json(args.input, out)
    print(f"{count:,} nodes -> {out}")
    return 0


def default_et_path(json_path: str) -> str:
    """``x.json`` -> ``x.et`` (``x.json.gz``, ``x.jsonized.txt`` likewise); any other name gets ``.et`` added."""
    for suffix in (".json.gz", ".json", ".jsonized.txt", ".txt"):
        if json_path.endswith(suffix):
            return json_path[: -len(suffix)] + ".et"
    return json_path + ".et"


def run_from_json(args: argparse.Namespace) -> int:
    from ..filekind import require
    from ..format.jsontwin import from_json

    require(args.input, {"json-twin", "jsonizer", "json"}, wanted="a JSON twin (etkit to-json) or chakra_jsonizer output")
    out = args.output or default_et_path(args.input)
    count = from_json(args.input, out)
    print(f"{count:,} nodes -> {out}")
    return 0
