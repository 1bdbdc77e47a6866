"""One convention for every verb (docs/user-guide.md § Conventions), checked on every verb the CLI registers.

Verbs are discovered from ``etkit.cli.main.build_parser()`` (every module in ``VERB_MODULES`` and their
sub-verbs), so a verb added later is held to the same rules. The static rules read each verb's parser; the
behavioural ones run each verb once on small real inputs (``SAMPLES``), in-process, and the user guide's two
tables (the verbs with ``--json``, what ``-o`` is and its default) are read back and compared with the parsers.
"""

from __future__ import annotations

import argparse
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from etkit.cli.common import VerbParser
from etkit.cli.main import build_parser, main

from ..conftest import PYTORCH_JOBS, REPO, UPSTREAM

USER_GUIDE = REPO / "docs" / "user-guide.md"


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    out = {}
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {path: parser}
    for name, child in subs[0].choices.items():
        out.update(_leaves(child, path + (name,)))
    return out


VERBS = _leaves(build_parser())
IDS = [" ".join(v) for v in VERBS]


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


def _table(heading: str) -> list[list[str]]:
    """Rows of the first Markdown table after ``heading`` in the user guide (cells without backticks)."""
    text = USER_GUIDE.read_text()
    rest = text[text.index(heading):]
    rows = []
    for line in rest.splitlines()[1:]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header


# -- static rules, every verb ------------------------------------------------------------------------


@pytest.mark.parametrize("verb", VERBS, ids=IDS)
def test_every_verb_takes_quiet(verb):
    action = _option(VERBS[verb], "--quiet")
    assert action is not None and "-q" in action.option_strings and action.nargs == 0, " ".join(verb)


@pytest.mark.parametrize("verb", VERBS, ids=IDS)
def test_json_is_the_same_everywhere(verb):
    action = _option(VERBS[verb], "--json")
    if action is None:
        return
    assert (action.nargs, action.const, action.default, action.dest) == ("?", "-", None, "json"), " ".join(verb)
    assert "only the JSON" in action.help


def test_the_verbs_with_json_are_those_the_user_guide_lists():
    text = USER_GUIDE.read_text()
    paragraph = text[text.index("The verbs with `--json`:"):].split("\n\n", 1)[0]
    listed = set(re.findall(r"`([^`]+)`", paragraph.split(":", 1)[1]))
    assert listed == {" ".join(v) for v, p in VERBS.items() if _option(p, "--json")}


@pytest.mark.parametrize("verb", VERBS, ids=IDS)
def test_output_is_always_dash_o_with_a_default(verb):
    action = _option(VERBS[verb], "--output")
    if action is None:
        assert _option(VERBS[verb], "-o") is None
        return
    assert action.option_strings == ["-o", "--output"] and action.dest == "output"
    assert not action.required and "default" in action.help, f"{' '.join(verb)}: -o needs a default name"


def test_the_user_guide_says_what_o_is_for_every_verb_that_has_it():
    rows = {cells[0].strip("`"): cells for cells in _table("What `-o` is, and its default")}
    with_output = {" ".join(v) for v, p in VERBS.items() if _option(p, "--output")}
    assert set(rows) == with_output


@pytest.mark.parametrize("verb", VERBS, ids=IDS)
def test_a_rank_count_is_called_ranks(verb):
    parser = VERBS[verb]
    for action in parser._actions:
        if action.dest in ("npus", "world", "world_size", "nranks", "num_ranks"):
            pytest.fail(f"{' '.join(verb)}: {action.option_strings} should be --ranks (dest 'ranks')")
        if "--npus" in action.option_strings:
            assert action.option_strings == ["--ranks", "--npus"] and action.dest == "ranks"
        if action.dest == "ranks":
            assert action.option_strings[0] == "--ranks"


def test_npus_is_kept_where_astra_sim_users_expect_it():
    for verb in (("convert", "text"), ("generate", "micro"), ("generate", "collective"), ("generate", "dlrm")):
        assert _option(VERBS[verb], "--npus") is _option(VERBS[verb], "--ranks") is not None


#: What ``common.add_simulation_inputs`` defines: simulate's own names, for every verb that simulates.
_REFERENCE = VerbParser(prog="reference")
__import__("etkit.cli.common", fromlist=["x"]).add_simulation_inputs(_REFERENCE)
SIMULATION_INPUTS = ("--network", "--system", "--preset", "--congestion")
WHATIF_KNOBS = ("--scale-compute", "--scale-bandwidth", "--scale-latency", "--straggler", "--device", "--trace-device")


