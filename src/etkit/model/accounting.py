"""Where a rank's time goes: the one accounting that ``simulate``, ``analyze``, ``report`` and ``timeline`` share.

A rank's span (its first start to its last end) is cut into six categories that add up to it exactly,
in integer nanoseconds. Every instant goes to the first of these that holds at that instant:

1. **compute**: device compute runs (a GPU kernel; on a rank with no device compute at all, such as
   a CPU/gloo job, its host ops are its compute);
2. **communication** moving data: a collective from the moment its last member arrived, a send from
   its start, a receive from the moment its send had started. Communication at an instant with no
   compute is **exposed**; communication under compute is **overlapped** (reported beside the six,
   it is part of compute's time);
3. **memory**: copies and sets (``MEM_LOAD``/``MEM_STORE`` nodes, ``cudaMemcpy``/``cudaMemset``);
4. **waiting**: blocked on a peer: the part of a collective before its last member arrived, a receive
   posted before its send started. A receive posted at t = 0 whose send comes 4 s later waits 4 s;
   it does not communicate for 4 s;
5. **host**: host (CPU) ops on a rank that also has device compute, when nothing above runs;
6. **idle**: nothing runs (the rest).

Intervals are what actually ran at each instant: profiled ranges that nest (a ``ProfilerStep#``
holding its ops) are given as the exclusive segments of their innermost op (see
:mod:`etkit.analyze.tracks`), so a caller never hides what it called.

:func:`account` is the only implementation; the simulator's per-rank figures and the analyses call it
with the same inputs for the same schedule, so they report the same numbers.
"""

from __future__ import annotations

from dataclasses import asdict, fields

import numpy as np

from ..records import record
from .kinds import KIND_NAMES, NodeKind

__all__ = ["COMPUTE", "CPU", "COMM", "MEMORY", "OTHER", "KIND_NAMES", "CATEGORIES", "TimeAccount", "account",
           "union_intervals", "union_length", "host_counts_as_compute"]

#: Kind of a node (:class:`etkit.model.kinds.NodeKind`, as plain ints for numpy columns).
COMPUTE, CPU, COMM, MEMORY, OTHER = (int(k) for k in NodeKind)
#: The categories that add up to the span, in priority and display order.
CATEGORIES = ("compute", "exposed_comm", "memory", "waiting", "host", "idle")


def union_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the union of ``[starts, ends)``."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], e[last]


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length of the union of ``[starts, ends)`` (integer ns in, integer ns out)."""
    s, e = union_intervals(np.asarray(starts), np.asarray(ends))
    return int((e - s).sum()) if len(s) else 0


def host_counts_as_compute(kinds: np.ndarray) -> bool:
    """Whether host ops are this rank's compute: it has host ops and no device compute at all."""
    return bool((kinds == CPU).any()) and not bool((kinds == COMPUTE).any())


@record
class TimeAccount:
    """Integer nanoseconds per category for one rank (or summed over ranks); see the module docstring.

    ``compute + exposed_comm + memory + waiting + host + idle == span``; ``overlapped_comm`` is the
    communication hidden under compute (part of ``compute``).
    """

    span_ns: int = 0
    compute_ns: int = 0
    exposed_comm_ns: int = 0
    overlapped_comm_ns: int = 0
    memory_ns: int = 0
    waiting_ns: int = 0
    host_ns: int = 0
    idle_ns: int = 0

    @property
    def comm_ns(self) -> int:
        """Time communication was moving data (exposed + overlapped)."""
        return self.exposed_comm_ns + self.overlapped_comm_ns

    @property
    def busy_ns(self) -> int:
        """Span minus waiting and idle: what the rank itself spent time on."""
        return self.span_ns - self.idle_ns - self.waiting_ns

    def share(self, category: str) -> float:
        """Fraction of the span spent in ``category`` (one of :data:`CATEGORIES` or "overlapped_comm")."""
        return getattr(self, f"{category}_ns") / self.span_ns if self.span_ns else 0.0

    def __add__(self, other: TimeAccount) -> TimeAccount:
        return TimeAccount(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def account(start: np.ndarray, end: np.ndarray, kind: np.ndarray, transfer: np.ndarray | None = None, *,
            span: tuple[int, int] | None = None) -> TimeAccount:
    """The accounting of one rank from the intervals that ran on it.

    ``start``/``end``: integer ns per interval; ``kind``: :data:`COMPUTE` ... :data:`OTHER` per interval
    (host ops already turned into compute where :func:`host_counts_as_compute`); ``transfer``: per
    interval, when a communication interval began moving data (its earlier part is waiting; ignored for
    other kinds; ``None``: no waiting). ``span``: the rank's first start and last end (default: of the
    intervals given).
    """
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    kind = np.asarray(kind)
    if span is None:
        span = (int(start.min()), int(end.max())) if len(start) else (0, 0)
    first, last = span
    comm = kind == COMM
    begin = start[comm]
    if transfer is not None:
        begin = np.clip(np.asarray(transfer, dtype=np.int64)[comm], begin, end[comm])
    # the intervals of each category, highest priority first; waiting is a comm interval's part before its transfer
    parts = [(start[kind == COMPUTE], end[kind == COMPUTE]), (begin, end[comm]),
             (start[kind == MEMORY], end[kind == MEMORY]), (start[comm], begin), (start[kind == CPU], end[kind == CPU])]
    covered = []
    s_acc, e_acc = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    for s, e in parts:
        s_acc, e_acc = np.concatenate((s_acc, s)), np.concatenate((e_acc, e))
        covered.append(union_length(s_acc, e_acc))
    compute, with_comm, with_memory, with_waiting, busy = covered
    comm_alone = union_length(*parts[1])
    return TimeAccount(
        span_ns=last - first, compute_ns=compute, exposed_comm_ns=with_comm - compute,
        overlapped_comm_ns=compute + comm_alone - with_comm, memory_ns=with_memory - with_comm,
        waiting_ns=with_waiting - with_memory, host_ns=busy - with_waiting, idle_ns=(last - first) - busy)
