"""The format-core verbs from the command line: exit codes, JSON output, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from etkit.cli.main import main
from etkit.format.schema import CommType

from ..builders import coll, node, recv, send, write_job


def etkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "etkit", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def job(tmp_path: Path) -> Path:
    ranks = [[node(1, duration=10, start=100), coll(2, CommType.ALL_REDUCE, 4096, deps=[1], duration=5, start=110),
              send(3, r, 1 - r, 256, deps=[2]), recv(4, 1 - r, r, 256, deps=[2])] for r in range(2)]
    return write_job(tmp_path / "job", ranks)


def test_info_table_and_json(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(job), "-q", "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 rank(s), 8 nodes" in out and "ALL_REDUCE" in out
    assert main(["info", str(job), "-q", "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["nodes"] == 8 and data["comm"]["ALL_REDUCE"] == {"count": 2, "bytes": 8192}
    assert data["comm"]["SEND"] == {"count": 2, "bytes": 512}
    assert data["ranks"][0]["by_type"] == {"COMP_NODE": 1, "COMM_COLL_NODE": 1, "COMM_SEND_NODE": 1, "COMM_RECV_NODE": 1}
    assert data["ranks"][0]["span_us"] == 15


def test_validate_exit_codes(job: Path, tmp_path: Path) -> None:
    ok = etkit("validate", str(job), "-q")
    assert ok.returncode == 0 and "OK" in ok.stdout
    write_job(tmp_path / "broken", [[node(1, deps=[5])]])
    bad = etkit("validate", str(tmp_path / "broken"), "-q", "--json", str(tmp_path / "f.json"))
    assert bad.returncode == 1 and "missing-dep" in bad.stdout
    findings = orjson.loads((tmp_path / "f.json").read_bytes())
    assert findings["findings"][0] == {"rank": 0, "node_id": 1, "rule": "missing-dep",
                                       "message": "data dep 5 is not a node of this file", "severity": "error"}
    (tmp_path / "junk.0.et").write_bytes(b"\x05ab")
    unreadable = etkit("validate", str(tmp_path / "junk"), "-q")
    assert unreadable.returncode == 2
    assert unreadable.stderr.strip().count("\n") == 0 and "junk.0.et: record 0 at byte offset 0" in unreadable.stderr
    missing = etkit("validate", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "no file" in missing.stderr


def test_json_twin_round_trip_from_the_command_line(job: Path, tmp_path: Path) -> None:
    src = Path(f"{job}.0.et")
    assert etkit("to-json", str(src), "-o", str(tmp_path / "x.json")).returncode == 0
    assert etkit("from-json", str(tmp_path / "x.json"), "-o", str(tmp_path / "x.et")).returncode == 0
    assert (tmp_path / "x.et").read_bytes() == src.read_bytes()
    default = etkit("to-json", str(src))
    assert default.returncode == 0 and Path(f"{job}.0.json").is_file()


def test_help_lists_the_core_verbs() -> None:
    out = etkit("--help").stdout
    for verb in ("info", "validate", "to-json", "from-json"):
        assert verb in out
