"""The byte loops of ``etkit anonymize`` in C: :data:`SCAN` (``etkit.anonymize._scan``), or None where it is not built.

Its callers ask ``kernel.SCAN`` when they run and give the same results with their numpy paths where it is None:
the leak search's window hashing (:func:`etkit.anonymize.leaks.find_in_bytes`), the joining of a rank's values
texts (:mod:`etkit.anonymize.rank`), the search of their canonical tensors
(:func:`etkit.anonymize.ioinfo.canonical_tensors`) and the assembly of the rewritten texts (the tensors cut out,
the other arguments ``None``, the renumbered tensors written: :class:`etkit.anonymize.ioinfo.IoRewriter`).
"""

from __future__ import annotations

try:
    from . import _scan as SCAN  # type: ignore[attr-defined]  # (a compiled module: no stub)
except ImportError:  # pragma: no cover - a build without the extension: the numpy paths
    SCAN = None

__all__ = ["SCAN"]
