"""Options and output helpers shared by the verb modules."""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Callable
from typing import Any

import orjson

from ..executor import Executor, SerialExecutor, default_executor


def size_arg(text: str) -> int:
    """argparse ``type=`` for a byte size such as ``4GiB`` (a bad value is argparse's one-line usage error)."""
    from ..errors import UsageError
    from ..units import parse_size

    try:
        return parse_size(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def sizes_arg(text: str) -> tuple[int, ...]:
    """argparse ``type=`` for a comma-separated list of byte sizes (``1KiB,64KiB,4MiB``)."""
    return tuple(size_arg(s) for s in text.split(",") if s)


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar on stderr")


def add_workers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--workers", type=positive_int, default=None, metavar="N",
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


def _bounded(name: str, convert: Callable[[str], Any], minimum: float, *, strict: bool, wanted: str) -> Callable[[str], Any]:
    """An argparse ``type`` that converts with ``convert`` and refuses values below ``minimum`` (or equal to it
    when ``strict``), NaN and infinity, so a nonsense value fails at parse time with a one-line usage error."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}")
        return value

    parse.__name__ = parse.__qualname__ = name
    return parse


#: argparse ``type=`` for counts, sizes and thresholds; each rejects anything else at parse time.
positive_int = _bounded("positive_int", int, 1, strict=False, wanted="a whole number of at least 1")
non_negative_int = _bounded("non_negative_int", int, 0, strict=False, wanted="a whole number of at least 0")
positive_float = _bounded("positive_float", float, 0, strict=True, wanted="a number above 0")
non_negative_float = _bounded("non_negative_float", float, 0, strict=False, wanted="a number of at least 0")


def add_sub_verbs(parser: argparse.ArgumentParser, dest: str, metavar: str, modules: tuple[str, ...]) -> None:
    """Sub-verbs (``etkit convert pytorch``, ...): each module of this package registers one."""
    sub = parser.add_subparsers(dest=dest, metavar=metavar)
    sub.required = True
    for name in modules:
        importlib.import_module(f"{__package__}.{name}").register(sub)
