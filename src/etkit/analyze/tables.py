"""Results as tables a user can load: CSV files (``etkit analyze --csv DIR``) and pandas DataFrames.

Every analysis result has ``tables()``, a list of :class:`Table` (a name, column names and rows of plain
values: integer ns, floats, strings). :func:`write_csv` writes each as ``DIR/<name>.csv`` (atomically);
:meth:`Table.to_pandas` and :func:`to_pandas` build DataFrames when pandas is installed (etkit does not
need it: ``pip install etkit[tables]``).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from ..errors import OptionError, UsageError
from ..fileio import atomic_output
from ..records import record

try:  # the CSV lines in C (the same bytes as _csv_body's, which takes its place without it)
    from . import _tables as KERNEL
except ImportError:  # pragma: no cover - built where a compiler is
    KERNEL = None

__all__ = ["Table", "write_csv", "to_pandas"]


@record
class Table:
    name: str
    columns: list[str]
    rows: Sequence[Sequence[Any]] = field(default_factory=list)

    def csv_text(self) -> str:
        """The table as the csv module writes it (``lineterminator="\\n"``): the header, then a line per row."""
        return self.csv_bytes().decode("utf-8")

    def csv_bytes(self) -> bytes:
        """:meth:`csv_text` in UTF-8 (what :func:`write_csv` writes), the rows' lines made in C where it was built."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(self.columns)
        width = len(self.columns)
        if KERNEL is not None and width >= 2:  # (a lone empty field is written quoted: _csv_body's rule)
            body = KERNEL.body(self.rows, width, _Quoter(writer, buf))
            if body is not None:
                return buf.getvalue().encode("utf-8") + body
        else:
            text = _csv_body(self.rows, width, writer, buf)
            if text is not None:
                return (buf.getvalue() + text).encode("utf-8")
        writer.writerows(self.rows)
        return buf.getvalue().encode("utf-8")

    def to_pandas(self):  # type: ignore[no-untyped-def]
        """The table as a ``pandas.DataFrame`` (pandas must be installed)."""
        try:
            import pandas as pd
        except ImportError:
            raise UsageError("to_pandas() needs pandas, which etkit does not install: pip install pandas "
                             "(or etkit[tables])") from None
        return pd.DataFrame([list(r) for r in self.rows], columns=self.columns)


class _Quoter:
    """``quoter(s)``: the field ``s`` as ``writer`` writes it (quoted: ``s`` holds a comma, a quote or a line
    break), each distinct one asked of the writer once. ``buf`` is the writer's buffer, left as it was found."""

    def __init__(self, writer: Any, buf: io.StringIO) -> None:
        self.writer, self.buf, self.done = writer, buf, {}  # type: ignore[var-annotated]

    def __call__(self, value: str) -> str:
        text = self.done.get(value)
        if text is None:
            buf, start = self.buf, self.buf.tell()
            self.writer.writerow((value, ""))  # "<field>,\n": the field as written on any row
            text = self.done[value] = buf.getvalue()[start:-2]
            buf.seek(start)
            buf.truncate()
        return text


def _csv_body(rows: Sequence[Sequence[Any]], width: int, writer: Any, buf: io.StringIO) -> str | None:
    """What ``writer.writerows(rows)`` writes, a column at a time: every field of a column of ints or floats
    as the csv module writes a number (``str``, ``repr``: ``%d``, ``%r``), a column of strings through a table
    of each distinct string as the csv module quotes it (written once, by ``writer``); each row by one format. ``None`` (nothing written)
    for anything else: rows of other widths, other types, a single column (an empty field alone on its row
    is written quoted)."""
    if width < 2 or not rows or any(len(row) != width for row in rows):
        return None
    fields: list[Iterable[Any]] = []
    formats: list[str] = []  # a row is written as ",".join(formats) % its fields (%d: str, %r: repr)
    for column in zip(*rows):
        kinds = set(map(type, column))
        if kinds == {int}:
            fields.append(column)
            formats.append("%d")
        elif kinds == {float}:
            fields.append(column)
            formats.append("%r")
        elif kinds == {str}:
            quoter = _Quoter(writer, buf)
            quoted = {value: quoter(value) if ("," in value or '"' in value or "\n" in value or "\r" in value)
                      else value for value in set(column)}  # (nothing to quote: the csv module writes it as it is)
            fields.append(map(quoted.__getitem__, column))
            formats.append("%s")
        else:
            return None
    return "\n".join(map(",".join(formats).__mod__, zip(*fields))) + "\n"


def write_csv(tables: Iterable[Table], folder: str | os.PathLike[str]) -> list[Path]:
    """Write every table as ``<folder>/<name>.csv`` (the folder is created); returns the paths."""
    root = Path(folder)
    if root.exists() and not root.is_dir():
        raise OptionError("{folder} is a file: give a folder (it is created if missing)", folder=str(root))
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for table in tables:
        path = root / f"{table.name}.csv"
        with atomic_output(path, compress=False) as out:
            out.write(table.csv_bytes())
        paths.append(path)
    return paths


def to_pandas(tables: Iterable[Table]) -> dict[str, Any]:
    """``{name: DataFrame}`` of ``tables``."""
    return {t.name: t.to_pandas() for t in tables}
