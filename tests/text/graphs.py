"""Comparing graphs up to node-id renaming (a node is its label plus the labels of everything above it)."""

from __future__ import annotations

import hashlib
from collections import Counter

from etkit.model import MISSING, Trace


def labels(trace: Trace) -> dict[int, tuple]:
    """Per node id: (name, type, duration, comm_type, comm_size) -- what the graphs must agree on."""
    out = {}
    for row in range(len(trace)):
        comm_type = int(trace.comm_type[row])
        comm_size = int(trace.comm_size[row])
        out[int(trace.ids[row])] = (trace.name(row), int(trace.types[row]), int(trace.duration[row]),
                                    None if comm_type == MISSING else comm_type,
                                    None if comm_size == MISSING else comm_size)
    return out


def canonical(trace: Trace) -> Counter:
    """Multiset of (node signature, parent signatures); equal for graphs equal up to id renaming.

    A node's signature hashes its label and its parents' signatures, so it covers its whole ancestry.
    """
    own = labels(trace)
    parents = {int(trace.ids[row]): sorted(int(d) for d in trace.deps_of(row)) for row in range(len(trace))}
    assert sorted(own) == sorted(parents)
    sig: dict[int, str] = {}

    def signature(node: int) -> str:
        stack = [node]
        while stack:
            top = stack[-1]
            missing = [p for p in parents[top] if p not in sig]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            if top not in sig:
                text = repr((own[top], sorted(sig[p] for p in parents[top])))
                sig[top] = hashlib.sha1(text.encode()).hexdigest()
        return sig[node]

    return Counter((signature(n), tuple(sorted(sig[p] for p in parents[n]))) for n in own)
