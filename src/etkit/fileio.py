"""File plumbing shared by every writer and reader: atomic output, transparent gzip."""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, BinaryIO

from .errors import EtkitError

GZIP_MAGIC = b"\x1f\x8b"


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], *, compress: bool | None = None) -> Iterator[BinaryIO]:
    """A binary stream whose content replaces ``path`` only when the block ends without error.

    Data goes to a temporary file beside ``path`` that is renamed over it at the end, so a crash or an
    exception never leaves a half-written file behind. ``compress`` (default: ``path`` ends in ``.gz``)
    wraps the stream in gzip with a fixed timestamp, so equal content gives equal bytes.
    """
    target = Path(path)
    if compress is None:
        compress = target.suffix == ".gz"
    check_writable(target)
    try:
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise _cannot_write(target, exc) from None
    try:
        with os.fdopen(fd, "wb") as raw:
            if compress:
                with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as zipped:
                    yield zipped  # type: ignore[misc]
            else:
                yield raw
        os.chmod(tmp_name, 0o666 & ~_umask())
        try:
            os.replace(tmp_name, target)
        except OSError as exc:
            raise _cannot_write(target, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def check_writable(path: str | os.PathLike[str]) -> None:
    """Create ``path``'s folder and check that a file can be written there, so that a long run fails
    at its start rather than at its end; raises :class:`EtkitError` naming the path."""
    target = Path(path)
    if target.is_dir():
        raise EtkitError(f"{target}: cannot write: it is a directory")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot_write(target, exc) from None
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise EtkitError(f"{target}: cannot write: no permission to create files in {target.parent}")


def _cannot_write(target: Path, exc: OSError) -> EtkitError:
    reason = exc.strerror or str(exc)
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        reason = "a part of its folder path is a file, not a directory"
    return EtkitError(f"{target}: cannot write: {reason}")


def _umask() -> int:
    # os.umask can only be read by setting it; restore at once.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def is_gzip(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` starts with the gzip magic bytes."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_maybe_gzip(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing on the fly when it starts with the gzip magic."""
    if is_gzip(path):
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_bytes_maybe_gzip(path: str | os.PathLike[str]) -> bytes:
    """Whole content of ``path``, gunzipped when it is gzip."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == GZIP_MAGIC:
        return gzip.decompress(data)
    return data
