"""``etkit export {astra-sim} ...``: a job written for another tool, one sub-verb per target."""

from __future__ import annotations

import argparse

from .common import add_sub_verbs

SUB_MODULES = ("export_astra_sim",)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="write a job so that another tool runs it (ASTRA-sim)",
                                   description="Write a job in the form another tool runs as it is.")
    add_sub_verbs(parser, "target", "TARGET", SUB_MODULES)
