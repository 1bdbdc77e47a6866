"""Units on the command line: byte sizes such as ``64MiB`` or ``1.5GB`` (shared by every verb that takes one),
and the exact sums of 64-bit columns that figures printed in such units need."""

from __future__ import annotations

import re
from functools import cache

from .errors import UsageError

__all__ = ["parse_size", "format_bytes", "exact_sum", "MAX_SIZE"]

_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "pb": 10**15, "eb": 10**18,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50, "eib": 2**60}


@cache
def _size_pattern() -> re.Pattern[str]:
    """A size's pattern, compiled on first use (most commands parse no size)."""
    return re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


#: The largest size a trace can hold (``comm_size`` and ``tensor_size`` are 64-bit integers).
MAX_SIZE = (1 << 63) - 1


def parse_size(text: str | int, *, maximum: int = MAX_SIZE) -> int:
    """Bytes in ``text``: a number with an optional unit, ``KiB``/``MiB``/``GiB`` (binary) or
    ``KB``/``MB``/``GB`` (decimal), case-insensitive; ``1MiB`` = 1,048,576, ``1MB`` = 1,000,000.
    Computed exactly (``1.5KiB`` = 1,536); more than ``maximum`` (default: what a 64-bit trace field
    holds, 8 EiB) is a :class:`UsageError`."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise UsageError(f"size {text!r}: expected a number of bytes")
    if isinstance(text, int):
        value = text
    else:
        m = _size_pattern().match(text)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _SIZE_UNITS or len(m.group(1)) > 40:
            raise UsageError(f"size {text!r}: expected a number with an optional unit B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, ...")
        from fractions import Fraction  # (with decimal: 7 ms of start-up for the commands given no size)

        number = Fraction(m.group(1)) * _SIZE_UNITS[unit]
        if number.denominator != 1:
            raise UsageError(f"size {text!r} is not a whole number of bytes")
        value = int(number)
    if value < 0:
        raise UsageError(f"size {text!r} is negative")
    if value > maximum:
        raise UsageError(f"size {text!r} is more than {format_bytes(maximum)} ({maximum:,} bytes), the most it may be")
    return value


def format_bytes(value: float) -> str:
    """``value`` bytes in the largest binary unit that keeps it at or above 1: ``512 B``, ``1 MiB``, ``1.5 GiB``
    (up to EiB; a negative value keeps its sign, ``-2 B``, so that a wrong size is seen as wrong)."""
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.0f} {unit}" if n.is_integer() else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def exact_sum(values: object) -> int:
    """The exact sum of an integer numpy array as a Python int: 64-bit columns (durations, sizes) summed by
    numpy wrap around past 2**64 (two durations of 2**63 would sum to 0); this sums their high and low 32-bit
    halves separately, which cannot overflow below 2**32 elements, at numpy speed."""
    import numpy as np

    array = np.asarray(values)
    if array.size == 0:
        return 0
    if array.dtype.kind not in "iu":
        raise TypeError(f"exact_sum needs integers, not {array.dtype}")
    array = array.astype(np.uint64 if array.dtype.kind == "u" else np.int64, copy=False)
    high = int((array >> array.dtype.type(32)).sum())
    low = int((array & array.dtype.type(0xFFFFFFFF)).sum())
    return (high << 32) + low