@pytest.mark.parametrize("verb", VERBS, ids=IDS)
def test_simulation_inputs_are_named_as_in_simulate(verb):
    parser = VERBS[verb]
    present = [f for f in SIMULATION_INPUTS[:3] if _option(parser, f)]
    if not present:
        return
    for flag in SIMULATION_INPUTS[:3]:  # a verb that takes one of them takes all three, spelled alike
        mine, ref = _option(parser, flag), _option(_REFERENCE, flag)
        assert mine is not None, f"{' '.join(verb)} has {present} but not {flag}"
        assert (mine.metavar, mine.choices) == (ref.metavar, ref.choices)


@pytest.mark.parametrize("verb", [("simulate",), ("analyze",), ("diff",), ("timeline",), ("report",)], ids=" ".join)
def test_the_verbs_that_simulate_take_every_input_and_knob(verb):
    for flag in SIMULATION_INPUTS + WHATIF_KNOBS:
        mine, ref = _option(VERBS[verb], flag), _option(_REFERENCE, flag)
        assert mine is not None, f"{' '.join(verb)} lacks {flag}"
        assert (mine.metavar, mine.type, mine.default, mine.help) == (ref.metavar, ref.type, ref.default, ref.help)


# -- behaviour, every verb ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, converted_job) -> dict[str, str]:
    """Small inputs of every kind: a generated 4-rank job, its JSON twin, a converted PyTorch job and a raw one."""
    from etkit.executor import SerialExecutor
    from etkit.format.jsontwin import to_json
    from etkit.generate.collective import write_collective

    root = tmp_path_factory.mktemp("conventions")
    write_collective(str(root / "ar"), "all_reduce", "64KiB", 4, executor=SerialExecutor())
    to_json(root / "ar.0.et", root / "ar.0.json")
    return {"job": str(root / "ar"), "file": str(root / "ar.0.et"), "twin": str(root / "ar.0.json"),
            "torch": str(converted_job("tp_transformer_ws2")), "raw": str(PYTORCH_JOBS / "tp_transformer_ws2"),
            "text": str(UPSTREAM / "mlcommons-chakra" / "eg_converter" / "input_files" / "Text" / "AllReduce_1MB.txt")}


def _raw(i: dict[str, str], kind: str) -> str:
    return str(next(Path(i["raw"]).glob(f"rank-0.{kind}.json*")))


#: One small run of each verb, given the inputs and an output folder; the verbs that need PyTorch traces run
#: on the shared ones. ``collect example``, ``demo`` and ``replay`` spawn ranks: their runs are in
#: tests/pytorch/test_collect.py, tests/cli/test_demo.py and tests/replay.
SAMPLES: dict[str, Callable[[dict[str, str], Path], list[str]]] = {
    "info": lambda i, o: [i["job"]],
    "validate": lambda i, o: [i["job"]],
    "to-json": lambda i, o: [i["file"], "-o", str(o / "x.json")],
    "from-json": lambda i, o: [i["twin"], "-o", str(o / "x.et")],
    "link": lambda i, o: ["--host", _raw(i, "et"), "--kineto", _raw(i, "kineto"), "-o", str(o / "l.json")],
    "convert pytorch": lambda i, o: [i["raw"], "-o", str(o / "c")],
    "convert kineto": lambda i, o: [_raw(i, "kineto"), "-o", str(o / "k")],
    "convert text": lambda i, o: [i["text"], "-o", str(o / "t"), "--ranks", "4"],
    "generate micro": lambda i, o: ["--ranks", "2", "-o", str(o / "m"), "--case", "two_comp_nodes_independent"],
    "generate collective": lambda i, o: ["--type", "all_gather", "--ranks", "2", "-o", str(o / "g")],
    "generate llm": lambda i, o: ["--layers", "1", "--tp", "2", "-o", str(o / "l")],
    "generate dlrm": lambda i, o: ["--ranks", "2", "--tables", "2", "-o", str(o / "d")],
    "generate llm-serve": lambda i, o: ["--layers", "2", "--tp", "2", "--rate", "20", "--count", "4",
                                        "--prompt-len", "64", "--output-len", "4", "-o", str(o / "s")],
    "analyze": lambda i, o: [i["job"], "--top", "2"],
    "diff": lambda i, o: [i["job"], i["job"]],
    "timeline": lambda i, o: [i["job"], "-o", str(o / "t.json")],
    "graph": lambda i, o: [i["file"], "-o", str(o / "g.dot")],
    "report": lambda i, o: [i["job"], "-o", str(o / "r.html")],
    "simulate": lambda i, o: [i["job"], "--preset", "hgx-h100"],
    "calibrate": lambda i, o: ["--from-trace", i["torch"], "-o", str(o / "n.yml")],
    "anonymize": lambda i, o: [i["job"], "-o", str(o / "anon")],
    "scale": lambda i, o: [i["job"], "--dp", "2", "-o", str(o / "half")],
    "export astra-sim": lambda i, o: [i["job"], "-o", str(o / "astra")],
}
SPAWNING = {"collect example", "demo", "replay"}
RUNNABLE = [v for v in VERBS if " ".join(v) in SAMPLES]


