"""``etkit <verb>``: the command line, a thin face over the library.

Each verb lives in its own module of this package with ``register(subparsers)``, which adds its parser
and sets ``func(args) -> exit code``. Errors the library raises as :class:`~etkit.errors.EtkitError`
become one line on stderr and exit status 2.
"""

from __future__ import annotations

from . import guard

guard.install_startup_handlers()  # before any other import: a Ctrl-C at start-up is one line too

import argparse  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402

from .. import __version__  # noqa: E402
from ..errors import EtkitError, Interrupted, OptionError  # noqa: E402
from ..safetext import printable  # noqa: E402
from .common import VerbParser, reported_warnings  # noqa: E402

#: Verb modules, in help order.
VERB_MODULES = (
    "info", "validate", "json_twin", "demo", "collect", "link", "convert", "generate", "analyze", "diff",
    "timeline", "graph", "report", "simulate", "calibrate", "replay", "export", "anonymize", "scale",
)


def build_parser() -> argparse.ArgumentParser:
    parser = VerbParser(
        prog="etkit", description="Chakra execution traces: collect, convert, check, analyse, simulate, replay.")
    parser.add_argument("--version", action="version", version=f"etkit {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB")
    subparsers.required = True
    for name in VERB_MODULES:
        importlib.import_module(f"{__package__}.{name}").register(subparsers)
    guard.add_input_limits(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with guard.signals_raise() as stops:
        try:
            args = build_parser().parse_args(argv)
        except KeyboardInterrupt as exc:
            return guard.interrupted("etkit", exc)
        code = _run(args)
        if stops and code <= 128:  # the signal's exception was swallowed where it landed: report it now
            code = guard.interrupted(f"etkit {args.verb}", Interrupted(stops[0]))
        return code


def _run(args: argparse.Namespace) -> int:
    try:
        with guard.running(args), reported_warnings(f"etkit {args.verb}"):
            return int(args.func(args) or 0)
    except EtkitError as exc:  # a library option's value is named by the flag that set it
        message = exc.as_flags(getattr(args, "option_flags", None)) if isinstance(exc, OptionError) else str(exc)
        print(f"etkit {args.verb}: {printable(message, newlines=False)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of our stdout went away (| head): nothing left to say
        return 0
    except OSError as exc:  # a file etkit had no reason to expect trouble with (disk full, permissions)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"etkit {args.verb}: {printable(f'{where}{exc.strerror or exc}', newlines=False)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP (guard.signals_raise)
        return guard.interrupted(f"etkit {args.verb}", exc)


def run() -> None:
    code = main()
    if code > 128:  # interrupted: leave now, so that the interpreter's exit cannot turn it into a signal death
        guard.leave_now(code)
    guard.hold_signals()  # the work is done: a Ctrl-C now must not kill the interpreter's shutdown
    sys.exit(code)
