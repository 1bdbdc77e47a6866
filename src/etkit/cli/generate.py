"""``etkit generate {micro,collective,llm,dlrm,llm-serve} ...``: synthetic workloads, one sub-verb module each."""

from __future__ import annotations

import argparse

from .common import add_sub_verbs

SUB_MODULES = ("generate_micro", "generate_collective", "generate_llm", "generate_dlrm", "generate_serve")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="generate synthetic Chakra ETs (micro-benchmarks, LLM training and serving, DLRM)",
                                   description="Write synthetic jobs as PREFIX.<rank>.et plus PREFIX.comm_groups.json.")
    add_sub_verbs(parser, "kind", "KIND", SUB_MODULES)
