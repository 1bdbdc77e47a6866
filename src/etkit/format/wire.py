"""Vectorised protobuf wire reading shared by the whole-file decoders (``columnar``, ``jsonfast``):
varints, fixed-width fields and packed varint lists at many positions of one byte array at once.

Anything these readers do not handle raises :class:`WireFault`, and the caller falls back to
parsing record by record, so a fault here is never an error the user sees.
"""

from __future__ import annotations

import numpy as np

try:
    from . import _walk as KERNEL
except ImportError:  # pragma: no cover - a build without the extension
    KERNEL = None
#: KERNEL: the byte readers in C (``etkit.format._walk``: the lean walk of :mod:`etkit.format.columnar`, frame
#: starts, packed lists, string tables), or None where the package was built without a C compiler. This is its
#: one home: every reader asks ``wire.KERNEL`` when it runs, and gives the same results with its numpy path.

__all__ = ["KERNEL", "WireFault", "int64s", "raise_packed_fault", "varints", "fixed", "packed_varints", "word_view",
           "word_varints", "LOW_BYTES", "MSBS", "bitwise_count"]


class WireFault(Exception):
    """Bytes the vectorised readers do not handle; the caller falls back to per-record parsing."""


def int64s(a: np.ndarray) -> np.ndarray:
    """``a`` as the contiguous int64 buffer the C kernel reads (no copy when it is one already)."""
    return np.ascontiguousarray(a, dtype=np.int64)


def raise_packed_fault(status: int) -> None:
    """The :class:`WireFault` of the C kernel's ``packed``/``checked`` status (0: none)."""
    if status:
        raise WireFault("packed varint crosses its list" if status == 1 else "packed varint too long")


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
    out: np.ndarray = (win << (8 * np.arange(width, dtype=np.uint64))).sum(axis=1, dtype=np.uint64)
    return out


def packed_varints(b: np.ndarray, off: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values of the packed varint lists ``b[off:off+length]`` (all lists, in order) and the count of
    each list. Every list must have ``length > 0``."""
    total = int(length.sum())
    if not total:
        return np.zeros(0, dtype=np.uint64), np.zeros(length.size, dtype=np.int64)
    if KERNEL is not None:
        status, values, counts = KERNEL.packed(b, int64s(off), int64s(length))
        raise_packed_fault(status)
        return np.frombuffer(values, dtype=np.uint64), np.frombuffer(counts, dtype=np.int64)
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


# -- word-wide reading: eight bytes at any offset at once ----------------------------------------------

#: The top bit of each byte of a word.
MSBS = np.uint64(0x8080808080808080)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_LANES = tuple((np.uint64(keep), np.uint64(move), np.uint64(shift)) for keep, move, shift in (
    (0x007F007F007F007F, 0x7F007F007F007F00, 1), (0x00003FFF00003FFF, 0x3FFF00003FFF0000, 2),
    (0x000000000FFFFFFF, 0x0FFFFFFF00000000, 4)))
#: ``LOW_BYTES[k]``: a mask of the low ``k`` bytes of a word.
LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
bitwise_count = getattr(np, "bitwise_count", None)  # numpy >= 2.0


def word_view(b: np.ndarray) -> np.ndarray:
    """A uint64 view whose element ``i`` is the 8 bytes starting at byte ``i`` of ``b`` (unaligned)."""
    view: np.ndarray = np.ndarray(shape=(b.size - 7,), dtype="<u8", buffer=b, offset=0, strides=(1,))
    return view


def word_varints(w: np.ndarray, avail: int) -> tuple[np.ndarray, np.ndarray]:
    """Varints held in the low ``avail`` bytes of the words ``w``: values and lengths (0 = longer than that)."""
    stop = ~w & MSBS & np.uint64((1 << (8 * avail)) - 1)
    low_bit = stop & (~stop + np.uint64(1))  # the terminating byte's top bit
    found = low_bit != 0
    x = w & (low_bit | (low_bit - np.uint64(1))) & _LOW7
    for keep, move, shift in _LANES:  # squeeze the 7-bit groups together
        x = (x & keep) | ((x & move) >> shift)
    if bitwise_count is not None:  # the stop bit's byte index k = the number of top bits below it
        length = bitwise_count((low_bit - np.uint64(1)) & MSBS).astype(np.int64) + 1
    else:
        top_bit = np.log2(np.where(found, low_bit, np.uint64(1)).astype(np.float64)).astype(np.int64)  # 8k+7: exact
        length = (top_bit >> 3) + 1
    return x, np.where(found, length, 0)
