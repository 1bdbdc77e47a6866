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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .columnar import PAD, _scan, _simple_attributes, _string_table, _STRING_VAL, _ONEOF_WIRE_LUT
from .wire import WireFault

__all__ = ["RecordParts", "record_parts", "joined_spans", "span_table"]

_STRING_LIST = 30


@dataclass
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


def _keep(numbers: tuple[int, ...]):  # noqa: ANN202
    wanted = np.zeros(64, dtype=bool)
    wanted[list(numbers)] = True

    def keep(field: np.ndarray, wire: np.ndarray) -> np.ndarray:
        return (wire == 2) & wanted[np.minimum(field, 63)]
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


def record_parts(buf: bytes, rec_off: np.ndarray, rec_len: np.ndarray, names: Sequence[str] | None = None) -> RecordParts | None:
    """The IOInfo spans and attributes of the records ``buf[rec_off:rec_off+rec_len]`` (None: parse them one by one).

    ``names``: the attribute names the caller wants to tell apart (then :attr:`RecordParts.names` is
    ``names``, and other attributes have -1); None: a table of every name (costlier: one per attribute)."""
    n = int(rec_off.size)
    padded = buf + bytes(PAD)
    b = np.frombuffer(padded, dtype=np.uint8)
    try:
        f = _scan(b, rec_off.astype(np.int64), (rec_off + rec_len).astype(np.int64), _keep((8, 9, 10)), _nothing)
        io_off = np.full((n, 2), -1, dtype=np.int64)
        io_len = np.zeros((n, 2), dtype=np.int64)
        io = np.flatnonzero(f.field != 10)
        if io.size:
            if np.bincount(f.msg[io] * 2 + (f.field[io] - 8), minlength=2 * n).max() > 1:
                raise WireFault("an IOInfo field given twice")  # protobuf merges those: leave it to protobuf
            side = (f.field[io] - 8).astype(np.int64)
            io_off[f.msg[io], side], io_len[f.msg[io], side] = f.offset[io], f.value[io].astype(np.int64)
        text_off = np.full((n, 6), -1, dtype=np.int64)
        text_len = np.zeros((n, 6), dtype=np.int64)
        if io.size:
            start = f.offset[io]
            g = _scan(b, start, start + f.value[io].astype(np.int64), _keep((1, 2, 3)), _nothing)
            rows, slot = f.msg[io][g.msg], side[g.msg] * 3 + g.field - 1
            if rows.size and np.bincount(rows * 6 + slot, minlength=6 * n).max() > 1:
                raise WireFault("an IOInfo text given twice")
            text_off[rows, slot], text_len[rows, slot] = g.offset, g.value.astype(np.int64)
        attrs = np.flatnonzero(f.field == 10)
        a_start = f.offset[attrs]
        a_end = a_start + f.value[attrs].astype(np.int64)
        na = attrs.size
        name_off, name_len = np.zeros(na, dtype=np.int64), np.zeros(na, dtype=np.int64)
        kind, value, v_off = np.zeros(na, dtype=np.int64), np.zeros(na, dtype=np.uint64), np.zeros(na, dtype=np.int64)
        if na:
            rest = np.flatnonzero(~_simple_attributes(b, a_start, a_end, name_off, name_len, kind, value, v_off))
            if rest.size:
                def store(msgs: np.ndarray, field: np.ndarray, wire: np.ndarray, val: np.ndarray, off: np.ndarray) -> None:
                    msgs = rest[msgs]
                    m = (field == 1) & (wire == 2)
                    name_len[msgs[m]], name_off[msgs[m]] = val[m].astype(np.int64), off[m]
                    m = _ONEOF_WIRE_LUT[np.minimum(field, 33)] == wire
                    kind[msgs[m]], value[msgs[m]], v_off[msgs[m]] = field[m], val[m], off[m]

                _scan(b, a_start[rest], a_end[rest], _keep(()), store)
        if names is None:
            attr_name, names = _string_table(padded, b, name_off, name_len)
        else:
            names = list(names)
            attr_name = _named(b, name_off, name_len, names)
        text = kind == _STRING_VAL
        attr_text = np.full(na, -1, dtype=np.int32)
        attr_text[text], strings = _string_table(padded, b, v_off[text], value[text].astype(np.int64))
        lists = np.flatnonzero(kind == _STRING_LIST)
        if lists.size:  # rare: the elements of string lists join the table
            g = _scan(b, v_off[lists], v_off[lists] + value[lists].astype(np.int64), _keep((1,)), _nothing)
            known = set(strings)
            for o, l in zip(g.offset.tolist(), g.value.astype(np.int64).tolist()):
                s = padded[o:o + l].decode("utf-8")
                if s not in known:
                    known.add(s)
                    strings.append(s)
    except (WireFault, UnicodeDecodeError, ValueError, IndexError):
        return None
    return RecordParts(io_off, io_len, text_off, text_len, f.msg[attrs], attr_name, names, a_start, a_end - a_start, kind,
                       attr_text, strings)


def joined_spans(buf: bytes, off: np.ndarray, length: np.ndarray, sep: bytes) -> bytes:
    """The byte spans ``buf[off:off+length]`` (length 0: an empty one) joined by the one-byte ``sep``."""
    n = int(off.size)
    if n == 0:
        return b""
    length = np.where(off >= 0, length, 0).astype(np.int64)
    total = int(length.sum()) + n - 1
    out = np.full(total + 1, sep[0], dtype=np.uint8)
    dst = np.zeros(n, dtype=np.int64)
    np.cumsum(length[:-1] + 1, out=dst[1:])
    size = int(length.sum())
    if size:
        first = np.zeros(n, dtype=np.int64)
        np.cumsum(length[:-1], out=first[1:])
        within = np.arange(size, dtype=np.int64) - np.repeat(first, length)
        src = np.frombuffer(buf, dtype=np.uint8)
        out[np.repeat(dst, length) + within] = src[np.repeat(np.maximum(off, 0), length) + within]
    return out[:total].tobytes()


def span_table(buf: bytes, off: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Index of each span's text in a table of the distinct texts (first seen first); an absent span
    (offset -1) is the empty text."""
    length = np.where(off >= 0, length, 0).astype(np.int64)
    padded = buf + bytes(PAD)
    return _string_table(padded, np.frombuffer(padded, dtype=np.uint8), np.maximum(off, 0), length)
