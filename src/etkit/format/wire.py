"""Vectorised protobuf wire reading shared by the whole-file decoders (``columnar``, ``jsonfast``):
varints, fixed-width fields and packed varint lists at many positions of one byte array at once.

Anything these readers do not handle raises :class:`WireFault`, and the caller falls back to
parsing record by record, so a fault here is never an error the user sees.
"""

from __future__ import annotations

import numpy as np

__all__ = ["WireFault", "varints", "fixed", "packed_varints"]


class WireFault(Exception):
    """Bytes the vectorised readers do not handle; the caller falls back to per-record parsing."""


def varints(b: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values (uint64) and byte lengths of the varints that start at ``pos``.

    Most varints (tags, small values) are one byte; only the others go round the loop again.
    """
    first = b[pos]
    value = (first & 0x7F).astype(np.uint64)
    length = np.ones(pos.size, dtype=np.int64)
    more = np.flatnonzero(first >= 0x80)
    shift = 7
    while more.size:
        if shift >= 70:
            raise WireFault("varint longer than 10 bytes")
        byte = b[pos[more] + length[more]]
        value[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
        length[more] += 1
        more = more[byte >= 0x80]
        shift += 7
    return value, length


def fixed(b: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Little-endian ``width``-byte values (fixed32/fixed64 bits) at ``pos``, as uint64."""
    win = b[pos[:, None] + np.arange(width)].astype(np.uint64)
    return (win << (8 * np.arange(width, dtype=np.uint64))).sum(axis=1, dtype=np.uint64)


def packed_varints(b: np.ndarray, off: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values of the packed varint lists ``b[off:off+length]`` (all lists, in order) and the count of
    each list. Every list must have ``length > 0``."""
    total = int(length.sum())
    if not total:
        return np.zeros(0, dtype=np.uint64), np.zeros(length.size, dtype=np.int64)
    first = np.cumsum(length) - length
    raw = b[np.repeat(off - first, length) + np.arange(total)]
    ends = raw < 0x80
    if not ends[first + length - 1].all():
        raise WireFault("packed varint crosses its list")
    starts = np.flatnonzero(np.concatenate([[True], ends[:-1]]))
    within = np.arange(total) - np.repeat(starts, np.diff(np.append(starts, total)))
    if within.max() >= 10:
        raise WireFault("packed varint too long")
    values = np.add.reduceat((raw & 0x7F).astype(np.uint64) << (np.uint64(7) * within.astype(np.uint64)), starts)
    return values, np.add.reduceat(ends.astype(np.int64), first)
