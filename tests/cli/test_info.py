"""``etkit info``'s per-rank table: the rows formatted as plain text are what rich prints for the whole table."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from rich.console import Console

from etkit.analyze.summary import info
from etkit.cli import info as cli_info
from etkit.executor import SerialExecutor


def _console(width: int, color: bool) -> Console:
    return Console(file=io.StringIO(), width=width, force_terminal=color, color_system="truecolor" if color else None)


def _rows(count: int, seed: int) -> tuple[list[str], list[list[str]]]:
    rng = random.Random(seed)
    headers = ["rank", "COMM_COLL", "COMP", "Σ duration", "span"]
    rows = [[str(r), f"{rng.randrange(10 ** rng.randrange(1, 9)):,}", f"{rng.randrange(1000):,}",
             f"{rng.randrange(10 ** rng.randrange(1, 12)):,} µs", rng.choice(["-", f"{rng.randrange(10 ** 6):,} µs"])]
            for r in range(count)]
    return headers, rows


@pytest.mark.parametrize("width", [200, 80, 30])
@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("count", [0, 1, 2, 300])
def test_rank_table_is_what_rich_prints(width: int, color: bool, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    headers, rows = _rows(count, seed=count + width)
    fast, full = _console(width, color), _console(width, color)
    full.print(cli_info._rank_table("t", headers, rows))
    laid_out = []  # the rows rich laid out
    table = cli_info._rank_table
    monkeypatch.setattr(cli_info, "_rank_table", lambda *a: laid_out.append(len(a[2])) or table(*a))
    cli_info._print_rank_table(fast, "t", headers, rows)
    assert fast.file.getvalue() == full.file.getvalue()  # type: ignore[attr-defined]
    if width == 200 and count > 1:  # it fits: rich lays out one row, not all of them
        assert laid_out == [1]
    if width == 30 and count > 1:  # squeezed: the whole table goes through rich
        assert laid_out[-1] == count


@pytest.mark.shared_data
def test_info_of_a_real_job_prints_as_rich_does(upstream: Path) -> None:
    summary = info(upstream / "generated-by-stage-3a7f49c/fsdp_dp4_sp2/workload", executor=SerialExecutor())
    fast, full = _console(120, False), _console(120, False)
    cli_info.render(summary, fast)
    types = sorted(summary.by_type)
    rows = [[str(r.rank), *(f"{r.by_type.get(t, 0):,}" for t in types), f"{r.duration_us_total:,} µs",
             f"{r.span_us:,} µs" if r.timestamps else "-"] for r in summary.ranks]
    full.print(cli_info._rank_table(f"{len(summary.ranks)} rank(s), {summary.nodes:,} nodes",
                                    ["rank", *(t.replace("_NODE", "") for t in types), "Σ duration", "span"], rows))
    text = fast.file.getvalue()  # type: ignore[attr-defined]
    assert text.startswith(full.file.getvalue()) and "8 rank(s)" in text  # type: ignore[attr-defined]
