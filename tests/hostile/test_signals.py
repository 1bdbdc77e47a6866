"""Signals: a job is one unit, temporary files go, and every interruption is one line (130 / 143).

Each case runs etkit as a process in its own session and signals it once it is writing (seen from the
files it creates), the way Ctrl-C (SIGINT to the whole process group) or ``kill`` (SIGTERM) would.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from etkit.format.schema import GlobalMetadata, Node, NodeType
from etkit.format.stream import frame

from .helpers import cli, file_state, listing, small_job, start_etkit, wait_for

#: 1,024 ranks in 16 roles: about a second of writing, long enough to be interrupted half-way.
OLD_JOB = ["generate", "llm", "--model", "llama3-70b", "--dp", "8", "--tp", "8", "--pp", "16", "-q"]
NEW_JOB = ["generate", "llm", "--model", "llama3-8b", "--dp", "16", "--tp", "8", "--pp", "8", "-q", "-j", "2"]


def _writing(folder: Path, before: list[str]) -> bool:
    """Something beside the old files appeared: a lock, a staging folder or a temporary file."""
    return listing(folder) != before


def _one_line(stderr: Path) -> str:
    text = stderr.read_text()
    assert "Traceback" not in text, text
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT-group"])
def test_an_interrupted_job_leaves_the_older_job_intact(tmp_path: Path, capsys, how: str) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    out.mkdir()
    assert cli(capsys, *OLD_JOB, "-o", out / "j").rc == 0
    before = listing(out)
    old = file_state(out / name for name in before)
    proc = start_etkit([*NEW_JOB, "-o", out / "j"], cwd=tmp_path, stderr_path=tmp_path / "err")
    try:
        assert wait_for(lambda: _writing(out, before), timeout=120), "the run never started writing"
        wait_for(lambda: False, timeout=0.2)  # well into the writing
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole group, writer processes included
        rc = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == (143 if how == "SIGTERM" else 130), (tmp_path / "err").read_text()
    assert "interrupted" in _one_line(tmp_path / "err")
    assert listing(out) == before, "temporary files or a half job were left"
    assert file_state(out / name for name in before) == old


@pytest.mark.slow
def test_a_second_writer_of_a_prefix_is_refused(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    out.mkdir()
    proc = start_etkit([*OLD_JOB, "-o", out / "j"], cwd=tmp_path, stderr_path=tmp_path / "err")
    try:
        # the staging folder is made once the lock is held (the lock file itself appears just before)
        assert wait_for(lambda: any(n.endswith(".etkit-job") for n in listing(out)), timeout=120)
        second = cli(capsys, "generate", "collective", "--type", "all_reduce", "--ranks", "4", "-o", out / "j", "-q")
        assert proc.wait(120) == 0, (tmp_path / "err").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    err = second.err.strip()
    assert second.rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(out / "j") in err and "another process" in err
    files = listing(out)
    assert len([n for n in files if n.endswith(".et")]) == 1024 and "j.comm_groups.json" in files
    assert not [n for n in files if n.startswith(".")]


def _big_trace(path: Path, nodes: int = 200_000) -> Path:
    meta = frame(GlobalMetadata(version="1.0.0").SerializeToString())
    records = [frame(Node(id=i, name=f"op{i % 97}", type=NodeType.COMP_NODE, duration_micros=i % 13 + 1,
                          data_deps=[i - 1] if i > 1 else []).SerializeToString()) for i in range(1, nodes + 1)]
    path.write_bytes(meta + b"".join(records))
    return path


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_mid_file_leaves_no_temporary_file(tmp_path: Path, sig: int) -> None:
    source = _big_trace(tmp_path / "big.et")
    target = tmp_path / "big.json"
    target.write_text("the older output")
    before = listing(tmp_path)
    proc = start_etkit(["to-json", source, "-o", target], cwd=tmp_path, stderr_path=tmp_path / "err.log")
    try:
        assert wait_for(lambda: any(n.endswith(".tmp") for n in listing(tmp_path)), timeout=120)
        proc.send_signal(sig)
        rc = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    if rc == 0:  # it finished in the moment between seeing the file and the signal: nothing to check
        pytest.fail("to-json finished before the signal; make the trace bigger")
    assert rc == 128 + sig
    assert "interrupted" in _one_line(tmp_path / "err.log")
    assert sorted(set(listing(tmp_path)) - {"err.log"}) == sorted(set(before) - {"err.log"})
    assert target.read_text() == "the older output"


@pytest.fixture(scope="module")
def uncovered_start_up() -> float:
    """Seconds before etkit can take over Ctrl-C (the interpreter starting and importing ``etkit.cli``):
    measured here, because a loaded machine makes it several times longer than an idle one."""
    import subprocess
    import sys
    import time

    from .helpers import env

    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import etkit.cli"], env=env(), check=True)
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("after", [0.0, 0.05, 0.1, 0.2, 0.4])
def test_ctrl_c_during_start_up_is_one_line(tmp_path: Path, uncovered_start_up: float, after: float) -> None:
    """Ctrl-C while Python imports etkit's modules (numpy, protobuf, the verbs): one line, exit 130, no
    KeyboardInterrupt traceback."""
    prefix = small_job(tmp_path)
    proc = start_etkit(["info", prefix, "-q"], cwd=tmp_path, stderr_path=tmp_path / "err")
    wait_for(lambda: False, timeout=2 * uncovered_start_up + 0.02 + after)
    os.killpg(proc.pid, signal.SIGINT)
    rc = proc.wait(60)
    text = (tmp_path / "err").read_text()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert rc in (130, 0), (rc, text)
    assert len(text.strip().splitlines()) <= 1, text
