"""``etkit generate {micro,collective,llm,dlrm} ...``: synthetic workloads, one sub-verb module each."""

from __future__ import annotations

import argparse
import importlib
import importlib.util

SUB_MODULES = ("generate_micro", "generate_collective", "generate_llm", "generate_dlrm")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="generate synthetic Chakra ETs (micro-benchmarks, LLM, DLRM)",
                                   description="Write synthetic jobs as PREFIX.<rank>.et plus PREFIX.comm_groups.json.")
    sub = parser.add_subparsers(dest="kind", metavar="KIND")
    sub.required = True
    for name in SUB_MODULES:
        full = f"{__package__}.{name}"
        if importlib.util.find_spec(full) is not None:
            importlib.import_module(full).register(sub)
