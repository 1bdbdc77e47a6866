"""``-o`` never replaces what it should write into, and never destroys an input.

Special files live in the test's private folder: a FIFO, a character device made with ``mknod`` (a private
twin of ``/dev/null``, falling back to a pseudo-terminal this test opens), symlinks. The machine's ``/dev``
is never written.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from etkit.errors import EtkitError

from .helpers import PP_JOB, assert_clean_error, cli, file_state, listing, run_etkit, small_job


@pytest.fixture
def job(tmp_path: Path) -> Path:
    return small_job(tmp_path)


def _to_json_bytes(tmp_path: Path, capsys, source: Path) -> bytes:  # type: ignore[no-untyped-def]
    out = tmp_path / "reference.json"
    assert cli(capsys, "to-json", source, "-o", out).rc == 0
    return out.read_bytes()


def test_dash_is_stdout_not_a_file_named_dash(tmp_path: Path, capsys, job: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    want = _to_json_bytes(tmp_path, capsys, Path(f"{job}.0.et"))
    capsys.readouterr()
    assert cli(capsys, "to-json", f"{job}.0.et", "-o", "-").out.encode() == want
    assert not (tmp_path / "-").exists()
    assert cli(capsys, "analyze", job, "--json", "-", "-q").out.lstrip().startswith("{")
    assert not (tmp_path / "-").exists()
    assert not (tmp_path / "-").exists()


def test_a_fifo_is_written_into_not_replaced(tmp_path: Path, capsys, job: Path) -> None:  # type: ignore[no-untyped-def]
    want = _to_json_bytes(tmp_path, capsys, Path(f"{job}.0.et"))
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there, so the writer never blocks
    try:
        assert cli(capsys, "to-json", f"{job}.0.et", "-o", fifo).rc == 0
        got = os.read(reader, 1 << 20)
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced by a regular file"
    assert got == want
    assert listing(tmp_path) == sorted(["job.0.et", "job.1.et", "out.fifo", "reference.json"])


def _private_char_device(tmp_path: Path) -> tuple[Path, int | None]:
    """A character device in the test's folder: a private /dev/null twin (mknod), else a pseudo-terminal."""
    path = tmp_path / "null"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        return path, None
    except OSError:  # no CAP_MKNOD: a pseudo-terminal of our own (its slave side is a character device)
        master, slave = os.openpty()
        name = os.ttyname(slave)
        os.close(slave)
        return Path(name), master


def test_a_character_device_is_written_into_not_replaced(tmp_path: Path, capsys, job: Path) -> None:  # type: ignore[no-untyped-def]
    device, master = _private_char_device(tmp_path)
    try:
        for argv in (["to-json", f"{job}.0.et", "-o", device], ["info", job, "--json", device],
                     ["analyze", job, "--json", device, "-q"]):
            assert cli(capsys, *argv).rc == 0, argv
            assert stat.S_ISCHR(os.stat(device).st_mode), f"{argv}: the device was replaced"
    finally:
        if master is not None:
            os.close(master)
    assert not [n for n in listing(tmp_path) if n.endswith(".tmp")]


def test_a_symlink_keeps_pointing_and_its_target_is_replaced(tmp_path: Path, capsys, job: Path) -> None:  # type: ignore[no-untyped-def]
    want = _to_json_bytes(tmp_path, capsys, Path(f"{job}.0.et"))
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "x.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(Path("real") / "x.json")
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(Path("real") / "new.json")
    for out in (link, dangling):
        assert cli(capsys, "to-json", f"{job}.0.et", "-o", out).rc == 0
        assert out.is_symlink()
    assert target.read_bytes() == want and (tmp_path / "real" / "new.json").read_bytes() == want
    assert listing(tmp_path / "real") == ["new.json", "x.json"]


# -- an output that is an input: refused, naming it, the input untouched ------------------------------------

#: (verb, argv with {P} = the job prefix, {D} = the folder, what must stay untouched besides the job)
SAME_AS_INPUT = [
    ("info", ["info", "{P}", "--json", "{P}.0.et"]),
    ("validate", ["validate", "{P}", "--json", "{P}.0.et"]),
    ("validate-files", ["validate", "{P}.0.et", "{P}.1.et", "--json", "{P}.1.et"]),
    ("to-json", ["to-json", "{P}.0.et", "-o", "{P}.0.et"]),
    ("from-json", ["from-json", "{D}/twin.json", "-o", "{D}/twin.json"]),
    ("analyze", ["analyze", "{P}", "--json", "{P}.comm_groups.json", "-q"]),
    ("diff", ["diff", "{P}", "{D}/other", "--json", "{D}/other.1.et"]),
    ("timeline", ["timeline", "{P}", "-o", "{P}.1.et"]),
    ("report", ["report", "{P}", "-o", "{P}.1.et", "-q"]),
    ("report-baseline", ["report", "{P}", "--baseline", "{D}/other", "-o", "{D}/other.0.et", "-q"]),
    ("graph-via-symlink", ["graph", "{P}.0.et", "-o", "{D}/alias.dot"]),
    ("simulate", ["simulate", "{P}", "--preset", "hgx-h100", "--json", "{P}.0.et", "-q"]),
    ("calibrate", ["calibrate", "--from-trace", "{P}", "-o", "{P}.0.et"]),
    ("convert-text", ["convert", "text", "{D}/w.comm_groups.json", "-o", "{D}/w", "--ranks", "2"]),
    ("anonymize", ["anonymize", "{P}", "-o", "{P}", "-q"]),
    ("export", ["export", "astra-sim", "{P}", "-o", "{P}", "-q"]),
    ("replay", ["replay", "{P}", "--json", "{P}.0.et"]),
]
#: Verbs that write but are checked elsewhere (shared data) or read nothing a command line names.
_COVERED_ELSEWHERE = {"link", "convert pytorch", "convert kineto", "scale", "collect example", "demo"}


