"""Tables as CSV: a column at a time, exactly what the csv module writes row by row."""

from __future__ import annotations

import csv
import enum
import io
import random

import numpy as np
import pytest

from etkit.analyze import tables
from etkit.analyze.tables import Table

_STRINGS = ["", "a", "a,b", 'q"uote', "new\nline", "cr\rx", " lead", "trail ", '"', ",", "é", "\t", "x" * 50]


def _csv_module(table: Table) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(table.rows)
    return buf.getvalue()


def _value(rng: random.Random, kind: str):  # type: ignore[no-untyped-def]
    if kind == "int":
        return rng.randint(-10 ** 20, 10 ** 20)
    if kind == "float":
        return rng.choice([0.1, -0.0, 1e-7, 1e300, float("inf"), float("nan"), 2.5])
    if kind == "str":
        return rng.choice(_STRINGS)
    if kind == "other":  # what only the csv module writes: the table then goes to it whole
        return rng.choice([np.int64(3), np.float64(0.5), _Level.HIGH, _Name("n,m"), (1, 2)])
    return rng.choice([1, 2.5, "x", None, True, False, -(2 ** 63), 2 ** 64])


class _Level(enum.IntEnum):
    HIGH = 7


class _Name(str):
    pass


@pytest.fixture(params=["C", "Python"])
def writer(request, monkeypatch):  # type: ignore[no-untyped-def]
    """Each test twice: with the C lines (which must be built here) and with the Python that takes their place."""
    if request.param == "C":
        assert tables.KERNEL is not None, "etkit.analyze._tables was not built"
    else:
        monkeypatch.setattr(tables, "KERNEL", None)
    return request.param


@pytest.mark.parametrize("seed", range(3))
def test_csv_text_is_what_the_csv_module_writes(seed, writer):
    rng = random.Random(seed)
    for _ in range(200):
        kinds = [rng.choice(["int", "float", "str", "mixed", "mixed", "other"] if rng.random() < 0.3 else
                            ["int", "float", "str", "mixed"]) for _ in range(rng.randint(1, 5))]
        rows: list = [[_value(rng, k) for k in kinds] for _ in range(rng.randint(0, 20))]
        if rows and rng.random() < 0.2:
            rows[0] = rows[0][:-1]  # a short row
        if rows and rng.random() < 0.2:
            rows = [tuple(r) for r in rows]
        table = Table("t", [f"c{i}" for i in range(len(kinds))], rows)
        assert table.csv_text() == _csv_module(table)
        assert table.csv_bytes() == _csv_module(table).encode("utf-8")


@pytest.mark.shared_data
def test_a_real_analysis_writes_every_table_as_the_csv_module_does(kineto_job, writer, tmp_path):
    """HTA's NCCL trace: the critical path's 15k rows (names that need quoting among them), the launches'."""
    from etkit.analyze import analyze_job

    produced = analyze_job(kineto_job("hta-nccl")).tables()
    assert sum(len(t.rows) for t in produced) > 15_000
    written = tables.write_csv(produced, tmp_path)
    for table, path in zip(produced, written):
        assert path.read_bytes() == _csv_module(table).encode("utf-8"), table.name
