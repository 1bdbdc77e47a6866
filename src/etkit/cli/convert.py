"""``etkit convert {pytorch,text} ...``: the converters, one sub-verb module each."""

from __future__ import annotations

import argparse
import importlib
import importlib.util

SUB_MODULES = ("convert_pytorch", "convert_text")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("convert", help="convert PyTorch jobs or ASTRA-sim text workloads to Chakra ET",
                                   description="Convert other trace formats to Chakra ET files PREFIX.<rank>.et.")
    sub = parser.add_subparsers(dest="source", metavar="SOURCE")
    sub.required = True
    for name in SUB_MODULES:
        full = f"{__package__}.{name}"
        if importlib.util.find_spec(full) is not None:
            importlib.import_module(full).register(sub)
