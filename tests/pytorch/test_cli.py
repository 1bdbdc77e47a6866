"""The command line: ``etkit convert pytorch`` (directory and single-file forms) and ``etkit link``."""

from __future__ import annotations

import json
import shutil

import pytest

from etkit.cli.main import main

from ..conftest import PYTORCH_JOBS

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
