"""Profiler steps: PyTorch's ``ProfilerStep#N`` range markers, the one rule for finding a trace's iterations."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["STEP_PREFIX", "step_number", "is_step_name", "step_name_codes"]

#: What every ``ProfilerStep#N`` name starts with (the Kineto event and the converted node alike).
STEP_PREFIX = "ProfilerStep#"
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


def step_number(name: str) -> int | None:
    """N of ``ProfilerStep#N``; None for any other name."""
    m = _STEP_NAME.match(name)
    return int(m.group(1)) if m else None


def is_step_name(name: str) -> bool:
    """Whether ``name`` is a ``ProfilerStep#N`` marker."""
    return _STEP_NAME.match(name) is not None


def step_name_codes(strings: Sequence[str]) -> list[int]:
    """Indices of the step markers in a trace's string table (``trace.strings``)."""
    return [i for i, s in enumerate(strings) if _STEP_NAME.match(s)]
