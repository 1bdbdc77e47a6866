"""Host and Kineto traces paired, and ranked, by their contents whatever their names; a job of mixed runs refused."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from etkit.cli.main import main
from etkit.errors import UsageError
from etkit.executor import SerialExecutor
from etkit.model.job import load_job
from etkit.pytorch.collect import remove_stale_rank_files
from etkit.pytorch.pairing import host_info, job_files, kineto_info, pair_traces

from ..conftest import PYTORCH_JOBS, UPSTREAM

pytestmark = pytest.mark.shared_data


def _raw(job: str, rank: int, kind: str) -> Path:
    return next((PYTORCH_JOBS / job).glob(f"rank-{rank}.{kind}.json*"))


def _param_names(job: str, out: Path, ranks: int) -> dict[int, tuple[Path, Path]]:
    """param's DLRM naming (``dlrm_eg_<n>.json``, ``worker<m>_step_12.<ts>.pt.trace.json``) with numbers that do
    not say the rank: host n is rank (n + 1) % ranks, worker m is rank (m + 2) % ranks."""
    out.mkdir()
    truth = {}
    for rank in range(ranks):
        host = out / f"dlrm_eg_{(rank - 1) % ranks}.json"
        kineto = out / f"worker{(rank - 2) % ranks}_step_12.{1700000000 + 7 * rank}.pt.trace.json"
        for src, dst in ((_raw(job, rank, "et"), host), (_raw(job, rank, "kineto"), kineto)):
            data = src.read_bytes()
            dst.write_bytes(gzip.decompress(data) if src.suffix == ".gz" else data)
        truth[rank] = (host, kineto)
    return truth


def test_param_names_are_paired_by_pid_and_ranked_by_distributed_info(tmp_path):
    truth = _param_names("hybrid_dp_tp_ws4", tmp_path / "job", 4)
    pairs = pair_traces(*job_files(tmp_path / "job"))
    assert {p.rank: (p.host, p.kineto) for p in pairs} == truth
    assert all(p.how.startswith("pid ") and p.how.endswith("rank from distributedInfo") for p in pairs)
    # the host traces alone still know their rank: the one rank in all of their process subgroups
    assert [host_info(truth[r][0]).rank for r in range(4)] == [0, 1, 2, 3]
    assert [kineto_info(truth[r][1]).world for r in range(4)] == [4] * 4


def test_convert_a_whole_job_from_globs_in_one_call(tmp_path, converted_job, capsys):
    truth = _param_names("tp_transformer_ws2", tmp_path / "job", 2)
    out = tmp_path / "et" / "dlrm"
    assert main(["convert", "pytorch", "--host", str(tmp_path / "job" / "dlrm_eg_*.json"),
                 "--kineto", str(tmp_path / "job" / "worker*_step_12*.json"), "-o", str(out), "-q", "-j", "1"]) == 0
    printed = capsys.readouterr().out
    for rank, (host, kineto) in truth.items():
        assert f"paired rank {rank}: {host.name} + {kineto.name} (pid " in printed
    assert json.loads(Path(f"{out}.comm_groups.json").read_text()) == {"0": [0, 1]}
    mine, ours = load_job(out, executor=SerialExecutor()), load_job(converted_job("tp_transformer_ws2"),
                                                                    executor=SerialExecutor())
    assert {r: len(t) for r, t in mine.traces.items()} == {r: len(t) for r, t in ours.traces.items()}


def test_a_folder_of_host_traces_alone_takes_ranks_from_their_records(tmp_path):
    job = tmp_path / "hosts"
    job.mkdir()
    for rank in range(4):  # names that say nothing true
        shutil.copy(_raw("hybrid_dp_tp_ws4", rank, "et"), job / f"trace_{3 - rank}.json.gz")
    pairs = pair_traces(*job_files(job))
    assert [(p.rank, p.host.name, p.kineto) for p in pairs] == [(r, f"trace_{3 - r}.json.gz", None) for r in range(4)]
    assert all(p.how == "rank from process_group:init" for p in pairs)


def test_a_gpu_host_trace_tells_its_rank_by_its_record_param_comms():
    path = UPSTREAM / "facebookresearch-param" / "et_replay" / "tests" / "inputs" / "1.1.0-chakra.0.0.4" / "resnet_2gpu_et.json.gz"
    info = host_info(path, full=True)
    assert (info.rank, info.world, info.rank_from) == (0, 2, "record_param_comms")


def test_params_linear_gpu_job_pairs_by_pid():
    inputs = UPSTREAM / "facebookresearch-param" / "et_replay" / "tests" / "inputs"
    (pair,) = pair_traces([inputs / "linear_et.json.gz"], [inputs / "linear_kineto.json.gz"])
    assert (pair.rank, pair.kineto.name, pair.how) == (0, "linear_kineto.json.gz", "pid 24248; the job's only rank")


def test_ranks_of_two_runs_are_refused_naming_the_files(tmp_path, capsys):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for job, ranks in (("ddp_mlp_ws2", (0, 1)), ("ddp_mlp_ws4", (2, 3))):  # a new 2-rank run over an old 4-rank one
        for r in ranks:
            for kind in ("et", "kineto"):
                shutil.copy(_raw(job, r, kind), mixed)
    assert main(["convert", "pytorch", str(mixed), "-o", str(tmp_path / "x"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "the traces come from different runs" in err and "say 2 ranks" in err and "rank-2.et.json" in err
    assert "say 4 ranks" in err and not list(tmp_path.glob("x.*"))


def test_a_rank_recorded_at_another_time_is_refused(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        for kind in ("et", "kineto"):
            shutil.copy(_raw("ddp_mlp_ws2", r, kind), job)
    host = job / "rank-1.et.json"
    text = host.read_text()
    stamp = json.loads(text[:200].split(",")[2].split(":", 1)[1])  # "time": "YYYY-MM-DD HH:MM:SS"
    host.write_text(text.replace(stamp, "2026-01-02 03:04:05", 1))
    with pytest.raises(UsageError, match=r"rank-1\.et\.json was recorded at 2026-01-02 03:04:05 but the other ranks"):
        pair_traces(*job_files(job))


def test_files_of_the_wrong_kind_are_named(tmp_path, capsys):
    kineto, host = _raw("ddp_mlp_ws2", 0, "kineto"), _raw("ddp_mlp_ws2", 0, "et")
    et = UPSTREAM / "generated-by-stage-3a7f49c" / "small_dp2tp2pp2" / "workload.0.et"
    cases = [([str(et)], f"{et} is a Chakra execution trace (.et), not a PyTorch host execution trace: it needs no "
                         "conversion"),
             ([str(kineto)], f"{kineto} is a Kineto (PyTorch profiler) trace, not a PyTorch host execution trace"),
             ([str(host), "--kineto", str(host)], f"{host} is a PyTorch host execution trace, not a Kineto trace")]
    for argv, message in cases:
        assert main(["convert", "pytorch", *argv, "-o", str(tmp_path / "x")]) == 2
        assert capsys.readouterr().err.startswith(f"etkit convert: {message}")
    assert main(["link", "--host", str(kineto), "--kineto", str(host), "-o", str(tmp_path / "l.json")]) == 2
    assert "is a Kineto (PyTorch profiler) trace, not a PyTorch host execution trace" in capsys.readouterr().err


def test_a_new_collection_removes_what_it_replaces(tmp_path):
    """``collect example`` into a folder of an older, bigger run: its extra ranks and other compression go."""
    for name in ("rank-0.et.json", "rank-0.kineto.json", "rank-1.et.json.gz", "rank-1.kineto.json", "rank-2.et.json",
                 "rank-2.kineto.json", "rank-2.log", "meta.json", "notes.txt"):
        (tmp_path / name).write_text("x")
    removed = remove_stale_rank_files(tmp_path, 2, compress=False)
    assert sorted(p.name for p in removed) == ["rank-1.et.json.gz", "rank-2.et.json", "rank-2.kineto.json", "rank-2.log"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json", "notes.txt", "rank-0.et.json",
                                                          "rank-0.kineto.json", "rank-1.kineto.json"]
