"""What the trace columns leave in the record bytes, found vectorised: IOInfo messages and every attribute.

:func:`record_parts` walks the node records of a whole-file buffer with the lock-step walk of
:mod:`etkit.format.columnar` and returns, per record, where its ``inputs`` and ``outputs`` IOInfo
messages lie, and per attribute its record, its name (through a table), the oneof member of its value
and where its encoded message lies; string values (``string_val``, and the elements of string lists)
come as a table of distinct strings.
Callers that rewrite every node (anonymisation) read these spans instead of parsing each node.
Anything the walk does not handle returns ``None``: the caller parses record by record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ..records import record
from .attrwire import INT_KIND, MISSING, ONEOF_WIRE_LUT, STRING_VAL, int_values, plain_int, simple_attributes
from .columnar import PAD, WalkSpans, _scan, _string_table
from .wire import WireFault

__all__ = ["RecordParts", "record_parts", "walked_parts", "joined_spans", "span_table"]

_STRING_LIST = 30


@record
class RecordParts:
    io_off: np.ndarray  # (records, 2): where the encoded inputs / outputs IOInfo starts (-1: the node has none)
    io_len: np.ndarray  # (records, 2)
    text_off: np.ndarray  # (records, 6): where inputs.values, .shapes, .types, outputs.values, ... start (-1: unset)
    text_len: np.ndarray  # (records, 6)
    attr_row: np.ndarray  # per attribute, in wire order: its record
    attr_name: np.ndarray  # index into ``names`` (-1: not one of the names asked for)
    names: list[str]
    attr_off: np.ndarray  # the encoded AttributeProto message: where it starts and its length
    attr_len: np.ndarray
    attr_kind: np.ndarray  # oneof field number of its value (0: none)
    attr_text: np.ndarray  # string_val: index into ``strings`` (-1: not a string)
    strings: list[str]  # distinct string values (string_val, and string_list elements)
    attr_value: np.ndarray | None = None  # the value field's varint or fixed bits, or its payload length
    attr_value_off: np.ndarray | None = None  # where the value field's payload starts
    scalars: dict[int, np.ndarray] | None = None  # top-level varint fields asked for: number -> per record (0: unset)
    buf: bytes = b""  # the buffer the offsets point into (padded)

    def int_values(self) -> np.ndarray:
        """Per attribute, its integer value as the trace columns hold it (any integer or bool kind; MISSING for
        other kinds and for uint64 values beyond int64)."""
        out = np.full(self.attr_kind.size, MISSING, dtype=np.int64)
        sel = INT_KIND[np.minimum(self.attr_kind, 33)]
        out[sel] = int_values(self.attr_kind[sel], self.attr_value[sel])  # type: ignore[index]
        return out

    def ints(self, name: str) -> np.ndarray:
        """Per record, the integer value of its attribute ``name`` (one of the names asked for) as the trace
        columns hold it: any integer or bool kind, the last one of a record wins, :data:`MISSING` where none."""
        n = int(self.io_off.shape[0])
        out = np.full(n, MISSING, dtype=np.int64)
        sel = np.flatnonzero((self.attr_name == self.names.index(name)) & INT_KIND[np.minimum(self.attr_kind, 33)])
        if sel.size:
            out[self.attr_row[sel]] = int_values(self.attr_kind[sel], self.attr_value[sel])  # type: ignore[index]
        return out

    def texts(self, name: str) -> tuple[np.ndarray, list[str]]:
        """Per record, its attribute ``name`` as text (a string, or an integer written out, as the trace's
        ``pg_name`` column reads it; the last one of a record wins): an index into the returned table, -1: none."""
        mine = self.attr_name == self.names.index(name)
        text = np.full(mine.size, -1, dtype=np.int64)  # per attribute
        table: list[str] = []
        rows = np.flatnonzero(mine & (self.attr_kind == STRING_VAL))
        if rows.size:
            assert self.attr_value_off is not None and self.attr_value is not None
            text[rows], table = _string_table(self.buf, np.frombuffer(self.buf, dtype=np.uint8), self.attr_value_off[rows],
                                              self.attr_value[rows].astype(np.int64))
        numbers = np.flatnonzero(mine & (self.attr_kind != STRING_VAL) & INT_KIND[np.minimum(self.attr_kind, 33)])
        if numbers.size:  # rare: integer values, written out one by one
            index = {t: i for i, t in enumerate(table)}
            for j in numbers.tolist():
                text[j] = index.setdefault(str(plain_int(int(self.attr_kind[j]), int(self.attr_value[j]))), len(index))  # type: ignore[index]
            table = list(index)
        out = np.full(int(self.io_off.shape[0]), -1, dtype=np.int64)
        valid = np.flatnonzero(text >= 0)  # attributes in wire order: a record's last valid one wins
        out[self.attr_row[valid]] = text[valid]
        return out, table


def _keep(numbers: tuple[int, ...]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    wanted = np.zeros(64, dtype=bool)
    wanted[list(numbers)] = True

    def keep(field: np.ndarray, wire: np.ndarray) -> np.ndarray:
        kept: np.ndarray = (wire == 2) & wanted[np.minimum(field, 63)]
        return kept
    return keep


def _nothing(*_: np.ndarray) -> None:
    return None


def _named(b: np.ndarray, off: np.ndarray, length: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """Index into ``names`` of each name span (-1: none of them), comparing bytes only where lengths agree."""
    out = np.full(off.size, -1, dtype=np.int32)
    for i, name in enumerate(names):
        want = name.encode()
        cand = np.flatnonzero(length == len(want))
        for j, byte in enumerate(want):
            if not cand.size:
                break
            cand = cand[b[off[cand] + j] == byte]
        out[cand] = i
    return out


#: Records walked together: the working arrays of one chunk stay in the CPU caches (as the trace loader's).
_CHUNK = 1 << 14


def record_parts(buf: bytes, rec_off: np.ndarray, rec_len: np.ndarray, names: Sequence[str] | None = None, *,
                 io: bool = True, strings: bool = True, scalars: Sequence[int] = (),
                 named_only: bool = False) -> RecordParts | None:
    """The IOInfo spans and attributes of the records ``buf[rec_off:rec_off+rec_len]`` (None: parse them one by one).

    ``names``: the attribute names the caller wants to tell apart (then :attr:`RecordParts.names` is
    ``names``, and other attributes have -1); None: a table of every name (costlier: one per attribute).
    ``io=False`` leaves the IOInfo spans out (all -1), ``strings=False`` the table of string values (every
    ``attr_text`` -1); ``scalars``: top-level varint fields (``3`` type, ``6`` start, ...) to return per record,
    the last one of a record winning as protobuf reads them. ``named_only``: only the attributes whose bytes
    hold one of ``names`` (of 4 bytes or more) are listed: the others cannot be one of them, and are not decoded.

    The records are walked in chunks of ``_CHUNK``. The walk checks the wire format but is not a proof that
    protobuf accepts the records (the trace loader's is): callers read what protobuf would read from
    records that a loader accepts."""
    n = int(rec_off.size)
    padded = buf + bytes(PAD)
    b = np.frombuffer(padded, dtype=np.uint8)
    rec_off = rec_off.astype(np.int64)
    rec_end = rec_off + rec_len.astype(np.int64)
    io_off = np.full((n, 2), -1, dtype=np.int64)
    io_len = np.zeros((n, 2), dtype=np.int64)
    text_off = np.full((n, 6), -1, dtype=np.int64)
    text_len = np.zeros((n, 6), dtype=np.int64)
    top = {number: np.zeros(n, dtype=np.uint64) for number in scalars}
    wanted = [name.encode() for name in names or ()]
    found = _occurrences(buf, b, wanted) if named_only and wanted and min(map(len, wanted)) >= 4 else None
    chunks = []
    try:
        for lo in range(0, n, _CHUNK):
            hi = min(lo + _CHUNK, n)
            chunks.append(_walk(b, rec_off[lo:hi], rec_end[lo:hi], io, io_off[lo:hi], io_len[lo:hi], text_off[lo:hi],
                                text_len[lo:hi], {k: v[lo:hi] for k, v in top.items()}, lo, found))
        joined = [np.concatenate(column) for column in zip(*chunks)] if chunks else [np.zeros(0, dtype=np.int64)] * 8
        attr_row, a_start, a_end, name_off, name_len, kind, value, v_off = joined
        return _parts(padded, b, io_off, io_len, text_off, text_len, attr_row, a_start, a_end, name_off, name_len, kind,
                      value, v_off, names, strings, top)
    except (WireFault, UnicodeDecodeError, ValueError, IndexError):
        return None


def walked_parts(buf: bytes, n: int, spans: Sequence[WalkSpans | None], names: Sequence[str] | None = None, *,
                 rows: np.ndarray | None = None, io: bool = True, strings: bool = True,
                 ordered: bool = True) -> RecordParts | None:
    """What :func:`record_parts` gives for the ``n`` records of a trace (``rows``: for those records only, as
    ``record_parts(buf, rec_off[rows], rec_len[rows], names, io=io, strings=strings)``), from what the trace
    loader's walk found (:func:`etkit.model.trace.load_trace`'s ``spans``) instead of a walk of its own; None
    where the loader's walk did not take every record (then call :func:`record_parts`). ``rows`` ascending.
    ``ordered=False`` (with ``names`` given) leaves the attributes in the loader's walk order: each record's in
    wire order, the records' interleaved otherwise, so the table of string values is in another order (the
    same strings); not sorted into record_parts' order, a few percent cheaper."""
    if not spans or any(s is None for s in spans):
        return None
    chunks = [s for s in spans if s is not None]
    local = None
    if rows is not None:
        local = np.full(n, -1, dtype=np.int64)
        local[rows] = np.arange(rows.size)
        n = int(rows.size)
    padded = buf + bytes(PAD)
    b = np.frombuffer(padded, dtype=np.uint8)
    io_off = np.full((n, 2), -1, dtype=np.int64)
    io_len = np.zeros((n, 2), dtype=np.int64)
    text_off = np.full((n, 6), -1, dtype=np.int64)
    text_len = np.zeros((n, 6), dtype=np.int64)

    def cat(columns: Iterable[Sequence[np.ndarray]]) -> list[np.ndarray]:  # per chunk, its arrays
        return [np.concatenate(c) for c in zip(*columns)]

    try:
        for side in (0, 1) if io else ():
            io_rows, off, length = cat(s.io[side] for s in chunks)
            base = np.cumsum([0] + [s.io[side][0].size for s in chunks[:-1]]).tolist()
            msg, tag, t_off, t_len = cat((t[0] + k, *t[1:]) for t, k in zip((s.io_texts[side] for s in chunks), base))
            t_rows = io_rows[msg]
            if local is not None:
                io_rows, t_rows = local[io_rows], local[t_rows]
                mine, t_mine = io_rows >= 0, t_rows >= 0
                io_rows, off, length = io_rows[mine], off[mine], length[mine]
                t_rows, tag, t_off, t_len = t_rows[t_mine], tag[t_mine], t_off[t_mine], t_len[t_mine]
            if io_rows.size and np.bincount(io_rows, minlength=n).max() > 1:
                raise WireFault("an IOInfo field given twice")  # as record_parts: protobuf merges those
            io_off[io_rows, side], io_len[io_rows, side] = off, length
            slot = side * 3 + (tag >> 3) - 1
            if t_rows.size and np.bincount(t_rows * 6 + slot, minlength=6 * n).max() > 1:
                raise WireFault("an IOInfo text given twice")
            text_off[t_rows, slot], text_len[t_rows, slot] = t_off, t_len
        per_chunk = []
        for s in chunks:
            if s.attrs is None:
                continue
            a = s.attrs
            columns = [s.attr_row, s.attr_off, s.attr_len, a.name_len, a.kind, a.value, a.v_off, s.attr_step]
            if local is not None:
                mine = np.flatnonzero(local[s.attr_row] >= 0)
                columns = [c[mine] for c in columns]
                columns[0] = local[columns[0]]
            per_chunk.append(columns)
        if per_chunk:
            attr_row, a_start, a_len, name_len, kind, value, v_off, step = cat(per_chunk)
        else:
            attr_row = a_start = a_len = name_len = kind = v_off = step = np.zeros(0, dtype=np.int64)
            value = np.zeros(0, dtype=np.uint64)
        v_off = np.where(kind == 0, 0, v_off)  # a name alone has no value (record_parts leaves 0)
        # record_parts' order: chunks of _CHUNK records, each field position (step) of them, then by row (as one
        # int64 key: a record's steps differ, so the keys do too, and one key sorts much faster than three)
        width = int(step.max(initial=0)) + 1
        row = attr_row.astype(np.int64)
        order = np.argsort(((row // _CHUNK) * width + step) * _CHUNK + row % _CHUNK, kind="stable") \
            if ordered or names is None else np.arange(row.size)
        if (np.diff(order) != 1).any():
            attr_row, a_start, a_len, name_len, kind, value, v_off = (
                c[order] for c in (attr_row, a_start, a_len, name_len, kind, value, v_off))
        return _parts(padded, b, io_off, io_len, text_off, text_len, attr_row, a_start, a_start + a_len, a_start + 2,
                      name_len, kind, value, v_off, names, strings, {})
    except (WireFault, UnicodeDecodeError, ValueError, IndexError):
        return None


def _parts(padded: bytes, b: np.ndarray, io_off: np.ndarray, io_len: np.ndarray, text_off: np.ndarray,
           text_len: np.ndarray, attr_row: np.ndarray, a_start: np.ndarray, a_end: np.ndarray, name_off: np.ndarray,
           name_len: np.ndarray, kind: np.ndarray, value: np.ndarray, v_off: np.ndarray, names: Sequence[str] | None,
           strings: bool, top: dict[int, np.ndarray]) -> RecordParts:
    """The :class:`RecordParts` of the spans a walk found: the names and string tables (raises WireFault,
    UnicodeDecodeError where a walk's result cannot be read)."""
    value = value.astype(np.uint64)
    na = a_start.size
    if names is None:
        attr_name, names = _string_table(padded, b, name_off, name_len)
    else:
        names = list(names)
        attr_name = _named(b, name_off, name_len, names)
    attr_text = np.full(na, -1, dtype=np.int32)
    table: list[str] = []
    text = kind == STRING_VAL
    if strings:
        attr_text[text], table = _string_table(padded, b, v_off[text], value[text].astype(np.int64))
    lists = np.flatnonzero(kind == _STRING_LIST) if strings else np.zeros(0, dtype=np.int64)
    if lists.size:  # rare: the elements of string lists join the table
        g = _scan(b, v_off[lists], v_off[lists] + value[lists].astype(np.int64), _keep((1,)), _nothing)
        known = set(table)
        for o, l in zip(g.offset.tolist(), g.value.astype(np.int64).tolist()):
            s = padded[o:o + l].decode("utf-8")
            if s not in known:
                known.add(s)
                table.append(s)
    return RecordParts(io_off, io_len, text_off, text_len, attr_row, attr_name, names, a_start, a_end - a_start, kind,
                       attr_text, table, value, v_off, top, padded)


def _occurrences(buf: bytes, b: np.ndarray, words: Sequence[bytes]) -> np.ndarray:
    """Where each of ``words`` (4 bytes or more) occurs in ``buf`` (``b``: the padded buffer as bytes), in order.
    A word that occurs a few times is found by ``bytes.find``; one that occurs often by its first four bytes,
    looked for as little-endian words in the four views of the buffer (offsets 0, 4, ..., then 1, 5, ...),
    and the rest of its bytes compared at those hits."""
    n = len(buf)
    at = []
    for word in words:
        if buf.count(word) <= _FEW:
            hits, i = [], buf.find(word)
            while i >= 0:
                hits.append(i)
                i = buf.find(word, i + 1)
            at.append(np.asarray(hits, dtype=np.int64))
            continue
        head = np.frombuffer(word[:4], dtype="<u4")[0]
        for k in range(4):
            found = np.flatnonzero(b[k:k + (n - k) // 4 * 4].view("<u4") == head) * 4 + k
            found = found[found + len(word) <= n]
            for j in range(4, len(word)):
                found = found[b[found + j] == word[j]]
            at.append(found)
    return np.sort(np.concatenate(at)) if at else np.zeros(0, dtype=np.int64)


#: :func:`_occurrences` finds a word that occurs at most this often with ``bytes.find``.
_FEW = 1 << 14


def _walk(b: np.ndarray, rec_off: np.ndarray, rec_end: np.ndarray, io: bool, io_off: np.ndarray, io_len: np.ndarray,
          text_off: np.ndarray, text_len: np.ndarray, top: dict[int, np.ndarray], base: int,
          found: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """One chunk of :func:`record_parts`: fills the chunk's rows of the per-record arrays and returns its
    attributes (record, start, end, name span, value kind, value, value offset); ``found``: where the names
    asked for occur (:func:`_occurrences`), then only the attributes holding one of them."""
    n = int(rec_off.size)
    wanted = np.zeros(64, dtype=bool)
    wanted[list(top)] = True

    def store_scalars(msgs: np.ndarray, field: np.ndarray, wire: np.ndarray, val: np.ndarray, off: np.ndarray) -> None:
        m = (wire == 0) & wanted[np.minimum(field, 63)]
        if m.any():
            for number, column in top.items():
                mine = m & (field == number)
                column[msgs[mine]] = val[mine]

    f = _scan(b, rec_off, rec_end, _keep((8, 9, 10) if io else (10,)), store_scalars if top else _nothing)
    spans = np.flatnonzero(f.field != 10)
    if spans.size:
        if np.bincount(f.msg[spans] * 2 + (f.field[spans] - 8), minlength=2 * n).max() > 1:
            raise WireFault("an IOInfo field given twice")  # protobuf merges those: leave it to protobuf
        side = (f.field[spans] - 8).astype(np.int64)
        io_off[f.msg[spans], side], io_len[f.msg[spans], side] = f.offset[spans], f.value[spans].astype(np.int64)
        start = f.offset[spans]
        g = _scan(b, start, start + f.value[spans].astype(np.int64), _keep((1, 2, 3)), _nothing)
        rows, slot = f.msg[spans][g.msg], side[g.msg] * 3 + g.field - 1
        if rows.size and np.bincount(rows * 6 + slot, minlength=6 * n).max() > 1:
            raise WireFault("an IOInfo text given twice")
        text_off[rows, slot], text_len[rows, slot] = g.offset, g.value.astype(np.int64)
    attrs = np.flatnonzero(f.field == 10)
    if found is not None:  # an attribute named one of the names holds it: so does the first occurrence past its start
        start, end = f.offset[attrs], f.offset[attrs] + f.value[attrs].astype(np.int64)
        first = found[np.minimum(np.searchsorted(found, start), found.size - 1)] if found.size else start - 1
        attrs = attrs[(first >= start) & (first + 4 <= end)]
    a_start = f.offset[attrs]
    a_end = a_start + f.value[attrs].astype(np.int64)
    na = attrs.size
    name_off, name_len = np.zeros(na, dtype=np.int64), np.zeros(na, dtype=np.int64)
    kind, value, v_off = np.zeros(na, dtype=np.int64), np.zeros(na, dtype=np.uint64), np.zeros(na, dtype=np.int64)
    if na:
        rest = np.flatnonzero(~simple_attributes(b, a_start, a_end, name_off, name_len, kind, value, v_off)[0])
        if rest.size:
            def store(msgs: np.ndarray, field: np.ndarray, wire: np.ndarray, val: np.ndarray, off: np.ndarray) -> None:
                msgs = rest[msgs]
                m = (field == 1) & (wire == 2)
                name_len[msgs[m]], name_off[msgs[m]] = val[m].astype(np.int64), off[m]
                m = ONEOF_WIRE_LUT[np.minimum(field, 33)] == wire
                kind[msgs[m]], value[msgs[m]], v_off[msgs[m]] = field[m], val[m], off[m]

            _scan(b, a_start[rest], a_end[rest], _keep(()), store)
    return f.msg[attrs] + base, a_start, a_end, name_off, name_len, kind, value, v_off


def joined_spans(buf: bytes, off: np.ndarray, length: np.ndarray, sep: bytes) -> bytes:
    """The byte spans ``buf[off:off+length]`` (offset -1: an empty one) joined by the one-byte ``sep``.

    One slice per span joined by ``bytes.join``: a memory copy each, a few times cheaper than gathering
    the bytes through index arrays (the slices live only for the join)."""
    if off.size == 0:
        return b""
    length = np.where(off >= 0, length, 0)
    start = np.maximum(off, 0)
    return sep.join([buf[o:e] for o, e in zip(start.tolist(), (start + length).tolist())])


def span_table(buf: bytes, off: np.ndarray, length: np.ndarray, *, padded: bool = False) -> tuple[np.ndarray, list[str]]:
    """Index of each span's text in a table of the distinct texts (first seen first); an absent span
    (offset -1) is the empty text. ``padded``: ``buf`` already ends in the walk's padding (as
    :attr:`RecordParts.buf` does), so it is not copied to add it."""
    length = np.where(off >= 0, length, 0).astype(np.int64)
    if not padded:
        buf = buf + bytes(PAD)
    return _string_table(buf, np.frombuffer(buf, dtype=np.uint8), np.maximum(off, 0), length)
