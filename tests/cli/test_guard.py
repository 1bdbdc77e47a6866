"""cli.guard: a stop signal is obeyed even when Python swallows the exception its handler raised."""

from __future__ import annotations

import os
import signal
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
