"""Trace names reach a terminal shown, never obeyed; and they never make SVG or GraphML invalid XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .helpers import cli, small_job

#: What a hostile name can do: set the window title, clear the screen, return to the line start, reverse text,
#: ring the bell, hide text, and (XML) a NUL and a form feed.
EVIL = "op\x1b]0;owned\x07\x1b[2J\rfake\u202eedoc\x1b[8mhidden\x00\x0c"
RAW = ("\x1b", "\x07", "\r", "\u202e", "\x00", "\x0c")


def _clean(text: str) -> None:
    for char in RAW:
        assert char not in text, (char, text[:200])


@pytest.fixture
def evil_job(tmp_path: Path) -> Path:
    return small_job(tmp_path, "job", names=(EVIL, "bwd[/x] [bold]"))


@pytest.mark.parametrize("verb", ["analyze", "diff", "info", "validate", "simulate", "timeline", "graph"])
def test_text_output_escapes_trace_names(tmp_path: Path, capsys, evil_job: Path, verb: str) -> None:  # type: ignore[no-untyped-def]
    argv = {"analyze": ["analyze", evil_job, "-j", "1"], "diff": ["diff", evil_job, evil_job],
            "info": ["info", evil_job, "-j", "1"], "validate": ["validate", evil_job, "-j", "1"],
            "simulate": ["simulate", evil_job, "--preset", "hgx-h100", "-j", "1"],
            "timeline": ["timeline", evil_job, "-o", tmp_path / "t.json"],
            "graph": ["graph", f"{evil_job}.0.et", "-o", tmp_path / "g.dot"]}[verb]
    done = cli(capsys, *argv, "-q")
    assert done.rc in (0, 1), done.err
    _clean(done.out)
    _clean(done.err)
    if verb in ("analyze", "diff"):
        assert "\\x1b]0;owned" in done.out  # shown, escaped


def test_an_error_message_escapes_what_it_quotes(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    done = cli(capsys, "info", tmp_path / "no\x1b[2Jsuch\rjob")
    assert done.rc == 2 and "\\x1b[2J" in done.err
    _clean(done.err)
    assert len(done.err.strip().splitlines()) == 1


def test_rich_markup_in_metadata_is_shown_not_interpreted(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from etkit.format.attrs import make_attr
    from etkit.format.schema import GlobalMetadata
    from etkit.format.stream import write_trace

    from ..builders import node

    meta = GlobalMetadata(version="1.0.0")
    meta.attr.append(make_attr("note", "[/oops] [bold red]x\x1b[31m"))
    write_trace(tmp_path / "m.0.et", meta, [node(1)])
    done = cli(capsys, "info", tmp_path / "m", "-j", "1", "-q")
    assert done.rc == 0, done.err
    assert "[/oops] [bold red]x\\x1b[31m" in done.out
    _clean(done.out)


@pytest.mark.parametrize("fmt", ["svg", "graphml"])
def test_graph_files_stay_valid_xml(tmp_path: Path, capsys, evil_job: Path, fmt: str) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / f"g.{fmt}"
    assert cli(capsys, "graph", f"{evil_job}.0.et", "-o", out, "-q").rc == 0
    root = ET.parse(out).getroot()  # raises on a character XML forbids
    names = " ".join(el.text or "" for el in root.iter())
    assert fmt != "graphml" or "\\x1b]0;owned" in names


def test_the_report_charts_stay_valid_xml(tmp_path: Path, capsys, evil_job: Path) -> None:  # type: ignore[no-untyped-def]
    import re

    out = tmp_path / "r.html"
    assert cli(capsys, "report", evil_job, "-o", out, "-q").rc == 0
    page = out.read_text()
    svgs = re.findall(r"<svg\b.*?</svg>", page, flags=re.S)
    assert svgs
    for svg in svgs:
        ET.fromstring(svg)


def test_the_escapes_are_readable_and_keep_ordinary_text() -> None:
    from etkit.safetext import printable, xml_text

    assert printable("a\tb\nc é 😀") == "a\tb\nc é 😀"
    assert printable("x\ny", newlines=False) == "x\\x0ay"
    assert printable("\x1b[2J\u202e\ud800") == "\\x1b[2J\\u202e\\ud800"
    assert xml_text("a\x00b\tc\x1bd") == "a\\x00b\tc\\x1bd"


def test_a_printable_text_needs_no_pattern() -> None:
    """The fast path (``str.isprintable``: no pattern compiled) is exact: no character ``isprintable`` accepts is
    one the escape sets hold, over every code point."""
    import re

    from etkit import safetext

    sets = [re.compile(safetext._UNSAFE), re.compile(safetext._UNSAFE[:-1] + "\n]"), re.compile(safetext._NOT_XML)]
    text = "".join(chr(c) for c in range(0x110000) if chr(c).isprintable())
    assert not any(p.search(text) for p in sets)
    assert safetext.printable(text) is text and safetext.xml_text(text) is text
