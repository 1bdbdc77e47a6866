"""Parity with ASTRA-sim's reference results (docs/simulation.md) on its own shipped inputs."""

from __future__ import annotations

import pytest

from etkit.cli.main import main
from etkit.format.schema import CommType
from etkit.simulate import load_config, simulate
from etkit.simulate.synthetic import chain_job

from ..conftest import UPSTREAM

EXAMPLES = UPSTREAM / "astra-sim-astra-sim" / "examples"
SYSTEM = EXAMPLES / "system" / "native_collectives" / "Ring_4chunks.json"

# ASTRA-sim analytical, 1 MiB, Ring_4chunks.json, Ring_<N>npus.yml (docs/simulation.md)
REFERENCE = {
    ("all_reduce", 4): 43_000, ("all_reduce", 8): 64_440, ("all_reduce", 16): 99_640,
    ("all_gather", 4): 64_744, ("all_gather", 8): 151_016, ("all_gather", 16): 323_560,
    ("reduce_scatter", 4): 22_240, ("reduce_scatter", 8): 33_080, ("reduce_scatter", 16): 50_740,
    ("all_to_all", 4): 41_560, ("all_to_all", 8): 125_480, ("all_to_all", 16): 391_240,
}


def network(npus: int):
    return EXAMPLES / "network" / "analytical" / f"Ring_{npus}npus.yml"


@pytest.mark.shared_data
@pytest.mark.parametrize("congestion", ["unaware", "aware"])
@pytest.mark.parametrize("case", sorted(REFERENCE), ids=lambda c: f"{c[0]}-{c[1]}")
def test_reference_table_within_one_percent(case: tuple[str, int], congestion: str) -> None:
    coll, npus = case
    prefix = EXAMPLES / "workload" / "microbenchmarks" / coll / f"{npus}npus_1MB" / coll
    result = simulate(str(prefix), network(npus), SYSTEM, congestion=congestion)
    assert sorted(result.ranks) == list(range(npus))
    for rank, figures in result.ranks.items():
        assert figures.finish_ns == pytest.approx(REFERENCE[case], rel=0.01), rank
        assert figures.exposed_comm_ns == pytest.approx(figures.finish_ns)


@pytest.mark.shared_data
def test_reference_chain_of_compute_and_all_reduce() -> None:
    net, system, _ = load_config(network(16), SYSTEM)
    result = simulate(chain_job(16, 1000, comp_us=10, comm_type=CommType.ALL_REDUCE, size=1 << 20), net, system)
    assert result.makespan_ns == pytest.approx(1000 * (10_000 + 99_640), rel=0.01)
    assert result.ranks[5].compute_ns == pytest.approx(1000 * 10_000)
    assert result.classes == 1  # 16 identical ranks simulated once


@pytest.mark.shared_data
def test_cli_prints_astra_style_figures(capsys, tmp_path) -> None:
    prefix = EXAMPLES / "workload" / "microbenchmarks" / "all_reduce" / "4npus_1MB" / "all_reduce"
    out = tmp_path / "out.json"
    rc = main(["simulate", str(prefix), "--network", str(network(4)), "--system", str(SYSTEM), "-q", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "43,000" in text and "makespan 43,000 ns" in text
    import json

    data = json.loads(out.read_text())
    assert data["makespan_ns"] == 43_000
    assert set(data["ranks"]) == {"0", "1", "2", "3"}
