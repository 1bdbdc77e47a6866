"""The CSV lines of an analysis table's rows (``_tables.c``), or None where the csv module must write them."""

from collections.abc import Callable, Sequence
from typing import Any

def body(rows: Sequence[Sequence[Any]], width: int, quoted: Callable[[str], str], /) -> bytes | None: ...
