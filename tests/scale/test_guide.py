"""The worked examples of docs/guide/share-scale.md print what the guide shows (times and rates aside)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex

import pytest

from ..conftest import PYTORCH_JOBS, REPO

GUIDE = REPO / "docs" / "guide" / "share-scale.md"
_TIMING = re.compile(r" in [\d.]+ s \([\d,]+ nodes/s\)")
#: the number of input strings searched counts the folders of the input's path, which differ per run
_SEARCHED = re.compile(r"(searched in every output byte: )[\d,]+")


def _examples() -> list[tuple[str, list[str]]]:
    """Every ``$ etkit ...`` command of the guide's console blocks with the lines it shows."""
    out: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", GUIDE.read_text(), flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            elif out:
                out[-1][1].append(line)
    return out


def _run(command: str) -> tuple[int, list[str]]:
    from etkit.cli.main import main

    pipeline = [p.strip() for p in command.split("|")]
    argv = shlex.split(pipeline[0].replace("../shared/data/pytorch", str(PYTORCH_JOBS)))
    assert argv[0] == "etkit"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv[1:])
    lines = (stdout.getvalue() + stderr.getvalue()).splitlines()
    for stage in pipeline[1:]:  # the guide's filters: tail -N, head -N, grep WORD
        verb, arg = stage.split(None, 1)
        lines = lines[-int(arg.lstrip("-")):] if verb == "tail" else lines[:int(arg.lstrip("-"))] if verb == "head" \
            else [x for x in lines if arg in x]
    return code, lines


@pytest.mark.shared_data
@pytest.mark.slow
def test_the_guide_examples_print_what_it_shows(tmp_path) -> None:
    examples = _examples()
    assert len(examples) >= 15 and any(c.startswith("etkit scale") for c, _ in examples)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for command, shown in examples:
            code, printed = _run(command)
            if command.startswith("etkit calibrate"):  # its fit report is not shown in the guide
                assert code == 0
                continue
            assert code == (2 if shown and shown[0].startswith("etkit scale:") else 0), (command, printed)
            want = [_SEARCHED.sub(r"\1<n>", _TIMING.sub(" in <t>", x)) for x in shown]
            got = [_SEARCHED.sub(r"\1<n>", _TIMING.sub(" in <t>", x)) for x in printed if "━" not in x]
            if command.startswith(("etkit anonymize", "etkit scale")):
                assert got == want, command
            else:  # other verbs' output: the lines the guide shows are among what they print
                assert all(x in got for x in want), (command, got)
    finally:
        os.chdir(cwd)
