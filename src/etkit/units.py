"""Units on the command line: byte sizes such as ``64MiB`` or ``1.5GB`` (shared by every verb that takes one)."""

from __future__ import annotations

import re

from .errors import UsageError

__all__ = ["parse_size", "format_bytes"]

_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes in ``text``: a number with an optional unit, ``KiB``/``MiB``/``GiB`` (binary) or
    ``KB``/``MB``/``GB`` (decimal), case-insensitive; ``1MiB`` = 1,048,576, ``1MB`` = 1,000,000."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE_RE.match(text)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _SIZE_UNITS:
            raise UsageError(f"size {text!r}: expected a number with an optional unit B, KB, MB, GB, KiB, MiB, GiB")
        number = float(m.group(1)) * _SIZE_UNITS[unit]
        if number != int(number):
            raise UsageError(f"size {text!r} is not a whole number of bytes")
        value = int(number)
    if value < 0:
        raise UsageError(f"size {text!r} is negative")
    return value


def format_bytes(value: float) -> str:
    """``value`` bytes in the largest binary unit that keeps it at or above 1: ``512 B``, ``1 MiB``, ``1.5 GiB``."""
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if n.is_integer() else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
