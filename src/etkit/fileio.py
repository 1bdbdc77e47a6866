"""File plumbing shared by every writer and reader.

Writing: :func:`atomic_output` (one file) and :func:`job_output` (the files of one job) replace their
targets only when complete; ``-`` is stdout, character devices and FIFOs are written into, a symlink's
target is replaced (atomically there), and an output that is one of the command's inputs
(:func:`protect_inputs`) is refused. Reading: :func:`open_maybe_gzip` and :func:`read_bytes_maybe_gzip`
sniff gzip without consuming bytes (pipes keep their first bytes) and bound what a gzip stream may
decompress to (:func:`max_decompressed_bytes`), so a small "gzip bomb" is refused quickly.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import io
import os
import re
import signal
import stat
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO

from .errors import EtkitError

__all__ = [
    "GZIP_MAGIC", "GZIP_WBITS", "STDOUT", "atomic_output", "check_writable", "protect_inputs", "check_not_input",
    "job_output", "JobOutput", "rank_file_path", "comm_groups_path", "rank_files", "job_files", "RANK_FILE",
    "open_maybe_gzip", "read_bytes_maybe_gzip", "is_gzip", "inflater", "max_decompressed_bytes", "DecompressionLimit",
    "MAX_BYTES_ENV", "MIN_MAX_BYTES", "MAX_RATIO", "stop_requests", "raise_if_stopped",
]

GZIP_MAGIC = b"\x1f\x8b"
#: The output name that means standard output.
STDOUT = "-"

# ---------------------------------------------------------------------------------------------------------
# Stop requests: a signal that asked the command to stop, seen by every writer before it installs a file

#: The signals received in the running command's :func:`stop_requests` block (None outside one).
_STOPS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("etkit_stops", default=None)


@contextlib.contextmanager
def stop_requests() -> Iterator[list[int]]:
    """A list for the block's signal handler to append each stop signal to. Writers check it
    (:func:`raise_if_stopped`) before a file or a job replaces its target, so a stop is obeyed even when
    the exception its handler raised was swallowed (Python ignores exceptions raised inside at-fork
    callbacks, ``__del__`` and weakref callbacks, and a signal can arrive there)."""
    fired: list[int] = []
    token = _STOPS.set(fired)
    try:
        yield fired
    finally:
        _STOPS.reset(token)


def raise_if_stopped() -> None:
    """Raise :class:`etkit.errors.Interrupted` if a stop signal arrived in this :func:`stop_requests` block."""
    fired = _STOPS.get()
    if fired:
        from .errors import Interrupted

        raise Interrupted(fired[0])


# ---------------------------------------------------------------------------------------------------------
# Inputs that no output of the same command may replace

#: (st_dev, st_ino) -> the input's name as given, for the inputs of the command running in this context.
_INPUTS: contextvars.ContextVar[dict[tuple[int, int], str]] = contextvars.ContextVar("etkit_inputs", default={})  # noqa: B039 (never mutated: protect_inputs sets a copy)


@contextlib.contextmanager
def protect_inputs(paths: Iterable[str | os.PathLike[str]]) -> Iterator[None]:
    """Within the block, writing over any of ``paths`` (by identity: symlinks and hard links included)
    raises :class:`EtkitError` naming the output and the input. Missing paths and special files
    (devices, FIFOs) are ignored. The CLI wraps every verb in this with the verb's input files."""
    known = dict(_INPUTS.get())
    for path in paths:
        st = _stat(path)
        if st is not None and stat.S_ISREG(st.st_mode):
            known.setdefault((st.st_dev, st.st_ino), str(path))
    token = _INPUTS.set(known)
    try:
        yield
    finally:
        _INPUTS.reset(token)


def check_not_input(path: str | os.PathLike[str]) -> None:
    """Raise :class:`EtkitError` if ``path`` is (a link to) an input of the running command."""
    known = _INPUTS.get()
    if not known:
        return
    st = _stat(path)
    if st is not None and (st.st_dev, st.st_ino) in known:
        source = known[(st.st_dev, st.st_ino)]
        same = "" if os.path.abspath(source) == os.path.abspath(path) else f" (the same file as {source})"
        raise EtkitError(f"{path}: refusing to write over an input of this command{same}; choose another output")


