"""Comm-group files are read by one parser with one rule (a list of distinct non-negative integers per group),
so ``validate`` refuses what ``simulate`` refuses, with the same one-line message."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import assert_clean_error, cli, small_job


@pytest.mark.parametrize("ranks, shown", [("[0, 1.0]", "1.0"), ("[0, true]", "True"), ("[0, 1, 1]", "listed twice"),
                                          ("[0, -1]", "-1"), ('["0", 1]', "'0'")],
                         ids=["float", "bool", "duplicate", "negative", "string"])
@pytest.mark.parametrize("verb", ["validate", "simulate", "analyze"])
def test_a_malformed_comm_group_file_is_refused_alike(tmp_path: Path, capsys, verb: str, ranks: str, shown: str) -> None:  # type: ignore[no-untyped-def]
    prefix = small_job(tmp_path)
    groups = tmp_path / "groups.json"
    groups.write_text(f'{{"0": [0, 1], "tp": {ranks}}}\n')
    extra = ["--preset", "hgx-h100"] if verb == "simulate" else []
    line = assert_clean_error(cli(capsys, verb, prefix, "--comm-groups", groups, *extra, "-j", "1", "-q"),
                              groups, "'tp'", shown)
    assert line.count(str(groups)) == 1
