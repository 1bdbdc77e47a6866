"""Job discovery from what users type: folders, prefixes with a trailing dot, files of another kind, one rank
of a bigger job, and the comm-group file beside a job (ours, or STAGE's ``workload.json``)."""

from __future__ import annotations

import json
import shutil

import pytest

from etkit.cli.main import main
from etkit.errors import UsageError
from etkit.executor import SerialExecutor
from etkit.generate.collective import write_collective
from etkit.model.job import discover, groups_file, jobs_in, load_job, require_whole_job

from ..conftest import PYTORCH_JOBS, UPSTREAM

STAGE = UPSTREAM / "generated-by-stage-3a7f49c"


@pytest.fixture()
def folder(tmp_path):
    """A folder holding two jobs: ``ar`` (4 ranks, two groups) and ``ag`` (2 ranks)."""
    write_collective(str(tmp_path / "ar"), "all_reduce", "4KiB", 4, groups=["0-1", "2-3"], executor=SerialExecutor())
    write_collective(str(tmp_path / "ag"), "all_gather", "4KiB", 2, executor=SerialExecutor())
    return tmp_path


def test_a_folder_of_one_job_is_that_job(folder, tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    for p in folder.glob("ag.*"):
        shutil.copy(p, one / p.name)
    files, prefix = discover(str(one))
    assert prefix == str(one / "ag") and [f.rank for f in files] == [0, 1]


def test_a_folder_of_several_jobs_lists_their_prefixes(folder):
    assert jobs_in(folder) == [str(folder / "ag"), str(folder / "ar")]
    with pytest.raises(UsageError) as err:
        discover(str(folder))
    assert str(err.value) == f"{folder} is a folder of 2 jobs: give one of their prefixes: {folder}/ag, {folder}/ar"


@pytest.mark.shared_data
def test_a_folder_of_pytorch_traces_says_to_convert_them():
    with pytest.raises(UsageError, match="no job in it .*convert with `etkit convert pytorch`"):
        discover(str(PYTORCH_JOBS / "ddp_mlp_ws2"))


def test_a_trailing_dot_names_the_same_prefix(folder):
    files, prefix = discover(f"{folder}/ar.")
    assert prefix == f"{folder}/ar" and len(files) == 4


def test_a_mistyped_prefix_names_the_closest_job(folder):
    with pytest.raises(UsageError, match=r"no file .*a\.<rank>\.et .*\(did you mean '.*/ar'\?\)"):
        discover(f"{folder}/a")


@pytest.mark.shared_data
@pytest.mark.parametrize("name, kind", [("rank-0.et.json", "a PyTorch host execution trace"),
                                        ("rank-0.kineto.json", "a Kineto")])
def test_a_json_file_where_an_et_is_expected_says_what_it_is(name, kind, capsys):
    path = PYTORCH_JOBS / "ddp_mlp_ws2" / name
    verbs = [["info"], ["validate"], ["simulate", "--preset", "hgx-h100"], ["graph"], ["to-json"]]
    if kind != "a Kineto":  # the analysis verbs read a Kineto trace as it is (converted on the fly)
        verbs.append(["analyze"])
    for verb in verbs:
        argv = [verb[0], str(path), *verb[1:]] + (["-o", "x.dot"] if verb[0] == "graph" else [])
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"etkit {verb[0]}: {path} is {kind}") and "`etkit convert pytorch`" in err, err
        assert len(err.strip().splitlines()) == 1


def test_one_rank_of_a_multi_rank_job_is_refused_for_a_simulation(folder, capsys):
    with pytest.raises(UsageError, match=r"ar\.1\.et is rank 1 of the 4-rank job .*/ar: .*give the prefix"):
        require_whole_job(f"{folder}/ar.1.et")
    require_whole_job(f"{folder}/ar")  # the job itself is fine
    assert main(["simulate", f"{folder}/ar.1.et", "--preset", "hgx-h100"]) == 2
    err = capsys.readouterr().err
    assert "is rank 1 of the 4-rank job" in err and "Traceback" not in err and "KeyError" not in err


def test_comm_groups_naming_a_rank_the_job_lacks_is_an_error(folder, capsys):
    bad = folder / "bad.json"
    bad.write_text(json.dumps({"1": [0, 1], "2": [2, 9]}))
    with pytest.raises(UsageError, match=r"bad\.json: group '2' names rank 9 but the job has 4 rank\(s\) \(0\.\.3\)"):
        load_job(f"{folder}/ar", comm_groups=bad, executor=SerialExecutor())
    for verb in (["validate"], ["simulate", "--preset", "hgx-h100"]):
        assert main([verb[0], f"{folder}/ar", "--comm-groups", str(bad), *verb[1:], "-q"]) == 2
        assert "names rank 9 but the job has 4 rank(s)" in capsys.readouterr().err
    # one rank file: the job is still all four ranks under the prefix, so its own groups file is fine
    assert load_job([f"{folder}/ar.1.et"], executor=SerialExecutor()).groups.groups


@pytest.mark.shared_data
@pytest.mark.parametrize("name", sorted(p.name for p in STAGE.iterdir() if p.is_dir()))
def test_stage_workload_json_is_found_beside_the_job(name, capsys):
    """Issue 10 item 5: STAGE writes workload.<rank>.et + workload.json; no --comm-groups needed."""
    prefix = STAGE / name / "workload"
    assert groups_file(prefix) == STAGE / name / "workload.json"
    groups = json.loads((STAGE / name / "workload.json").read_text())
    job = load_job(prefix, executor=SerialExecutor())
    assert {k: list(v) for k, v in job.groups.groups.items() if k in groups} == groups
    assert main(["validate", str(prefix), "-q", "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "unknown-group" not in out and "0 error(s)" in out
    assert main(["simulate", str(STAGE / name), "--preset", "hgx-h100", "-q", "-j", "1"]) == 0  # the folder too
    assert "makespan" in capsys.readouterr().out


def test_a_json_beside_a_job_that_is_not_a_groups_file_is_not_taken_for_one(folder):
    (folder / "ag.json").write_text('{"note": "my own notes"}')
    assert groups_file(folder / "ag") is None
