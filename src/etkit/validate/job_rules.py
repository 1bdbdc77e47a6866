"""Rules that tie ranks together, as the one cross-rank matcher (:mod:`etkit.model.matching`) finds them.

Rules: ``unknown-group``, ``group-rank-missing``, ``not-in-group``, ``collective-missing``,
``collective-mismatch``, ``collective-size-mismatch`` (a warning for all-to-all, gather and scatter,
whose per-rank sizes legitimately differ), ``p2p-bad-peer``, ``unmatched-send``, ``unmatched-recv``,
``p2p-size-mismatch``. ``simulate`` and ``replay`` refuse a job with the same errors.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..model.groups import ProcessGroups
from ..model.matching import CommRecord, match_comm
from .findings import Finding

__all__ = ["check_job"]


def check_job(records: Mapping[int, CommRecord], groups: ProcessGroups, world: int) -> list[Finding]:
    """Every cross-rank finding: collectives agree within each process group, sends meet receives."""
    return [Finding(m.rank, m.node_id, m.rule, m.message, m.severity)
            for m in match_comm(records, groups, world, instances=False).mismatches]
