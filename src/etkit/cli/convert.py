"""``etkit convert {pytorch,kineto,text} ...``: the converters, one sub-verb module each."""

from __future__ import annotations

import argparse

from .common import add_sub_verbs

SUB_MODULES = ("convert_pytorch", "convert_kineto", "convert_text")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("convert", help="convert PyTorch jobs, Kineto traces or ASTRA-sim text workloads to Chakra ET",
                                   description="Convert other trace formats to Chakra ET files PREFIX.<rank>.et.")
    add_sub_verbs(parser, "source", "SOURCE", SUB_MODULES)
