"""Library errors speak the library's words; the CLI names the flags that set the same options."""

from __future__ import annotations

import math
import pickle

import pytest

from etkit.cli.main import main
from etkit.errors import OptionError, UsageError
from etkit.simulate import Knobs

from .builders import node, write_job


def test_an_option_error_names_the_option_or_its_flag():
    exc = OptionError("{backend} needs {device} (see {{docs}})", backend="nccl", device="cuda")
    assert str(exc) == "backend='nccl' needs device='cuda' (see {docs})"
    assert exc.as_flags() == "--backend nccl needs --device cuda (see {docs})"
    again = pickle.loads(pickle.dumps(exc))  # crosses process pools intact
    assert isinstance(again, UsageError) and str(again) == str(exc) and again.as_flags() == exc.as_flags()
    named = OptionError("give exactly one of {dp} or {max_buffer_bytes}", dp=..., max_buffer_bytes=...)
    assert (str(named), named.as_flags()) == ("give exactly one of dp or max_buffer_bytes",
                                              "give exactly one of --dp or --max-buffer-bytes")
    assert named.as_flags({"dp": "--data-parallel"}) == "give exactly one of --data-parallel or --max-buffer-bytes"


@pytest.mark.parametrize("field, value", [("scale_compute", 0.0), ("scale_bandwidth", math.inf),
                                          ("scale_latency", -1.0)])
def test_knobs_name_the_field_not_a_flag(field, value):
    with pytest.raises(OptionError) as info:
        Knobs(**{field: value})
    assert str(info.value).startswith(f"{field}={value!r} must be")
    assert info.value.as_flags().startswith(f"--{field.replace('_', '-')} {value} must be")


def test_knobs_take_keywords_only():
    with pytest.raises(TypeError):
        Knobs(2.0)  # type: ignore[misc]


def test_scale_names_its_options(tmp_path):
    from etkit.scale import plan_scale

    prefix = write_job(tmp_path / "job", [[node(1)], [node(1)]])
    with pytest.raises(OptionError, match=r"^give exactly one of dp, tp, pp or ranks$") as info:
        plan_scale(prefix, dp=2, tp=2)
    assert info.value.as_flags() == "give exactly one of --dp, --tp, --pp or --ranks"


def test_the_cli_prints_the_flag(tmp_path, capsys):
    pytest.importorskip("torch")
    prefix = write_job(tmp_path / "job", [[node(1)]])
    code = main(["replay", str(prefix), "--backend", "nccl", "--device", "cpu", "-q"])
    assert code == 2
    assert capsys.readouterr().err.strip() == "etkit replay: --backend nccl needs --device cuda"


def test_graph_analyze_and_calibrate_name_their_parameters_and_the_cli_its_flags(tmp_path, capsys):
    """A library caller reads the parameter (``filters``, ``max_nodes``, ``folder``, ``jobs``); the CLI the
    flag that sets it, also where the flag is not the parameter's name (``--filter``, ``--csv``)."""
    from etkit.analyze.tables import write_csv
    from etkit.model.trace import load_trace
    from etkit.simulate.calibrate import calibrate_from_jobs
    from etkit.viz.graph import select_subgraph

    prefix = write_job(tmp_path / "job", [[node(1), node(2, deps=[1]), node(3, deps=[2])]])
    trace = load_trace(f"{prefix}.0.et")
    cases = [(lambda: select_subgraph(trace, filters=["dur>=x"]), "filters='dur>=x': a duration is a number of microseconds"),
             (lambda: select_subgraph(trace, filters=["colour=red"]), "filters='colour=red': not a filter; use type=..., "
              "kind=..., name~REGEX, dur>=US or dur<=US"),
             (lambda: select_subgraph(trace, max_nodes=2), f"{trace.path}: 3 nodes selected, more than max_nodes=2; "
              "narrow it with around (a node id) and depth (hops) or filters"),
             (lambda: write_csv([], prefix.with_name("job.0.et")), f"folder='{tmp_path}/job.0.et' is a file: give a "
              "folder (it is created if missing)"),
             (lambda: calibrate_from_jobs([]), "jobs: give at least one measured job")]
    for call, words in cases:
        with pytest.raises(OptionError) as info:
            call()
        assert str(info.value) == words
    et = f"{prefix}.0.et"
    for argv, printed in (
            (["graph", et, "-o", str(tmp_path / "g.dot"), "--filter", "dur>=x"],
             "etkit graph: --filter dur>=x: a duration is a number of microseconds"),
            (["graph", et, "-o", str(tmp_path / "g.dot"), "--max-nodes", "2", "--no-critical-path"],
             f"etkit graph: {et}: 3 nodes selected, more than --max-nodes 2; narrow it with --around (a node id) and "
             "--depth (hops) or --filter"),
            (["analyze", str(prefix), "--csv", et, "-q"],
             f"etkit analyze: --csv {et} is a file: give a folder (it is created if missing)")):
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == printed
