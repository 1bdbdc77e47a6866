"""cli.guard: a stop signal is obeyed even when Python swallows the exception its handler raised; numpy loads
with one OpenBLAS thread."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from etkit.cli import guard
from etkit.errors import Interrupted
from etkit.fileio import atomic_output, job_output

#: The point of these tests: Python reports the handler's exception as unraisable and goes on.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


class _SignalsInFinalizer:
    """Sends SIGTERM to this process from ``__del__``: the handler runs there, and Python prints
    "Exception ignored" instead of raising, as it does in an at-fork callback (the CI failure of stop 20)."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_swallowed_stop_still_keeps_the_older_job(tmp_path: Path) -> None:
    with job_output(tmp_path / "j") as out:
        out.rank_path(0).write_bytes(b"old")
    with guard.signals_raise() as stops:
        with pytest.raises(Interrupted), job_output(tmp_path / "j") as out:
            out.rank_path(0).write_bytes(b"new")
            _SignalsInFinalizer()  # collected at once: the exception is ignored, the stop is recorded
            assert stops == [signal.SIGTERM]
    assert (tmp_path / "j.0.et").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.0.et"]


def test_a_swallowed_stop_keeps_the_older_file(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    with guard.signals_raise(), pytest.raises(Interrupted), atomic_output(target) as out:
        out.write(b"new")
        _SignalsInFinalizer()
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_verb_whose_stop_was_swallowed_reports_it(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from etkit.cli import main as cli_main

    def verb(_args: object) -> int:
        _SignalsInFinalizer()
        return 0

    monkeypatch.setattr(cli_main, "_run", lambda args: verb(args))
    code = cli_main.main(["generate", "collective", "--type", "all_reduce", "--ranks", "2", "-o", "-"])
    assert code == 128 + signal.SIGTERM
    assert "interrupted (SIGTERM)" in capsys.readouterr().err


_THREADS = """
import os, sys
from etkit.cli import guard
with (guard.one_blas_thread() if sys.argv[1] == "guarded" else open(os.devnull)):
    import numpy
    threads = len(os.listdir("/proc/self/task"))
print(threads, os.environ.get("OPENBLAS_NUM_THREADS"), any(type(f).__name__ == "_OneBlasThread" for f in sys.meta_path))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_numpy_loaded_by_a_verb_starts_one_blas_thread_and_the_environment_is_left_as_it_was() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}

    def run(mode: str, **extra: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", _THREADS, mode], capture_output=True, text=True, check=True,
                             env={**env, **extra})
        return out.stdout.split()

    assert run("guarded") == ["1", "None", "False"]
    if (os.cpu_count() or 1) > 1:  # without the guard OpenBLAS starts a thread per core
        assert int(run("plain")[0]) > 1
    assert run("guarded", OPENBLAS_NUM_THREADS="2")[1:] == ["2", "False"]  # the user's setting stands


_SIGNAL_IN_ORJSON_START_UP = """
import signal, sys
from etkit.cli import guard

class SignalWhileOrjsonStarts:
    '''At the first import orjson's own initialisation makes, a Ctrl-C arrives (as one from the terminal
    would, at any moment): its handler runs in the middle of the C extension's start-up.'''
    loading = sent = False

    def find_spec(self, name, path=None, target=None):
        if name == "orjson.orjson":
            self.loading = True
        elif self.loading and not self.sent:
            self.sent = True
            signal.raise_signal(signal.SIGINT)
        return None

watch = SignalWhileOrjsonStarts()
with (guard.signals_raise() if sys.argv[1] == "guarded" else open("/dev/null")):
    sys.meta_path.insert(0, watch)
    try:
        import orjson
    except KeyboardInterrupt:
        print("interrupted", watch.sent)
    else:
        print("loaded", watch.sent)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGSEGV is a POSIX death")
def test_ctrl_c_inside_a_c_extensions_start_up_waits_for_it_to_load() -> None:
    """A Ctrl-C while orjson initialises: unguarded, the KeyboardInterrupt raised inside its start-up crashes
    the interpreter (SIGSEGV, the CI failure of stop 21); in a verb, the interruption is raised once the
    module has loaded, as a clean failed import."""
    unguarded = subprocess.run([sys.executable, "-c", _SIGNAL_IN_ORJSON_START_UP, "bare"],
                               capture_output=True, text=True)
    # the probe reaches orjson's start-up: orjson 3.13 dies there; a later one may survive it
    assert unguarded.returncode == -signal.SIGSEGV or unguarded.stdout.split()[-1:] == ["True"], unguarded
    guarded = subprocess.run([sys.executable, "-c", _SIGNAL_IN_ORJSON_START_UP, "guarded"],
                             capture_output=True, text=True)
    assert (guarded.returncode, guarded.stdout.strip()) == (0, "interrupted True"), guarded.stderr


_STOP_IN_FINALIZER = """
import os, signal, sys
from etkit.cli import guard

class SignalsInFinalizer:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)

with (guard.signals_raise() if sys.argv[1] == "guarded" else open(os.devnull)) as stops:
    if sys.argv[1] != "guarded":
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    SignalsInFinalizer()
    print(stops if sys.argv[1] == "guarded" else "bare")
    class Other:
        def __del__(self):
            raise ValueError("a finalizer's own error")
    Other()
"""


def test_a_swallowed_stop_prints_no_traceback_but_other_unraisable_errors_still_show() -> None:
    """A signal landing in an at-fork callback or a finalizer (the CI failure in logging's ``_releaseLock``):
    the stop is recorded and reported in one line by the verb, not printed as "Exception ignored"."""
    bare = subprocess.run([sys.executable, "-c", _STOP_IN_FINALIZER, "bare"], capture_output=True, text=True)
    assert "KeyboardInterrupt" in bare.stderr  # Python's own report, which the guard leaves out
    guarded = subprocess.run([sys.executable, "-c", _STOP_IN_FINALIZER, "guarded"], capture_output=True,
                             text=True)
    assert guarded.stdout.strip() == f"[{int(signal.SIGTERM)}]"
    assert "Interrupted" not in guarded.stderr and "KeyboardInterrupt" not in guarded.stderr, guarded.stderr
    assert "a finalizer's own error" in guarded.stderr
