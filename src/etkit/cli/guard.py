"""What every ``etkit`` verb runs inside: signals that end it cleanly, inputs no output may replace, and the
limit on what a gzip input may decompress to.

- **Signals.** Ctrl-C (SIGINT), SIGTERM and SIGHUP raise an exception in the main thread, so every
  ``with`` block on the way out (:func:`etkit.fileio.atomic_output`, :func:`etkit.fileio.job_output`)
  removes its temporary files; the verb then ends with one line and exit status 128 + the signal
  (130, 143, 129). A second signal while cleaning up is ignored. Before the verb's modules are imported
  (the program's start-up), a signal ends the program at once with the same line: nothing was written yet.
  A C extension module that loads while the verb runs (numpy, orjson, protobuf's upb) loads whole: a
  signal that arrives during its initialisation is raised as the load returns (an exception inside some
  extensions' start-up crashes the interpreter).
- **Inputs.** The files a command reads (every argument that names an existing file, and for a job
  prefix its rank files and comm-groups file) are protected for the run
  (:func:`etkit.fileio.protect_inputs`): an output that is one of them is refused, naming both.
  Arguments in :data:`OUTPUT_DESTS` are outputs; a folder given as an input is not expanded.
- **Terminal text.** While the verb runs, ``sys.stdout`` and ``sys.stderr`` escape every character a
  terminal would obey (:func:`etkit.safetext.printable`: ESC, CR, BEL, bidi overrides) in what is printed
  to them, so a trace's names are shown, never executed. Rich consoles write past the filter
  (``rich_proxied_file``): the verbs that use rich escape trace text themselves.
  When a verb writes a file to stdout (``-o -``), its messages go to stderr: stdout holds the file alone.
- **Decompression.** ``--max-bytes SIZE`` on every verb that reads traces sets the largest decompressed
  size of a gzip input (:func:`etkit.fileio.max_decompressed_bytes`) for the run and its worker processes.
- **One OpenBLAS thread.** etkit does no linear algebra, but numpy's OpenBLAS starts a thread per core when
  numpy loads (about 0.03-0.05 s of CPU a command on 2 cores, more on big machines). When the verb first
  imports numpy, ``OPENBLAS_NUM_THREADS`` is 1 while numpy's core library loads, and then as it was, so the
  programs a verb starts (a profiled workload, a replay) keep the machine's default (:func:`one_blas_thread`).

This module imports only the standard library at the top: it runs before the heavy imports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib.machinery import ExtensionFileLoader, ModuleSpec, PathFinder
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    import types
    from sys import UnraisableHookArgs

#: argparse ``dest`` names that are outputs of a verb (everything else that names a file is an input).
OUTPUT_DESTS = frozenset({"output", "json", "report", "timeline", "plot", "out", "out_dir"})
#: Verbs that read no trace (no ``--max-bytes``).
_NO_INPUT_VERBS = frozenset({"generate", "collect", "demo"})
_SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None),
                             getattr(signal, "SIGHUP", None)) if s is not None)


def started_as_program() -> bool:
    """Whether this process is the ``etkit`` program (console script or ``python -m etkit``), not a
    library user or a test that imported the CLI."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "etkit.__main__":
        return True
    return os.path.basename(getattr(main, "__file__", "") or "") == "etkit"


def install_startup_handlers() -> None:
    """In the ``etkit`` program, until :func:`signals_raise` takes over: a signal ends the process at once
    with one line (nothing has been written yet), never a traceback from inside an import."""
    if not started_as_program():
        return

    def leave(signum: int, _frame: object) -> None:
        os.write(2, f"etkit: interrupted ({_signal_name(signum)})\n".encode())
        os._exit(128 + signum)

    for sig in _SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, leave)


