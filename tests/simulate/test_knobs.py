"""What-if knobs, sweeps, device swap, roofline, configuration files and presets."""

from __future__ import annotations

import json

import pytest

from etkit.cli.main import main
from etkit.errors import EtkitError
from etkit.format.schema import CommType
from etkit.model.devices import get_device
from etkit.simulate import Knobs, load_config, simulate
from etkit.simulate.config import PRESETS, SystemConfig, system_from_dict
from etkit.simulate.synthetic import chain_job

from .helpers import coll, comp, job, net, system

RING = net(("Ring", 4, 50.0, 500.0))


def chain():
    return chain_job(4, 10, 20, CommType.ALL_REDUCE, 1 << 20)


def comm_time() -> float:
    return simulate(job({r: [coll(1, CommType.ALL_REDUCE, 1 << 20)] for r in range(4)}), RING, system()).makespan_ns


def test_scale_compute() -> None:
    base = simulate(chain(), RING, system())
    half = simulate(chain(), RING, system(), Knobs(scale_compute=0.5))
    assert base.makespan_ns - half.makespan_ns == pytest.approx(10 * 10_000)
    assert half.ranks[0].compute_ns == pytest.approx(10 * 10_000)


def test_scale_bandwidth_shrinks_only_transfers() -> None:
    faster = simulate(chain(), RING, system(), Knobs(scale_bandwidth=2))
    doubled = simulate(chain(), net(("Ring", 4, 100.0, 500.0)), system())
    assert faster.makespan_ns == pytest.approx(doubled.makespan_ns)
    assert faster.makespan_ns < simulate(chain(), RING, system()).makespan_ns


def test_straggler_delays_everyone_through_the_collectives() -> None:
    """Rank 2 computes 10 us longer before each of 10 all-reduces. A collective is not a barrier (as in
    ASTRA-sim): the others start it and their first steps overlap the wait, so the job grows by less
    than 10 x 10 us (ASTRA-sim: 25 us for 5 us late steps on this ring), yet everyone is held up."""
    base = simulate(chain(), RING, system())
    slow = simulate(chain(), RING, system(), Knobs(stragglers={2: 1.5}))
    assert 10 * 10_000 / 4 < slow.makespan_ns - base.makespan_ns < 10 * 10_000
    assert slow.ranks[2].compute_ns == pytest.approx(1.5 * base.ranks[2].compute_ns)
    assert all(slow.ranks[r].finish_ns > base.ranks[r].finish_ns + 10 * 10_000 / 4 for r in range(4))
    # rank 0 waits for rank 2 in every all-reduce: waiting, not communication (etkit.model.accounting)
    assert slow.ranks[0].waiting_ns > base.ranks[0].waiting_ns


def test_device_swap_rescales_compute_by_roofline() -> None:
    h100, a100 = get_device("H100"), get_device("A100")
    flops, nbytes = 2 * 4096**3, 3 * 4096 * 4096 * 2  # compute-bound GEMM
    j = job({0: [comp(1, 1000, num_ops=flops, tensor_size=nbytes)]})
    swapped = simulate(j, net(("Ring", 1, 50.0, 500.0)), system(), Knobs(device=a100, trace_device=h100))
    assert swapped.makespan_ns == pytest.approx(1_000_000 * h100.peak_tflops / a100.peak_tflops)


def test_roofline_compute_time() -> None:
    flops, nbytes = 10**12, 10**6
    j = job({0: [comp(1, 5, num_ops=flops, tensor_size=nbytes), comp(2, 5, [1], cpu=True, num_ops=flops, tensor_size=nbytes)]})
    result = simulate(j, net(("Ring", 1, 50.0, 500.0)), system(roofline=True, peak=500.0))
    # GPU op: 1e12 FLOP at 500 TFLOP/s = 2 ms; the CPU op replays its 5 us
    assert result.makespan_ns == pytest.approx(2e6 + 5_000)
    assert result.ranks[0].cpu_ns == pytest.approx(5_000)


def test_more_collectives_than_astra_sim_supports() -> None:
    for ct in (CommType.BROADCAST, CommType.REDUCE, CommType.GATHER, CommType.SCATTER, CommType.BARRIER,
               CommType.REDUCE_SCATTER_BLOCK):
        small = simulate(job({r: [coll(1, ct, 1 << 10)] for r in range(4)}), RING, system()).makespan_ns
        big = simulate(job({r: [coll(1, ct, 1 << 24)] for r in range(4)}), RING, system()).makespan_ns
        assert small > 0
        if ct == CommType.BARRIER:
            assert big == small == pytest.approx(10 + 6 * 510)  # 2 (p-1) latency-only ring steps
        else:
            assert big > 100 * small / 10  # broadcast is not 1 ns whatever the size (ASTRA-sim's defect)


