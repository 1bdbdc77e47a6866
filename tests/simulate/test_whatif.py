"""Design-space sweeps (etkit.simulate.whatif): grids, sweeps over files, the baseline, the job read once,
and the silent mistakes refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etkit.cli.main import main
from etkit.errors import UsageError
from etkit.format.schema import CommType
from etkit.simulate import Knobs, load_config, prepare, simulate
from etkit.simulate.config import SystemConfig
from etkit.simulate.synthetic import chain_job
from etkit.simulate.whatif import parse_sweeps, sweep

NET = "topology: [ Ring, Switch ]\nnpus_count: [ 2, 2 ]\nbandwidth: [ {a}, {b} ]\nlatency: [ 500, 1000 ]\n"


@pytest.fixture()
def chain_files(tmp_path: Path) -> Path:
    chain_job(4, 10, 20, CommType.ALL_REDUCE, 1 << 20).write(tmp_path / "c")
    for name, a, b in (("a", 50, 25), ("b", 100, 50), ("c", 200, 100)):
        (tmp_path / f"{name}.yml").write_text(NET.format(a=a, b=b))
    return tmp_path


def _run(capsys, *argv: str) -> tuple[int, list[str], str]:
    rc = main(["simulate", *argv, "-q", "-j", "1"])
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err


def _table(lines: list[str]) -> list[list[str]]:
    header = next(i for i, line in enumerate(lines) if "makespan ns" in line)
    return [line.split() for line in lines[header + 1:] if line and not line.startswith("plot:")]


def test_two_keys_make_a_grid_and_every_point_is_in_the_json(chain_files, capsys) -> None:
    out = chain_files / "s.json"
    rc, lines, _ = _run(capsys, str(chain_files / "c"), "--network", str(chain_files / "a.yml"),
                        "--sweep", "bandwidth0=25,50,100", "--sweep", "scale-compute=1,0.5",
                        "--plot", str(chain_files / "p.png"), "--json", str(out))
    assert rc == 0
    rows = _table(lines)
    assert [(r[0], r[1]) for r in rows] == [(b, s) for b in ("25", "50", "100") for s in ("1", "0.5")]
    data = json.loads(out.read_text())
    assert data["sweep"] == {"bandwidth0": ["25", "50", "100"], "scale-compute": ["1", "0.5"]}
    assert [p["settings"] for p in data["points"]] == [{"bandwidth0": b, "scale-compute": s}
                                                       for b in ("25", "50", "100") for s in ("1", "0.5")]
    # each point is the simulation of its own configuration
    network, system, _ = load_config(chain_files / "a.yml")
    from dataclasses import replace

    wide = replace(network, dims=(replace(network.dims[0], bandwidth_gbps=100.0), network.dims[1]))
    direct = simulate(str(chain_files / "c"), wide, system, Knobs(scale_compute=0.5))
    assert data["points"][-1]["makespan_ns"] == direct.makespan_ns
    assert (chain_files / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_speedups_are_relative_to_the_unmodified_system(chain_files, capsys) -> None:
    out = chain_files / "s.json"
    # the command line's network has 50 GB/s in dimension 0: that is the baseline, not the first value (25)
    rc, lines, _ = _run(capsys, str(chain_files / "c"), "--network", str(chain_files / "a.yml"),
                        "--sweep", "bandwidth0=25,100", "--json", str(out), "--plot", str(chain_files / "p.png"))
    assert rc == 0
    data = json.loads(out.read_text())
    base = simulate(str(chain_files / "c"), load_config(chain_files / "a.yml")[0]).makespan_ns
    assert data["baseline"]["makespan_ns"] == base and data["baseline_kind"] == "unmodified"
    for point in data["points"]:
        assert point["speedup"] == pytest.approx(base / point["makespan_ns"])
    assert data["points"][0]["speedup"] < 1 < data["points"][1]["speedup"]
    assert any(line.startswith("network: ") and "a.yml" in line and "Ring 2 x 50 GB/s" in line for line in lines)
    assert any(line.startswith("speed-up relative to the unmodified system") for line in lines)


def test_sweep_over_network_files(chain_files, capsys) -> None:
    out = chain_files / "s.json"
    files = [str(chain_files / f"{n}.yml") for n in "abc"]
    rc, lines, _ = _run(capsys, str(chain_files / "c"), "--sweep", "network=" + ",".join(files),
                        "--json", str(out), "--plot", str(chain_files / "p.png"))
    assert rc == 0
    data = json.loads(out.read_text())
    expected = [simulate(str(chain_files / "c"), f).makespan_ns for f in files]
    assert [p["makespan_ns"] for p in data["points"]] == expected
    assert [p["network"] for p in data["points"]] == files
    # no --network: the first point is the baseline, and the output says so
    assert data["baseline_kind"] == "first point" and data["points"][0]["speedup"] == 1.0
    assert any("relative to the first point" in line for line in lines)
    assert expected[0] > expected[1] > expected[2]


def test_sweep_over_system_files_crossed_with_a_knob(chain_files, capsys) -> None:
    (chain_files / "one.json").write_text('{"preferred-dataset-splits": 1}')
    (chain_files / "four.json").write_text('{"preferred-dataset-splits": 4, "active-chunks-per-dimension": 2}')
    out = chain_files / "s.json"
    rc, _, _ = _run(capsys, str(chain_files / "c"), "--network", str(chain_files / "a.yml"),
                    "--sweep", f"system={chain_files / 'one.json'},{chain_files / 'four.json'}",
                    "--sweep", "bandwidth=50,100", "--json", str(out), "--plot", str(chain_files / "p.png"))
    assert rc == 0
    points = json.loads(out.read_text())["points"]
    assert [p["system"] for p in points] == [str(chain_files / "one.json")] * 2 + [str(chain_files / "four.json")] * 2
    assert points[0]["makespan_ns"] > points[1]["makespan_ns"]  # bandwidth applies on top of each system


@pytest.mark.parametrize("argv, message", [
    (["--sweep", "bandwidth3=10,20"], "--sweep bandwidth3: the network"),
    (["--sweep", "bandwidth=0,-1"], "--sweep bandwidth: '0' is not a number above 0"),
    (["--sweep", "latency=-5"], "--sweep latency: '-5' is not a number of at least 0"),
    (["--sweep", "splits=1.5"], "--sweep splits: '1.5' is not a whole number of at least 1"),
    (["--sweep", "bandwith=1"], "--sweep: unknown key 'bandwith'"),
    (["--sweep", "device=B300"], "unknown device 'B300'"),
    (["--sweep", "network=nowhere.yml"], "--sweep network: nowhere.yml: no such file"),
    (["--sweep", "latency=1,2", "--sweep", "latency=3"], "--sweep latency is given twice"),
    (["--sweep", "bandwidth=1,1"], "a value is given twice"),
    (["--plot", "x.png"], "--plot draws a sweep"),
    (["--sweep", "latency=1,2", "--timeline", "t.json"], "--timeline writes the schedule of one run"),
])
def test_silent_mistakes_are_one_line_errors(chain_files, capsys, argv, message, monkeypatch) -> None:
    monkeypatch.chdir(chain_files)
    rc, _, err = _run(capsys, "c", "--network", "a.yml", *argv)
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1
    if "bandwidth3" in message:
        assert "valid keys: bandwidth, bandwidth0, bandwidth1" in err
    assert not list(chain_files.glob("*.png")) and not (chain_files / "t.json").exists()


def test_the_job_is_read_once_for_all_points(chain_files) -> None:
    from dataclasses import replace

    network, system, _ = load_config(chain_files / "a.yml")
    faster = replace(network, dims=tuple(replace(d, bandwidth_gbps=40.0, latency_ns=900.0) for d in network.dims))
    expected = simulate(str(chain_files / "c"), faster, system).makespan_ns
    prepared = prepare(str(chain_files / "c"))
    first = sweep(prepared, network, system, Knobs(), parse_sweeps(["bandwidth=10,20"]))
    for path in chain_files.glob("c.*.et"):
        path.unlink()  # every later point must come from what the first read kept
    grid = sweep(prepared, network, system, Knobs(), parse_sweeps(["bandwidth=10,20,40,80", "latency=100,900"]))
    assert len(grid.points) == 8
    assert {p.settings: p.makespan_ns for p in grid.points}[(("bandwidth", "40"), ("latency", "900"))] == expected
    assert first.points[1].makespan_ns < first.points[0].makespan_ns
    with pytest.raises(UsageError):
        prepare(str(chain_files / "c"))  # the files are really gone


def test_python_sweep_without_a_network_needs_the_network_axis(chain_files) -> None:
    with pytest.raises(UsageError, match="give a network"):
        sweep(str(chain_files / "c"), None, SystemConfig(), Knobs(), parse_sweeps(["bandwidth=1,2"]))
