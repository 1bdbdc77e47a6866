"""``etkit export astra-sim`` from the command line, and the worked example of docs/guide/simulate.md."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import orjson
import pytest

from etkit.cli.main import main
from etkit.format.schema import CommType
from tests.builders import coll, node, send, write_job

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "simulate.md"
EXAMPLE = "### Example: a converted PyTorch job on ASTRA-sim"


def test_export_prints_what_it_wrote_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_job(tmp_path / "src", [[coll(1, CommType.BARRIER, 0, pg="0"), node(2, deps=[1], duration=3)] for _ in range(4)])
    out = tmp_path / "out" / "job"
    assert main(["export", "astra-sim", str(src), "-o", str(out), "-q", "-j", "1"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text == [f"wrote 4 ranks to {out}.<rank>.et and {out}.comm_groups.json (0 groups); 8 -> 8 nodes",
                    "  BARRIER written as ALL_REDUCE: 4"]
    assert json.loads(Path(f"{out}.comm_groups.json").read_text()) == {}
    assert main(["export", "astra-sim", str(src), "-o", str(out), "-q", "-j", "1", "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["ranks"] == 4 and data["changes"] == {"BARRIER written as ALL_REDUCE": 4} and data["command"] is None


def test_export_with_a_network_prints_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_job(tmp_path / "src", [[coll(1, CommType.ALL_REDUCE, 1 << 20)] for _ in range(4)])
    net = tmp_path / "net.yml"
    net.write_text("topology: [ Switch ]\nnpus_count: [ 4 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    out = tmp_path / "a"
    assert main(["export", "astra-sim", str(src), "-o", str(out), "--network", str(net), "--congestion", "aware",
                 "-q", "-j", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == "run on ASTRA-sim:"
    assert lines[-1].startswith(f"AstraSim_Analytical_Congestion_Aware --workload-configuration={out} ")
    assert lines[-3] == f"configs: {out}.network.yml, {out}.system.json, {out}.memory.json"


def test_a_job_astra_sim_cannot_run_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_job(tmp_path / "job", [[send(1, 0, 1, 64, tag=3)], [node(1)]])
    assert main(["export", "astra-sim", str(src), "-o", str(tmp_path / "x"), "-q", "-j", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"etkit export: {src}: cannot export for ASTRA-sim: rank 0 node 1: SEND to rank 1 tag 3 has no "
                   "RECV on rank 1 (ASTRA-sim would wait for it forever)")
    assert not list(tmp_path.glob("x*"))


def _example() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of the guide's worked example."""
    text = GUIDE.read_text()
    block = text[text.index(EXAMPLE):].split("```")[1]
    steps: list[tuple[str, list[str]]] = []
    continued = False
    for line in block.strip("\n").splitlines():
        if continued:  # a command over several lines, each but the last ending in a backslash
            steps[-1] = (steps[-1][0] + " " + line.strip().rstrip("\\").rstrip(), [])
        elif line.startswith("$ "):
            steps.append((line[2:].rstrip("\\").rstrip(), []))
        else:
            steps[-1][1].append(line)
        continued = line.endswith("\\") and (continued or line.startswith("$ "))
    return steps


@pytest.mark.shared_data
def test_the_guide_s_worked_example_prints_what_the_guide_shows(converted_job, astra_sim: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    steps = _example()
    assert [cmd.split()[:3] for cmd, _ in steps][:2] == [["etkit", "convert", "pytorch"], ["etkit", "export", "astra-sim"]]
    source = converted_job("tp_transformer_ws2")
    for path in source.parent.glob(f"{source.name}.*"):
        (tmp_path / path.name.replace(source.name, "tp", 1)).symlink_to(path)
    monkeypatch.chdir(tmp_path)
    printed_command = None
    for cmd, expected in steps[1:]:
        command, _, grep = cmd.partition(" | grep ")
        if command.startswith("etkit "):
            assert main(shlex.split(command)[1:]) == 0, command
            out = capsys.readouterr().out
        else:  # the command the export printed, run with this machine's ASTRA-sim
            args = shlex.split(printed_command)
            proc = subprocess.run([str(astra_sim), *args[1:], f"--logging-folder={tmp_path / 'logs'}"],
                                  capture_output=True, text=True, timeout=120)
            out = proc.stdout
        if grep.startswith("-o "):
            pattern = shlex.split(grep)[1]
            got = [m.group(0) for m in re.finditer(pattern, out)]
        elif grep:
            got = [line for line in out.splitlines() if grep in line]
        else:
            got = out.splitlines()
        assert got == expected, f"{cmd}\n" + "\n".join(got)
        if command.startswith("etkit export"):
            printed_command = got[-1]