def test_sweep_cli_prints_table_and_writes_plot(tmp_path, capsys) -> None:
    chain().write(tmp_path / "c")
    net_file = tmp_path / "net.yml"
    net_file.write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    plot = tmp_path / "sweep.png"
    rc = main(["simulate", str(tmp_path / "c"), "--network", str(net_file), "-q", "-j", "1",
               "--sweep", "bandwidth=25,50,100", "--plot", str(plot)])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if "makespan ns" in line)
    values = [float(line.split()[1].replace(",", "")) for line in lines[header + 1:header + 4]]
    assert values == sorted(values, reverse=True)
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_cli_knobs_and_timeline(tmp_path, capsys) -> None:
    chain().write(tmp_path / "c")
    net_file = tmp_path / "net.yml"
    net_file.write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    timeline, out = tmp_path / "t.trace.json", tmp_path / "r.json"
    rc = main(["simulate", str(tmp_path / "c"), "--network", str(net_file), "-q", "-j", "1", "--straggler", "1:2",
               "--scale-compute", "0.5", "--json", str(out), "--timeline", str(timeline)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["ranks"]["1"]["compute_ns"] == pytest.approx(10 * 20_000)
    assert data["ranks"]["0"]["compute_ns"] == pytest.approx(10 * 10_000)
    events = json.loads(timeline.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == 4 * 20


def test_etkit_system_file_with_preset_sizes_the_network(tmp_path) -> None:
    cfg = tmp_path / "sys.yml"
    cfg.write_text("preset: hgx-h100\nsystem:\n  preferred-dataset-splits: 2\n")
    network, system_cfg, device = load_config(system=cfg)
    assert device.name == "H100" and system_cfg.preferred_dataset_splits == 2
    assert [d.topology for d in network.dims] == ["Switch", "Switch"]
    result = simulate(chain_job(16, 2, 5, CommType.ALL_REDUCE, 1 << 20), network, system_cfg)
    assert result.config["network"]["npus_count"] == [8, 2]
    assert set(PRESETS) >= {"hgx-h100", "hgx-a100"}


def test_bad_configuration_files_name_the_file(tmp_path) -> None:
    bad = tmp_path / "net.yml"
    bad.write_text("topology: [ Torus ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    with pytest.raises(EtkitError, match="net.yml: dimension 0 topology 'Torus'"):
        load_config(bad)
    sys_file = tmp_path / "sys.json"
    sys_file.write_text('{"all-reduce-implementation": ["magic"]}')
    bad.write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    with pytest.raises(EtkitError, match="sys.json: all-reduce-implementation 'magic'"):
        load_config(bad, sys_file)


def test_network_smaller_than_the_job_is_an_error() -> None:
    with pytest.raises(EtkitError, match="2 NPUs but the job has 4 ranks"):
        simulate(chain(), net(("Ring", 2, 50.0, 500.0)), system())


def test_constructed_chain_job_is_a_valid_et_job(tmp_path) -> None:
    from etkit.validate import validate_job

    job = chain_job(4, 3, 10, CommType.ALL_GATHER, 4096, pg_names={r: "1" for r in range(4)}, groups={"1": [0, 1, 2, 3]})
    report = validate_job(job)
    assert report.ok, [f.message for f in report.findings][:5]


def test_scale_latency_scales_link_latency_and_call_overheads() -> None:
    from dataclasses import replace as _replace

    job = chain_job(4, 5, 10, comm_type=CommType.ALL_REDUCE, size=1 << 20)
    slow_sys = SystemConfig(collective_overhead_ns=(("ALL_REDUCE", 30_000.0),))
    scaled = simulate(job, net(("Ring", 4, 50.0, 4_000.0)), slow_sys, Knobs(scale_latency=0.25, scale_bandwidth=2))
    direct = simulate(job, net(("Ring", 4, 100.0, 1_000.0)), _replace(slow_sys, collective_overhead_ns=(("ALL_REDUCE", 7_500.0),)))
    assert scaled.makespan_ns == pytest.approx(direct.makespan_ns)
    plain = simulate(job, net(("Ring", 4, 100.0, 4_000.0)), slow_sys)
    assert scaled.makespan_ns < plain.makespan_ns  # latency and overheads both shrank
    with pytest.raises(Exception, match="scale_latency"):
        Knobs(scale_latency=-1)


def test_collective_overhead_key_in_a_system_file() -> None:
    cfg = system_from_dict({"etkit-collective-overhead": {"all_gather": 1500, "P2P": 20}}, "sys.json")
    assert cfg.overhead_ns("ALL_GATHER") == 1500.0 and cfg.overhead_ns("P2P") == 20.0 and cfg.overhead_ns("ALL_REDUCE") == 0.0
    with pytest.raises(EtkitError, match="sys.json: etkit-collective-overhead key 'allgather'"):
        system_from_dict({"etkit-collective-overhead": {"allgather": 1}}, "sys.json")