@pytest.mark.parametrize("argv", [a for _, a in SAME_AS_INPUT], ids=[v for v, _ in SAME_AS_INPUT])
def test_an_output_that_is_an_input_is_refused(tmp_path: Path, capsys, argv: list[str]) -> None:  # type: ignore[no-untyped-def]
    prefix = small_job(tmp_path)
    small_job(tmp_path, "other")
    (tmp_path / "job.comm_groups.json").write_text('{"0": [0, 1]}\n')
    assert cli(capsys, "to-json", f"{prefix}.0.et", "-o", tmp_path / "twin.json").rc == 0
    (tmp_path / "alias.dot").symlink_to("job.0.et")
    (tmp_path / "w.comm_groups.json").write_text("DATA\n1\nl0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1024 5\n")
    inputs = [p for p in tmp_path.iterdir() if p.is_file() and not p.is_symlink()]
    before = file_state(inputs)
    argv = [a.format(P=prefix, D=tmp_path) for a in argv]
    out = argv[argv.index("-o") + 1] if "-o" in argv else argv[argv.index("--json") + 1]
    line = assert_clean_error(cli(capsys, *argv), out)
    assert "input" in line
    assert file_state(inputs) == before
    assert not [n for n in listing(tmp_path) if n.startswith(".") or n.endswith(".tmp")]


def test_every_verb_that_reads_and_writes_is_in_the_table() -> None:
    """A new verb with an output joins SAME_AS_INPUT (or says why not), so the refusal is checked on it."""
    import argparse

    from etkit.cli.guard import OUTPUT_DESTS
    from etkit.cli.main import build_parser

    def leaves(parser: argparse.ArgumentParser, name: str):  # type: ignore[no-untyped-def]
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield name, parser
        for sub in subs:
            for child, p in sub.choices.items():
                yield from leaves(p, f"{name} {child}".strip())

    tabled = {" ".join(a[:2]) if a[0] in ("convert", "export") else a[0] for _, a in SAME_AS_INPUT}
    writers = {name for name, p in leaves(build_parser(), "") if not name.startswith("generate")
               and any(a.dest in OUTPUT_DESTS for a in p._actions)}
    assert writers - tabled - _COVERED_ELSEWHERE == set()


@pytest.mark.shared_data
@pytest.mark.parametrize("verb", ["link", "convert-report"])
def test_host_trace_outputs_that_are_inputs_are_refused(tmp_path: Path, capsys, verb: str) -> None:  # type: ignore[no-untyped-def]
    host, kineto = tmp_path / "rank-0.et.json", tmp_path / "rank-0.kineto.json"
    host.write_bytes((PP_JOB / "rank-0.et.json").read_bytes())
    kineto.write_bytes((PP_JOB / "rank-0.kineto.json").read_bytes())
    before = file_state([host, kineto])
    argv = (["link", "--host", host, "--kineto", kineto, "-o", host] if verb == "link" else
            ["convert", "pytorch", host, "--kineto", kineto, "-o", tmp_path / "c", "--report", kineto])
    assert_clean_error(cli(capsys, *argv), host if verb == "link" else kineto)
    assert file_state([host, kineto]) == before


def test_a_job_written_over_its_own_input_job_is_refused(tmp_path: Path) -> None:
    """The library's job writer refuses too: rank files of the output prefix that the command reads."""
    from etkit.fileio import job_output, protect_inputs

    prefix = small_job(tmp_path)
    before = file_state(tmp_path.iterdir())
    with protect_inputs([f"{prefix}.0.et"]), pytest.raises(EtkitError, match=r"job\.0\.et: refusing to write over"):
        with job_output(prefix) as out:
            out.rank_path(0).write_bytes(b"new")
    assert file_state(tmp_path.iterdir()) == before


# -- full disks and prefixes that name no file ------------------------------------------------------------


def test_a_full_disk_is_one_line_naming_the_output(tmp_path: Path, job: Path) -> None:
    """RLIMIT_FSIZE stands in for a full disk: the write fails with EFBIG like it fails with ENOSPC."""
    big = small_job(tmp_path, "big", ranks=1, names=("x" * 3000, "y" * 3000))
    done = run_etkit(["to-json", f"{big}.0.et", "-o", tmp_path / "out.json"], cwd=tmp_path, file_size=4096)
    err = done.stderr.strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(tmp_path / "out.json") in err and "cannot write" in err, err
    assert not (tmp_path / "out.json").exists()
    assert not [n for n in listing(tmp_path) if n.endswith(".tmp")]


@pytest.mark.parametrize("prefix", ["out/", "out/.", "out/x."])
def test_a_job_prefix_that_names_no_file_is_refused(tmp_path: Path, prefix: str) -> None:
    from etkit.generate.collective import write_collective

    (tmp_path / "out").mkdir()
    with pytest.raises(EtkitError, match="prefix"):
        write_collective(f"{tmp_path}{os.sep}{prefix}", "all_reduce", 1024, 2)
    assert listing(tmp_path / "out") == []


def test_the_cli_refuses_a_folder_as_prefix(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    done = run_etkit(["generate", "collective", "--type", "all_reduce", "--ranks", "2", "-o", "out/"], cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert listing(tmp_path / "out") == []
