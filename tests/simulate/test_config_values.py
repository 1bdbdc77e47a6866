"""Degenerate simulator configurations (issue 19, item 9): every non-finite or out-of-range number is
refused with one line naming the file and the key; what a configuration can cost is bounded (no YAML
aliases, at most MAX_SPLITS chunks, configuration files of at most 1 MiB)."""

from __future__ import annotations

import json
import math

import pytest

from etkit.cli.main import main
from etkit.errors import EtkitError, UsageError
from etkit.simulate import Knobs
from etkit.simulate.config import MAX_SPLITS, check_number, load_network, load_system

NETWORK = "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ {bw} ]\nlatency: [ {lat} ]\n"


@pytest.mark.parametrize("bw, lat, key", [(".nan", "500", "bandwidth"), (".inf", "500", "bandwidth"), ("0", "500", "bandwidth"),
                                          ("-1", "500", "bandwidth"), ("50", ".nan", "latency"), ("50", "-1", "latency")])
def test_network_numbers_must_be_finite_and_in_range(tmp_path, bw: str, lat: str, key: str) -> None:
    path = tmp_path / "net.yml"
    path.write_text(NETWORK.format(bw=bw, lat=lat))
    with pytest.raises(EtkitError, match=rf"^{path}: {key} of dimension 0 .*must be") as err:
        load_network(path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key, value, says", [
    ("local-mem-bw", "NaN", "finite"), ("local-mem-bw", "0", "positive"), ("endpoint-delay", "NaN", "finite"),
    ("endpoint-delay", "-1e12", "at least 0"), ("peak-perf", "Infinity", "finite"),
    ("preferred-dataset-splits", "1e9", f"at most {MAX_SPLITS}"), ("preferred-dataset-splits", "0", "at least 1"),
    ("preferred-dataset-splits", "2.5", "whole"), ("active-chunks-per-dimension", "NaN", "finite"),
    ("roofline-enabled", "NaN", "finite")])
def test_system_numbers_must_be_finite_and_in_range(tmp_path, key: str, value: str, says: str) -> None:
    path = tmp_path / "sys.json"
    path.write_text(f'{{"{key}": {value}}}')
    with pytest.raises(EtkitError, match=rf"^{path}: {key} must be .*{says}") as err:
        load_system(path)
    assert "\n" not in str(err.value)


def test_a_nan_overhead_or_residual_is_refused(tmp_path) -> None:
    path = tmp_path / "sys.json"
    path.write_text('{"etkit-collective-overhead": {"ALL_REDUCE": NaN}}')
    with pytest.raises(EtkitError, match="etkit-collective-overhead.*finite"):
        load_system(path)
    path.write_text('{"etkit-collective-residuals": {"ALL_REDUCE": {"2": [[NaN, 1.0]]}}}')
    with pytest.raises(EtkitError, match="finite"):
        load_system(path)


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}]"
              for i in range(1, 10)]  # 10**10 leaves once expanded, 1 KB on disk
    path = tmp_path / "bomb.yml"
    path.write_text("\n".join(lines) + "\ntopology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: *a9\n")
    with pytest.raises(EtkitError, match="YAML aliases .* are not allowed"):
        load_network(path)


def test_a_huge_configuration_file_is_refused(tmp_path) -> None:
    path = tmp_path / "net.yml"
    path.write_text(NETWORK.format(bw=50, lat=500) + "#" * (2 << 20))
    with pytest.raises(EtkitError, match="larger than 1 MiB"):
        load_network(path)


def test_the_cli_says_one_line_and_exits_2(tmp_path, capsys) -> None:
    from tests.simulate.helpers import coll, job  # noqa: PLC0415

    net = tmp_path / "net.yml"
    net.write_text(NETWORK.format(bw=".nan", lat=500))
    prefix = tmp_path / "job"
    from etkit.format.schema import CommType

    for rank, trace in job({r: [coll(1, CommType.ALL_REDUCE, 1 << 20)] for r in range(4)}).traces.items():
        trace.write(f"{prefix}.{rank}.et")
    assert main(["simulate", str(prefix), "--network", str(net), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(net) in err[0] and "bandwidth of dimension 0" in err[0] and "nan" in err[0]
    system = tmp_path / "sys.json"
    system.write_text(json.dumps({"preferred-dataset-splits": 1e9}))
    net.write_text(NETWORK.format(bw=50, lat=500))
    assert main(["simulate", str(prefix), "--network", str(net), "--system", str(system), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(system) in err[0] and "preferred-dataset-splits" in err[0]


def test_check_number() -> None:
    assert check_number("2.5", "x") == 2.5
    assert check_number(0, "x", inclusive=True) == 0.0
    assert check_number(4.0, "x", integer=True) == 4.0
    for value in (math.nan, math.inf, -math.inf, "abc", None, True, [1]):
        with pytest.raises(EtkitError, match="^x must be"):
            check_number(value, "x")
    with pytest.raises(EtkitError, match="positive"):
        check_number(0, "x")
    with pytest.raises(EtkitError, match="at most 3"):
        check_number(4, "x", maximum=3)


@pytest.mark.parametrize("knobs", [dict(scale_compute=math.nan), dict(scale_bandwidth=math.inf), dict(scale_latency=math.nan),
                                   dict(stragglers={0: math.nan})])
def test_non_finite_knobs_are_refused(knobs: dict) -> None:
    with pytest.raises(UsageError):
        Knobs(**knobs)
