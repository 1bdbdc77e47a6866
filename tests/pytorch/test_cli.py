"""The command line: ``etkit convert pytorch`` (directory and single-file forms) and ``etkit link``."""

from __future__ import annotations

import json
import shutil

import pytest

from etkit.cli.main import main

from ..conftest import PYTORCH_JOBS, UPSTREAM

pytestmark = pytest.mark.shared_data


def test_convert_job_dir_with_reference_names(tmp_path, capsys):
    """host.<r>.json / device.<r>.json (the reference tools' names) work like ours."""
    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        shutil.copy(PYTORCH_JOBS / "pp_sendrecv_ws2" / f"rank-{r}.et.json", job / f"host.{r}.json")
        shutil.copy(PYTORCH_JOBS / "pp_sendrecv_ws2" / f"rank-{r}.kineto.json", job / f"device.{r}.json")
    report = tmp_path / "report.json"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "pp.2.et").write_bytes(b"\x00")  # rank 2 of an older job under the same prefix
    assert main(["convert", "pytorch", str(job), "-o", str(tmp_path / "out" / "pp"), "-q", "-j", "1",
                 "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "SEND 4" in out and "RECV 4" in out
    assert "removed 1 file(s) of an older job" in out and not (tmp_path / "out" / "pp.2.et").exists()
    data = json.loads(report.read_text())
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert json.loads((tmp_path / "out" / "pp.comm_groups.json").read_text()) == {"0": [0, 1]}
    assert (tmp_path / "out" / "pp.0.et").is_file() and (tmp_path / "out" / "pp.1.et").is_file()


def test_link_then_convert_the_linked_file(tmp_path, capsys):
    src = PYTORCH_JOBS / "fsdp2_mlp_ws2"
    linked = tmp_path / "linked.json.gz"
    assert main(["link", "--host", str(src / "rank-1.et.json.gz"), "--kineto", str(src / "rank-1.kineto.json.gz"),
                 "-o", str(linked), "--report", str(tmp_path / "link.json")]) == 0
    assert "host ops linked (rf_id)" in capsys.readouterr().out
    assert json.loads((tmp_path / "link.json").read_text())["unlinked_names"] == {"## process_group:init ##": 1}
    assert main(["convert", "pytorch", str(linked), "-o", str(tmp_path / "f"), "--rank", "1"]) == 0
    assert "ALL_GATHER 14" in capsys.readouterr().out
    assert (tmp_path / "f.1.et").is_file()


def test_host_trace_alone_says_durations_are_unknown(tmp_path, capsys):
    src = PYTORCH_JOBS / "cnn_single" / "rank-0.et.json"
    assert main(["convert", "pytorch", str(src), "-o", str(tmp_path / "c")]) == 0
    assert "durations and start times are unknown" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["convert", "pytorch", "{tmp}", "-o", "{tmp}/x"], "no host trace found"),
    (["convert", "pytorch", "{tmp}/missing.json", "-o", "{tmp}/x"], "missing.json"),
    (["link", "--host", "{tmp}/h.json", "--kineto", "{tmp}/k.json", "-o", "{tmp}/l.json"], "h.json"),
])
def test_errors_are_one_line_and_exit_2(tmp_path, capsys, argv, needle):
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


_PROBE = """
import json, sys
from etkit.cli.main import main
code = main(sys.argv[1:])
print(json.dumps([code, sorted(m for m in sys.modules if m.startswith(("numpy", "etkit.pytorch.job", "etkit.format")))]))
"""


@pytest.mark.parametrize("argv, needle", [
    (["--host", "a.json", "--rank", "1", "-o", "x"], "--rank applies to a single INPUT file"),
    (["--host", "a.json"], "-o PREFIX is needed with --host"),
    (["--host", "no-such-*.json", "-o", "x"], "matches no file"),
    (["missing.json"], "missing.json: cannot read (No such file or directory)"),
    (["empty.json"], "empty.json: the file is empty"),
    (["h.json", "--kineto", "a", "b"], "takes one Kineto trace, not 2"),
    (["."], None),  # a directory given --rank below
])
def test_a_bad_argument_is_told_before_the_converter_is_imported(tmp_path, argv, needle):
    """Usage errors and unreadable inputs cost no numpy or converter import (0.5 s of CPU before)."""
    import subprocess
    import sys

    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "h.json").write_bytes((PYTORCH_JOBS / "cnn_single" / "rank-0.et.json").read_bytes())
    if needle is None:
        argv, needle = [".", "--rank", "1"], "--rank applies to a single host trace"
    proc = subprocess.run([sys.executable, "-c", _PROBE, "convert", "pytorch", *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    code, heavy = json.loads(proc.stdout.strip().splitlines()[-1])
    assert code == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert heavy == []


def test_a_host_trace_alone_is_converted_without_the_kineto_reader_or_the_trace_model(tmp_path):
    """``convert pytorch HOST.json`` imports what it uses: no Kineto reader, no trace model (etkit.model and
    its columnar reader: about 0.1 s of the start-up), and writes what the in-process converter writes."""
    import subprocess
    import sys

    from etkit.pytorch.job import convert_files

    host = UPSTREAM / "facebookresearch-param" / "et_replay" / "tests" / "inputs" / "1.0.3-chakra.0.0.4" / \
        "resnet_1gpu_et.json.gz"  # (no times, no process groups)
    probe = ("import json, sys\nfrom etkit.cli.main import main\ncode = main(sys.argv[1:])\n"
             "print(json.dumps([code, sorted(m for m in sys.modules if m.startswith(('etkit.pytorch.kineto', "
             "'etkit.model')))]))")
    proc = subprocess.run([sys.executable, "-c", probe, "convert", "pytorch", str(host), "-o", "cli", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0, []], proc.stderr
    convert_files(host, tmp_path / "lib")
    assert (tmp_path / "cli.0.et").read_bytes() == (tmp_path / "lib.0.et").read_bytes()
