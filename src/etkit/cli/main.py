"""``etkit <verb>``: the command line, a thin face over the library.

Each verb lives in its own module of this package with ``register(subparsers)``, which adds its parser
and sets ``func(args) -> exit code``. Errors the library raises as :class:`~etkit.errors.EtkitError`
become one line on stderr and exit status 2.
"""

from __future__ import annotations

from . import guard

guard.install_startup_handlers()  # before any other import: a Ctrl-C at start-up is one line too

import argparse  # noqa: E402
import contextlib  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Iterator, Sequence  # noqa: E402

from .. import __version__  # noqa: E402
from ..errors import EtkitError, Interrupted, OptionError  # noqa: E402
from ..safetext import printable  # noqa: E402
from .common import VerbParser, reported_warnings  # noqa: E402

#: Verb modules, in help order.
VERB_MODULES = (
    "info", "validate", "json_twin", "demo", "collect", "link", "convert", "generate", "analyze", "diff",
    "timeline", "graph", "report", "simulate", "calibrate", "replay", "export", "anonymize", "scale",
)


#: The verb module of each verb (a module registers the verb of its name, json_twin two others).
_MODULE_OF_VERB = {**{name: name for name in VERB_MODULES if name != "json_twin"},
                   "to-json": "json_twin", "from-json": "json_twin"}


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every verb's, or, given a ``verb`` etkit has, that verb's alone (what one
    command needs: importing every verb module cost each command about 0.04 s of CPU)."""
    parser = VerbParser(
        prog="etkit", description="Chakra execution traces: collect, convert, check, analyse, simulate, replay.")
    parser.add_argument("--version", action="version", version=f"etkit {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB")
    subparsers.required = True
    module = _MODULE_OF_VERB.get(verb or "")
    for name in (module,) if module else VERB_MODULES:
        importlib.import_module(f"{__package__}.{name}").register(subparsers)
    guard.add_input_limits(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with guard.signals_raise() as stops:
        try:
            words = sys.argv[1:] if argv is None else list(argv)
            args = build_parser(words[0] if words else None).parse_args(words)
        except KeyboardInterrupt as exc:
            return guard.interrupted("etkit", exc)
        code = _run(args)
        if stops and code <= 128:  # the signal's exception was swallowed where it landed: report it now
            code = guard.interrupted(f"etkit {args.verb}", Interrupted(stops[0]))
        return code


@contextlib.contextmanager
def _blas_threads_for_numpy() -> Iterator[None]:
    """Load numpy with one OpenBLAS thread unless ``OPENBLAS_NUM_THREADS`` says otherwise, and leave the
    environment as it was (the programs a verb starts, a profiled workload, keep the machine's default).

    etkit does no linear algebra, but OpenBLAS starts a thread per core when numpy loads, which cost every
    command about 0.05 s of CPU on 2 cores (more on bigger machines) for nothing."""
    if "OPENBLAS_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401  (loaded now, while OpenBLAS reads its thread count)
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]
    yield


def _run(args: argparse.Namespace) -> int:
    try:
        with _blas_threads_for_numpy(), guard.running(args), reported_warnings(f"etkit {args.verb}"):
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
