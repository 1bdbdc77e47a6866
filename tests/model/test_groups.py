"""Process groups declared in ``process_group:init`` METADATA nodes: read with the one literal parser,
malformed groups a one-line error naming the file and node."""

from __future__ import annotations

import gzip
import importlib
import json
from pathlib import Path

import pytest

from etkit.errors import EtkitError
from etkit.executor import SerialExecutor
from etkit.format.schema import NodeType
from etkit.model import load_job
from etkit.model.groups import parse_process_group_init

from ..builders import node, write_job
from ..conftest import PYTORCH_JOBS


def _wrapped(entries: list[dict]) -> str:
    """What a converted trace carries: the ``str()`` of the host ET's one-element list of JSON text."""
    return str([json.dumps(entries)])


def test_wrapped_and_bare_json_lists_give_the_same_groups():
    entries = [{"pg_name": "0", "ranks": [], "is_default": True, "backend": None},
               {"pg_name": "7", "ranks": [3, 1], "desc": 'a "quoted" name'}]
    expected = {"0": (), "7": (1, 3)}
    assert parse_process_group_init(_wrapped(entries)).groups == expected
    # JSON's true/null are no Python literal: the bare JSON list is read all the same
    assert parse_process_group_init(json.dumps(entries)).groups == expected
    assert parse_process_group_init(json.dumps(entries[1:])).members("7", 4) == (1, 3)


@pytest.mark.parametrize("text", ["__import__('os').system('false')", "[", "", "[1, 2]", "['not json']",
                                  "[" * 500 + "]" * 500, "{'pg_name': '1'}"])
def test_text_that_declares_no_group_gives_none(text):
    assert parse_process_group_init(text).groups == {}


@pytest.mark.parametrize("ranks", [["a"], [1.5], [True], [-1], [[0, 1]], 5, "0,1", {"0": 1}])
def test_a_malformed_group_is_one_clear_error(ranks):
    text = _wrapped([{"pg_name": "0", "ranks": []}, {"pg_name": "tp", "ranks": ranks}])
    with pytest.raises(EtkitError) as caught:
        parse_process_group_init(text, where="x.0.et: node 4 process_group:init")
    message = str(caught.value)
    assert message.startswith("x.0.et: node 4 process_group:init: process group 'tp' has ranks ")
    assert message.endswith("expected a list of non-negative integers") and "\n" not in message


def test_the_error_shows_a_huge_rank_list_shortened():
    with pytest.raises(EtkitError) as caught:
        parse_process_group_init(_wrapped([{"pg_name": "x" * 1000, "ranks": list(range(10_000)) + ["y"]}]))
    assert len(str(caught.value)) < 250


def test_loading_a_job_with_a_malformed_group_names_the_file_and_node(tmp_path: Path):
    init = node(4, NodeType.METADATA_NODE, name="## process_group:init ##")
    init.inputs.values = _wrapped([{"pg_name": "1", "ranks": [0, "one"]}])
    write_job(tmp_path / "j", [[node(1), init]])
    with pytest.raises(EtkitError, match=r"j\.0\.et: node 4 process_group:init: process group '1' has ranks \[0, 'one'\]"):
        load_job(tmp_path / "j", executor=SerialExecutor())


@pytest.mark.shared_data
def test_groups_of_a_converted_pytorch_job_are_the_host_traces_own(tmp_path: Path):
    """The payload as PyTorch recorded it (raw host ET, rank 0), through a converted job's METADATA node."""
    from etkit.pytorch.job import convert_job

    job_dir = PYTORCH_JOBS / "hybrid_dp_tp_ws4"
    path = next(job_dir.glob("rank-0.et.json*"))
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt") as f:
        raw = next(n for n in json.load(f)["nodes"] if "process_group:init" in n["name"])
    entries = json.loads(raw["inputs"]["values"][0])
    expected = {e["pg_name"]: tuple(sorted(e["ranks"])) for e in entries}
    assert len(expected) > 1 and any(expected.values())  # subgroups with listed ranks, not just the world
    assert parse_process_group_init(str(raw["inputs"]["values"])).groups == expected
    convert_job(job_dir, tmp_path / "job", executor=SerialExecutor())
    job = load_job(tmp_path / "job", executor=SerialExecutor())
    for name, ranks in expected.items():
        assert job.members(name) == (ranks or tuple(range(4)))


@pytest.mark.parametrize("shim", ["etkit.pytorch.literal", "etkit.feeder", "etkit.collect"])
def test_no_reexport_shims(shim):
    """Each name has one home (etkit.literal, etkit.model.feeder, etkit.pytorch.collect): no second import path."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(shim)
