"""The exceptions etkit raises: each carries a one-line message that names the input and the fault."""

from __future__ import annotations


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