@contextlib.contextmanager
def signals_raise() -> Iterator[list[int]]:
    """Within the block, SIGINT raises :class:`KeyboardInterrupt` and SIGTERM/SIGHUP raise
    :class:`etkit.errors.Interrupted` (once: later signals are ignored while the first unwinds). A process
    forked inside the block (a pool's worker) ignores them: a signal to the job's process group reaches
    the workers too, and the parent, which gets it as well, stops the job and reports it once.

    Yields the signals received (:func:`etkit.fileio.stop_requests`): Python swallows an exception raised
    where a signal can land (an at-fork callback, ``__del__``), so every writer checks the list before it
    installs an output, and the caller reports an interruption whose exception never reached it. Python
    would also print that swallowed exception with its traceback ("Exception ignored in ..."): within the
    block it says nothing, since the one line that reports the interruption follows."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    from ..fileio import stop_requests

    previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    owner = os.getpid()
    with stop_requests() as fired, _whole_extension_loads() as loads, _quiet_swallowed_stops(fired):

        def handler(signum: int, _frame: object) -> None:
            if fired or os.getpid() != owner:  # a forked worker inherits this: its parent unwinds the job
                return
            fired.append(signum)
            if loads.depth:  # inside a C extension's start-up: raised once the module is loaded
                loads.pending.append(signum)
                return
            _raise_for(signum)

        for sig in _SIGNALS:
            signal.signal(sig, handler)
        try:
            yield fired
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old if old is not None else signal.SIG_DFL)


@contextlib.contextmanager
def _quiet_swallowed_stops(fired: list[int]) -> Iterator[None]:
    """Within the block, an exception a stop signal raised where Python cannot raise it (an at-fork callback,
    ``__del__``) is not printed as unraisable; every other unraisable exception is, as before."""
    previous = sys.unraisablehook

    def hook(unraisable: UnraisableHookArgs) -> None:
        if not (fired and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _raise_for(signum: int) -> None:
    from ..errors import Interrupted

    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted(signum)


class _ExtensionLoads:
    """An import finder in place of the path finder (it returns the path finder's spec) whose C extension
    modules load whole: an exception raised inside a module's initialisation, as a signal handler raises
    one, crashes some of them (orjson 3.13 uses the failed import of a module it needs: SIGSEGV).
    While one loads, :attr:`depth` is above zero and a signal's exception waits in :attr:`pending`; it is
    raised as the load returns, in Python code, where the import fails cleanly."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending: list[int] = []

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> ModuleSpec | None:
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and type(spec.loader) is ExtensionFileLoader:
            spec.loader = _WholeExtensionLoad(spec.loader.name, spec.loader.path, self)
        return spec

    @contextlib.contextmanager
    def whole(self) -> Iterator[None]:
        """A step of a load: a signal's exception waits until the outermost step has returned."""
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        if self.pending and not self.depth:
            _raise_for(self.pending.pop())


class _WholeExtensionLoad(ExtensionFileLoader):
    """The extension loader, whose module creation (a single-phase module's initialisation) and execution
    a signal does not interrupt."""

    def __init__(self, name: str, path: str, loads: _ExtensionLoads) -> None:
        super().__init__(name, path)
        self._loads = loads

    def create_module(self, spec: ModuleSpec) -> types.ModuleType:
        with self._loads.whole():
            return super().create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        with self._loads.whole():
            super().exec_module(module)


@contextlib.contextmanager
def _whole_extension_loads() -> Iterator[_ExtensionLoads]:
    """Within the block, C extension modules found on the path load through :class:`_ExtensionLoads`."""
    loads = _ExtensionLoads()
    sys.meta_path.insert(_path_finder_index(), loads)
    try:
        yield loads
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(loads)


def _path_finder_index() -> int:
    """Where the path finder is on ``sys.meta_path`` (the end if it is not there)."""
    for index, finder in enumerate(sys.meta_path):
        if finder is PathFinder:
            return index
    return len(sys.meta_path)


def interrupted(prog: str, exc: BaseException) -> int:
    """Report an interruption in one line; the exit status is 128 + the signal number."""
    signum = getattr(exc, "signum", signal.SIGINT)
    print(f"{prog}: interrupted ({_signal_name(signum)}); outputs are complete or untouched, "
          "never half-written", file=sys.stderr)
    return 128 + signum


def leave_now(code: int) -> None:
    """End the program with ``code`` after flushing its output, skipping the interpreter's shutdown (where
    signal handlers are reset: a signal still being delivered would end the process by that signal)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def leave_when_done(code: int) -> None:
    """End the program with ``code`` once the verb has returned, without the interpreter's teardown of its
    modules and objects (0.02-0.04 s of CPU, most of the exit), where that teardown has nothing left to do
    that anyone could see; otherwise return (the ``atexit`` callbacks run already), and the caller exits
    the usual way.

    Done first, as the interpreter's exit does them: the ``atexit`` callbacks (pools' workers stopped and
    joined, ``weakref.finalize`` cleanups, logging's flush), then stdout and stderr flushed. The teardown
    is skipped only when, after that, the main thread is the only thread, no profiler or tracer is
    watching (it writes its report after the program returns), no file other than the standard streams
    is open for writing (a buffered write not yet flushed would be lost: only in-memory buffers and files
    opened for reading may remain) and both flushes succeeded (a closed pipe's error is reported the usual way).
    """
    import atexit
    import threading

    if sys.getprofile() is not None or sys.gettrace() is not None or threading.active_count() != 1:
        return
    atexit._run_exitfuncs()
    if threading.active_count() != 1 or _open_for_writing():
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:  # noqa: BLE001 - the interpreter's exit reports it as it always did
        return
    os._exit(code)


def _open_for_writing() -> bool:
    """Whether any file object other than the standard streams and in-memory buffers may still hold writes
    (one open for writing, or one whose mode cannot be asked).

    File objects are found by their types (``type``, not ``isinstance``: an object's own ``__class__`` may
    warn or fail, torch's deprecated ones do): the distinct types of the collector's objects first, then the
    objects of those that derive from io's C base class, which every file class of :mod:`io` and every
    subclass of ``io.IOBase`` does (asking the ``io.IOBase`` ABC instead costs 5 us a type: 1 ms of a small
    ``analyze``; a class only registered with the ABC is not looked at)."""
    import _io
    import gc

    standard = set()
    for stream in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__):
        buffer = getattr(stream, "buffer", None)
        standard |= {id(stream), id(buffer), id(getattr(buffer, "raw", None))}
    objects = gc.get_objects()
    files = {kind for kind in set(map(type, objects))
             if issubclass(kind, _io._IOBase) and not issubclass(kind, (_io.BytesIO, _io.StringIO))}
    if not files:
        return False
    for obj in objects:
        if type(obj) not in files or id(obj) in standard:
            continue
        try:
            if not obj.closed and obj.writable():
                return True
        except Exception:  # noqa: BLE001 - a file object in a state we cannot ask about: keep the usual exit
            return True
    return False


def hold_signals() -> None:
    """Block SIGINT, SIGTERM and SIGHUP for the rest of the process (its exit, once the work is done)."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        signal.pthread_sigmask(signal.SIG_BLOCK, set(_SIGNALS))


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def add_input_limits(subparsers: argparse._SubParsersAction) -> None:
    """``--max-bytes SIZE`` on every leaf parser of a verb that reads traces."""
    for name, parser in subparsers.choices.items():
        if name not in _NO_INPUT_VERBS:
            _add_max_bytes(parser, set())


def _add_max_bytes(parser: argparse.ArgumentParser, seen: set[int]) -> None:
    import argparse

    if id(parser) in seen:
        return
    seen.add(id(parser))
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if subs:
        for sub in subs:
            for child in sub.choices.values():
                _add_max_bytes(child, seen)
        return
    if any("--max-bytes" in a.option_strings for a in parser._actions):
        return
    from .common import size_arg

    parser.add_argument("--max-bytes", type=size_arg, default=None, metavar="SIZE",
                        help="largest size a gzip input may decompress to (default: 64 MiB, or 100 times "
                             "its compressed size if more; refuses gzip bombs quickly)")


@contextlib.contextmanager
def running(args: argparse.Namespace) -> Iterator[None]:
    """The verb's run: its inputs protected from its outputs, its decompression limit in effect."""
    from ..fileio import MAX_BYTES_ENV, check_not_input, protect_inputs

    inputs = list(command_inputs(args))
    outputs = [value for dest in sorted(OUTPUT_DESTS) for value in _strings(getattr(args, dest, None))]
    data_on_stdout = any(value in _STDOUT_NAMES for value in outputs)
    with protect_inputs(inputs), _environment(MAX_BYTES_ENV, getattr(args, "max_bytes", None)), \
            _printable_streams(messages_to_stderr=data_on_stdout):
        for value in outputs:
            if value != "-":
                check_not_input(value)
        yield


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """While the verb runs, the first import of numpy loads OpenBLAS with one thread, unless
    ``OPENBLAS_NUM_THREADS`` is set already or numpy is loaded; the environment is left as it was."""
    if _BLAS_THREADS in os.environ or "numpy" in sys.modules:
        yield
        return
    finder = _OneBlasThread()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        finder.restore()
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)


#: The verbs that decode many rank files a batch at a time, whose temporaries :func:`reuse_freed_memory` keeps
#: in the heap (``info`` of a 1,024-rank job: 1.3-1.6 s of system time down to 0.25 s; ``anonymize`` of 4 ranks
#: of 100k nodes: 7 % less CPU, peak the same, 308 MB). Elsewhere it buys little and costs peak memory:
#: ``convert pytorch`` of a 14k-node host trace went from 75 to 85 MB with it. ``analyze`` of the 1M-node
#: real-shaped ET: 1.8 of 4.2 s of system time gone, peak the same (950 MB); of HTA's Kineto traces, peak the same.
HEAP_REUSE_VERBS = frozenset({"info", "validate", "simulate", "anonymize", "analyze"})

#: glibc's ``mallopt`` parameters (``malloc.h``) and the values :func:`reuse_freed_memory` gives them.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_TRIM_BYTES, _MMAP_BYTES = 64 << 20, 32 << 20
_MALLOC_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def reuse_freed_memory() -> None:
    """Have glibc's malloc serve blocks below 32 MiB from its heap and keep up to 64 MiB freed at the heap's top.

    Its dynamic thresholds start at 128 KiB, so numpy's temporaries of a few MiB (the columnar decoder's, a
    batch at a time) are each mapped, page-faulted in, zeroed and unmapped again: about a sixth of the CPU
    time of reading a job of many rank files went to the kernel. Kept in the heap, they are reused; the peak
    memory of the :data:`HEAP_REUSE_VERBS` stays about the same (``info`` of that job: 77-79 MB), but blocks
    kept can raise another verb's peak (hence the list). Nothing changes without glibc or where the user set ``MALLOC_TRIM_THRESHOLD_`` or
    ``MALLOC_MMAP_THRESHOLD_``. Pool workers forked later inherit it.
    """
    if not sys.platform.startswith("linux") or any(v in os.environ for v in _MALLOC_VARIABLES):
        return
    mallopt = _mallopt()
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_BYTES)
        mallopt(_M_TRIM_THRESHOLD, _TRIM_BYTES)


def _mallopt() -> Callable[[int, int], int] | None:
    """The C library's ``mallopt``: etkit's own binding (``etkit.cli._malloc``), else ctypes' (whose import
    costs 1.4-2 ms); None where there is none."""
    try:
        from ._malloc import mallopt
    except ImportError:  # pragma: no cover - built where a compiler is
        import ctypes

        try:
            found = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            return None
        found.argtypes, found.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        return found  # type: ignore[no-any-return]
    return mallopt


_BLAS_THREADS = "OPENBLAS_NUM_THREADS"
#: The numpy extension module that links OpenBLAS, whose start-up reads the variable when it is loaded.
_BLAS_MODULE = "numpy._core._multiarray_umath"


class _OneBlasThread:
    """An import finder that finds nothing: it watches the imports go by, sets the variable when numpy's
    import begins and removes it at the first import after OpenBLAS's module was found (by then the
    library is loaded: a module is found, then loaded, before the next import can begin)."""

    def __init__(self) -> None:
        self.state = "waiting"  # then "set", "loading", "done"

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if self.state == "waiting" and fullname == "numpy":
            os.environ[_BLAS_THREADS] = "1"
            self.state = "set"
        elif self.state == "set" and fullname == _BLAS_MODULE:
            self.state = "loading"
        elif self.state == "loading":
            self.restore()

    def restore(self) -> None:
        if self.state in ("set", "loading"):
            os.environ.pop(_BLAS_THREADS, None)
        self.state = "done"


#: Output names that are standard output: when a verb writes a file there, its messages go to stderr.
_STDOUT_NAMES = frozenset({"-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"})


def command_inputs(args: argparse.Namespace) -> Iterator[str]:
    """Every file the command line names as an input: existing files, and for a job prefix (or one rank
    file) the job's rank files and comm-groups file."""
    from ..fileio import RANK_FILE, comm_groups_path, job_files

    for dest, value in vars(args).items():
        if dest in OUTPUT_DESTS or callable(value):
            continue
        for text in _strings(value):
            if text in ("", "-") or "\0" in text:
                continue
            if os.path.isdir(text):
                continue
            if os.path.exists(text):
                yield text
                m = RANK_FILE.match(os.path.basename(text))
                if m:
                    yield str(comm_groups_path(os.path.join(os.path.dirname(text), m.group("prefix"))))
                continue
            if os.path.basename(text) and os.path.isdir(os.path.dirname(text) or "."):
                yield from (str(p) for p in job_files(text))


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(v for v in value if isinstance(v, str))
    return ()


@contextlib.contextmanager
def _environment(name: str, value: int | None) -> Iterator[None]:
    """``$name`` set to ``value`` within the block (unchanged when ``value`` is None)."""
    if value is None:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = str(value)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


class _PrintableStream:
    """A text stream that writes :func:`etkit.safetext.printable` of what it is given to ``text`` (binary
    writes through ``.buffer`` and rich's own output, through ``rich_proxied_file``, go to ``stream``
    unchanged)."""

    def __init__(self, stream: object, text: object | None = None) -> None:
        self._stream = stream
        self._text = text if text is not None else stream
        self.rich_proxied_file = stream

    def flush(self) -> None:
        self._text.flush()  # type: ignore[attr-defined]
        if self._text is not self._stream:
            self._stream.flush()  # type: ignore[attr-defined]

    def write(self, text: str) -> int:
        from ..safetext import printable

        self._text.write(printable(text))  # type: ignore[attr-defined]
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _printable_streams(*, messages_to_stderr: bool = False) -> Iterator[None]:
    """Escape what the verb prints; with ``messages_to_stderr`` (the verb writes a file to stdout) its text
    goes to stderr, so that stdout holds the file alone."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (_PrintableStream(sys.stdout, sys.stderr if messages_to_stderr else None),  # type: ignore[assignment]
                              _PrintableStream(sys.stderr))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
