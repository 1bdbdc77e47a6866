"""Options and output helpers shared by the verb modules."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

import orjson

from ..executor import Executor, SerialExecutor, default_executor


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar on stderr")


def add_workers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--workers", type=int, default=None, metavar="N",
                        help="parallel processes for per-rank work (default: CPU count; 1 = in-process)")


def executor_from(args: argparse.Namespace) -> Executor:
    quiet = getattr(args, "quiet", True)
    workers = getattr(args, "workers", None)
    if workers == 1:
        return SerialExecutor(quiet=quiet)
    return default_executor(workers, quiet=quiet)


def write_json(data: Any, path: str | None) -> None:
    """Pretty JSON to ``path`` (atomically) or to stdout when ``path`` is ``-`` or ``None``."""
    payload = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS) + b"\n"
    if path in (None, "-"):
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
        return
    from ..fileio import atomic_output

    with atomic_output(path, compress=False) as out:
        out.write(payload)


def add_sub_verbs(parser: argparse.ArgumentParser, dest: str, metavar: str, modules: tuple[str, ...]) -> None:
    """Sub-verbs (``etkit convert pytorch``, ...): each module of this package registers one."""
    sub = parser.add_subparsers(dest=dest, metavar=metavar)
    sub.required = True
    for name in modules:
        importlib.import_module(f"{__package__}.{name}").register(sub)
