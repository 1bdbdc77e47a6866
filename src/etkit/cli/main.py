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

#: The verbs whose module is not named after them (every other verb ``V`` is registered by module ``V``).
_MODULE_OF = {"to-json": "json_twin", "from-json": "json_twin"}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``etkit`` parser. Given the command line, it holds only the verb that line names (importing one
    verb module, not all of them, is most of ``etkit VERB``'s start-up); without one, or for a word that is
    no verb, every verb, so that ``etkit --help`` lists them and a wrong verb's error names the choices."""
    parser = VerbParser(
        prog="etkit", description="Chakra execution traces: collect, convert, check, analyse, simulate, replay.")
    parser.add_argument("--version", action="version", version=f"etkit {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB")
    subparsers.required = True
    for name in _verb_modules(argv):
        importlib.import_module(f"{__package__}.{name}").register(subparsers)
    guard.add_input_limits(subparsers)
    return parser


def _verb_modules(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The verb modules a command line needs: the named verb's alone, else all of them."""
    words = [word for word in (sys.argv[1:] if argv is None else argv) if not word.startswith("-")][:1]
    module = _MODULE_OF.get(words[0], words[0]) if words else None
    return (module,) if module in VERB_MODULES else VERB_MODULES


def main(argv: Sequence[str] | None = None) -> int:
    with guard.signals_raise() as stops:
        try:
            args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
        except KeyboardInterrupt as exc:
            return guard.interrupted("etkit", exc)
        code = _run(args)
        if stops and code <= 128:  # the signal's exception was swallowed where it landed: report it now
            code = guard.interrupted(f"etkit {args.verb}", Interrupted(stops[0]))
        return code


def _run(args: argparse.Namespace) -> int:
    if args.verb in guard.HEAP_REUSE_VERBS:
        guard.reuse_freed_memory()
    try:
        with guard.one_blas_thread(), guard.running(args), reported_warnings(f"etkit {args.verb}"):
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
    try:
        code = main()
    except SystemExit as exc:  # argparse's --help, --version and usage errors (printed already) leave the same way
        if exc.code is not None and not isinstance(exc.code, int):
            raise
        code = exc.code or 0
    if code > 128:  # interrupted: leave now, so that the interpreter's exit cannot turn it into a signal death
        guard.leave_now(code)
    guard.hold_signals()  # the work is done: a Ctrl-C now must not kill the interpreter's shutdown
    guard.leave_when_done(code)  # (returns where the interpreter's shutdown still has work to do)
    sys.exit(code)