def _stat(path: str | os.PathLike[str]) -> os.stat_result | None:
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------------------
# One output file


def _create_file(name: str) -> int:
    return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0),
                   0o600)


def _create_folder(name: str) -> int:
    os.mkdir(name, 0o700)
    return -1


def _new_name(folder: str | os.PathLike[str], prefix: str, suffix: str, create: Callable[[str], int]) -> tuple[int, str]:
    """A new file or folder ``folder/prefix<random>suffix`` that no one else has, made by ``create`` (which must
    fail with :class:`FileExistsError` when the name is taken): its descriptor (-1 for a folder) and name, as
    :func:`tempfile.mkstemp` and :func:`tempfile.mkdtemp` make them (private mode; ``tempfile`` itself, with the
    ``shutil``, ``bz2`` and ``lzma`` it loads, costs every command 12 ms of start-up)."""
    for _ in range(1000):
        name = os.path.join(folder, f"{prefix}{os.urandom(6).hex()}{suffix}")
        try:
            return create(name), os.path.abspath(name)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary name", os.fspath(folder))


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], *, compress: bool | None = None) -> Iterator[BinaryIO]:
    """A binary stream whose content replaces ``path`` only when the block ends without error.

    Data goes to a temporary file beside ``path`` that is renamed over it at the end, so a crash, an
    exception or a signal never leaves a half-written file behind. A symlink is followed: its target is
    replaced (the link stays). ``-`` writes to stdout, and a character device or FIFO (``/dev/null``, a
    named pipe, ``/dev/stdout``) is written into directly: neither is ever replaced by a regular file.
    ``compress`` (default: ``path`` ends in ``.gz``) wraps the stream in gzip with a fixed timestamp, so
    equal content gives equal bytes. A full disk is one :class:`EtkitError` naming ``path``.
    """
    kind, target = _output_target(path)
    if compress is None:
        compress = str(path).endswith(".gz")
    if kind != "file":
        with _direct_output(kind, target) as raw, _maybe_gzip(raw, compress) as out:
            yield out
        return
    check_writable(path)
    tmp_name: str | None = None
    try:
        try:
            with _deferred_signals():  # a signal takes effect once the name is known: the file is removed
                fd, tmp_name = _new_name(target.parent, f".{target.name}.", ".tmp", _create_file)
        except OSError as exc:
            raise _cannot_write(target, exc) from None
        try:
            with os.fdopen(fd, "wb") as raw, _maybe_gzip(raw, compress) as out:
                yield out
        except OSError as exc:
            if exc.filename is None and exc.errno in _WRITE_ERRNOS:
                raise _cannot_write(target, exc) from None
            raise
        os.chmod(tmp_name, 0o666 & ~_umask())
        raise_if_stopped()
        try:
            os.replace(tmp_name, target)
        except OSError as exc:
            raise _cannot_write(target, exc) from None
    except BaseException:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
        raise


