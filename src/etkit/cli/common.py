"""Options and output helpers shared by the verb modules."""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..executor import EXECUTOR_ENV, Executor, check_executor_spec, executor_from_spec


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


def terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``: ``COLUMNS``, else the width of the terminal on stdout, else 80
    (argparse asks shutil, whose import, with the ``bz2`` and ``lzma`` it loads, costs every command 7 ms)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


@functools.cache
def _sized(formatter: type[argparse.HelpFormatter]) -> type[argparse.HelpFormatter]:
    """``formatter``, its width :func:`terminal_columns` (less 2, as argparse takes it) unless given."""

    class Sized(formatter):  # type: ignore[valid-type,misc]
        def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                     width: int | None = None, **kwargs: Any) -> None:
            super().__init__(prog, indent_increment, max_help_position,
                             terminal_columns() - 2 if width is None else width, **kwargs)

    Sized.__name__ = Sized.__qualname__ = formatter.__name__
    return Sized


class VerbParser(argparse.ArgumentParser):
    """The parser of ``etkit`` and of every verb: a usage error is one line naming the verb, its own usage
    and, for a mistyped option, the closest one; options the verb does not know are its error, not the
    top-level parser's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["formatter_class"] = _sized(kwargs.get("formatter_class", argparse.HelpFormatter))
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith("unrecognized arguments: "):
            from ..suggest import did_you_mean

            options = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            message += "".join(did_you_mean(word.split("=")[0], options)
                               for word in message.split(": ", 1)[1].split() if word.startswith("--"))
        elif (m := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)) is not None:
            from ..suggest import did_you_mean

            message += did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
        self.exit(2, f"{self.prog}: error: {message} (usage: {one_line_usage(self)}; see {self.prog} --help)\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and not any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
            self.error("unrecognized arguments: " + " ".join(extras))
        return parsed, extras


def one_line_usage(parser: argparse.ArgumentParser) -> str:
    """``etkit timeline PREFIX -o OUT [options]``: the positionals and required options of a verb."""
    words = [parser.prog]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            words.append(f"{action.metavar or action.dest.upper()} ...")
        elif not action.option_strings:
            metavar = action.metavar or action.dest.upper()
            words.append(f"{metavar} [{metavar} ...]" if action.nargs in ("+", "*") else str(metavar))
        elif action.required:
            words.append(f"{action.option_strings[0]} {action.metavar or action.dest.upper()}")
    if any(a.option_strings and not a.required and a.dest != "help" for a in parser._actions):
        words.append("[options]")
    return " ".join(words)


@contextlib.contextmanager
def reported_warnings(prog: str) -> Iterator[None]:
    """Print each :class:`~etkit.errors.EtkitWarning` raised inside the block as ``<prog>: warning: ...``."""
    from ..errors import EtkitWarning

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if issubclass(category, EtkitWarning):
            print(f"{prog}: warning: {message}", file=sys.stderr)
        else:
            print(warnings.formatwarning(message, category, filename, lineno, line), end="", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.simplefilter("always", EtkitWarning)
        warnings.showwarning = show
        yield


def prefix_arg(text: str) -> str:
    """argparse ``type=`` for an output job prefix: ``et/hy.`` means ``et/hy``; a folder or an ``.et`` name is
    refused (they would give ``et/.0.et`` or ``job.et.0.et``)."""
    prefix = text.rstrip(".") if not text.endswith("/.") else text
    if not prefix or prefix.endswith(("/", os.sep)) or os.path.isdir(prefix):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: a prefix names the files, e.g. {os.path.join(text, 'job')} "
                                         "writes job.<rank>.et there")
    if re.search(r"\.et(\.gz)?$", prefix):
        stem = re.sub(r"(\.\d+)?\.et(\.gz)?$", "", prefix)
        raise argparse.ArgumentTypeError(f"{text!r} is a file name: give the prefix {stem!r}, which writes "
                                         f"{stem}.<rank>.et")
    return prefix


def default_output(source: str, suffix: str) -> str:
    """The default output name of a verb: ``source``'s name (a job prefix or a file, without ``.et[.gz]``)
    plus ``suffix``, in the current folder: ``out/pp`` -> ``pp.trace.json``, ``out/pp.1.et`` -> ``pp.1.svg``."""
    name = Path(source.rstrip("/" + os.sep)).name.rstrip(".")
    name = re.sub(r"\.et(\.gz)?$", "", name)
    return (name or "etkit") + suffix


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar on stderr (results are still printed)")


def add_json(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    """``--json [FILE]``: the same on every verb that has a JSON form of its result."""
    parser.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                        help=f"write {what} as JSON to FILE; no FILE or '-': to stdout, which then holds only the JSON")


def text_wanted(args: argparse.Namespace) -> bool:
    """False when ``--json -`` puts the JSON on stdout: the text result is then left out of it."""
    return getattr(args, "json", None) != "-"


def add_ranks(parser: argparse.ArgumentParser, *, npus_alias: bool = False, **kwargs: Any) -> None:
    """``--ranks N``, the one name for a rank count (``--npus`` too where ASTRA-sim users expect it)."""
    names = ("--ranks", "--npus") if npus_alias else ("--ranks",)
    kwargs.setdefault("metavar", "N")
    kwargs.setdefault("help", "number of ranks")
    parser.add_argument(*names, dest="ranks", type=positive_int, **kwargs)


def add_simulation_inputs(parser: argparse.ArgumentParser, *, whatif: bool = True) -> None:
    """The simulation inputs every verb that simulates names alike (``--network``/``--system``/``--preset``,
    ``--congestion``) and, with ``whatif``, the what-if knobs (``--scale-*``, ``--straggler``, ``--device``)."""
    from ..vocab import PRESETS

    sim = parser.add_argument_group("simulation inputs")
    sim.add_argument("--network", metavar="NET.yml", help="ASTRA-sim analytical network YAML (or an etkit system YAML)")
    sim.add_argument("--system", metavar="SYS", help="ASTRA-sim system JSON, or an etkit system YAML (device + network + system)")
    sim.add_argument("--preset", choices=PRESETS, help="etkit system preset instead of / under the files")
    sim.add_argument("--congestion", choices=("unaware", "aware"), default="unaware",
                     help="aware: concurrent flows share links (default: unaware, like ASTRA-sim's analytical backend)")
    if not whatif:
        return
    knobs = parser.add_argument_group("what-if knobs (with a simulation)")
    knobs.add_argument("--scale-compute", type=positive_float, default=1.0, metavar="X", help="multiply every compute time by X")
    knobs.add_argument("--scale-bandwidth", type=positive_float, default=1.0, metavar="X", help="multiply every link bandwidth by X")
    knobs.add_argument("--scale-latency", type=positive_float, default=1.0, metavar="X",
                       help="multiply every link latency and per-call overhead by X (with --scale-bandwidth 10, "
                            "--scale-latency 0.1 is a network 10x faster in both terms)")
    knobs.add_argument("--straggler", action="append", default=[], metavar="RANK:F",
                       help="rank RANK computes F times slower (repeatable)")
    knobs.add_argument("--device", metavar="NAME",
                       help="swap the device (A100, H100, H200, MI300X): GPU compute rescaled by roofline")
    knobs.add_argument("--trace-device", metavar="NAME", help="device the trace's durations come from (default: the preset's)")


def wants_simulation(args: argparse.Namespace) -> bool:
    """True when the command line names a network, a system or a preset."""
    return any(getattr(args, k, None) for k in ("network", "system", "preset"))


def knobs_from(args: argparse.Namespace, preset_device: Any = None) -> Any:
    """The what-if :class:`~etkit.simulate.Knobs` on the command line (``preset_device``: the device the
    preset or etkit system file names, the default ``--trace-device``)."""
    from ..errors import UsageError
    from ..model.devices import get_device
    from ..simulate import Knobs
    from ..simulate.whatif import parse_straggler

    device = get_device(args.device) if getattr(args, "device", None) else None
    trace_device = get_device(args.trace_device) if getattr(args, "trace_device", None) else preset_device
    if device is not None and trace_device is None:
        raise UsageError("--device needs --trace-device (or a preset / etkit system file naming the trace's device)")
    raw = getattr(args, "raw_durations", False)
    return Knobs(scale_compute=getattr(args, "scale_compute", 1.0), scale_bandwidth=getattr(args, "scale_bandwidth", 1.0),
                 stragglers=dict(parse_straggler(s) for s in getattr(args, "straggler", [])), device=device,
                 trace_device=trace_device, congestion=getattr(args, "congestion", "unaware"),
                 deps=getattr(args, "deps", "both"), measured_gaps=not raw,
                 strip_waits=not raw, scale_latency=getattr(args, "scale_latency", 1.0),
                 measured_start=getattr(args, "measured_start", False), samples=getattr(args, "samples", 32),
                 seed=getattr(args, "seed", 0))


def simulation_from(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """``(network, system, knobs)`` from the simulation inputs and what-if knobs on the command line."""
    from ..simulate import load_config
    from ..simulate.whatif import with_device

    network, system, preset_device = load_config(args.network, args.system, preset=args.preset)
    knobs = knobs_from(args, preset_device)
    return network, with_device(system, knobs), knobs


def add_workers(parser: argparse.ArgumentParser) -> None:
    """``-j/--workers`` (the local pool's size) and ``--executor`` (where per-rank work runs)."""
    parser.add_argument("-j", "--workers", type=positive_int, default=None, metavar="N",
                        help="parallel processes for per-rank work (default: CPU count; 1 = in-process)")
    parser.add_argument("--executor", type=executor_spec, default=None, metavar="WHERE",
                        help="where per-rank work runs: local (default; -j processes), local:N, serial, or "
                             f"dask://HOST:PORT (a Dask scheduler; pip install 'etkit[dask]'); default ${EXECUTOR_ENV}")


def executor_spec(text: str) -> str:
    """argparse ``type=`` for ``--executor`` (a bad value is the verb's one-line usage error)."""
    from ..errors import UsageError

    try:
        return check_executor_spec(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def chosen_executor(args: argparse.Namespace) -> str | None:
    """What ``--executor`` or ``$ETKIT_EXECUTOR`` names (None: neither, the default local pool)."""
    spec = getattr(args, "executor", None)
    if spec is None and os.environ.get(EXECUTOR_ENV, "").strip():
        from ..errors import UsageError

        try:
            spec = check_executor_spec(os.environ[EXECUTOR_ENV])
        except UsageError as exc:
            raise UsageError(f"${EXECUTOR_ENV}: {exc}") from None
    return spec


def executor_from(args: argparse.Namespace) -> Executor:
    """The executor the command line asks for (one per command: a Dask connection opens once)."""
    made = getattr(args, "_executor", None)
    if made is None:
        made = executor_from_spec(chosen_executor(args), workers=getattr(args, "workers", None),
                                  quiet=getattr(args, "quiet", True))
        args._executor = made
    return made


def explicit_executor(args: argparse.Namespace) -> Executor | None:
    """:func:`executor_from` when the user chose one (``-j``, ``--executor``, ``$ETKIT_EXECUTOR``), else None
    (verbs whose default is to decide by job size)."""
    if getattr(args, "workers", None) is None and chosen_executor(args) is None:
        return None
    return executor_from(args)


def write_json(data: Any, path: str | None) -> None:
    """Pretty JSON to ``path`` (atomically) or to stdout when ``path`` is ``-`` or ``None``."""
    import orjson

    try:
        payload = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except TypeError:  # an integer past 64 bits (an exact sum of huge durations): the standard library writes it
        import json

        payload = json.dumps(data, indent=2, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)).encode()
    payload += b"\n"
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
    sub = parser.add_subparsers(dest=dest, metavar=metavar, parser_class=VerbParser)
    sub.required = True
    for name in modules:
        importlib.import_module(f"{__package__}.{name}").register(sub)