def test_every_verb_has_a_sample_run():
    missing = {" ".join(v) for v in VERBS} - set(SAMPLES) - SPAWNING
    assert not missing, f"add a small run of {sorted(missing)} to SAMPLES (the conventions are checked on it)"


def _run(verb: tuple[str, ...], extra: list[str], inputs: dict[str, str], out: Path, capsys) -> tuple[int, str, str]:
    argv = [*verb, *SAMPLES[" ".join(verb)](inputs, out), *extra]
    if _option(VERBS[verb], "--workers"):
        argv += ["-j", "1"]
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.shared_data
@pytest.mark.parametrize("verb", RUNNABLE, ids=" ".join)
def test_quiet_hides_progress_never_the_result(verb, inputs, tmp_path, capsys):
    code, out, err = _run(verb, ["-q"], inputs, tmp_path, capsys)
    assert code == 0, err
    assert out.strip(), f"{' '.join(verb)} -q printed no result"
    assert "━" not in err, "a progress bar under -q"


@pytest.mark.shared_data
@pytest.mark.parametrize("verb", [v for v in RUNNABLE if _option(VERBS[v], "--json")], ids=" ".join)
def test_json_dash_leaves_only_json_on_stdout(verb, inputs, tmp_path, capsys):
    code, out, err = _run(verb, ["--json", "-", "-q"], inputs, tmp_path, capsys)
    assert code == 0, err
    assert isinstance(orjson.loads(out), dict)


@pytest.mark.shared_data
@pytest.mark.parametrize("verb", RUNNABLE, ids=" ".join)
def test_a_wrong_option_is_one_line_with_the_verbs_own_usage(verb, inputs, tmp_path, capsys):
    name = " ".join(verb)
    with pytest.raises(SystemExit) as stopped:
        _run(verb, ["--quiett"], inputs, tmp_path, capsys)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"etkit {name}: error: unrecognized arguments: --quiett (did you mean '--quiet'?)")
    assert f"(usage: etkit {name} " in err and f"see etkit {name} --help)" in err


#: Arguments that parse for the verbs that spawn ranks (nothing runs: the wrong option stops them first).
SPAWN_ARGS = {"collect example": ["--workload", "ddp"], "demo": [], "replay": ["job"]}


@pytest.mark.parametrize("verb", [v for v in VERBS if " ".join(v) in SPAWNING], ids=" ".join)
def test_a_wrong_option_is_one_line_for_the_spawning_verbs_too(verb, capsys):
    with pytest.raises(SystemExit):
        main([*verb, *SPAWN_ARGS[" ".join(verb)], "--quiett"])
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"etkit {' '.join(verb)}: error: unrecognized arguments")


def test_a_typo_of_a_verb_is_one_line_with_the_closest_verb(capsys):
    with pytest.raises(SystemExit):
        main(["simulat", "x"])
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "(did you mean 'simulate'?)" in err


@pytest.mark.shared_data
@pytest.mark.parametrize("verb", [v for v in RUNNABLE if _option(VERBS[v], "--output")], ids=" ".join)
def test_a_verb_that_writes_has_a_default_output_name(verb, inputs, tmp_path, capsys, monkeypatch):
    """Without -o, a verb writes its documented default name into the current folder (or beside the input)."""
    name = " ".join(verb)
    argv = SAMPLES[name](inputs, tmp_path)
    if "-o" in argv:
        at = argv.index("-o")
        argv = argv[:at] + argv[at + 2:]
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    if name in ("to-json", "from-json"):  # beside the input: use a copy of it
        src = Path(argv[0])
        shutil.copy(src, work / src.name)
        argv[0] = src.name
    before = set(work.iterdir())
    code = main([*verb, *argv, "-q"] + (["-j", "1"] if _option(VERBS[verb], "--workers") else []))
    assert code == 0, capsys.readouterr().err
    assert set(work.iterdir()) - before, f"{name} wrote nothing into the current folder"
