"""Gzip bombs are refused quickly in bounded memory, by every reader; pipes keep every byte.

Memory is bounded by running the verb as a process under ``RLIMIT_AS``; time by comparing a bomb with
one four times larger (a reader that refuses early takes the same time for both).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

import pytest

from etkit.format.schema import GlobalMetadata, Node, NodeType
from etkit.format.stream import frame

from .helpers import PP_JOB, assert_clean_error, cli, gzip_repeated, run_etkit, small_job

#: Address space for a verb refusing a bomb: the interpreter with numpy and protobuf needs ~0.6 GB of it.
MEMORY = 1_500_000_000
MiB = 1 << 20


def _zeros_bomb(path: Path, mib: int) -> Path:
    path.write_bytes(gzip_repeated(b"", bytes(MiB), mib))
    return path


def _records_bomb(path: Path, mib: int) -> Path:
    """A well-framed .et.gz: GlobalMetadata, then one node record repeated until ``mib`` MiB."""
    meta = frame(GlobalMetadata(version="1.0.0").SerializeToString())
    record = frame(Node(id=1, name="x" * 100, type=NodeType.COMP_NODE, duration_micros=1).SerializeToString())
    per_mib = MiB // len(record)
    path.write_bytes(gzip_repeated(meta, record * per_mib, mib))
    return path


@pytest.mark.parametrize("verb", [["info"], ["validate"], ["to-json", "-o", "out.json"]])
def test_a_zeros_bomb_is_refused_in_bounded_memory(tmp_path: Path, verb: list[str]) -> None:
    bomb = _zeros_bomb(tmp_path / "bomb.et.gz", 1024)  # 1 GiB of zeros in 1 MB
    argv = [verb[0], bomb, *verb[1:]] + ([] if verb[0] == "to-json" else ["-q"])
    started = time.monotonic()
    done = run_etkit(argv, cwd=tmp_path, memory=MEMORY, timeout=120)
    elapsed = time.monotonic() - started
    err = done.stderr.strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(bomb) in err and ("zero-length record" in err or "decompresses to more than" in err), err
    assert elapsed < 60, elapsed  # generous: the point is that it ends; the scaling test below is the real check
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("verb", ["info", "validate", "analyze", "simulate", "report", "timeline"])
def test_refusing_a_bomb_takes_the_same_time_whatever_its_size(tmp_path: Path, capsys, verb: str) -> None:  # type: ignore[no-untyped-def]
    extra = {"simulate": ["--preset", "hgx-h100"], "report": ["-o", tmp_path / "r.html"],
             "timeline": ["-o", tmp_path / "t.json"]}.get(verb, [])

    bombs = {mib: _zeros_bomb(tmp_path / f"b{mib}.et.gz", mib) for mib in (64, 256)}
    best = dict.fromkeys(bombs, float("inf"))
    for _ in range(3):  # the sizes take turns, so that a burst of load on a busy machine hits both alike
        for mib, bomb in bombs.items():
            started = time.perf_counter()
            assert_clean_error(cli(capsys, verb, bomb, *extra, "-q"), bomb)
            best[mib] = min(best[mib], time.perf_counter() - started)

    small, large = best[64], best[256]
    assert large < 2 * small + 0.05, (small, large)  # refusing reads a bounded head, not the whole bomb


def test_a_well_framed_bomb_stops_at_the_decompression_limit(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    bomb = _records_bomb(tmp_path / "dup.et.gz", 512)
    assert bomb.stat().st_size < 4 * MiB
    line = assert_clean_error(cli(capsys, "info", bomb, "-q"), bomb, "decompresses to more than", "--max-bytes")
    assert "64 MiB" in line


def test_max_bytes_raises_the_limit(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    bomb = _records_bomb(tmp_path / "dup.et.gz", 80)  # past the 64 MiB floor, so refused by default
    assert_clean_error(cli(capsys, "info", bomb, "-q"), "decompresses to more than")
    done = cli(capsys, "info", bomb, "-q", "--json", tmp_path / "i.json", "--max-bytes", "100MiB")
    assert done.rc == 0, done.err
    assert json.loads((tmp_path / "i.json").read_text())["nodes"] > 500_000
    assert "ETKIT_MAX_BYTES" not in os.environ  # the option applied to that run only


@pytest.mark.shared_data
@pytest.mark.parametrize("which", ["host", "kineto"])
@pytest.mark.parametrize("verb", ["convert", "link"])
def test_a_host_or_kineto_json_bomb_is_refused_quickly(tmp_path: Path, which: str, verb: str) -> None:
    doc = json.loads((PP_JOB / ("rank-0.et.json" if which == "host" else "rank-0.kineto.json")).read_text())
    key = "nodes" if which == "host" else "traceEvents"
    element = json.dumps(doc[key][-1]).encode() + b",\n"
    head = json.dumps({k: v for k, v in doc.items() if k != key})[:-1].encode() + f', "{key}": [\n'.encode()
    tail = json.dumps(doc[key][-1]).encode() + b"]}\n"
    bomb = tmp_path / f"rank-0.{'et' if which == 'host' else 'kineto'}.json.gz"
    bomb.write_bytes(gzip_repeated(head, element * (MiB // len(element)), 1024, tail))
    assert bomb.stat().st_size < 8 * MiB
    host = bomb if which == "host" else PP_JOB / "rank-0.et.json"
    kineto = bomb if which == "kineto" else PP_JOB / "rank-0.kineto.json"
    argv = (["convert", "pytorch", host, "--kineto", kineto, "-o", tmp_path / "c"] if verb == "convert" else
            ["link", "--host", host, "--kineto", kineto, "-o", tmp_path / "l.json"])
    started = time.monotonic()
    done = run_etkit(argv, cwd=tmp_path, memory=MEMORY, timeout=120)
    err = done.stderr.strip()
    assert done.returncode == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert str(bomb) in err and "decompresses to more than" in err, err
    assert time.monotonic() - started < 30


# -- pipes: the gzip sniff peeks, it does not eat ---------------------------------------------------------


def _feed(fifo: Path, data: bytes) -> threading.Thread:
    """Write ``data`` into ``fifo`` from a thread. A watchdog releases a reader that opens the FIFO a second
    time (a bug: it would wait for a writer forever), so such a test fails instead of hanging."""
    def write() -> None:
        with open(fifo, "wb") as f:
            f.write(data)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not done.is_set():
            time.sleep(0.05)
        if not done.is_set():
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    done = threading.Event()
    thread = threading.Thread(target=write, daemon=True)
    thread.done = done  # type: ignore[attr-defined]
    thread.start()
    return thread


def _unblock(fifo: Path, thread: threading.Thread) -> None:
    """End the writer thread: open the FIFO ourselves if the reader never did."""
    thread.done.set()  # type: ignore[attr-defined]
    if thread.is_alive():
        with contextlib.suppress(OSError):
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            thread.join(5)
            os.close(fd)
    thread.join(5)


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_a_fifo_input_keeps_its_first_bytes(tmp_path: Path, capsys, compressed: bool) -> None:  # type: ignore[no-untyped-def]
    import gzip

    prefix = small_job(tmp_path)
    source = Path(f"{prefix}.0.et")
    assert cli(capsys, "to-json", source, "-o", tmp_path / "want.json").rc == 0
    fifo = tmp_path / "in.et"
    os.mkfifo(fifo)
    data = source.read_bytes()
    thread = _feed(fifo, gzip.compress(data) if compressed else data)
    try:
        done = cli(capsys, "to-json", fifo, "-o", tmp_path / "got.json")
    finally:
        _unblock(fifo, thread)
    assert done.rc == 0, done.err
    assert json.loads((tmp_path / "got.json").read_text())["nodes"] == json.loads((tmp_path / "want.json").read_text())["nodes"]


@pytest.mark.shared_data
@pytest.mark.parametrize("piped", ["host", "kineto"])
def test_a_pytorch_trace_through_a_pipe_gives_what_the_file_gives(tmp_path: Path, capsys, piped: str) -> None:  # type: ignore[no-untyped-def]
    host, kineto = PP_JOB / "rank-0.et.json", PP_JOB / "rank-0.kineto.json"
    verb = ["convert", "pytorch", "--rank", "0"] if piped == "host" else ["link"]

    def run(h: Path, k: Path, out: Path) -> None:
        argv = ([*verb, h, "--kineto", k, "-o", out] if piped == "host" else
                [*verb, "--host", h, "--kineto", k, "-o", out])
        done = cli(capsys, *argv)
        assert done.rc == 0, done.err

    run(host, kineto, tmp_path / "want")
    fifo = tmp_path / f"pipe-{piped}.json"
    os.mkfifo(fifo)
    thread = _feed(fifo, (host if piped == "host" else kineto).read_bytes())
    try:
        run(fifo if piped == "host" else host, fifo if piped == "kineto" else kineto, tmp_path / "got")
    finally:
        _unblock(fifo, thread)
    if piped == "host":
        assert Path(tmp_path / "got.0.et").read_bytes() == Path(tmp_path / "want.0.et").read_bytes()
    else:
        assert json.loads((tmp_path / "got").read_text())["nodes"] == json.loads((tmp_path / "want").read_text())["nodes"]
