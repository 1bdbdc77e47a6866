"""Framing of ``.et`` files: ``varint32(len) || message`` records, GlobalMetadata first, then Nodes.

Reading streams the file in chunks (constant memory, gzip sniffed) and reports every fault with the
file, the record index and the byte offset of the record (in the decompressed stream for gzip files).
Writing goes through :class:`TraceWriter`, which never emits an empty node or a duplicate dependency
and replaces the target atomically.
"""

from __future__ import annotations

import contextlib
import io
import os
import zlib
from array import array
from collections.abc import Iterable, Iterator
from functools import cache, lru_cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO

from ..errors import TraceFormatError
from ..fileio import atomic_output, open_maybe_gzip
from ..lazy import LazyModule
from ..records import record

if TYPE_CHECKING:  # pragma: no cover
    import gzip

    import numpy as np

    from . import wire
    from .schema import GlobalMetadata, Node
else:  # numpy, the wire readers, columnar and protobuf are imported by the first reader or writer that needs them:
    # a writer of encoded records (from-json, the converters) needs none of them
    np = LazyModule("numpy", "np", globals())
    wire = LazyModule("etkit.format.wire", "wire", globals())
    gzip = LazyModule("gzip", "gzip", globals())  # (for its error class, when a stream read fails)

__all__ = [
    "TraceReader",
    "TraceWriter",
    "open_trace",
    "write_trace",
    "iter_records",
    "encode_varint",
    "frame",
    "scan_frames",
    "frame_table",
    "FrameTable",
]

#: What the frame readers read: a file's bytes, or a view of them (a batch's joined files without their padding).
Bytes = bytes | memoryview

_CHUNK = 1 << 20
_MAX_VARINT32_BYTES = 5


def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: Records shorter than this have a one- or two-byte length prefix (those of :func:`varint_table`).
_TABLE_VARINTS = 0x4000


@cache
def varint_table() -> list[bytes]:
    """``encode_varint(n)`` for every ``n`` below 16,384 (one or two bytes), made on first use at the speed of two
    comprehensions: 16,384 bytes objects cost ~24M instructions, which a verb that frames records one at a time
    (through :func:`_prefix`) never needs to pay."""
    return [bytes((n,)) for n in range(0x80)] + [bytes((low | 0x80, high)) for high in range(1, 0x80)
                                                 for low in range(0x80)]


#: The varint length prefix of a record of ``n`` bytes (``encode_varint(n)``), kept for the lengths met most
#: recently: a record writer meets a few hundred distinct lengths, and a hit costs less than a Python call.
_prefix = lru_cache(maxsize=_TABLE_VARINTS)(encode_varint)


def frame(record: bytes) -> bytes:
    """``record`` with its varint32 length prefix."""
    return _prefix(len(record)) + record


