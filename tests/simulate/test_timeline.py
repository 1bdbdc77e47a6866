"""``simulate --timeline`` writes the file ``etkit timeline`` writes from the same simulation: one Chrome/Perfetto
trace writer (:mod:`etkit.viz.timeline`)."""

from __future__ import annotations

import json

import pytest

from etkit.cli.main import main
from etkit.format.schema import CommType
from etkit.simulate.synthetic import chain_job


@pytest.mark.parametrize("name", ["t.json", "t.pftrace"])
def test_simulate_timeline_is_the_timeline_of_the_simulation(tmp_path, name):
    chain_job(4, 5, 10, comm_type=CommType.ALL_REDUCE, size=1 << 20).write(tmp_path / "c")
    (tmp_path / "net.yml").write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    inputs = ["--network", str(tmp_path / "net.yml"), "--scale-compute", "0.5", "-q"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert main(["simulate", str(tmp_path / "c"), *inputs, "--timeline", str(tmp_path / "a" / name)]) == 0
    assert main(["timeline", str(tmp_path / "c"), *inputs, "-o", str(tmp_path / "b" / name)]) == 0
    written = (tmp_path / "a" / name).read_bytes()
    assert written == (tmp_path / "b" / name).read_bytes()
    if name.endswith(".json"):
        events = json.loads(written)["traceEvents"]
        assert sum(e["ph"] == "X" for e in events) == 4 * 10 and any(e["ph"] == "s" for e in events)


def test_simulate_refuses_a_timeline_name_of_another_kind_before_simulating(tmp_path, capsys):
    chain_job(2, 1, 10).write(tmp_path / "c")
    assert main(["simulate", str(tmp_path / "c"), "--preset", "hgx-h100", "-q", "--timeline",
                 str(tmp_path / "t.html")]) == 2
    assert "etkit report" in capsys.readouterr().err
    assert not (tmp_path / "t.html").exists()
