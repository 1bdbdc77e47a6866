"""Profiler steps: PyTorch's ``ProfilerStep#N`` range markers, the one rule for finding a trace's iterations."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache

__all__ = ["STEP_PREFIX", "step_number", "is_step_name", "step_name_codes"]

#: What every ``ProfilerStep#N`` name starts with (the Kineto event and the converted node alike).
STEP_PREFIX = "ProfilerStep#"


@cache
def _step_name() -> re.Pattern[str]:
    """The marker's pattern, compiled on first use (the analyze path reads :data:`STEP_PREFIX` alone)."""
    return re.compile(r"^ProfilerStep#(\d+)$")


def step_number(name: str) -> int | None:
    """N of ``ProfilerStep#N``; None for any other name."""
    m = _step_name().match(name)
    return int(m.group(1)) if m else None


def is_step_name(name: str) -> bool:
    """Whether ``name`` is a ``ProfilerStep#N`` marker."""
    return _step_name().match(name) is not None


def step_name_codes(strings: Sequence[str]) -> list[int]:
    """Indices of the step markers in a trace's string table (``trace.strings``)."""
    match = _step_name().match
    return [i for i, s in enumerate(strings) if match(s)]
