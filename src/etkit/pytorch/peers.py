"""Settling send/recv peers across the ranks of a job when one rank alone cannot.

A ``c10d::send``/``recv_`` names its peer as a rank of its process group, and gloo traces do not record
which group a call used. On a rank that belongs to several groups the converter tries each of them
(:meth:`etkit.pytorch.convert._Converter._p2p_group`); when they give different global peers the call
stays open. Its partner can settle it: a send from rank ``r`` to one of the candidates ``c`` is possible
only if rank ``c`` has a recv of the same tag and size that may come from ``r`` (and the other way
round). A candidate that is the only one with such a partner is the peer; settling one call can settle
others, so this runs to a fixed point. Calls it cannot settle keep the converter's warning.
"""

from __future__ import annotations

from .convert import P2PCall, RankReport

__all__ = ["match_p2p_peers"]

_PARTNER = {"SEND": "RECV", "RECV": "SEND"}


def match_p2p_peers(reports: list[RankReport]) -> dict[int, dict[int, tuple[str, int]]]:
    """Rank -> {host op id -> (pg_name, global peer)} for every open send/recv that its partners settle."""
    calls = {rep.rank: [P2PCall(c.kind, c.node, dict(c.peers), c.tag, c.size) for c in rep.p2p] for rep in reports}
    settled: dict[int, dict[int, tuple[str, int]]] = {}
    progress = True
    while progress:
        progress = False
        for rank, mine in calls.items():
            for call in mine:
                if len(call.peers) < 2:
                    continue
                fitting = {peer: pg for peer, pg in call.peers.items() if _has_partner(calls.get(peer, ()), call, rank)}
                if len(fitting) == 1:
                    ((peer, pg),) = fitting.items()
                    call.peers = {peer: pg}
                    settled.setdefault(rank, {})[call.node] = (pg, peer)
                    progress = True
    return settled


def _has_partner(theirs: object, call: P2PCall, rank: int) -> bool:
    want = _PARTNER[call.kind]
    return any(other.kind == want and other.tag == call.tag and other.size == call.size and rank in other.peers
               for other in theirs)  # type: ignore[attr-defined]