def _long_length(buf: Bytes, pos: int, end: int, path: str | os.PathLike[str], index: int,
                 offset: int) -> tuple[int, int]:
    """Decode a multi-byte varint32 record length at ``pos``; returns (length, position after it)."""
    length = 0
    shift = 0
    while True:
        if pos >= end:
            raise TraceFormatError(path, "truncated record length (file ends inside a varint)",
                                   record=index, offset=offset)
        if shift >= 7 * _MAX_VARINT32_BYTES:
            raise TraceFormatError(path, "record length varint longer than 5 bytes", record=index, offset=offset)
        byte = buf[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return length & 0xFFFFFFFF, pos


@record(frozen=True)
class FrameTable:
    """Where the records of a whole-file buffer lie: one int64 entry per record, in file order."""

    start: np.ndarray  # where the record's length prefix begins
    offset: np.ndarray  # where its payload begins
    length: np.ndarray  # payload length in bytes

    def __len__(self) -> int:
        return int(self.start.size)


def frame_table(buf: Bytes, path: str | os.PathLike[str], *, allow_empty: bool = False) -> FrameTable:
    """Every record of a whole-file buffer as numpy columns; same checks and messages as :func:`iter_records`.

    The records' positions depend on each other, so one tight loop follows the chain of length
    prefixes and notes only where each frame starts; lengths and payload offsets are then decoded from
    those starts with numpy (the C kernel's loop notes them as it follows the chain). Any fault sends the
    file through :func:`_scan_frames_exact`, which raises the precise error for the first faulty record.
    """
    if wire.KERNEL is not None:  # the chain walk decodes the lengths it follows: (starts, offsets, lengths)
        found = wire.KERNEL.frames(buf, True)
        if found is None:
            return _frame_table_exact(buf, path, allow_empty)
        return _checked_table(buf, path, allow_empty, *(np.frombuffer(column, dtype=np.int64) for column in found))
    starts = _frame_starts(buf)
    if starts is None:
        return _frame_table_exact(buf, path, allow_empty)
    b = np.frombuffer(buf, dtype=np.uint8)
    length = b[starts].astype(np.int64)
    header = np.ones(starts.size, dtype=np.int64)
    multi = np.flatnonzero(length >= 0x80)
    if multi.size:
        second = b[starts[multi] + 1].astype(np.int64)  # in bounds: the chain walk read it
        length[multi] = (length[multi] & 0x7F) | ((second & 0x7F) << 7)
        header[multi] = 2
        for row in multi[second >= 0x80].tolist():  # 16 KiB and longer: rare, decoded one by one
            start = int(starts[row])
            length[row], after = _varint_or_none(buf, start, len(buf))  # type: ignore[misc]
            header[row] = after - start
    return _checked_table(buf, path, allow_empty, starts, starts + header, length)


def _checked_table(buf: Bytes, path: str | os.PathLike[str], allow_empty: bool, starts: np.ndarray, offset: np.ndarray,
                   length: np.ndarray) -> FrameTable:
    """The :class:`FrameTable` of the frames found, once they are known to be the file's: none empty (unless
    ``allow_empty``), the last ending where the buffer ends; else the record-by-record scan raises the error of
    the first faulty record."""
    if (not allow_empty and not length[1:].all()) or (starts.size and int(offset[-1] + length[-1]) != len(buf)):
        return _frame_table_exact(buf, path, allow_empty)
    return FrameTable(starts, offset, length)


def _varint_or_none(buf: Bytes, pos: int, end: int) -> tuple[int, int] | None:
    """A varint32 record length at ``pos`` and the position after it; ``None`` if cut or over-long."""
    length = 0
    for shift in range(0, 7 * _MAX_VARINT32_BYTES, 7):
        if pos >= end:
            return None
        byte = buf[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            return length & 0xFFFFFFFF, pos
    return None


def _frame_starts(buf: Bytes) -> np.ndarray | None:
    """Start of every frame, following the chain of length prefixes; ``None`` if a prefix is cut or over-long.

    Only the last record can run past the end of the buffer; the caller checks that. The C kernel, where
    built, follows the chain itself; otherwise big buffers are walked by many chains at once
    (:func:`_split_frame_starts`).
    """
    if wire.KERNEL is not None:
        starts = wire.KERNEL.frames(buf)
        return None if starts is None else np.frombuffer(starts, dtype=np.int64)
    if len(buf) >= _SPLIT_FRAMING:
        return _split_frame_starts(buf)
    walked = _chain(buf, 0, len(buf))
    return None if walked is None else np.frombuffer(walked[0], dtype=np.int64)


def _chain(buf: Bytes, pos: int, stop: int) -> tuple[array[int], int] | None:
    """Frame starts from ``pos`` (a frame start) while below ``stop``, and the first position at or past it;
    ``None`` if a prefix is cut or over-long."""
    starts = array("q")
    add = starts.append
    try:
        while pos < stop:
            byte = buf[pos]
            add(pos)
            if byte < 0x80:  # most records: shorter than 128 bytes
                pos += byte + 1
            else:
                high = buf[pos + 1]
                if high < 0x80:  # 128 B .. 16 KiB: length (byte - 0x80) + (high << 7), after 2 prefix bytes
                    pos += byte + (high << 7) - 0x7E
                else:
                    decoded = _varint_or_none(buf, pos, len(buf))
                    if decoded is None:
                        return None
                    pos = decoded[1] + decoded[0]
    except IndexError:  # the file ends inside a two-byte length
        return None
    return starts, pos


#: Buffers from this size are framed by many chains walked at once.
_SPLIT_FRAMING = 1 << 20
#: Bytes per chain of :func:`_split_frame_starts`, and how far past a segment's start its first frame is looked for.
_SEGMENT, _GUESS_WINDOW = 1 << 14, 1 << 9
_MIN_WINDOW = 1 << 7


def _split_frame_starts(buf: Bytes) -> np.ndarray | None:
    """:func:`_frame_starts` of a big buffer, the chains of many segments walked in lock-step with numpy.

    The chain of length prefixes is inherently sequential, so each segment's walk starts at a guessed
    frame start (:func:`_guessed_starts`) and goes until it reaches the next segment's guess. A guess
    is confirmed when the walk before it (itself confirmed, from the buffer's start) arrives exactly
    there; a segment whose guess is not confirmed is walked again from where the confirmed walk
    arrived. So the result is exactly the chain from the start, whatever the guesses were.
    """
    size = len(buf)
    if not size:
        return np.zeros(0, dtype=np.int64)
    b = np.frombuffer(buf, dtype=np.uint8)
    begin = np.concatenate([[0], _guessed_starts(buf, b)])
    stop = np.append(begin[1:], size)
    chains = begin.size
    act, p, s = np.arange(chains), begin, stop
    seen_rows: list[np.ndarray] = []
    seen_pos: list[np.ndarray] = []
    end = np.full(chains, -1, dtype=np.int64)  # where each walk arrived (-1: a cut or over-long prefix)
    while act.size:
        seen_rows.append(act)
        seen_pos.append(p)
        head = b[p].astype(np.int64)
        one = head < 0x80
        if one.all():
            after = p + 1 + head
        else:
            second = b[np.minimum(p + 1, size - 1)].astype(np.int64)
            after = np.where(one, p + 1 + head, p + 2 + (head & 0x7F) + (second << 7))
            odd = np.flatnonzero(~one & ((second >= 0x80) | (p + 1 >= size)))
            for i in odd.tolist():  # three-byte and longer prefixes, cut ones: rare, one by one
                decoded = _varint_or_none(buf, int(p[i]), size)
                after[i] = -1 if decoded is None else decoded[1] + decoded[0]
        done = (after >= s) | (after < 0)
        if done.any():
            end[act[done]] = after[done]
            going = ~done
            act, p, s = act[going], after[going], s[going]
        else:
            p = after
    rows = np.concatenate(seen_rows)
    counts = np.bincount(rows, minlength=chains)
    first = np.zeros(chains + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    out = np.empty(rows.size, dtype=np.int64)
    for step, (r, pos) in enumerate(zip(seen_rows, seen_pos)):
        out[first[r] + step] = pos
    if end[0] < 0:
        return None
    confirmed = (end[:-1] == begin[1:]) & (end[1:] >= 0)
    if confirmed.all():  # every walk arrived exactly at the next one's start (the norm)
        return out
    redone: dict[int, np.ndarray] = {}
    k0 = int(np.argmin(confirmed)) + 1  # the first guess not confirmed
    arrived = int(end[k0 - 1])
    for k in range(k0, chains):  # confirm each guess by the confirmed walk before it
        if arrived == int(begin[k]) and end[k] >= 0:
            arrived = int(end[k])
            continue
        walked = _chain(buf, arrived, int(stop[k]))
        if walked is None:
            return None
        redone[k] = np.frombuffer(walked[0], dtype=np.int64)
        arrived = walked[1]
    if not redone:
        return out
    return np.concatenate([redone[k] if k in redone else out[first[k]:first[k + 1]] for k in range(chains)])


def _guessed_starts(buf: Bytes, b: np.ndarray) -> np.ndarray:
    """A likely frame start shortly after the start of each segment (sorted; segments without one are left out).

    A likely start is a one- or two-byte length prefix followed by the byte that begins most of the
    buffer's first records (``08``, the id's tag, in nearly every file), whose frame ends at another such start.
    """
    head = _chain(buf, 0, min(len(buf), _GUESS_WINDOW * 8))
    if head is None or len(head[0]) < 2:
        return np.zeros(0, dtype=np.int64)
    # Segments of about 80 of the first records (a chain walks one record per step), looked into for as far
    # as two of them; at most _SEGMENT and _GUESS_WINDOW.
    mean = (head[0][-1] - head[0][0]) / (len(head[0]) - 1)
    window = min(_GUESS_WINDOW, max(_MIN_WINDOW, 1 << int(2 * mean).bit_length()))
    segment = min(_SEGMENT, 32 * window)
    segments = len(buf) // segment - 1
    if segments < 1:
        return np.zeros(0, dtype=np.int64)
    firsts = [buf[p + (1 if buf[p] < 0x80 else 2)] for p in head[0][1:] if p + 2 < len(buf)]
    mark = max(set(firsts), key=firsts.count)
    view = np.lib.stride_tricks.as_strided(b[segment:], shape=(segments, window + 2), strides=(segment, 1),
                                           writeable=False)
    h0, h1, h2 = view[:, :window], view[:, 1:window + 1], view[:, 2:window + 2]
    short = h0 < 0x80
    likely = (short & (h0 > 0) & (h1 == mark)) | (~short & (h1 < 0x80) & (h2 == mark))
    found = likely.any(axis=1)
    guess = (np.flatnonzero(found) + 1) * segment + likely[found].argmax(axis=1)
    kept: np.ndarray = guess[_starts_there(b, _frame_ends(b, guess), mark)]
    return kept


def _frame_ends(b: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Where a frame with a one- or two-byte prefix at ``pos`` ends (``pos`` is a likely start)."""
    last = b.size - 1
    head = b[pos].astype(np.int64)
    second = b[np.minimum(pos + 1, last)].astype(np.int64)
    ends: np.ndarray = np.where(head < 0x80, pos + 1 + head, pos + 2 + (head & 0x7F) + (second << 7))
    return ends


def _starts_there(b: np.ndarray, pos: np.ndarray, mark: int) -> np.ndarray:
    """Whether a likely frame start is at each ``pos`` (or it is the buffer's end)."""
    last = b.size - 1
    at = np.minimum(pos, last)
    h0, h1, h2 = (b[np.minimum(at + k, last)] for k in range(3))
    short = h0 < 0x80
    there: np.ndarray = (pos == b.size) | ((pos < b.size) & ((short & (h0 > 0) & (h1 == mark)) | (~short & (h1 < 0x80) & (h2 == mark))))
    return there


def _frame_table_exact(buf: Bytes, path: str | os.PathLike[str], allow_empty: bool) -> FrameTable:
    start, offset, length = _scan_frames_exact(buf, path, allow_empty=allow_empty)
    return FrameTable(*(np.asarray(column, dtype=np.int64) for column in (start, offset, length)))


def scan_frames(buf: bytes, path: str | os.PathLike[str], *, allow_empty: bool = False) -> tuple[list[int], list[int], list[int]]:
    """``(frame starts, payload offsets, payload lengths)`` of every record of a whole-file buffer.

    Same checks and messages as :func:`iter_records`. :func:`frame_table` gives the same as numpy
    arrays, without building Python lists.
    """
    table = frame_table(buf, path, allow_empty=allow_empty)
    return table.start.tolist(), table.offset.tolist(), table.length.tolist()


def _scan_frames_exact(buf: Bytes, path: str | os.PathLike[str], *,
                       allow_empty: bool = False) -> tuple[list[int], list[int], list[int]]:
    """The record-by-record scan: every check in file order, so the first fault raises its own error."""
    frame_start: list[int] = []
    offsets: list[int] = []
    lengths: list[int] = []
    add_frame, add_off, add_len = frame_start.append, offsets.append, lengths.append
    pos = 0
    end = len(buf)
    index = 0
    while pos < end:
        start = pos
        byte = buf[pos]
        if byte < 0x80:
            length = byte
            pos += 1
        elif pos + 1 < end and buf[pos + 1] < 0x80:  # two-byte lengths: most records of 128 B .. 16 KiB
            length = (byte & 0x7F) | (buf[pos + 1] << 7)
            pos += 2
        else:
            length, pos = _long_length(buf, pos, end, path, index, start)
        if length == 0 and index > 0 and not allow_empty:
            raise TraceFormatError(path, "zero-length record (an empty node; other readers stop here)",
                                   record=index, offset=start)
        if pos + length > end:
            raise TraceFormatError(path, f"truncated record: needs {length} bytes, only {end - pos} left",
                                   record=index, offset=start)
        add_frame(start)
        add_off(pos)
        add_len(length)
        pos += length
        index += 1
    return frame_start, offsets, lengths


def iter_records(stream: IO[bytes], path: str | os.PathLike[str], *,
                 allow_empty: bool = False) -> Iterator[tuple[int, int, bytes]]:
    """``(record index, byte offset, payload)`` for every length-delimited record of ``stream``.

    Raises :class:`TraceFormatError` on a truncated length or payload, an over-long varint, a
    zero-length record after the first (readers of other tools take it for end of file and silently
    drop the rest; ``allow_empty`` yields it instead, for validation), or a gzip stream that is cut or
    corrupt.
    """
    buf = b""
    pos = 0
    base = 0  # offset of buf[0] in the (decompressed) stream
    index = 0
    eof = False

    def refill(need: int) -> None:
        nonlocal buf, pos, base, eof
        parts = [buf[pos:]]
        have = len(parts[0])
        while have < need and not eof:
            try:
                chunk = stream.read(max(_CHUNK, need - have))
            except (EOFError, OSError, zlib.error, gzip.BadGzipFile) as exc:
                raise TraceFormatError(path, f"corrupt or truncated gzip stream ({exc})",
                                       record=index, offset=base + pos) from None
            if not chunk:
                eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        base += pos
        buf = b"".join(parts)
        pos = 0

    while True:
        if len(buf) - pos < _MAX_VARINT32_BYTES and not eof:
            refill(_MAX_VARINT32_BYTES)
        end = len(buf)
        if pos >= end:
            return
        start = pos
        byte = buf[pos]
        if byte < 0x80:
            length = byte
            pos += 1
        else:
            length, pos = _long_length(buf, pos, end, path, index, base + start)
        if length == 0 and index > 0 and not allow_empty:
            raise TraceFormatError(path, "zero-length record (an empty node; other readers stop here)",
                                   record=index, offset=base + start)
        stop = pos + length
        if stop > len(buf):
            header = pos - start
            pos = start
            refill(header + length)
            pos = header
            stop = header + length
            start = 0
            if stop > len(buf):
                raise TraceFormatError(
                    path, f"truncated record: needs {length} bytes, only {len(buf) - header} left",
                    record=index, offset=base)
        yield index, base + start, buf[pos:stop]
        pos = stop
        index += 1


#: How much of a file whole-file readers check record by record before reading the rest (:func:`check_head`).
HEAD_BYTES = 1 << 14
#: More zero-length records than this in a file's head: not a trace (a zeroed file, a gzip bomb of zeros).
MAX_EMPTY_IN_HEAD = 64


def check_head(head: bytes, path: str | os.PathLike[str], *, allow_empty: bool = False) -> None:
    """Raise what :func:`iter_records` raises for the records in ``head``, the first bytes of a file, so
    that a whole-file reader refuses what the streaming reader refuses before it reads (or decompresses)
    the rest: a zero-length record, an over-long length. With ``allow_empty`` (validation) empty records
    pass unless there are more than :data:`MAX_EMPTY_IN_HEAD`. A record cut at the end of ``head`` passes.
    """
    if _plain_head(head, allow_empty):
        return
    empty = 0
    try:
        for index, offset, payload in iter_records(io.BytesIO(head), path, allow_empty=allow_empty):
            if index and not payload:
                empty += 1
                if empty > MAX_EMPTY_IN_HEAD:
                    raise TraceFormatError(path, f"more than {MAX_EMPTY_IN_HEAD} zero-length records in its first "
                                                 f"{len(head):,} bytes: not a trace (a zeroed file?)",
                                           record=index, offset=offset)
    except TraceFormatError as exc:
        if not exc.detail.startswith("truncated"):
            raise


def _plain_head(head: bytes, allow_empty: bool) -> bool:
    """Whether :func:`check_head` has nothing to raise for ``head``, found without a Python step per record (one
    chain walk, lengths from the prefixes with numpy); ``False`` also where it cannot tell (a prefix of three
    bytes or more, or one cut at the end): the record-by-record check then decides."""
    walked = _chain(head, 0, len(head))
    if walked is None:
        return False
    starts = np.frombuffer(walked[0], dtype=np.int64)
    if starts.size < 2:
        return True
    b = np.frombuffer(head + b"\0", dtype=np.uint8)
    one = b[starts] < 0x80
    if not (one | (b[starts + 1] < 0x80)).all():
        return False
    ends = np.append(starts[1:], walked[1])
    empty = int(np.count_nonzero((ends - starts - 2 + one)[1:] == 0))  # payload length = end - start - prefix
    return empty == 0 or (allow_empty and empty <= MAX_EMPTY_IN_HEAD)


def _parse(cls: type, payload: bytes, path: str | os.PathLike[str], index: int, offset: int):  # type: ignore[no-untyped-def]
    from google.protobuf.message import DecodeError

    from .schema import GlobalMetadata

    msg = cls()
    try:
        msg.ParseFromString(payload)
    except (DecodeError, ValueError, RuntimeError) as exc:
        what = "GlobalMetadata" if cls is GlobalMetadata else "Node"
        raise TraceFormatError(path, f"corrupt {what} message ({exc})", record=index, offset=offset) from None
    return msg


class TraceReader:
    """A streaming reader of one ``.et`` file (plain or gzip).

    ``metadata`` is read on opening; iterating yields ``Node`` messages in file order, one at a time, so
    memory stays constant whatever the file size. :meth:`records` yields the raw node payloads instead
    (the lossless form, used to rewrite a file byte for byte).
    """

    def __init__(self, path: str | os.PathLike[str], *, allow_empty: bool = False) -> None:
        self.path = Path(path)
        try:
            self._stream: IO[bytes] = open_maybe_gzip(self.path)
        except OSError as exc:
            raise TraceFormatError(self.path, f"cannot open ({exc.strerror or exc})") from None
        self._records = iter_records(self._stream, self.path, allow_empty=allow_empty)
        first = next(self._records, None)
        if first is None:
            self.close()
            raise TraceFormatError(self.path, "empty file: no GlobalMetadata record", record=0, offset=0)
        from .schema import GlobalMetadata

        try:
            self.metadata = _parse(GlobalMetadata, first[2], self.path, first[0], first[1])
        except TraceFormatError:
            self.close()
            raise
        self.metadata_record: bytes = first[2]
        self._consumed = False

    def records(self) -> Iterator[bytes]:
        """Raw payload of every node record, in file order (single pass)."""
        return (payload for _, _, payload in self._take())

    def records_with_position(self) -> Iterator[tuple[int, int, bytes]]:
        """``(record index, byte offset, payload)`` of every node record (single pass)."""
        return self._take()

    def _take(self) -> Iterator[tuple[int, int, bytes]]:
        if self._consumed:
            raise RuntimeError(f"{self.path}: a TraceReader can be iterated only once")
        self._consumed = True
        return self._records

    def __iter__(self) -> Iterator[Node]:
        from google.protobuf.message import DecodeError

        from .schema import Node

        path = self.path
        for index, offset, payload in self._take():
            node = Node()
            try:
                node.ParseFromString(payload)
            except (DecodeError, ValueError, RuntimeError) as exc:
                raise TraceFormatError(path, f"corrupt Node message ({exc})", record=index,
                                       offset=offset) from None
            yield node

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_trace(path: str | os.PathLike[str], *, allow_empty: bool = False) -> TraceReader:
    """Open an ``.et`` file (gzip sniffed) for streaming: ``.metadata``, then iterate nodes.

    ``allow_empty`` yields zero-length node records (empty nodes) instead of raising on them.

    >>> with open_trace("job.0.et") as trace:                # doctest: +SKIP
    ...     print(trace.metadata.version)
    ...     for node in trace:
    ...         print(node.id, node.name)
    """
    return TraceReader(path, allow_empty=allow_empty)


_EMPTY_NODE = ("refusing to write an empty node (id 0 and no other field): "
               "readers of other tools take a zero-length record for end of file")
#: Below this many records, repeated deps are looked for record by record (no vectorised walk).
_VECTORISED_MIN_RECORDS = 64


@cache
def _serialises_in_field_order() -> bool:
    """Whether this protobuf runtime writes a Node's fields in ascending number order (all known ones do).

    Checked once (by the first search) on a node with every field set, so the search for repeated deps may
    stop reading a record after its deps (fields 4 and 5) only where that holds.
    """
    from .columnar import field_numbers
    from .schema import Node

    node = Node()
    for field in Node.DESCRIPTOR.fields:
        value = getattr(node, field.name)
        if field.message_type:
            value.add() if hasattr(value, "add") else value.SetInParent()
        elif hasattr(value, "append"):
            value.append(1)
        else:
            setattr(node, field.name, "x" if field.type == field.TYPE_STRING else 1)
    numbers = field_numbers(node.SerializeToString())
    return numbers == sorted(numbers) and len(numbers) == len(Node.DESCRIPTOR.fields)



def _has_repeated_deps(node: Node) -> bool:
    data, ctrl = node.data_deps, node.ctrl_deps
    return (len(data) > 1 and len(set(data)) < len(data)) or (len(ctrl) > 1 and len(set(ctrl)) < len(ctrl))


def _without_duplicate_deps(node: Node) -> Node:
    clean = type(node)()
    clean.CopyFrom(node)
    for field in ("data_deps", "ctrl_deps"):
        unique = list(dict.fromkeys(getattr(node, field)))
        repeated = getattr(clean, field)
        del repeated[:]
        repeated.extend(unique)
    return clean


def _without_repeated_deps(payloads: list[bytes]) -> list[bytes]:
    """``payloads`` (Node records) with every repeated data or ctrl dep dropped, first occurrence kept.

    Reading a dependency list of a protobuf message from Python costs more than serialising the
    whole node, so the lists are checked on the serialised records instead: a batch at once with
    the vectorised walk of :mod:`.columnar`; only the (rare) records with a repeated dep are parsed,
    cleaned and serialised again.
    """
    from .columnar import PAD, rows_with_repeated_deps
    from .schema import Node

    rows: list[int] | None = None
    if len(payloads) >= _VECTORISED_MIN_RECORDS:
        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
        rec_end = np.cumsum(lengths)
        found = rows_with_repeated_deps(b"".join(payloads) + bytes(PAD), rec_end - lengths, rec_end,
                                        fields_in_order=_serialises_in_field_order())
        rows = None if found is None else found.tolist()
    if rows is None:
        rows = [row for row, payload in enumerate(payloads) if _has_repeated_deps(Node.FromString(payload))]
    for row in rows:
        payloads[row] = _without_duplicate_deps(Node.FromString(payloads[row])).SerializeToString()
    return payloads


def _framed(payloads: list[bytes]) -> bytes | memoryview:
    """``payloads`` (Node records) framed into one buffer, each after its length prefix, repeated deps dropped.

    The usual batch (many records, all shorter than 16 KiB) is framed with one join, and the repeated
    deps are looked for in that framed buffer (its spare tail is the padding the walk needs), so the
    records are neither looped over in Python nor joined twice. Any other batch, or one with a
    repeated dep, goes through :func:`_without_repeated_deps`.
    """
    count = len(payloads)
    if count >= _VECTORISED_MIN_RECORDS:
        from .columnar import PAD, rows_with_repeated_deps

        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=count)
        if int(lengths.max()) < _TABLE_VARINTS:
            parts: list[bytes] = [b""] * (2 * count + 1)
            parts[0:-1:2] = map(varint_table().__getitem__, lengths.tolist())
            parts[1::2] = payloads
            parts[-1] = bytes(PAD)
            framed = b"".join(parts)
            rec_end = np.cumsum(lengths + np.where(lengths < 0x80, 1, 2))
            found = rows_with_repeated_deps(framed, rec_end - lengths, rec_end,
                                            fields_in_order=_serialises_in_field_order())
            if found is not None and not found.size:
                return memoryview(framed)[:-PAD]
    return b"".join([part for payload in _without_repeated_deps(payloads) for part in (_prefix(len(payload)), payload)])


class TraceWriter:
    """Writes one ``.et`` file atomically: GlobalMetadata first, then nodes (``.gz`` suffix = gzip).

    Use as a context manager; the file appears under its name only when the block ends without error.
    With ``path`` None nothing is written: the file's (uncompressed) bytes are kept in memory, and
    :meth:`getvalue` returns them once the writer is closed.
    """

    _FLUSH_BYTES = 1 << 20

    def __init__(self, path: str | os.PathLike[str] | None, metadata: GlobalMetadata | bytes | None = None, *,
                 compress: bool | None = None) -> None:
        self._memory = io.BytesIO() if path is None else None
        self.path = Path("<memory>" if path is None else path)
        self._ctx: contextlib.AbstractContextManager[BinaryIO] = (
            contextlib.nullcontext(self._memory) if self._memory is not None else atomic_output(self.path, compress=compress))
        self._out: BinaryIO | None = self._ctx.__enter__()
        self._pending: list[bytes] = []  # length prefixes and records, written out together
        self._pending_bytes = 0
        self._nodes: list[bytes] = []  # payloads of write() not yet checked for repeated deps
        self._nodes_bytes = 0
        self._records_written = 0  # records moved on to the output (those in _nodes come on top)
        # no metadata: an empty GlobalMetadata, whose record is empty (made without protobuf)
        record = b"" if metadata is None else metadata if isinstance(metadata, bytes) else metadata.SerializeToString()
        self._append(record)

    @property
    def nodes_written(self) -> int:
        """Nodes written so far."""
        return self._records_written + len(self._nodes)

    def _append(self, payload: bytes) -> None:
        self._pending.append(_prefix(len(payload)))
        self._pending.append(payload)
        self._pending_bytes += len(payload)
        if self._pending_bytes >= self._FLUSH_BYTES:
            self._flush()

    def _stream(self) -> BinaryIO:
        if self._out is None:
            raise ValueError(f"{self.path}: written after it was closed")
        return self._out

    def _flush(self) -> None:
        self._stream().write(b"".join(self._pending))
        self._pending.clear()
        self._pending_bytes = 0

    def _drain_nodes(self) -> None:
        """Move the payloads of :meth:`write` to the output, repeated deps dropped."""
        nodes, self._nodes, self._nodes_bytes = self._nodes, [], 0
        if nodes:
            self._records_written += len(nodes)
            self._flush()  # keep file order
            self._stream().write(_framed(nodes))

    def write(self, node: Node) -> None:
        """Append ``node`` (duplicate deps dropped, first occurrence kept; an empty node is refused).

        The node is serialised at once (later changes to ``node`` do not matter); repeated deps are
        looked for a batch of records at a time.
        """
        payload = node.SerializeToString()
        if not payload:
            raise ValueError(_EMPTY_NODE)
        self._nodes.append(payload)
        self._nodes_bytes += len(payload)
        if self._nodes_bytes >= self._FLUSH_BYTES:
            self._drain_nodes()

    def write_record(self, payload: bytes) -> None:
        """Append an already-encoded, non-empty Node payload as it is (the lossless path)."""
        if not payload:
            raise ValueError("refusing to write an empty node record")
        if self._nodes:
            self._drain_nodes()  # keep file order
        self._append(payload)
        self._records_written += 1

    def write_framed(self, framed: bytes | bytearray | memoryview, count: int) -> None:
        """Append ``count`` already-encoded, non-empty Node records already framed (each after its varint length, as
        in the file), as they are: the lossless path, a run of records at once (``framed`` is not kept)."""
        if self._nodes:
            self._drain_nodes()  # keep file order
        self._records_written += count
        if len(framed) < self._FLUSH_BYTES >> 4:
            self._pending.append(bytes(framed))
            self._pending_bytes += len(framed)
            if self._pending_bytes >= self._FLUSH_BYTES:
                self._flush()
            return
        if self._pending:
            self._flush()
        self._stream().write(framed)  # (a long run as it is: not copied into a batch)

    def write_records(self, payloads: Iterable[bytes]) -> None:
        for payload in payloads:
            self.write_record(payload)

    def getvalue(self) -> bytes:
        """The bytes of an in-memory writer (``path`` None), once it is closed."""
        if self._memory is None or self._out is not None:
            raise ValueError(f"{self.path}: getvalue() is for a closed in-memory writer")
        return self._memory.getvalue()

    def close(self) -> None:
        """Finish the file and move it into place."""
        if self._out is None:
            return
        self._drain_nodes()
        self._flush()
        self._out = None
        self._ctx.__exit__(None, None, None)

    def abort(self) -> None:
        """Drop everything written so far; the target is left as it was."""
        if self._out is None:
            return
        self._out = None
        try:
            self._ctx.__exit__(RuntimeError, RuntimeError("aborted"), None)
        except RuntimeError:
            pass

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_trace(path: str | os.PathLike[str], metadata: GlobalMetadata | None, nodes: Iterable[Node], *,
                compress: bool | None = None) -> int:
    """Write ``metadata`` and ``nodes`` to ``path`` atomically; returns the number of nodes written."""
    with TraceWriter(path, metadata, compress=compress) as writer:
        for node in nodes:
            writer.write(node)
    return writer.nodes_written
