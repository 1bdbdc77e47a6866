"""Tables as CSV: a column at a time, exactly what the csv module writes row by row."""

from __future__ import annotations

import csv
import io
import random

import pytest

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
    return rng.choice([1, 2.5, "x", None, True])


@pytest.mark.parametrize("seed", range(3))
def test_csv_text_is_what_the_csv_module_writes(seed):
    rng = random.Random(seed)
    for _ in range(200):
        kinds = [rng.choice(["int", "float", "str", "mixed"]) for _ in range(rng.randint(1, 5))]
        rows = [[_value(rng, k) for k in kinds] for _ in range(rng.randint(0, 20))]
        if rows and rng.random() < 0.2:
            rows[0] = rows[0][:-1]  # a short row
        table = Table("t", [f"c{i}" for i in range(len(kinds))], rows)
        assert table.csv_text() == _csv_module(table)
