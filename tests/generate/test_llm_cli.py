"""``etkit generate llm`` end to end: files on disk, comm groups, validation, errors, parallel writing."""

from __future__ import annotations

import json

import pytest

from etkit.cli.main import main
from etkit.format.schema import NodeType
from etkit.generate import llm
from etkit.model import load_job
from etkit.validate import validate

ARGS = ["--model", "llama3-8b", "--layers", "4", "--dp", "2", "--tp", "2", "--pp", "2", "--micro-batches", "3", "-q"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_cli_writes_a_valid_job(tmp_path, capsys, workers: str) -> None:  # noqa: ANN001
    prefix = tmp_path / "out" / "llm"
    assert main(["generate", "llm", "-o", str(prefix), *ARGS, "-j", workers]) == 0
    out = capsys.readouterr().out
    assert "ranks 8, roles (distinct templates) 2" in out
    files = sorted(p.name for p in prefix.parent.iterdir())
    assert files == sorted([f"llm.{r}.et" for r in range(8)] + ["llm.comm_groups.json"])
    groups = json.loads((prefix.parent / "llm.comm_groups.json").read_text())
    assert sorted(map(tuple, groups.values())) == sorted(
        [(0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (1, 3), (4, 6), (5, 7)])
    report = validate(prefix)
    assert report.ok, report.findings[:5]
    on_disk = load_job(prefix)
    in_memory = llm("llama3-8b", layers=4, dp=2, tp=2, pp=2, microbatches=3).to_job()
    for rank in on_disk.ranks:
        assert list(on_disk.traces[rank].records()) == list(in_memory.traces[rank].records())


def test_cli_options_reach_the_graph(tmp_path, capsys) -> None:  # noqa: ANN001
    prefix = tmp_path / "g"
    assert main(["generate", "llm", "-o", str(prefix), "--model", "gpt3-175b", "--layers", "2", "--tp", "2",
                 "--sp", "--recompute", "full", "--fsdp", "--dp", "2", "--global-batch", "4", "--device", "MI300X",
                 "--efficiency", "0.8", "-q", "-j", "1"]) == 0
    capsys.readouterr()
    trace = load_job(prefix).traces[0]
    names = set(trace.names)
    assert any(n.startswith("recompute.mb1.layer1.") for n in names)  # 4 / (1 x 2) = 2 micro-batches
    assert not any(n.startswith("fwd.mb2.") for n in names)
    assert any(n.endswith("param_all_gather") for n in names)
    assert any(n.endswith("tp_reduce_scatter") for n in names)
    assert trace.metadata.version == "1.0.0"
    assert (trace.types == NodeType.COMM_COLL_NODE).any()


@pytest.mark.parametrize("bad", [["--tp", "3"], ["--ep", "2", "--dp", "2"], ["--micro-batches", "0"],
                                 ["--sp"], ["--efficiency", "1.5"]])
def test_cli_reports_bad_layouts_on_one_line(tmp_path, capsys, bad: list[str]) -> None:  # noqa: ANN001
    assert main(["generate", "llm", "-o", str(tmp_path / "x"), "--layers", "2", "-q", *bad]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("etkit generate:") and "\n" not in err
    assert not list(tmp_path.iterdir())
