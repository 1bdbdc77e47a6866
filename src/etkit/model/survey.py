"""What a job-wide plan needs of one rank file, read with one lean walk: :func:`survey_file`.

Verbs that rewrite a whole job (``etkit anonymize``, ``etkit scale``) first look at every rank for what
their job-wide choices depend on (the process groups in use and declared, the peers, the earliest
timestamp), then rewrite each rank. That first look needs a few columns only, so it walks the records
for the node type, the top-level fields asked for and the attributes named (:func:`etkit.format.parts.record_parts`)
instead of decoding the trace: about a third of :func:`~etkit.model.trace.load_trace`'s cost.

The values are the ones :func:`~etkit.model.trace.load_trace` gives (the last of a repeated field or
attribute wins, integer attributes of any kind, an integer ``pg_name`` written out). The walk is no proof
that protobuf accepts the file: the rewrite loads it, which refuses a bad file with its precise error;
a file the walk cannot take is surveyed from :func:`~etkit.model.trace.load_trace` here. Where the decoder's
C kernel is there (:data:`etkit.format.wire.KERNEL`), the loader's lean columns (no names, the attributes
asked for only) cost less than the numpy walk: the survey is then made from them (:func:`_survey_loaded`),
with the same values.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import field

import numpy as np

from ..arrays import distinct
from ..format import schema, wire
from ..format.columnar import HOT_INT_ATTRS
from ..format.parts import record_parts
from ..format.schema import NodeType
from ..format.stream import frame_table
from ..records import record
from .groups import ProcessGroups
from .job import groups_from_trace
from .trace import Trace, load_trace, read_trace_bytes

__all__ = ["Survey", "survey_file"]

_TYPE, _START = 3, 6


@record
class Survey:
    """One rank file's node types, the process groups its nodes name and declare, and the columns asked for."""

    path: str
    types: np.ndarray  # per node (int32, as Trace.types)
    pg_names: frozenset[str]  # the pg_name values in use
    declared: ProcessGroups  # groups declared by process_group:init METADATA nodes
    start: np.ndarray | None = None  # start_time_micros per node (uint64), when asked for
    ints: dict[str, np.ndarray] = field(default_factory=dict)  # integer attributes asked for (MISSING: absent)

    def __len__(self) -> int:
        return int(self.types.size)


def survey_file(path: str | os.PathLike[str], *, ints: Sequence[str] = (), start: bool = False) -> Survey:
    """The :class:`Survey` of the rank file ``path`` (read errors are :func:`~etkit.model.trace.load_trace`'s)."""
    if wire.KERNEL is not None and all(name in HOT_INT_ATTRS for name in ints):
        return _survey_loaded(path, ints, start)
    buf = read_trace_bytes(path)
    frames = frame_table(buf, path)
    if len(frames):
        names = ("pg_name", *ints)
        parts = record_parts(buf, frames.offset[1:], frames.length[1:], names, io=False, strings=False, named_only=True,
                             scalars=(_TYPE, _START) if start else (_TYPE,))
        if parts is not None and parts.scalars is not None:
            types = (parts.scalars[_TYPE] & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)
            pg, table = parts.texts("pg_name")
            used = frozenset(table[i] for i in distinct(pg[pg >= 0]).tolist())
            rows = np.flatnonzero(types == NodeType.METADATA_NODE)
            declared = ProcessGroups()
            if rows.size:  # few: the METADATA records make a small trace of their own
                records = (buf[o:o + k] for o, k in zip(frames.offset[1:][rows].tolist(), frames.length[1:][rows].tolist()))
                declared = groups_from_trace(Trace.from_records(schema.GlobalMetadata(), records, path=path))
            return Survey(str(path), types, used, declared, parts.scalars.get(_START),
                          {name: parts.ints(name) for name in ints})
    return _survey_loaded(path, ints, start)  # an unusual or empty file: the loader's columns (or its error)


def _survey_loaded(path: str | os.PathLike[str], ints: Sequence[str], start: bool) -> Survey:
    """:func:`survey_file` from the trace loader's columns (those asked for: no names, no other attributes)."""
    trace = load_trace(path, names=False, attrs=("pg_name", *(name for name in ints if name in HOT_INT_ATTRS)))
    used = frozenset(trace.strings[i] for i in distinct(trace.pg_idx[trace.pg_idx >= 0]).tolist())
    return Survey(str(path), trace.types, used, groups_from_trace(trace), trace.start if start else None,
                  {name: getattr(trace, name) for name in ints})
