"""Collecting real jobs: the profile() context manager and ``etkit collect example`` end to end."""

from __future__ import annotations

import json

import pytest
import torch

from etkit.cli.main import main
from etkit.errors import EtkitError
from etkit.executor import SerialExecutor
from etkit.pytorch.collect import CollectError, run_example
from etkit.pytorch.job import convert_job
from etkit.validate import validate

from .raw import host_collectives, load_json

pytestmark = pytest.mark.torch


def test_profile_records_the_same_steps_in_both_files(tmp_path):
    from etkit.pytorch.collect import profile

    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(tmp_path, rank=0, steps=2, compress=True) as rec:
        for _ in range(rec.total_steps):
            opt.zero_grad()
            model(torch.randn(2, 8)).sum().backward()
            opt.step()
            rec.step()
    assert rec.host_path.name == "rank-0.et.json.gz" and rec.kineto_path.name == "rank-0.kineto.json.gz"
    host = load_json(rec.host_path)
    kineto = load_json(rec.kineto_path)
    steps_host = sorted(n["name"] for n in host["nodes"] if n["name"].startswith("ProfilerStep#"))
    steps_kineto = sorted(e["name"] for e in kineto["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    assert steps_host == steps_kineto == ["ProfilerStep#2", "ProfilerStep#3"]
    report = convert_job(tmp_path, tmp_path / "out" / "job", executor=SerialExecutor())
    assert report.ranks[0].unlinked_ops == 0 and report.ranks[0].durations_known


def test_profile_refuses_a_loop_that_is_too_short(tmp_path):
    from etkit.pytorch.collect import profile

    with pytest.raises(EtkitError, match="ran 1 steps"):
        with profile(tmp_path, rank=0, steps=2) as rec:
            rec.step()


@pytest.mark.slow
def test_collect_example_then_convert(tmp_path, capsys):
    out = tmp_path / "ddp"
    assert main(["collect", "example", "--workload", "ddp", "--ranks", "2", "-o", str(out), "-q"]) == 0
    assert "rank-1.kineto.json" in capsys.readouterr().out
    meta = json.loads((out / "meta.json").read_text())
    assert meta["world_size"] == 2 and meta["profiled_steps"] == 2
    assert main(["convert", "pytorch", str(out), "-o", str(tmp_path / "et" / "ddp"), "-q", "-j", "2"]) == 0
    printed = capsys.readouterr().out
    assert "ALL_REDUCE" in printed
    assert validate(str(tmp_path / "et" / "ddp"), executor=SerialExecutor()).ok
    # the fresh job's collectives are those its raw host traces show
    from etkit import load_job

    job = load_job(str(tmp_path / "et" / "ddp"), executor=SerialExecutor())
    for rank in (0, 1):
        calls = host_collectives(out / f"rank-{rank}.et.json")
        assert calls and int((job.traces[rank].types == 7).sum()) == len(calls)


def test_a_trace_that_could_not_be_replaced_is_refused_before_any_rank_starts(tmp_path):
    out = tmp_path / "broken"
    (out / "rank-1.et.json").mkdir(parents=True)  # rank 1's trace could never be moved into place
    with pytest.raises(EtkitError, match=r"broken/rank-1\.et\.json: cannot write: it is a directory"):
        run_example("cnn", 2, out, quiet=True, timeout_s=120)
    assert sorted(p.name for p in out.iterdir()) == ["rank-1.et.json"]  # nothing recorded, no staging left


def test_bad_requests_are_refused_before_spawning(tmp_path):
    with pytest.raises(EtkitError, match="unknown workload"):
        run_example("gpt", 2, tmp_path)
    with pytest.raises(EtkitError, match="at least 2 ranks"):
        run_example("pp", 1, tmp_path)


def test_bad_steps_and_timeouts_are_refused_before_spawning(tmp_path):
    for kwargs, needle in (({"steps": 0}, "steps must be"), ({"steps": -1}, "steps must be"),
                           ({"timeout_s": -1.0}, "timeout must be"), ({"timeout_s": 0.0}, "timeout must be")):
        with pytest.raises(EtkitError, match=needle):
            run_example("ddp", 2, tmp_path / "job", **kwargs)
    assert not (tmp_path / "job").exists()  # nothing was started


@pytest.mark.slow
def test_a_timeout_names_the_unfinished_ranks(tmp_path):
    with pytest.raises(CollectError) as err:
        run_example("cnn", 2, tmp_path / "slow", quiet=True, timeout_s=0.5)  # torch alone takes longer to import
    message = str(err.value)
    assert "timed out after 0.5 s; ranks 0, 1 had not finished" in message
    assert "rank -1" not in message and "of 2 ranks" not in message


def test_an_interrupted_profile_leaves_no_trace_under_the_real_names(tmp_path):
    """PyTorch writes the traces while recording: they live under .partial names until complete."""
    from etkit.pytorch.collect import profile

    model = torch.nn.Linear(8, 4)
    with pytest.raises(RuntimeError, match="rank died"):
        with profile(tmp_path, rank=0, steps=2) as rec:
            for step in range(rec.total_steps):
                model(torch.randn(2, 8)).sum().backward()
                rec.step()
                if step == 2:  # inside the active steps: the observer's file is open and half written
                    assert (tmp_path / "rank-0.et.json.partial").is_file()
                    assert not (tmp_path / "rank-0.et.json").exists()
                    raise RuntimeError("rank died")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
