"""``etkit --help`` and ``etkit VERB --help`` start fast: a verb imports only what it uses, and help uses
no numpy, protobuf, YAML, rich or simulator (the CPU time is in benchmarks/bench_real.py)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

#: What no ``--help`` may import (each costs 0.05-0.3 s of CPU on its own).
HEAVY = ("numpy", "google.protobuf", "yaml", "orjson", "rich", "torch", "etkit.format", "etkit.model",
         "etkit.simulate", "etkit.analyze", "etkit.generate", "etkit.pytorch", "concurrent.futures.process")

_PROBE = """
import json, runpy, sys
sys.argv = ["etkit", *sys.argv[1:]]
try:
    runpy.run_module("etkit", run_name="__main__")
except SystemExit:
    pass
sys.stdout.flush()
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _imported(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True)
    assert "usage: etkit" in proc.stdout
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def _verbs() -> list[str]:
    """Every verb and sub-verb (``generate llm``, ``convert pytorch``, ...)."""
    from etkit.cli.main import build_parser

    def walk(parser: argparse.ArgumentParser, words: str) -> list[str]:
        out = [words] if words else []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    out += walk(child, f"{words} {name}".strip())
        return out

    return sorted(walk(build_parser(), ""))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.startswith(HEAVY))


def test_info_help_imports_nothing_heavy() -> None:
    modules = _imported("info", "--help")
    assert "etkit.cli.info" in modules
    assert _heavy(modules) == []


@pytest.mark.parametrize("verb", ["", *_verbs()])
def test_every_help_imports_nothing_heavy(verb: str) -> None:
    assert _heavy(_imported(*verb.split(), "--help")) == [], verb


def test_lazy_package_names_still_import() -> None:
    import etkit

    assert etkit.load_trace.__module__ == "etkit.model.trace"
    assert {"Job", "load_job", "open_trace", "convert_job"} <= set(dir(etkit))
    with pytest.raises(AttributeError):
        etkit.no_such_name  # noqa: B018


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _options(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    """Every option and positional of a parser and its sub-verbs, with their help."""
    out: list[tuple[str, ...]] = []
    for action in parser._actions:
        out.append((*action.option_strings, str(action.dest), str(action.help)))
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out += [(name, *row) for row in _options(child)]
    return out


def test_a_command_line_builds_only_its_verb_and_the_same_parser_for_it() -> None:
    from etkit.cli.main import build_parser

    full = _subparsers(build_parser())
    for verb, parser in full.items():
        alone = _subparsers(build_parser(["-q", verb, "x", "--help"]) if verb != "demo" else build_parser([verb]))
        assert set(alone) == {verb} or (verb in {"to-json", "from-json"} and set(alone) == {"to-json", "from-json"})
        assert _options(alone[verb]) == _options(parser), verb
    for line in ([], ["--help"], ["--version"], ["nosuch", "x"]):  # no verb, or a word that is none: all of them
        assert set(_subparsers(build_parser(line))) == set(full), line


def test_a_verb_imports_no_other_verb_module() -> None:
    modules = _imported("info", "--help")
    assert sorted(m for m in modules if m.startswith("etkit.cli.") and m not in
                  {"etkit.cli.main", "etkit.cli.common", "etkit.cli.guard", "etkit.cli.info"}) == []
