"""The exceptions etkit raises: each carries a one-line message that names the input and the fault."""

from __future__ import annotations

from collections.abc import Mapping


class EtkitError(Exception):
    """Base class of every error etkit reports to users (the CLI prints it on one line, exit 2)."""


class TraceFormatError(EtkitError, ValueError):
    """An ET file (or its JSON twin) is truncated, corrupt or not an ET file at all."""

    def __init__(self, path: object, message: str, *, record: int | None = None,
                 offset: int | None = None) -> None:
        self.path = str(path)
        self.record = record
        self.offset = offset
        where = self.path
        if record is not None:
            where += f": record {record}"
        if offset is not None:
            where += f" at byte offset {offset}"
        self.detail = message
        super().__init__(f"{where}: {message}")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Rebuilt from its parts so that it crosses process-pool boundaries intact.
        return (_rebuild_format_error, (self.path, self.detail, self.record, self.offset))


class DependencyError(EtkitError):
    """A dependency that can never be satisfied (missing parent, cycle) was found while walking a graph."""


class UsageError(EtkitError):
    """An argument or option value that cannot be used, e.g. a prefix that matches no file."""


class OptionError(UsageError):
    """A value of a library option (a keyword argument, a field of an options object) that cannot be used.

    The message is a template whose ``{name}`` fields are the options it is about: ``str()`` reads in the
    library's words (``scale_compute=0.0 must be a positive finite number``), :meth:`as_flags` in the CLI's
    (``--scale-compute 0.0 must be ...``; a flag is its option's name with ``-`` for ``_``). Literal braces
    in the rest of the template are doubled, as in :meth:`str.format`. An option given as ``...`` is named
    without a value (``give exactly one of dp, tp``; ``give exactly one of --dp, --tp``)."""

    def __init__(self, template: str, **options: object) -> None:
        self.template = template
        self.options = options
        super().__init__(template.format(**{k: k if v is ... else f"{k}={v!r}" for k, v in options.items()}))

    def as_flags(self, flags: Mapping[str, str] | None = None) -> str:
        """The message with each option written as the command-line flag that sets it: ``flags[name]``
        where a verb's flag is not the option's name (``filters``: ``--filter``), else ``--name``."""
        flags = {k: (flags or {}).get(k) or f"--{k.replace('_', '-')}" for k in self.options}
        return self.template.format(**{k: flags[k] if v is ... else f"{flags[k]} {v}" for k, v in self.options.items()})

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild_option_error, (self.template, self.options))


def _rebuild_option_error(template: str, options: dict[str, object]) -> OptionError:
    return OptionError(template, **options)


def _rebuild_format_error(path: str, message: str, record: int | None, offset: int | None) -> TraceFormatError:
    return TraceFormatError(path, message, record=record, offset=offset)


class EtkitWarning(UserWarning):
    """Something etkit accepted but that is probably not what the user meant (an unknown config key, an
    option that had no effect): the CLI prints it as one line on stderr and goes on."""


class ValueRangeError(EtkitError, ValueError):
    """A number outside what a trace field can hold (an int64 attribute of 2**70, a size of 10**30 bytes)."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived while the CLI ran (Ctrl-C raises :class:`KeyboardInterrupt` itself):
    raised like Ctrl-C so that every ``with`` block on the way out removes its temporary files."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
