"""Findings of validation: what rule a node breaks, on which rank, and how serious it is."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, field
from typing import Any

from ..model.matching import ERROR, WARNING
from ..records import record

__all__ = ["Finding", "ValidationReport", "FindingSink", "ERROR", "WARNING"]


@record(frozen=True)
class Finding:
    """One broken rule. ``node_id`` is ``None`` for file-level findings."""

    rank: int
    node_id: int | None
    rule: str
    message: str
    severity: str = ERROR

    def __str__(self) -> str:
        where = f"rank {self.rank}" + (f" node {self.node_id}" if self.node_id is not None else "")
        return f"{where}: [{self.rule}] {self.message}"


class FindingSink:
    """Collects findings, keeping at most ``limit`` per (rank, rule) and counting the rest."""

    def __init__(self, rank: int, limit: int = 50) -> None:
        self.rank = rank
        self.limit = limit
        self.findings: list[Finding] = []
        self._seen: Counter[str] = Counter()

    def add(self, node_id: int | None, rule: str, message: str, severity: str = ERROR) -> None:
        self._seen[rule] += 1
        if self._seen[rule] <= self.limit:
            self.findings.append(Finding(self.rank, None if node_id is None else int(node_id), rule, message,
                                         severity))

    def done(self) -> list[Finding]:
        for rule, count in self._seen.items():
            if count > self.limit:
                severity = next(f.severity for f in self.findings if f.rule == rule)
                self.findings.append(Finding(self.rank, None, rule,
                                             f"{count - self.limit} more findings of this rule not listed", severity))
        return self.findings


@record
class ValidationReport:
    """All findings of a job. ``ok`` is true when there is no error (warnings allowed)."""

    findings: list[Finding] = field(default_factory=list)
    ranks: int = 0
    nodes: int = 0
    files: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors

    def by_rule(self) -> dict[str, int]:
        return dict(Counter(f.rule for f in self.findings))

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "ranks": self.ranks,
            "nodes": self.nodes,
            "files": self.files,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "findings": [asdict(f) for f in self.findings],
        }