#: errno values that only a write can raise: reported as "cannot write <output>: ..."
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def check_writable(path: str | os.PathLike[str]) -> None:
    """Check up front that ``path`` can be written (creating its folder), so that a long run fails at its
    start rather than at its end; raises :class:`EtkitError` naming the path. Also refuses a path that
    is an input of the running command (:func:`protect_inputs`)."""
    kind, target = _output_target(path)
    if kind == "stdout":
        return
    if kind != "file":
        if not os.access(target, os.W_OK):
            raise EtkitError(f"{target}: cannot write: permission denied")
        return
    check_not_input(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot_write(target, exc) from None
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise EtkitError(f"{target}: cannot write: no permission to create files in {target.parent}")


def _output_target(path: str | os.PathLike[str]) -> tuple[str, Path]:
    """How ``path`` is written: ``("stdout", -)``, ``("direct", device or FIFO or open descriptor)`` or
    ``("file", the regular file to replace, symlinks resolved)``."""
    if str(path) == STDOUT:
        return "stdout", Path(STDOUT)
    given = Path(path)
    try:
        st = os.stat(given)
    except FileNotFoundError:
        st = None
    except NotADirectoryError as exc:
        raise _cannot_write(given, exc) from None
    except OSError as exc:  # a symlink loop, a name too long, ...
        raise EtkitError(f"{given}: cannot write: {exc.strerror or exc}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise EtkitError(f"{given}: cannot write: it is a directory")
        if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            return "direct", given
        if not stat.S_ISREG(st.st_mode):
            what = "a block device" if stat.S_ISBLK(st.st_mode) else "a socket or other special file"
            raise EtkitError(f"{given}: cannot write: it is {what}")
        if _names_open_descriptor(given):  # /dev/stdout redirected to a file: write where the shell points
            return "direct", given
    return "file", Path(os.path.realpath(given)) if given.is_symlink() or st is None else given


def _names_open_descriptor(path: Path) -> bool:
    """Whether ``path`` or a link on its way names an open descriptor (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/<pid>/fd/N``): such a name is written into, never replaced."""
    seen = 0
    current = Path(os.path.abspath(path))
    while seen < 40:
        parts = current.parts
        if parts[:3] == ("/", "dev", "fd") or (parts[:2] == ("/", "proc") and len(parts) >= 4 and parts[3] == "fd"):
            return True
        if str(current) in ("/dev/stdout", "/dev/stderr", "/dev/stdin"):
            return True
        if not current.is_symlink():
            return False
        current = Path(os.path.abspath(os.path.join(current.parent, os.readlink(current))))
        seen += 1
    return False


@contextlib.contextmanager
def _direct_output(kind: str, target: Path) -> Iterator[BinaryIO]:
    if kind == "stdout":
        sys.stdout.flush()
        stream = sys.stdout.buffer
        try:
            yield stream
        finally:
            stream.flush()
        return
    try:
        raw = open(target, "ab")  # noqa: SIM115 - devices ignore the mode; a redirected stdout keeps its place
    except OSError as exc:
        raise _cannot_write(target, exc) from None
    try:
        with raw:
            yield raw
    except OSError as exc:
        if exc.filename is None and exc.errno in _WRITE_ERRNOS:
            raise _cannot_write(target, exc) from None
        raise


@contextlib.contextmanager
def _maybe_gzip(raw: BinaryIO, compress: bool) -> Iterator[BinaryIO]:
    if not compress:
        yield raw
        return
    import gzip

    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as zipped:
        yield zipped  # type: ignore[misc]


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


# ---------------------------------------------------------------------------------------------------------
# The files of a job: naming

#: ``<prefix>.<rank>.et`` or ``<prefix>.<rank>.et.gz``.
RANK_FILE = re.compile(r"^(?P<prefix>.*)\.(?P<rank>\d+)\.et(?:\.gz)?$")


def rank_file_path(prefix: str | os.PathLike[str], rank: int, *, compress: bool = False) -> Path:
    """``<prefix>.<rank>.et`` (``.et.gz`` with ``compress``)."""
    return Path(f"{prefix}.{rank}.et" + (".gz" if compress else ""))


def comm_groups_path(prefix: str | os.PathLike[str]) -> Path:
    """Where the comm-groups JSON of the job ``prefix`` lives: ``<prefix>.comm_groups.json``."""
    return Path(f"{prefix}.comm_groups.json")


def rank_files(prefix: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Every existing ``<prefix>.<rank>.et[.gz]`` file as ``(rank, path)``, sorted by name."""
    spec_path = Path(prefix)
    parent = spec_path.parent if str(spec_path.parent) else Path(".")
    if not parent.is_dir():
        return []
    out = []
    for candidate in sorted(parent.iterdir()):
        m = RANK_FILE.match(candidate.name)
        if m and m.group("prefix") == spec_path.name and candidate.is_file():
            out.append((int(m.group("rank")), candidate))
    return out


def job_files(prefix: str | os.PathLike[str]) -> list[Path]:
    """The existing files of the job ``prefix``: its rank files and its comm-groups file."""
    files = [path for _, path in rank_files(prefix)]
    groups = comm_groups_path(prefix)
    if groups.is_file():
        files.append(groups)
    return files


def _checked_prefix(prefix: str | os.PathLike[str]) -> Path:
    text = os.fspath(prefix)
    name = os.path.basename(text)
    if not name or text.endswith(os.sep) or (os.altsep and text.endswith(os.altsep)) or name in (".", ".."):
        raise EtkitError(f"{text}: a job prefix needs a file name part (e.g. {os.path.join(text, 'job')}), "
                         "not a folder")
    if name.endswith("."):
        raise EtkitError(f"{text}: a job prefix may not end in '.' (its files would be {text}.0.et)")
    return Path(text)


# ---------------------------------------------------------------------------------------------------------
# The files of a job: written aside, swapped in as a whole


class JobOutput:
    """Where the files of one job are written before :func:`job_output` swaps them in.

    Ask for each file's staging path with :meth:`path` (or :meth:`rank_path` / :meth:`groups_path`) in
    the process that opened the job, then write there from any process (plain writes or
    :func:`atomic_output`). Files never asked for are not installed.
    """

    def __init__(self, target: Path, folder: bool) -> None:
        self.target = target
        self.folder = folder
        self._base = target if folder else target.parent
        self._staging: Path | None = None
        self._files: dict[Path, Path] = {}  # final -> staged
        self._replaces: set[Path] = set()
        #: After a successful commit: the files installed and the older files deleted.
        self.written: list[Path] = []
        self.removed: list[Path] = []

    @property
    def staging(self) -> Path:
        """The hidden folder the files are written into (created on first use)."""
        if self._staging is None:
            self._base.mkdir(parents=True, exist_ok=True)
            name = self.target.name
            self._staging = Path(_new_name(self._base, f".{name}.", ".etkit-job", _create_folder)[1])
        return self._staging

    def path(self, final: str | os.PathLike[str]) -> Path:
        """Where to write the file that will become ``final`` (a file in the job's folder)."""
        final_path = Path(final)
        if Path(os.path.abspath(final_path.parent)) != Path(os.path.abspath(self._base)):
            raise ValueError(f"{final}: not in the folder of the job {self.target}")
        check_not_input(final_path)
        staged = self.staging / final_path.name
        self._files[final_path] = staged
        return staged

    def rank_path(self, rank: int, *, compress: bool = False, prefix: str | os.PathLike[str] | None = None) -> Path:
        """Staging path of ``<prefix>.<rank>.et[.gz]`` (``prefix`` defaults to the job's)."""
        return self.path(rank_file_path(self._prefix(prefix), rank, compress=compress))

    def groups_path(self, prefix: str | os.PathLike[str] | None = None) -> Path:
        """Staging path of ``<prefix>.comm_groups.json``."""
        return self.path(comm_groups_path(self._prefix(prefix)))

    def final(self, staged: str | os.PathLike[str]) -> Path:
        """The final path of a staging path handed out by :meth:`path`."""
        for final, path in self._files.items():
            if path == Path(staged):
                return final
        raise KeyError(staged)

    def replaces(self, paths: Iterable[str | os.PathLike[str]]) -> None:
        """Files of an older job that this one replaces: deleted on commit unless written again."""
        for path in paths:
            check_not_input(path)
            self._replaces.add(Path(path))

    def claim(self, prefix: str | os.PathLike[str]) -> None:
        """The job files of ``prefix`` (rank files, comm groups) belong to this output: an older job's
        files there that this one does not write are deleted on commit."""
        self.replaces(job_files(_checked_prefix(prefix)))

    def _prefix(self, prefix: str | os.PathLike[str] | None) -> Path:
        if prefix is None:
            if self.folder:
                raise ValueError("a folder job names the prefix of each file")
            return self.target
        return Path(prefix)

    def _commit(self) -> None:
        with _deferred_signals():
            for final, staged in self._files.items():
                if not staged.exists():
                    continue
                try:
                    os.replace(staged, final)
                except OSError as exc:
                    raise _cannot_write(final, exc) from None
                self.written.append(final)
            for old in sorted(self._replaces - set(self._files)):
                with contextlib.suppress(FileNotFoundError):
                    old.unlink()
                    self.removed.append(old)
            self._discard()

    def _discard(self) -> None:
        if self._staging is not None:
            try:
                os.rmdir(self._staging)  # emptied by a commit
            except FileNotFoundError:
                pass
            except OSError:  # files left: a failed or interrupted job
                import shutil

                shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None


@contextlib.contextmanager
def job_output(target: str | os.PathLike[str], *, folder: bool = False, replace: bool = True) -> Iterator[JobOutput]:
    """Write the files of one job as a unit.

    ``target`` is a job prefix (``out/llm`` for ``out/llm.<rank>.et`` and ``out/llm.comm_groups.json``)
    or, with ``folder``, a folder of job files. While the block runs, a lock file
    (``.<name>.lock`` beside the prefix) keeps a second writer away (it fails at once with one line),
    and every file goes into a hidden staging folder. When the block ends without error the files are
    moved into place together and the older job's files that this one lacks are deleted (for a prefix:
    its other rank files and, if not rewritten, its comm-groups file; ``replace=False`` deletes none, for
    adding one rank to a job); interrupted or failed, the staging folder is removed and the older job
    stays exactly as it was.

    >>> with job_output("out/llm") as out:              # doctest: +SKIP
    ...     for rank in range(8):
    ...         write_rank(out.rank_path(rank), rank)
    ...     write_groups(out.groups_path())
    """
    path = Path(os.path.abspath(target)) if folder else _checked_prefix(target)
    if folder and path.exists() and not path.is_dir():
        raise EtkitError(f"{path}: cannot write: it is a file, not a folder")
    out = JobOutput(path, folder)
    with _job_lock(path):
        if not folder and replace:
            out.claim(path)
        try:
            yield out
            raise_if_stopped()
        except BaseException:
            out._discard()
            raise
        out._commit()


@contextlib.contextmanager
def _job_lock(target: Path) -> Iterator[None]:
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot_write(target, exc) from None
    lock = parent / f".{target.name}.lock"
    try:
        import fcntl
    except ImportError:  # no advisory locks on this platform: write unlocked
        yield
        return
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _cannot_write(target, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise EtkitError(f"{target}: another process is writing this job (it holds {lock}); "
                             "wait for it to finish or write elsewhere") from None
        st, held = _stat(lock), os.fstat(fd)
        if st is not None and (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # the holder before us removed the file as we opened it: lock the new one
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


@contextlib.contextmanager
def _deferred_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP arriving in the block take effect when it ends (the swap of a job's files is
    never cut in half by Ctrl-C; a temporary file is never created unnamed); outside the main thread signals
    cannot arrive here anyway."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    wanted = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
    previous = {sig: signal.getsignal(sig) for sig in wanted}
    for sig in wanted:
        signal.signal(sig, lambda signum, _frame: pending.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in pending[:1]:
            os.kill(os.getpid(), signum)


# ---------------------------------------------------------------------------------------------------------
# Reading: gzip sniffed without consuming, decompression bounded

#: Environment variable with the largest decompressed size of a gzip input, in bytes (units allowed:
#: ``4GiB``); the CLI's ``--max-bytes`` sets it so that worker processes see it too.
MAX_BYTES_ENV = "ETKIT_MAX_BYTES"
#: A gzip input may always decompress to this much ...
MIN_MAX_BYTES = 64 << 20
#: ... and beyond that to at most this many times the compressed bytes read so far. Real traces compress
#: 5-15x (Chakra ET) and 15-30x (PyTorch host and Kineto JSON); gzip bombs compress about 1,000x.
MAX_RATIO = 100

_READ_CHUNK = 1 << 16
#: ``wbits`` of a gzip stream (header and trailer checked) for :func:`inflater`'s ``decompressobj``.
GZIP_WBITS = 16 + zlib.MAX_WBITS
#: Compressed bytes :meth:`_BoundedGunzip.readall` reads at a time (most traces' whole file).
_READALL_CHUNK = 16 << 20


class DecompressionLimit(EtkitError):
    """A gzip input decompresses to more than it may (see :func:`max_decompressed_bytes`)."""


def max_decompressed_bytes(compressed: int, *, max_bytes: int | None = None) -> int:
    """How many bytes a gzip input may decompress to after ``compressed`` of its bytes were read.

    ``max_bytes`` (else ``$ETKIT_MAX_BYTES``) is a fixed limit; by default it is
    ``max(MIN_MAX_BYTES, MAX_RATIO * compressed)``: 64 MiB, or 100 times the compressed size.
    """
    if max_bytes is None:
        max_bytes = _env_max_bytes()
    if max_bytes is not None:
        return max_bytes
    return max(MIN_MAX_BYTES, MAX_RATIO * compressed)


def _env_max_bytes() -> int | None:
    text = os.environ.get(MAX_BYTES_ENV)
    if not text:
        return None
    from .units import parse_size

    try:
        return parse_size(text)
    except EtkitError as exc:
        raise EtkitError(f"${MAX_BYTES_ENV}: {exc}") from None


def inflater() -> tuple[Callable[..., Any], type[Exception]]:
    """The gzip decompressor factory (``decompressobj``) and its error class: ISA-L's (``isal``: the same API
    as :mod:`zlib`, 2-4x faster, its CRC-32 too; 32 MB of Kineto JSON in 10-20 ms instead of 40-45), else zlib's."""
    try:
        from isal import isal_zlib
    except ImportError:  # (a platform without its wheel)
        return zlib.decompressobj, zlib.error
    error: type[Exception] = isal_zlib.error  # type: ignore[assignment]  # (its stubs call the class an instance)
    return isal_zlib.decompressobj, error


class _BoundedGunzip(io.RawIOBase):
    """The decompressed bytes of a gzip stream (every member), refusing to produce more than
    :func:`max_decompressed_bytes` allows; corrupt input raises what :mod:`gzip` raises (:class:`zlib.error`
    for bad deflate data or a wrong CRC or length, whichever library inflates: see :func:`inflater`)."""

    def __init__(self, raw: IO[bytes], name: str, max_bytes: int | None) -> None:
        self._raw = raw
        self._name = name
        self._max_bytes = max_bytes
        self._new_inflate, self._inflate_error = inflater()
        self._inflate = self._new_inflate(GZIP_WBITS)
        self._pending = b""  # compressed bytes read but not yet given to the decompressor
        self._read_in = 0
        self._produced = 0
        self._member_done = False
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        data = self._read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        """The rest, inflated in as few calls as the limit allows: the compressed bytes are read up to
        :data:`_READALL_CHUNK` at a time, and each call may make what the limit still admits (pieces of 1 MiB,
        joined, cost 15 % more CPU on a 35 MB Kineto trace: page faults and a copy). A large bomb is still
        refused after a bounded read of its compressed bytes, as the streaming reads refuse it."""
        parts: list[bytes] = []
        while True:
            if len(self._pending) < _READ_CHUNK and not self._eof:
                more = self._raw.read(_READALL_CHUNK)
                self._pending += more
                self._read_in += len(more)
            allowed = max_decompressed_bytes(self._read_in - len(self._pending), max_bytes=self._max_bytes)
            part = self._read(max(1 << 20, allowed - self._produced + 1))
            if not part:
                return b"".join(parts) if len(parts) != 1 else parts[0]
            parts.append(part)

    def _read(self, size: int) -> bytes:
        while not self._eof:
            if self._member_done:
                if not self._next_member():
                    break
                continue
            if not self._pending:
                self._pending = self._raw.read(_READ_CHUNK)
                self._read_in += len(self._pending)
                if not self._pending:
                    raise EOFError("Compressed file ended before the end-of-stream marker was reached")
            try:
                out = self._inflate.decompress(self._pending, size)
            except self._inflate_error as exc:
                raise zlib.error(f"{exc}") from None
            self._pending = self._inflate.unconsumed_tail
            if self._inflate.eof:
                self._pending = self._inflate.unused_data + self._pending
                self._member_done = True
            if out:
                self._produced += len(out)
                limit = max_decompressed_bytes(self._read_in - len(self._pending), max_bytes=self._max_bytes)
                if self._produced > limit:
                    raise DecompressionLimit(
                        f"{self._name}: gzip data decompresses to more than {_size(limit)} from "
                        f"{_size(self._read_in)} (over {MAX_RATIO}x: a gzip bomb?); raise the limit with "
                        f"--max-bytes or ${MAX_BYTES_ENV} to read it")
                return out
        self._eof = True
        return b""

    def _next_member(self) -> bool:
        if len(self._pending) < 2:
            self._pending += self._raw.read(_READ_CHUNK)
            self._read_in += len(self._pending)
        if not self._pending:
            return False
        if self._pending[:2] != GZIP_MAGIC:
            import gzip

            raise gzip.BadGzipFile(f"Not a gzipped file ({self._pending[:2]!r}) after a complete member")
        self._inflate = self._new_inflate(GZIP_WBITS)
        self._member_done = False
        return True

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def _size(n: int) -> str:
    from .units import format_bytes

    return format_bytes(n)


def _open_binary(path: str | os.PathLike[str]) -> io.BufferedReader:
    return open(path, "rb")  # noqa: SIM115 - handed to the caller


def _sniffed(raw: io.BufferedReader) -> bool:
    """Whether the stream starts with the gzip magic, looked at without consuming it (pipes too)."""
    head = raw.peek(2)[:2]
    if len(head) == 1:  # a peek may return fewer bytes than there are: a pipe gave one so far
        head = raw.peek(2)[:2]
    return head == GZIP_MAGIC


def is_gzip(path: str | os.PathLike[str]) -> bool:
    """Whether the regular file ``path`` starts with the gzip magic bytes (reads it: not for pipes)."""
    with _open_binary(path) as f:
        return _sniffed(f)


def open_maybe_gzip(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing on the fly when it starts with the gzip magic.

    The file is opened once (a FIFO or ``<(...)`` keeps every byte); a gzip stream is bounded as
    :func:`max_decompressed_bytes` says (:class:`DecompressionLimit` past it)."""
    raw = _open_binary(path)
    try:
        if not _sniffed(raw):
            return raw
    except BaseException:
        raw.close()
        raise
    return io.BufferedReader(_BoundedGunzip(raw, str(path), max_bytes), buffer_size=1 << 20)


def read_bytes_maybe_gzip(path: str | os.PathLike[str], *, max_bytes: int | None = None,
                          check_prefix: Callable[[bytes], None] | None = None, prefix_bytes: int = 1 << 16,
                          unchecked_below: int = 0) -> bytes:
    """Whole content of ``path``, gunzipped when it is gzip (bounded like :func:`open_maybe_gzip`).

    ``check_prefix`` is called with the first ``prefix_bytes`` bytes (all of them for a shorter file)
    before the rest is read, so that a reader can refuse an input it would reject anyway (say, an ``.et``
    whose first records are empty) before holding all of it. A plain regular file of fewer than
    ``unchecked_below`` bytes is read whole without it (for a caller that checks such a file's prefix itself
    where it must: holding it costs less than a check of every file).
    """
    with open_maybe_gzip(path, max_bytes=max_bytes) as stream:
        if check_prefix is None or (unchecked_below and _small_regular_file(stream, unchecked_below)):
            return stream.read()
        head = _read_exactly(stream, prefix_bytes)
        check_prefix(head)
        if len(head) < prefix_bytes:
            return head
        if stream.seekable():  # a plain file: one read of the whole, no copy
            stream.seek(0)
            return stream.read()
        return b"".join((head, stream.read()))


def _small_regular_file(stream: IO[bytes], below: int) -> bool:
    """Whether ``stream`` (from :func:`open_maybe_gzip`) is a plain regular file of fewer than ``below`` bytes."""
    if not isinstance(stream, io.BufferedReader) or not isinstance(stream.raw, io.FileIO):
        return False  # (a gzip stream)
    info = os.fstat(stream.fileno())
    return stat.S_ISREG(info.st_mode) and info.st_size < below


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    parts = []
    while size > 0:
        part = stream.read(size)
        if not part:
            break
        parts.append(part)
        size -= len(part)
    return b"".join(parts)
