"""Streaming load of one rank for the simulator: the columns it reads, chunk by chunk, no record bytes.

:func:`load_columns` reads an ``.et`` file through :func:`etkit.format.stream.open_trace` in chunks of
``chunk`` records, decodes each chunk with the columnar decoder (:func:`etkit.format.columnar.decode_columns`;
a chunk it cannot take is parsed record by record through :meth:`Trace.from_records`), collects the
process groups declared by METADATA nodes, and joins the chunks' columns into one :class:`Trace`
without record bytes (``blob`` is empty: :meth:`Trace.node` is not available on it). So a rank costs
its columns (about 130 bytes per node plus 8 per dependency), never the file's bytes, and the file is
never held whole. :func:`load_rank` takes an already loaded :class:`Trace` the same way.
:func:`load_ranks_many` loads many rank files in order, the small plain ones read together
(:func:`etkit.model.trace.load_batches`), with each rank's communication record.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np

from ..fileio import is_gzip
from ..format.columnar import HOT_INT_ATTRS, MISSING, Columns, decode_columns, join_columns
from ..format.stream import encode_varint, open_trace
from ..model.groups import ProcessGroups
from ..model.job import groups_from_batch, groups_from_trace
from ..model.matching import CommRecord, comm_record, comm_records
from ..model.trace import Trace, load_batches, load_trace
from ..records import record

__all__ = ["RankColumns", "load_columns", "load_ranks_many", "CHUNK_RECORDS"]

#: Records decoded at a time (0.4-2 MiB of record bytes for converted PyTorch traces; the decoder needs about
#: ten times a chunk's bytes while it works).
CHUNK_RECORDS = 1 << 12
#: Chunks below this many records are parsed record by record (faster there, the same columns).
SMALL_CHUNK = 256
#: Integer attribute columns the simulator reads (the others are dropped while loading).
_KEPT_INTS = ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "num_ops", "tensor_size", "tid")
#: The attributes decoded (the others are never made columns).
_KEPT_ATTRS = (*_KEPT_INTS, "is_cpu_op", "pg_name")
_EMPTY = np.empty(0, dtype=np.int64)


@record
class RankColumns:
    """One rank as the simulator loads it: a record-less :class:`Trace` and the groups its METADATA nodes declare."""

    trace: Trace
    groups: ProcessGroups


#: Plain files up to this size (a chunk's worth of bytes) are read whole and decoded in one vectorised pass
#: (:func:`etkit.model.trace.load_trace`, no Python step per record); bigger ones, gzip files and pipes are
#: streamed in chunks, never held whole.
WHOLE_FILE_BYTES = 1 << 21


def load_columns(path: str | os.PathLike[str], chunk: int | None = None, *, names: bool = True) -> RankColumns:
    """Stream ``path`` in chunks of ``chunk`` records (default :data:`CHUNK_RECORDS`) into a record-less
    :class:`Trace` (see the module docstring); without ``chunk``, a small plain file is read whole.
    ``names=False``: the node names may be left undecoded (as :func:`~etkit.model.trace.load_trace` says:
    ``name_idx`` -1, ``strings`` the ``pg_name`` values), for callers that read none (a rank's shape)."""
    if chunk is None and _small_plain_file(path):
        return _kept(load_trace(path, names=names, attrs=_KEPT_ATTRS))
    chunk = chunk or CHUNK_RECORDS
    parts: list[Columns] = []
    groups = ProcessGroups()
    with open_trace(path) as reader:
        batch: list[tuple[int, int, bytes]] = []
        for item in reader.records_with_position():
            batch.append(item)
            if len(batch) >= chunk:
                groups = groups.merged(_add_chunk(parts, batch, reader.metadata_record, str(path), names))
                batch = []
        if batch or not parts:
            groups = groups.merged(_add_chunk(parts, batch, reader.metadata_record, str(path), names))
        trace = _trace(join_columns(parts), b"", _EMPTY, _EMPTY, str(path), reader.metadata)
        trace.metadata_record = reader.metadata_record
    return RankColumns(trace, groups)


def _small_plain_file(path: str | os.PathLike[str]) -> bool:
    try:
        info = os.stat(path)
        return stat.S_ISREG(info.st_mode) and info.st_size <= WHOLE_FILE_BYTES and not is_gzip(path)
    except OSError:
        return False  # the streaming reader words the error


def load_ranks_many(ranks: Sequence[tuple[int, str | os.PathLike[str]]], *,
                    names: bool = True) -> Iterator[tuple[RankColumns, CommRecord]]:
    """:func:`load_columns` (with ``names``) of each ``(rank, path)``, in order, with the rank's communication
    (:func:`~etkit.model.matching.comm_record`). Consecutive small plain files are read and decoded together
    (:func:`etkit.model.trace.load_batches`): their groups and communication come from each batch's joined columns
    at once; the others are streamed one by one. An unreadable file raises its error after the ranks of the batches
    before it."""
    run: list[tuple[int, str | os.PathLike[str]]] = []
    for rank, path in ranks:
        if _small_plain_file(path):
            run.append((rank, path))
            continue
        yield from _loaded_together(run, names)
        run = []
        loaded = load_columns(path, names=names)
        yield loaded, comm_record(loaded.trace, rank)
    yield from _loaded_together(run, names)


def _loaded_together(run: list[tuple[int, str | os.PathLike[str]]], names: bool) -> Iterator[tuple[RankColumns, CommRecord]]:
    at = 0
    for batch in load_batches([path for _, path in run], names=names, attrs=_KEPT_ATTRS):
        ranks = [rank for rank, _ in run[at:at + len(batch.paths)]]
        at += len(batch.paths)
        for trace, groups, comm in zip(batch.traces(), groups_from_batch(batch), comm_records(batch, ranks),
                                         strict=True):
            yield _kept(trace, groups), comm


def _kept(whole: Trace, groups: ProcessGroups | None = None) -> RankColumns:
    """The :class:`RankColumns` of a whole loaded trace (whose METADATA nodes declare ``groups``, found when not
    given): its record bytes and unread columns dropped."""
    if groups is None:
        groups = groups_from_trace(whole)
    kept = Columns(**whole.node_columns(), ints={k: getattr(whole, k) for k in _KEPT_INTS})
    trace = _trace(kept, b"", _EMPTY, _EMPTY, whole.path, whole.metadata)
    trace.metadata_record = whole.metadata_record
    return RankColumns(trace, groups)


def _add_chunk(parts: list[Columns], batch: list[tuple[int, int, bytes]], meta_record: bytes, path: str,
               names: bool) -> ProcessGroups:
    """Decode one chunk of records, append its kept columns to ``parts``; returns the groups it declares."""
    lengths = np.fromiter((len(p) for _, _, p in batch), dtype=np.int64, count=len(batch))
    heads = [encode_varint(n) for n in lengths.tolist()]
    head_len = np.fromiter((len(h) for h in heads), dtype=np.int64, count=len(heads))
    frame_start = np.zeros(len(batch), dtype=np.int64)
    if len(batch) > 1:
        np.cumsum((head_len + lengths)[:-1], out=frame_start[1:])
    rec_off = frame_start + head_len
    buf = b"".join(h + p for h, (_, _, p) in zip(heads, batch))
    # the vectorised decoder's fixed cost outweighs its speed on a few records: parse those one by one
    cols = (decode_columns(buf, frame_start, rec_off, lengths, names=names, attrs=_KEPT_ATTRS)
            if len(batch) >= SMALL_CHUNK else None)
    if cols is None:  # few records, or something the vectorised decoder does not take: per-record parsing
        whole = Trace.from_records(meta_record, batch, path=path)
        cols = Columns(**whole.node_columns(), ints={k: getattr(whole, k) for k in _KEPT_INTS})
        buf, rec_off = whole.blob, whole.rec_off
    kept = Columns(**cols.node_columns(), ints={k: cols.ints[k] for k in _KEPT_INTS})
    parts.append(kept)
    return groups_from_trace(_trace(kept, buf, rec_off, lengths, path, None))


def _trace(cols: Columns, blob: bytes, rec_off: np.ndarray, rec_len: np.ndarray, path: str, metadata) -> Trace:
    """A :class:`Trace` over ``cols``; integer columns the simulator does not read are a read-only view of MISSING."""
    missing = np.broadcast_to(np.asarray(MISSING, dtype=np.int64), cols.ids.shape)
    return Trace(**cols.node_columns(), metadata_message=metadata,
                 **cast("dict[str, Any]", {k: cols.ints.get(k, missing) for k in HOT_INT_ATTRS}), blob=blob, rec_off=rec_off, rec_len=rec_len,
                 path=path)
