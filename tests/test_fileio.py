"""Atomic output: a failed write leaves nothing behind, and a path that cannot be written is one clear
error naming it (from every verb, not a traceback)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from etkit.cli.main import main
from etkit.errors import EtkitError
from etkit.fileio import atomic_output, check_writable


def test_an_exception_inside_the_block_keeps_the_old_file(tmp_path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(target) as f:
        f.write(b"half of the new")
        raise RuntimeError("boom")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["out.json"]


@pytest.mark.parametrize("where, reason", [("afile/x.json", "a part of its folder path is a file"),
                                           ("adir", "it is a directory")])
def test_unwritable_paths_are_named(tmp_path, where: str, reason: str) -> None:
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    with pytest.raises(EtkitError, match=f"{where}: cannot write: {reason}"):
        with atomic_output(tmp_path / where):
            pass
    with pytest.raises(EtkitError, match=reason):
        check_writable(tmp_path / where)


@pytest.mark.parametrize("argv", [
    ["generate", "llm", "--dp", "2", "-o", "{d}/afile/job", "--quiet"],
    ["generate", "micro", "--npus", "2", "-o", "{d}/afile/micro", "--quiet"],
    ["to-json", "{d}/job.0.et", "-o", "{d}/afile/x.json"],
    ["info", "{d}/job", "--json", "{d}/afile/info.json", "--quiet"],
    ["timeline", "{d}/job", "-o", "{d}/adir", "--quiet"],
])
def test_every_verb_reports_an_unwritable_output_in_one_line(tmp_path, capsys, argv: list[str]) -> None:
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    assert main(["generate", "collective", "--type", "all_reduce", "--npus", "2", "-o", str(tmp_path / "job"),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main([a.format(d=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot write" in err and "\n" not in err and "Traceback" not in err, err


def test_temporary_names_are_private_new_and_retried_when_taken(tmp_path, monkeypatch) -> None:
    """The temporary file or folder beside a target is new (an existing name is never reused: the next
    random name is tried), private to its owner, and absolute, as tempfile's are."""
    from etkit import fileio

    draws = iter([b"\x00" * 6, b"\x00" * 6, b"\x01" * 6])
    monkeypatch.setattr(fileio.os, "urandom", lambda n: next(draws))
    fd, first = fileio._new_name(tmp_path, ".t.", ".tmp", fileio._create_file)
    os.close(fd)
    fd, second = fileio._new_name(tmp_path, ".t.", ".tmp", fileio._create_file)  # 0-name taken: the next one
    os.close(fd)
    assert (first, second) == (str(tmp_path / ".t.000000000000.tmp"), str(tmp_path / ".t.010101010101.tmp"))
    assert os.stat(first).st_mode & 0o777 == 0o600
    monkeypatch.undo()
    fd, folder = fileio._new_name(tmp_path, ".j.", ".etkit-job", fileio._create_folder)
    assert fd == -1 and os.path.isdir(folder) and os.stat(folder).st_mode & 0o777 == 0o700


def test_an_atomic_write_leaves_only_its_target(tmp_path) -> None:
    with atomic_output(tmp_path / "out.txt") as f:
        f.write(b"x")
        assert [p.name.startswith(".out.txt.") and p.name.endswith(".tmp") for p in tmp_path.iterdir()] == [True]
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"] and (tmp_path / "out.txt").read_bytes() == b"x"


def test_reading_a_gzip_whole_stops_reading_at_the_limit(tmp_path: Path, monkeypatch) -> None:
    """``read()`` of a gzip stream inflates in few calls but still reads its compressed bytes a chunk at a time:
    a stream that passes its limit is refused before its whole compressed file was read."""
    import gzip
    import random

    from etkit import fileio

    monkeypatch.setattr(fileio, "_READALL_CHUNK", 1 << 16)
    rng = random.Random(3)
    path = tmp_path / "big.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        for _ in range(64):
            f.write(bytes(rng.getrandbits(8) & 0x0F for _ in range(1 << 16)))  # ~2x compressible
    stream = fileio.open_maybe_gzip(path, max_bytes=1 << 20)
    with stream:
        with pytest.raises(fileio.DecompressionLimit):
            stream.read()
        assert stream.raw._raw.tell() < path.stat().st_size // 2  # (~0.6 of 2.4 MB: the 1 MiB limit and a chunk)
    assert fileio.read_bytes_maybe_gzip(path, max_bytes=8 << 20) == gzip.decompress(path.read_bytes())


@pytest.fixture(params=["isal", "zlib"])
def inflater(request, monkeypatch):  # type: ignore[no-untyped-def]
    """Each test with ISA-L's inflater (a dependency: it must be installed here) and with zlib's, its fallback."""
    import zlib

    from etkit import fileio

    if request.param == "isal":
        from isal import isal_zlib

        assert fileio.inflater() == (isal_zlib.decompressobj, isal_zlib.error)
    else:
        monkeypatch.setattr(fileio, "inflater", lambda: (zlib.decompressobj, zlib.error))
    return request.param


def test_both_inflaters_read_gzip_as_gzip_does(tmp_path: Path, inflater: str) -> None:
    """Members one after another, a name in the header, small streaming reads and the whole read alike."""
    import gzip
    import io
    import random

    from etkit import fileio

    rng = random.Random(5)
    parts = [bytes(rng.getrandbits(8) % 40 for _ in range(n)) for n in (0, 1, 70_000, 300_000)]
    named = io.BytesIO()
    with gzip.GzipFile(filename="trace.json", mode="wb", fileobj=named) as f:
        f.write(parts[2])
    path = tmp_path / "t.gz"
    path.write_bytes(b"".join(gzip.compress(p) for p in parts) + named.getvalue())
    want = b"".join(parts) + parts[2]
    assert fileio.read_bytes_maybe_gzip(path) == want
    with fileio.open_maybe_gzip(path) as stream:
        got = b"".join(iter(lambda: stream.read(4099), b""))
    assert got == want


@pytest.mark.parametrize("damage", ["crc", "length", "deflate", "truncated"])
def test_both_inflaters_refuse_damaged_gzip_with_zlib_errors(tmp_path: Path, inflater: str, damage: str) -> None:
    """A wrong CRC or length, bad deflate data: zlib.error (what the readers report as corrupt gzip data);
    a cut stream: EOFError (a truncated file), whichever library inflates."""
    import gzip
    import zlib

    from etkit import fileio

    data = bytearray(gzip.compress(bytes(range(256)) * 400))
    if damage == "crc":
        data[-8] ^= 1
    elif damage == "length":
        data[-4] ^= 1
    elif damage == "deflate":
        data[12:40] = b"\xff" * 28
    else:
        data = data[:len(data) // 2]
    path = tmp_path / "bad.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(EOFError if damage == "truncated" else zlib.error):
        fileio.read_bytes_maybe_gzip(path)
