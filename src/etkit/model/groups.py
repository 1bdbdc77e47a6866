"""Process groups (communicators): which global ranks take part in a collective with a given ``pg_name``.

Groups come from a comm-groups JSON (``{"<pg_name>": [ranks...]}``, ASTRA-sim's format) or from a
PyTorch ``process_group:init`` METADATA node. ``pg_name`` "" or "0", or a name not listed with empty
ranks, means every rank of the job.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

import orjson

from ..errors import EtkitError
from ..fileio import atomic_output
from ..records import record

__all__ = ["ProcessGroups", "parse_process_group_init", "WORLD", "communicator_key"]

WORLD = "0"


def communicator_key(pg_name: str | None) -> str:
    """The group a collective with ``pg_name`` runs on: :data:`WORLD` for a missing, "" or "0" name."""
    return WORLD if pg_name in (None, "", WORLD) else pg_name


@record(frozen=True)
class ProcessGroups:
    """``pg_name`` -> sorted global ranks. An empty tuple means every rank of the job. ``listed``: a
    group's ranks in the order its source listed them, where that is not sorted (ASTRA-sim runs a
    group's collectives on a ring in that order)."""

    groups: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    listed: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def in_order(self, pg_name: str | None, world_size: int) -> tuple[int, ...]:
        """:meth:`members` in the order the group was listed."""
        return self.listed.get(pg_name) or self.members(pg_name, world_size)  # type: ignore[arg-type]

    def members(self, pg_name: str | None, world_size: int) -> tuple[int, ...]:
        """Global ranks of group ``pg_name`` in a job of ``world_size`` ranks."""
        if pg_name in (None, "", WORLD) and not self.groups.get(pg_name or WORLD):
            return tuple(range(world_size))
        ranks = self.groups.get(pg_name)  # type: ignore[arg-type]
        if ranks is None:
            raise KeyError(pg_name)
        return ranks or tuple(range(world_size))

    def __contains__(self, pg_name: object) -> bool:
        return pg_name in ("", WORLD, None) or pg_name in self.groups

    def merged(self, other: ProcessGroups) -> ProcessGroups:
        listed = {k: v for k, v in self.listed.items() if k not in other.groups}
        return ProcessGroups({**self.groups, **other.groups}, {**listed, **other.listed})

    def to_json(self) -> dict[str, list[int]]:
        return {name: list(ranks) for name, ranks in self.groups.items()}

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write as ASTRA-sim's comm-group JSON, atomically."""
        with atomic_output(path, compress=False) as out:
            out.write(orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2) + b"\n")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Iterable[int]]) -> ProcessGroups:
        given = {str(k): tuple(int(r) for r in v) for k, v in data.items()}
        return cls({k: tuple(sorted(v)) for k, v in given.items()}, _unsorted(given))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ProcessGroups:
        """Read a comm-groups JSON; a clear one-line error names the file when it is malformed."""
        try:
            data = orjson.loads(Path(path).read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise EtkitError(f"{path}: cannot read comm groups ({exc})") from None
        if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
            raise EtkitError(f'{path}: comm groups must be a JSON object {{"<pg_name>": [ranks...]}}')
        groups = {str(name): checked_ranks(ranks, f"{path}: group {str(name)[:40]!r}") for name, ranks in data.items()}
        return cls(groups, _unsorted({str(name): tuple(ranks) for name, ranks in data.items()}))


def _unsorted(given: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    return {k: v for k, v in given.items() if list(v) != sorted(v)}


def parse_process_group_init(values: str, *, where: str = "process_group:init") -> ProcessGroups:
    """Groups from the ``inputs.values`` string of a ``process_group:init`` node.

    The string is the Python ``str()`` of a one-element list holding a JSON list of
    ``{"pg_name", "ranks", ...}``; it is read with :func:`etkit.literal.parse_literal`, never evaluated.
    Text that is no such list declares no group; a group whose ranks are not a list of rank numbers
    raises :class:`EtkitError` naming ``where`` (say, the file and node) and the group.
    """
    from ..literal import LiteralError, parse_literal  # (its patterns compiled only where a host trace has groups)

    try:
        outer = parse_literal(values, what=where)
    except LiteralError:
        outer = values
    # the wrapped form is a list of JSON strings; a bare JSON list parses to its entries directly
    texts = outer if isinstance(outer, list) and all(isinstance(t, str) for t in outer) else [outer]
    groups: dict[str, tuple[int, ...]] = {}
    for text in texts:
        try:
            entries = orjson.loads(text) if isinstance(text, str) else text
        except orjson.JSONDecodeError:
            continue
        if not isinstance(entries, list):
            continue
        for entry in entries:
            if isinstance(entry, dict) and "pg_name" in entry:
                groups[str(entry["pg_name"])] = _declared_ranks(entry, where)
    return ProcessGroups(groups)


def _declared_ranks(entry: dict[str, Any], where: str) -> tuple[int, ...]:
    return checked_ranks(entry.get("ranks") or [], f"{where}: process group {str(entry['pg_name'])[:40]!r}")


def checked_ranks(ranks: object, where: str) -> tuple[int, ...]:
    """The sorted ranks of one group, by the one rule for every source of groups (comm-groups files,
    ``process_group:init`` nodes): a list of distinct non-negative integers (no floats, no booleans);
    else :class:`EtkitError` naming ``where`` and the offending value."""
    if isinstance(ranks, list) and all(type(r) is int and r >= 0 for r in ranks):
        ordered = tuple(sorted(ranks))
        twice = next((a for a, b in zip(ordered, ordered[1:]) if a == b), None)
        if twice is None:
            return ordered
        raise EtkitError(f"{where} has ranks {_shown(ranks)}; rank {twice} is listed twice (a rank is in a group once)")
    raise EtkitError(f"{where} has ranks {_shown(ranks)}; expected a list of non-negative integers")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
