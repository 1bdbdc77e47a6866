"""The columns of the nodes a conversion writes, for :func:`etkit.format.encode.encode_nodes`.

The converter decides what each node holds (:mod:`etkit.pytorch.convert`); this module keeps those
decisions as columns: tables of the distinct byte strings the nodes share (names, runs of attributes,
IOInfo strings) with an index per node, integer attributes as arrays, and dependency lists in CSR form.
The bytes are then placed for all nodes at once by :mod:`etkit.format.encode`, the one home of record
encoding, exactly as protobuf writes the same messages.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from itertools import chain
from typing import Generic, TypeVar

import numpy as np

from ..format.attrs import make_attr
from ..format.columnar import MISSING
from ..format.encode import AttrColumn, Packed, encode_strings

__all__ = ["Interned", "packed", "int_attr_columns", "io_table", "csr_lists"]


T = TypeVar("T", bound=Hashable)


class Interned(Generic[T]):
    """Distinct values, each given the index of its first appearance (``add``); ``values`` in that order."""

    def __init__(self) -> None:
        self.index: dict[T, int] = {}

    def add(self, value: T) -> int:
        found = self.index.get(value)
        if found is None:
            found = self.index[value] = len(self.index)
        return found

    def indices(self, values: Iterable[T]) -> list[int]:
        """:meth:`add` of every value."""
        index = self.index
        return [index[v] if v in index else index.setdefault(v, len(index)) for v in values]

    @property
    def values(self) -> list[T]:
        return list(self.index)


def packed(entries: Sequence[bytes]) -> Packed:
    """``entries`` as one :class:`~etkit.format.encode.Packed` table."""
    sizes = np.fromiter(map(len, entries), dtype=np.int64, count=len(entries))
    starts = np.zeros(len(entries), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return Packed.of(b"".join(entries), starts, sizes)


def int_attr_columns(name: str, values: np.ndarray, present: np.ndarray) -> list[AttrColumn]:
    """The int64 attribute ``name`` of the rows ``present``. A value that is the int64 minimum itself
    (what ``MISSING`` marks) is written too: from a table, in the same place."""
    values = np.asarray(values, dtype=np.int64)
    columns = [AttrColumn(name, "int64_val", np.where(present, values, MISSING))]
    clash = present & (values == MISSING)
    if clash.any():
        columns.append(AttrColumn(name, table=[make_attr(name, int(MISSING)).SerializeToString()],
                                  index=np.where(clash, 0, -1)))
    return columns


def io_table(values: Sequence[str], shapes: Sequence[str], types: Sequence[str], chunk: int = 1 << 10) -> Packed:
    """The IOInfo messages of ``values[k]``, ``shapes[k]``, ``types[k]`` (empty strings left out), in order;
    encoded ``chunk`` messages at a time (the encoder's working arrays are several times a chunk's bytes)."""
    n = len(values)
    # shapes and types repeat: tables of the distinct ones; values are mostly distinct (tensor ids), each
    # chunk's in message order (copied as one run)
    tables = []
    for strings in (shapes, types):
        table: Interned[str] = Interned()
        index = np.asarray(table.indices(strings), dtype=np.int64).reshape(n)
        tables.append((packed([s.encode() for s in table.values]), index))
    blobs, offsets, lengths, base = [], [], [], 0
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        fields = [(1, packed([s.encode() for s in values[a:b]]), np.arange(b - a, dtype=np.int64))]
        fields += [(number, table, index[a:b]) for number, (table, index) in ((2, tables[0]), (3, tables[1]))]
        blob, offset, length = encode_strings(b - a, fields)
        blobs.append(blob)
        offsets.append(offset + base)
        lengths.append(length)
        base += len(blob)
    if not blobs:
        return Packed.of(b"", np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    return Packed.of(b"".join(blobs), np.concatenate(offsets), np.concatenate(lengths))


def csr_lists(count: int, first: np.ndarray, second: np.ndarray, lists: dict[int, list[int]]
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per row the list ``[first, second]`` (either left out where < 0), or ``lists[row]`` where given: as
    (ptr, values), row ``r``'s list being ``values[ptr[r]:ptr[r + 1]]``."""
    sizes = (first >= 0).astype(np.int64) + (second >= 0)
    rows = np.fromiter(lists, dtype=np.int64, count=len(lists))
    lens = np.fromiter(map(len, lists.values()), dtype=np.int64, count=len(lists))
    sizes[rows] = lens
    ptr = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    values = np.empty(int(ptr[-1]), dtype=np.int64)
    plain = np.ones(count, dtype=bool)
    plain[rows] = False
    one = np.flatnonzero(plain & (first >= 0))
    values[ptr[one]] = first[one]
    two = np.flatnonzero(plain & (second >= 0))
    values[ptr[two] + (first[two] >= 0)] = second[two]
    if rows.size:
        flat = np.fromiter(chain.from_iterable(lists.values()), dtype=np.int64, count=int(lens.sum()))
        offset = np.cumsum(lens) - lens
        values[np.repeat(ptr[rows] - offset, lens) + np.arange(flat.size)] = flat
    return ptr, values
