"""The proof that nothing of the input's text reached the output: every input string searched in every output byte.

:func:`find_in_bytes` looks for many strings at once in a byte buffer: every 4-byte window of the buffer
(read as words from four offset views, not built) is hashed with numpy and looked up in a bitmap of the strings' first four bytes, the windows that
hit are checked against those four bytes themselves, and only the windows that start a string are compared with the
strings that start that way. So the cost is a few numpy passes over the
output, whatever the number of strings, and the search reads raw bytes: it does not trust any parser.
Where the C extension is built (:data:`etkit.anonymize.kernel.SCAN`), one pass in C hashes and checks every
window the same way (the same hits).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

import numpy as np

from . import kernel

__all__ = ["MIN_LENGTH", "find_in_bytes", "find_in_joined", "find_in_file", "is_text", "text_strings"]

#: Strings shorter than this are not searched (``cpu``, ``0``: too short to identify anything).
MIN_LENGTH = 4
_BITS = 20
_MULT = np.uint32(2654435761)
_CHUNK = 1 << 24
_LETTER = re.compile(r"[A-Za-z]")


def is_text(s: str) -> bool:
    """Whether ``s`` is a string the proof searches for: at least :data:`MIN_LENGTH` characters, one a letter.

    Strings of digits and punctuation only (shapes such as ``[[16, 64]]``, process-group names such as
    ``0``) are numbers the policy keeps or renumbers, not text."""
    return len(s) >= MIN_LENGTH and _LETTER.search(s) is not None


def text_strings(strings: Iterable[str]) -> set[str]:
    return {s for s in strings if is_text(s)}


def _hash(words: np.ndarray, bits: int) -> np.ndarray:
    return (words * _MULT) >> np.uint32(32 - bits)


class _Needles:
    """The needles by their first four bytes: a bitmap of those words' hashes, sized to stay in the CPU
    caches (about 16 bits per prefix, 2^16 to 2^20 bits), and the sorted words themselves, against which
    the windows that pass the bitmap are checked before any needle is compared."""

    def __init__(self, needles: Iterable[bytes]) -> None:
        self.by_prefix: dict[bytes, list[bytes]] = {}
        for n in set(needles):
            if len(n) >= MIN_LENGTH:
                self.by_prefix.setdefault(n[:4], []).append(n)
        self.bits = min(max(16, (16 * len(self.by_prefix)).bit_length()), _BITS)
        self.bitmap = np.zeros(1 << self.bits, dtype=bool)
        self.words = np.sort(np.frombuffer(b"".join(self.by_prefix), dtype="<u4"))
        if self.by_prefix:
            self.bitmap[_hash(self.words, self.bits)] = True

    def hits(self, data: bytes) -> np.ndarray:
        """Every offset of ``data`` at which a needle's first four bytes are (ascending), in one pass in C."""
        assert kernel.SCAN is not None
        return np.frombuffer(kernel.SCAN.prefix_hits(data, self.bitmap, self.bits, self.words), dtype=np.int64)

    def starts(self, words: np.ndarray) -> np.ndarray:
        """Indices of the ``words`` that are the first four bytes of a needle."""
        cand = np.flatnonzero(self.bitmap[_hash(words, self.bits)])
        w = words[cand]
        at = np.minimum(np.searchsorted(self.words, w), self.words.size - 1)
        return cand[self.words[at] == w]


def find_in_bytes(data: bytes, needles: Iterable[bytes] | _Needles) -> set[bytes]:
    """Which of ``needles`` (each at least :data:`MIN_LENGTH` bytes) occur in ``data``.

    The 4-byte windows are read as little-endian words from four views of the buffer (the windows at
    offsets 0, 4, 8, ..., then 1, 5, 9, ...), so they are not built byte by byte."""
    index = needles if isinstance(needles, _Needles) else _Needles(needles)
    found: set[bytes] = set()
    if not index.by_prefix or len(data) < MIN_LENGTH:
        return found
    if kernel.SCAN is not None:
        _compare(data, index, index.hits(data), found)
        return found
    view = memoryview(data)
    for lo in range(0, len(data) - 3, _CHUNK):
        hi = min(lo + _CHUNK + 3, len(data))  # the windows starting in [lo, lo + _CHUNK)
        hits = []
        for k in range(4):
            words = np.frombuffer(view[lo + k:lo + k + (hi - lo - k) // 4 * 4], dtype="<u4")
            hits.append(index.starts(words) * 4 + (lo + k))
        _compare(data, index, np.concatenate(hits), found)
    return found


def find_in_joined(head: bytes, body: bytes, needles: _Needles) -> set[bytes]:
    """:func:`find_in_bytes` of ``head + body`` (a file's GlobalMetadata record and its node records) without
    joining them: an occurrence lies in ``body``, or starts in ``head`` and ends in ``head`` and the first bytes
    of ``body`` (fewer than the longest needle)."""
    longest = max((len(n) for group in needles.by_prefix.values() for n in group), default=0)
    return find_in_bytes(body, needles) | find_in_bytes(head + body[:longest], needles)


def _compare(data: bytes, index: _Needles, hits: np.ndarray, found: set[bytes]) -> None:
    """Add to ``found`` the needles that start at one of ``hits`` (offsets where a needle's first four bytes are)."""
    for pos in hits.tolist():
        for needle in index.by_prefix.get(data[pos:pos + 4], ()):
            if needle not in found and data.startswith(needle, pos):
                found.add(needle)


def find_in_file(path: str | os.PathLike[str], needles: Iterable[bytes] | _Needles) -> set[bytes]:
    with open(path, "rb") as f:
        return find_in_bytes(f.read(), needles)


def needle_index(strings: Iterable[str]) -> _Needles:
    """The search structure of ``strings`` (UTF-8), built once for many files."""
    return _Needles(s.encode("utf-8", "surrogatepass") for s in strings)
