"""Closest-name suggestions and warnings about names etkit does not know (config keys, options, kinds)."""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Collection, Iterable

from .errors import EtkitWarning

__all__ = ["closest", "did_you_mean", "warn", "warn_unknown_keys"]


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice most like ``name`` (a typo of it), or None when none is close."""
    found = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    best = closest(name, choices)
    return f" (did you mean {best!r}?)" if best else ""


def warn(message: str) -> None:
    """Warn the user (:class:`EtkitWarning`; the CLI prints one line on stderr)."""
    warnings.warn(EtkitWarning(message), stacklevel=3)


def warn_unknown_keys(data: Iterable[str], known: Collection[str], source: str, what: str,
                      consequence: str = "ignored") -> list[str]:
    """Warn once per key of ``data`` not in ``known`` (with the closest known key); returns those keys."""
    unknown = [str(k) for k in data if k not in known]
    for key in unknown:
        warn(f"{source}: unknown {what} key {key!r}{did_you_mean(key, known)}; {consequence}")
    return unknown
